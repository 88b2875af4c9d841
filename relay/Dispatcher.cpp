#include "relay/Dispatcher.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "common/Error.h"
#include "relay/AccessLog.h"
#include "relay/ListenGroup.h"
#include "relay/ProxyProtocol.h"
#include "relay/SocketOptions.h"
#include "relay/WorkerOps.h"

namespace splicegate {
namespace {
using Op = WorkerOp;

// The buffer ring's window halves at most once per interval: a burst's buffers are released
// within a few intervals of its end, and a steady load never sees its window shrink under it.
constexpr auto kBufferTrimInterval = std::chrono::seconds(5);

__kernel_timespec toTimespec(std::chrono::milliseconds period) noexcept {
    __kernel_timespec spec{};
    spec.tv_sec = static_cast<long long>(period.count() / 1000);
    spec.tv_nsec = static_cast<long long>(period.count() % 1000) * 1000000;
    return spec;
}

// The refusal a close before routing counts as; none for a client that left on its own.
std::optional<RefuseReason> refusalOf(CloseReason reason) noexcept {
    switch (reason) {
        case CloseReason::NoRoute: return RefuseReason::NoRoute;
        case CloseReason::ProxyProtocol: return RefuseReason::ProxyProtocol;
        case CloseReason::BadClientHello: return RefuseReason::BadClientHello;
        case CloseReason::PeekTimeout: return RefuseReason::PeekTimeout;
        case CloseReason::MaxConnectionsPerSource: return RefuseReason::MaxConnectionsPerSource;
        case CloseReason::MaxConnections: return RefuseReason::MaxConnections;
        default: return std::nullopt;
    }
}

}  // namespace

std::chrono::milliseconds workerTickPeriod(const WorkerSettings& settings) {
    std::uint64_t period = 1000;
    if (!settings.audit.dir.empty() && settings.audit.durability != AuditDurability::Strict)
        period = std::max<std::uint64_t>(1, settings.audit.fsyncIntervalMs);
    for (std::uint64_t timeout : {settings.relay.idleTimeoutMs, settings.relay.halfClosedTimeoutMs,
                                  settings.relay.sniPeekTimeoutMs})
        if (timeout > 0 && timeout / 4 < period) period = std::max<std::uint64_t>(timeout / 4, 10);
    return std::chrono::milliseconds(period);
}

Dispatcher::Dispatcher(unsigned index, RelayContext& context, WorkerStats& stats,
                       DispatcherParts parts)
    : index_(index),
      context_(context),
      stats_(stats),
      parts_(std::move(parts)),
      preamble_(context, parts_.ring, parts_.acceptor),
      timerInterval_(toTimespec(workerTickPeriod(context.settings))) {
    router_.route<&Dispatcher::onWorkerCompletion>(RingOwner::Worker, *this);
    router_.route<&Dispatcher::onLaneCompletion>(RingOwner::Mover, *this);
    router_.route<&Dispatcher::onLaneCompletion>(RingOwner::BufferLane, *this);
    if (parts_.audit != nullptr) {
        router_.route<&Dispatcher::onAuditCompletion>(RingOwner::AuditTap, *this);
        router_.route<&Dispatcher::onAuditCompletion>(RingOwner::AuditLog, *this);
    }
}

void Dispatcher::start(Clock::time_point now) {
    now_ = now;
    parts_.acceptor.applyRoutes(true);
    armTimer();
    armControl();
}

void Dispatcher::beginTurn(Clock::time_point now) {
    accessLines_.flush();
    now_ = now;
    parts_.lanes.setNow(now);
}

void Dispatcher::handle(const io_uring_cqe& cqe) {
    if (!router_.dispatch(cqe))
        logDebug("worker ", index_, ": a completion of no owner dropped (user_data ", cqe.user_data,
                 ")");
}

void Dispatcher::endTurn() {
    if (!deferred_.empty()) {  // a flow that yields again now is driven in the next turn
        auto yielded = std::move(deferred_);
        deferred_.clear();
        driveAgain(yielded, false);
    }
    parts_.connector.watchSlowConnects();
    parts_.lanes.afterTurn(FinderOf([this](CompletionTag tag) noexcept -> ConnectionIo* {
        Connection* c = parts_.connections.find(tag);
        return c != nullptr ? &c->io : nullptr;
    }));
    if (parts_.audit != nullptr) {
        if (auto outcome = parts_.audit->afterTurn()) applySync(*outcome);
    }
}

void Dispatcher::onLaneCompletion(CompletionTag tag, const io_uring_cqe& cqe) {
    Connection* c = parts_.connections.find(tag);
    if (c == nullptr) {
        parts_.lanes.dropCompletion(tag, MoveCompletion{cqe.res, cqe.flags});
        return;
    }
    act(*c, static_cast<Direction>(tag.direction),
        parts_.lanes.complete(c->io, tag, MoveCompletion{cqe.res, cqe.flags}).verdict);
    releaseIfDone(*c);
}

void Dispatcher::onAuditCompletion(CompletionTag tag, const io_uring_cqe& cqe) {
    if (auto outcome = parts_.audit->complete(tag, cqe.res)) applySync(*outcome);
}

void Dispatcher::onWorkerCompletion(CompletionTag tag, const io_uring_cqe& cqe) {
    switch (tag.opAs<Op>()) {
        case Op::Ignore:
            return;
        case Op::Control:
            onControl();
            return;
        case Op::Timer:
            onTimer();
            return;
        case Op::Accept:
            if (auto admitted = parts_.acceptor.onAccept(tag, cqe.res, now_))
                take(std::move(*admitted));
            return;
        case Op::PreambleRead: {
            Connection* c = parts_.connections.find(tag);
            if (c == nullptr) return;
            actOnPreamble(*c, preamble_.onReadable(*c, cqe.res));
            releaseIfDone(*c);
            return;
        }
        case Op::Connect:
        case Op::ConnectTimeout:
        case Op::ClientWatch: {
            Connection* c = parts_.connections.find(tag);
            if (c == nullptr) return;
            if (tag.opAs<Op>() == Op::Connect)
                actOnConnect(*c, parts_.connector.onConnect(*c, cqe.res));
            else if (tag.opAs<Op>() == Op::ConnectTimeout)
                parts_.connector.onConnectTimeout(*c);
            else
                actOnConnect(*c, parts_.connector.onClientWatch(*c, cqe.res));
            releaseIfDone(*c);
            return;
        }
    }
}

// ---- control and timers ---------------------------------------------------------------------

void Dispatcher::reload() {
    if (!draining_) parts_.acceptor.applyRoutes(false);
}

void Dispatcher::drain() {
    draining_ = true;
    parts_.acceptor.closeAll();
}

void Dispatcher::stop() {
    stopping_ = true;
    parts_.acceptor.closeAll();
    parts_.connections.forEach([this](Connection& c) {
        if (c.state != ConnectionState::Closing) closeConnection(c, CloseReason::Shutdown, false);
    });
}

// Tasks first (they may list connections a stop is about to close); then stop over drain over
// reload.
void Dispatcher::onControl() {
    auto requests = parts_.control.take();
    if (requests.stop)
        stop();
    else if (requests.drain)
        drain();
    else if (requests.reload)
        reload();
    armControl();
}

void Dispatcher::armControl() noexcept {
    parts_.control.arm(parts_.ring, CompletionTag::make(Op::Control));
}

void Dispatcher::armTimer() noexcept {
    parts_.ring.timeout(&timerInterval_, 0, 0, CompletionTag::make(Op::Timer));
}

void Dispatcher::onTimer() {
    if (parts_.audit != nullptr) {
        if (auto outcome = parts_.audit->tick()) applySync(*outcome);
    }
    closeTimedOut();
    if (now_ - lastBufferTrim_ >= kBufferTrimInterval) {
        parts_.lanes.trim();
        lastBufferTrim_ = now_;
    }
    // A listener whose accept ended on an error (EMFILE...) is re-armed here, not in a loop.
    parts_.acceptor.rearm();
    armTimer();
}

// Only the connections whose deadline came are looked at (relay/ConnectionTimeouts.h).
void Dispatcher::closeTimedOut() {
    for (Connection* c : parts_.connections.due(now_)) {
        if (c->state == ConnectionState::Preamble) {  // only its peek deadline is set
            logWarnLimited("peek timeouts", "listen ", c->group->address(), ": ", c->clientAddress,
                           ": no complete PROXY header or ClientHello within ",
                           context_.settings.relay.sniPeekTimeoutMs,
                           " ms (--sni-peek-timeout-ms; connection ", c->id(), " closed)");
            closeConnection(*c, CloseReason::PeekTimeout, false);
            continue;
        }
        if (c->state != ConnectionState::Relaying) continue;
        auto verdict = timeoutsOf(*c).check(*c, now_);
        if (verdict.close)
            closeConnection(*c, verdict.reason, verdict.resetPeers);
        else if (verdict.rearm)
            parts_.connections.setDeadline(*c, verdict.next);
    }
}

// ---- connections ----------------------------------------------------------------------------

void Dispatcher::take(Admitted admitted) {
    if (admitted.handOffTo) {
        if (parts_.handOff && parts_.handOff(admitted)) return;
        parts_.acceptor.handOffFailed(admitted);  // it stays here
    }
    startAccepted(std::move(admitted));
}

void Dispatcher::adopt(Admitted admitted) {
    // While draining, a connection accepted before the drain is served here (the loop runs, so
    // it is not over); only a stop refuses it.
    if (stopping_) {  // closing the socket is the refusal
        parts_.acceptor.release(admitted.routeBooked ? admitted.route.get() : nullptr,
                                admitted.peer, admitted.sourceBooked);
        return;
    }
    startAccepted(std::move(admitted));
}

void Dispatcher::startAccepted(Admitted admitted) {
    auto& c = parts_.connections.allocate(
        context_.nextConnectionId.fetch_add(1, std::memory_order_relaxed));
    if (auto* lease = context_.auditStart.idLease) lease->cover(c.io.id);
    c.route = std::move(admitted.route);
    if (admitted.routeBooked) c.admittedRoute = c.route;
    c.group = std::move(admitted.group);
    c.sourceBooked = admitted.sourceBooked;
    c.io.client = std::move(admitted.client);  // TCP_NODELAY inherited from the listener
    c.clientAddress = admitted.peer;
    c.opened = c.io.lastActivity = now_;
    c.acceptedAt = std::chrono::system_clock::now();
    c.connectedAt = {};
    c.failedAttempts.clear();
    if (!Preamble::needed(c)) {
        c.routed = true;
        startRouted(c);
        return;
    }
    c.state = ConnectionState::Preamble;
    parts_.connections.setDeadline(
        c, now_ + std::chrono::milliseconds(context_.settings.relay.sniPeekTimeoutMs));
    actOnPreamble(c, preamble_.start(c));
}

void Dispatcher::actOnPreamble(Connection& c, const PreambleStep& step) {
    switch (step.action) {
        case PreambleStep::Action::Wait:
            return;
        case PreambleStep::Action::Routed:
            parts_.connections.clearDeadline(c);
            c.state = ConnectionState::Connecting;
            startRouted(c);
            return;
        case PreambleStep::Action::Close:
            closeConnection(c, step.reason, false);
            return;
    }
}

void Dispatcher::startRouted(Connection& c) {
    c.io.counters = &routeStats(c);
    routeStats(c).accepted.add(1);
    routeStats(c).active.add(1);
    beginConnect(c);
}

void Dispatcher::beginConnect(Connection& c) {
    actOnConnect(c, parts_.connector.start(c));
}

void Dispatcher::actOnConnect(Connection& c, const ConnectStep& step) {
    switch (step.action) {
        case ConnectStep::Action::Wait:
            return;
        case ConnectStep::Action::Connected:
            if (c.route->config.proxyOut != ProxyProtocolMode::Off && !sendProxyHeader(c)) {
                closeConnection(c, CloseReason::Error, true);
                return;
            }
            startRelaying(c);
            return;
        case ConnectStep::Action::Retry:
            beginConnect(c);
            return;
        case ConnectStep::Action::Fail:
            closeConnection(c, step.reason, false);
            return;
    }
}

bool Dispatcher::sendProxyHeader(Connection& c) {
    SocketAddress destination = c.proxiedDestination;
    if (destination.family() == AF_UNSPEC) {  // no header came in: the address it connected to
        sockaddr_storage local{};
        socklen_t length = sizeof local;
        if (::getsockname(c.io.client.get(), reinterpret_cast<sockaddr*>(&local), &length) == 0)
            destination = SocketAddress::fromSockaddr(reinterpret_cast<sockaddr*>(&local), length);
    }
    auto version =
        c.route->config.proxyOut == ProxyProtocolMode::V1 ? ProxyVersion::V1 : ProxyVersion::V2;
    std::string header = encodeProxyHeader(version, c.clientAddress, destination);
    // A socket connected a moment ago has an empty send buffer: the header (at most 108 bytes)
    // goes in whole, ahead of every relayed byte, and never through the audit tap.
    ssize_t sent = ::send(c.io.upstream.get(), header.data(), header.size(),
                          MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent == static_cast<ssize_t>(header.size())) return true;
    logWarn("route ", c.route->config.name, ": PROXY header to ", c.upstreamAddress, ": ",
            sent < 0 ? errnoText(errno) : std::string("sent in part"), " (connection ", c.id(),
            " closed)");
    return false;
}

void Dispatcher::startRelaying(Connection& c) {
    c.state = ConnectionState::Relaying;
    c.connectedAt = now_;
    c.io.relaying = true;
    if (auto timeouts = timeoutsOf(c); timeouts.any())
        parts_.connections.setDeadline(c, timeouts.nextDeadline(c));
    if (parts_.audit != nullptr && c.route->config.audit) {
        auto action = parts_.audit->open(
            c.io, c.route->config.name, c.clientAddress.toString(), c.upstreamAddress.toString(),
            c.via.family() == AF_UNSPEC ? std::string() : c.via.toString(), c.serverName);
        if (action == AuditAction::Close) {
            closeConnection(c, CloseReason::AuditError, true);
            return;
        }
    }
    logDebug("connection ", c.id(), ": ", c.clientAddress, " -> ", c.upstreamAddress, " (route ",
             c.route->config.name, ")");
    c.io.laneOverride = c.route->config.overrides.lane;
    if (!parts_.lanes.start(c.io)) closeConnection(c, CloseReason::Error, true);  // out of memory
}

// Acts on the data path's verdict for one flow of `c`.
void Dispatcher::act(Connection& c, Direction d, const Verdict& verdict) {
    switch (verdict.action) {
        case Verdict::Action::Wait:
            return;
        case Verdict::Action::Yield:
            deferred_.push_back(c.io.tag(d));
            return;
        case Verdict::Action::Close:
            closeConnection(c, verdict.reason, verdict.resetPeers);
            return;
    }
}

// A group commit ended (or could not start): its decisions applied to the connections.
void Dispatcher::applySync(const SyncOutcome& outcome) {
    if (outcome.closeUndurable) {
        auto reason = outcome.writeFailed ? CloseReason::AuditError : CloseReason::AuditSyncError;
        parts_.connections.forEach([&](Connection& c) {
            if (parts_.audit->lostBySyncFailure(c.io)) closeConnection(c, reason, true);
        });
    }
    driveAgain(outcome.roomFreed, false);
    driveAgain(outcome.resume, true);
}

void Dispatcher::driveAgain(const std::vector<CompletionTag>& flows, bool durable) {
    for (const auto& flow : flows) {
        Connection* c = parts_.connections.find(flow);
        if (c == nullptr || c->state != ConnectionState::Relaying) continue;
        auto d = static_cast<Direction>(flow.direction);
        act(*c, d,
            (durable ? parts_.lanes.durable(c->io, d) : parts_.lanes.drive(c->io, d)).verdict);
    }
}

void Dispatcher::closeConnection(Connection& c, CloseReason reason, bool resetPeers) {
    if (c.state == ConnectionState::Closing) return;
    c.state = ConnectionState::Closing;
    c.io.relaying = false;
    c.closeReason = reason;
    parts_.connections.clearDeadline(c);
    bool pending = c.operationsInFlight() > 0;
    for (auto* fd : {&c.io.client, &c.io.upstream}) {
        if (*fd && pending)
            parts_.ring.cancelFd(fd->get(), IORING_ASYNC_CANCEL_ALL,
                                 CompletionTag::make(Op::Ignore));
    }
    // The cancels go in with the loop's next submission: the fds stay open until every
    // operation naming them has completed (a queued linked SQE resolves its fd only when it is
    // issued, and must never meet a reused number), so no fd number can be reused before.
    for (auto* fd : {&c.io.client, &c.io.upstream}) {
        if (!*fd) continue;
        if (resetPeers) {
            // RST goes out when the fd is closed; without the option, a FIN does.
            if (int rc = armReset(fd->get()); rc < 0)
                logDebug("connection ", c.id(), ": SO_LINGER: ", errnoText(-rc));
        } else if (pending) {
            ::shutdown(fd->get(), SHUT_RDWR);  // FIN now, not when the last operation ends
        }
    }
    if (!pending) releaseConnection(c);  // closed now: FIN (or RST) goes out with the close
}

void Dispatcher::releaseIfDone(Connection& c) {
    if (c.state == ConnectionState::Closing && c.operationsInFlight() == 0) releaseConnection(c);
}

void Dispatcher::releaseConnection(Connection& c) {
    if (c.id() == 0) return;  // already released
    if (parts_.audit != nullptr) parts_.audit->close(c.io, toString(c.closeReason));
    c.io.client.reset();
    c.io.upstream.reset();
    parts_.lanes.release(c.io);
    auto lifetime = std::chrono::duration_cast<std::chrono::milliseconds>(now_ - c.opened);
    AccessRecord record;
    record.route = c.routed || c.routeChosen ? std::string_view(c.route->config.name) : "-";
    record.id = c.id();
    record.client = c.clientAddress;
    record.upstream = c.upstreamAddress;
    record.bytesC2u = c.io.at(Direction::ClientToUpstream).bytesForwarded();
    record.bytesU2c = c.io.at(Direction::UpstreamToClient).bytesForwarded();
    record.durationMs = static_cast<std::uint64_t>(lifetime.count());
    record.reason = c.closeReason;
    record.acceptedAt = c.acceptedAt;
    if (c.connectedAt != std::chrono::steady_clock::time_point{})
        record.connectMs = static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::milliseconds>(c.connectedAt - c.opened)
                .count());
    record.attempts = c.connectAttempts;
    record.failedAttempts = c.failedAttempts;
    record.connected = c.connectedAt != std::chrono::steady_clock::time_point{};
    record.active = routeStats(c).active.get();
    record.serverName = c.serverName;
    record.via = c.via;
    logDebug("connection ", c.id(), " closed (", toString(c.closeReason), ") after ",
             lifetime.count(), " ms: c2u ", record.bytesC2u, " B, u2c ", record.bytesU2c, " B");
    if (context_.settings.relay.accessLog)
        accessLines_.add(LogLevel::Info,
                         formatAccessLine(record, context_.settings.relay.accessLogFormat));
    if (c.countedOnUpstream)
        c.route->pool->connectionClosed(c.upstreamIndex, record.bytesC2u, record.bytesU2c);
    parts_.acceptor.release(c.admittedRoute.get(), c.clientAddress, c.sourceBooked);
    if (c.routed) {
        routeStats(c).closed[static_cast<std::size_t>(c.closeReason)].add(1);
        routeStats(c).observeDuration(static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(now_ - c.opened).count()));
        routeStats(c).active.sub(1);
    } else if (auto refusal = refusalOf(c.closeReason)) {
        // Refused before it was routed: counted on the address's first route, or on the route
        // the ClientHello chose when that route's limits refused it.
        routeStats(c).refused[static_cast<std::size_t>(*refusal)].add(1);
    }
    parts_.connections.release(c);
}

// ---- admin views ----------------------------------------------------------------------------

void Dispatcher::listConnections(std::vector<ConnectionView>& out) const {
    parts_.connections.appendViews(out, index_, now_);
}

bool Dispatcher::killConnection(std::uint64_t id) {
    Connection* c = parts_.connections.findById(id);
    if (c == nullptr || c->state == ConnectionState::Closing) return false;
    logInfo("connection ", id, ": killed by the admin");
    closeConnection(*c, CloseReason::Killed, true);
    return true;
}

int Dispatcher::rotateAudit() noexcept {
    if (parts_.audit == nullptr) return -ENOTSUP;
    return parts_.audit->rotate();
}

}  // namespace splicegate
