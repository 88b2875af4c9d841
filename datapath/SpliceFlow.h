#pragma once
// One direction of a connection in the splice lane: source socket -> lent pipe -> sink socket, with
// the audit copy on the way. Pure bookkeeping: it records what the engine's moves achieved and
// decides the next move, so the short-transfer rules are unit-tested without a kernel. Thread
// affinity: the owning worker's thread.
//
// A chunk goes through: fill (source -> pipe), tee (pipe -> audit pipe, no consumption),
// audit write (audit pipe -> log file), release (at once, or when durable in strict mode),
// forward (pipe -> sink). Invariants that make the audit fail-closed:
//   forward never moves more than was released, and nothing is released before it was written;
//   tee only copies when every byte teed before has been forwarded, because tee always copies
//   from the front of the pipe — after a short tee the rest is teed once the front is gone.
#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "datapath/Direction.h"
#include "pipes/Pipe.h"

namespace splicegate {

enum class FlowStep {
    Fill,          // move source -> pipe
    Tee,           // copy the pipe's unaudited front -> audit pipe
    AuditWrite,    // move audit pipe -> audit log
    WaitDurable,   // strict mode: written, waiting for the group commit's fdatasync
    Forward,       // move pipe -> sink
    WaitReadable,  // source drained (EAGAIN): wait for readiness, pipes go back to the pool
    WaitWritable,  // sink full (EAGAIN): wait for it; the pipe keeps its bytes
    ShutdownSink,  // source ended and the pipe is empty: pass the EOF on
    Finished,      // EOF passed on; nothing more in this direction
};

// How one move ended, from its result (bytes, 0, or -errno).
enum class MoveOutcome { Moved, WouldBlock, EndOfStream, Failed };
MoveOutcome classifyFill(ssize_t result) noexcept;
MoveOutcome classifyForward(ssize_t result) noexcept;

class SpliceFlow {
  public:
    Pipe pipe;       // lent while bytes are in flight
    Pipe auditPipe;  // lent while an audit copy is in flight

    // `audited`: bytes must pass the audit stages before forwarding. `awaitDurable`: they are
    // released only by recordDurable() (strict mode), not when written.
    void configureAudit(bool audited, bool awaitDurable) noexcept {
        audited_ = audited;
        awaitDurable_ = awaitDurable;
    }
    // A fill that moves less than asked, and less than `bytes`, is taken as "the source is
    // drained": the flow waits for readiness instead of trying again at once.
    // Chain engine: every short fill (SIZE_MAX), as each fill is a thread hand-off. Inline
    // engine: only a small one; after a large short fill another direct splice often finds
    // more (bulk), while after a small one it nearly always finds nothing (request/response).
    void setDrainedBelow(std::size_t bytes) noexcept { drainedBelow_ = bytes; }

    std::size_t fillRequest() const noexcept;
    std::size_t teeRequest() const noexcept { return inPipe_ - teed_; }
    std::size_t auditWriteRequest() const noexcept { return inAuditPipe_; }
    std::size_t forwardRequest() const noexcept { return released_; }
    std::size_t bytesInPipe() const noexcept { return inPipe_; }
    std::size_t bytesInAuditPipe() const noexcept { return inAuditPipe_; }
    std::uint64_t bytesForwarded() const noexcept { return totalForwarded_; }

    // `requested` is what the fill asked for: a shorter TCP read means the receive queue was
    // drained, so the next step is to wait for readiness instead of a fill that would EAGAIN.
    MoveOutcome recordFill(ssize_t result, std::size_t requested) noexcept;
    // Tee and audit write results: bytes, or -errno (an audit failure for the caller to judge).
    bool recordTee(ssize_t result) noexcept;
    bool recordAuditWrite(ssize_t result) noexcept;
    // Strict mode: the bytes written so far are durable.
    void recordDurable() noexcept;
    // Fail-open after an audit failure: what is in flight is forwarded unaudited. Returns the
    // bytes given up (they are counted as lost), and empties the audit stage.
    std::size_t abandonAudit() noexcept;
    MoveOutcome recordForward(ssize_t result) noexcept;
    void recordSinkShutdown() noexcept { sinkShut_ = true; }
    void recordSourceReadable() noexcept { sourceBlocked_ = false; }
    void recordSinkWritable() noexcept { sinkBlocked_ = false; }

    FlowStep next() const noexcept;
    bool pipeReturnable() const noexcept { return inPipe_ == 0; }
    bool auditPipeReturnable() const noexcept { return inAuditPipe_ == 0; }
    bool finished() const noexcept { return sinkShut_; }
    bool sourceEnded() const noexcept { return sourceEof_; }

  private:
    std::size_t inPipe_ = 0;             // filled, not yet forwarded
    std::size_t teed_ = 0;               // front of the pipe already copied, not yet forwarded
    std::size_t inAuditPipe_ = 0;        // teed, not yet written to the log
    std::size_t writtenUnreleased_ = 0;  // written, waiting for durability (strict)
    std::size_t released_ = 0;           // front of the pipe cleared for forwarding
    std::uint64_t totalForwarded_ = 0;
    bool audited_ = false;
    std::size_t drainedBelow_ = SIZE_MAX;
    bool awaitDurable_ = false;
    bool sourceEof_ = false;
    bool sourceBlocked_ = false;
    bool sinkBlocked_ = false;
    bool sinkShut_ = false;
};

}  // namespace splicegate
