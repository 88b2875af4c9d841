// Retention in the running daemon with a connection that outlives its segments (issue 12: an
// audit that keeps pace for hours). One worker, --audit-retention-bytes 1: the retention job
// deletes every sealed segment but the newest. One upload longer than two 1 GiB segments stays
// open while retention deletes the first two; verify and list, run again and again meanwhile, find
// no problem, and the connection lists with its head deleted. After it closes and the daemon stops,
// the log verifies, the connection lists as closed, and extracting it gives exactly the end of
// what the upstream received.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/AuditSupport.h"
#include "tests/support/ControlPlaneDaemon.h"
#include "tests/support/Daemon.h"
#include "tests/support/PatternStream.h"
#include "tests/support/Sockets.h"
#include "tests/support/TestServer.h"

namespace splicegate::test {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kSeed = 0x5eed'0012;
// Past two segments (1 GiB of data each) into the third, which stays the worker's newest.
constexpr uint64_t kUpload = 2 * kGiB + (kGiB / 4);

bool fileExists(const std::string& path) {
    return ::access(path.c_str(), F_OK) == 0;
}

// Whether the file holds exactly bytes [skip, skip + its size) of PatternStream(seed), which
// end at `total`; the failure names the first differing offset.
::testing::AssertionResult fileIsPatternTail(const std::string& path, uint64_t seed,
                                             uint64_t total) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) return ::testing::AssertionFailure() << "cannot read " << path;
    auto size = static_cast<uint64_t>(in.tellg());
    if (size > total) return ::testing::AssertionFailure() << size << " bytes, more than sent";
    in.seekg(0);
    PatternStream pattern(seed);
    std::vector<uint8_t> expected(1 << 20);
    std::vector<char> got(expected.size());
    for (uint64_t skip = total - size; skip > 0;) {
        auto step = static_cast<std::size_t>(std::min<uint64_t>(skip, expected.size()));
        pattern.fill(expected.data(), step);
        skip -= step;
    }
    for (uint64_t offset = 0; offset < size;) {
        auto step = static_cast<std::size_t>(std::min<uint64_t>(size - offset, expected.size()));
        pattern.fill(expected.data(), step);
        if (!in.read(got.data(), static_cast<std::streamsize>(step)))
            return ::testing::AssertionFailure() << "short read of " << path;
        if (std::memcmp(got.data(), expected.data(), step) != 0)
            return ::testing::AssertionFailure()
                   << path << " differs from the stream in bytes " << (total - size + offset)
                   << ".." << (total - size + offset + step);
        offset += step;
    }
    return ::testing::AssertionSuccess();
}

TEST(AuditRetentionDaemonTest, LongConnectionLosesOnlyItsOldestSegments) {
    std::atomic<uint64_t> received{0};
    TestServer sink([&](int fd, std::size_t) {
        auto result = receiveAll(fd, deadlineIn(milliseconds(120000)), UINT64_MAX, &received);
        (void)result;
    });
    ControlPlaneOptions options;
    options.upstreams = {sink.address()};
    options.workers = 1;
    options.extra = {"--audit-retention-bytes", "1"};
    ControlPlaneDaemon daemon(options);
    ASSERT_TRUE(daemon.start()) << daemon.why();
    const std::string dir = daemon.auditDir();
    const std::string first = dir + "/w00-0000000001.index";
    const std::string second = dir + "/w00-0000000002.index";
    const std::string third = dir + "/w00-0000000003.index";

    int error = 0;
    UniqueFd client = connectTcp(daemon.listenPort(), error);
    ASSERT_TRUE(client) << "connect: " << error;
    SendOptions send;
    send.shutdownWrite = false;  // open while retention runs
    // verify and list run over and over meanwhile: segments rolling, being sealed and being
    // deleted under them are not problems.
    std::atomic<bool> verifying{true};
    std::vector<std::string> verifyFailures;
    int verifyRuns = 0;
    std::thread verifier([&] {
        for (; verifyRuns < 200 && verifying.load(); ++verifyRuns) {
            auto verified = auditVerifies(dir);
            if (!verified) verifyFailures.push_back(verified.message());
            auto listed = auditList(dir);
            if (!listed.ok()) verifyFailures.push_back("list: " + listed.describe());
        }
    });
    auto sent = sendPattern(client.get(), kSeed, kUpload, deadlineIn(milliseconds(120000)), send);

    // Retention runs every second while it finds work; the third segment must exist before the
    // second may go.
    bool deleted = false;
    for (int round = 0; round < 600 && !deleted; ++round) {
        deleted = fileExists(third) && !fileExists(first) && !fileExists(second);
        if (!deleted) std::this_thread::sleep_for(milliseconds(100));
    }
    verifying = false;
    verifier.join();
    ASSERT_TRUE(sent.ok()) << sent.describe();
    ASSERT_TRUE(deleted) << "segments 1 and 2 still there, or no segment 3" << daemon.why();
    EXPECT_GT(verifyRuns, 0);
    EXPECT_TRUE(verifyFailures.empty()) << verifyFailures.size() << " of " << verifyRuns
                                        << " verify and list runs failed; the first:\n"
                                        << verifyFailures.front();
    EXPECT_TRUE(auditVerifies(dir));
    auto listing = auditList(dir);
    ASSERT_TRUE(listing.ok()) << listing.describe();
    ASSERT_EQ(listing.rows.size(), 1u) << listing.describe();
    EXPECT_TRUE(listing.rows[0].headDeleted);
    EXPECT_EQ(listing.rows[0].state, "open");
    EXPECT_GT(listing.rows[0].c2u, 0u);
    EXPECT_LT(listing.rows[0].c2u, kUpload - kGiB);

    ::shutdown(client.get(), SHUT_WR);
    ASSERT_TRUE(waitHandlersDone(sink, milliseconds(60000)));
    EXPECT_EQ(received.load(), kUpload);
    client.reset();
    EXPECT_TRUE(terminatesCleanly(daemon.daemon(), milliseconds(60000)));

    EXPECT_TRUE(auditVerifies(dir));
    listing = auditList(dir);
    ASSERT_TRUE(listing.ok()) << listing.describe();
    ASSERT_EQ(listing.rows.size(), 1u) << listing.describe();
    const auto& row = listing.rows[0];
    EXPECT_TRUE(row.headDeleted);
    EXPECT_EQ(row.state, "closed");
    TempDir out;
    auto extracted = auditExtract(dir, row.id, "c2u", out.path() + "/c2u");
    ASSERT_TRUE(extracted.ok()) << describeProcess(extracted.process);
    EXPECT_EQ(extracted.size, row.c2u);
    EXPECT_NE(extracted.process.err.find("retention deleted its first segments"), std::string::npos)
        << extracted.process.err;
    EXPECT_TRUE(fileIsPatternTail(extracted.path, kSeed, kUpload));
}

}  // namespace
}  // namespace splicegate::test
