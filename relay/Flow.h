#pragma once
// One direction of a connection: source socket -> lent pipe -> sink socket. Pure bookkeeping: it
// records what the engine's moves achieved and decides the next move, so the short-transfer
// rules are unit-tested without a kernel. Thread affinity: the owning worker's thread.
//
// The chunk pipeline is: fill (source -> pipe) then forward (pipe -> sink). The audit stage
// (tee pipe -> audit pipe, splice audit pipe -> log) will sit between them: forward() may never
// move more than the audit stage released (`released_`), which today equals what was filled.
#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "pipes/Pipe.h"

namespace splicegate {

enum class Direction : std::uint8_t { ClientToUpstream = 0, UpstreamToClient = 1 };
inline const char* toString(Direction d) noexcept {
    return d == Direction::ClientToUpstream ? "c2u" : "u2c";
}

enum class FlowStep {
    Fill,          // move source -> pipe
    Forward,       // move pipe -> sink
    WaitReadable,  // source drained (EAGAIN): wait for readiness, pipe goes back to the pool
    WaitWritable,  // sink full (EAGAIN): wait for it; the pipe keeps its bytes
    ShutdownSink,  // source ended and the pipe is empty: pass the EOF on
    Finished,      // EOF passed on; nothing more in this direction
};

// How one move ended, from its result (bytes, 0, or -errno).
enum class MoveOutcome { Moved, WouldBlock, EndOfStream, Failed };
MoveOutcome classifyFill(ssize_t result) noexcept;
MoveOutcome classifyForward(ssize_t result) noexcept;

class Flow {
public:
    Pipe pipe;  // valid only while lent (bytes in flight or a move under way)

    // Bytes to ask of the next fill: the room left in the pipe.
    std::size_t fillRequest() const noexcept;
    // Bytes the next forward may move: released by the audit stage and not yet forwarded.
    std::size_t forwardRequest() const noexcept { return released_; }
    std::size_t bytesInPipe() const noexcept { return inPipe_; }
    std::uint64_t bytesForwarded() const noexcept { return totalForwarded_; }

    // `requested` is what the fill asked for: a shorter TCP read means the receive queue was
    // drained, so the next step is to wait for readiness instead of a fill that would EAGAIN.
    MoveOutcome recordFill(ssize_t result, std::size_t requested) noexcept;
    MoveOutcome recordForward(ssize_t result) noexcept;
    void recordSinkShutdown() noexcept { sinkShut_ = true; }
    void recordSourceBlocked() noexcept { sourceBlocked_ = true; }
    void recordSourceReadable() noexcept { sourceBlocked_ = false; }
    void recordSinkBlocked() noexcept { sinkBlocked_ = true; }
    void recordSinkWritable() noexcept { sinkBlocked_ = false; }

    FlowStep next() const noexcept;
    bool pipeReturnable() const noexcept { return inPipe_ == 0; }
    bool sourceEnded() const noexcept { return sourceEof_; }
    bool finished() const noexcept { return sinkShut_; }

private:
    std::size_t inPipe_ = 0;            // filled, not yet forwarded
    std::size_t released_ = 0;          // of inPipe_, cleared for forwarding (audit stage)
    std::uint64_t totalForwarded_ = 0;
    bool sourceEof_ = false;
    bool sourceBlocked_ = false;
    bool sinkBlocked_ = false;
    bool sinkShut_ = false;
};

}  // namespace splicegate
