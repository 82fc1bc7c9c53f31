// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* xtcp path impairment for tests: a tc (TCX) program for the kernel peer's
 * side of a test network that drops and duplicates TCP packets at random,
 * at rates set by userspace, and counts what it did. The kernel here has no
 * netem, so loss for tests is made here.
 *
 * Attach it to the peer's ingress to impair xtcp -> peer, and to its egress
 * for peer -> xtcp (AF_XDP copy-mode TX bypasses the sender's tc egress).
 * Only TCP is touched (optionally one port), so ARP and ND keep working.
 *
 * On ingress it can also reorder: a share of the packets is sent the long
 * way round (a detour), out of another interface of the same host whose
 * peer delivers them back (a veth pair with a rate-limiting qdisc on the
 * way out: there they wait, and arrive after packets that came later).
 * Their destination MAC is rewritten to the detour's far end so that the
 * stack takes them there.
 * A duplicate is a clone redirected to the same hook; it carries a mark so
 * that it is not impaired again.
 *
 * Besides the random drops, one chosen packet can be dropped for sure: the
 * Nth TCP packet without SYN that the hook sees after userspace set the
 * rates (it resets the count), so that a test of loss recovery always has a
 * loss to recover from, however the dice fall.
 *
 * Decisions are per packet as the hook sees it. On egress the local stack
 * hands over GSO packets (several TCP segments, split after this hook), so
 * there loss and duplication come in bursts of up to gso_segs segments; the
 * counters count segments. For per-segment decisions on egress, set the
 * device's gso_max_segs to 1.
 *
 * It also counts, as an account of retransmissions kept apart from the
 * sender's own, the segments that start below the highest sequence number
 * a flow (its two ports) has reached at the hook so far, SYN and FIN
 * included: a retransmission, or a piece of one. Every segment is seen
 * before it may be dropped, so a lost original still raises the mark.
 * This assumes one flow's packets reach the hook in order (one sender
 * thread through a veth pair: its packets are received on the sender's
 * CPU, one after the other). */
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
	__u32 detour_ppm; /* parts per million sent by the detour (ingress) */
	__u32 detour_ifindex; /* egress of the detour; 0: none */
	__u8 detour_mac[6];   /* the MAC of its far end */
	__u8 pad[2];
	__u32 drop_nth;   /* the Nth packet without SYN is dropped; 0: none */
};

enum {
	CNT_SEEN,
	CNT_DROPPED,
	CNT_DUPLICATED,
	CNT_REPEATED,       /* segments below the flow's highest sequence */
	CNT_REPEATED_BYTES, /* their payload bytes */
	CNT_DETOURED,
	CNT_MAX
};

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

/* How many TCP packets without SYN the hook has seen since userspace last
 * set the rates (while drop_nth is set): one count for all CPUs. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} impair_ordinal SEC(".maps");

/* Per flow (source port << 16 | destination port): the highest sequence
 * number reached (the end of the furthest segment seen). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u32);
} impair_flows SEC(".maps");

static __always_inline void bump(__u32 which, __u32 n)
{
	__u64 *c = bpf_map_lookup_elem(&impair_counters, &which);
	if (c)
		*c += n;
}

/* A TCP packet's place: where its header starts, and the length of what
 * follows the IP header (TCP header and payload). */
struct tcp_at {
	__u32 l4_off;
	__u32 l4_len;
};

/* 1 if the packet is TCP (IPv4 or IPv6 without extension headers) and its
 * ports match `port` (0 = any); fills `at`. */
static __always_inline int is_target(struct __sk_buff *skb, __u32 port,
				     struct tcp_at *at)
{
	__u16 proto;
	__u8 l4;
	__u8 vihl;
	__u16 len;

	if (bpf_skb_load_bytes(skb, 12, &proto, 2))
		return 0;
	if (proto == bpf_htons(ETH_P_IP)) {
		if (bpf_skb_load_bytes(skb, 14, &vihl, 1) ||
		    bpf_skb_load_bytes(skb, 14 + 2, &len, 2) ||
		    bpf_skb_load_bytes(skb, 14 + 9, &l4, 1))
			return 0;
		at->l4_off = 14 + (vihl & 0xf) * 4;
		at->l4_len = bpf_ntohs(len) - (vihl & 0xf) * 4;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		if (bpf_skb_load_bytes(skb, 14 + 4, &len, 2) ||
		    bpf_skb_load_bytes(skb, 14 + 6, &l4, 1))
			return 0;
		at->l4_off = 14 + 40;
		at->l4_len = bpf_ntohs(len);
	} else {
		return 0;
	}
	if (l4 != IPPROTO_TCP)
		return 0;
	if (port == 0)
		return 1;
	__u16 ports[2];
	if (bpf_skb_load_bytes(skb, at->l4_off, ports, 4))
		return 0;
	return bpf_ntohs(ports[0]) == port || bpf_ntohs(ports[1]) == port;
}

/* Counts the segment if it starts below its flow's highest sequence
 * number so far, and raises that mark to its end. */
static __always_inline void note_repeat(struct __sk_buff *skb,
					const struct tcp_at *at, __u32 segs)
{
	__u8 hdr[14];

	if (bpf_skb_load_bytes(skb, at->l4_off, hdr, sizeof(hdr)))
		return;
	__u32 flow = (__u32)hdr[0] << 24 | (__u32)hdr[1] << 16 |
		     (__u32)hdr[2] << 8 | hdr[3];
	__u32 seq = (__u32)hdr[4] << 24 | (__u32)hdr[5] << 16 |
		    (__u32)hdr[6] << 8 | hdr[7];
	__u32 doff = (hdr[12] >> 4) * 4;
	__u8 flags = hdr[13];
	if (at->l4_len < doff)
		return;
	__u32 payload = at->l4_len - doff;
	/* SYN (0x02) and FIN (0x01) take a sequence number each. */
	__u32 end = seq + payload + (flags & 0x02 ? 1 : 0) + (flags & 0x01);
	__u32 *highest = bpf_map_lookup_elem(&impair_flows, &flow);
	if (!highest) {
		bpf_map_update_elem(&impair_flows, &flow, &end, BPF_ANY);
		return;
	}
	if ((__s32)(seq - *highest) < 0 && end != seq) {
		bump(CNT_REPEATED, segs);
		bump(CNT_REPEATED_BYTES, payload);
	}
	if ((__s32)(end - *highest) > 0)
		*highest = end;
}

/* Counts the packet if it has no SYN, and says whether it is the Nth. */
static __always_inline int is_nth(struct __sk_buff *skb,
				  const struct tcp_at *at, __u32 nth)
{
	__u32 zero = 0;
	__u8 flags;

	if (!nth || bpf_skb_load_bytes(skb, at->l4_off + 13, &flags, 1) ||
	    (flags & 0x02))
		return 0;
	__u64 *n = bpf_map_lookup_elem(&impair_ordinal, &zero);
	return n && __sync_fetch_and_add(n, 1) + 1 == nth;
}

SEC("classifier")
int xtcp_impair(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct impair_config *cfg = bpf_map_lookup_elem(&impair_cfg, &zero);

	if (!cfg || skb->mark == XTCP_DUP_MARK)
		return TC_ACT_OK;
	struct tcp_at at;
	if (!is_target(skb, cfg->port, &at))
		return TC_ACT_OK;
	/* A GSO packet from the local stack carries several segments (it is
	 * split after this hook): count segments, and know that it is dropped
	 * or duplicated whole. */
	__u32 segs = skb->gso_segs ? skb->gso_segs : 1;
	bump(CNT_SEEN, segs);
	note_repeat(skb, &at, segs);
	int nth = is_nth(skb, &at, cfg->drop_nth);
	if (nth ||
	    (cfg->drop_ppm && bpf_get_prandom_u32() % PPM < cfg->drop_ppm)) {
		bump(CNT_DROPPED, segs);
		if (cfg->ingress)
			return TC_ACT_SHOT;
		/* On egress a shot packet is an error the local stack sees
		 * (NET_XMIT_DROP): TCP keeps the segment and sends it again
		 * in order, as after local congestion, and the peer never
		 * sees a gap (TCX treats TC_ACT_STOLEN as "next", a pass).
		 * Redirected to ifindex 0, which no device has, it is freed
		 * and the stack is told it went, as on a wire: TCP must
		 * recover it as a loss. */
		return bpf_redirect(0, 0);
	}
	if (cfg->ingress && cfg->detour_ifindex && cfg->detour_ppm &&
	    bpf_get_prandom_u32() % PPM < cfg->detour_ppm &&
	    bpf_skb_store_bytes(skb, 0, cfg->detour_mac, 6, 0) == 0) {
		bump(CNT_DETOURED, segs);
		return bpf_redirect(cfg->detour_ifindex, 0);
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
