#pragma once
// The relay as a whole: the shared context and the workers. Owned by the daemon's main thread;
// its methods are called from that thread only.
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "relay/Config.h"
#include "relay/RelayContext.h"
#include "relay/UpstreamMonitor.h"
#include "relay/Worker.h"

namespace splicegate {

class Relay {
  public:
    // Binds the routes' listeners (or adopts those `inherited` has: an upgrade) and starts
    // `workerCount` workers on them. Throws (naming the route and address) when a listener
    // cannot be bound or a worker cannot start.
    Relay(const Config& config, unsigned workerCount, WorkerSettings settings,
          std::uint64_t pipeBudgetBytes, AuditStart auditStart, std::uint64_t firstConnectionId,
          const InheritedListeners& inherited = {});
    ~Relay();

    // Swaps in the routes of `config` (SIGHUP), all or nothing: every new listen address is
    // bound first; when one fails this throws (naming route, address and error) and the running
    // routes and listeners stay as they were. Established connections keep their routes.
    void reload(const Config& config);
    // Stops accepting; connections finish on their own.
    void drain();
    // Waits until every worker has finished or `timeout` has passed; true when all finished.
    bool waitFinished(std::chrono::milliseconds timeout);
    // Closes whatever is still open and joins the workers.
    void stop();

    const RelayContext& context() const noexcept { return *context_; }
    bool draining() const noexcept { return draining_.load(std::memory_order_relaxed); }
    // The id the next connection would get; after stop(), one past every id handed out.
    std::uint64_t nextConnectionId() const noexcept {
        return context_->nextConnectionId.load(std::memory_order_acquire);
    }
    unsigned workerCount() const noexcept { return static_cast<unsigned>(workers_.size()); }
    // Any thread: connection ids go on at `next` or past it (an upgrade that failed after its
    // new process had leased ids: none of those is handed out here).
    void skipConnectionIdsTo(std::uint64_t next) noexcept {
        auto current = context_->nextConnectionId.load(std::memory_order_acquire);
        while (current < next &&
               !context_->nextConnectionId.compare_exchange_weak(current, next,
                                                                 std::memory_order_acq_rel)) {
        }
    }

    // Any thread: the data path's counters summed over the workers (for a scrape or status).
    StatsSnapshot snapshot() const;
    // Each worker's newest audit seal (empty with audit off, or before the first seal).
    std::vector<audit::SealHead> auditHeads() const { return context_->sealHeads.heads(); }
    // Any thread: runs `task(worker)` on every worker's thread and waits for all of them
    // (bounded by `timeout`). False when a worker did not answer in time.
    bool onEveryWorker(const std::function<void(Worker&)>& task, std::chrono::milliseconds timeout);

  private:
    std::unique_ptr<RelayContext> context_;
    std::vector<std::unique_ptr<Worker>> workers_;
    std::unique_ptr<UpstreamMonitor> upstreamMonitor_;
    std::atomic<bool> draining_{false};
};

// The routes of `config` over the `global` relay settings; a route of `previous` with the same
// name hands its upstreams' state on (health, counters and disables survive a reload).
std::shared_ptr<const RouteTable> buildRouteTable(const Config& config, RouteIndex& index,
                                                  const RelaySettings& global,
                                                  const RouteTable* previous = nullptr);

}  // namespace splicegate
