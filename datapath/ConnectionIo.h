#pragma once
// The data-path half of a relayed connection: both sockets, one flow per direction with its
// mover state and audit reservation, and the counters the data path keeps. The connection layer
// (relay/Connection.h) adds routing, addresses and lifecycle around it. Owned by one worker;
// never touched by another thread.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

#include "audit/AuditLog.h"
#include "common/CompletionTag.h"
#include "common/UniqueFd.h"
#include "datapath/BufferLaneFlow.h"
#include "datapath/LaneKind.h"
#include "datapath/LanePolicy.h"
#include "datapath/Mover.h"
#include "datapath/SocketTable.h"
#include "datapath/SpliceFlow.h"
#include "metrics/Stats.h"

namespace splicegate {

// A direction's splice-lane half: made when the direction first enters that lane (FlowDriver),
// kept afterwards. A direction that lives in the buffer lane never pays for it.
struct SpliceHalf {
    SpliceFlow flow;
    MoveInFlight move;           // the mover's step in flight
    std::size_t stepLength = 0;  // what the step asked for (a short fill means drained)
};

struct FlowIo {
    std::unique_ptr<SpliceHalf> splice;
    AuditSlot auditSlot;             // log space of the audit write in flight
    std::uint64_t auditedBytes = 0;  // recorded in the index
    // The lane it is in and its switching rule's run (datapath/LaneSwitch.h, which sets both).
    // A direction is in one lane at a time; the other lane's half stays idle (no buffer, no pipe).
    LaneKind lane = LaneKind::Splice;
    LanePolicy lanePolicy{true};
    // The buffer lane's half of the direction (datapath/BufferLaneDriver.h).
    BufferLaneFlow laneFlow;
    std::uint8_t laneOps = 0;  // buffer-lane SQEs whose (final) completion is still due

    // The splice half's: only once it exists (FlowDriver makes it before any splice-lane step).
    SpliceFlow& flow() noexcept { return splice->flow; }
    const SpliceFlow& flow() const noexcept { return splice->flow; }
    MoveInFlight& move() noexcept { return splice->move; }

    bool finished() const noexcept {
        return (splice && splice->flow.finished()) || laneFlow.finished();
    }
    bool sourceEnded() const noexcept {
        return (splice && splice->flow.sourceEnded()) || laneFlow.sourceEnded();
    }
    std::uint64_t bytesForwarded() const noexcept {
        return (splice ? splice->flow.bytesForwarded() : 0) + laneFlow.bytesForwarded();
    }
    unsigned spliceMovesInFlight() const noexcept { return splice ? splice->move.outstanding : 0; }
    // Fail-open: the lane the direction is in forwards what it holds unaudited. Returns those
    // bytes (counted lost to the audit).
    std::uint64_t abandonAudit() noexcept {
        if (lane == LaneKind::Buffer) return laneFlow.abandonAudit();
        return splice ? splice->flow.abandonAudit() : 0;
    }
};

struct ConnectionIo {
    std::uint64_t id = 0;
    std::uint32_t slot = 0;
    std::uint16_t generation = 0;
    bool relaying = false;  // set by the connection layer; results after it are only booked
    UniqueFd client;
    UniqueFd upstream;
    // Both sockets in the ring's fixed file table (datapath/SocketTable.h), entries of `slot`;
    // `tableFds` is what the table's update reads when it is submitted.
    bool inSocketTable = false;
    int tableFds[2] = {-1, -1};
    FlowIo flows[2];
    // The route's own lane (its `lane` key), set before the lanes start it; none: --lane.
    std::optional<LaneKind> laneOverride;
    bool audited = false;
    bool auditLost = false;  // fail-open after its Open record was lost: every byte counts lost
    std::uint64_t auditSyncTarget = 0;  // sync sequence that makes its last chunk durable
    RouteCounters* counters = nullptr;
    std::chrono::steady_clock::time_point lastActivity;

    FlowIo& at(Direction d) noexcept { return flows[static_cast<int>(d)]; }
    SpliceFlow& flow(Direction d) noexcept { return at(d).flow(); }
    const SpliceFlow& flow(Direction d) const noexcept { return flows[static_cast<int>(d)].flow(); }
    // A socket by side: 0 the client's, 1 the upstream's (the order of the socket table's
    // entries). Direction `d` reads from its source side and writes to the other.
    static unsigned sourceSide(Direction d) noexcept {
        return d == Direction::ClientToUpstream ? 0 : 1;
    }
    static unsigned sinkSide(Direction d) noexcept { return 1 - sourceSide(d); }
    int fd(unsigned side) const noexcept { return side == 0 ? client.get() : upstream.get(); }
    int sourceFd(Direction d) const noexcept { return fd(sourceSide(d)); }
    int sinkFd(Direction d) const noexcept { return fd(sinkSide(d)); }
    // The sockets as ring operations name them: table entries once installed, fds before.
    SocketRef socketRef(unsigned side) const noexcept {
        if (inSocketTable) return {SocketTable::entry(slot, side), true};
        return {fd(side), false};
    }
    SocketRef sourceRef(Direction d) const noexcept { return socketRef(sourceSide(d)); }
    SocketRef sinkRef(Direction d) const noexcept { return socketRef(sinkSide(d)); }
    // The flow's identity: slot, generation and direction (what ConnectionTable::find and the
    // worker's lists of flows go by).
    CompletionTag tag(Direction d) const noexcept { return tag(d, RingOwner::Worker); }
    // The flow's identity in the completion tags of a lane's operations: the lane names itself
    // as their owner (RingOwner::Mover, RingOwner::BufferLane) and adds its op code.
    CompletionTag tag(Direction d, RingOwner owner) const noexcept {
        return CompletionTag::of(owner, std::uint8_t{0}, slot, generation,
                                 static_cast<std::uint8_t>(d));
    }
    // `bytes` of direction `d` reached its sink through `lane`: the route's byte counters, and
    // the worker's count of bytes relayed unaudited when the audit gave up on the connection.
    void countForwarded(Direction d, LaneKind lane, std::uint64_t bytes,
                        Counter& auditLostBytes) noexcept {
        if (auditLost) auditLostBytes.add(bytes);
        if (counters == nullptr) return;
        (d == Direction::ClientToUpstream ? counters->bytesC2u : counters->bytesU2c).add(bytes);
        counters->laneBytes[static_cast<int>(lane)].add(bytes);
    }
    // Data-path operations whose completion is still due (both lanes).
    unsigned movesInFlight() const noexcept {
        return flows[0].spliceMovesInFlight() + flows[1].spliceMovesInFlight() + flows[0].laneOps +
               flows[1].laneOps;
    }
    // A direction ends in the lane it is in.
    bool finished() const noexcept { return flows[0].finished() && flows[1].finished(); }
};

}  // namespace splicegate
