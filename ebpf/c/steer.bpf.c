// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* xtcp steering program.
 *
 * Parses untagged Ethernet, IPv4 (options skipped) and IPv6 (hop-by-hop,
 * routing and destination-options headers skipped) and TCP. A VLAN-tagged
 * frame (802.1Q, 802.1ad) is passed: xtcp answers untagged, on the
 * interface's own network, so a tagged flow is the kernel's (its VLAN
 * device's). A TCP packet whose local address and port match a rule of the active
 * rule set is redirected to the AF_XDP socket registered for its RX queue;
 * if there is none, it goes to the kernel and is counted as no-socket.
 * So does an ICMP "fragmentation needed" (IPv4) or "packet too big" (IPv6)
 * whose quoted TCP segment left from a matching address and port: it is
 * about a flow of xtcp's, whose TCP takes the path's MTU from it (the
 * kernel, with no socket for the flow, would drop it). The quoted IPv6
 * header is read without extension headers (xtcp sends none).
 * Everything else (ARP, other ICMP, UDP, other ports, IP fragments) is
 * passed.
 * Malformed packets are counted and passed: the kernel drops them itself.
 *
 * Built with SEC("xdp.frags"): with multi-buffer the headers are in the first
 * buffer, which is all this program reads. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "steer.h"

#ifndef ETH_P_8021AD
#define ETH_P_8021AD 0x88A8
#endif

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, XTCP_MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct xtcp_ruleset);
} rules SEC(".maps");

/* config[XTCP_CFG_ACTIVE] = index of the active slot in `rules`;
 * config[XTCP_CFG_NO_SOCKET_DROP] = 1: a matching packet whose queue has no
 * socket is dropped (counted) instead of passed to the kernel, which would
 * answer an xtcp-owned flow with a RST. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XTCP_CFG_MAX);
	__type(key, __u32);
	__type(value, __u32);
} config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, XTCP_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline int count(__u32 which, int action)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &which);
	if (c)
		*c += 1;
	return action;
}

static __always_inline int addr_eq(const __u8 *a, const __u8 *b, int len)
{
	for (int i = 0; i < len; i++)
		if (a[i] != b[i])
			return 0;
	return 1;
}

/* 1 if a rule of the active set matches (family, local address, local port). */
static __always_inline int match(__u8 family, const __u8 *addr, __u16 port)
{
	__u32 key = XTCP_CFG_ACTIVE;
	__u32 *active = bpf_map_lookup_elem(&config, &key);
	if (!active)
		return 0;
	__u32 slot = *active & 1;
	struct xtcp_ruleset *set = bpf_map_lookup_elem(&rules, &slot);
	if (!set)
		return 0;
	__u32 n = set->count;
	for (__u32 i = 0; i < XTCP_MAX_RULES; i++) {
		if (i >= n)
			break;
		struct xtcp_rule *r = &set->rules[i];
		if (port < r->port_lo || port > r->port_hi)
			continue;
		if (r->family != XTCP_FAMILY_ANY && r->family != family)
			continue;
		if (r->addr_any)
			return 1;
		if (r->family == XTCP_FAMILY_ANY)
			continue; /* an address without a family never matches */
		if (family == XTCP_FAMILY_V4 ? addr_eq(r->addr, addr, 4)
					     : addr_eq(r->addr, addr, 16))
			return 1;
	}
	return 0;
}

/* To the queue's socket if (family, addr, port) is xtcp's. */
static __always_inline int to_xsk(struct xdp_md *ctx, __u8 family,
				  const __u8 *addr, __u16 port)
{
	if (!match(family, addr, port))
		return count(XTCP_CNT_PASSED, XDP_PASS);
	int ret = bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
	if (ret == XDP_REDIRECT)
		return count(XTCP_CNT_STEERED, ret);
	__u32 key = XTCP_CFG_NO_SOCKET_DROP;
	__u32 *drop = bpf_map_lookup_elem(&config, &key);
	return count(XTCP_CNT_NO_SOCKET, drop && *drop ? XDP_DROP : XDP_PASS);
}

static __always_inline int steer(struct xdp_md *ctx, __u8 family,
				 const __u8 *addr, struct tcphdr *th,
				 void *data_end)
{
	if ((void *)(th + 1) > data_end)
		return count(XTCP_CNT_MALFORMED, XDP_PASS);
	if (th->doff < 5 || (void *)th + th->doff * 4 > data_end)
		return count(XTCP_CNT_MALFORMED, XDP_PASS);
	return to_xsk(ctx, family, addr, bpf_ntohs(th->dest));
}

/* The quoted TCP header's source port (the quoted segment was ours). */
static __always_inline __u16 quoted_sport(const __u8 *tcp)
{
	return ((__u16)tcp[0] << 8) | tcp[1];
}

/* ICMP type 3 code 4 (RFC 792, RFC 1191) at l4: the quoted IPv4 header
 * and the quoted TCP header's first 8 bytes (ports, sequence number). */
static __always_inline int steer_icmp4(struct xdp_md *ctx, __u8 *icmp,
				       void *data_end)
{
	if ((void *)(icmp + 8) > data_end)
		return count(XTCP_CNT_MALFORMED, XDP_PASS);
	if (icmp[0] != 3 || icmp[1] != 4)
		return count(XTCP_CNT_PASSED, XDP_PASS);
	struct iphdr *in = (void *)(icmp + 8);
	if ((void *)(in + 1) > data_end)
		return count(XTCP_CNT_PASSED, XDP_PASS);
	if (in->version != 4 || in->ihl < 5 || in->protocol != IPPROTO_TCP)
		return count(XTCP_CNT_PASSED, XDP_PASS);
	__u8 *tcp = (__u8 *)in + in->ihl * 4;
	if ((void *)(tcp + 8) > data_end)
		return count(XTCP_CNT_PASSED, XDP_PASS);
	return to_xsk(ctx, XTCP_FAMILY_V4, (const __u8 *)&in->saddr,
		      quoted_sport(tcp));
}

/* ICMPv6 type 2 (RFC 4443 §3.2, RFC 8201) at l4, likewise. */
static __always_inline int steer_icmp6(struct xdp_md *ctx, __u8 *icmp,
				       void *data_end)
{
	if ((void *)(icmp + 8) > data_end)
		return count(XTCP_CNT_MALFORMED, XDP_PASS);
	if (icmp[0] != 2)
		return count(XTCP_CNT_PASSED, XDP_PASS);
	struct ipv6hdr *in = (void *)(icmp + 8);
	if ((void *)(in + 1) > data_end)
		return count(XTCP_CNT_PASSED, XDP_PASS);
	if (in->version != 6 || in->nexthdr != IPPROTO_TCP)
		return count(XTCP_CNT_PASSED, XDP_PASS);
	__u8 *tcp = (__u8 *)(in + 1);
	if ((void *)(tcp + 8) > data_end)
		return count(XTCP_CNT_PASSED, XDP_PASS);
	return to_xsk(ctx, XTCP_FAMILY_V6, (const __u8 *)&in->saddr,
		      quoted_sport(tcp));
}

SEC("xdp.frags")
int xtcp_steer(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	void *cur;
	__u16 proto;

	if ((void *)(eth + 1) > data_end)
		return count(XTCP_CNT_MALFORMED, XDP_PASS);
	proto = eth->h_proto;
	cur = eth + 1;
	/* Tagged: another network's, which xtcp's replies would not reach. */
	if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD))
		return count(XTCP_CNT_PASSED, XDP_PASS);

	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *iph = cur;
		if ((void *)(iph + 1) > data_end)
			return count(XTCP_CNT_MALFORMED, XDP_PASS);
		if (iph->version != 4 || iph->ihl < 5)
			return count(XTCP_CNT_MALFORMED, XDP_PASS);
		if (iph->protocol != IPPROTO_TCP && iph->protocol != IPPROTO_ICMP)
			return count(XTCP_CNT_PASSED, XDP_PASS);
		/* fragments (MF set or non-zero offset) are the kernel's */
		if (iph->frag_off & bpf_htons(0x3fff))
			return count(XTCP_CNT_PASSED, XDP_PASS);
		void *l4 = cur + iph->ihl * 4;
		if (l4 > data_end)
			return count(XTCP_CNT_MALFORMED, XDP_PASS);
		if (iph->protocol == IPPROTO_ICMP)
			return steer_icmp4(ctx, l4, data_end);
		return steer(ctx, XTCP_FAMILY_V4, (const __u8 *)&iph->daddr,
			     l4, data_end);
	}

	if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = cur;
		if ((void *)(ip6 + 1) > data_end)
			return count(XTCP_CNT_MALFORMED, XDP_PASS);
		if (ip6->version != 6)
			return count(XTCP_CNT_MALFORMED, XDP_PASS);
		__u8 next = ip6->nexthdr;
		void *l4 = ip6 + 1;
		/* at most 4 extension headers: hop-by-hop, routing, dest-opts */
		for (int i = 0; i < 4; i++) {
			if (next != IPPROTO_HOPOPTS && next != IPPROTO_ROUTING &&
			    next != IPPROTO_DSTOPTS)
				break;
			__u8 *ext = l4;
			if ((void *)(ext + 2) > data_end)
				return count(XTCP_CNT_MALFORMED, XDP_PASS);
			next = ext[0];
			l4 = ext + (ext[1] + 1) * 8;
		}
		if (next != IPPROTO_TCP && next != IPPROTO_ICMPV6)
			return count(XTCP_CNT_PASSED, XDP_PASS);
		if (l4 > data_end)
			return count(XTCP_CNT_MALFORMED, XDP_PASS);
		if (next == IPPROTO_ICMPV6)
			return steer_icmp6(ctx, l4, data_end);
		return steer(ctx, XTCP_FAMILY_V6, (const __u8 *)&ip6->daddr,
			     l4, data_end);
	}

	return count(XTCP_CNT_PASSED, XDP_PASS);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
