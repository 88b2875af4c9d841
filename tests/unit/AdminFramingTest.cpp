// Unit tests of the admin protocol's framing and dispatch (admin/AdminFraming.h): reassembly from
// arbitrary pieces, the 1 MiB limit enforced at the prefix, 64-bit and malformed varints,
// truncation, bounded buffering, and the error rules of dispatchFrame().
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/util/delimited_message_util.h>
#include <gtest/gtest.h>

#include <deque>
#include <stdexcept>
#include <string>
#include <vector>

#include "admin/AdminFraming.h"
#include "proto/ProtocolVersion.h"
#include "tests/support/AdminTestSupport.h"

namespace splicegate::admin {
namespace {

using test::varint64;

Request killRequest(std::uint64_t id) {
    Request request;
    request.set_protocol_version(kProtocolVersion);
    request.mutable_kill_connection()->set_id(id);
    return request;
}

Request xdpAdd(const std::string& cidr) {
    Request request;
    request.set_protocol_version(kProtocolVersion);
    request.mutable_xdp_add()->set_cidr(cidr);
    return request;
}

// A stream of several frames of different sizes (an empty one too) and their bodies.
struct Stream {
    std::string bytes;
    std::vector<std::string> bodies;
    void add(const google::protobuf::MessageLite& message) {
        bodies.push_back(message.SerializeAsString());
        bytes += encodeFrame(message);
    }
    void addRaw(const std::string& body) {
        bodies.push_back(body);
        std::string prefix;
        {
            google::protobuf::io::StringOutputStream out(&prefix);
            google::protobuf::io::CodedOutputStream coded(&out);
            coded.WriteVarint64(body.size());
        }
        bytes += prefix + body;
    }
};

Stream sampleStream() {
    Stream stream;
    stream.add(killRequest(7));
    stream.add(Request());                      // empty body: length 0
    stream.add(xdpAdd(std::string(300, 'x')));  // a two-byte length prefix
    stream.add(killRequest(~std::uint64_t{0}));
    stream.addRaw(std::string(20000, 'y'));  // three-byte prefix, spans many pieces
    return stream;
}

std::vector<std::string> drain(FrameAssembler& assembler) {
    std::vector<std::string> frames;
    while (assembler.hasFrame()) frames.push_back(assembler.popFrame());
    return frames;
}

TEST(AdminFraming, SplitAtEveryByteBoundary) {
    const Stream stream = sampleStream();
    for (std::size_t split = 0; split <= stream.bytes.size(); ++split) {
        FrameAssembler assembler;
        ASSERT_TRUE(assembler.feed(std::string_view(stream.bytes).substr(0, split)));
        ASSERT_TRUE(assembler.feed(std::string_view(stream.bytes).substr(split)));
        ASSERT_EQ(drain(assembler), stream.bodies) << "split at " << split;
        EXPECT_FALSE(assembler.midFrame());
        EXPECT_EQ(assembler.bufferedBytes(), 0u);
    }
}

TEST(AdminFraming, TwoSplitsInTheHeadOfTheStream) {
    // Every pair of cut points in the first frames (prefixes and small bodies), in three pieces.
    Stream stream;
    stream.add(killRequest(300));
    stream.add(xdpAdd(std::string(200, 'z')));
    stream.add(killRequest(1));
    for (std::size_t a = 0; a <= stream.bytes.size(); ++a) {
        for (std::size_t b = a; b <= stream.bytes.size(); ++b) {
            FrameAssembler assembler;
            const std::string_view all(stream.bytes);
            ASSERT_TRUE(assembler.feed(all.substr(0, a)));
            ASSERT_TRUE(assembler.feed(all.substr(a, b - a)));
            ASSERT_TRUE(assembler.feed(all.substr(b)));
            ASSERT_EQ(drain(assembler), stream.bodies) << "cuts " << a << "," << b;
        }
    }
}

TEST(AdminFraming, ByteByByte) {
    const Stream stream = sampleStream();
    FrameAssembler assembler;
    std::vector<std::string> frames;
    for (char byte : stream.bytes) {
        ASSERT_TRUE(assembler.feed(&byte, 1));
        for (auto& frame : drain(assembler)) frames.push_back(std::move(frame));
    }
    EXPECT_EQ(frames, stream.bodies);
    EXPECT_EQ(assembler.framesCompleted(), stream.bodies.size());
}

TEST(AdminFraming, ManyFramesInOnePiece) {
    Stream stream;
    for (std::uint64_t id = 0; id < 5000; ++id) stream.add(killRequest(id));
    FrameAssembler assembler(kMaxFrameBytes, 4 * kMaxFrameBytes);
    ASSERT_TRUE(assembler.feed(stream.bytes));
    const auto frames = drain(assembler);
    ASSERT_EQ(frames.size(), 5000u);
    for (std::uint64_t id = 0; id < 5000; ++id) {
        Request request;
        ASSERT_TRUE(request.ParseFromString(frames[id]));
        EXPECT_EQ(request.kill_connection().id(), id);
    }
}

TEST(AdminFraming, ProtobufReadsWhatEncodeFrameWrites) {
    const Request sent = xdpAdd("2001:db8::/32");
    const std::string bytes = encodeFrame(sent) + encodeFrame(killRequest(9));
    google::protobuf::io::ArrayInputStream input(bytes.data(), static_cast<int>(bytes.size()));
    Request first;
    Request second;
    bool clean = false;
    ASSERT_TRUE(google::protobuf::util::ParseDelimitedFromZeroCopyStream(&first, &input, &clean));
    ASSERT_TRUE(google::protobuf::util::ParseDelimitedFromZeroCopyStream(&second, &input, &clean));
    EXPECT_EQ(first.xdp_add().cidr(), "2001:db8::/32");
    EXPECT_EQ(second.kill_connection().id(), 9u);
}

TEST(AdminFraming, FrameOfExactlyTheLimitIsAccepted) {
    const std::string body(kMaxFrameBytes, 'a');
    FrameAssembler assembler;
    ASSERT_TRUE(assembler.feed(varint64(body.size())));
    ASSERT_TRUE(assembler.feed(body));
    ASSERT_TRUE(assembler.hasFrame());
    EXPECT_EQ(assembler.popFrame().size(), kMaxFrameBytes);
}

TEST(AdminFraming, OversizedPrefixFailsBeforeAnyBody) {
    FrameAssembler assembler;
    EXPECT_FALSE(assembler.feed(varint64(kMaxFrameBytes + 1)));
    EXPECT_TRUE(assembler.failed());
    EXPECT_NE(assembler.error().find("1048577"), std::string::npos) << assembler.error();
    EXPECT_NE(assembler.error().find("limit"), std::string::npos) << assembler.error();
    EXPECT_EQ(assembler.bufferedBytes(), 0u);
    // Later bytes are ignored, never buffered.
    EXPECT_FALSE(assembler.feed(std::string(4096, 'b')));
    EXPECT_EQ(assembler.bufferedBytes(), 0u);
    EXPECT_FALSE(assembler.hasFrame());
}

TEST(AdminFraming, OversizedPrefixInTheMiddleOfAPiece) {
    // A good frame, then a bad prefix followed by body bytes in the same piece: the good frame
    // is delivered, nothing after the bad prefix is buffered.
    const std::string bytes =
        encodeFrame(killRequest(5)) + varint64(2 * kMaxFrameBytes) + std::string(1000, 'c');
    FrameAssembler assembler;
    EXPECT_FALSE(assembler.feed(bytes));
    ASSERT_TRUE(assembler.hasFrame());
    Request request;
    ASSERT_TRUE(request.ParseFromString(assembler.popFrame()));
    EXPECT_EQ(request.kill_connection().id(), 5u);
    EXPECT_EQ(assembler.bufferedBytes(), 0u);
}

TEST(AdminFraming, FourGiBVarints) {
    const std::vector<std::pair<std::string, std::string>> prefixes = {
        {"5-byte 4 GiB", varint64(std::uint64_t{1} << 32)},
        {"10-byte 2^64-1", varint64(~std::uint64_t{0})},
        // 4 GiB + 5 padded to 10 bytes: its low 32 bits are 5, so a ReadVarint32 decoder would
        // read a 5-byte frame here.
        {"10-byte 4 GiB + 5", std::string("\x85\x80\x80\x80\x90\x80\x80\x80\x80\x00", 10)},
        // Ten bytes whose last one carries more than bit 63: 2^64 wraps to 0 in a naive decoder.
        {"10-byte 2^64", std::string("\x80\x80\x80\x80\x80\x80\x80\x80\x80\x02", 10)},
        {"10-byte 2^63", std::string("\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01", 10)},
    };
    for (const auto& [name, prefix] : prefixes) {
        FrameAssembler assembler;
        // Prefix alone (no body follows): the error is immediate.
        EXPECT_FALSE(assembler.feed(prefix)) << name;
        EXPECT_TRUE(assembler.failed()) << name;
        EXPECT_FALSE(assembler.hasFrame()) << name;
        EXPECT_EQ(assembler.bufferedBytes(), 0u) << name;
        // Byte by byte: no error before the prefix is complete, then at once.
        FrameAssembler slow;
        for (std::size_t i = 0; i + 1 < prefix.size(); ++i) {
            ASSERT_TRUE(slow.feed(&prefix[i], 1)) << name << " byte " << i;
        }
        EXPECT_FALSE(slow.feed(&prefix.back(), 1)) << name;
    }
}

TEST(AdminFraming, MalformedVarint) {
    const std::string prefix(11, '\xff');
    FrameAssembler assembler;
    for (std::size_t i = 0; i < 9; ++i) ASSERT_TRUE(assembler.feed(&prefix[i], 1));
    EXPECT_TRUE(assembler.midFrame());
    EXPECT_FALSE(assembler.feed(&prefix[9], 1));  // the tenth byte still continues: malformed
    EXPECT_NE(assembler.error().find("malformed"), std::string::npos) << assembler.error();
    EXPECT_FALSE(assembler.midFrame());

    FrameAssembler whole;
    EXPECT_FALSE(whole.feed(prefix + "more"));
    EXPECT_NE(whole.error().find("malformed"), std::string::npos);
}

TEST(AdminFraming, NonCanonicalButSmallPrefixIsAccepted) {
    // 3 encoded in 4 bytes: a valid varint protobuf itself accepts.
    FrameAssembler assembler;
    ASSERT_TRUE(assembler.feed(std::string("\x83\x80\x80\x00", 4) + "abc"));
    ASSERT_TRUE(assembler.hasFrame());
    EXPECT_EQ(assembler.popFrame(), "abc");
}

TEST(AdminFraming, Truncated) {
    const std::string frame = encodeFrame(xdpAdd("192.0.2.0/24"));
    FrameAssembler inBody;
    ASSERT_TRUE(inBody.feed(frame.substr(0, 5)));
    EXPECT_TRUE(inBody.midFrame());
    EXPECT_FALSE(inBody.hasFrame());
    EXPECT_EQ(inBody.bufferedBytes(), 4u);
    const std::string expected =
        "got 4 of " + std::to_string(frame.size() - 1) + " bytes of a frame";
    EXPECT_EQ(inBody.partialFrame(), expected);
    EXPECT_NE(inBody.truncation().find(expected), std::string::npos) << inBody.truncation();

    FrameAssembler inPrefix;
    ASSERT_TRUE(inPrefix.feed(std::string("\x80\x80", 2)));
    EXPECT_TRUE(inPrefix.midFrame());
    EXPECT_NE(inPrefix.truncation().find("2 bytes of a length prefix"), std::string::npos)
        << inPrefix.truncation();

    std::deque<std::string> frames;
    std::string error;
    EXPECT_FALSE(decodeFrames(frame + frame.substr(0, 3), frames, error));
    EXPECT_EQ(frames.size(), 1u);
    EXPECT_NE(error.find("mid-frame"), std::string::npos) << error;
    frames.clear();
    EXPECT_TRUE(decodeFrames(frame + frame.substr(0, 3), frames, error, kMaxFrameBytes, true));
    EXPECT_EQ(frames.size(), 1u);
}

TEST(AdminFraming, BodyGrowsWithWhatArrivedNotWithThePrefix) {
    FrameAssembler assembler;
    ASSERT_TRUE(assembler.feed(varint64(kMaxFrameBytes) + "x"));
    EXPECT_EQ(assembler.bufferedBytes(), 1u);
    EXPECT_TRUE(assembler.midFrame());
}

TEST(AdminFraming, UnpoppedFramesAreBounded) {
    // Each queued frame costs its body plus kQueuedFrameOverhead.
    FrameAssembler assembler(100, 2 * (100 + kQueuedFrameOverhead) + 50);
    const std::string frame = varint64(100) + std::string(100, 'q');
    ASSERT_TRUE(assembler.feed(frame));
    ASSERT_TRUE(assembler.feed(frame));
    EXPECT_FALSE(assembler.feed(frame));  // a third would exceed the bound: refused at the prefix
    EXPECT_NE(assembler.error().find("unanswered"), std::string::npos) << assembler.error();
    EXPECT_EQ(assembler.queuedFrames(), 2u);
    // Popping frees the budget on a healthy assembler.
    FrameAssembler popping(100, 2 * (100 + kQueuedFrameOverhead) + 50);
    for (int i = 0; i < 10; ++i) {
        ASSERT_TRUE(popping.feed(frame));
        popping.popFrame();
    }
}

// Zero-length frames used to be free: a peer that never reads could queue millions of them.
TEST(AdminFraming, ZeroLengthFramesCountAgainstTheBound) {
    FrameAssembler assembler(100, 10 * kQueuedFrameOverhead);
    ASSERT_TRUE(assembler.feed(std::string(10, '\0')));
    EXPECT_EQ(assembler.queuedFrames(), 10u);
    EXPECT_EQ(assembler.bufferedBytes(), 10 * kQueuedFrameOverhead);
    EXPECT_FALSE(assembler.feed(std::string(1, '\0')));
    EXPECT_NE(assembler.error().find("unanswered"), std::string::npos) << assembler.error();
    EXPECT_EQ(assembler.queuedFrames(), 10u);
    // Whole-stream decoding takes any number of them.
    std::deque<std::string> frames;
    std::string error;
    EXPECT_TRUE(decodeFrames(std::string(100000, '\0'), frames, error)) << error;
    EXPECT_EQ(frames.size(), 100000u);
}

TEST(AdminFraming, Labels) {
    EXPECT_EQ(commandLabel(killRequest(1)), "kill_connection");
    EXPECT_EQ(commandLabel(xdpAdd("::/0")), "xdp_add");
    Request status;
    status.mutable_status();
    EXPECT_EQ(commandLabel(status), "status");
    EXPECT_EQ(commandLabel(Request()), "unknown");
    EXPECT_EQ(resultLabel(ERROR_NONE), "ok");
    EXPECT_EQ(resultLabel(ERROR_BAD_FRAME), "bad_frame");
    EXPECT_EQ(resultLabel(ERROR_NOT_FOUND), "not_found");
    EXPECT_EQ(resultLabel(ERROR_PERMISSION_DENIED), "permission_denied");
    EXPECT_EQ(resultLabel(static_cast<ErrorCode>(99)), "error_99");
}

TEST(AdminDispatch, AnswersThroughTheHandler) {
    int calls = 0;
    auto handler = [&](const Request& request) {
        ++calls;
        Response response;
        response.mutable_kill_connection()->set_id(request.kill_connection().id());
        return response;
    };
    Dispatch dispatch = dispatchFrame(killRequest(42).SerializeAsString(), handler);
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(dispatch.command, "kill_connection");
    EXPECT_FALSE(dispatch.closeAfter);
    EXPECT_EQ(dispatch.response.error().code(), ERROR_NONE);
    EXPECT_EQ(dispatch.response.kill_connection().id(), 42u);
    EXPECT_EQ(dispatch.response.protocol_version(), kProtocolVersion);
}

TEST(AdminDispatch, GarbageIsABadFrame) {
    bool called = false;
    auto handler = [&](const Request&) {
        called = true;
        return Response();
    };
    // Field 31 with wire type 7 (invalid), and a truncated length-delimited field.
    for (const std::string& garbage :
         {std::string("\xff\xff\xff", 3), std::string("\x52\x05\x08", 3)}) {
        Dispatch dispatch = dispatchFrame(garbage, handler);
        EXPECT_FALSE(called);
        EXPECT_TRUE(dispatch.closeAfter);
        EXPECT_EQ(dispatch.command, "frame");
        EXPECT_EQ(dispatch.response.error().code(), ERROR_BAD_FRAME);
        EXPECT_NE(dispatch.response.error().message().find("does not parse"), std::string::npos);
        EXPECT_EQ(dispatch.response.protocol_version(), kProtocolVersion);
    }
}

TEST(AdminDispatch, EmptyOrNewerCommandIsUnknownAndNamesBothVersions) {
    bool called = false;
    auto handler = [&](const Request&) {
        called = true;
        return Response();
    };
    Dispatch empty = dispatchFrame("", handler);
    EXPECT_FALSE(called);
    EXPECT_FALSE(empty.closeAfter);
    EXPECT_EQ(empty.command, "unknown");
    EXPECT_EQ(empty.response.error().code(), ERROR_UNKNOWN_COMMAND);
    EXPECT_NE(empty.response.error().message().find("empty command"), std::string::npos);

    // A newer client: protocol_version 7 and a command field (99) this build does not know.
    std::string newer;
    {
        google::protobuf::io::StringOutputStream out(&newer);
        google::protobuf::io::CodedOutputStream coded(&out);
        coded.WriteTag(1 << 3);  // protocol_version, varint
        coded.WriteVarint32(7);
        coded.WriteTag((99 << 3) | 2);  // field 99, length-delimited (an empty message)
        coded.WriteVarint32(0);
    }
    Dispatch unknown = dispatchFrame(newer, handler);
    EXPECT_FALSE(called);
    EXPECT_FALSE(unknown.closeAfter);
    EXPECT_EQ(unknown.response.error().code(), ERROR_UNKNOWN_COMMAND);
    const std::string& message = unknown.response.error().message();
    EXPECT_NE(message.find("field 99"), std::string::npos) << message;
    EXPECT_NE(message.find("version 7"), std::string::npos) << message;
    EXPECT_NE(message.find("version " + std::to_string(kProtocolVersion)), std::string::npos)
        << message;
}

TEST(AdminDispatch, HandlerExceptionIsFailed) {
    auto handler = [](const Request&) -> Response { throw std::runtime_error("disk on fire"); };
    Dispatch dispatch = dispatchFrame(killRequest(1).SerializeAsString(), handler);
    EXPECT_FALSE(dispatch.closeAfter);
    EXPECT_EQ(dispatch.response.error().code(), ERROR_FAILED);
    EXPECT_NE(dispatch.response.error().message().find("disk on fire"), std::string::npos);
    EXPECT_EQ(dispatch.response.protocol_version(), kProtocolVersion);
}

// --admin-readonly-group: read-only commands run, actions are denied before the handler.
TEST(AdminDispatch, ReadOnlyAccessPerCommand) {
    int calls = 0;
    auto handler = [&](const Request&) {
        ++calls;
        return Response();
    };
    std::vector<std::pair<Request, bool>> cases;  // request, is an action
    auto add = [&](auto set, bool action) {
        Request request;
        set(request);
        cases.emplace_back(request, action);
    };
    add([](Request& r) { r.mutable_status(); }, false);
    add([](Request& r) { r.mutable_list_connections(); }, false);
    add([](Request& r) { r.mutable_version(); }, false);
    add([](Request& r) { r.mutable_xdp_list(); }, false);
    add([](Request& r) { r.mutable_kill_connection()->set_id(17); }, true);
    add([](Request& r) { r.mutable_drain(); }, true);
    add([](Request& r) { r.mutable_reload(); }, true);
    add([](Request& r) { r.mutable_rotate_audit(); }, true);
    add([](Request& r) { r.mutable_xdp_add()->set_cidr("192.0.2.0/24"); }, true);
    add([](Request& r) { r.mutable_xdp_delete()->set_cidr("192.0.2.0/24"); }, true);
    for (const auto& [request, action] : cases) {
        const std::string frame = request.SerializeAsString();
        const std::string name = describeCommand(request);
        calls = 0;
        Dispatch readOnly = dispatchFrame(frame, handler, Access::ReadOnly);
        EXPECT_EQ(readOnly.action, action) << name;
        EXPECT_EQ(readOnly.denied, action) << name;
        EXPECT_EQ(calls, action ? 0 : 1) << name;
        EXPECT_FALSE(readOnly.closeAfter) << name;
        EXPECT_EQ(readOnly.description, name);
        if (action) {
            EXPECT_EQ(readOnly.response.error().code(), ERROR_PERMISSION_DENIED) << name;
            EXPECT_NE(readOnly.response.error().message().find("'" + name + "'"), std::string::npos)
                << readOnly.response.error().message();
        }
        Dispatch full = dispatchFrame(frame, handler, Access::Full);
        EXPECT_FALSE(full.denied) << name;
        EXPECT_EQ(full.response.error().code(), ERROR_NONE) << name;
    }
    EXPECT_EQ(describeCommand(cases[4].first), "kill 17");
    EXPECT_EQ(describeCommand(cases[8].first), "xdp add 192.0.2.0/24");
    Request hostile;
    hostile.mutable_xdp_delete()->set_cidr(std::string("a\nb") + std::string(100, 'c'));
    const std::string described = describeCommand(hostile);
    EXPECT_EQ(described.find('\n'), std::string::npos) << described;
    EXPECT_LT(described.size(), 80u) << described;
}

}  // namespace
}  // namespace splicegate::admin
