#include "relay/Relay.h"

#include <thread>

namespace splicegate {

std::shared_ptr<const RouteTable> buildRouteTable(const Config& config) {
    auto table = std::make_shared<RouteTable>();
    for (const auto& route : config.routes) table->push_back(std::make_shared<const Route>(route));
    return table;
}

Relay::Relay(const Config& config, unsigned workerCount, RelaySettings settings,
             std::uint64_t pipeBudgetBytes, AuditStart auditStart, std::uint64_t firstConnectionId)
    : context_(std::make_unique<RelayContext>(settings, pipeBudgetBytes)) {
    context_->auditStart = std::move(auditStart);
    context_->nextConnectionId.store(firstConnectionId);
    context_->setRoutes(buildRouteTable(config));
    std::vector<std::future<void>> started;
    for (unsigned i = 0; i < workerCount; ++i) {
        workers_.push_back(std::make_unique<Worker>(i, *context_));
        started.push_back(workers_.back()->start());
    }
    for (auto& future : started) future.get();  // rethrows the first set-up failure
}

Relay::~Relay() { stop(); }

void Relay::reload(const Config& config) {
    context_->setRoutes(buildRouteTable(config));
    for (auto& worker : workers_) worker->requestReload();
}

void Relay::drain() {
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

void Relay::stop() {
    for (auto& worker : workers_) worker->requestStop();
    for (auto& worker : workers_) worker->join();
}

}  // namespace splicegate
