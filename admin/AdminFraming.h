#pragma once
// Framing of the admin protocol (proto/splicegate/admin.proto): every message on the admin socket
// is a protobuf message preceded by its length as a varint (protobuf's delimited format).
// - FrameAssembler: reassembles one peer's frames from arbitrary byte pieces (a frame may span
//   many pieces, a piece may hold many frames) with bounded memory. A length prefix above the
//   frame limit (1 MiB) or a malformed varint is an error as soon as the prefix is complete,
//   before any of the body is buffered; the body is buffered as it arrives, never reserved ahead.
// - dispatchFrame(): one frame -> Request -> handler -> Response, with the protocol's error rules
//   (bad frame, unknown command, handler failure). Shared by AdminServer and the fuzzer.
// - encodeFrame(): a message as one frame.
// Pure logic: no I/O, no clocks, no logging. Thread affinity: none (one assembler per peer).
// Error contract: nothing throws except std::bad_alloc; errors are returned as text.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <string_view>

#include "admin/AdminCommands.h"
#include "splicegate/admin.pb.h"

namespace splicegate::admin {

// Largest frame body either side accepts from the other (over 1 MiB is an error). The
// daemon keeps its responses within it (a long connection list says how many it left out), so
// a client refuses a larger length prefix before buffering any of the body.
inline constexpr std::size_t kMaxFrameBytes = std::size_t{1} << 20;
// A varint of a 64-bit value takes at most 10 bytes.
inline constexpr std::size_t kMaxVarintBytes = 10;
// What one queued frame costs beyond its body (its std::string and deque slot): charged against
// the buffered-input bound so that a flood of zero-length frames is bounded like any other.
inline constexpr std::size_t kQueuedFrameOverhead = 64;

class FrameAssembler {
  public:
    // `maxFrameBytes`: the largest body accepted. `maxBufferedBytes`: bound on everything held
    // (complete frames not yet popped + the partial one); at least one frame of maxFrameBytes.
    explicit FrameAssembler(std::size_t maxFrameBytes = kMaxFrameBytes,
                            std::size_t maxBufferedBytes = 0);

    // Consumes the next piece of the stream. Complete frames are queued for popFrame(). Returns
    // false when the stream is broken (now or earlier); error() says why, and later pieces are
    // ignored. Bytes after a bad prefix are never buffered.
    bool feed(std::string_view piece);
    bool feed(const void* data, std::size_t size) {
        return feed(std::string_view(static_cast<const char*>(data), size));
    }

    bool hasFrame() const noexcept { return !frames_.empty(); }
    std::size_t queuedFrames() const noexcept { return frames_.size(); }
    // The oldest complete frame's body (precondition: hasFrame()).
    std::string popFrame();

    // Drops the complete frames not yet popped (a peer being closed gets no more answers).
    void discardFrames() noexcept;

    bool failed() const noexcept { return !error_.empty(); }
    const std::string& error() const noexcept { return error_; }

    // True when part of a frame (prefix or body) has arrived but not all of it.
    bool midFrame() const noexcept { return headerLength_ > 0 || inBody_; }
    // What has arrived of the partial frame: "got 5 of 12 bytes of a frame", "got 2 bytes of a
    // length prefix"; empty when !midFrame().
    std::string partialFrame() const;
    // For a stream that ended mid-frame: "the connection ended mid-frame: got 5 of 12 bytes...".
    std::string truncation() const;
    // Frames completed since construction (popped or not).
    std::uint64_t framesCompleted() const noexcept { return framesCompleted_; }
    // Bytes held: complete frames not yet popped (each with kQueuedFrameOverhead) plus the
    // partial frame.
    std::size_t bufferedBytes() const noexcept { return queuedBytes_ + body_.size(); }

  private:
    bool fail(std::string message);

    std::size_t maxFrameBytes_;
    std::size_t maxBufferedBytes_;
    char header_[kMaxVarintBytes] = {};
    std::size_t headerLength_ = 0;
    bool inBody_ = false;
    std::size_t bodyLength_ = 0;
    std::string body_;
    std::deque<std::string> frames_;
    std::size_t queuedBytes_ = 0;
    std::uint64_t framesCompleted_ = 0;
    std::string error_;
};

// Decodes every complete frame in `bytes` (a whole stream at once); false with `error` set on a
// bad prefix or, when `allowTrailing` is false, an incomplete last frame.
bool decodeFrames(std::string_view bytes, std::deque<std::string>& frames, std::string& error,
                  std::size_t maxFrameBytes = kMaxFrameBytes, bool allowTrailing = false);

// `message` serialized as one frame: varint length, then the bytes.
std::string encodeFrame(const google::protobuf::MessageLite& message);

// splicegate_admin_requests_total labels. commandLabel(): the oneof field's name ("status",
// "list_connections", "kill_connection", ...), or "unknown" when no known command is set.
std::string commandLabel(const Request& request);
// "ok" for ERROR_NONE, else the code without "ERROR_", lower case ("bad_frame", "not_found").
std::string resultLabel(ErrorCode code);

// A Response carrying only an error (protocol_version set to this build's).
Response errorResponse(ErrorCode code, std::string message);

// What to do with one frame.
struct Dispatch {
    Response response;        // protocol_version always set to kProtocolVersion
    std::string command;      // commandLabel(), or "frame" when the frame did not parse
    bool closeAfter = false;  // the frame was bad: send the response, then close the peer
    bool action = false;      // a command that needs Access::Full (logged naming the peer)
    bool denied = false;      // refused with ERROR_PERMISSION_DENIED: the peer's access is short
    std::string description;  // describeCommand() of a parsed request, else empty
};

using RequestHandlerFn = std::function<Response(const Request&)>;

// Parses `frame` as a Request and answers it. The handler is called only for a request that
// parsed, names a command this build knows and that `access` allows; a frame that does not parse
// gets ERROR_BAD_FRAME (closeAfter), an empty or unknown command (a newer client)
// ERROR_UNKNOWN_COMMAND naming both protocol versions, an action from a read-only peer
// ERROR_PERMISSION_DENIED (the connection stays), and a handler that throws ERROR_FAILED with
// the exception's text.
Dispatch dispatchFrame(std::string_view frame, const RequestHandlerFn& handle,
                       Access access = Access::Full);

}  // namespace splicegate::admin
