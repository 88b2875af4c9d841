#include "datapath/BufferLaneFlow.h"

#include <algorithm>
#include <cerrno>

namespace splicegate {

RecvOutcome BufferLaneFlow::recordRecv(int result, bool hasBuffer, std::uint16_t buffer,
                                       bool more) noexcept {
    if (!more) armed_ = false;
    if (result > 0) {
        if (!hasBuffer) return RecvOutcome::Failed;  // a recv with buffer select always has one
        chunks_.push_back({buffer, static_cast<std::uint32_t>(result)});
        held_ += static_cast<std::size_t>(result);
        if (!audited_) released_ += static_cast<std::size_t>(result);
        return RecvOutcome::Data;
    }
    if (result == 0) {
        sourceEof_ = true;
        return RecvOutcome::EndOfStream;
    }
    if (result == -ENOBUFS) {
        starved_ = true;
        return RecvOutcome::NoBuffers;
    }
    if (result == -ECANCELED) return RecvOutcome::Cancelled;
    return RecvOutcome::Failed;
}

BufferLaneFlow::Slice BufferLaneFlow::sliceAt(std::size_t position,
                                              std::size_t limit) const noexcept {
    // `position` counts from the first unsent byte of the front chunk.
    std::size_t skip = position + frontSent_;
    for (std::size_t i = front_; i < chunks_.size(); ++i) {
        const auto& chunk = chunks_[i];
        if (skip >= chunk.length) {
            skip -= chunk.length;
            continue;
        }
        auto available = chunk.length - skip;
        return Slice{chunk.buffer, static_cast<std::uint32_t>(skip),
                     static_cast<std::uint32_t>(std::min(available, limit))};
    }
    return Slice{};
}

BufferLaneFlow::Slice BufferLaneFlow::auditSlice() const noexcept {
    auto position = released_ + writtenUnreleased_;
    return sliceAt(position, held_ - position);
}

bool BufferLaneFlow::recordAuditWrite(int result) noexcept {
    auto requested = auditInFlight_;
    auditInFlight_ = 0;
    if (result <= 0) return false;
    auto written = std::min(static_cast<std::size_t>(result), requested);
    if (awaitDurable_)
        writtenUnreleased_ += written;
    else
        released_ += written;
    return true;
}

void BufferLaneFlow::recordDurable() noexcept {
    durableWaitAsked_ = false;
    released_ += writtenUnreleased_;
    writtenUnreleased_ = 0;
}

std::size_t BufferLaneFlow::abandonAudit() noexcept {
    auto lost = held_ - released_ - writtenUnreleased_;
    released_ = held_;
    writtenUnreleased_ = 0;
    auditInFlight_ = 0;
    durableWaitAsked_ = false;
    return lost;
}

BufferLaneFlow::Slice BufferLaneFlow::sendSlice() const noexcept {
    return sliceAt(0, released_);
}

bool BufferLaneFlow::recordSend(long result, std::size_t requested) noexcept {
    sendInFlight_ = 0;
    if (result < 0) {
        if (result == -EAGAIN || result == -EWOULDBLOCK || result == -EINTR) {
            sinkBlocked_ = true;
            return true;
        }
        return false;
    }
    auto moved = std::min(static_cast<std::size_t>(result), released_);
    released_ -= moved;
    held_ -= moved;
    forwarded_ += moved;
    sinkBlocked_ = moved < requested;
    auto left = moved;
    while (left > 0 && front_ < chunks_.size()) {
        auto& chunk = chunks_[front_];
        auto take = std::min<std::size_t>(left, chunk.length - frontSent_);
        frontSent_ += static_cast<std::uint32_t>(take);
        left -= take;
        if (frontSent_ == chunk.length) {
            sent_.push_back(chunk.buffer);
            ++front_;
            frontSent_ = 0;
        }
    }
    if (front_ == chunks_.size()) {  // keeps the capacity: no allocation per message
        chunks_.clear();
        front_ = 0;
    }
    return true;
}

LaneStep BufferLaneFlow::next() const noexcept {
    if (sinkShut_) return LaneStep::Finished;
    if (sendInFlight_ > 0) return LaneStep::WaitSend;
    if (released_ > 0) return sinkBlocked_ ? LaneStep::WaitWritable : LaneStep::Send;
    if (auditInFlight_ > 0) return LaneStep::WaitAudit;
    if (writtenUnreleased_ > 0) return LaneStep::WaitDurable;
    if (held_ > 0) return LaneStep::AuditWrite;
    // Nothing held from here on.
    if (sourceEof_) return armed_ ? LaneStep::Receive : LaneStep::ShutdownSink;
    if (switchAsked_ && !armed_) return LaneStep::SwitchLane;
    return LaneStep::Receive;
}

}  // namespace splicegate
