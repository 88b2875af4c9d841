// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * splicegate edge filter: drops unwanted traffic before the network stack allocates an skb.
 *
 * Order of decisions for each frame:
 *   1. Ethernet, up to SG_MAX_VLAN_TAGS 802.1Q/802.1ad tags, IPv4 (options skipped by IHL) or IPv6
 *      (up to SG_IPV6_MAX_EXT_HDRS extension headers). Anything truncated or inconsistent is
 *      "malformed" and gets sg_config.malformed_action. Non-IP frames pass.
 *   2. Source in a deny prefix: drop, unless it is also in an allow prefix.
 *   3. TCP SYN (no ACK) to a listen port: per-source GCRA token bucket; over the limit: drop,
 *      unless the source is in an allow prefix.
 *   4. Everything else passes. Every frame bumps exactly one per-CPU counter {action, reason}.
 * Allow prefixes are looked up only when something would drop, so the common pass path costs one
 * trie lookup (none when the deny trie of that family is empty).
 *
 * Only pointer-vs-data_end comparisons guard packet access; lengths taken from headers are
 * compared as scalars, so the program loads without CAP_PERFMON (no pointer-pointer compares).
 * Needs: kernel 5.3+ (bounded loops are unrolled anyway), bpf_ktime_get_ns, LPM trie, LRU hash.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
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

#define SG_IP_MF 0x2000
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

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, SG_MAX_RULES_PER_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sg_lpm_v4_key);
	__type(value, __u8);
} sg_deny_v4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, SG_MAX_RULES_PER_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sg_lpm_v6_key);
	__type(value, __u8);
} sg_deny_v6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, SG_MAX_RULES_PER_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sg_lpm_v4_key);
	__type(value, __u8);
} sg_allow_v4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, SG_MAX_RULES_PER_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sg_lpm_v6_key);
	__type(value, __u8);
} sg_allow_v6 SEC(".maps");

/* Destination ports (host byte order) of the relay's listeners. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SG_MAX_LISTEN_PORTS);
	__type(key, __u16);
	__type(value, __u8);
} sg_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, SG_MAX_SYN_SOURCES);
	__type(key, struct sg_syn_key);
	__type(value, struct sg_syn_state);
} sg_syn SEC(".maps");

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

/* The source address, v4 mapped into ::ffff:0:0/96 so one key type serves the SYN buckets. */
struct sg_source {
	struct sg_syn_key key;
	bool v4;
};

static __always_inline bool in_trie(const struct sg_config *cfg, const struct sg_source *src,
				    void *trie_v4, __u32 flag_v4, void *trie_v6, __u32 flag_v6)
{
	if (src->v4) {
		struct sg_lpm_v4_key k4 = { .prefixlen = 32 };

		if (!(cfg->flags & flag_v4))
			return false;
		__builtin_memcpy(k4.addr, &src->key.addr[12], sizeof(k4.addr));
		return bpf_map_lookup_elem(trie_v4, &k4) != NULL;
	} else {
		struct sg_lpm_v6_key k6 = { .prefixlen = 128 };

		if (!(cfg->flags & flag_v6))
			return false;
		__builtin_memcpy(k6.addr, src->key.addr, sizeof(k6.addr));
		return bpf_map_lookup_elem(trie_v6, &k6) != NULL;
	}
}

static __always_inline bool denied(const struct sg_config *cfg, const struct sg_source *src)
{
	return in_trie(cfg, src, &sg_deny_v4, SG_CFG_DENY4, &sg_deny_v6, SG_CFG_DENY6);
}

static __always_inline bool allowed(const struct sg_config *cfg, const struct sg_source *src)
{
	return in_trie(cfg, src, &sg_allow_v4, SG_CFG_ALLOW4, &sg_allow_v6, SG_CFG_ALLOW6);
}

/*
 * GCRA: admit while the source's theoretical arrival time is at most `tolerance` ahead of now,
 * then push it one interval further. A refused SYN does not move it. Two CPUs updating one source
 * at once may lose an update and admit a SYN more; RSS keeps a source on one queue, and exactness
 * is not worth an atomic loop here.
 */
static __always_inline bool syn_admitted(const struct sg_config *cfg, const struct sg_source *src)
{
	__u64 now = bpf_ktime_get_ns();
	struct sg_syn_state *state = bpf_map_lookup_elem(&sg_syn, &src->key);
	__u64 tat;

	if (!state) {
		struct sg_syn_state fresh = { .tat_ns = now + cfg->syn_interval_ns };

		bpf_map_update_elem(&sg_syn, &src->key, &fresh, BPF_NOEXIST);
		return true;
	}
	tat = state->tat_ns > now ? state->tat_ns : now;
	if (tat - now > cfg->syn_tolerance_ns)
		return false;
	state->tat_ns = tat + cfg->syn_interval_ns;
	return true;
}

/*
 * Everything after the IP header: the source rules, then TCP. `l4_len` is how many bytes the IP
 * header says follow up to the end of the datagram (SG_LEN_UNKNOWN when it does not say).
 */
static __always_inline int decide(struct xdp_md *ctx, const struct sg_config *cfg,
				  const struct sg_source *src, __u8 l4_proto, __u32 l4_off,
				  __u32 l4_len, bool later_fragment)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	bool allow = false;
	struct tcphdr *th;
	__u32 th_len;

	if (denied(cfg, src)) {
		if (!allowed(cfg, src))
			return finish(SG_ACTION_DROP, SG_REASON_DENY);
		allow = true;
	}
	if (later_fragment)
		return finish(SG_ACTION_PASS, allow ? SG_REASON_ALLOW : SG_REASON_FRAGMENT);
	if (l4_proto != IPPROTO_TCP)
		return finish(SG_ACTION_PASS, allow ? SG_REASON_ALLOW : SG_REASON_NOT_TCP);

	th = data + l4_off;
	if ((void *)(th + 1) > data_end || l4_len < sizeof(*th))
		return malformed(cfg);
	th_len = th->doff * 4;
	if (th_len < sizeof(*th) || th_len > l4_len || (void *)th + th_len > data_end)
		return malformed(cfg);

	if (th->syn && !th->ack && cfg->syn_interval_ns && !allow) {
		__u16 port = bpf_ntohs(th->dest);

		if (bpf_map_lookup_elem(&sg_ports, &port) && !syn_admitted(cfg, src)) {
			if (!allowed(cfg, src))
				return finish(SG_ACTION_DROP, SG_REASON_SYN_RATE);
			allow = true;
		}
	}
	return finish(SG_ACTION_PASS, allow ? SG_REASON_ALLOW : SG_REASON_NO_MATCH);
}

static __always_inline int handle_ipv4(struct xdp_md *ctx, const struct sg_config *cfg, __u32 off)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct iphdr *iph = data + off;
	struct sg_source src = { .v4 = true };
	__u32 hlen, tot, l4_len;
	__u16 frag;

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

	src.key.addr[10] = 0xff;
	src.key.addr[11] = 0xff;
	__builtin_memcpy(&src.key.addr[12], &iph->saddr, 4);

	frag = bpf_ntohs(iph->frag_off);
	return decide(ctx, cfg, &src, iph->protocol, off + hlen, l4_len,
		      (frag & SG_IP_OFFSET) != 0);
}

static __always_inline int handle_ipv6(struct xdp_md *ctx, const struct sg_config *cfg, __u32 off)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6 = data + off;
	struct sg_source src = { .v4 = false };
	bool later_fragment = false;
	__u32 payload, ext_len = 0;
	__u8 nexthdr;
	int i;

	if ((void *)(ip6 + 1) > data_end)
		return malformed(cfg);
	if (ip6->version != 6)
		return malformed(cfg);
	payload = bpf_ntohs(ip6->payload_len);
	if (payload && (void *)(ip6 + 1) + payload > data_end)
		return malformed(cfg);
	if (!payload)
		payload = SG_LEN_UNKNOWN;
	__builtin_memcpy(src.key.addr, &ip6->saddr, sizeof(src.key.addr));
	nexthdr = ip6->nexthdr;
	off += sizeof(*ip6);

#pragma unroll
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
				later_fragment = true;
		} else {
			goto transport;
		}
		ext_len += len;
		off += len;
		if (ext_len > payload || data + off > data_end)
			return malformed(cfg);
		if (later_fragment)
			goto transport;
	}
	/* Still an extension header after the fixed bound: too deep to look into. */
	if (nexthdr == IPPROTO_HOPOPTS || nexthdr == IPPROTO_ROUTING ||
	    nexthdr == IPPROTO_DSTOPTS || nexthdr == IPPROTO_AH || nexthdr == IPPROTO_FRAGMENT)
		return malformed(cfg);

transport:
	return decide(ctx, cfg, &src, nexthdr, off,
		      payload == SG_LEN_UNKNOWN ? SG_LEN_UNKNOWN : payload - ext_len, later_fragment);
}

SEC("xdp")
int splicegate_xdp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	const struct sg_config *cfg;
	__u32 zero = 0, off = sizeof(*eth);
	__be16 proto;
	int i;

	cfg = bpf_map_lookup_elem(&sg_cfg, &zero);
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
		return handle_ipv4(ctx, cfg, off);
	if (proto == bpf_htons(ETH_P_IPV6))
		return handle_ipv6(ctx, cfg, off);
	/* More tags than we walk would hide an IP packet from the rules. */
	if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD))
		return malformed(cfg);
	return finish(SG_ACTION_PASS, SG_REASON_NOT_IP);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
