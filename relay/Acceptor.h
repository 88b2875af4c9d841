#pragma once
// A worker's listeners and admission: its SO_REUSEPORT listener per route with the accepts
// armed on it, the reload diff (applyRoutes), admission (--max-connections, the per-source
// limit, the refusal's log line) and the choice of the worker that will own a new connection
// (relay/WorkerLoads.h). It returns what it admitted; the worker starts it or hands it over.
// Its SQEs (accepts, the cancel of a closed listener's) go through RingOps, tagged
// RingOwner::Worker (WorkerOp::Accept: listener index, generation, accept slot as direction).
// Worker-thread only.
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "common/CompletionTag.h"
#include "common/RingOps.h"
#include "common/SocketAddress.h"
#include "common/UniqueFd.h"
#include "metrics/Stats.h"
#include "relay/ListenGroup.h"
#include "relay/RelayContext.h"
#include "relay/Route.h"

namespace splicegate {

// A connection admitted: booked under the limits and in the load of the worker that will own it
// (this one, or `handOffTo`). Either is released with Acceptor::release.
// `route`: the group's primary route until the preamble chose one (relay/Preamble.h).
// A listener whose routes are chosen by SNI books only --max-connections at accept: the
// per-route limits wait for the route the ClientHello chooses (routeBooked false), and so does
// the per-source limit when it depends on that route (ListenGroup::sourceLimitDependsOnRoute).
struct Admitted {
    std::shared_ptr<const Route> route;
    UniqueFd client;
    SocketAddress peer;
    std::optional<unsigned> handOffTo;
    std::shared_ptr<const ListenGroup> group;
    // The per-source limit counted `peer`. Not for a trusted load balancer's connection: the
    // client its PROXY header names is counted instead, once it is read.
    bool sourceBooked = true;
    // The route's max-connections counted it on `route` (not yet when the ClientHello chooses).
    bool routeBooked = true;
};

class Acceptor {
  public:
    Acceptor(unsigned worker, RelayContext& context, RingOps& ring, WorkerStats& stats);
    ~Acceptor();
    Acceptor(const Acceptor&) = delete;
    Acceptor& operator=(const Acceptor&) = delete;

    // Listeners for the route table in force: the changed ones closed and opened again, the
    // others given the new route (new upstreams apply to new connections only).
    void applyRoutes(bool failOnError);
    // Drain or stop: every listener closed, nothing accepted any more.
    void closeAll();
    // Accepts that ended on an error (EMFILE...) armed again (from the timer, not in a loop).
    void rearm();
    // An accept completion; what it admitted, if anything (a refused socket is closed here).
    std::optional<Admitted> onAccept(CompletionTag tag, int result,
                                     std::chrono::steady_clock::time_point now);
    // The worker it was to go to did not take it: it stays here.
    void handOffFailed(Admitted& admitted) noexcept;
    // What admission booked for a connection this worker owns: --max-connections; the route's
    // max-connections on `bookedRoute` (null: not booked, the ClientHello had not chosen yet);
    // the per-source limit for `client` when `sourceBooked` (the limiter of `bookedRoute`, or
    // the global one: the route the source was booked with).
    void release(const Route* bookedRoute, const SocketAddress& client, bool sourceBooked) noexcept;
    // The route's max-connections (true: counted on it; false: at its limit, logged, to be
    // refused by the caller with reason max-connections). At accept, and for the route a
    // ClientHello chose (relay/Preamble.h).
    bool acquireRoute(const Route& route);
    // The per-source limit that applies to `route`, for `client` (true: counted). Also for the
    // client a PROXY header names, once it is read, and on the route a ClientHello chose
    // (relay/Preamble.h).
    bool acquireSource(const Route& route, const SocketAddress& client);
    // Accepts submitted whose completion has not come yet (a closed listener's cancelled ones
    // included): a drain is over only when none is left, since each may carry a connection.
    std::uint32_t acceptsInFlight() const noexcept { return acceptsInFlight_; }

  private:
    // An accept armed on a listener, with where the kernel writes the peer's address: single
    // shot, so each connection's address comes with it (no getpeername per connection).
    struct AcceptSlot {
        sockaddr_storage address{};
        socklen_t length = 0;
        bool armed = false;
    };
    static constexpr std::uint8_t kAcceptsPerListener = 16;
    // One per listen address: the routes sharing it (`route`: their primary one, for logs).
    struct Listener {
        std::shared_ptr<const ListenGroup> group;
        std::shared_ptr<const Route> route;
        UniqueFd fd;
        std::uint16_t generation = 0;
        // Heap-held: the kernel writes into them while the listener vector may grow.
        std::unique_ptr<AcceptSlot[]> accepts = std::make_unique<AcceptSlot[]>(kAcceptsPerListener);
    };

    void openListener(const std::shared_ptr<const ListenGroup>& group);
    void closeListener(std::uint32_t index);
    void armAccepts(std::uint32_t index);
    void armAccept(std::uint32_t index, std::uint8_t which);
    bool admit(const Listener& listener, Admitted& admitted,
               std::chrono::steady_clock::time_point now);
    void refuse(const Listener& listener, RefuseReason reason) noexcept;

    const unsigned worker_;
    RelayContext& context_;
    RingOps& ring_;
    WorkerStats& stats_;
    bool closed_ = false;
    std::uint32_t acceptsInFlight_ = 0;
    std::shared_ptr<const RouteTable> appliedRoutes_;
    std::vector<Listener> listeners_;
    std::chrono::steady_clock::time_point lastRefusalLog_{};
};

}  // namespace splicegate
