#pragma once
// What the splice movers share: their completion tags (RingOwner::Mover, the stage as op code)
// and the readiness waits, which both arm as IORING_OP_POLL_ADD (docs/kernel-notes.md §1: wait
// for readiness first, then move without blocking).
//
// The movers hold a Ring&, not a RingOps&: Ring is final and defines every operation inline, so
// each SQE of the splice lane's hot path (several per chunk moved) is the liburing prep call
// itself, with no indirect call. They are tested on the kernel (tests/ring/MoverTest.cpp), the
// lane's logic above them over fake movers (tests/unit/FlowDriverTest.cpp).
#include <fcntl.h>
#include <poll.h>

#include "common/Ring.h"
#include "datapath/Failpoints.h"
#include "datapath/Mover.h"

namespace splicegate::moverops {

// A splice that never sleeps on the pipe (SPLICE_F_NONBLOCK); the sockets are O_NONBLOCK too,
// which tcp_splice_read honours (docs/kernel-notes.md §1).
inline constexpr unsigned kSpliceFlags = SPLICE_F_NONBLOCK | SPLICE_F_MOVE;

// The tag of `stage`'s SQE for the flow `plan.flow` names.
constexpr CompletionTag tagOf(const MovePlan& plan, MoveStage stage) noexcept {
    return plan.flow.withOp(stage);
}

// The lengths of an audit chain's stages. Each is sized as if the stage before will be whole;
// a `short` failpoint shortens a stage and, like the kernel's own short transfer would, what is
// sized behind it, so a test of short moves never forwards more than was written.
struct ChainLengths {
    std::size_t tee = 0;
    std::size_t write = 0;
    std::size_t forward = 0;
};
inline ChainLengths chainLengths(const MovePlan& plan) noexcept {
    ChainLengths lengths;
    lengths.tee =
        plan.first == MoveStage::Tee ? failpointLength(FailSite::Tee, plan.length) : plan.length;
    lengths.write = failpointLength(FailSite::AuditWrite, lengths.tee);
    lengths.forward = failpointLength(FailSite::Forward, lengths.write);
    return lengths;
}

// Arms the readiness wait of `plan` (WaitReadable or WaitWritable).
inline MoveReport armWait(Ring& ring, const MoveEnds& ends, const MovePlan& plan,
                          MoveInFlight& state) noexcept {
    bool readable = plan.first == MoveStage::WaitReadable;
    ring.pollAdd(readable ? ends.source : ends.sink, readable ? POLLIN : POLLOUT,
                 tagOf(plan, plan.first));
    state.begin();
    state.expect(plan.first);
    return MoveReport::inFlight();
}

// Shared complete(): gathers by stage, reports once the step's last completion is in.
inline MoveReport gather(CompletionTag tag, MoveCompletion completion,
                         MoveInFlight& state) noexcept {
    if (!state.gather(tag.opAs<MoveStage>(), completion.result)) return MoveReport::inFlight();
    auto report = state.report();
    state.begin();
    return report;
}

}  // namespace splicegate::moverops
