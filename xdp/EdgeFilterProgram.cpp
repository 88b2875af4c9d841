#include "xdp/EdgeFilterProgram.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <limits>
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
        if (!line.empty()) logLine(ours, concat("libbpf: ", line));
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
        throwErrno(-err, "xdp: loading the edge filter BPF program (needs CAP_BPF and "
                         "CAP_NET_ADMIN)");
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

void EdgeFilterProgram::writeConfigLocked() {
    sg_config config{};
    config.syn_interval_ns = synIntervalNs_;
    config.syn_tolerance_ns = synToleranceNs_;
    config.malformed_action = dropMalformed_ ? SG_ACTION_DROP : SG_ACTION_PASS;
    // Cidr orders by family first (AF_INET < AF_INET6): the ends of each set tell what it holds.
    auto flags = [](const std::set<Cidr>& rules, __u32 v4, __u32 v6) -> __u32 {
        if (rules.empty()) return 0;
        return (rules.begin()->family == AF_INET ? v4 : 0) |
               (rules.rbegin()->family == AF_INET6 ? v6 : 0);
    };
    config.flags = flags(deny_, SG_CFG_DENY4, SG_CFG_DENY6) | flags(allow_, SG_CFG_ALLOW4, SG_CFG_ALLOW6);
    const __u32 zero = 0;
    if (int err = bpf_map_update_elem(bpf_map__fd(skeleton_->maps.sg_cfg), &zero, &config, BPF_ANY);
        err < 0)
        throwErrno(-err, "xdp: writing the edge filter's config map");
}

bool EdgeFilterProgram::changeRule(const Cidr& cidr, bool allow, bool add) {
    if (cidr.family != AF_INET && cidr.family != AF_INET6)
        throw std::system_error(EAFNOSUPPORT, std::system_category(),
                                "xdp: rule with an address family other than IPv4 or IPv6");
    const char* what = allow ? "xdp-allow " : "xdp-deny ";
    const bool v4 = cidr.family == AF_INET;
    bpf_map* trie = allow ? (v4 ? skeleton_->maps.sg_allow_v4 : skeleton_->maps.sg_allow_v6)
                          : (v4 ? skeleton_->maps.sg_deny_v4 : skeleton_->maps.sg_deny_v6);
    sg_lpm_v4_key key4{};
    sg_lpm_v6_key key6{};
    void* key = v4 ? static_cast<void*>(&key4) : static_cast<void*>(&key6);
    key4.prefixlen = key6.prefixlen = std::min(cidr.prefixLength, cidr.maxPrefixLength());
    std::memcpy(key4.addr, cidr.address.data(), sizeof(key4.addr));
    std::memcpy(key6.addr, cidr.address.data(), sizeof(key6.addr));

    std::lock_guard lock(mutex_);
    std::set<Cidr>& rules = allow ? allow_ : deny_;
    if (add) {
        if (rules.count(cidr)) return false;
        // Trie entry first, then the flag: the program never sees a flag without its entries.
        if (int err = bpf_map_update_elem(bpf_map__fd(trie), key, &kRulePresent, BPF_ANY); err < 0)
            throwErrno(-err, concat(what, cidr, ": adding to the ", allow ? "allow" : "deny",
                                    " trie"));
        rules.insert(cidr);
    } else {
        if (!rules.count(cidr)) return false;
        int err = bpf_map_delete_elem(bpf_map__fd(trie), key);
        if (err < 0 && err != -ENOENT)
            throwErrno(-err, concat(what, cidr, ": removing from the ", allow ? "allow" : "deny",
                                    " trie"));
        rules.erase(cidr);
    }
    writeConfigLocked();
    return true;
}

void EdgeFilterProgram::addDeny(const Cidr& cidr) { changeRule(cidr, false, true); }
bool EdgeFilterProgram::removeDeny(const Cidr& cidr) { return changeRule(cidr, false, false); }
void EdgeFilterProgram::addAllow(const Cidr& cidr) { changeRule(cidr, true, true); }
bool EdgeFilterProgram::removeAllow(const Cidr& cidr) { return changeRule(cidr, true, false); }

std::vector<std::pair<Cidr, bool>> EdgeFilterProgram::rules() const {
    std::lock_guard lock(mutex_);
    std::vector<std::pair<Cidr, bool>> result;
    result.reserve(deny_.size() + allow_.size());
    for (const Cidr& cidr : deny_) result.emplace_back(cidr, false);
    for (const Cidr& cidr : allow_) result.emplace_back(cidr, true);
    return result;
}

void EdgeFilterProgram::setSynLimit(std::uint32_t rate, std::uint32_t burst) {
    std::lock_guard lock(mutex_);
    if (rate == 0) {
        synIntervalNs_ = 0;
        synToleranceNs_ = 0;
    } else {
        // GCRA: one token per interval; a source may run (depth - 1) intervals ahead, so `depth`
        // SYNs pass back to back. Rates above 1e9/s round to 1 ns (no practical limit).
        const std::uint64_t interval = std::max<std::uint64_t>(1'000'000'000ULL / rate, 1);
        const std::uint64_t depth = std::max<std::uint64_t>(burst == 0 ? rate : burst, 1);
        synIntervalNs_ = interval;
        synToleranceNs_ = (depth - 1) * interval;
    }
    writeConfigLocked();
}

void EdgeFilterProgram::setDropMalformed(bool drop) {
    std::lock_guard lock(mutex_);
    dropMalformed_ = drop;
    writeConfigLocked();
}

void EdgeFilterProgram::setListenPorts(const std::vector<std::uint16_t>& ports) {
    std::set<std::uint16_t> wanted(ports.begin(), ports.end());
    wanted.erase(0);
    if (wanted.size() > SG_MAX_LISTEN_PORTS)
        throw std::system_error(E2BIG, std::system_category(),
                                concat("xdp: ", wanted.size(), " listen ports, at most ",
                                       SG_MAX_LISTEN_PORTS));
    std::lock_guard lock(mutex_);
    const int fd = bpf_map__fd(skeleton_->maps.sg_ports);
    // Additions before removals: a port kept across a reload is never missing for a moment.
    for (std::uint16_t port : wanted) {
        if (ports_.count(port)) continue;
        const __u16 key = port;
        if (int err = bpf_map_update_elem(fd, &key, &kRulePresent, BPF_ANY); err < 0)
            throwErrno(-err, concat("xdp: adding listen port ", port));
        ports_.insert(port);
    }
    for (auto it = ports_.begin(); it != ports_.end();) {
        if (wanted.count(*it)) {
            ++it;
            continue;
        }
        const __u16 key = *it;
        if (int err = bpf_map_delete_elem(fd, &key); err < 0 && err != -ENOENT)
            throwErrno(-err, concat("xdp: removing listen port ", *it));
        it = ports_.erase(it);
    }
}

std::vector<std::uint16_t> EdgeFilterProgram::listenPorts() const {
    std::lock_guard lock(mutex_);
    return {ports_.begin(), ports_.end()};
}

const char* EdgeFilterProgram::actionName(unsigned action) noexcept {
    switch (action) {
        case SG_ACTION_PASS: return "pass";
        case SG_ACTION_DROP: return "drop";
    }
    return "unknown";
}

const char* EdgeFilterProgram::reasonName(unsigned reason) noexcept {
    switch (reason) {
        case SG_REASON_NO_MATCH: return "no_match";
        case SG_REASON_NOT_IP: return "not_ip";
        case SG_REASON_NOT_TCP: return "not_tcp";
        case SG_REASON_FRAGMENT: return "fragment";
        case SG_REASON_MALFORMED: return "malformed";
        case SG_REASON_DENY: return "deny";
        case SG_REASON_SYN_RATE: return "syn_rate";
        case SG_REASON_ALLOW: return "allow";
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
        {SG_ACTION_DROP, SG_REASON_SYN_RATE},
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
