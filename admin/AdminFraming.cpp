#include "admin/AdminFraming.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/util/delimited_message_util.h>

#include <algorithm>
#include <cctype>
#include <exception>
#include <utility>

#include "proto/ProtocolVersion.h"

namespace splicegate::admin {

namespace {

constexpr unsigned char kContinuation = 0x80;

}  // namespace

FrameAssembler::FrameAssembler(std::size_t maxFrameBytes, std::size_t maxBufferedBytes)
    : maxFrameBytes_(maxFrameBytes),
      maxBufferedBytes_(std::max(maxBufferedBytes, maxFrameBytes + kQueuedFrameOverhead)) {}

bool FrameAssembler::fail(std::string message) {
    error_ = std::move(message);
    body_.clear();
    body_.shrink_to_fit();
    inBody_ = false;
    headerLength_ = 0;
    return false;
}

bool FrameAssembler::feed(std::string_view piece) {
    if (failed()) return false;
    while (!piece.empty()) {
        if (!inBody_) {
            // Length prefix: collect bytes up to the one without the continuation bit, then let
            // protobuf decode it as a 64-bit varint (ReadVarint32 would silently truncate a
            // 10-byte prefix of 4 GiB or more to its low 32 bits).
            const auto byte = static_cast<unsigned char>(piece.front());
            piece.remove_prefix(1);
            header_[headerLength_++] = static_cast<char>(byte);
            if ((byte & kContinuation) != 0) {
                if (headerLength_ == kMaxVarintBytes) {
                    return fail("malformed length prefix: varint longer than " +
                                std::to_string(kMaxVarintBytes) + " bytes");
                }
                continue;
            }
            google::protobuf::io::CodedInputStream input(
                reinterpret_cast<const std::uint8_t*>(header_), static_cast<int>(headerLength_));
            std::uint64_t length = 0;
            if (!input.ReadVarint64(&length)) {
                return fail("malformed length prefix: not a valid varint");
            }
            // A 10-byte varint's last byte carries only one bit of a 64-bit value; more means it
            // encodes something above 2^64 (protobuf drops those bits).
            if (headerLength_ == kMaxVarintBytes &&
                static_cast<unsigned char>(header_[kMaxVarintBytes - 1]) > 1) {
                return fail("frame length prefix exceeds 64 bits; the limit is " +
                            std::to_string(maxFrameBytes_) + " bytes");
            }
            headerLength_ = 0;
            if (length > maxFrameBytes_) {
                return fail("frame of " + std::to_string(length) + " bytes exceeds the limit of " +
                            std::to_string(maxFrameBytes_) + " bytes");
            }
            if (queuedBytes_ + length + kQueuedFrameOverhead > maxBufferedBytes_) {
                return fail("too much unanswered input: " + std::to_string(frames_.size()) +
                            " frames (" + std::to_string(queuedBytes_) +
                            " bytes) wait for processing");
            }
            bodyLength_ = static_cast<std::size_t>(length);
            if (bodyLength_ == 0) {
                frames_.emplace_back();
                queuedBytes_ += kQueuedFrameOverhead;
                ++framesCompleted_;
                continue;
            }
            inBody_ = true;
            continue;
        }
        // Body: take what this piece holds of it. The buffer grows with what arrived, never
        // with what the prefix announced.
        const std::size_t take = std::min(piece.size(), bodyLength_ - body_.size());
        body_.append(piece.data(), take);
        piece.remove_prefix(take);
        if (body_.size() == bodyLength_) {
            queuedBytes_ += body_.size() + kQueuedFrameOverhead;
            frames_.push_back(std::move(body_));
            ++framesCompleted_;
            body_ = std::string();
            inBody_ = false;
            bodyLength_ = 0;
        }
    }
    return true;
}

std::string FrameAssembler::popFrame() {
    std::string frame = std::move(frames_.front());
    frames_.pop_front();
    queuedBytes_ -= frame.size() + kQueuedFrameOverhead;
    return frame;
}

void FrameAssembler::discardFrames() noexcept {
    frames_.clear();  // libstdc++ frees every block but one
    queuedBytes_ = 0;
}

std::string FrameAssembler::partialFrame() const {
    if (headerLength_ > 0) {
        return "got " + std::to_string(headerLength_) + " bytes of a length prefix";
    }
    if (inBody_) {
        return "got " + std::to_string(body_.size()) + " of " + std::to_string(bodyLength_) +
               " bytes of a frame";
    }
    return {};
}

std::string FrameAssembler::truncation() const {
    if (!midFrame()) return {};
    return "the connection ended mid-frame: " + partialFrame();
}

bool decodeFrames(std::string_view bytes, std::deque<std::string>& frames, std::string& error,
                  std::size_t maxFrameBytes, bool allowTrailing) {
    // Whole input at once: buffering is bounded by the input itself (every frame takes at least
    // one byte of it and is charged kQueuedFrameOverhead more).
    FrameAssembler assembler(maxFrameBytes,
                             bytes.size() * (1 + kQueuedFrameOverhead) + maxFrameBytes);
    if (!assembler.feed(bytes)) {
        error = assembler.error();
        return false;
    }
    while (assembler.hasFrame()) frames.push_back(assembler.popFrame());
    if (!allowTrailing && assembler.midFrame()) {
        error = assembler.truncation();
        return false;
    }
    return true;
}

std::string encodeFrame(const google::protobuf::MessageLite& message) {
    std::string out;
    {
        google::protobuf::io::StringOutputStream stream(&out);
        google::protobuf::util::SerializeDelimitedToZeroCopyStream(message, &stream);
    }
    return out;
}

std::string commandLabel(const Request& request) {
    if (request.command_case() == Request::COMMAND_NOT_SET) return "unknown";
    const google::protobuf::FieldDescriptor* field =
        Request::descriptor()->FindFieldByNumber(static_cast<int>(request.command_case()));
    return field != nullptr ? field->name() : "unknown";
}

std::string resultLabel(ErrorCode code) {
    if (code == ERROR_NONE) return "ok";
    std::string name = ErrorCode_Name(code);
    if (name.empty()) return "error_" + std::to_string(static_cast<int>(code));
    if (name.rfind("ERROR_", 0) == 0) name.erase(0, 6);
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return name;
}

Response errorResponse(ErrorCode code, std::string message) {
    Response response;
    response.set_protocol_version(kProtocolVersion);
    response.mutable_error()->set_code(code);
    response.mutable_error()->set_message(std::move(message));
    return response;
}

Dispatch dispatchFrame(std::string_view frame, const RequestHandlerFn& handle, Access access) {
    Dispatch result;
    Request request;
    if (!request.ParseFromArray(frame.data(), static_cast<int>(frame.size()))) {
        result.command = "frame";
        result.closeAfter = true;
        result.response = errorResponse(ERROR_BAD_FRAME,
                                        "frame of " + std::to_string(frame.size()) +
                                            " bytes does not parse as a splicegate.admin.Request");
        return result;
    }
    result.command = commandLabel(request);
    if (request.command_case() == Request::COMMAND_NOT_SET) {
        std::string what = "empty command";
        const auto& unknown = request.GetReflection()->GetUnknownFields(request);
        if (unknown.field_count() > 0) {
            what = "unknown command (field " + std::to_string(unknown.field(0).number()) + ")";
        }
        result.response = errorResponse(
            ERROR_UNKNOWN_COMMAND,
            what + " from a client speaking admin protocol version " +
                std::to_string(request.protocol_version()) + "; this daemon speaks version " +
                std::to_string(kProtocolVersion) + " (use a splicegatectl as old as the daemon)");
        return result;
    }
    result.description = describeCommand(request);
    result.action = requiredAccess(request) == Access::Full;
    if (result.action && access != Access::Full) {
        result.denied = true;
        result.response = errorResponse(
            ERROR_PERMISSION_DENIED,
            "permission denied: '" + result.description +
                "' needs root or the admin group (--admin-group); this peer has read-only "
                "access (--admin-readonly-group): status, connections, version, xdp list");
        return result;
    }
    try {
        result.response = handle(request);
    } catch (const std::exception& error) {
        result.response = errorResponse(ERROR_FAILED, result.command + " failed: " + error.what());
    } catch (...) {
        result.response = errorResponse(ERROR_FAILED, result.command + " failed");
    }
    result.response.set_protocol_version(kProtocolVersion);
    return result;
}

}  // namespace splicegate::admin
