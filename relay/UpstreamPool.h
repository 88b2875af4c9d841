#pragma once
// The upstreams of one route and what is known of their health.
//
// Passive health: an upstream whose connects fail `failuresToDown` times in a row is down and
// skipped; after a backoff (doubling up to a cap) one real connection is let through as a probe,
// and its result decides. Names that cannot be resolved yet count as down and are retried with
// backoff; resolved names are re-resolved periodically. Optional active TCP checks connect to
// each upstream at an interval and report like a connection would.
//
// Balancing: smooth weighted round robin (nginx's) over the upstreams that are not `backup`,
// not disabled and up (or due for a probe); the backups the same way only while none of those
// is. An upstream disabled by the operator (maintenance) gets no new connection; its
// established ones go on.
//
// Thread-safety: pick()/report() are called by workers, the due*/set* calls by the
// UpstreamMonitor thread, snapshot() by a scrape; one mutex, taken once per connect attempt.
// The pool only decides; resolving and connecting are the caller's.
#include <chrono>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/SocketAddress.h"
#include "metrics/Stats.h"
#include "relay/Config.h"

namespace splicegate {

// What is counted of one upstream, across reloads that keep it.
struct UpstreamCounters {
    std::atomic<std::uint64_t> active{0};
    std::atomic<std::uint64_t> connectFailures{0};      // client connections' connects only
    std::atomic<std::uint64_t> healthCheckFailures{0};  // active checks
    std::atomic<std::uint64_t> wentDown{0};             // up -> down transitions
    std::atomic<std::uint64_t> cameUp{0};               // down -> up transitions
    std::atomic<std::uint64_t> bytesC2u{0};             // of closed connections, at close
    std::atomic<std::uint64_t> bytesU2c{0};
    // Connect times of established connections (kUpstreamConnectBucketBounds, then +Inf).
    std::array<std::atomic<std::uint64_t>, kUpstreamConnectBucketBounds.size() + 1> connectBuckets{};
    std::atomic<std::uint64_t> connectNanos{0};
};

struct UpstreamHealthPolicy {
    unsigned failuresToDown = 3;
    std::chrono::milliseconds downBackoffInitial{1000};
    std::chrono::milliseconds downBackoffMax{30000};
    // A probe whose result never came (its client left first) stops blocking after this.
    std::chrono::milliseconds probeTimeout{10000};
    std::chrono::milliseconds resolveRetryInitial{1000};
    std::chrono::milliseconds resolveRetryMax{60000};
    std::chrono::milliseconds reresolveInterval{30000};
    std::chrono::milliseconds activeCheckInterval{0};  // 0 = no active checks
};

class UpstreamPool {
  public:
    using Clock = std::chrono::steady_clock;

    struct Pick {
        std::uint32_t upstream = 0;
        SocketAddress address;
    };
    struct DueResolution {
        std::uint32_t upstream = 0;
        std::string text;
    };
    struct DueCheck {
        std::uint32_t upstream = 0;
        SocketAddress address;
    };

    // `previous`: the pool this one replaces on reload; upstreams with the same text keep their
    // state and counters.
    UpstreamPool(std::string route, const std::vector<UpstreamConfig>& upstreams,
                 UpstreamHealthPolicy policy, const UpstreamPool* previous = nullptr,
                 Clock::time_point now = Clock::now());
    UpstreamPool(const UpstreamPool&) = delete;
    UpstreamPool& operator=(const UpstreamPool&) = delete;

    // The next upstream for a connect attempt (weighted round robin, backups last, see above).
    // When none is up, any resolved one that is not disabled (a route with every upstream down
    // still tries, as Envoy's panic mode does). nullopt: none has an address or all are disabled.
    std::optional<Pick> pick(Clock::time_point now = Clock::now());
    // The outcome of a client connection's connect to an address pick() gave.
    void report(std::uint32_t upstream, bool connected, Clock::time_point now = Clock::now());
    // The outcome of an active health check (counted apart from the connections' failures).
    void reportCheck(std::uint32_t upstream, bool connected, Clock::time_point now = Clock::now());
    // A connection to `upstream` was established after a handshake of `connectTime` / has
    // closed after relaying these bytes (active count, connect time histogram, bytes).
    void connectionOpened(std::uint32_t upstream, std::chrono::nanoseconds connectTime) noexcept;
    void connectionClosed(std::uint32_t upstream, std::uint64_t bytesC2u,
                          std::uint64_t bytesU2c) noexcept;

    // Maintenance (splicegatectl upstream disable|enable): false when no upstream of this route
    // is configured as `text`.
    bool setDisabled(const std::string& text, bool disabled);

    // Monitor side.
    std::vector<DueResolution> dueResolutions(Clock::time_point now);
    // `addresses` empty with `error` set: the name did not resolve (retried with backoff).
    void setResolved(std::uint32_t upstream, std::vector<SocketAddress> addresses,
                     const std::string& error, Clock::time_point now);
    std::vector<DueCheck> dueChecks(Clock::time_point now);

    const std::string& route() const noexcept { return route_; }
    std::size_t size() const noexcept { return entries_.size(); }
    // How many connect attempts one connection may make: every address once.
    std::size_t addressCount() const;
    std::vector<UpstreamSnapshot> snapshot() const;

  private:
    struct Entry {
        std::string text;
        bool numeric = false;  // an address, never re-resolved
        std::vector<SocketAddress> addresses;
        std::size_t nextAddress = 0;
        unsigned failuresInARow = 0;
        bool down = false;
        bool probing = false;
        Clock::time_point probeStarted;
        Clock::time_point retryAt;  // down: when a probe may go
        std::chrono::milliseconds backoff{0};
        Clock::time_point resolveAt;  // when the name is resolved (again)
        std::chrono::milliseconds resolveBackoff{0};
        bool resolving = false;
        Clock::time_point checkAt;
        unsigned weight = 1;
        bool backup = false;
        bool disabled = false;
        std::int64_t currentWeight = 0;  // smooth weighted round robin's running value
        // Shared with the pools that replace this one on reload, so that connections opened
        // under the old pool are counted off where the new one reads them.
        std::shared_ptr<UpstreamCounters> counters = std::make_shared<UpstreamCounters>();
    };

    bool eligible(const Entry& entry, Clock::time_point now) const;
    // Smooth weighted round robin over the entries `admit` accepts; nullopt when none does.
    template <typename Admit>
    std::optional<std::uint32_t> weightedPick(Admit admit);
    Pick take(std::uint32_t index, Clock::time_point now);
    void markDown(Entry& entry, Clock::time_point now);
    void recordOutcome(Entry& entry, bool connected, Clock::time_point now);

    const std::string route_;
    const UpstreamHealthPolicy policy_;
    mutable std::mutex mutex_;
    std::vector<Entry> entries_;
};

}  // namespace splicegate
