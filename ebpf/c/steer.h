/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Types shared between the steering program and userspace (engine/src/xdp).
 * Layouts are fixed: userspace mirrors them with #[repr(C)] structs. */
#ifndef XTCP_STEER_H
#define XTCP_STEER_H

#define XTCP_MAX_RULES 16
#define XTCP_MAX_QUEUES 256

/* family values of a rule */
#define XTCP_FAMILY_ANY 0
#define XTCP_FAMILY_V4 4
#define XTCP_FAMILY_V6 6

/* One steering rule: TCP packets whose destination (the local side) matches
 * addr (unless addr_any) and whose destination port lies in
 * [port_lo, port_hi] go to the AF_XDP socket of their RX queue.
 * IPv4 addresses are stored in addr[0..4]. Ports in host byte order. */
struct xtcp_rule {
	__u8 family;
	__u8 addr_any;
	__u16 port_lo;
	__u16 port_hi;
	__u16 _pad;
	__u8 addr[16];
};

/* The rule set. Userspace writes the inactive slot of `rules` then flips
 * `active` in `config`, so a packet never sees a half-written set. */
struct xtcp_ruleset {
	__u32 count;
	__u32 _pad;
	struct xtcp_rule rules[XTCP_MAX_RULES];
};

/* userspace (engine/src/xdp) serialises these by hand: keep in step */
_Static_assert(sizeof(struct xtcp_rule) == 24, "xtcp_rule layout");
_Static_assert(sizeof(struct xtcp_ruleset) == 8 + 24 * XTCP_MAX_RULES, "ruleset layout");

enum xtcp_config {
	XTCP_CFG_ACTIVE = 0,
	XTCP_CFG_NO_SOCKET_DROP = 1,
	XTCP_CFG_MAX = 2,
};

enum xtcp_counter {
	XTCP_CNT_STEERED = 0,
	XTCP_CNT_PASSED = 1,
	XTCP_CNT_MALFORMED = 2,
	XTCP_CNT_NO_SOCKET = 3,
	XTCP_CNT_MAX = 4,
};

#endif
