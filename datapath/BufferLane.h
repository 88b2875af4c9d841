#pragma once
// The buffer lane of one worker: its provided buffer ring and the few operations a flow in this
// lane needs (docs/kernel-notes.md §6). A direction keeps one multishot IORING_OP_RECV armed with
// buffer select; the kernel picks a buffer only when bytes arrive, so an idle connection holds
// none. Received bytes are sent to the sink by an IORING_OP_SEND, one in flight per direction
// (which keeps the order), and written to the audit log from the same memory, no tee. A buffer
// goes back to the ring once fully sent. The sends of a loop turn go to the kernel in the turn's
// one submit: a request costs no system call of its own, and the wake-ups the sends cause do not
// preempt the worker between two of them (docs/kernel-notes.md §6).
//
// -ENOBUFS (the ring ran dry) is back-pressure: the direction is parked here and re-armed once
// buffers come back, at most as many directions as there are free buffers at a time.
//
// This class submits and books; the worker decides (close, wait, switch lanes) from the
// outcomes. It prepares its SQEs through RingOps and registers its buffer ring through a
// RingRegistration, so it runs over tests/support/FakeRing.h as well as over a Ring.
// Thread affinity: the worker's thread; the io_uring must outlive it. Set-up throws
// (see BufferRing); everything else is noexcept.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>

#include "common/BufferRing.h"
#include "common/CompletionTag.h"
#include "common/RingOps.h"
#include "common/RingRegistration.h"
#include "datapath/BufferLaneFlow.h"
#include "datapath/SocketTable.h"

namespace splicegate {

class BufferLane {
  public:
    static constexpr std::uint16_t kBufferGroup = 0;

    // The buffer ring (`entries` buffers of `bufferSize` bytes, group kBufferGroup) is
    // registered through `registration`, the registrations of the ring `ring` prepares for.
    BufferLane(RingOps& ring, RingRegistration& registration, unsigned entries,
               std::size_t bufferSize);

    std::size_t bufferSize() const noexcept { return buffers_.bufferSize(); }
    unsigned buffersInUse() const noexcept { return buffers_.inUse(); }
    // Lets the ring's memory follow a past peak back down (BufferRing::trim): every few seconds.
    void trim() noexcept { buffers_.trim(); }
    // -ENOBUFS completions so far.
    std::uint64_t dryEvents() const noexcept { return dryEvents_; }

    // Submits a multishot recv on `source` picking from the ring; its completions carry `tag`.
    void armRecv(BufferLaneFlow& flow, SocketRef source, CompletionTag tag) noexcept;
    // Asks the kernel to end the recv tagged `recvTag`; its final completion (no
    // IORING_CQE_F_MORE) follows. The cancel's own completion carries `cancelTag`.
    void cancelRecv(BufferLaneFlow& flow, CompletionTag recvTag, CompletionTag cancelTag) noexcept;
    // Books a recv completion into `flow`; a buffer the flow does not keep goes back at once.
    // `result` may differ from the completion's (fault injection in test builds).
    RecvOutcome onRecv(BufferLaneFlow& flow, int result, std::uint32_t flags) noexcept;
    // A completion for a flow that is gone: its buffer, if any, goes back.
    void dropCompletion(std::uint32_t flags) noexcept;

    std::span<const std::byte> bytes(const BufferLaneFlow::Slice& slice) const noexcept;
    // An IORING_OP_SEND of the first `length` bytes of `slice` to `sink`; the slice's buffer
    // must stay held until its completion (bytes sent, or -errno).
    void submitSend(SocketRef sink, const BufferLaneFlow::Slice& slice, std::size_t length,
                    CompletionTag tag) noexcept;
    // Gives back the buffers `flow` has fully sent.
    void giveBackSent(BufferLaneFlow& flow) noexcept;
    // An IORING_OP_WRITE of the first `length` bytes of `slice` at `offset` of `fd`.
    void submitWrite(int fd, std::uint64_t offset, const BufferLaneFlow::Slice& slice,
                     std::size_t length, CompletionTag tag) noexcept;
    // The connection closes: every buffer `flow` holds goes back.
    void release(BufferLaneFlow& flow) noexcept;

    // Back-pressure after -ENOBUFS: `tag` names the parked direction (the caller's encoding).
    void park(CompletionTag tag) { parked_.push_back(tag); }
    // Calls `rearm(tag)` for parked directions, oldest first, one per free buffer. A tag whose
    // flow is gone is the caller's to skip.
    template <typename Rearm>
    void rearmParked(Rearm&& rearm) {
        std::size_t free = buffers_.entries() - buffers_.inUse();
        std::size_t count = free < parked_.size() ? free : parked_.size();
        if (count == 0) return;
        for (std::size_t i = 0; i < count; ++i) {
            auto tag = parked_.front();
            parked_.pop_front();
            rearm(tag);
        }
    }
    bool anyParked() const noexcept { return !parked_.empty(); }

  private:
    RingOps& ring_;
    BufferRing buffers_;
    std::deque<CompletionTag> parked_;
    std::uint64_t dryEvents_ = 0;
};

}  // namespace splicegate
