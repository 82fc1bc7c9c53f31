// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* xtcp path impairment for tests: a tc (TCX) program for the kernel peer's
 * side of a test network that drops and duplicates TCP packets at random,
 * at rates set by userspace, and counts what it did. The kernel here has no
 * netem, so loss for tests is made here.
 *
 * Attach it to the peer's ingress to impair xtcp -> peer, and to its egress
 * for peer -> xtcp (AF_XDP copy-mode TX bypasses the sender's tc egress).
 * Only TCP is touched (optionally one port), so ARP and ND keep working.
 * A duplicate is a clone redirected to the same hook; it carries a mark so
 * that it is not impaired again.
 *
 * Decisions are per packet as the hook sees it. On egress the local stack
 * hands over GSO packets (several TCP segments, split after this hook), so
 * there loss and duplication come in bursts of up to gso_segs segments; the
 * counters count segments. For per-segment decisions on egress, set the
 * device's gso_max_segs to 1. */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define XTCP_DUP_MARK 0x78746370 /* "xtcp" */
#define PPM 1000000

struct impair_config {
	__u32 drop_ppm;   /* parts per million dropped */
	__u32 dup_ppm;    /* parts per million duplicated */
	__u32 port;       /* 0: any TCP; else TCP with this source or dest port */
	__u32 ingress;    /* 1 if attached to ingress (duplicates go there) */
};

enum { CNT_SEEN, CNT_DROPPED, CNT_DUPLICATED, CNT_MAX };

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct impair_config);
} impair_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} impair_counters SEC(".maps");

static __always_inline void bump(__u32 which, __u32 n)
{
	__u64 *c = bpf_map_lookup_elem(&impair_counters, &which);
	if (c)
		*c += n;
}

/* 1 if the packet is TCP (IPv4 or IPv6 without extension headers) and its
 * ports match `port` (0 = any). */
static __always_inline int is_target(struct __sk_buff *skb, __u32 port)
{
	__u16 proto;
	__u8 l4;
	__u32 l4_off;
	__u8 vihl;

	if (bpf_skb_load_bytes(skb, 12, &proto, 2))
		return 0;
	if (proto == bpf_htons(ETH_P_IP)) {
		if (bpf_skb_load_bytes(skb, 14, &vihl, 1) ||
		    bpf_skb_load_bytes(skb, 14 + 9, &l4, 1))
			return 0;
		l4_off = 14 + (vihl & 0xf) * 4;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		if (bpf_skb_load_bytes(skb, 14 + 6, &l4, 1))
			return 0;
		l4_off = 14 + 40;
	} else {
		return 0;
	}
	if (l4 != IPPROTO_TCP)
		return 0;
	if (port == 0)
		return 1;
	__u16 ports[2];
	if (bpf_skb_load_bytes(skb, l4_off, ports, 4))
		return 0;
	return bpf_ntohs(ports[0]) == port || bpf_ntohs(ports[1]) == port;
}

SEC("classifier")
int xtcp_impair(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct impair_config *cfg = bpf_map_lookup_elem(&impair_cfg, &zero);

	if (!cfg || skb->mark == XTCP_DUP_MARK)
		return TC_ACT_OK;
	if (!is_target(skb, cfg->port))
		return TC_ACT_OK;
	/* A GSO packet from the local stack carries several segments (it is
	 * split after this hook): count segments, and know that it is dropped
	 * or duplicated whole. */
	__u32 segs = skb->gso_segs ? skb->gso_segs : 1;
	bump(CNT_SEEN, segs);
	if (cfg->drop_ppm && bpf_get_prandom_u32() % PPM < cfg->drop_ppm) {
		bump(CNT_DROPPED, segs);
		return TC_ACT_SHOT;
	}
	if (cfg->dup_ppm && bpf_get_prandom_u32() % PPM < cfg->dup_ppm) {
		__u32 old = skb->mark;
		skb->mark = XTCP_DUP_MARK;
		if (bpf_clone_redirect(skb, skb->ifindex,
				       cfg->ingress ? BPF_F_INGRESS : 0) == 0)
			bump(CNT_DUPLICATED, segs);
		skb->mark = old;
	}
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
