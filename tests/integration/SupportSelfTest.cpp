// Checks of the integration-test harness itself (no daemon): if these fail, the relay tests'
// verdicts mean nothing.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "tests/support/Daemon.h"
#include "tests/support/PatternStream.h"
#include "tests/support/Sha256.h"
#include "tests/support/Sockets.h"
#include "tests/support/TestServer.h"
#include "tests/support/Traffic.h"

namespace splicegate::test {
namespace {

TEST(SupportSelfTest, Sha256KnownAnswer) {
    Sha256 sha;
    sha.update("abc", 3);
    EXPECT_EQ(sha.finishHex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(SupportSelfTest, PatternIsIndependentOfChunking) {
    constexpr std::size_t kSize = 100003;
    std::vector<uint8_t> whole(kSize), pieces(kSize);
    PatternStream(42).fill(whole.data(), kSize);
    PatternStream stream(42);
    std::size_t offset = 0;
    for (std::size_t step = 1; offset < kSize; step = step * 3 % 1021 + 1) {
        std::size_t n = std::min(step, kSize - offset);
        stream.fill(pieces.data() + offset, n);
        offset += n;
    }
    EXPECT_EQ(whole, pieces);
    std::vector<uint8_t> other(kSize);
    PatternStream(43).fill(other.data(), kSize);
    EXPECT_NE(whole, other);
    Sha256 sha;
    sha.update(whole.data(), whole.size());
    EXPECT_EQ(sha.finishHex(), patternSha256(42, kSize));
}

TEST(SupportSelfTest, DirectDuplexIsByteExactAndDetectsTruncation) {
    auto board = std::make_shared<DuplexBoard>();
    TestServer upstream(duplexUpstream(board, milliseconds(20000)));
    auto runs = duplexClients(upstream.port(), 4, 1, 8 << 20, 4 << 20, milliseconds(20000));
    ASSERT_TRUE(board->waitSize(4, deadlineIn(milliseconds(5000))));
    EXPECT_TRUE(duplexMatches(runs, *board, 8 << 20, 4 << 20));
    // The checker must notice a short transfer.
    EXPECT_FALSE(duplexMatches(runs, *board, (8 << 20) + 1, 4 << 20));
}

TEST(SupportSelfTest, ResetIsSeenByThePeer) {
    TestServer server([](int fd, std::size_t) {
        std::this_thread::sleep_for(milliseconds(50));
        armReset(fd);
    });
    int error = 0;
    UniqueFd fd = connectTcp(server.port(), error);
    ASSERT_TRUE(fd) << std::strerror(error);
    EXPECT_EQ(waitPeerClose(fd.get(), deadlineIn(milliseconds(3000))), PeerClose::Reset);
}

TEST(SupportSelfTest, ListeningProbeAndClosedPort) {
    uint16_t port = 0;
    UniqueFd listener = listenTcp(port);
    EXPECT_TRUE(isListening(port));
    listener.reset();
    EXPECT_TRUE(waitListening(port, false, deadlineIn(milliseconds(1000))));
    int error = 0;
    UniqueFd fd = connectTcp(pickFreePort(), error);
    EXPECT_FALSE(fd);
    EXPECT_EQ(error, ECONNREFUSED);
}

TEST(SupportSelfTest, RunProcessCapturesBothStreamsAndExitCode) {
    auto result = runProcess({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"});
    ASSERT_TRUE(result.status);
    EXPECT_TRUE(result.status->isExit(3)) << result.status->describe();
    EXPECT_EQ(result.out, "out\n");
    EXPECT_EQ(result.err, "err\n");
    auto slow = runProcess({"/bin/sleep", "5"}, milliseconds(100));
    EXPECT_FALSE(slow.status);
}

}  // namespace
}  // namespace splicegate::test
