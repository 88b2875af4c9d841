#include "datapath/ChainMover.h"

#include <cstdint>

#include "datapath/Failpoints.h"
#include "datapath/MoverOps.h"

namespace splicegate {
namespace {
// An injected failure is submitted with an fd the kernel rejects (EBADF): the request fails
// for real, so io_uring cancels what is linked behind it; the injected errno is reported in its
// place (MoveInFlight::expect).
constexpr int kRejectedFd = -1;

unsigned length32(std::size_t length) noexcept {
    return static_cast<unsigned>(std::min<std::size_t>(length, UINT32_MAX));
}
}  // namespace

void ChainMover::submitFill(const MoveEnds& ends, const MovePlan& plan,
                            MoveInFlight& state) noexcept {
    int injected = injectedErrno(FailSite::Fill);
    auto length = failpointLength(FailSite::Fill, plan.length);
    auto* sqe = ring_.sqe();
    io_uring_prep_splice(sqe, injected ? kRejectedFd : ends.source, -1, ends.pipeWrite, -1,
                         length32(length), moverops::kSpliceFlags);
    moverops::setTag(sqe, plan.flow, MoveStage::Fill);
    state.expect(MoveStage::Fill, injected);
}

void ChainMover::submitTee(const MoveEnds& ends, const MovePlan& plan, std::size_t length,
                           MoveInFlight& state) noexcept {
    int injected = injectedErrno(FailSite::Tee);
    auto* sqe = ring_.sqe();
    io_uring_prep_tee(sqe, injected ? kRejectedFd : ends.pipeRead, ends.auditPipeWrite,
                      length32(length), SPLICE_F_NONBLOCK);
    moverops::setTag(sqe, plan.flow, MoveStage::Tee);
    if (plan.thenAuditWrite) sqe->flags |= IOSQE_IO_LINK;
    state.expect(MoveStage::Tee, injected);
}

void ChainMover::submitAuditWrite(const MoveEnds& ends, const MovePlan& plan, std::size_t length,
                                  bool linkNext, MoveInFlight& state) noexcept {
    int injected = injectedErrno(FailSite::AuditWrite);
    int from = injected ? kRejectedFd : ends.auditPipeRead;
    auto* sqe = ring_.sqe();
    if (plan.audit.inMemory()) {
        // Offset -1: a pipe has no position (read at the current one).
        io_uring_prep_read(sqe, from, plan.audit.memory.data(),
                           length32(std::min(length, plan.audit.memory.size())),
                           static_cast<std::uint64_t>(-1));
    } else {
        io_uring_prep_splice(sqe, from, -1, plan.audit.fd,
                             static_cast<std::int64_t>(plan.audit.offset), length32(length),
                             moverops::kSpliceFlags);
    }
    moverops::setTag(sqe, plan.flow, MoveStage::AuditWrite);
    if (linkNext) sqe->flags |= IOSQE_IO_LINK;
    state.expect(MoveStage::AuditWrite, injected);
}

void ChainMover::submitForward(const MoveEnds& ends, const MovePlan& plan, std::size_t length,
                               MoveInFlight& state) noexcept {
    int injected = injectedErrno(FailSite::Forward);
    auto* sqe = ring_.sqe();
    io_uring_prep_splice(sqe, injected ? kRejectedFd : ends.pipeRead, -1, ends.sink, -1,
                         length32(length), moverops::kSpliceFlags);
    moverops::setTag(sqe, plan.flow, MoveStage::Forward);
    state.expect(MoveStage::Forward, injected);
}

MoveReport ChainMover::start(const MoveEnds& ends, const MovePlan& plan,
                             MoveInFlight& state) noexcept {
    if (plan.first == MoveStage::WaitReadable || plan.first == MoveStage::WaitWritable)
        return moverops::armWait(ring_, ends, plan, state);
    state.begin();
    switch (plan.first) {
        case MoveStage::Fill:
            submitFill(ends, plan, state);
            break;
        case MoveStage::Forward:
            submitForward(ends, plan, failpointLength(FailSite::Forward, plan.length), state);
            break;
        case MoveStage::Tee:
        case MoveStage::AuditWrite: {
            auto lengths = moverops::chainLengths(plan);
            if (plan.first == MoveStage::Tee) submitTee(ends, plan, lengths.tee, state);
            if (plan.first == MoveStage::AuditWrite || plan.thenAuditWrite)
                submitAuditWrite(ends, plan, lengths.write, plan.thenForward, state);
            if (plan.thenForward) submitForward(ends, plan, lengths.forward, state);
            break;
        }
        default:
            break;
    }
    return MoveReport::inFlight();
}

MoveReport ChainMover::complete(CompletionTag tag, MoveCompletion completion,
                                MoveInFlight& state) noexcept {
    return moverops::gather(tag, completion, state);
}

}  // namespace splicegate
