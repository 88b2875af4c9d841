#include "xdp/EdgeFilterProgram.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "common/Error.h"
#include "common/Log.h"
#include "edge_filter_bpf.skel.h"
#include "xdp/edge_filter_shared.h"

namespace splicegate {
namespace {

__attribute__((format(printf, 2, 0))) int libbpfPrint(libbpf_print_level level, const char* format,
                                                      va_list args) {
    // One level quieter than libbpf's own: its warnings are often expected (probing features).
    if (level == LIBBPF_DEBUG) return 0;
    const LogLevel ours = level == LIBBPF_WARN ? LogLevel::Info : LogLevel::Debug;
    if (ours < logLevel()) return 0;
    va_list copy;
    va_copy(copy, args);
    int length = std::vsnprintf(nullptr, 0, format, copy);
    va_end(copy);
    if (length <= 0) return 0;
    std::string text(static_cast<std::size_t>(length) + 1, '\0');
    std::vsnprintf(text.data(), text.size(), format, args);
    text.resize(static_cast<std::size_t>(length));
    // Our log is one line per event; a verifier log arrives as one multi-line message.
    std::string_view rest = text;
    while (!rest.empty()) {
        auto newline = rest.find('\n');
        std::string_view line = rest.substr(0, newline);
        if (!line.empty())
            logLine(ours,
                    line.rfind("libbpf: ", 0) == 0 ? std::string(line) : concat("libbpf: ", line));
        if (newline == std::string_view::npos) break;
        rest.remove_prefix(newline + 1);
    }
    return length;
}

void routeLibbpfLog() {
    static std::once_flag once;
    std::call_once(once, [] { libbpf_set_print(libbpfPrint); });
}

constexpr std::uint8_t kRulePresent = 1;

}  // namespace

void EdgeFilterProgram::SkeletonDeleter::operator()(edge_filter_bpf* skeleton) const noexcept {
    edge_filter_bpf__destroy(skeleton);
}

EdgeFilterProgram::EdgeFilterProgram() {
    routeLibbpfLog();
    skeleton_.reset(edge_filter_bpf__open());
    if (!skeleton_) throwErrno(errno, "xdp: opening the edge filter BPF object");
    if (int err = edge_filter_bpf__load(skeleton_.get()); err < 0)
        throwErrno(-err,
                   "xdp: loading the edge filter BPF program (needs CAP_BPF, CAP_PERFMON "
                   "and CAP_NET_ADMIN)");
    auto& maps = skeleton_->maps;
    auto add = [this](const char* what, int family, bpf_map* all, bpf_map* shortTrie,
                      bpf_map* buckets, std::uint32_t shortFlag, std::uint32_t longFlag) {
        sets_.push_back({what, family, all, shortTrie, buckets, shortFlag, longFlag, {}, 0});
    };
    add("xdp-deny", AF_INET, maps.sg_deny4_all, maps.sg_deny4_short, maps.sg_deny4_bkt,
        SG_CFG_DENY4_SHORT, SG_CFG_DENY4_LONG);
    add("xdp-deny", AF_INET6, maps.sg_deny6_all, maps.sg_deny6_short, maps.sg_deny6_bkt,
        SG_CFG_DENY6_SHORT, SG_CFG_DENY6_LONG);
    add("xdp-allow", AF_INET, maps.sg_allow4_all, maps.sg_allow4_short, maps.sg_allow4_bkt,
        SG_CFG_ALLOW4_SHORT, SG_CFG_ALLOW4_LONG);
    add("xdp-allow", AF_INET6, maps.sg_allow6_all, maps.sg_allow6_short, maps.sg_allow6_bkt,
        SG_CFG_ALLOW6_SHORT, SG_CFG_ALLOW6_LONG);
    std::lock_guard lock(mutex_);
    writeConfigLocked();
}

EdgeFilterProgram::~EdgeFilterProgram() = default;

int EdgeFilterProgram::programFd() const noexcept {
    return bpf_program__fd(skeleton_->progs.splicegate_xdp);
}

std::uint32_t EdgeFilterProgram::programId() const {
    bpf_prog_info info{};
    __u32 length = sizeof(info);
    if (int err = bpf_obj_get_info_by_fd(programFd(), &info, &length); err < 0)
        throwErrno(-err, "xdp: reading the edge filter's program info");
    return info.id;
}

int EdgeFilterProgram::synStateMapFd() const noexcept {
    return bpf_map__fd(skeleton_->maps.sg_syn);
}

int EdgeFilterProgram::synNewSourceMapFd() const noexcept {
    return bpf_map__fd(skeleton_->maps.sg_syn_new);
}

namespace {

// A token bucket as the program's GCRA sees it: one token per interval; a bucket may run
// (depth - 1) intervals ahead, so `depth` SYNs pass back to back. Rates above 1e9/s round to
// 1 ns (no practical limit).
struct Gcra {
    std::uint64_t intervalNs = 0;  // 0 = no limit
    std::uint64_t toleranceNs = 0;
    std::uint32_t depth = 0;
};

Gcra gcra(std::uint32_t rate, std::uint32_t burst) {
    if (rate == 0) return {};
    const std::uint64_t interval = std::max<std::uint64_t>(1'000'000'000ULL / rate, 1);
    const std::uint32_t depth = std::max<std::uint32_t>(burst == 0 ? rate : burst, 1);
    return {interval, (depth - 1) * interval, depth};
}

// The mask over struct sg_syn_key's two __u64 halves that keeps the first `bits` bits, laid out
// as the program reads it (the key's bytes copied into the halves).
void prefixMask(unsigned bits, __u64 (&mask)[2]) {
    std::array<std::uint8_t, 16> bytes{};
    for (unsigned bit = 0; bit < bits; ++bit)
        bytes[bit / 8] = static_cast<std::uint8_t>(bytes[bit / 8] | (0x80u >> (bit % 8)));
    std::memcpy(mask, bytes.data(), sizeof(mask));
}

}  // namespace

void EdgeFilterProgram::writeConfigLocked() {
    sg_config config{};
    const Gcra perPrefix = gcra(synLimit_.rate, synLimit_.burst);
    const Gcra newSources = gcra(synLimit_.newSourceRate, synLimit_.newSourceBurst);
    config.syn_interval_ns = perPrefix.intervalNs;
    config.syn_tolerance_ns = perPrefix.toleranceNs;
    config.syn_burst = perPrefix.depth;
    config.syn_new_interval_ns = newSources.intervalNs;
    config.syn_new_tolerance_ns = newSources.toleranceNs;
    // IPv4 keys are mapped (::ffff:a.b.c.d): the mask keeps the 96 bits before the address.
    prefixMask(96 + synLimit_.prefixV4, config.syn_mask_v4);
    prefixMask(synLimit_.prefixV6, config.syn_mask_v6);
    config.malformed_action = dropMalformed_ ? SG_ACTION_DROP : SG_ACTION_PASS;
    for (const PrefixSet& set : sets_) {
        if (set.shortCount > 0) config.flags |= set.shortFlag;
        if (set.rules.size() > set.shortCount) config.flags |= set.longFlag;
    }
    const __u32 zero = 0;
    if (int err = bpf_map_update_elem(bpf_map__fd(skeleton_->maps.sg_cfg), &zero, &config, BPF_ANY);
        err < 0)
        throwErrno(-err, "xdp: writing the edge filter's config map");
}

namespace {

unsigned bucketBytes(int family) {
    return family == AF_INET ? SG_V4_BUCKET_BYTES : SG_V6_BUCKET_BYTES;
}

bool isShort(const Cidr& cidr) {
    return cidr.prefixLength < bucketBytes(cidr.family) * 8;
}

std::array<std::uint8_t, 16> maskOf(const Cidr& cidr) {
    std::array<std::uint8_t, 16> mask{};
    for (unsigned bit = 0; bit < cidr.prefixLength; ++bit)
        mask[bit / 8] = static_cast<std::uint8_t>(mask[bit / 8] | (0x80u >> (bit % 8)));
    return mask;
}

// The trie key of `cidr` (struct sg_lpm_v4_key or sg_lpm_v6_key) in `storage`.
void* trieKey(const Cidr& cidr, sg_lpm_v6_key& storage) {
    storage = {};
    storage.prefixlen = std::min(cidr.prefixLength, cidr.maxPrefixLength());
    std::memcpy(storage.addr, cidr.address.data(), cidr.family == AF_INET ? 4 : 16);
    // sg_lpm_v4_key is a prefix of sg_lpm_v6_key's layout: {__u32 prefixlen; __u8 addr[]}.
    static_assert(offsetof(sg_lpm_v4_key, addr) == offsetof(sg_lpm_v6_key, addr));
    return &storage;
}

}  // namespace

EdgeFilterProgram::PrefixSet& EdgeFilterProgram::setFor(const Cidr& cidr, bool allow) {
    if (cidr.family != AF_INET && cidr.family != AF_INET6)
        throw std::system_error(EAFNOSUPPORT, std::system_category(),
                                "xdp: rule with an address family other than IPv4 or IPv6");
    return sets_[(allow ? 2 : 0) + (cidr.family == AF_INET ? 0 : 1)];
}

// Rewrites the bucket `member` falls in from the set's long prefixes under it. Cidr orders by
// family, then address bytes, so they are one contiguous range of the set.
void EdgeFilterProgram::rebuildBucketLocked(const PrefixSet& set, const Cidr& member) {
    const unsigned bytes = bucketBytes(set.family);
    __u32 key = 0;
    std::memcpy(&key, member.address.data(), bytes);
    Cidr first{};
    first.family = set.family;
    std::copy_n(member.address.begin(), bytes, first.address.begin());
    std::vector<const Cidr*> members;
    for (auto it = set.rules.lower_bound(first);
         it != set.rules.end() &&
         std::equal(first.address.begin(), first.address.begin() + bytes, it->address.begin());
         ++it) {
        if (!isShort(*it)) members.push_back(&*it);
    }
    const int fd = bpf_map__fd(set.buckets);
    int err = 0;
    if (members.empty()) {
        err = bpf_map_delete_elem(fd, &key);
        if (err == -ENOENT) err = 0;
    } else if (set.family == AF_INET) {
        sg_v4_bucket bucket{};
        bucket.count = static_cast<__u32>(members.size());
        if (members.size() > SG_V4_BUCKET_SLOTS) {
            bucket.count = SG_BUCKET_OVERFLOW;
        } else {
            for (std::size_t i = 0; i < members.size(); ++i) {
                const auto mask = maskOf(*members[i]);
                std::memcpy(&bucket.slot[i].addr, members[i]->address.data(), 4);
                std::memcpy(&bucket.slot[i].mask, mask.data(), 4);
            }
        }
        err = bpf_map_update_elem(fd, &key, &bucket, BPF_ANY);
    } else {
        sg_v6_bucket bucket{};
        bucket.count = static_cast<__u32>(members.size());
        if (members.size() > SG_V6_BUCKET_SLOTS) {
            bucket.count = SG_BUCKET_OVERFLOW;
        } else {
            for (std::size_t i = 0; i < members.size(); ++i) {
                const auto mask = maskOf(*members[i]);
                std::memcpy(bucket.slot[i].addr, members[i]->address.data(), 16);
                std::memcpy(bucket.slot[i].mask, mask.data(), 16);
            }
        }
        err = bpf_map_update_elem(fd, &key, &bucket, BPF_ANY);
    }
    if (err < 0) throwErrno(-err, concat(set.what, " ", member, ": updating its bucket"));
}

bool EdgeFilterProgram::changeRule(const Cidr& cidr, bool allow, bool add) {
    std::lock_guard lock(mutex_);
    PrefixSet& set = setFor(cidr, allow);
    sg_lpm_v6_key keyStorage;
    void* key = trieKey(cidr, keyStorage);
    const bool shortPrefix = isShort(cidr);
    const int allFd = bpf_map__fd(set.all);
    const int shortFd = bpf_map__fd(set.shortTrie);
    if (add) {
        if (set.rules.count(cidr)) return false;
        // Maps first, then the flags: the program never sees a flag without its entries.
        if (int err = bpf_map_update_elem(allFd, key, &kRulePresent, BPF_ANY); err < 0)
            throwErrno(-err, concat(set.what, " ", cidr, ": adding to its trie"));
        try {
            if (shortPrefix) {
                if (int err = bpf_map_update_elem(shortFd, key, &kRulePresent, BPF_ANY); err < 0)
                    throwErrno(-err, concat(set.what, " ", cidr, ": adding to its short trie"));
            }
            set.rules.insert(cidr);
            if (shortPrefix) ++set.shortCount;
            if (!shortPrefix) rebuildBucketLocked(set, cidr);
            writeConfigLocked();
        } catch (...) {
            if (set.rules.erase(cidr) && shortPrefix) --set.shortCount;
            if (!shortPrefix) {
                try {
                    rebuildBucketLocked(set, cidr);
                } catch (...) {
                }
            }
            bpf_map_delete_elem(shortFd, key);
            bpf_map_delete_elem(allFd, key);
            throw;
        }
        return true;
    }
    if (!set.rules.erase(cidr)) return false;
    if (shortPrefix) --set.shortCount;
    // Flags and bucket first, then the tries: nothing points at an entry that is gone.
    if (!shortPrefix) rebuildBucketLocked(set, cidr);
    writeConfigLocked();
    int err = shortPrefix ? bpf_map_delete_elem(shortFd, key) : 0;
    if (err == 0 || err == -ENOENT) err = bpf_map_delete_elem(allFd, key);
    if (err < 0 && err != -ENOENT)
        throwErrno(-err, concat(set.what, " ", cidr, ": removing from its tries"));
    return true;
}

void EdgeFilterProgram::addDeny(const Cidr& cidr) {
    changeRule(cidr, false, true);
}
bool EdgeFilterProgram::removeDeny(const Cidr& cidr) {
    return changeRule(cidr, false, false);
}
void EdgeFilterProgram::addAllow(const Cidr& cidr) {
    changeRule(cidr, true, true);
}
bool EdgeFilterProgram::removeAllow(const Cidr& cidr) {
    return changeRule(cidr, true, false);
}

std::vector<std::pair<Cidr, bool>> EdgeFilterProgram::rules() const {
    std::lock_guard lock(mutex_);
    std::vector<std::pair<Cidr, bool>> result;
    for (std::size_t i = 0; i < sets_.size(); ++i)
        for (const Cidr& cidr : sets_[i].rules) result.emplace_back(cidr, i >= 2);
    return result;
}

void EdgeFilterProgram::setSynLimit(const SynLimit& limit) {
    if (limit.prefixV4 < 1 || limit.prefixV4 > 32)
        throw std::system_error(EINVAL, std::system_category(),
                                concat("xdp-syn-prefix-v4 ", limit.prefixV4, ": not in 1..32"));
    if (limit.prefixV6 < 1 || limit.prefixV6 > 128)
        throw std::system_error(EINVAL, std::system_category(),
                                concat("xdp-syn-prefix-v6 ", limit.prefixV6, ": not in 1..128"));
    std::lock_guard lock(mutex_);
    const bool regroup =
        limit.prefixV4 != synLimit_.prefixV4 || limit.prefixV6 != synLimit_.prefixV6;
    const SynLimit previous = synLimit_;
    synLimit_ = limit;
    try {
        writeConfigLocked();
    } catch (...) {
        synLimit_ = previous;
        throw;
    }
    if (regroup) forgetSynBucketsLocked();
}

// After the config: a SYN racing this sees the new masks and at worst a stale bucket that is
// deleted next, which costs it nothing but a new bucket from the shared budget.
void EdgeFilterProgram::forgetSynBucketsLocked() {
    const int fd = bpf_map__fd(skeleton_->maps.sg_syn);
    sg_syn_key key{};
    while (bpf_map_get_next_key(fd, nullptr, &key) == 0) {
        if (int err = bpf_map_delete_elem(fd, &key); err < 0 && err != -ENOENT)
            throwErrno(-err, "xdp: clearing the SYN buckets after a prefix length change");
    }
}

void EdgeFilterProgram::setDropMalformed(bool drop) {
    std::lock_guard lock(mutex_);
    dropMalformed_ = drop;
    writeConfigLocked();
}

void EdgeFilterProgram::setListenPorts(const std::vector<std::uint16_t>& ports) {
    std::set<std::uint16_t> wanted(ports.begin(), ports.end());
    wanted.erase(0);
    sg_ports bitmap{};
    for (std::uint16_t port : wanted) bitmap.bits[port / 64] |= std::uint64_t{1} << (port % 64);
    std::lock_guard lock(mutex_);
    // One whole-value write: a packet racing it sees every kept port's bit set in both versions.
    const __u32 zero = 0;
    if (int err =
            bpf_map_update_elem(bpf_map__fd(skeleton_->maps.sg_ports), &zero, &bitmap, BPF_ANY);
        err < 0)
        throwErrno(-err, "xdp: writing the listen ports");
    ports_ = std::move(wanted);
}

std::vector<std::uint16_t> EdgeFilterProgram::listenPorts() const {
    std::lock_guard lock(mutex_);
    return {ports_.begin(), ports_.end()};
}

const char* EdgeFilterProgram::actionName(unsigned action) noexcept {
    switch (action) {
        case SG_ACTION_PASS:
            return "pass";
        case SG_ACTION_DROP:
            return "drop";
    }
    return "unknown";
}

const char* EdgeFilterProgram::reasonName(unsigned reason) noexcept {
    switch (reason) {
        case SG_REASON_NO_MATCH:
            return "no_match";
        case SG_REASON_NOT_IP:
            return "not_ip";
        case SG_REASON_NOT_TCP:
            return "not_tcp";
        case SG_REASON_FRAGMENT:
            return "fragment";
        case SG_REASON_MALFORMED:
            return "malformed";
        case SG_REASON_DENY:
            return "deny";
        case SG_REASON_SYN_RATE:
            return "syn_rate";
        case SG_REASON_ALLOW:
            return "allow";
        case SG_REASON_SYN_NEW_SOURCE:
            return "syn_new_source";
    }
    return "unknown";
}

XdpPacketCounts EdgeFilterProgram::packetCounts() const {
    // The pairs the program can produce; reported even at zero.
    static constexpr std::pair<unsigned, unsigned> kPossible[] = {
        {SG_ACTION_PASS, SG_REASON_NO_MATCH},  {SG_ACTION_PASS, SG_REASON_NOT_IP},
        {SG_ACTION_PASS, SG_REASON_NOT_TCP},   {SG_ACTION_PASS, SG_REASON_FRAGMENT},
        {SG_ACTION_PASS, SG_REASON_MALFORMED}, {SG_ACTION_PASS, SG_REASON_ALLOW},
        {SG_ACTION_DROP, SG_REASON_MALFORMED}, {SG_ACTION_DROP, SG_REASON_DENY},
        {SG_ACTION_DROP, SG_REASON_SYN_RATE},  {SG_ACTION_DROP, SG_REASON_SYN_NEW_SOURCE},
    };
    const int cpus = libbpf_num_possible_cpus();
    if (cpus <= 0) throwErrno(-cpus, "xdp: counting possible CPUs");
    std::vector<std::uint64_t> perCpu(static_cast<std::size_t>(cpus));
    const int fd = bpf_map__fd(skeleton_->maps.sg_counters);
    XdpPacketCounts counts;
    for (auto [action, reason] : kPossible) counts[{actionName(action), reasonName(reason)}] = 0;
    for (__u32 slot = 0; slot < SG_COUNTER_SLOTS; ++slot) {
        if (int err = bpf_map_lookup_elem(fd, &slot, perCpu.data()); err < 0)
            throwErrno(-err, "xdp: reading the edge filter's counters");
        std::uint64_t sum = 0;
        for (std::uint64_t value : perCpu) sum += value;
        if (sum == 0) continue;
        counts[{actionName(slot / SG_REASON_COUNT), reasonName(slot % SG_REASON_COUNT)}] += sum;
    }
    return counts;
}

}  // namespace splicegate
