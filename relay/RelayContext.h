#pragma once
// What all workers share: settings fixed at start, the current route table, and a few atomics
// touched once per connection (never per byte).
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "audit/AuditOptions.h"
#include "audit/ConnectionIdLease.h"
#include "audit/SealChain.h"
#include "audit/SealHeads.h"
#include "common/Ring.h"
#include "datapath/ChainMover.h"
#include "datapath/DatapathOptions.h"
#include "datapath/InlineMover.h"
#include "metrics/Stats.h"
#include "pipes/PipePool.h"
#include "relay/ListenerSockets.h"
#include "relay/RelayOptions.h"
#include "relay/Route.h"
#include "relay/SourceLimiter.h"
#include "relay/WorkerLoads.h"

namespace splicegate {

class Worker;

// The settings the relay and its workers run with: the modules' settings of the configuration
// (relay/Config.h), held as they are, with the limits of the system applied at start
// (relay/Daemon.cpp: pipe size, connections).
struct WorkerSettings {
    AuditSettings audit;  // empty directory: audit off
    DatapathSettings datapath;
    RelaySettings relay;
    std::uint64_t maxPipes = 0;  // pipes that may exist at once (relay/FdBudget.h); 0 = no cap
};

// The one place the splice engine is chosen: the mover a worker moves its bytes with.
inline std::unique_ptr<Mover> makeMover(SpliceEngine engine, Ring& ring) {
    if (engine == SpliceEngine::Chain) return std::make_unique<ChainMover>(ring);
    return std::make_unique<InlineMover>(ring);
}

// Where each worker's audit log continues after recovery.
struct AuditStart {
    // Per worker: the worker number of its segment files (its chain; the worker's index unless an
    // upgrade's old process still writes that chain: relay/AuditHolders.h), and where it goes on.
    std::vector<unsigned> chains;
    std::vector<std::uint64_t> firstSegment;
    // Covers every connection id handed out (null when audit is off); it outlives the relay.
    audit::ConnectionIdLease* idLease = nullptr;
    // --audit-hmac-key-file, loaded once at start (null: unkeyed chain): every writer's seals.
    std::shared_ptr<const audit::ChainKey> chainKey;
    // Segments recovery found unsealed and left as they were (the log was changed on disk).
    std::uint64_t unsealedSegmentsLeft = 0;
};

class RelayContext {
  public:
    RelayContext(WorkerSettings workerSettings, std::uint64_t pipeBudgetBytes)
        : settings(std::move(workerSettings)), pipeBudget(pipeBudgetBytes, settings.maxPipes) {}

    const WorkerSettings settings;
    PipeBudget pipeBudget;
    std::atomic<std::uint64_t> nextConnectionId{1};
    std::atomic<std::uint64_t> activeConnections{0};
    AuditStart auditStart;
    audit::SealHeads sealHeads;  // each worker's newest seal, for `splicegatectl status`
    RouteIndex routeIndex;
    SourceLimiter sourceLimiter{settings.relay.maxConnectionsPerSource};
    // By route (statsIndex, stable across reloads): open connections, for a route's own
    // max-connections, and the per-source counts of routes with their own
    // max-connections-per-source (relay/RouteSettings.h).
    std::array<std::atomic<std::uint64_t>, kMaxRoutes> routeActive{};
    std::array<SourceLimiter, kMaxRoutes> routeSourceLimiters;
    // Set by the Relay before any worker starts, constant afterwards: the workers (for handing
    // a new connection over) and the connections each owns.
    std::vector<Worker*> workers;
    std::unique_ptr<WorkerLoads> workerLoads;

    // The listening sockets of the route table in force (set before the routes that use them).
    std::shared_ptr<const ListenerSockets> listenerSockets() const {
        std::lock_guard lock(routesMutex_);
        return listenerSockets_;
    }
    void setListenerSockets(std::shared_ptr<const ListenerSockets> sockets) {
        std::lock_guard lock(routesMutex_);
        listenerSockets_ = std::move(sockets);
    }

    std::shared_ptr<const RouteTable> routes() const {
        std::lock_guard lock(routesMutex_);
        return routes_;
    }
    void setRoutes(std::shared_ptr<const RouteTable> table) {
        std::lock_guard lock(routesMutex_);
        routes_ = std::move(table);
    }

  private:
    mutable std::mutex routesMutex_;
    std::shared_ptr<const RouteTable> routes_ = std::make_shared<RouteTable>();
    std::shared_ptr<const ListenerSockets> listenerSockets_;
};

}  // namespace splicegate
