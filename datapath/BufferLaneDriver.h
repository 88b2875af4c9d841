#pragma once
// The buffer lane (datapath/Lane.h) over datapath/BufferLane.h: a multishot recv into the
// worker's provided buffer ring, the audit write straight from the received memory (no tee), an
// io_uring send. Like the splice lane it returns what became of a direction and never closes a
// connection itself; it leaves a direction (Next::Switch) once the switching rule asked for it
// and nothing is in flight.
//
// A direction in the buffer lane: recv -> held buffers -> [audit write] -> send. Partial sends
// wait for POLLOUT, EOF becomes shutdown(SHUT_WR) once everything was sent, a reset on one side
// is passed on as a reset, exactly as in the splice lane. A switch happens only where nothing is
// in flight: to splice once the multishot recv has ended (cancelled, final completion seen) and
// every held byte was sent; into it at the splice lane's wait for readiness, when its pipes are
// empty. So a switch never reorders, drops or duplicates a byte.
//
// Its SQEs go through RingOps, its buffer ring and socket table are registered through a
// RingRegistration: tests drive it over tests/support/FakeRing.h. Its completions carry
// RingOwner::BufferLane and one of its BufferLaneOp codes.
//
// Thread affinity: the owning worker. Set-up throws (BufferRing); everything else is noexcept.
#include <chrono>
#include <cstdint>

#include "common/CompletionTag.h"
#include "common/RingOps.h"
#include "common/RingRegistration.h"
#include "datapath/AuditTap.h"
#include "datapath/BufferLane.h"
#include "datapath/ConnectionIo.h"
#include "datapath/Lane.h"
#include "datapath/Mover.h"
#include "datapath/Verdict.h"
#include "metrics/Stats.h"

namespace splicegate {

// The buffer lane's op codes (RingOwner::BufferLane).
enum class BufferLaneOp : std::uint8_t {
    Recv,         // the direction's multishot recv
    Cancel,       // the cancel of that recv
    AuditWrite,   // received bytes to the audit log
    Writable,     // the sink's POLLOUT after a short send
    Send,         // held bytes to the sink
    SocketTable,  // the connection's fixed file table update (not counted in laneOps)
};

class BufferLaneDriver final : public Lane {
  public:
    // `audit` is null when the worker audits nothing. `connectionSlots`: how many connections
    // the worker may hold, for the fixed file table. `registration` is `ring`'s. Throws
    // std::system_error (BufferRing).
    BufferLaneDriver(RingOps& ring, RingRegistration& registration, unsigned entries,
                     std::size_t bufferSize, AuditTap* audit, WorkerStats& stats,
                     unsigned connectionSlots, LaneRule& rule);

    void setNow(std::chrono::steady_clock::time_point now) noexcept override { now_ = now; }
    // Every few seconds: the buffer ring's memory follows a past peak back down.
    void trim() noexcept override { lane_.trim(); }

    // Both directions start relaying here (after the audit was opened): their recvs are armed.
    [[nodiscard]] bool start(ConnectionIo& io) noexcept override;
    // From the splice lane (its pipes empty): the recv is armed again.
    StepResult enter(ConnectionIo& io, Direction d) noexcept override;
    StepResult drive(ConnectionIo& io, Direction d) noexcept override;
    bool owns(RingOwner owner) const noexcept override { return owner == RingOwner::BufferLane; }
    // Its buffers are kept until release() after the connection stopped relaying.
    StepResult complete(ConnectionIo& io, CompletionTag tag,
                        MoveCompletion completion) noexcept override;
    StepResult durable(ConnectionIo& io, Direction d) noexcept override;
    // A lane completion whose connection is gone: its buffer, if any, goes back.
    void dropCompletion(CompletionTag tag, MoveCompletion completion) noexcept override;
    // Every held buffer goes back.
    void release(ConnectionIo& io) noexcept override;
    // Directions parked on -ENOBUFS get their recv back, one per free buffer.
    void afterTurn(const ConnectionFinder& find) noexcept override;

  private:
    StepResult step(ConnectionIo& io, Direction d) noexcept;
    StepResult startAuditWrite(ConnectionIo& io, Direction d) noexcept;
    StepResult auditWritten(ConnectionIo& io, Direction d, int result) noexcept;
    StepResult auditFailed(ConnectionIo& io, Direction d, int error) noexcept;
    StepResult send(ConnectionIo& io, Direction d) noexcept;
    StepResult sent(ConnectionIo& io, Direction d, int result) noexcept;
    StepResult shutdownSink(ConnectionIo& io, Direction d) noexcept;
    StepResult received(ConnectionIo& io, Direction d, MoveCompletion completion) noexcept;
    void armRecv(ConnectionIo& io, Direction d) noexcept;
    void installSockets(ConnectionIo& io) noexcept;
    void armWritable(ConnectionIo& io, Direction d) noexcept;
    void rearm(ConnectionIo& io, Direction d) noexcept;
    static CompletionTag tag(const ConnectionIo& io, Direction d, BufferLaneOp op) noexcept {
        return io.tag(d, RingOwner::BufferLane).withOp(op);
    }
    // The connection's socket table updates (both sides at once: the direction is moot).
    static CompletionTag socketTableTag(const ConnectionIo& io) noexcept {
        return tag(io, Direction::ClientToUpstream, BufferLaneOp::SocketTable);
    }
    void updateGauge() noexcept { stats_.buffersInUse.set(lane_.buffersInUse()); }

    RingOps& ring_;
    BufferLane lane_;
    SocketTable sockets_;
    AuditTap* audit_;
    WorkerStats& stats_;
    LaneRule& rule_;
    std::chrono::steady_clock::time_point now_;
};

}  // namespace splicegate
