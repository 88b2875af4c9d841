/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
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

/* Capacities. Tries and buckets allocate per entry (BPF_F_NO_PREALLOC); the LRU hash
 * preallocates. */
#define SG_MAX_RULES_PER_TRIE 65536
#define SG_MAX_SYN_SOURCES 65536 /* source prefixes with a SYN bucket */
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
	SG_REASON_SYN_RATE = 6,  /* SYN to a listen port over its source prefix's token bucket */
	SG_REASON_ALLOW = 7,     /* passed only because an allow prefix overrode deny or SYN limit */
	SG_REASON_SYN_NEW_SOURCE = 8, /* SYN from a source prefix without a bucket (never seen or
				       * evicted) while the shared new-source budget is spent */
	SG_REASON_COUNT = 9,
};

/* Index into the per-CPU counter array. */
#define SG_COUNTER_INDEX(action, reason) \
	((__u32)(action) * (__u32)SG_REASON_COUNT + (__u32)(reason))
#define SG_COUNTER_SLOTS ((__u32)SG_ACTION_COUNT * (__u32)SG_REASON_COUNT)

/*
 * Prefix sets (deny v4, deny v6, allow v4, allow v6). Membership is all that matters (any covering
 * prefix counts), so each set is kept three ways, for a lookup cost that does not grow with the
 * number of prefixes (a binary trie's depth grows with log2 of it):
 *  - "all":   LPM trie with every prefix of the set (the authority; used for crowded buckets);
 *  - "short": LPM trie with the prefixes shorter than the bucket length (few in practice);
 *  - "bkt":   hash from the address's first SG_V4_BUCKET_BYTES / SG_V6_BUCKET_BYTES bytes to the
 *             longer prefixes under them, inline, up to N slots; a bucket with more says
 *             SG_BUCKET_OVERFLOW and the "all" trie answers for it.
 * A lookup: short trie (only if the set has short prefixes), then one hash lookup and at most N
 * masked compares.
 */
#define SG_V4_BUCKET_BYTES 2 /* /16 */
#define SG_V6_BUCKET_BYTES 4 /* /32 */
#define SG_V4_BUCKET_SLOTS 8
#define SG_V6_BUCKET_SLOTS 4
#define SG_BUCKET_OVERFLOW 0xffffffffU

/* Bucket key: the address's first bucket bytes copied into a zeroed __u32. */
struct sg_v4_slot {
	__u32 addr; /* network byte order, host bits clear */
	__u32 mask;
};

struct sg_v4_bucket {
	__u32 count; /* used slots, or SG_BUCKET_OVERFLOW */
	__u32 pad;
	struct sg_v4_slot slot[SG_V4_BUCKET_SLOTS];
};

struct sg_v6_slot {
	__u64 addr[2]; /* the 16 address bytes as two __u64 (memcpy), host bits clear */
	__u64 mask[2];
};

struct sg_v6_bucket {
	__u32 count;
	__u32 pad;
	struct sg_v6_slot slot[SG_V6_BUCKET_SLOTS];
};

/* sg_config.flags: which parts of each set hold prefixes, so the program skips empty ones. */
#define SG_CFG_DENY4_SHORT (1U << 0)
#define SG_CFG_DENY4_LONG (1U << 1)
#define SG_CFG_DENY6_SHORT (1U << 2)
#define SG_CFG_DENY6_LONG (1U << 3)
#define SG_CFG_ALLOW4_SHORT (1U << 4)
#define SG_CFG_ALLOW4_LONG (1U << 5)
#define SG_CFG_ALLOW6_SHORT (1U << 6)
#define SG_CFG_ALLOW6_LONG (1U << 7)

/* The listen ports: one bit per port (host byte order), in the single entry of an array. */
struct sg_ports {
	__u64 bits[65536 / 64];
};

/* The single entry of the sg_config array. User space rewrites it whole; a packet racing the
 * update may see old and new fields mixed for that one packet, which is harmless here. */
struct sg_config {
	/* SYN limit per source prefix as a generic cell rate algorithm: one token per interval, and
	 * a prefix may run (burst - 1) intervals ahead. interval 0 = no SYN limit. */
	__u64 syn_interval_ns;
	__u64 syn_tolerance_ns;
	/* The budget shared by every source prefix that has no bucket (never seen, or evicted), as
	 * the same algorithm: a new bucket costs it one token and starts with at most as many tokens
	 * as it had left, so a spoofed flood of new sources is bounded by it and a prefix evicted by
	 * such a flood comes back to a spent budget, not to a fresh burst.
	 * interval 0 = no shared budget (new buckets start full). */
	__u64 syn_new_interval_ns;
	__u64 syn_new_tolerance_ns;
	/* Network-byte-order masks over struct sg_syn_key (two __u64 halves) that cut a source down to
	 * its prefix: IPv4 (mapped, so the mask covers the ::ffff:0:0/96 part too) and IPv6. */
	__u64 syn_mask_v4[2];
	__u64 syn_mask_v6[2];
	__u32 syn_burst;        /* tokens of a full bucket: syn_tolerance_ns / syn_interval_ns + 1 */
	__u32 malformed_action; /* enum sg_action */
	__u32 flags;            /* SG_CFG_* */
	__u32 pad;
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

/* Key of a SYN bucket: the source's prefix (sg_config.syn_mask_*) of its IPv6 address, or of its
 * IPv4 one mapped (::ffff:a.b.c.0 for a /24). */
struct sg_syn_key {
	__u8 addr[16];
};

/* SYN bucket state, per source prefix (LRU hash) and for the shared new-source budget (array):
 * the theoretical arrival time of the next SYN (ns, bpf_ktime_get_ns clock, CLOCK_MONOTONIC).
 * A SYN is admitted while tat <= now + tolerance. */
struct sg_syn_state {
	__u64 tat_ns;
};

#endif /* SPLICEGATE_XDP_EDGE_FILTER_SHARED_H */
