#pragma once
// A relayed TCP connection: the connection layer (route, addresses, upstream attempts,
// lifecycle) around its data-path half (datapath/ConnectionIo.h: sockets, flows, audit state).
// Owned by one worker (slot in its table); never touched by another thread.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/SocketAddress.h"
#include "datapath/ConnectionIo.h"
#include "metrics/Stats.h"
#include "relay/Route.h"

namespace splicegate {

// Preamble: its PROXY header and ClientHello are being read (relay/Preamble.h), before any
// route is chosen or upstream connected.
enum class ConnectionState : std::uint8_t { Preamble, Connecting, Relaying, Closing };

class ListenGroup;

struct Connection {
    ConnectionIo io;
    ConnectionState state = ConnectionState::Connecting;
    std::shared_ptr<const Route> route;
    SocketAddress clientAddress;
    SocketAddress upstreamAddress;
    // The listener's routes; `route` is their primary one until `routed` (relay/ListenGroup.h).
    std::shared_ptr<const ListenGroup> group;
    // The route whose max-connections counts the connection: the listener's only route from
    // the accept on, or (routes chosen by SNI) the route the ClientHello chose, once the
    // preamble booked it; null until then (relay/Acceptor.h).
    std::shared_ptr<const Route> admittedRoute;
    bool routed = false;
    // The preamble chose `route`; until `routed` its limits may still refuse the connection,
    // which is then counted and logged on it.
    bool routeChosen = false;
    // A PROXY header's: the balancer's address (`clientAddress` is the client it named) and
    // the address the client connected to. AF_UNSPEC: no header, or one without addresses.
    SocketAddress via;
    SocketAddress proxiedDestination;
    // The per-source limit booked `clientAddress` (after the PROXY header, when there is one).
    bool sourceBooked = false;
    std::string serverName;  // of the ClientHello; empty: none read, or it named none
    // Preamble: a poll on the client socket in flight; the step it is on (relay/Preamble.h).
    bool preamblePolling = false;
    std::uint8_t preambleStep = 0;
    int receiveLowWater = 1;  // SO_RCVLOWAT set while waiting for a preamble's rest
    std::uint32_t upstreamIndex = 0;  // the route pool's upstream of the current attempt
    std::uint32_t connectAttempts = 0;
    // Connected: counted in the pool's active connections of upstreamIndex until released.
    bool countedOnUpstream = false;
    std::chrono::steady_clock::time_point attemptStarted;  // of the current connect
    std::uint32_t connectOps = 0;  // connect and its linked timeout, while in flight
    // A poll on the client socket while connecting: a client that resets (or closes both ways)
    // cancels its upstream connect instead of leaving it to the connect timeout.
    bool watchingClient = false;
    // The upstream socket is in delayed-ACK mode already (--delayed-ack, UpstreamConnector::start).
    bool upstreamDelaysAcks = false;
    std::chrono::steady_clock::time_point opened;
    std::chrono::system_clock::time_point acceptedAt;  // wall clock, for the access line
    // When the upstream's handshake completed; unset (epoch) while never connected.
    std::chrono::steady_clock::time_point connectedAt;
    // The upstream attempts that failed, "ADDR(ERROR)" comma-separated, for the access line:
    // empty (no allocation) unless a connect failed.
    std::string failedAttempts;
    // Quiet past the half-closed timeout: when its sockets are looked at next
    // (relay/ConnectionTimeouts.h).
    std::chrono::steady_clock::time_point stallCheckAfter;
    CloseReason closeReason = CloseReason::Closed;

    std::uint64_t id() const noexcept { return io.id; }
    // SQEs naming this connection whose completion is still to come.
    unsigned operationsInFlight() const noexcept {
        return connectOps + (watchingClient ? 1u : 0u) + (preamblePolling ? 1u : 0u) +
               io.movesInFlight();
    }
};

}  // namespace splicegate
