#include "datapath/InlineMover.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <climits>

#include "datapath/Failpoints.h"
#include "datapath/MoverOps.h"

namespace splicegate {
namespace {

int asResult(ssize_t moved) noexcept {
    return moved < 0 ? -errno : static_cast<int>(std::min<ssize_t>(moved, INT_MAX));
}

int fill(const MoveEnds& ends, std::size_t length) noexcept {
    if (int injected = injectedErrno(FailSite::Fill)) return -injected;
    length = failpointLength(FailSite::Fill, length);
    return asResult(
        ::splice(ends.source, nullptr, ends.pipeWrite, nullptr, length, moverops::kSpliceFlags));
}

int forward(const MoveEnds& ends, std::size_t length) noexcept {
    if (int injected = injectedErrno(FailSite::Forward)) return -injected;
    length = failpointLength(FailSite::Forward, length);
    return asResult(
        ::splice(ends.pipeRead, nullptr, ends.sink, nullptr, length, moverops::kSpliceFlags));
}

int tee(const MoveEnds& ends, std::size_t length) noexcept {
    if (int injected = injectedErrno(FailSite::Tee)) return -injected;
    return asResult(::tee(ends.pipeRead, ends.auditPipeWrite, length, SPLICE_F_NONBLOCK));
}

// Into the log from the worker itself: io-wq runs the splices into one file one after another
// anyway (docs/kernel-notes.md §9) and every chunk waits for its write before it is forwarded, so
// a hand-off would only add latency. The write copies into the page cache; when the disk falls
// behind, dirty-page throttling slows this worker, the back-pressure a fail-closed audit needs.
int auditWrite(const MoveEnds& ends, const AuditDestination& to, std::size_t length) noexcept {
    if (int injected = injectedErrno(FailSite::AuditWrite)) return -injected;
    if (to.inMemory())
        return asResult(
            ::read(ends.auditPipeRead, to.memory.data(), std::min(length, to.memory.size())));
    auto offset = static_cast<loff_t>(to.offset);
    return asResult(::splice(ends.auditPipeRead, nullptr, to.fd, &offset, length, SPLICE_F_MOVE));
}

}  // namespace

// An audit step runs its tee and write only: the write must be booked in the index before any
// of its bytes are forwarded (a chunk the index lacks is not in the log), and the driver books
// it between the two. The chain engine cannot wait for that; this one can, for free.
MoveReport InlineMover::start(const MoveEnds& ends, const MovePlan& plan,
                              MoveInFlight& state) noexcept {
    MoveReport report;
    switch (plan.first) {
        case MoveStage::WaitReadable:
        case MoveStage::WaitWritable:
            return moverops::armWait(ring_, ends, plan, state);
        case MoveStage::Fill:
            report.add(MoveStage::Fill, fill(ends, plan.length));
            break;
        case MoveStage::Forward:
            report.add(MoveStage::Forward, forward(ends, plan.length));
            break;
        case MoveStage::Tee:
        case MoveStage::AuditWrite: {
            auto lengths = moverops::chainLengths(plan);
            if (plan.first == MoveStage::Tee) {
                int copied = tee(ends, lengths.tee);
                report.add(MoveStage::Tee, copied);
                if (!plan.thenAuditWrite) break;
                if (copied != static_cast<int>(lengths.tee)) {  // the soft link breaks
                    report.add(MoveStage::AuditWrite, -ECANCELED);
                    break;
                }
            }
            report.add(MoveStage::AuditWrite, auditWrite(ends, plan.audit, lengths.write));
            break;
        }
    }
    return report;
}

MoveReport InlineMover::complete(CompletionTag tag, MoveCompletion completion,
                                 MoveInFlight& state) noexcept {
    return moverops::gather(tag, completion, state);
}

}  // namespace splicegate
