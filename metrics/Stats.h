#pragma once
// Counters of the data path and what a scrape reads of them.
//
// Each worker owns one WorkerStats and is its only writer (relaxed atomic stores, no locks, no
// cache line shared with another worker); a scrape sums all workers' blocks into a StatsSnapshot.
// Routes get a stable small index (RouteIndex) so counters live in fixed arrays that a reload
// never reallocates under a concurrent scrape.
#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "datapath/CloseReason.h"

namespace splicegate {

constexpr std::size_t kMaxRoutes = 256;

// The last four: closed while its PROXY header or ClientHello was read (relay/Preamble.h).
enum class RefuseReason : std::uint8_t {
    MaxConnections,
    MaxConnectionsPerSource,
    NoRoute,
    ProxyProtocol,
    BadClientHello,
    PeekTimeout,
    Count
};
const char* toString(RefuseReason reason) noexcept;

// A counter written by one thread, read by others.
struct Counter {
    std::atomic<std::uint64_t> value{0};
    void add(std::uint64_t n) noexcept {
        value.store(value.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    }
    void sub(std::uint64_t n) noexcept {
        value.store(value.load(std::memory_order_relaxed) - n, std::memory_order_relaxed);
    }
    void set(std::uint64_t n) noexcept { value.store(n, std::memory_order_relaxed); }
    std::uint64_t get() const noexcept { return value.load(std::memory_order_relaxed); }
};

// Upper bounds (seconds) of the per-route connection duration histogram's buckets, from a
// request-response exchange to a long-lived session; +Inf is implicit.
inline constexpr std::array<double, 14> kConnectionDurationBucketBounds = {
    0.005, 0.025, 0.1, 0.5, 1, 5, 15, 60, 300, 900, 1800, 3600, 14400, 86400};
inline const std::vector<double>& connectionDurationBucketBounds() {
    static const std::vector<double> bounds(kConnectionDurationBucketBounds.begin(),
                                            kConnectionDurationBucketBounds.end());
    return bounds;
}

// Upper bounds (seconds) of the per-upstream connect time histogram (handshake of the attempt
// that succeeded); +Inf is implicit.
inline constexpr std::array<double, 14> kUpstreamConnectBucketBounds = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
inline const std::vector<double>& upstreamConnectBucketBounds() {
    static const std::vector<double> bounds(kUpstreamConnectBucketBounds.begin(),
                                            kUpstreamConnectBucketBounds.end());
    return bounds;
}

struct RouteCounters {
    Counter accepted;
    Counter active;
    Counter connectFailures;
    Counter bytesC2u;
    Counter bytesU2c;
    std::array<Counter, static_cast<std::size_t>(CloseReason::Count)> closed;
    std::array<Counter, static_cast<std::size_t>(RefuseReason::Count)> refused;
    // Indexed by lane: 0 buffer, 1 splice (datapath/LanePolicy.h LaneKind).
    std::array<Counter, 2> laneSwitches;  // by the lane switched to
    std::array<Counter, 2> laneBytes;     // forwarded while in that lane
    // Connection lifetimes, accept to release (the last one is +Inf).
    std::array<Counter, kConnectionDurationBucketBounds.size() + 1> durationBuckets;
    Counter durationNanos;

    void observeDuration(std::uint64_t nanos) noexcept;
};
inline constexpr std::array<const char*, 2> kLaneNames = {"buffer", "splice"};

// Upper bounds (seconds) of the fsync latency histogram's buckets; +Inf is implicit.
inline constexpr std::array<double, 12> kFsyncBucketBounds = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5};
inline const std::vector<double>& fsyncBucketBounds() {
    static const std::vector<double> bounds(kFsyncBucketBounds.begin(), kFsyncBucketBounds.end());
    return bounds;
}

struct alignas(64) WorkerStats {
    std::array<RouteCounters, kMaxRoutes> routes;
    Counter auditBytes;
    Counter auditWriteErrors;
    Counter auditSyncErrors;
    Counter auditLostBytes;
    std::array<Counter, kFsyncBucketBounds.size() + 1> fsyncBuckets;  // the last is +Inf
    Counter fsyncCount;
    Counter fsyncNanos;
    Counter pipesInUse;
    Counter pipesIdle;
    Counter pipesOverflowInUse;
    Counter pipeCapRefusals;  // --lane auto: pipes the pool's cap refused
    Counter bufferRingDry;  // buffer lane: recvs that found the provided buffer ring empty
    Counter buffersInUse;   // buffer lane: provided buffers held (received, not yet sent)

    void observeFsync(std::uint64_t nanos) noexcept;
};

struct RouteSnapshot {
    std::string name;
    std::uint64_t accepted = 0, active = 0, connectFailures = 0, bytesC2u = 0, bytesU2c = 0;
    std::map<std::string, std::uint64_t> closed;   // by reason
    std::map<std::string, std::uint64_t> refused;  // by reason
    std::map<std::string, std::uint64_t> laneSwitches;  // by lane switched to
    std::map<std::string, std::uint64_t> laneBytes;     // by lane
    std::vector<std::uint64_t> durationBucketCounts;  // cumulative per bound, then +Inf
    double durationSumSeconds = 0;
};

// One upstream of one route: health as the relay's UpstreamPool sees it.
struct UpstreamSnapshot {
    std::string route;
    std::string upstream;  // as configured
    bool up = false;        // healthy (resolved, connects succeed), whether disabled or not
    bool disabled = false;  // taken out by the operator (maintenance)
    bool backup = false;
    unsigned weight = 1;
    std::uint64_t active = 0;
    std::uint64_t connectFailures = 0;      // client connections' connect attempts
    std::uint64_t healthCheckFailures = 0;  // active health checks
    std::uint64_t wentDown = 0, cameUp = 0;  // state transitions
    std::uint64_t bytesC2u = 0, bytesU2c = 0;  // of its closed connections
    std::vector<std::uint64_t> connectBucketCounts;  // cumulative per bound, then +Inf
    double connectSumSeconds = 0;
    // "up", "down" or "disabled" (disabled wins: it is what the operator asked for).
    const char* state() const noexcept { return disabled ? "disabled" : up ? "up" : "down"; }
};

struct StatsSnapshot {
    std::string version;
    std::vector<RouteSnapshot> routes;
    std::uint64_t auditBytes = 0;
    std::map<std::string, std::uint64_t> auditErrors;  // by kind: write, sync
    std::uint64_t auditLostBytes = 0;
    std::vector<std::uint64_t> fsyncBucketCounts;  // cumulative per bound, then +Inf
    std::uint64_t fsyncCount = 0;
    double fsyncSumSeconds = 0;
    std::uint64_t pipesInUse = 0, pipesIdle = 0, pipesOverflowInUse = 0, pipeCapRefusals = 0;
    std::uint64_t pipeBudgetBytes = 0, pipeBudgetUsedBytes = 0;
    std::uint64_t bufferRingDry = 0, buffersInUse = 0;
    // {action, reason} -> packets (XDP); {command, result} -> requests (admin)
    std::map<std::pair<std::string, std::string>, std::uint64_t> xdpPackets;
    std::map<std::pair<std::string, std::string>, std::uint64_t> adminRequests;
    std::vector<UpstreamSnapshot> upstreams;
};

// Route name <-> stable counter index, shared by all workers. Indexes are never reused for
// another name, so counters of a removed route stay attached to its name.
class RouteIndex {
public:
    // Returns the index of `name`, assigning the next free one; kMaxRoutes when full.
    std::size_t indexOf(const std::string& name);
    std::vector<std::pair<std::string, std::size_t>> all() const;

private:
    mutable std::atomic_flag lock_ = ATOMIC_FLAG_INIT;
    std::map<std::string, std::size_t> indexes_;
};

// Sums the workers' blocks (and the route names) into a snapshot; the caller adds the rest.
void sumWorkerStats(const std::vector<const WorkerStats*>& workers, const RouteIndex& routes,
                    StatsSnapshot& out);

}  // namespace splicegate
