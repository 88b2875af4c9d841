#pragma once
// A connection's way to its upstream: the route's pool picks an address (round robin over the
// healthy ones, probes of down ones), the connect goes in linked to the route's connect timeout, its
// outcome is reported to the pool (the health UpstreamMonitor reads), and a failed one is tried
// again on the route's next address until each had its turn. A client that leaves while its
// connect is slow cancels it (the client watch). Every step returns what the worker is to do.
// Its SQEs go through RingOps, tagged RingOwner::Worker with the connection's slot and
// generation (WorkerOp::Connect, ConnectTimeout, ClientWatch). Worker-thread only.
#include <linux/time_types.h>

#include <cstdint>
#include <vector>

#include "common/CompletionTag.h"
#include "common/RingOps.h"
#include "relay/Connection.h"
#include "relay/ConnectionTable.h"
#include "relay/RelayContext.h"
#include "relay/WorkerOps.h"

namespace splicegate {

struct ConnectStep {
    enum class Action : std::uint8_t {
        Wait,       // a connect is under way (or nothing changed)
        Connected,  // the upstream socket is ready: relay
        Retry,      // that address failed: start() again for the next one
        Fail,       // close the connection with `reason`
    };
    Action action = Action::Wait;
    CloseReason reason = CloseReason::Error;
};

class UpstreamConnector {
  public:
    UpstreamConnector(RelayContext& context, RingOps& ring, ConnectionTable& connections);

    // A connect to the next address of the route: Wait, or Fail.
    ConnectStep start(Connection& c);
    // The connect's completion (its linked timeout's is only counted here).
    ConnectStep onConnect(Connection& c, int result);
    void onConnectTimeout(Connection& c) noexcept { --c.connectOps; }
    // The client watch's completion: Fail when the client left while its connect ran.
    ConnectStep onClientWatch(Connection& c, int result);
    // Once per turn: connects started a turn ago and still running get their client watched.
    void watchSlowConnects();
    bool watchesDue() const noexcept { return !watchDue_.empty(); }

  private:
    void watchClient(Connection& c);
    static CompletionTag tagOf(WorkerOp op, const Connection& c) noexcept {
        return CompletionTag::make(op, c.io.slot, c.io.generation);
    }

    RelayContext& context_;
    RingOps& ring_;
    ConnectionTable& connections_;
    // Clients whose upstream connect started this turn (watchSoon_) and last turn (watchDue_).
    // A connect still running a turn later gets its client watched (watchClient); most (on
    // loopback) are done by then, and the watch's two SQEs and two completions are saved.
    std::vector<CompletionTag> watchSoon_;
    std::vector<CompletionTag> watchDue_;
};

}  // namespace splicegate
