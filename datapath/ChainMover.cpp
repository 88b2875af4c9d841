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
    ring_.splice(injected ? kRejectedFd : ends.source, -1, ends.pipeWrite, -1, length32(length),
                 moverops::kSpliceFlags, moverops::tagOf(plan, MoveStage::Fill));
    state.expect(MoveStage::Fill, injected);
}

void ChainMover::submitTee(const MoveEnds& ends, const MovePlan& plan, std::size_t length,
                           MoveInFlight& state) noexcept {
    int injected = injectedErrno(FailSite::Tee);
    ring_.tee(injected ? kRejectedFd : ends.pipeRead, ends.auditPipeWrite, length32(length),
              SPLICE_F_NONBLOCK, moverops::tagOf(plan, MoveStage::Tee),
              SqeFlags::when(plan.thenAuditWrite, SqeFlag::Link));
    state.expect(MoveStage::Tee, injected);
}

void ChainMover::submitAuditWrite(const MoveEnds& ends, const MovePlan& plan, std::size_t length,
                                  bool linkNext, MoveInFlight& state) noexcept {
    int injected = injectedErrno(FailSite::AuditWrite);
    int from = injected ? kRejectedFd : ends.auditPipeRead;
    auto tag = moverops::tagOf(plan, MoveStage::AuditWrite);
    auto flags = SqeFlags::when(linkNext, SqeFlag::Link);
    if (plan.audit.inMemory()) {
        // Offset -1: a pipe has no position (read at the current one).
        ring_.read(from,
                   plan.audit.memory.first(length32(std::min(length, plan.audit.memory.size()))),
                   static_cast<std::uint64_t>(-1), tag, flags);
    } else {
        ring_.splice(from, -1, plan.audit.fd, static_cast<std::int64_t>(plan.audit.offset),
                     length32(length), moverops::kSpliceFlags, tag, flags);
    }
    state.expect(MoveStage::AuditWrite, injected);
}

void ChainMover::submitForward(const MoveEnds& ends, const MovePlan& plan, std::size_t length,
                               MoveInFlight& state) noexcept {
    int injected = injectedErrno(FailSite::Forward);
    ring_.splice(injected ? kRejectedFd : ends.pipeRead, -1, ends.sink, -1, length32(length),
                 moverops::kSpliceFlags, moverops::tagOf(plan, MoveStage::Forward));
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
