#pragma once
// What the splice movers share: their io_uring op codes (within the movers' range) and the
// readiness waits, which both arm as IORING_OP_POLL_ADD (docs/kernel-notes.md §1: wait for
// readiness first, then move without blocking).
#include <fcntl.h>
#include <poll.h>

#include "common/Ring.h"
#include "datapath/Failpoints.h"
#include "datapath/Mover.h"

namespace splicegate::moverops {

// A splice that never sleeps on the pipe (SPLICE_F_NONBLOCK); the sockets are O_NONBLOCK too,
// which tcp_splice_read honours (docs/kernel-notes.md §1).
inline constexpr unsigned kSpliceFlags = SPLICE_F_NONBLOCK | SPLICE_F_MOVE;

constexpr std::uint8_t opFor(MoveStage stage) noexcept {
    return static_cast<std::uint8_t>(kFirstMoverOp + static_cast<std::uint8_t>(stage));
}
constexpr MoveStage stageFor(std::uint8_t op) noexcept {
    return static_cast<MoveStage>(op - kFirstMoverOp);
}

inline void setTag(io_uring_sqe* sqe, CompletionTag flow, MoveStage stage) noexcept {
    flow.op = opFor(stage);
    io_uring_sqe_set_data64(sqe, flow.encode());
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
    auto* sqe = ring.sqe();
    io_uring_prep_poll_add(sqe, readable ? ends.source : ends.sink, readable ? POLLIN : POLLOUT);
    setTag(sqe, plan.flow, plan.first);
    state.begin();
    state.expect(plan.first);
    return MoveReport::inFlight();
}

// Shared complete(): gathers by stage, reports once the step's last completion is in.
inline MoveReport gather(CompletionTag tag, MoveCompletion completion,
                         MoveInFlight& state) noexcept {
    if (!state.gather(stageFor(tag.op), completion.result)) return MoveReport::inFlight();
    auto report = state.report();
    state.begin();
    return report;
}

}  // namespace splicegate::moverops
