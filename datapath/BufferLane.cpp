#include "datapath/BufferLane.h"

#include <sys/socket.h>

#include <cerrno>

#include "common/Ring.h"

namespace splicegate {

BufferLane::BufferLane(io_uring& ring, unsigned entries, std::size_t bufferSize)
    : ring_(&ring), buffers_(ring, kBufferGroup, entries, bufferSize) {}

void BufferLane::armRecv(BufferLaneFlow& flow, SocketRef source, std::uint64_t tag) noexcept {
    auto* sqe = nextSqe(*ring_);
    // Multishot recv (kernel 6.0): one SQE delivers every chunk until it ends (EOF, error,
    // -ENOBUFS, cancel), each completion with IORING_CQE_F_MORE while it stays armed.
    io_uring_prep_recv_multishot(sqe, source.index, nullptr, 0, 0);
    source.mark(sqe);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = kBufferGroup;
    io_uring_sqe_set_data64(sqe, tag);
    flow.recordArmed();
}

void BufferLane::cancelRecv(BufferLaneFlow& flow, std::uint64_t recvTag,
                            std::uint64_t cancelTag) noexcept {
    auto* sqe = nextSqe(*ring_);
    io_uring_prep_cancel64(sqe, recvTag, 0);
    io_uring_sqe_set_data64(sqe, cancelTag);
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
                            std::uint64_t tag) noexcept {
    auto data = bytes(slice);
    auto* sqe = nextSqe(*ring_);
    // Without MSG_WAITALL a stream send completes with what the socket took (a short send when
    // it filled up); a socket with no room at all is polled by io_uring, not reported.
    io_uring_prep_send(sqe, sink.index, data.data(), length < data.size() ? length : data.size(),
                       MSG_NOSIGNAL);
    sink.mark(sqe);
    io_uring_sqe_set_data64(sqe, tag);
}

void BufferLane::giveBackSent(BufferLaneFlow& flow) noexcept {
    auto& sent = flow.sentBuffers();
    for (auto id : sent) buffers_.giveBack(id);
    sent.clear();
}

void BufferLane::submitWrite(int fd, std::uint64_t offset, const BufferLaneFlow::Slice& slice,
                             std::size_t length, std::uint64_t tag) noexcept {
    auto data = bytes(slice);
    auto* sqe = nextSqe(*ring_);
    io_uring_prep_write(sqe, fd, data.data(),
                        static_cast<unsigned>(length < data.size() ? length : data.size()), offset);
    io_uring_sqe_set_data64(sqe, tag);
}

void BufferLane::release(BufferLaneFlow& flow) noexcept {
    flow.releaseAll([this](std::uint16_t id) { buffers_.giveBack(id); });
}

}  // namespace splicegate
