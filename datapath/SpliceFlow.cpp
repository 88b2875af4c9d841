#include "datapath/SpliceFlow.h"

#include <algorithm>
#include <cerrno>

namespace splicegate {

MoveOutcome classifyFill(ssize_t result) noexcept {
    if (result > 0) return MoveOutcome::Moved;
    if (result == 0) return MoveOutcome::EndOfStream;
    if (result == -EAGAIN || result == -EINTR) return MoveOutcome::WouldBlock;
    return MoveOutcome::Failed;
}

MoveOutcome classifyForward(ssize_t result) noexcept {
    if (result > 0) return MoveOutcome::Moved;
    // splice() out of a non-empty pipe never legitimately returns 0; treat it like EAGAIN.
    if (result == 0 || result == -EAGAIN || result == -EINTR) return MoveOutcome::WouldBlock;
    return MoveOutcome::Failed;
}

std::size_t SpliceFlow::fillRequest() const noexcept {
    return inPipe_ >= pipe.capacity() ? 0 : pipe.capacity() - inPipe_;
}

MoveOutcome SpliceFlow::recordFill(ssize_t result, std::size_t requested) noexcept {
    auto outcome = classifyFill(result);
    switch (outcome) {
        case MoveOutcome::Moved: {
            auto moved = static_cast<std::size_t>(result);
            inPipe_ += moved;
            if (!audited_) {
                released_ += moved;
                teed_ += moved;
            }
            sourceBlocked_ = moved < requested && moved < drainedBelow_;
            break;
        }
        case MoveOutcome::EndOfStream:
            sourceEof_ = true;
            break;
        case MoveOutcome::WouldBlock:
            sourceBlocked_ = true;
            break;
        case MoveOutcome::Failed:
            break;
    }
    return outcome;
}

bool SpliceFlow::recordTee(ssize_t result) noexcept {
    if (result < 0) return result == -EAGAIN || result == -EINTR || result == -ECANCELED;
    auto copied = std::min(static_cast<std::size_t>(result), teeRequest());
    teed_ += copied;
    inAuditPipe_ += copied;
    return true;
}

bool SpliceFlow::recordAuditWrite(ssize_t result) noexcept {
    if (result == -ECANCELED || result == -EINTR) return true;  // a broken link: try again
    if (result <= 0) return false;  // 0: the log file took nothing (full), like ENOSPC
    auto written = std::min(static_cast<std::size_t>(result), inAuditPipe_);
    inAuditPipe_ -= written;
    if (awaitDurable_)
        writtenUnreleased_ += written;
    else
        released_ += written;
    return true;
}

void SpliceFlow::recordDurable() noexcept {
    released_ += writtenUnreleased_;
    writtenUnreleased_ = 0;
}

std::size_t SpliceFlow::abandonAudit() noexcept {
    auto lost = inPipe_ - released_ - writtenUnreleased_;
    released_ = inPipe_;
    teed_ = inPipe_;
    writtenUnreleased_ = 0;
    inAuditPipe_ = 0;
    return lost;
}

MoveOutcome SpliceFlow::recordForward(ssize_t result) noexcept {
    auto outcome = classifyForward(result);
    if (outcome == MoveOutcome::Moved) {
        auto moved = std::min(static_cast<std::size_t>(result), released_);
        released_ -= moved;
        teed_ -= moved;
        inPipe_ -= moved;
        totalForwarded_ += moved;
        sinkBlocked_ = false;
    } else if (outcome == MoveOutcome::WouldBlock) {
        sinkBlocked_ = true;
    }
    return outcome;
}

FlowStep SpliceFlow::next() const noexcept {
    if (sinkShut_) return FlowStep::Finished;
    if (released_ > 0) return sinkBlocked_ ? FlowStep::WaitWritable : FlowStep::Forward;
    if (inAuditPipe_ > 0) return FlowStep::AuditWrite;
    if (writtenUnreleased_ > 0) return FlowStep::WaitDurable;
    if (teed_ == 0 && inPipe_ > 0) return FlowStep::Tee;
    if (sourceEof_) return inPipe_ == 0 ? FlowStep::ShutdownSink : FlowStep::WaitWritable;
    if (inPipe_ > 0) return FlowStep::WaitWritable;  // unreachable: kept for safety
    if (sourceBlocked_) return FlowStep::WaitReadable;
    return FlowStep::Fill;
}

}  // namespace splicegate
