// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * splicegate edge filter: drops unwanted traffic before the network stack allocates an skb.
 *
 * Order of decisions for each frame:
 *   1. Ethernet, up to SG_MAX_VLAN_TAGS 802.1Q/802.1ad tags, IPv4 (options skipped by IHL) or IPv6
 *      (up to SG_IPV6_MAX_EXT_HDRS extension headers). Anything truncated or inconsistent is
 *      "malformed" and gets sg_config.malformed_action. Non-IP frames pass.
 *   2. Source in a deny prefix: drop, unless it is also in an allow prefix.
 *   3. TCP SYN (no ACK) to a listen port: GCRA token bucket per source prefix (/24 and /64 by
 *      default); a prefix without a bucket first takes tokens from one budget shared by all new
 *      prefixes. Over either: drop, unless the source is in an allow prefix.
 *   4. Everything else passes. Every frame bumps exactly one per-CPU counter {action, reason}.
 * Allow prefixes are looked up only when something would drop, so the common pass path costs one
 * prefix-set lookup (none when the family's deny set is empty), whose cost does not grow with the
 * number of prefixes (see the bucket index in edge_filter_shared.h).
 *
 * Loading needs CAP_BPF and CAP_PERFMON (packet pointer plus a variable offset, as every IHL or
 * extension-header walk needs, is refused without CAP_PERFMON), attaching CAP_NET_ADMIN.
 * Kernel 5.12+ (BPF_ATOMIC compare-and-exchange for the shared budget; global BPF functions from
 * 5.6, bounded loops from 5.3).
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <stddef.h>
#include <stdbool.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "edge_filter_shared.h"

/* Kernel-internal layouts not in the UAPI headers. */
struct sg_vlan_hdr {
	__be16 tci;
	__be16 encapsulated_proto;
};

struct sg_frag_hdr {
	__u8 nexthdr;
	__u8 reserved;
	__be16 frag_off;
	__be32 identification;
};

#define SG_IP_OFFSET 0x1fff
#define SG_IP6_OFFSET 0xfff8
/* "No datagram length to check against" (IPv4 BIG TCP / IPv6 jumbogram after GRO in generic
 * mode carry length 0; the frame bounds still guard every access). */
#define SG_LEN_UNKNOWN 0xffffffffU

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sg_config);
} sg_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SG_COUNTER_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} sg_counters SEC(".maps");

#define SG_TRIE(name, key_type)                                                                   \
	struct {                                                                                  \
		__uint(type, BPF_MAP_TYPE_LPM_TRIE);                                              \
		__uint(max_entries, SG_MAX_RULES_PER_TRIE);                                       \
		__uint(map_flags, BPF_F_NO_PREALLOC);                                             \
		__type(key, key_type);                                                            \
		__type(value, __u8);                                                              \
	} name SEC(".maps")

#define SG_BUCKETS(name, value_type)                                                              \
	struct {                                                                                  \
		__uint(type, BPF_MAP_TYPE_HASH);                                                  \
		__uint(max_entries, SG_MAX_RULES_PER_TRIE);                                       \
		__uint(map_flags, BPF_F_NO_PREALLOC);                                             \
		__type(key, __u32);                                                               \
		__type(value, value_type);                                                        \
	} name SEC(".maps")

/* The four prefix sets, each as "all" trie, "short" trie and buckets (edge_filter_shared.h). */
SG_TRIE(sg_deny4_all, struct sg_lpm_v4_key);
SG_TRIE(sg_deny4_short, struct sg_lpm_v4_key);
SG_BUCKETS(sg_deny4_bkt, struct sg_v4_bucket);
SG_TRIE(sg_deny6_all, struct sg_lpm_v6_key);
SG_TRIE(sg_deny6_short, struct sg_lpm_v6_key);
SG_BUCKETS(sg_deny6_bkt, struct sg_v6_bucket);
SG_TRIE(sg_allow4_all, struct sg_lpm_v4_key);
SG_TRIE(sg_allow4_short, struct sg_lpm_v4_key);
SG_BUCKETS(sg_allow4_bkt, struct sg_v4_bucket);
SG_TRIE(sg_allow6_all, struct sg_lpm_v6_key);
SG_TRIE(sg_allow6_short, struct sg_lpm_v6_key);
SG_BUCKETS(sg_allow6_bkt, struct sg_v6_bucket);

/* Destination ports of the relay's listeners, as a bitmap: an inlined array lookup and a bit
 * test instead of a hash lookup on every SYN. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sg_ports);
} sg_ports SEC(".maps");

/* One SYN bucket per source prefix. An LRU: a flood of new prefixes evicts the quietest ones,
 * which is harmless because a prefix coming back starts with no more than the shared new-source
 * budget gives it (sg_config). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, SG_MAX_SYN_SOURCES);
	__type(key, struct sg_syn_key);
	__type(value, struct sg_syn_state);
} sg_syn SEC(".maps");

/* The shared budget of prefixes without a bucket. One entry for all CPUs (not per-CPU): a spoofed
 * flood is spread over every queue by RSS, and the bound must hold for the sum. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sg_syn_state);
} sg_syn_new SEC(".maps");

static __always_inline int finish(__u32 action, __u32 reason)
{
	__u32 key = SG_COUNTER_INDEX(action, reason);
	__u64 *count = bpf_map_lookup_elem(&sg_counters, &key);

	if (count)
		*count += 1;
	return action == SG_ACTION_DROP ? XDP_DROP : XDP_PASS;
}

static __always_inline int malformed(const struct sg_config *cfg)
{
	return finish(cfg->malformed_action == SG_ACTION_DROP ? SG_ACTION_DROP : SG_ACTION_PASS,
		      SG_REASON_MALFORMED);
}

/*
 * The work after Ethernet is split into global (non-static, __noinline) functions. The verifier
 * checks a global function once, with unknown scalar arguments, instead of once per path into it
 * (the VLAN walk alone makes three), which keeps verification small and fast. The price: every
 * offset argument has to be bounded again inside before it touches the packet.
 */

/* Beyond these the packet is not looked at (bounds the verifier can reason about). */
#define SG_MAX_L2_OFF (14 + 4 * SG_MAX_VLAN_TAGS)
#define SG_MAX_L4_OFF 0x3fff

/* sg_decide's `meta`: transport protocol in the low byte, then flags. */
#define SG_META_V6 0x100
#define SG_META_LATER_FRAGMENT 0x200

static __always_inline const struct sg_config *config(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&sg_cfg, &zero);
}

/* The source address, v4 mapped into ::ffff:0:0/96 so one key type serves the SYN buckets. */
struct sg_source {
	struct sg_syn_key key;
	bool v4;
};

static __always_inline bool match_v4(const struct sg_config *cfg, const __u8 *addr, void *all,
				     void *short_trie, void *buckets, __u32 flag_short,
				     __u32 flag_long)
{
	struct sg_lpm_v4_key key = { .prefixlen = 32 };
	struct sg_v4_bucket *bucket;
	__u32 bucket_key = 0, a, i;

	__builtin_memcpy(key.addr, addr, sizeof(key.addr));
	if ((cfg->flags & flag_short) && bpf_map_lookup_elem(short_trie, &key))
		return true;
	if (!(cfg->flags & flag_long))
		return false;
	__builtin_memcpy(&bucket_key, addr, SG_V4_BUCKET_BYTES);
	bucket = bpf_map_lookup_elem(buckets, &bucket_key);
	if (!bucket)
		return false;
	if (bucket->count > SG_V4_BUCKET_SLOTS)
		return bpf_map_lookup_elem(all, &key) != NULL;
	__builtin_memcpy(&a, addr, sizeof(a));
	for (i = 0; i < SG_V4_BUCKET_SLOTS; i++) {
		if (i >= bucket->count)
			break;
		if ((a & bucket->slot[i].mask) == bucket->slot[i].addr)
			return true;
	}
	return false;
}

static __always_inline bool match_v6(const struct sg_config *cfg, const __u8 *addr, void *all,
				     void *short_trie, void *buckets, __u32 flag_short,
				     __u32 flag_long)
{
	struct sg_lpm_v6_key key = { .prefixlen = 128 };
	struct sg_v6_bucket *bucket;
	__u32 bucket_key = 0, i;
	__u64 a[2];

	__builtin_memcpy(key.addr, addr, sizeof(key.addr));
	if ((cfg->flags & flag_short) && bpf_map_lookup_elem(short_trie, &key))
		return true;
	if (!(cfg->flags & flag_long))
		return false;
	__builtin_memcpy(&bucket_key, addr, SG_V6_BUCKET_BYTES);
	bucket = bpf_map_lookup_elem(buckets, &bucket_key);
	if (!bucket)
		return false;
	if (bucket->count > SG_V6_BUCKET_SLOTS)
		return bpf_map_lookup_elem(all, &key) != NULL;
	__builtin_memcpy(a, addr, sizeof(a));
	for (i = 0; i < SG_V6_BUCKET_SLOTS; i++) {
		if (i >= bucket->count)
			break;
		if ((a[0] & bucket->slot[i].mask[0]) == bucket->slot[i].addr[0] &&
		    (a[1] & bucket->slot[i].mask[1]) == bucket->slot[i].addr[1])
			return true;
	}
	return false;
}

static __always_inline bool denied(const struct sg_config *cfg, const struct sg_source *src)
{
	if (src->v4)
		return match_v4(cfg, &src->key.addr[12], &sg_deny4_all, &sg_deny4_short,
				&sg_deny4_bkt, SG_CFG_DENY4_SHORT, SG_CFG_DENY4_LONG);
	return match_v6(cfg, src->key.addr, &sg_deny6_all, &sg_deny6_short, &sg_deny6_bkt,
			SG_CFG_DENY6_SHORT, SG_CFG_DENY6_LONG);
}

static __always_inline bool allowed(const struct sg_config *cfg, const struct sg_source *src)
{
	if (src->v4)
		return match_v4(cfg, &src->key.addr[12], &sg_allow4_all, &sg_allow4_short,
				&sg_allow4_bkt, SG_CFG_ALLOW4_SHORT, SG_CFG_ALLOW4_LONG);
	return match_v6(cfg, src->key.addr, &sg_allow6_all, &sg_allow6_short, &sg_allow6_bkt,
			SG_CFG_ALLOW6_SHORT, SG_CFG_ALLOW6_LONG);
}

/* What the SYN limit says about one SYN. */
enum sg_syn_verdict {
	SG_SYN_ADMIT,
	SG_SYN_OVER_RATE,       /* the prefix's bucket is empty */
	SG_SYN_NO_NEW_BUDGET,   /* no bucket yet, and the shared new-source budget is spent */
};

/* Compare-and-exchange attempts on the shared budget before a SYN counts as refused: each failed
 * attempt means another CPU just took tokens, i.e. new sources are arriving at full speed. */
#define SG_NEW_BUDGET_ATTEMPTS 4

/*
 * Charges one token to the shared new-source budget and returns how many it had (at most `cap`),
 * or 0 when it has none: the bucket of a prefix without one starts with that many, so it gets its
 * full burst while new sources are rare, and only its first SYN while they flood. The same GCRA as
 * a prefix's bucket, made exact across CPUs with an atomic compare-and-exchange: this budget is
 * what bounds a spoofed flood, so lost updates would defeat it.
 */
static __always_inline __u32 take_new_source_token(const struct sg_config *cfg, __u64 now,
						   __u32 cap)
{
	__u64 interval = cfg->syn_new_interval_ns;
	__u64 tolerance = cfg->syn_new_tolerance_ns;
	struct sg_syn_state *budget;
	__u32 zero = 0;
	int i;

	if (!interval)
		return cap;
	budget = bpf_map_lookup_elem(&sg_syn_new, &zero);
	if (!budget)
		return 0;
	for (i = 0; i < SG_NEW_BUDGET_ATTEMPTS; i++) {
		__u64 seen = *(volatile __u64 *)&budget->tat_ns;
		__u64 tat = seen > now ? seen : now;
		__u64 available;

		if (tat - now > tolerance)
			return 0;
		available = (tolerance - (tat - now)) / interval + 1;
		if (__sync_val_compare_and_swap(&budget->tat_ns, seen, tat + interval) == seen)
			return available < cap ? (__u32)available : cap;
	}
	return 0;
}

/*
 * GCRA per source prefix: admit while the prefix's theoretical arrival time is at most
 * `tolerance` ahead of now, then push it one interval further. A refused SYN does not move it.
 * Two CPUs updating one prefix at once may lose an update and admit a SYN more; RSS keeps a flow
 * on one queue, and exactness is not worth an atomic loop here (the shared budget has one).
 * A prefix without a bucket, new or evicted, gets one holding no more tokens than the shared
 * budget has left: an eviction needs SG_MAX_SYN_SOURCES new buckets, each paid from that budget,
 * so whoever forces one finds the budget spent when the evicted prefix comes back.
 */
static __always_inline enum sg_syn_verdict syn_limit(const struct sg_config *cfg,
						    const struct sg_source *src)
{
	__u64 now = bpf_ktime_get_ns();
	const __u64 *mask = src->v4 ? cfg->syn_mask_v4 : cfg->syn_mask_v6;
	struct sg_syn_key key;
	struct sg_syn_state *state;
	__u64 half[2], tat;

	__builtin_memcpy(half, src->key.addr, sizeof(half));
	half[0] &= mask[0];
	half[1] &= mask[1];
	__builtin_memcpy(key.addr, half, sizeof(key.addr));
	state = bpf_map_lookup_elem(&sg_syn, &key);
	if (!state) {
		__u32 burst = cfg->syn_burst ? cfg->syn_burst : 1;
		__u32 tokens = take_new_source_token(cfg, now, burst);
		/* After this SYN, `tokens - 1` left of `burst`. */
		struct sg_syn_state fresh = {
			.tat_ns = now + (__u64)(burst - tokens + 1) * cfg->syn_interval_ns,
		};

		if (!tokens)
			return SG_SYN_NO_NEW_BUDGET;
		bpf_map_update_elem(&sg_syn, &key, &fresh, BPF_NOEXIST);
		return SG_SYN_ADMIT;
	}
	tat = state->tat_ns > now ? state->tat_ns : now;
	if (tat - now > cfg->syn_tolerance_ns)
		return SG_SYN_OVER_RATE;
	state->tat_ns = tat + cfg->syn_interval_ns;
	return SG_SYN_ADMIT;
}

/*
 * Everything after the IP header(s): the source rules, then TCP. `src_off` is where the source
 * address starts, `l4_off` the transport header, `l4_len` how many bytes the IP header says follow
 * up to the end of the datagram (SG_LEN_UNKNOWN when it does not say).
 */
__noinline int sg_decide(struct xdp_md *ctx, __u32 src_off, __u32 l4_off, __u32 l4_len,
			 __u32 meta)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	const struct sg_config *cfg = config();
	struct sg_source src = { .v4 = !(meta & SG_META_V6) };
	bool allow = false;
	struct tcphdr *th;
	__u32 th_len;
	void *addr;

	if (!cfg)
		return XDP_PASS;
	if (src_off > SG_MAX_L2_OFF + 12)
		return malformed(cfg);
	addr = data + src_off;
	if (src.v4) {
		if (addr + 4 > data_end)
			return malformed(cfg);
		src.key.addr[10] = 0xff;
		src.key.addr[11] = 0xff;
		__builtin_memcpy(&src.key.addr[12], addr, 4);
	} else {
		if (addr + 16 > data_end)
			return malformed(cfg);
		__builtin_memcpy(src.key.addr, addr, 16);
	}

	if (denied(cfg, &src)) {
		if (!allowed(cfg, &src))
			return finish(SG_ACTION_DROP, SG_REASON_DENY);
		allow = true;
	}
	if (meta & SG_META_LATER_FRAGMENT)
		return finish(SG_ACTION_PASS, allow ? SG_REASON_ALLOW : SG_REASON_FRAGMENT);
	if ((meta & 0xff) != IPPROTO_TCP)
		return finish(SG_ACTION_PASS, allow ? SG_REASON_ALLOW : SG_REASON_NOT_TCP);

	/* Bounded right before use: a check made before the map lookups above would be lost when
	 * the compiler spills and refills the argument. */
	if (l4_off > SG_MAX_L4_OFF)
		return malformed(cfg);
	th = data + l4_off;
	if ((void *)(th + 1) > data_end || l4_len < sizeof(*th))
		return malformed(cfg);
	th_len = th->doff * 4;
	if (th_len < sizeof(*th) || th_len > l4_len || (void *)th + th_len > data_end)
		return malformed(cfg);

	if (th->syn && !th->ack && cfg->syn_interval_ns && !allow) {
		__u16 port = bpf_ntohs(th->dest);
		__u32 zero = 0;
		struct sg_ports *ports = bpf_map_lookup_elem(&sg_ports, &zero);

		enum sg_syn_verdict verdict = SG_SYN_ADMIT;

		if (ports && (ports->bits[port / 64] >> (port % 64)) & 1)
			verdict = syn_limit(cfg, &src);
		if (verdict != SG_SYN_ADMIT) {
			if (!allowed(cfg, &src))
				return finish(SG_ACTION_DROP, verdict == SG_SYN_OVER_RATE ?
								      SG_REASON_SYN_RATE :
								      SG_REASON_SYN_NEW_SOURCE);
			allow = true;
		}
	}
	return finish(SG_ACTION_PASS, allow ? SG_REASON_ALLOW : SG_REASON_NO_MATCH);
}

__noinline int sg_ipv4(struct xdp_md *ctx, __u32 off)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	const struct sg_config *cfg = config();
	struct iphdr *iph;
	__u32 hlen, tot, l4_len;
	__u32 meta;

	if (!cfg)
		return XDP_PASS;
	if (off > SG_MAX_L2_OFF)
		return malformed(cfg);
	iph = data + off;
	if ((void *)(iph + 1) > data_end)
		return malformed(cfg);
	if (iph->version != 4 || iph->ihl < 5)
		return malformed(cfg);
	hlen = iph->ihl * 4;
	if ((void *)iph + hlen > data_end)
		return malformed(cfg);
	tot = bpf_ntohs(iph->tot_len);
	if (tot == 0) {
		l4_len = SG_LEN_UNKNOWN;
	} else {
		/* Padding after the datagram is fine (short frames), a datagram cut short is not. */
		if (tot < hlen || (void *)iph + tot > data_end)
			return malformed(cfg);
		l4_len = tot - hlen;
	}
	meta = iph->protocol;
	if (bpf_ntohs(iph->frag_off) & SG_IP_OFFSET)
		meta |= SG_META_LATER_FRAGMENT;
	return sg_decide(ctx, off + offsetof(struct iphdr, saddr), off + hlen, l4_len, meta);
}

__noinline int sg_ipv6(struct xdp_md *ctx, __u32 off)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	const struct sg_config *cfg = config();
	__u32 payload, ext_len = 0, src_off, meta = SG_META_V6;
	struct ipv6hdr *ip6;
	__u8 nexthdr;
	int i;

	if (!cfg)
		return XDP_PASS;
	if (off > SG_MAX_L2_OFF)
		return malformed(cfg);
	ip6 = data + off;
	if ((void *)(ip6 + 1) > data_end)
		return malformed(cfg);
	if (ip6->version != 6)
		return malformed(cfg);
	payload = bpf_ntohs(ip6->payload_len);
	if (payload && (void *)(ip6 + 1) + payload > data_end)
		return malformed(cfg);
	if (!payload)
		payload = SG_LEN_UNKNOWN;
	src_off = off + offsetof(struct ipv6hdr, saddr);
	nexthdr = ip6->nexthdr;
	off += sizeof(*ip6);

	for (i = 0; i < SG_IPV6_MAX_EXT_HDRS; i++) {
		struct ipv6_opt_hdr *opt = data + off;
		struct sg_frag_hdr *fh = data + off;
		__u32 len;

		if (nexthdr == IPPROTO_HOPOPTS || nexthdr == IPPROTO_ROUTING ||
		    nexthdr == IPPROTO_DSTOPTS) {
			if ((void *)(opt + 1) > data_end)
				return malformed(cfg);
			len = (opt->hdrlen + 1) * 8;
			nexthdr = opt->nexthdr;
		} else if (nexthdr == IPPROTO_AH) {
			if ((void *)(opt + 1) > data_end)
				return malformed(cfg);
			len = (opt->hdrlen + 2) * 4;
			nexthdr = opt->nexthdr;
		} else if (nexthdr == IPPROTO_FRAGMENT) {
			if ((void *)(fh + 1) > data_end)
				return malformed(cfg);
			len = sizeof(*fh);
			nexthdr = fh->nexthdr;
			if (bpf_ntohs(fh->frag_off) & SG_IP6_OFFSET)
				meta |= SG_META_LATER_FRAGMENT;
		} else {
			goto transport;
		}
		ext_len += len;
		off += len;
		/* Keeps `off` bounded for the verifier on every iteration, and catches headers
		 * running past the payload or the frame. */
		if (off > SG_MAX_L4_OFF || ext_len > payload || data + off > data_end)
			return malformed(cfg);
		if (meta & SG_META_LATER_FRAGMENT)
			goto transport;
	}
	/* Still an extension header after the fixed bound: too deep to look into. */
	if (nexthdr == IPPROTO_HOPOPTS || nexthdr == IPPROTO_ROUTING ||
	    nexthdr == IPPROTO_DSTOPTS || nexthdr == IPPROTO_AH || nexthdr == IPPROTO_FRAGMENT)
		return malformed(cfg);

transport:
	meta |= nexthdr;
	return sg_decide(ctx, src_off, off,
			 payload == SG_LEN_UNKNOWN ? SG_LEN_UNKNOWN : payload - ext_len, meta);
}

SEC("xdp")
int splicegate_xdp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	const struct sg_config *cfg = config();
	__u32 off = sizeof(*eth);
	__be16 proto;
	int i;

	if (!cfg)
		return XDP_PASS; /* an array always has entry 0; this satisfies the verifier */
	if ((void *)(eth + 1) > data_end)
		return malformed(cfg);
	proto = eth->h_proto;

#pragma unroll
	for (i = 0; i < SG_MAX_VLAN_TAGS; i++) {
		struct sg_vlan_hdr *vlan = data + off;

		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		if ((void *)(vlan + 1) > data_end)
			return malformed(cfg);
		proto = vlan->encapsulated_proto;
		off += sizeof(*vlan);
	}

	if (proto == bpf_htons(ETH_P_IP))
		return sg_ipv4(ctx, off);
	if (proto == bpf_htons(ETH_P_IPV6))
		return sg_ipv6(ctx, off);
	/* More tags than we walk would hide an IP packet from the rules. */
	if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD))
		return malformed(cfg);
	return finish(SG_ACTION_PASS, SG_REASON_NOT_IP);
}

/* GPL-2.0 OR BSD-2-Clause, in the spelling the kernel's license_is_gpl_compatible() knows. */
char LICENSE[] SEC("license") = "Dual BSD/GPL";
