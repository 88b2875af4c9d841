#include "relay/Flow.h"

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

std::size_t Flow::fillRequest() const noexcept {
    return inPipe_ >= pipe.capacity() ? 0 : pipe.capacity() - inPipe_;
}

MoveOutcome Flow::recordFill(ssize_t result, std::size_t requested) noexcept {
    auto outcome = classifyFill(result);
    switch (outcome) {
        case MoveOutcome::Moved:
            inPipe_ += static_cast<std::size_t>(result);
            // No audit stage yet: every filled byte is released for forwarding at once.
            released_ += static_cast<std::size_t>(result);
            sourceBlocked_ = static_cast<std::size_t>(result) < requested;
            break;
        case MoveOutcome::EndOfStream: sourceEof_ = true; break;
        case MoveOutcome::WouldBlock: sourceBlocked_ = true; break;
        case MoveOutcome::Failed: break;
    }
    return outcome;
}

MoveOutcome Flow::recordForward(ssize_t result) noexcept {
    auto outcome = classifyForward(result);
    if (outcome == MoveOutcome::Moved) {
        auto moved = static_cast<std::size_t>(result);
        if (moved > forwardRequest()) moved = forwardRequest();  // the kernel never does this
        released_ -= moved;
        inPipe_ -= moved;
        totalForwarded_ += moved;
        sinkBlocked_ = false;
    } else if (outcome == MoveOutcome::WouldBlock) {
        sinkBlocked_ = true;
    }
    return outcome;
}

FlowStep Flow::next() const noexcept {
    if (sinkShut_) return FlowStep::Finished;
    if (forwardRequest() > 0) return sinkBlocked_ ? FlowStep::WaitWritable : FlowStep::Forward;
    if (sourceEof_) return inPipe_ == 0 ? FlowStep::ShutdownSink : FlowStep::WaitWritable;
    if (sourceBlocked_) return FlowStep::WaitReadable;
    return FlowStep::Fill;
}

}  // namespace splicegate
