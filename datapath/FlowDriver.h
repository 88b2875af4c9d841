#pragma once
// Runs a connection's Flows over the worker's mover: takes each flow's next step, starts it
// through the mover, applies the mover's report to the Flow (and the audit stages through the
// AuditTap), and returns a Verdict for the connection layer to act on, as Envoy's transport
// sockets return a PostIoAction. It never closes a connection or touches a connection table.
//
// Thread affinity: the owning worker. noexcept throughout.
#include <chrono>

#include "datapath/AuditTap.h"
#include "datapath/ConnectionIo.h"
#include "datapath/Mover.h"
#include "metrics/Stats.h"
#include "pipes/PipePool.h"

namespace splicegate {

struct Verdict {
    enum class Action : std::uint8_t {
        Wait,   // nothing to do until a completion (or the group commit) resumes the flow
        Yield,  // the flow used its turn and can go on: drive it again after the others
        Close,  // close the connection with `reason`
    };
    Action action = Action::Wait;
    CloseReason reason = CloseReason::Closed;
    bool resetPeers = false;  // RST to both peers (an error), rather than FIN

    static Verdict wait() noexcept { return {}; }
    static Verdict yield() noexcept { return {Action::Yield}; }
    static Verdict close(CloseReason why, bool reset) noexcept {
        return {Action::Close, why, reset};
    }
};

class FlowDriver {
  public:
    // Moves one flow may make before others get a turn.
    static constexpr int kStepBudget = 32;

    // `audit` is null when the worker audits nothing.
    FlowDriver(Mover& mover, PipePool& pipes, AuditTap* audit, WorkerStats& stats) noexcept
        : mover_(mover), pipes_(pipes), audit_(audit), stats_(stats) {}

    void setNow(std::chrono::steady_clock::time_point now) noexcept { now_ = now; }

    // The connection starts relaying: both directions wait for their source.
    void start(ConnectionIo& io) noexcept;
    // Takes the flow's next steps until it must wait, yields or the connection must close.
    Verdict drive(ConnectionIo& io, Direction d) noexcept;
    // A completion tagged with a mover op for this connection (also after it stopped relaying:
    // its audit write is still booked, nothing else is applied).
    Verdict complete(ConnectionIo& io, CompletionTag tag, MoveCompletion completion) noexcept;
    // Strict durability: the group commit covered the flow's chunks (or failed fail-open).
    Verdict durable(ConnectionIo& io, Direction d) noexcept;
    // The connection is released: its pipes go back, or are closed when bytes are left in them.
    void release(ConnectionIo& io) noexcept;

  private:
    enum class Next : std::uint8_t { Continue, Wait, Close };
    struct StepResult {
        Next next = Next::Continue;
        Verdict verdict{};
    };

    StepResult step(ConnectionIo& io, Direction d) noexcept;
    StepResult startFill(ConnectionIo& io, Direction d) noexcept;
    StepResult startAudit(ConnectionIo& io, Direction d, MoveStage first) noexcept;
    StepResult startMove(ConnectionIo& io, Direction d, const MovePlan& plan) noexcept;
    StepResult apply(ConnectionIo& io, Direction d, const MoveReport& report) noexcept;
    StepResult auditFailed(ConnectionIo& io, Direction d, int error) noexcept;
    StepResult moveFailed(ConnectionIo& io, Direction d, int error) noexcept;
    void bookOnly(ConnectionIo& io, Direction d, const MoveReport& report) noexcept;
    MoveEnds endsOf(const ConnectionIo& io, Direction d) const noexcept;
    void countForwarded(ConnectionIo& io, Direction d, int result) noexcept;
    void returnPipes(Flow& flow) noexcept;
    void updatePipeGauges() noexcept;

    Mover& mover_;
    PipePool& pipes_;
    AuditTap* audit_;
    WorkerStats& stats_;
    std::chrono::steady_clock::time_point now_;
};

}  // namespace splicegate
