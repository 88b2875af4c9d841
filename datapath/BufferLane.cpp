#include "datapath/BufferLane.h"

#include <sys/socket.h>

#include <cerrno>

namespace splicegate {

BufferLane::BufferLane(RingOps& ring, RingRegistration& registration, unsigned entries,
                       std::size_t bufferSize)
    : ring_(ring), buffers_(registration, kBufferGroup, entries, bufferSize) {}

void BufferLane::armRecv(BufferLaneFlow& flow, SocketRef source, CompletionTag tag) noexcept {
    // Multishot recv (kernel 6.0): one SQE delivers every chunk until it ends (EOF, error,
    // -ENOBUFS, cancel), each completion with IORING_CQE_F_MORE while it stays armed.
    ring_.recvMultishot(source.index, kBufferGroup, tag, source.flags());
    flow.recordArmed();
}

void BufferLane::cancelRecv(BufferLaneFlow& flow, CompletionTag recvTag,
                            CompletionTag cancelTag) noexcept {
    ring_.cancel(recvTag, cancelTag);
    flow.recordCancelAsked();
}

RecvOutcome BufferLane::onRecv(BufferLaneFlow& flow, int result, std::uint32_t flags) noexcept {
    auto buffer = BufferRing::bufferOf(flags);
    bool more = flags & IORING_CQE_F_MORE;
    if (buffer) buffers_.take(*buffer, result > 0 ? static_cast<std::size_t>(result) : 0);
    auto outcome = flow.recordRecv(result, buffer.has_value(), buffer.value_or(0), more);
    if (buffer && outcome != RecvOutcome::Data) buffers_.giveBack(*buffer);
    if (outcome == RecvOutcome::NoBuffers) {
        ++dryEvents_;
        buffers_.widen();
    }
    return outcome;
}

void BufferLane::dropCompletion(std::uint32_t flags) noexcept {
    if (auto buffer = BufferRing::bufferOf(flags)) {
        buffers_.take(*buffer, 0);
        buffers_.giveBack(*buffer);
    }
}

std::span<const std::byte> BufferLane::bytes(const BufferLaneFlow::Slice& slice) const noexcept {
    return buffers_.memory(slice.buffer).subspan(slice.offset, slice.length);
}

void BufferLane::submitSend(SocketRef sink, const BufferLaneFlow::Slice& slice, std::size_t length,
                            CompletionTag tag) noexcept {
    auto data = bytes(slice);
    // Without MSG_WAITALL a stream send completes with what the socket took (a short send when
    // it filled up); a socket with no room at all is polled by io_uring, not reported.
    ring_.send(sink.index, data.first(length < data.size() ? length : data.size()), MSG_NOSIGNAL,
               tag, sink.flags());
}

void BufferLane::giveBackSent(BufferLaneFlow& flow) noexcept {
    auto& sent = flow.sentBuffers();
    for (auto id : sent) buffers_.giveBack(id);
    sent.clear();
}

void BufferLane::submitWrite(int fd, std::uint64_t offset, const BufferLaneFlow::Slice& slice,
                             std::size_t length, CompletionTag tag) noexcept {
    auto data = bytes(slice);
    ring_.write(fd, data.first(length < data.size() ? length : data.size()), offset, 0, tag);
}

void BufferLane::release(BufferLaneFlow& flow) noexcept {
    flow.releaseAll([this](std::uint16_t id) { buffers_.giveBack(id); });
}

}  // namespace splicegate
