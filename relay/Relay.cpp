#include "relay/Relay.h"

#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "common/Error.h"

namespace splicegate {

namespace {
bool sameUpstreams(const RouteConfig& a, const RouteConfig& b) {
    if (a.upstreams.size() != b.upstreams.size() ||
        a.healthCheckIntervalMs != b.healthCheckIntervalMs)
        return false;
    for (std::size_t i = 0; i < a.upstreams.size(); ++i)
        if (a.upstreams[i].text != b.upstreams[i].text ||
            a.upstreams[i].weight != b.upstreams[i].weight ||
            a.upstreams[i].backup != b.upstreams[i].backup)
            return false;
    return true;
}

std::shared_ptr<UpstreamPool> poolFor(const RouteConfig& route, const RouteTable* previous) {
    if (previous == nullptr) return nullptr;
    for (const auto& old : *previous) {
        if (old->config.name != route.name) continue;
        if (sameUpstreams(old->config, route)) return old->pool;
        return std::make_shared<UpstreamPool>(route.name, route.upstreams, healthPolicyOf(route),
                                              old->pool.get());
    }
    return nullptr;
}

AcceptedSocketOptions acceptedOptions(const WorkerSettings& settings) {
    return {settings.relay.delayedAck, settings.relay.clientCongestion};
}
}  // namespace

std::shared_ptr<const RouteTable> buildRouteTable(const Config& config, RouteIndex& index,
                                                  const RelaySettings& global,
                                                  const RouteTable* previous) {
    auto table = std::make_shared<RouteTable>();
    for (const auto& route : config.routes) {
        auto slot = index.indexOf(route.name);
        if (slot >= kMaxRoutes)
            throw UsageError("route " + route.name + ": more than " + std::to_string(kMaxRoutes) +
                             " route names since start; restart to reset");
        table->push_back(
            std::make_shared<const Route>(route, slot, poolFor(route, previous), global));
    }
    return table;
}

Relay::Relay(const Config& config, unsigned workerCount, WorkerSettings settings,
             std::uint64_t pipeBudgetBytes, AuditStart auditStart, std::uint64_t firstConnectionId,
             const InheritedListeners& inherited)
    : context_(std::make_unique<RelayContext>(settings, pipeBudgetBytes)) {
    context_->auditStart = std::move(auditStart);
    context_->nextConnectionId.store(firstConnectionId);
    auto table = buildRouteTable(config, context_->routeIndex, settings.relay);
    context_->setListenerSockets(
        ListenerSockets::bind(*table, workerCount, nullptr, acceptedOptions(settings), inherited));
    context_->setRoutes(table);
    upstreamMonitor_ = std::make_unique<UpstreamMonitor>(
        [context = context_.get()] { return context->routes(); },
        std::chrono::milliseconds(settings.relay.connectTimeoutMs));
    context_->workerLoads = std::make_unique<WorkerLoads>(workerCount);
    for (unsigned i = 0; i < workerCount; ++i) {
        workers_.push_back(std::make_unique<Worker>(i, *context_));
        context_->workers.push_back(workers_.back().get());
    }
    std::vector<std::future<void>> started;
    for (auto& worker : workers_) started.push_back(worker->start());
    for (auto& future : started) future.get();  // rethrows the first set-up failure
}

Relay::~Relay() { stop(); }

void Relay::reload(const Config& config) {
    if (draining()) throw std::runtime_error("draining: the configuration is no longer reloaded");
    auto running = context_->routes();
    // The global relay settings change at restart only; a route's own values apply now.
    auto table = buildRouteTable(config, context_->routeIndex, context_->settings.relay,
                                 running.get());
    // Bound before anything changes: a failure here leaves the running set as it was. Workers
    // close an old listener only after this, so no address stops accepting in between.
    auto sockets = ListenerSockets::bind(*table, workerCount(), context_->listenerSockets().get(),
                                         acceptedOptions(context_->settings));
    context_->setListenerSockets(std::move(sockets));
    context_->setRoutes(std::move(table));
    for (auto& worker : workers_) worker->requestReload();
}

void Relay::drain() {
    draining_.store(true, std::memory_order_relaxed);
    // The workers close their duplicates; the relay's own sockets must go too, or the kernel
    // would go on completing handshakes that nobody accepts.
    context_->setListenerSockets(std::make_shared<const ListenerSockets>());
    for (auto& worker : workers_) worker->requestDrain();
}

bool Relay::waitFinished(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        bool all = true;
        for (auto& worker : workers_) all = all && worker->finished();
        if (all) return true;
        if (std::chrono::steady_clock::now() >= deadline) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

StatsSnapshot Relay::snapshot() const {
    StatsSnapshot out;
    out.version = SPLICEGATE_VERSION;
    std::vector<const WorkerStats*> stats;
    for (const auto& worker : workers_) stats.push_back(&worker->stats());
    sumWorkerStats(stats, context_->routeIndex, out);
    out.pipeBudgetBytes = context_->pipeBudget.limit();
    out.pipeBudgetUsedBytes = context_->pipeBudget.used();
    if (auto routes = context_->routes())
        for (const auto& route : *routes)
            for (auto& state : route->pool->snapshot()) out.upstreams.push_back(std::move(state));
    return out;
}

bool Relay::onEveryWorker(const std::function<void(Worker&)>& task,
                          std::chrono::milliseconds timeout) {
    struct Pending {
        std::mutex mutex;
        std::condition_variable done;
        std::size_t remaining = 0;
    };
    auto pending = std::make_shared<Pending>();
    for (auto& worker : workers_) {
        Worker* target = worker.get();
        {
            std::lock_guard lock(pending->mutex);
            ++pending->remaining;
        }
        bool posted = target->post([pending, target, task] {
            task(*target);
            std::lock_guard lock(pending->mutex);
            if (--pending->remaining == 0) pending->done.notify_all();
        });
        if (!posted) {
            std::lock_guard lock(pending->mutex);
            --pending->remaining;
        }
    }
    std::unique_lock lock(pending->mutex);
    return pending->done.wait_for(lock, timeout, [&] { return pending->remaining == 0; });
}

void Relay::stop() {
    upstreamMonitor_.reset();
    for (auto& worker : workers_) worker->requestStop();
    for (auto& worker : workers_) worker->join();
}

}  // namespace splicegate
