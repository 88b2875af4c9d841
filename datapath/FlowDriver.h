#pragma once
// The splice lane (datapath/Lane.h): runs a direction's SpliceFlow over the worker's mover: takes
// the flow's next step, starts it through the mover, applies the mover's report to the flow (and
// the audit stages through the AuditTap), and returns what became of it for the connection layer
// to act on, as Envoy's transport sockets return a PostIoAction. It never closes a connection or
// touches a connection table. A direction leaves it at its wait for readiness (pipes empty,
// nothing in flight) when the switching rule asks, or when no pipe is to be had and another lane
// can take it.
//
// Thread affinity: the owning worker. noexcept throughout.
#include <chrono>

#include "datapath/AuditTap.h"
#include "datapath/ConnectionIo.h"
#include "datapath/Lane.h"
#include "datapath/Mover.h"
#include "datapath/Verdict.h"
#include "metrics/Stats.h"
#include "pipes/PipePool.h"

namespace splicegate {

class FlowDriver final : public Lane {
  public:
    // Moves one flow may make before others get a turn.
    static constexpr int kStepBudget = 32;

    // `audit` is null when the worker audits nothing.
    FlowDriver(Mover& mover, PipePool& pipes, AuditTap* audit, WorkerStats& stats,
               LaneRule& rule) noexcept
        : mover_(mover), pipes_(pipes), audit_(audit), stats_(stats), rule_(rule) {}

    void setNow(std::chrono::steady_clock::time_point now) noexcept override { now_ = now; }
    [[nodiscard]] bool start(ConnectionIo& io) noexcept override;
    // From the buffer lane: the direction starts at its wait for readiness (pipes empty). Back
    // (Switch) when there is no memory for its splice half.
    StepResult enter(ConnectionIo& io, Direction d) noexcept override;
    StepResult drive(ConnectionIo& io, Direction d) noexcept override;
    bool owns(RingOwner owner) const noexcept override { return owner == RingOwner::Mover; }
    StepResult complete(ConnectionIo& io, CompletionTag tag,
                        MoveCompletion completion) noexcept override;
    StepResult durable(ConnectionIo& io, Direction d) noexcept override;
    // Its pipes go back, or are closed when bytes are left in them.
    void release(ConnectionIo& io) noexcept override;
    // Nothing to give back: a move names no memory of the lane's.
    void dropCompletion(CompletionTag, MoveCompletion) noexcept override {}
    void afterTurn(const ConnectionFinder&) noexcept override {}
    void trim() noexcept override {}

  private:
    StepResult step(ConnectionIo& io, Direction d) noexcept;
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
    LaneRule& rule_;
    std::chrono::steady_clock::time_point now_;
};

}  // namespace splicegate
