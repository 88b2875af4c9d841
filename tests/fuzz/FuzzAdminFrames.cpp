// libFuzzer target fuzz_admin_frames: bytes from a hostile admin peer go through what the admin
// server does with them — frame reassembly (fed in pieces of varying size), Request parsing and
// dispatch to a stub handler, Response encoding — and a few invariants are checked:
// - feeding the stream in pieces yields exactly the frames (and the error) of feeding it whole;
// - no frame exceeds the limit and buffered input stays within its bound;
// - every answer encodes as one frame that decodes back to the same Response;
// - a read-only peer is denied every action and answered like anyone else otherwise.
// The same function is replayed over the seed corpus by ReplayMain.cpp (a CTest test).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "admin/AdminFraming.h"

namespace {

using namespace splicegate::admin;

constexpr std::size_t kMaxBuffered = 2 * kMaxFrameBytes + 64 * 1024;

void check(bool condition, const char* what) {
    if (!condition) {
        std::fprintf(stderr, "fuzz_admin_frames: invariant violated: %s\n", what);
        std::abort();
    }
}

// The dispatcher stub: answers like a daemon would, with payloads shaped by the request.
Response stubHandle(const Request& request) {
    Response response;
    switch (request.command_case()) {
        case Request::kStatus:
            response.mutable_status()->set_version("fuzz");
            response.mutable_status()->add_routes()->set_name("default");
            break;
        case Request::kListConnections:
            for (int i = 0; i < 3; ++i)
                response.mutable_list_connections()->add_connections()->set_id(i);
            break;
        case Request::kKillConnection:
            if (request.kill_connection().id() % 2 == 0) {
                return errorResponse(ERROR_NOT_FOUND, "no connection");
            }
            response.mutable_kill_connection()->set_id(request.kill_connection().id());
            break;
        case Request::kXdpAdd:
            if (request.xdp_add().cidr().size() > 64) throw std::runtime_error("cidr too long");
            response.mutable_xdp_add();
            break;
        case Request::kXdpDelete:
            return errorResponse(ERROR_INVALID_ARGUMENT, "bad cidr " + request.xdp_delete().cidr());
        default:
            response.mutable_version()->set_version("fuzz");
            break;
    }
    return response;
}

void answer(const std::string& frame) {
    check(frame.size() <= kMaxFrameBytes, "frame over the limit");
    Dispatch dispatch = dispatchFrame(frame, stubHandle);
    check(!dispatch.command.empty(), "empty command label");
    check(!resultLabel(dispatch.response.error().code()).empty(), "empty result label");
    const std::string bytes = encodeFrame(dispatch.response);
    std::deque<std::string> frames;
    std::string error;
    check(decodeFrames(bytes, frames, error, kMaxFrameBytes), "response does not decode");
    check(frames.size() == 1, "response is not one frame");
    Response decoded;
    check(decoded.ParseFromString(frames.front()), "response does not parse");
    check(decoded.SerializeAsString() == dispatch.response.SerializeAsString(),
          "response changed in a round trip");
    // A read-only peer gets the same answer to a read-only command and is denied every action.
    Dispatch readOnly = dispatchFrame(frame, stubHandle, Access::ReadOnly);
    check(readOnly.denied == dispatch.action, "read-only access not applied to actions only");
    if (readOnly.denied) {
        check(readOnly.response.error().code() == ERROR_PERMISSION_DENIED, "denial not reported");
    } else {
        check(readOnly.response.SerializeAsString() == dispatch.response.SerializeAsString(),
              "read-only access changed a read-only answer");
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view input(reinterpret_cast<const char*>(data), size);

    // Whole at once.
    FrameAssembler whole(kMaxFrameBytes, kMaxBuffered);
    const bool wholeOk = whole.feed(input);
    std::vector<std::string> wholeFrames;
    while (whole.hasFrame()) wholeFrames.push_back(whole.popFrame());

    // In pieces of 1..64 bytes chosen by a generator seeded from the input, answering frames as
    // they complete (as the server does).
    FrameAssembler pieces(kMaxFrameBytes, kMaxBuffered);
    std::vector<std::string> pieceFrames;
    std::uint32_t state = static_cast<std::uint32_t>(size) * 2654435761u + 1;
    bool piecesOk = true;
    std::size_t offset = 0;
    while (offset < input.size() && piecesOk) {
        state = state * 1103515245u + 12345u;
        const std::size_t length =
            std::min<std::size_t>(1 + (state >> 16) % 64, input.size() - offset);
        piecesOk = pieces.feed(input.substr(offset, length));
        offset += length;
        check(pieces.bufferedBytes() <= kMaxBuffered, "buffered input over its bound");
        while (pieces.hasFrame()) {
            pieceFrames.push_back(pieces.popFrame());
            answer(pieceFrames.back());
        }
    }
    check(wholeOk == piecesOk, "pieces and whole disagree on failure");
    check(wholeFrames == pieceFrames, "pieces and whole disagree on frames");
    if (!wholeOk) {
        check(whole.error() == pieces.error(), "pieces and whole disagree on the error");
        check(!pieces.feed("more"), "a failed assembler accepted more");
    } else {
        check(whole.midFrame() == pieces.midFrame(), "pieces and whole disagree on truncation");
        if (whole.midFrame()) check(!whole.truncation().empty(), "no truncation text");
    }
    return 0;
}
