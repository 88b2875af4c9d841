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
// Thread affinity: the owning worker. Set-up throws (BufferRing); everything else is noexcept.
#include <liburing.h>

#include <chrono>
#include <cstdint>

#include "common/CompletionTag.h"
#include "datapath/AuditTap.h"
#include "datapath/BufferLane.h"
#include "datapath/ConnectionIo.h"
#include "datapath/Lane.h"
#include "datapath/Mover.h"
#include "datapath/Verdict.h"
#include "metrics/Stats.h"

namespace splicegate {

class BufferLaneDriver final : public Lane {
  public:
    // io_uring op codes of the buffer lane (0x60..0x6f, within the movers' range so the worker
    // routes them to the data path).
    static constexpr std::uint8_t kRecvOp = 0x60;
    static constexpr std::uint8_t kCancelOp = 0x61;
    static constexpr std::uint8_t kAuditWriteOp = 0x62;
    static constexpr std::uint8_t kWritableOp = 0x63;
    static constexpr std::uint8_t kSendOp = 0x64;
    static constexpr std::uint8_t kSocketTableOp = 0x65;  // not counted in laneOps
    static constexpr bool isLaneOp(std::uint8_t op) noexcept { return (op & 0xf0) == 0x60; }
    static_assert(isMoverOp(kRecvOp) && isMoverOp(kSendOp));

    // `audit` is null when the worker audits nothing. `connectionSlots`: how many connections
    // the worker may hold, for the fixed file table. Throws std::system_error (BufferRing).
    BufferLaneDriver(io_uring& ring, unsigned entries, std::size_t bufferSize, AuditTap* audit,
                     WorkerStats& stats, unsigned connectionSlots, LaneRule& rule);

    void setNow(std::chrono::steady_clock::time_point now) noexcept override { now_ = now; }
    // Every few seconds: the buffer ring's memory follows a past peak back down.
    void trim() noexcept override { lane_.trim(); }

    // Both directions start relaying here (after the audit was opened): their recvs are armed.
    [[nodiscard]] bool start(ConnectionIo& io) noexcept override;
    // From the splice lane (its pipes empty): the recv is armed again.
    StepResult enter(ConnectionIo& io, Direction d) noexcept override;
    StepResult drive(ConnectionIo& io, Direction d) noexcept override;
    bool ownsOp(std::uint8_t op) const noexcept override { return isLaneOp(op); }
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
    std::uint64_t tag(const ConnectionIo& io, Direction d, std::uint8_t op) const noexcept;
    // The connection's socket table updates (both sides at once: the direction is moot).
    std::uint64_t socketTableTag(const ConnectionIo& io) const noexcept {
        return tag(io, Direction::ClientToUpstream, kSocketTableOp);
    }
    void updateGauge() noexcept { stats_.buffersInUse.set(lane_.buffersInUse()); }

    io_uring& ring_;
    BufferLane lane_;
    SocketTable sockets_;
    AuditTap* audit_;
    WorkerStats& stats_;
    LaneRule& rule_;
    std::chrono::steady_clock::time_point now_;
};

}  // namespace splicegate
