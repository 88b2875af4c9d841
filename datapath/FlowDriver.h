#pragma once
// Runs a connection's Flows over the worker's mover: takes each flow's next step, starts it
// through the mover, applies the mover's report to the Flow (and the audit stages through the
// AuditTap), and returns a Verdict for the connection layer to act on, as Envoy's transport
// sockets return a PostIoAction. It never closes a connection or touches a connection table.
//
// Thread affinity: the owning worker. noexcept throughout.
#include <chrono>

#include "datapath/AuditTap.h"
#include "datapath/BufferLaneDriver.h"
#include "datapath/ConnectionIo.h"
#include "datapath/Mover.h"
#include "datapath/Verdict.h"
#include "metrics/Stats.h"
#include "pipes/PipePool.h"

namespace splicegate {

class FlowDriver {
  public:
    // Moves one flow may make before others get a turn.
    static constexpr int kStepBudget = 32;

    // `audit` is null when the worker audits nothing; `lanes` when --lane splice (no buffer lane).
    // Directions in the buffer lane are handed to `lanes` (drive, completions with its ops,
    // durability); it hands them back when they move to splice.
    FlowDriver(Mover& mover, PipePool& pipes, AuditTap* audit, WorkerStats& stats,
               BufferLaneDriver* lanes = nullptr) noexcept
        : mover_(mover), pipes_(pipes), audit_(audit), stats_(stats), lanes_(lanes) {}

    void setNow(std::chrono::steady_clock::time_point now) noexcept {
        now_ = now;
        if (lanes_ != nullptr) lanes_->setNow(now);
    }

    // The connection starts relaying: both directions wait for their source (in the buffer lane:
    // a recv is armed). False: no memory for a splice half (the connection must close).
    [[nodiscard]] bool start(ConnectionIo& io) noexcept;
    // Takes the flow's next steps until it must wait, yields or the connection must close.
    Verdict drive(ConnectionIo& io, Direction d) noexcept;
    // A completion tagged with a mover op for this connection (also after it stopped relaying:
    // its audit write is still booked, nothing else is applied).
    Verdict complete(ConnectionIo& io, CompletionTag tag, MoveCompletion completion) noexcept;
    // Strict durability: the group commit covered the flow's chunks (or failed fail-open).
    Verdict durable(ConnectionIo& io, Direction d) noexcept;
    // The connection is released: its pipes go back, or are closed when bytes are left in them;
    // its buffers go back.
    void release(ConnectionIo& io) noexcept;
    // A completion with a mover op whose connection is gone (a buffer it names goes back).
    void dropCompletion(CompletionTag tag, MoveCompletion completion) noexcept;

  private:
    enum class Next : std::uint8_t { Continue, Wait, Close };
    struct StepResult {
        Next next = Next::Continue;
        Verdict verdict{};
    };

    StepResult step(ConnectionIo& io, Direction d) noexcept;
    Verdict fromLane(ConnectionIo& io, Direction d, const LaneResult& result) noexcept;
    bool enterSplice(ConnectionIo& io, Direction d) noexcept;
    StepResult waitReadable(ConnectionIo& io, Direction d) noexcept;
    StepResult startFill(ConnectionIo& io, Direction d) noexcept;
    StepResult startAudit(ConnectionIo& io, Direction d, MoveStage first) noexcept;
    StepResult startMove(ConnectionIo& io, Direction d, const MovePlan& plan) noexcept;
    StepResult apply(ConnectionIo& io, Direction d, const MoveReport& report) noexcept;
    StepResult auditFailed(ConnectionIo& io, Direction d, int error) noexcept;
    StepResult moveFailed(ConnectionIo& io, Direction d, int error) noexcept;
    void bookOnly(ConnectionIo& io, Direction d, const MoveReport& report) noexcept;
    MoveEnds endsOf(const ConnectionIo& io, Direction d) const noexcept;
    void returnPipes(SpliceFlow& flow) noexcept;
    void updatePipeGauges() noexcept;

    Mover& mover_;
    PipePool& pipes_;
    AuditTap* audit_;
    WorkerStats& stats_;
    BufferLaneDriver* lanes_;
    std::chrono::steady_clock::time_point now_;
};

}  // namespace splicegate
