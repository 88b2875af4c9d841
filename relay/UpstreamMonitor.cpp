#include "relay/UpstreamMonitor.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

#include "common/Error.h"
#include "common/Log.h"
#include "common/ThreadName.h"
#include "common/UniqueFd.h"
#include "relay/ListenerMatcher.h"

namespace splicegate {
namespace {
constexpr auto kTick = std::chrono::milliseconds(250);

std::vector<RouteConfig> routeConfigs(const RouteTable& table) {
    std::vector<RouteConfig> configs;
    for (const auto& route : table) configs.push_back(route->config);
    return configs;
}

// Resolves `text`; an address that would loop back into one of our listeners is dropped with
// an error (the config check refuses such upstreams; here DNS produced one later).
std::vector<SocketAddress> resolveChecked(const UpstreamPool& pool, const std::string& text,
                                          const std::vector<RouteConfig>& routes,
                                          std::string& error) {
    std::vector<SocketAddress> usable;
    try {
        auto matcher = ListenerMatcher::withLocalAddresses();
        for (auto& address : SocketAddress::resolve(text)) {
            if (auto owner = matcher.routeListeningOn(address, routes)) {
                logWarnLimited("own listener upstream " + text, "route ", pool.route(),
                               ": upstream ", text, " resolves to ", address,
                               ", the daemon's own listener of route '", *owner,
                               "': address not used");
                continue;
            }
            usable.push_back(address);
        }
        if (usable.empty()) error = "no usable address";
    } catch (const std::exception& failure) {
        error = failure.what();
    }
    return usable;
}
}  // namespace

bool probeTcp(const SocketAddress& address, std::chrono::milliseconds timeout) noexcept {
    UniqueFd fd(::socket(address.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd) return false;
    if (::connect(fd.get(), address.get(), address.length()) == 0) return true;
    if (errno != EINPROGRESS) return false;
    pollfd waiting{fd.get(), POLLOUT, 0};
    if (::poll(&waiting, 1, static_cast<int>(timeout.count())) != 1) return false;
    int error = 0;
    socklen_t length = sizeof error;
    return ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0;
}

UpstreamMonitor::UpstreamMonitor(RouteSource routes, std::chrono::milliseconds checkTimeout)
    : routes_(std::move(routes)), checkTimeout_(checkTimeout), thread_([this] { run(); }) {}

UpstreamMonitor::~UpstreamMonitor() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
}

void UpstreamMonitor::run() {
    nameThisThread("sg-health");
    std::unique_lock lock(mutex_);
    while (!stopping_) {
        lock.unlock();
        try {
            auto table = routes_();
            if (table) maintain(*table, checkTimeout_);
        } catch (const std::exception& error) {
            logWarnLimited("upstream monitor", "upstream monitor: ", error.what());
        }
        lock.lock();
        wake_.wait_for(lock, kTick, [this] { return stopping_; });
    }
}

void UpstreamMonitor::maintain(const RouteTable& table, std::chrono::milliseconds checkTimeout) {
    std::vector<RouteConfig> routes;
    for (const auto& route : table) {
        auto& pool = *route->pool;
        auto now = UpstreamPool::Clock::now();
        for (const auto& due : pool.dueResolutions(now)) {
            if (routes.empty()) routes = routeConfigs(table);
            std::string error;
            auto addresses = resolveChecked(pool, due.text, routes, error);
            pool.setResolved(due.upstream, std::move(addresses), error, UpstreamPool::Clock::now());
        }
        for (const auto& due : pool.dueChecks(UpstreamPool::Clock::now()))
            pool.reportCheck(due.upstream, probeTcp(due.address, checkTimeout));
    }
}

}  // namespace splicegate
