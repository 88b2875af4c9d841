#pragma once
// The timeouts of a relaying connection: no byte either way for --idle-timeout-ms; or, sooner,
// a direction whose sender has gone while its receiver takes nothing for
// --half-closed-timeout-ms (it would hold its pipe and slot until the idle timeout).
//
// Activity only moves the connection's lastActivity (the data path does, at no cost here): a
// connection's deadline is where a timeout could first be due by that time, and when it comes
// check() looks again and either closes or names the next deadline.
#include <chrono>
#include <cstdint>

#include "relay/Connection.h"

namespace splicegate {

struct TimeoutVerdict {
    bool close = false;
    CloseReason reason = CloseReason::IdleTimeout;
    bool resetPeers = false;
    // When not closing: when to look again (none: no timeout applies).
    bool rearm = false;
    std::chrono::steady_clock::time_point next;
};

class ConnectionTimeouts {
  public:
    using Clock = std::chrono::steady_clock;

    ConnectionTimeouts(std::uint32_t idleMs, std::uint32_t halfClosedMs) noexcept
        : idle_(idleMs), halfClosed_(halfClosedMs) {}

    bool any() const noexcept { return idle_.count() > 0 || halfClosed_.count() > 0; }
    // The earliest time a timeout can be due for `c`, as things stand.
    Clock::time_point nextDeadline(const Connection& c) const noexcept;
    // Looks at a relaying connection whose deadline came (the half-closed checks cost system
    // calls on its sockets).
    TimeoutVerdict check(Connection& c, Clock::time_point now) const;

  private:
    std::chrono::milliseconds idle_;
    std::chrono::milliseconds halfClosed_;
};

}  // namespace splicegate
