#include "relay/Acceptor.h"

#include <algorithm>
#include <cerrno>

#include "common/Error.h"
#include "common/Log.h"
#include "relay/WorkerOps.h"

namespace splicegate {
namespace {
// A worker keeps a new connection while it owns fewer than this many more than the least busy
// worker: 64 connections over 2 workers end up at most 33/31, and only about one accept in
// several is handed over (each hand-off costs the other worker a wake-up).
constexpr long kHandOffSlack = 2;
}  // namespace

Acceptor::Acceptor(unsigned worker, RelayContext& context, RingOps& ring, WorkerStats& stats)
    : worker_(worker), context_(context), ring_(ring), stats_(stats) {}

Acceptor::~Acceptor() = default;

void Acceptor::applyRoutes(bool failOnError) {
    if (closed_) return;
    auto table = context_.routes();
    if (table == appliedRoutes_) return;
    // One listener per listen address, whichever routes share it. Closed first, so that an
    // address its routes left can be bound again.
    auto groups = groupByListenAddress(*table);
    for (std::uint32_t i = 0; i < listeners_.size(); ++i) {
        auto& listener = listeners_[i];
        if (!listener.fd) continue;
        bool kept = std::any_of(groups.begin(), groups.end(), [&](const auto& group) {
            return group->address() == listener.group->address();
        });
        if (!kept) closeListener(i);
    }
    for (const auto& group : groups) {
        bool found = false;
        for (auto& listener : listeners_) {
            if (listener.fd && listener.group->address() == group->address()) {
                listener.group = group;  // new routes and upstreams apply to new connections
                listener.route = group->primary();
                found = true;
            }
        }
        if (found) continue;
        try {
            openListener(group);
        } catch (const std::exception& error) {
            if (failOnError) throw;
            logError("route ", group->primary()->config.name, ": ", error.what());
        }
    }
    appliedRoutes_ = table;
}

void Acceptor::closeAll() {
    closed_ = true;
    for (std::uint32_t i = 0; i < listeners_.size(); ++i) closeListener(i);
}

void Acceptor::rearm() {
    if (closed_) return;
    for (std::uint32_t i = 0; i < listeners_.size(); ++i)
        if (listeners_[i].fd) armAccepts(i);
}

void Acceptor::openListener(const std::shared_ptr<const ListenGroup>& group) {
    const auto& address = group->address();
    // Bound by the relay (ListenerSockets), so a reload fails before any listener changes.
    for (auto& fd : context_.listenerSockets()->duplicatesFor(worker_, address)) {
        std::uint32_t index = 0;
        while (index < listeners_.size() && listeners_[index].fd) ++index;
        if (index == listeners_.size()) listeners_.emplace_back();
        auto& listener = listeners_[index];
        listener.group = group;
        listener.route = group->primary();
        listener.fd = std::move(fd);
        ++listener.generation;
        armAccepts(index);
    }
    if (worker_ == 0)
        for (const auto& route : group->routes())
            logInfo("route ", route->config.name, ": listening on ", address);
}

void Acceptor::closeListener(std::uint32_t index) {
    auto& listener = listeners_[index];
    if (!listener.fd) return;
    ring_.cancelFd(listener.fd.get(), IORING_ASYNC_CANCEL_ALL,
                   CompletionTag::make(WorkerOp::Ignore));
    ring_.submit();         // before the fd number can be reused
    ++listener.generation;  // late accept completions of the old socket are ignored
    listener.fd.reset();
    for (std::uint8_t which = 0; which < kAcceptsPerListener; ++which)
        listener.accepts[which].armed = false;
    if (worker_ == 0)
        logInfo("route ", listener.route->config.name, ": stopped listening on ",
                listener.route->config.listen);
}

void Acceptor::armAccepts(std::uint32_t index) {
    for (std::uint8_t which = 0; which < kAcceptsPerListener; ++which)
        if (!listeners_[index].accepts[which].armed) armAccept(index, which);
}

void Acceptor::armAccept(std::uint32_t index, std::uint8_t which) {
    auto& listener = listeners_[index];
    auto& slot = listener.accepts[which];
    slot.length = sizeof slot.address;
    ring_.accept(listener.fd.get(), reinterpret_cast<sockaddr*>(&slot.address), &slot.length,
                 SOCK_NONBLOCK | SOCK_CLOEXEC,
                 CompletionTag::make(WorkerOp::Accept, index, listener.generation, which));
    slot.armed = true;
    ++acceptsInFlight_;
}

std::optional<Admitted> Acceptor::onAccept(CompletionTag tag, int result,
                                           std::chrono::steady_clock::time_point now) {
    --acceptsInFlight_;
    if (tag.slot >= listeners_.size()) {
        if (result >= 0) ::close(result);
        return std::nullopt;
    }
    auto& listener = listeners_[tag.slot];
    const bool current = listener.generation == tag.generation;
    // Closed since, and not opened again for another route: the listener's route still holds.
    const bool closedSince = !listener.fd && listener.generation == tag.generation + 1;
    if (!current && !(closedSince && result >= 0)) {
        if (result >= 0) ::close(result);  // its slot serves another route now (a reload)
        return std::nullopt;
    }
    if (current) listener.accepts[tag.direction].armed = false;
    if (result < 0) {  // EMFILE...: re-armed by the timer, not in a loop
        if (result != -ECANCELED)
            logWarn("route ", listener.route->config.name, ": accept: ", errnoText(result));
        return std::nullopt;
    }
    // A connection the kernel handed to this accept before the cancel of its listener took
    // effect (a drain, an upgrade) is the client's as much as any other: it is served, not
    // dropped.
    Admitted admitted{
        listener.route, UniqueFd(result), {}, std::nullopt, listener.group, true, true};
    if (current) {
        auto& slot = listener.accepts[tag.direction];
        admitted.peer = SocketAddress::fromSockaddr(reinterpret_cast<const sockaddr*>(&slot.address),
                                                    slot.length);
        armAccept(tag.slot, tag.direction);
    } else {
        sockaddr_storage address{};
        socklen_t length = sizeof address;
        if (::getpeername(result, reinterpret_cast<sockaddr*>(&address), &length) != 0)
            return std::nullopt;  // the client is gone already
        admitted.peer = SocketAddress::fromSockaddr(reinterpret_cast<const sockaddr*>(&address),
                                                    length);
    }
    if (!admit(listener, admitted, now)) return std::nullopt;  // closing it is the refusal
    // Reuseport spreads new connections at random (relay/WorkerLoads.h): a worker that owns
    // kHandOffSlack connections more than the least busy one passes a new connection to it. The
    // admission stays booked; the other worker relays it as if it had accepted it. Booked now,
    // so that a burst spreads instead of piling up on one worker. Not once the listeners are
    // closed: the other worker may be about to finish its drain.
    if (!closed_) admitted.handOffTo = context_.workerLoads->lighterThan(worker_, kHandOffSlack);
    context_.workerLoads->add(admitted.handOffTo.value_or(worker_), 1);
    return admitted;
}

bool Acceptor::admit(const Listener& listener, Admitted& admitted,
                     std::chrono::steady_clock::time_point now) {
    const Route& route = *listener.route;
    const SocketAddress& peer = admitted.peer;
    auto active = context_.activeConnections.fetch_add(1, std::memory_order_relaxed);
    if (active >= context_.settings.relay.maxConnections) {
        context_.activeConnections.fetch_sub(1, std::memory_order_relaxed);
        refuse(listener, RefuseReason::MaxConnections);
        if (now - lastRefusalLog_ > std::chrono::seconds(1)) {
            logWarn("route ", route.config.name,
                    ": refusing connections: ", context_.settings.relay.maxConnections,
                    " connections open (--max-connections)");
            lastRefusalLog_ = now;
        }
        return false;
    }
    // Routes chosen by the ClientHello: their own limits apply once it has chosen (the first
    // route's limits would refuse, or let in, connections meant for another).
    if (listener.group->routesByServerName()) {
        admitted.routeBooked = false;
    } else if (!acquireRoute(route)) {
        context_.activeConnections.fetch_sub(1, std::memory_order_relaxed);
        refuse(listener, RefuseReason::MaxConnections);
        return false;
    }
    auto unbookRoute = [&] {
        if (admitted.routeBooked)
            context_.routeActive[route.statsIndex].fetch_sub(1, std::memory_order_relaxed);
        context_.activeConnections.fetch_sub(1, std::memory_order_relaxed);
    };
    if (listener.group->acceptsProxyHeader() && listener.group->trusts(peer)) {
        admitted.sourceBooked = false;  // the header's client is counted (relay/Preamble.h)
        return true;
    }
    if (listener.group->sourceLimitDependsOnRoute()) {
        admitted.sourceBooked = false;  // counted on the route the ClientHello chooses
        return true;
    }
    // The limit is known now (--max-connections-per-source, or the only route's own): booked
    // at once, so that one source cannot hold more connections than it while their ClientHellos
    // are awaited either.
    if (!acquireSource(route, peer)) {
        unbookRoute();
        refuse(listener, RefuseReason::MaxConnectionsPerSource);
        auto limit = route.settings.ownSourceLimit ? route.settings.maxConnectionsPerSource
                                                   : context_.sourceLimiter.limit();
        logWarnLimited("per-source refusals", "route ", route.config.name, ": refusing ", peer,
                       ": ", limit, " connections open from it (",
                       route.settings.ownSourceLimit ? "the route's " : "--",
                       "max-connections-per-source)");
        return false;
    }
    return true;
}

bool Acceptor::acquireRoute(const Route& route) {
    auto& routeActive = context_.routeActive[route.statsIndex];
    auto onRoute = routeActive.fetch_add(1, std::memory_order_relaxed);
    if (route.settings.maxConnections == 0 || onRoute < route.settings.maxConnections) return true;
    routeActive.fetch_sub(1, std::memory_order_relaxed);
    logWarnLimited("route max-connections " + route.config.name, "route ", route.config.name,
                   ": refusing connections: ", route.settings.maxConnections,
                   " connections open on the route (its max-connections)");
    return false;
}

// A route with its own per-source limit counts its connections apart (relay/RouteSettings.h).
bool Acceptor::acquireSource(const Route& route, const SocketAddress& peer) {
    if (route.settings.ownSourceLimit)
        return context_.routeSourceLimiters[route.statsIndex].tryAcquire(
            peer, route.settings.maxConnectionsPerSource);
    return context_.sourceLimiter.tryAcquire(peer);
}

void Acceptor::refuse(const Listener& listener, RefuseReason reason) noexcept {
    stats_.routes[listener.route->statsIndex].refused[static_cast<std::size_t>(reason)].add(1);
}

void Acceptor::handOffFailed(Admitted& admitted) noexcept {
    if (!admitted.handOffTo) return;
    context_.workerLoads->add(*admitted.handOffTo, -1);
    context_.workerLoads->add(worker_, 1);
    admitted.handOffTo.reset();
}

void Acceptor::release(const Route* bookedRoute, const SocketAddress& client,
                       bool sourceBooked) noexcept {
    context_.workerLoads->add(worker_, -1);
    if (sourceBooked && bookedRoute != nullptr && bookedRoute->settings.ownSourceLimit)
        context_.routeSourceLimiters[bookedRoute->statsIndex].release(
            client, bookedRoute->settings.maxConnectionsPerSource);
    else if (sourceBooked)
        context_.sourceLimiter.release(client);
    if (bookedRoute != nullptr)
        context_.routeActive[bookedRoute->statsIndex].fetch_sub(1, std::memory_order_relaxed);
    context_.activeConnections.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace splicegate
