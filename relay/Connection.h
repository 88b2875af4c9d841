#pragma once
// A relayed TCP connection: the connection layer (route, addresses, upstream attempts,
// lifecycle) around its data-path half (datapath/ConnectionIo.h: sockets, flows, audit state).
// Owned by one worker (slot in its table); never touched by another thread.
#include <chrono>
#include <cstdint>
#include <memory>

#include "common/SocketAddress.h"
#include "datapath/ConnectionIo.h"
#include "metrics/Stats.h"
#include "relay/Route.h"

namespace splicegate {

enum class ConnectionState : std::uint8_t { Connecting, Relaying, Closing };

struct Connection {
    ConnectionIo io;
    ConnectionState state = ConnectionState::Connecting;
    std::shared_ptr<const Route> route;
    SocketAddress clientAddress;
    SocketAddress upstreamAddress;
    std::uint32_t upstreamIndex = 0;  // into route->upstreams, round robin start + attempts
    std::uint32_t connectAttempts = 0;
    std::uint32_t connectOps = 0;  // connect and its linked timeout, while in flight
    std::chrono::steady_clock::time_point opened;
    CloseReason closeReason = CloseReason::Closed;

    std::uint64_t id() const noexcept { return io.id; }
    // SQEs naming this connection whose completion is still to come.
    unsigned operationsInFlight() const noexcept { return connectOps + io.movesInFlight(); }
};

}  // namespace splicegate
