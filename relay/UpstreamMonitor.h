#pragma once
// The thread that keeps the routes' UpstreamPools current: resolves names that are due (first
// resolution with backoff, then periodic re-resolution), drops addresses that are the daemon's
// own listeners, and runs the active TCP checks of routes that ask for them. Lookups and check
// connects block, so they run here, never on a worker or the main thread.
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "relay/Route.h"

namespace splicegate {

class UpstreamMonitor {
  public:
    using RouteSource = std::function<std::shared_ptr<const RouteTable>()>;

    // `routes` returns the route table in force (called from the monitor thread).
    UpstreamMonitor(RouteSource routes, std::chrono::milliseconds checkTimeout);
    ~UpstreamMonitor();
    UpstreamMonitor(const UpstreamMonitor&) = delete;
    UpstreamMonitor& operator=(const UpstreamMonitor&) = delete;

    // One pass over every pool (also what the thread does each tick); exposed for tests.
    static void maintain(const RouteTable& table, std::chrono::milliseconds checkTimeout);

  private:
    void run();

    RouteSource routes_;
    const std::chrono::milliseconds checkTimeout_;
    std::mutex mutex_;
    std::condition_variable wake_;
    bool stopping_ = false;
    std::thread thread_;
};

// A TCP connect to `address` within `timeout`; true when it was accepted. Used by the active
// checks (the connection is closed right away).
bool probeTcp(const SocketAddress& address, std::chrono::milliseconds timeout) noexcept;

}  // namespace splicegate
