#pragma once
// The chain engine: every move is an IORING_OP_SPLICE/TEE SQE run by io-wq; an audit chain is
// one soft-linked tee -> write [-> forward], sized as if each stage will be whole, so a short or
// failed stage makes the kernel cancel the rest and nothing unaudited is forwarded
// (docs/kernel-notes.md §2). Fills are never linked: their length is only known afterwards.
// Results are gathered in the flow's MoveInFlight and reported in chain order.
// Limit of linking the forward behind the write: the chunk is booked in the index only when the
// chain's completions are in, after its bytes left. If the index record cannot be buffered then
// (ENOMEM), those bytes are in the data file but unindexed; the inline engine books before it
// forwards and has no such window.
#include "datapath/Mover.h"

namespace splicegate {

class Ring;

class ChainMover final : public Mover {
  public:
    explicit ChainMover(Ring& ring) noexcept : ring_(ring) {}

    const char* name() const noexcept override { return "chain"; }
    // Every short fill waits for readiness: each fill is a thread hand-off.
    std::size_t drainedBelow() const noexcept override { return SIZE_MAX; }
    MoveReport start(const MoveEnds& ends, const MovePlan& plan,
                     MoveInFlight& state) noexcept override;
    MoveReport complete(CompletionTag tag, MoveCompletion completion,
                        MoveInFlight& state) noexcept override;

  private:
    void submitFill(const MoveEnds& ends, const MovePlan& plan, MoveInFlight& state) noexcept;
    void submitTee(const MoveEnds& ends, const MovePlan& plan, std::size_t length,
                   MoveInFlight& state) noexcept;
    void submitAuditWrite(const MoveEnds& ends, const MovePlan& plan, std::size_t length,
                          bool linkNext, MoveInFlight& state) noexcept;
    void submitForward(const MoveEnds& ends, const MovePlan& plan, std::size_t length,
                       MoveInFlight& state) noexcept;

    Ring& ring_;  // not RingOps&: see datapath/MoverOps.h
};

}  // namespace splicegate
