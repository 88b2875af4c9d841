#include "relay/UpstreamConnector.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "common/Error.h"
#include "common/Log.h"
#include "relay/SocketOptions.h"
#include "relay/WorkerOps.h"

namespace splicegate {
namespace {
ConnectStep fail(CloseReason reason) noexcept {
    return {ConnectStep::Action::Fail, reason};
}
}  // namespace

UpstreamConnector::UpstreamConnector(RelayContext& context, RingOps& ring,
                                     ConnectionTable& connections)
    : context_(context), ring_(ring), connections_(connections) {}

ConnectStep UpstreamConnector::start(Connection& c) {
    auto pick = c.route->pool->pick();
    if (!pick) {
        logWarnLimited("no upstream address on route " + c.route->config.name, "route ",
                       c.route->config.name, ": no upstream has an address yet (connection ",
                       c.id(), " closed)");
        return fail(CloseReason::UpstreamUnreachable);
    }
    c.upstreamIndex = pick->upstream;
    c.upstreamAddress = pick->address;
    int fd = ::socket(c.upstreamAddress.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        logWarn("route ", c.route->config.name, ": socket for ", c.upstreamAddress, ": ",
                errnoText(errno));
        return fail(CloseReason::Error);
    }
    c.io.upstream.reset(fd);
    if (int rc = setNoDelay(fd); rc < 0)
        logDebug("connection ", c.id(), ": TCP_NODELAY: ", errnoText(-rc));
    // Checked at start (congestionControlProblems): a failure here is the kernel's, and the
    // connection can go on with the system's default.
    const auto& congestion = c.route->settings.upstreamCongestion;
    if (int rc = setCongestionControl(fd, congestion); rc < 0)
        logWarnLimited("upstream-tcp-congestion", "route ", c.route->config.name,
                       ": TCP_CONGESTION ", congestion, " for ", c.upstreamAddress, ": ",
                       errnoText(-rc), "; the system's default is used");
    // A client that has spoken already: its bytes go out as soon as the handshake is done, and
    // the handshake's last ACK can ride on them, one packet fewer. One that has not may be
    // waiting for a server that speaks first, whose accept must not wait for that ACK.
    c.upstreamDelaysAcks = context_.settings.relay.delayedAck &&
                           bytesWaiting(c.io.client.get()) > 0 && enterDelayedAckMode(fd) == 0;
    ++c.connectAttempts;
    c.attemptStarted = std::chrono::steady_clock::now();
    // The route (held by the connection) outlives the SQE that points at its timeout; the
    // kernel only reads it (liburing's prep takes a non-const pointer).
    auto* timeout = const_cast<__kernel_timespec*>(&c.route->connectTimeout);
    ring_.connect(fd, c.upstreamAddress.get(), c.upstreamAddress.length(), timeout,
                  tagOf(WorkerOp::Connect, c), tagOf(WorkerOp::ConnectTimeout, c));
    c.connectOps += 2;
    if (c.connectAttempts == 1) watchSoon_.push_back(tagOf(WorkerOp::ClientWatch, c));
    return {};
}

ConnectStep UpstreamConnector::onConnect(Connection& c, int result) {
    --c.connectOps;
    if (c.state != ConnectionState::Connecting) return {};
    c.route->pool->report(c.upstreamIndex, result == 0);
    if (result == 0) {
        c.route->pool->connectionOpened(c.upstreamIndex,
                                        std::chrono::steady_clock::now() - c.attemptStarted);
        c.countedOnUpstream = true;
        if (c.watchingClient) {
            ring_.pollRemove(tagOf(WorkerOp::ClientWatch, c),
                             CompletionTag::make(WorkerOp::Ignore));
        }
        // Unless start() did it already (the client had spoken), here, after the handshake:
        // in delayed-ACK mode while connecting, the socket would also hold back the handshake's
        // last ACK, and a server that speaks first would wait for it.
        if (context_.settings.relay.delayedAck && !c.upstreamDelaysAcks) {
            if (int rc = enterDelayedAckMode(c.io.upstream.get()); rc < 0)
                logDebug("connection ", c.id(), ": TCP_QUICKACK: ", errnoText(-rc));
        }
        return {ConnectStep::Action::Connected, CloseReason::Closed};
    }
    const char* why = result == -ECANCELED ? "timed out" : nullptr;
    logWarnLimited("connect failures on route " + c.route->config.name, "route ",
                   c.route->config.name, ": connect to upstream ", c.upstreamAddress, ": ",
                   why ? why : errnoText(result).c_str(), " (connection ", c.id(), ")");
    c.io.upstream.reset();  // the linked timeout's completion may still come; it names no fd
    const char* code = result == -ECANCELED ? "timeout" : ::strerrorname_np(-result);
    if (!c.failedAttempts.empty()) c.failedAttempts += ',';
    c.failedAttempts += c.upstreamAddress.toString() + "(" + (code ? code : "error") + ")";
    if (c.io.counters != nullptr) c.io.counters->connectFailures.add(1);
    if (c.connectAttempts < c.route->pool->addressCount())
        return {ConnectStep::Action::Retry, CloseReason::Closed};
    logWarnLimited("unreachable on route " + c.route->config.name, "route ", c.route->config.name,
                   ": no upstream reachable for connection ", c.id(), " from ", c.clientAddress);
    return fail(CloseReason::UpstreamUnreachable);
}

void UpstreamConnector::watchSlowConnects() {
    for (auto tag : watchDue_) {
        Connection* c = connections_.find(tag);
        if (c != nullptr && c->state == ConnectionState::Connecting && !c->watchingClient)
            watchClient(*c);
    }
    watchDue_.swap(watchSoon_);
    watchSoon_.clear();
}

void UpstreamConnector::watchClient(Connection& c) {
    ring_.pollAdd(c.io.client.get(), POLLERR | POLLHUP, tagOf(WorkerOp::ClientWatch, c));
    c.watchingClient = true;
}

// Whatever the watch saw after the connect ended is the data path's to find. io_uring also
// reports POLLRDHUP: a client that sent its FIN still wants its bytes relayed, so that ends the
// watch without a verdict (a re-armed poll would fire again at once).
ConnectStep UpstreamConnector::onClientWatch(Connection& c, int result) {
    c.watchingClient = false;
    if (c.state != ConnectionState::Connecting || result <= 0 ||
        (result & (POLLERR | POLLHUP)) == 0)
        return {};
    logDebug("connection ", c.id(), ": client ", c.clientAddress,
             " left while its upstream connect ran: connect cancelled");
    return fail(CloseReason::ClientReset);
}

}  // namespace splicegate
