// The direct audit writer when the disk falls behind (issue 12, "No thread sleeps on the disk"):
// the test-only daemon delays every audit data write by 3 s (SPLICEGATE_AUDIT_WRITE_DELAY_MS, a
// hard-linked io_uring timeout, so no thread sleeps). One worker serves an audited route and an
// unaudited one. Once the audited upload has filled the log buffer it stops: its sink receives
// nothing more. During that stall, on the same worker, the unaudited route relays a whole
// transfer and `splicegatectl status` answers, the audited sink still unchanged afterwards (so
// both happened inside the stall); the daemon's memory stays within the buffer bound. At the end
// the log verifies. The order of observations proves the point; no duration is asserted.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/AuditSupport.h"
#include "tests/support/ControlPlaneDaemon.h"
#include "tests/support/Daemon.h"
#include "tests/support/Sockets.h"
#include "tests/support/TestServer.h"

namespace splicegate::test {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;
constexpr uint64_t kBufferBytes = 64 * kMiB;  // --audit-buffer-bytes default

// Bytes the sink has received on its connection `index` (accept order).
struct SinkCounts {
    std::array<std::atomic<uint64_t>, 4> bytes{};
};

// Waits (bounded) until `value` stays the same over three readings 200 ms apart, above zero.
uint64_t waitStalled(const std::atomic<uint64_t>& value) {
    uint64_t last = value.load();
    int same = 0;
    for (int round = 0; round < 50 && same < 2; ++round) {
        std::this_thread::sleep_for(milliseconds(200));
        uint64_t now = value.load();
        same = now == last && now > 0 ? same + 1 : 0;
        last = now;
    }
    return same >= 2 ? last : 0;
}

TEST(AuditBackPressureTest, FullBufferStopsAuditedFlowsOnlyWhileTheWorkerServesTheRest) {
    SinkCounts counts;
    TestServer sink([&](int fd, std::size_t index) {
        char buffer[65536];
        setIoTimeout(fd, milliseconds(30000));
        for (ssize_t got; (got = ::recv(fd, buffer, sizeof buffer, 0)) > 0;)
            if (index < counts.bytes.size())
                counts.bytes[index].fetch_add(static_cast<uint64_t>(got));
    });
    uint16_t plainPort = pickFreePort();
    ControlPlaneOptions options;
    options.upstreams = {sink.address()};
    options.workers = 1;
    options.configText =
        routeSection("plain", loopback(plainPort), {sink.address()}) + "audit = false\n";
    options.extra = {"--drain-timeout-ms", "1000", "--audit-writer", "direct"};
    std::unique_ptr<ControlPlaneDaemon> daemon;
    {
        ScopedEnv binary("SPLICEGATE_BIN", failpointsBinary());
        ScopedEnv delay("SPLICEGATE_AUDIT_WRITE_DELAY_MS", "3000");
        daemon = std::make_unique<ControlPlaneDaemon>(options);
        ASSERT_TRUE(daemon->start()) << daemon->why();
    }
    ASSERT_TRUE(waitListening(plainPort, true, deadlineIn(milliseconds(10000)))) << daemon->why();
    const long rssBefore = daemon->daemon().rssKiB();

    // The audited upload: as fast as the relay takes it, until told to stop.
    int error = 0;
    UniqueFd audited = connectTcp(daemon->listenPort(), error);
    ASSERT_TRUE(audited) << "connect: " << error;
    ASSERT_TRUE(sink.waitAccepted(1, deadlineIn(milliseconds(5000))));
    setIoTimeout(audited.get(), milliseconds(300));
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> sent{0};
    std::thread uploader([&] {
        std::vector<char> piece(256 * 1024, 'a');
        while (!stop.load()) {
            auto n = ::send(audited.get(), piece.data(), piece.size(), MSG_NOSIGNAL);
            if (n > 0) sent.fetch_add(static_cast<uint64_t>(n));
            if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) break;
        }
    });

    uint64_t stalledAt = waitStalled(counts.bytes[0]);
    ASSERT_GT(stalledAt, 0u) << "the audited upload never stalled" << daemon->why();
    EXPECT_GE(sent.load(), stalledAt);

    // The unaudited route on the same worker relays a whole transfer meanwhile.
    UniqueFd plain = connectTcp(plainPort, error);
    ASSERT_TRUE(plain) << "connect: " << error;
    std::vector<char> payload(4 * kMiB, 'p');
    ASSERT_TRUE(sendAll(plain.get(), payload.data(), payload.size(),
                        deadlineIn(milliseconds(10000)), error))
        << error;
    ::shutdown(plain.get(), SHUT_WR);
    bool delivered = false;
    for (int round = 0; round < 100 && !delivered; ++round) {
        delivered = counts.bytes[1].load() == payload.size();
        if (!delivered) std::this_thread::sleep_for(milliseconds(20));
    }
    EXPECT_TRUE(delivered) << counts.bytes[1].load() << " of " << payload.size();

    // The admin socket answers too.
    auto status = daemon->ctl({"status"});
    EXPECT_TRUE(status.status && status.status->isExit(0)) << status.err;

    // Both inside the stall: the audited sink has not moved.
    EXPECT_EQ(counts.bytes[0].load(), stalledAt)
        << "the audited flow moved on: the checks above were not inside the stall";
    // Memory: the log buffer is mapped and pinned at start; flows hold no user memory beyond.
    const long rssDuring = daemon->daemon().rssKiB();
    EXPECT_LE(rssDuring, rssBefore + static_cast<long>(kBufferBytes / 1024))
        << "RSS " << rssBefore << " KiB before, " << rssDuring << " KiB during the stall";

    stop.store(true);
    uploader.join();
    ::shutdown(audited.get(), SHUT_WR);
    EXPECT_TRUE(daemon->daemon().terminate(milliseconds(60000)).has_value()) << daemon->why();
    EXPECT_TRUE(auditVerifies(daemon->auditDir()));
}

}  // namespace
}  // namespace splicegate::test
