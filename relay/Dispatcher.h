#pragma once
// What a worker does with each completion of its ring: routes it to the part that submitted it,
// by the owner in its tag (one CompletionRouter table), and acts on what that part decides:
// the acceptor's admissions (start here or hand over), the upstream connector's ConnectSteps,
// the data path's Verdicts (through the LaneSwitch), the audit tap's SyncOutcomes and the
// timeouts' verdicts. The parts never act themselves; this is where connections are started,
// closed and released.
//
// It prepares its own SQEs (timer, cancels) through RingOps and drives no loop: the worker's
// loop (relay/Worker.h) hands it completions and the turn's boundaries, and a test can do the
// same over tests/support/FakeRing.h with fake lanes. Worker-thread only.
#include <linux/time_types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/CompletionRouter.h"
#include "common/CompletionTag.h"
#include "common/Log.h"
#include "common/RingOps.h"
#include "datapath/AuditTap.h"
#include "datapath/LaneSwitch.h"
#include "relay/Acceptor.h"
#include "relay/Connection.h"
#include "relay/ConnectionTable.h"
#include "relay/ConnectionTimeouts.h"
#include "relay/Preamble.h"
#include "relay/RelayContext.h"
#include "relay/UpstreamConnector.h"
#include "relay/WorkerControl.h"

namespace splicegate {

// Hands an admitted connection to the worker `Admitted::handOffTo` names; false when that
// worker did not take it (it stays here). The worker's, since only it reaches the others.
using HandOff = std::function<bool(Admitted& admitted)>;

// The parts a dispatcher acts for, made and owned by the worker (they outlive it).
struct DispatcherParts {
    RingOps& ring;
    ConnectionTable& connections;
    Acceptor& acceptor;
    UpstreamConnector& connector;
    LaneSwitch& lanes;
    AuditTap* audit = nullptr;  // null: audit off
    WorkerControl& control;     // other threads' requests and tasks, read on this ring
    HandOff handOff;
};

class Dispatcher {
  public:
    using Clock = std::chrono::steady_clock;

    Dispatcher(unsigned index, RelayContext& context, WorkerStats& stats, DispatcherParts parts);
    Dispatcher(const Dispatcher&) = delete;
    Dispatcher& operator=(const Dispatcher&) = delete;

    // The first turn: the listeners opened (throws when one cannot be: set-up failure), the
    // timer and the control's read armed.
    void start(Clock::time_point now);
    // A turn begins at `now` (the access lines of the last one are written out).
    void beginTurn(Clock::time_point now);
    void handle(const io_uring_cqe& cqe);
    // The turn's completions are all handled: flows that yielded are driven again, slow
    // connects get their client watched, the lanes and the audit tap end their turn.
    void endTurn();
    // Work is due in the next turn already: the loop must not sleep waiting for a completion.
    bool busy() const noexcept { return !deferred_.empty() || parts_.connector.watchesDue(); }
    // Drained or stopped, and the last connection is released: the loop may end.
    bool finished() const noexcept {
        // A drain also waits for its cancelled accepts: one may have taken a connection.
        return parts_.connections.live() == 0 &&
               (stopping_ || (draining_ && parts_.acceptor.acceptsInFlight() == 0));
    }

    // What the control plane asked (relay/WorkerControl.h; also called directly by tests).
    void reload();
    void drain();
    void stop();
    // A connection another worker admitted for this one; refused (closed) while draining.
    void adopt(Admitted admitted);

    void listConnections(std::vector<ConnectionView>& out) const;
    bool killConnection(std::uint64_t id);
    int rotateAudit() noexcept;

  private:
    // The connection's route's timeouts (a route may set its own; relay/RouteSettings.h).
    static ConnectionTimeouts timeoutsOf(const Connection& c) noexcept {
        return {c.route->settings.idleTimeoutMs, c.route->settings.halfClosedTimeoutMs};
    }

    void onWorkerCompletion(CompletionTag tag, const io_uring_cqe& cqe);
    void onLaneCompletion(CompletionTag tag, const io_uring_cqe& cqe);
    void onAuditCompletion(CompletionTag tag, const io_uring_cqe& cqe);
    void onControl();
    void armControl() noexcept;
    void armTimer() noexcept;
    void onTimer();
    void closeTimedOut();

    void take(Admitted admitted);
    void startAccepted(Admitted admitted);
    void beginConnect(Connection& c);
    void actOnConnect(Connection& c, const ConnectStep& step);
    void actOnPreamble(Connection& c, const PreambleStep& step);
    // A route is chosen: counted on it, and its upstream connect begins.
    void startRouted(Connection& c);
    // proxy-protocol-out: the header on the fresh upstream socket, before any client byte.
    bool sendProxyHeader(Connection& c);
    void startRelaying(Connection& c);
    void act(Connection& c, Direction d, const Verdict& verdict);
    void applySync(const SyncOutcome& outcome);
    // Drives each named flow that still relays again: on (drive) or, `durable`, past the group
    // commit it waited for.
    void driveAgain(const std::vector<CompletionTag>& flows, bool durable);
    void closeConnection(Connection& c, CloseReason reason, bool resetPeers);
    void releaseIfDone(Connection& c);
    void releaseConnection(Connection& c);
    RouteCounters& routeStats(const Connection& c) noexcept {
        return stats_.routes[c.route->statsIndex];
    }

    const unsigned index_;
    RelayContext& context_;
    WorkerStats& stats_;
    DispatcherParts parts_;
    Preamble preamble_;
    CompletionRouter router_;
    Clock::time_point now_;
    bool draining_ = false;
    bool stopping_ = false;
    __kernel_timespec timerInterval_{};
    Clock::time_point lastBufferTrim_{};
    std::vector<CompletionTag> deferred_;  // flows that yielded: driven again next turn
    // Access lines of the connections closed in this turn: one write at the next turn's start.
    LogBatch accessLines_;
};

// The worker's timer period: the audit's fsync interval, or a quarter of the shortest timeout
// (at least 10 ms), at most 1 s.
std::chrono::milliseconds workerTickPeriod(const WorkerSettings& settings);

}  // namespace splicegate
