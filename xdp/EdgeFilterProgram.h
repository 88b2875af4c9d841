#pragma once
// The loaded edge filter BPF program (xdp/bpf/edge_filter.bpf.c, embedded in this binary by its
// skeleton) and its maps: rules, listen ports, SYN limit, malformed verdict, counters. Not
// attached anywhere; XdpAttachment does that, EdgeFilter combines the two. Tests and the
// benchmark run it with bpf_prog_test_run_opts through programFd().
//
// Each prefix set (deny/allow x IPv4/IPv6) lives in three maps, kept in step here: an LPM trie
// with every prefix, an LPM trie with the short ones, and a hash of buckets holding the longer
// ones inline (edge_filter_shared.h says why). The rules are mirrored in user space, which is
// where rules() lists them from; the config flags tell the program which parts are empty.
// Thread affinity: every member function is thread-safe (one mutex; the data path is the
// kernel's, so contention is only between control-plane callers).
// Error contract: the constructor and the setters throw std::system_error naming what failed
// (e.g. "xdp-deny 10.0.0.0/8: adding to the deny trie: Argument list too long"); a failed change
// leaves the previous state. libbpf's own messages go to our log one level quieter (warn -> info,
// info -> debug, debug dropped).
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "xdp/Cidr.h"

struct bpf_map;
struct edge_filter_bpf;

namespace splicegate {

// {action, reason} -> packets, summed over CPUs. Always holds every pair the program can count,
// zeros included, so a metrics exposer can publish stable series.
using XdpPacketCounts = std::map<std::pair<std::string, std::string>, std::uint64_t>;

// The SYN limit on the listen ports (--xdp-syn-*). Sources are grouped into prefixes, each with
// one token bucket; a prefix without a bucket (never seen, or evicted from the LRU of
// SG_MAX_SYN_SOURCES) takes its first tokens from one budget shared by all such prefixes, so a
// spoofed flood is bounded by that budget and an evicted prefix gets no free burst.
struct SynLimit {
    std::uint32_t rate = 0;              // SYNs/s per source prefix; 0 = no SYN limit at all
    std::uint32_t burst = 0;             // bucket depth; 0 = rate
    unsigned prefixV4 = 24;              // IPv4 sources in one /prefixV4 share a bucket (1..32)
    unsigned prefixV6 = 64;              // IPv6 likewise (1..128)
    std::uint32_t newSourceRate = 1000;  // SYNs/s of prefixes without a bucket; 0 = unbounded
    std::uint32_t newSourceBurst = 0;    // 0 = newSourceRate

    bool operator==(const SynLimit&) const = default;
};

class EdgeFilterProgram {
  public:
    // Opens and loads the program; defaults: no rules, no listen ports, no SYN limit, malformed
    // packets dropped. Needs CAP_BPF and CAP_PERFMON. Throws std::system_error
    // ("xdp: loading the edge filter BPF program (needs ...): Operation not permitted").
    EdgeFilterProgram();
    ~EdgeFilterProgram();
    EdgeFilterProgram(const EdgeFilterProgram&) = delete;
    EdgeFilterProgram& operator=(const EdgeFilterProgram&) = delete;

    int programFd() const noexcept;
    std::uint32_t programId() const;

    // Adds are idempotent; removes return false when the rule was not there.
    void addDeny(const Cidr& cidr);
    bool removeDeny(const Cidr& cidr);
    void addAllow(const Cidr& cidr);
    bool removeAllow(const Cidr& cidr);
    // Deny rules first, then allow rules, each sorted; second = true for allow.
    std::vector<std::pair<Cidr, bool>> rules() const;

    // Throws std::system_error (EINVAL) on a prefix length out of range. Changing a prefix
    // length forgets every bucket (their keys are cut at the old length).
    void setSynLimit(const SynLimit& limit);
    void setListenPorts(const std::vector<std::uint16_t>& ports);
    std::vector<std::uint16_t> listenPorts() const;
    void setDropMalformed(bool drop);

    XdpPacketCounts packetCounts() const;
    static const char* actionName(unsigned action) noexcept;
    static const char* reasonName(unsigned reason) noexcept;

    // Test hooks: the LRU hash of per-prefix SYN buckets (struct sg_syn_key -> struct
    // sg_syn_state) and the one-entry array of the shared new-source budget (struct sg_syn_state).
    int synStateMapFd() const noexcept;
    int synNewSourceMapFd() const noexcept;

  private:
    struct SkeletonDeleter {
        void operator()(edge_filter_bpf* skeleton) const noexcept;
    };

    struct PrefixSet {
        const char* what;  // "xdp-deny", "xdp-allow"
        int family;
        bpf_map* all;
        bpf_map* shortTrie;
        bpf_map* buckets;
        std::uint32_t shortFlag;
        std::uint32_t longFlag;
        std::set<Cidr> rules;
        std::size_t shortCount = 0;
    };

    PrefixSet& setFor(const Cidr& cidr, bool allow);
    bool changeRule(const Cidr& cidr, bool allow, bool add);
    void rebuildBucketLocked(const PrefixSet& set, const Cidr& member);
    void writeConfigLocked();
    void forgetSynBucketsLocked();

    std::unique_ptr<edge_filter_bpf, SkeletonDeleter> skeleton_;
    mutable std::mutex mutex_;
    std::vector<PrefixSet> sets_;  // deny v4, deny v6, allow v4, allow v6
    std::set<std::uint16_t> ports_;
    SynLimit synLimit_;
    bool dropMalformed_ = true;
};

}  // namespace splicegate
