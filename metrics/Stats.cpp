#include "metrics/Stats.h"

namespace splicegate {
namespace {
class SpinGuard {
public:
    explicit SpinGuard(std::atomic_flag& flag) : flag_(flag) {
        while (flag_.test_and_set(std::memory_order_acquire)) {
        }
    }
    ~SpinGuard() { flag_.clear(std::memory_order_release); }

private:
    std::atomic_flag& flag_;
};
}  // namespace

const char* toString(RefuseReason reason) noexcept {
    switch (reason) {
        case RefuseReason::MaxConnections: return "max-connections";
        case RefuseReason::MaxConnectionsPerSource: return "max-connections-per-source";
        case RefuseReason::NoRoute: return "no-route";
        case RefuseReason::ProxyProtocol: return "proxy-protocol";
        case RefuseReason::BadClientHello: return "bad-client-hello";
        case RefuseReason::PeekTimeout: return "peek-timeout";
        case RefuseReason::Count: break;
    }
    return "unknown";
}

void WorkerStats::observeFsync(std::uint64_t nanos) noexcept {
    const auto& bounds = fsyncBucketBounds();
    auto seconds = static_cast<double>(nanos) / 1e9;
    std::size_t bucket = 0;
    while (bucket < bounds.size() && seconds > bounds[bucket]) ++bucket;
    fsyncBuckets[bucket].add(1);
    fsyncCount.add(1);
    fsyncNanos.add(nanos);
}

void RouteCounters::observeDuration(std::uint64_t nanos) noexcept {
    const auto& bounds = connectionDurationBucketBounds();
    auto seconds = static_cast<double>(nanos) / 1e9;
    std::size_t bucket = 0;
    while (bucket < bounds.size() && seconds > bounds[bucket]) ++bucket;
    durationBuckets[bucket].add(1);
    durationNanos.add(nanos);
}

std::size_t RouteIndex::indexOf(const std::string& name) {
    SpinGuard guard(lock_);
    auto found = indexes_.find(name);
    if (found != indexes_.end()) return found->second;
    if (indexes_.size() >= kMaxRoutes) return kMaxRoutes;
    auto index = indexes_.size();
    indexes_.emplace(name, index);
    return index;
}

std::vector<std::pair<std::string, std::size_t>> RouteIndex::all() const {
    SpinGuard guard(lock_);
    return {indexes_.begin(), indexes_.end()};
}

void sumWorkerStats(const std::vector<const WorkerStats*>& workers, const RouteIndex& routes,
                    StatsSnapshot& out) {
    for (const auto& [name, index] : routes.all()) {
        RouteSnapshot route;
        route.name = name;
        route.durationBucketCounts.assign(connectionDurationBucketBounds().size() + 1, 0);
        std::uint64_t durationNanos = 0;
        for (const auto* w : workers) {
            const auto& r = w->routes[index];
            for (std::size_t i = 0; i < route.durationBucketCounts.size(); ++i)
                route.durationBucketCounts[i] += r.durationBuckets[i].get();
            durationNanos += r.durationNanos.get();
            route.accepted += r.accepted.get();
            route.active += r.active.get();
            route.connectFailures += r.connectFailures.get();
            route.bytesC2u += r.bytesC2u.get();
            route.bytesU2c += r.bytesU2c.get();
            for (std::size_t i = 0; i < r.closed.size(); ++i) {
                auto reason = static_cast<CloseReason>(i);
                if (!isRefusal(reason)) route.closed[toString(reason)] += r.closed[i].get();
            }
            for (std::size_t i = 0; i < r.refused.size(); ++i)
                route.refused[toString(static_cast<RefuseReason>(i))] += r.refused[i].get();
            for (std::size_t i = 0; i < kLaneNames.size(); ++i) {
                route.laneSwitches[kLaneNames[i]] += r.laneSwitches[i].get();
                route.laneBytes[kLaneNames[i]] += r.laneBytes[i].get();
            }
        }
        for (std::size_t i = 1; i < route.durationBucketCounts.size(); ++i)  // cumulative
            route.durationBucketCounts[i] += route.durationBucketCounts[i - 1];
        route.durationSumSeconds = static_cast<double>(durationNanos) / 1e9;
        out.routes.push_back(std::move(route));
    }
    out.fsyncBucketCounts.assign(fsyncBucketBounds().size() + 1, 0);
    std::uint64_t fsyncNanos = 0;
    for (const auto* w : workers) {
        out.auditBytes += w->auditBytes.get();
        out.auditErrors["write"] += w->auditWriteErrors.get();
        out.auditErrors["sync"] += w->auditSyncErrors.get();
        out.auditLostBytes += w->auditLostBytes.get();
        for (std::size_t i = 0; i < out.fsyncBucketCounts.size(); ++i)
            out.fsyncBucketCounts[i] += w->fsyncBuckets[i].get();
        out.fsyncCount += w->fsyncCount.get();
        fsyncNanos += w->fsyncNanos.get();
        out.pipesInUse += w->pipesInUse.get();
        out.pipesIdle += w->pipesIdle.get();
        out.pipesOverflowInUse += w->pipesOverflowInUse.get();
        out.pipeCapRefusals += w->pipeCapRefusals.get();
        out.bufferRingDry += w->bufferRingDry.get();
        out.buffersInUse += w->buffersInUse.get();
    }
    for (std::size_t i = 1; i < out.fsyncBucketCounts.size(); ++i)  // cumulative, as exposed
        out.fsyncBucketCounts[i] += out.fsyncBucketCounts[i - 1];
    out.fsyncSumSeconds = static_cast<double>(fsyncNanos) / 1e9;
}

}  // namespace splicegate
