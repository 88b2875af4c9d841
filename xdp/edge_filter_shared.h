/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Map keys, values and enums shared by the XDP edge filter (xdp/bpf/edge_filter.bpf.c, built with
 * clang -target bpf) and its C++ loader (xdp/EdgeFilterProgram.cpp). C, UAPI types only, so both
 * sides see one layout; nothing here may depend on the compiler's notion of long or pointers.
 */
#ifndef SPLICEGATE_XDP_EDGE_FILTER_SHARED_H
#define SPLICEGATE_XDP_EDGE_FILTER_SHARED_H

#include <linux/types.h>

/* The program's name in the kernel (at most 15 characters: BPF_OBJ_NAME_LEN - 1). The loader
 * recognises a stale program of ours on an interface by this name. */
#define SG_XDP_PROG_NAME "splicegate_xdp"

/* Capacities. The LPM tries allocate per entry (BPF_F_NO_PREALLOC); the LRU hash preallocates. */
#define SG_MAX_RULES_PER_TRIE 65536
#define SG_MAX_LISTEN_PORTS 1024
#define SG_MAX_SYN_SOURCES 65536
/* IPv6 extension headers walked before the packet counts as malformed. */
#define SG_IPV6_MAX_EXT_HDRS 8
/* 802.1Q / 802.1ad tags walked before the packet counts as malformed. */
#define SG_MAX_VLAN_TAGS 2

enum sg_action {
	SG_ACTION_PASS = 0,
	SG_ACTION_DROP = 1,
	SG_ACTION_COUNT = 2,
};

enum sg_reason {
	SG_REASON_NO_MATCH = 0,  /* IP packet no rule applied to */
	SG_REASON_NOT_IP = 1,    /* neither IPv4 nor IPv6 (ARP, LLDP, ...) */
	SG_REASON_NOT_TCP = 2,   /* IP, but the transport is not TCP */
	SG_REASON_FRAGMENT = 3,  /* a non-first fragment: no transport header to look at */
	SG_REASON_MALFORMED = 4, /* truncated or inconsistent headers: verdict from sg_config */
	SG_REASON_DENY = 5,      /* source in a deny prefix */
	SG_REASON_SYN_RATE = 6,  /* SYN to a listen port over the source's token bucket */
	SG_REASON_ALLOW = 7,     /* passed only because an allow prefix overrode deny or SYN limit */
	SG_REASON_COUNT = 8,
};

/* Index into the per-CPU counter array. */
#define SG_COUNTER_INDEX(action, reason) \
	((__u32)(action) * (__u32)SG_REASON_COUNT + (__u32)(reason))
#define SG_COUNTER_SLOTS ((__u32)SG_ACTION_COUNT * (__u32)SG_REASON_COUNT)

/* sg_config.flags: which tries hold rules, so the program skips lookups in empty ones. */
#define SG_CFG_DENY4 (1U << 0)
#define SG_CFG_DENY6 (1U << 1)
#define SG_CFG_ALLOW4 (1U << 2)
#define SG_CFG_ALLOW6 (1U << 3)

/* The single entry of the sg_config array. User space rewrites it whole; a packet racing the
 * update may see old and new fields mixed for that one packet, which is harmless here. */
struct sg_config {
	/* SYN limit as a generic cell rate algorithm: one token per interval, and a source may run
	 * (burst - 1) intervals ahead. interval 0 = no SYN limit. */
	__u64 syn_interval_ns;
	__u64 syn_tolerance_ns;
	__u32 malformed_action; /* enum sg_action */
	__u32 flags;            /* SG_CFG_* */
};

/* LPM trie keys: prefix length in bits, then the address in network byte order. */
struct sg_lpm_v4_key {
	__u32 prefixlen;
	__u8 addr[4];
};

struct sg_lpm_v6_key {
	__u32 prefixlen;
	__u8 addr[16];
};

/* Key of the per-source SYN bucket: the IPv6 address, or the IPv4 one mapped (::ffff:a.b.c.d). */
struct sg_syn_key {
	__u8 addr[16];
};

/* Per-source SYN state: the theoretical arrival time of the next SYN (ns, bpf_ktime_get_ns clock,
 * CLOCK_MONOTONIC). A SYN is admitted while tat <= now + tolerance. */
struct sg_syn_state {
	__u64 tat_ns;
};

#endif /* SPLICEGATE_XDP_EDGE_FILTER_SHARED_H */
