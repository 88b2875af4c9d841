#pragma once
// Runs the buffer-lane half of a connection's directions (datapath/BufferLane.h): a multishot
// recv into the worker's provided buffer ring, the audit write straight from the received memory
// (no tee), an io_uring send, and the switches between lanes that LanePolicy asks for under
// `--lane auto`. Like FlowDriver it returns a Verdict and never closes a connection itself; the
// FlowDriver owns the splice lane and hands a direction over (LaneResult::toSplice), so the
// worker only routes completions and acts on verdicts.
//
// A direction in the buffer lane: recv -> held buffers -> [audit write] -> send. Partial sends
// wait for POLLOUT, EOF becomes shutdown(SHUT_WR) once everything was sent, a reset on one side
// is passed on as a reset, exactly as in the splice lane. A switch happens only where nothing is
// in flight: to splice once the multishot recv has ended (cancelled, final completion seen) and
// every held byte was sent; to the buffer lane at the splice lane's wait for readiness, when its
// pipes are empty. So a switch never reorders, drops or duplicates a byte.
//
// Thread affinity: the owning worker. Set-up throws (BufferRing); everything else is noexcept.
#include <liburing.h>

#include <chrono>
#include <cstdint>

#include "common/CompletionTag.h"
#include "datapath/AuditTap.h"
#include "datapath/BufferLane.h"
#include "datapath/ConnectionIo.h"
#include "datapath/Mover.h"
#include "datapath/Verdict.h"
#include "metrics/Stats.h"

namespace splicegate {

// A buffer-lane verdict; `toSplice`: the direction moved to the splice lane, whose driver
// takes it from its wait for readiness.
struct LaneResult {
    Verdict verdict{};
    bool toSplice = false;
};

class BufferLaneDriver {
  public:
    // io_uring op codes of the buffer lane (0x60..0x6f, within the movers' range so the worker
    // routes them to the flow driver, which hands them here).
    static constexpr std::uint8_t kRecvOp = 0x60;
    static constexpr std::uint8_t kCancelOp = 0x61;
    static constexpr std::uint8_t kAuditWriteOp = 0x62;
    static constexpr std::uint8_t kWritableOp = 0x63;
    static constexpr std::uint8_t kSendOp = 0x64;
    static constexpr std::uint8_t kSocketTableOp = 0x65;  // not counted in laneOps
    static constexpr bool isLaneOp(std::uint8_t op) noexcept { return (op & 0xf0) == 0x60; }
    static_assert(isMoverOp(kRecvOp) && isMoverOp(kSendOp));

    // `adaptive`: --lane auto (switch by LanePolicy); otherwise --lane buffer (never switch).
    // `audit` is null when the worker audits nothing. `connectionSlots`: how many connections
    // the worker may hold, for the fixed file table. Throws std::system_error (BufferRing).
    BufferLaneDriver(io_uring& ring, unsigned entries, std::size_t bufferSize, bool adaptive,
                     AuditTap* audit, WorkerStats& stats, unsigned connectionSlots);

    void setNow(std::chrono::steady_clock::time_point now) noexcept { now_ = now; }
    // Every few seconds: the buffer ring's memory follows a past peak back down.
    void trim() noexcept { lane_.trim(); }

    // The direction starts relaying in the buffer lane (after the audit was opened).
    void start(ConnectionIo& io, Direction d) noexcept;
    LaneResult drive(ConnectionIo& io, Direction d) noexcept;
    // A completion with a lane op for this connection (also after it stopped relaying: its
    // audit write is still booked, its buffers are kept until release()).
    LaneResult complete(ConnectionIo& io, CompletionTag tag, MoveCompletion completion) noexcept;
    LaneResult durable(ConnectionIo& io, Direction d) noexcept;
    // A lane completion whose connection is gone: its buffer, if any, goes back.
    void dropCompletion(CompletionTag tag, MoveCompletion completion) noexcept;
    // The connection is released (nothing in flight): every held buffer goes back.
    void release(ConnectionIo& io) noexcept;

    // Splice lane hooks. A fill of `bytes` (> 0) counts towards a switch back.
    void recordSpliceRead(ConnectionIo& io, Direction d, int bytes) noexcept;
    // At the splice lane's wait for readiness (pipes empty, nothing in flight): true when the
    // direction went back to the buffer lane instead (its recv is armed).
    bool switchIn(ConnectionIo& io, Direction d) noexcept;
    // The splice lane found no pipe for the direction (the pool's cap, relay/FdBudget.h): it goes
    // on in this lane, whatever its reads look like. Its pipes are empty.
    void takeBack(ConnectionIo& io, Direction d) noexcept;

    // Directions parked on -ENOBUFS get their recv back, one per free buffer. `find(tag)`
    // returns the connection a parked tag names, or null when it is gone.
    template <typename Find>
    void rearmParked(Find&& find) noexcept {
        lane_.rearmParked([&](std::uint64_t userData) {
            auto tag = CompletionTag::decode(userData);
            if (ConnectionIo* io = find(tag)) rearm(*io, static_cast<Direction>(tag.direction));
        });
    }

  private:
    enum class Next : std::uint8_t { Continue, Wait, Close, ToSplice };
    struct StepResult {
        Next next = Next::Continue;
        Verdict verdict{};
    };

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
    void recordSwitch(ConnectionIo& io, Direction d, LaneKind to) noexcept;
    LaneResult toResult(ConnectionIo& io, Direction d, StepResult result) noexcept;
    std::uint64_t tag(const ConnectionIo& io, Direction d, std::uint8_t op) const noexcept;
    // The connection's socket table updates (both sides at once: the direction is moot).
    std::uint64_t socketTableTag(const ConnectionIo& io) const noexcept {
        return tag(io, Direction::ClientToUpstream, kSocketTableOp);
    }
    void updateGauge() noexcept { stats_.buffersInUse.set(lane_.buffersInUse()); }

    io_uring& ring_;
    BufferLane lane_;
    SocketTable sockets_;
    const bool adaptive_;
    AuditTap* audit_;
    WorkerStats& stats_;
    std::chrono::steady_clock::time_point now_;
};

}  // namespace splicegate
