#pragma once
// One direction of a connection in the buffer lane: a multishot recv picks provided buffers
// (common/BufferRing.h), the received chunks wait here in order until the audit has them and
// the sink took them, and each buffer goes back to the ring once fully sent. Pure bookkeeping,
// like SpliceFlow in the splice lane: it records what the recv, audit writes and sends achieved and
// says what comes next; the worker does the I/O. Thread affinity: the owning worker's thread.
//
// Byte positions count from the front of the held chunks (the front one possibly part sent):
//   [released: may be sent][written, waiting for durability (strict)][audit write][unaudited]
// Invariants that keep the audit fail-closed, as in the splice lane: a byte is sent only once
// released, and released only once written (strict: once durable). In strict mode no write
// starts while written bytes wait for durability, so the group commit a direction waits for
// covers every byte it will release.
//
// Memory: an idle direction holds no buffer and no heap memory (the chunk list only allocates
// once bytes arrive, and keeps a few entries after that).
#include <cstddef>
#include <cstdint>
#include <vector>

namespace splicegate {

enum class LaneStep {
    AuditWrite,    // write auditSlice() to the log
    WaitAudit,     // an audit write is in flight
    WaitDurable,   // strict: written, waiting for the group commit
    Send,          // send sendSlice() to the sink
    WaitSend,      // a send is in flight (one at a time keeps the order)
    WaitWritable,  // the sink is full: wait for POLLOUT
    Receive,       // nothing held: the recv is armed, or must be, or waits for buffers
    SwitchLane,    // the switch to splice was asked, the recv has ended and nothing is held
    ShutdownSink,  // the source ended and everything was sent: pass the EOF on
    Finished,      // EOF passed on
};

// What a recv completion meant.
enum class RecvOutcome {
    Data,         // bytes arrived in a buffer (held now)
    EndOfStream,  // the source sent FIN
    NoBuffers,    // -ENOBUFS: the ring ran dry (back-pressure, not an error)
    Cancelled,    // -ECANCELED: our own cancel (pause, lane switch, close)
    Failed,       // any other error: the source's
};

class BufferLaneFlow {
  public:
    // A piece of one held buffer.
    struct Slice {
        std::uint16_t buffer = 0;
        std::uint32_t offset = 0;
        std::uint32_t length = 0;
    };
    // A blocked sink lets at most this many buffers pile up before the recv is paused, so one
    // slow peer cannot drain the worker's ring.
    static constexpr std::size_t kMaxHeldChunks = 8;

    void configureAudit(bool audited, bool awaitDurable) noexcept {
        audited_ = audited;
        awaitDurable_ = awaitDurable;
    }

    // Receive side. recordArmed(): a multishot recv was submitted. recordRecv(): one of its
    // completions, `more` being its IORING_CQE_F_MORE. `buffer` is held from here on when the
    // outcome is Data; otherwise a buffer the completion named stays the caller's to give back.
    void recordArmed() noexcept {
        armed_ = true;
        cancelAsked_ = false;
        starved_ = false;
    }
    RecvOutcome recordRecv(int result, bool hasBuffer, std::uint16_t buffer, bool more) noexcept;
    bool recvArmed() const noexcept { return armed_; }
    // The armed recv should be cancelled: a lane switch was asked, or a blocked sink let
    // kMaxHeldChunks pile up. Once asked (recordCancelAsked), not again until re-armed.
    bool recvCancelWanted() const noexcept {
        return armed_ && !cancelAsked_ && (switchAsked_ || heldChunks() >= kMaxHeldChunks);
    }
    void recordCancelAsked() noexcept { cancelAsked_ = true; }
    // The cancel found nothing to cancel although the recv is still armed: ask again later.
    void recordCancelMissed() noexcept { cancelAsked_ = false; }
    // Waiting for buffers after -ENOBUFS; cleared by recordArmed().
    bool starved() const noexcept { return starved_; }
    void requestLaneSwitch() noexcept { switchAsked_ = true; }
    // The direction moved to the other lane (or came back): a later stay starts afresh.
    void recordLaneSwitched() noexcept { switchAsked_ = cancelAsked_ = starved_ = false; }
    bool laneSwitchAsked() const noexcept { return switchAsked_; }

    // Audit side: the next unaudited bytes (at most one held buffer's worth).
    Slice auditSlice() const noexcept;
    void recordAuditStarted(std::uint32_t length) noexcept { auditInFlight_ = length; }
    // Bytes written (> 0; a short write leaves the rest for the next AuditWrite step), or <= 0
    // for a failure (0: the log took nothing, like ENOSPC): false on failure.
    bool recordAuditWrite(int result) noexcept;
    void recordDurable() noexcept;
    // Fail-open after an audit failure: what was not yet in the log is sent unaudited. Returns
    // the bytes given up.
    std::size_t abandonAudit() noexcept;

    // Send side: the released front (within the front buffer).
    Slice sendSlice() const noexcept;
    // A send of `length` bytes of sendSlice() was submitted; its buffers stay held until
    // recordSend() books its result.
    void recordSendStarted(std::uint32_t length) noexcept { sendInFlight_ = length; }
    std::uint32_t sendInFlight() const noexcept { return sendInFlight_; }
    // A send of `requested` bytes and its result (bytes, or -errno). A short send means the
    // sink is full. Fully sent buffers are listed in sentBuffers() for the caller to give back.
    // False when the send failed.
    bool recordSend(long result, std::size_t requested) noexcept;
    std::vector<std::uint16_t>& sentBuffers() noexcept { return sent_; }
    void recordSinkWritable() noexcept {
        sinkBlocked_ = false;
        writableWaitArmed_ = false;
    }
    // A POLLOUT wait was armed: not twice.
    void recordWritableWaitArmed() noexcept { writableWaitArmed_ = true; }
    bool writableWaitArmed() const noexcept { return writableWaitArmed_; }
    // Strict mode: the flow was queued for the next group commit; not twice.
    void recordDurableWaitAsked() noexcept { durableWaitAsked_ = true; }
    bool durableWaitAsked() const noexcept { return durableWaitAsked_; }
    void recordSinkShutdown() noexcept { sinkShut_ = true; }

    LaneStep next() const noexcept;
    bool finished() const noexcept { return sinkShut_; }
    bool sourceEnded() const noexcept { return sourceEof_; }
    std::size_t heldChunks() const noexcept { return chunks_.size() - front_; }
    std::size_t bytesHeld() const noexcept { return held_; }
    std::uint64_t bytesForwarded() const noexcept { return forwarded_; }
    // Every buffer still held (the connection closes): the caller gives them back; the flow is
    // empty afterwards.
    template <typename GiveBack>
    void releaseAll(GiveBack&& giveBack) noexcept {
        for (std::size_t i = front_; i < chunks_.size(); ++i) giveBack(chunks_[i].buffer);
        for (auto id : sent_) giveBack(id);
        chunks_.clear();
        sent_.clear();
        front_ = 0;
        held_ = released_ = writtenUnreleased_ = auditInFlight_ = 0;
        frontSent_ = sendInFlight_ = 0;
    }

  private:
    struct Chunk {
        std::uint16_t buffer;
        std::uint32_t length;
    };
    Slice sliceAt(std::size_t position, std::size_t limit) const noexcept;

    std::vector<Chunk> chunks_;        // held, in arrival order, from chunks_[front_]
    std::vector<std::uint16_t> sent_;  // fully sent, to give back
    std::size_t front_ = 0;
    std::uint32_t frontSent_ = 0;        // bytes of the front chunk already sent
    std::uint32_t sendInFlight_ = 0;     // bytes of the submitted send, until its completion
    std::size_t held_ = 0;               // received, not sent
    std::size_t released_ = 0;           // from the front: cleared for sending
    std::size_t writtenUnreleased_ = 0;  // written, waiting for durability
    std::size_t auditInFlight_ = 0;
    std::uint64_t forwarded_ = 0;
    bool audited_ = false;
    bool awaitDurable_ = false;
    bool armed_ = false;
    bool cancelAsked_ = false;
    bool starved_ = false;
    bool switchAsked_ = false;
    bool writableWaitArmed_ = false;
    bool durableWaitAsked_ = false;
    bool sourceEof_ = false;
    bool sinkBlocked_ = false;
    bool sinkShut_ = false;
};

}  // namespace splicegate
