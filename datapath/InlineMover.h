#pragma once
// The inline engine: the worker's own thread makes every move as a direct non-blocking splice()
// or tee() once io_uring said the socket is ready; only the readiness waits go through the ring.
// A move hands nothing to io-wq, which for small and medium chunks costs far more than the
// system call it replaces (docs/kernel-notes.md §11). Audit chains are run stage after stage under
// the soft-link rule: a stage runs only when the one before moved its whole length.
#include "datapath/Mover.h"

namespace splicegate {

class Ring;

class InlineMover final : public Mover {
  public:
    // A short fill under this size waits for readiness rather than retrying at once
    // (SpliceFlow::setDrainedBelow); a request/response message is far below it, a bulk read far
    // above.
    static constexpr std::size_t kSmallFillBytes = 16 * 1024;

    explicit InlineMover(Ring& ring) noexcept : ring_(ring) {}

    const char* name() const noexcept override { return "inline"; }
    std::size_t drainedBelow() const noexcept override { return kSmallFillBytes; }
    MoveReport start(const MoveEnds& ends, const MovePlan& plan,
                     MoveInFlight& state) noexcept override;
    MoveReport complete(CompletionTag tag, MoveCompletion completion,
                        MoveInFlight& state) noexcept override;

  private:
    Ring& ring_;  // not RingOps&: see datapath/MoverOps.h
};

}  // namespace splicegate
