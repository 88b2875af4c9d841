#pragma once
// A relayed TCP connection: client socket, upstream socket and one Flow per direction.
// Owned by one worker (slot in its table); never touched by another thread.
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <memory>

#include "audit/AuditWriter.h"
#include "common/SocketAddress.h"
#include "common/UniqueFd.h"
#include "metrics/Stats.h"
#include "datapath/Flow.h"
#include "relay/Route.h"

namespace splicegate {

enum class ConnectionState : std::uint8_t { Connecting, Relaying, Closing };

// Results of a linked tee -> audit write [-> forward] chain (chain engine). CQEs of linked
// requests are not promised in submission order, so they are kept here and applied to the
// flow's bookkeeping in chain order once the last one is in.
struct PendingChain {
    bool active = false;
    int tee = -ECANCELED;
    int write = -ECANCELED;
    int forward = -ECANCELED;
};

struct Connection {
    std::uint64_t id = 0;
    std::uint32_t slot = 0;
    std::uint16_t generation = 0;
    ConnectionState state = ConnectionState::Connecting;
    std::shared_ptr<const Route> route;
    UniqueFd client;
    UniqueFd upstream;
    SocketAddress clientAddress;
    SocketAddress upstreamAddress;
    std::uint32_t upstreamIndex = 0;     // into route->upstreams, round robin start + attempts
    std::uint32_t connectAttempts = 0;
    std::uint32_t operationsInFlight = 0;  // SQEs whose completion is still to come
    std::uint8_t flowOps[2] = {0, 0};      // polls or moves of that direction in flight
    Flow flows[2];
    audit::Reservation auditSlots[2];      // log space of each direction's audit write
    PendingChain chains[2];
    bool audited = false;
    bool auditLost = false;  // fail-open after its Open record was lost: every byte counts lost
    std::uint64_t auditedBytes[2] = {0, 0};  // recorded in the index, per direction
    std::uint64_t auditSyncTarget = 0;     // sync sequence that makes its last chunk durable
    std::chrono::steady_clock::time_point opened;
    std::chrono::steady_clock::time_point lastActivity;
    CloseReason closeReason = CloseReason::Closed;

    Flow& flow(Direction d) noexcept { return flows[static_cast<int>(d)]; }
    std::uint8_t& busy(Direction d) noexcept { return flowOps[static_cast<int>(d)]; }
    audit::Reservation& auditSlot(Direction d) noexcept { return auditSlots[static_cast<int>(d)]; }
    PendingChain& chain(Direction d) noexcept { return chains[static_cast<int>(d)]; }
    int sourceFd(Direction d) const noexcept {
        return d == Direction::ClientToUpstream ? client.get() : upstream.get();
    }
    int sinkFd(Direction d) const noexcept {
        return d == Direction::ClientToUpstream ? upstream.get() : client.get();
    }
};

}  // namespace splicegate
