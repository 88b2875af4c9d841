#include "relay/ConnectionTimeouts.h"

#include <netinet/tcp.h>

#include <algorithm>

#include "common/Log.h"
#include "relay/SocketOptions.h"

namespace splicegate {
namespace {

// The sender of direction `d` has sent its FIN (read by the flow, or still queued behind bytes
// the flow could not take: its socket, in `sourceState`, is in CLOSE_WAIT), and bytes of `d` are
// still undelivered (in the flow, or in the sink's send queue). Only the receiver can end it.
bool senderGoneUndelivered(const ConnectionIo& io, Direction d, int sourceState) noexcept {
    const FlowIo& flow = io.flows[static_cast<int>(d)];
    if (!flow.sourceEnded() && sourceState != TCP_CLOSE_WAIT) return false;
    return !flow.finished() || bytesUnsent(io.sinkFd(d)) > 0;
}

TimeoutVerdict closeWith(CloseReason reason, bool resetPeers) noexcept {
    TimeoutVerdict verdict;
    verdict.close = true;
    verdict.reason = reason;
    verdict.resetPeers = resetPeers;
    return verdict;
}

}  // namespace

ConnectionTimeouts::Clock::time_point ConnectionTimeouts::nextDeadline(
    const Connection& c) const noexcept {
    auto next = Clock::time_point::max();
    if (idle_.count() > 0) next = c.io.lastActivity + idle_;
    // The half-closed checks: once the connection has been quiet that long, and then once per
    // half-closed timeout while it stays quiet.
    if (halfClosed_.count() > 0)
        next = std::min(next, std::max(c.io.lastActivity + halfClosed_, c.stallCheckAfter));
    return next;
}

TimeoutVerdict ConnectionTimeouts::check(Connection& c, Clock::time_point now) const {
    const auto quiet = now - c.io.lastActivity;
    if (idle_.count() > 0 && quiet >= idle_) return closeWith(CloseReason::IdleTimeout, false);
    if (halfClosed_.count() > 0 && quiet >= halfClosed_ && now >= c.stallCheckAfter) {
        c.stallCheckAfter = now + halfClosed_;
        const int clientState = tcpStateOf(c.io.client.get());
        const int upstreamState = tcpStateOf(c.io.upstream.get());
        // A peer that reset while its flows waited on the other side: nothing polls its socket
        // then, and only the idle timeout would notice. One that closed in order may still have
        // bytes to deliver: its flow reads them and the EOF.
        if (closedByReset(c.io.client.get(), clientState))
            return closeWith(CloseReason::ClientReset, true);
        if (closedByReset(c.io.upstream.get(), upstreamState))
            return closeWith(CloseReason::UpstreamReset, true);
        if (senderGoneUndelivered(c.io, Direction::ClientToUpstream, clientState) ||
            senderGoneUndelivered(c.io, Direction::UpstreamToClient, upstreamState)) {
            logDebug("connection ", c.id(),
                     ": one side sent its FIN and the other has taken nothing for ",
                     halfClosed_.count(), " ms (--half-closed-timeout-ms)");
            return closeWith(CloseReason::IdleTimeout, false);
        }
    }
    TimeoutVerdict verdict;
    verdict.next = nextDeadline(c);
    verdict.rearm = verdict.next != Clock::time_point::max();
    return verdict;
}

}  // namespace splicegate
