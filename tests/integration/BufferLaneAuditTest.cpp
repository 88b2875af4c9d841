// Audit in each lane (issue 13): the buffer lane writes received bytes to the log from user
// memory, no tee, and must record exactly what the splice lane records. For each lane and each
// durability mode, concurrent connections of mixed sizes (small interactive-like ones and bulk
// ones): every transfer byte-exact, `splicegate-audit verify` exits 0 after the drain, every
// connection listed closed, and each direction's extract equals what the far end received.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/AuditSupport.h"
#include "tests/support/Daemon.h"
#include "tests/support/Sockets.h"
#include "tests/support/TestServer.h"

namespace splicegate::test {
namespace {

constexpr uint64_t kKiB = 1024;

struct LaneMode {
    const char* lane;
    const char* durability;
};

class BufferLaneAuditTest : public ::testing::TestWithParam<LaneMode> {};

TEST_P(BufferLaneAuditTest, ExtractEqualsWhatEachEndReceived) {
    const LaneMode mode = GetParam();
    raiseFdLimit();
    std::vector<CheckedClient> clients;
    for (uint64_t i = 0; i < 24; ++i) {
        // Sizes from a few bytes to a few hundred KiB, both directions, some one-way.
        uint64_t c2u = i % 6 == 0 ? 0 : 13 + (i * i * 977) % (300 * kKiB);
        uint64_t u2c = i % 7 == 1 ? 0 : 7 + (i * 7919) % (200 * kKiB);
        clients.push_back(makeCheckedClient(500 + i, c2u, u2c));
    }
    auto board = std::make_shared<CheckedBoard>();
    TestServer upstream(checkedUpstream(board, milliseconds(60000)));
    TempDir root;
    const std::string auditDir = root.path() + "/audit";
    uint16_t port = pickFreePort();
    Daemon daemon(relayArgs(port, {upstream.address()},
                            {"--audit-dir", auditDir, "--audit-durability", mode.durability,
                             "--audit-fsync-interval-ms", "20", "--lane", mode.lane}));
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    runCheckedClients(port, clients, milliseconds(60000));
    waitHandlersDone(upstream, milliseconds(5000));
    for (const auto& c : clients) EXPECT_TRUE(c.complete()) << c.describe() << daemon.why(20);
    ASSERT_TRUE(terminatesCleanly(daemon, milliseconds(20000)));

    ASSERT_TRUE(auditVerifies(auditDir));
    auto listing = auditList(auditDir);
    ASSERT_TRUE(listing.ok()) << listing.describe();
    ASSERT_EQ(listing.rows.size(), clients.size()) << listing.describe();
    std::map<uint16_t, const AuditRow*> byPort;
    for (const auto& row : listing.rows) byPort[portOf(row.client)] = &row;
    auto atUpstream = upstreamResults(*board);
    ScratchDir out;
    for (const auto& c : clients) {
        auto it = byPort.find(c.port);
        ASSERT_NE(it, byPort.end()) << c.describe() << ": not in the audit";
        const AuditRow& row = *it->second;
        EXPECT_EQ(row.state, "closed") << "audit connection " << row.id;
        EXPECT_EQ(row.reason, "closed") << "audit connection " << row.id;
        auto up = atUpstream.find(c.id);
        ASSERT_NE(up, atUpstream.end()) << c.describe() << ": the upstream never saw it";
        auto c2u = auditExtract(auditDir, row.id, "c2u", out.path() + "/c2u");
        auto u2c = auditExtract(auditDir, row.id, "u2c", out.path() + "/u2c");
        ASSERT_TRUE(c2u.ok() && u2c.ok())
            << describeProcess(c2u.process) << " / " << describeProcess(u2c.process);
        // Extract == what the far end received: same length, and a prefix of the sent stream of
        // that length is exactly one stream.
        EXPECT_EQ(c2u.size, up->second.c2uStreamBytes()) << c.describe();
        EXPECT_TRUE(fileIsPrefixOf(c2u.path, c2uStreamOf(c))) << c.describe();
        EXPECT_EQ(u2c.size, c.u2c.bytes) << c.describe();
        EXPECT_TRUE(fileIsPrefixOf(u2c.path, u2cStreamOf(c))) << c.describe();
        EXPECT_EQ(row.c2u, 16 + c.c2uSize) << "audit connection " << row.id;
        EXPECT_EQ(row.u2c, c.u2cSize) << "audit connection " << row.id;
    }
}

INSTANTIATE_TEST_SUITE_P(
    LanesAndModes, BufferLaneAuditTest,
    ::testing::Values(LaneMode{"buffer", "strict"}, LaneMode{"buffer", "batch"},
                      LaneMode{"buffer", "none"}, LaneMode{"splice", "strict"},
                      LaneMode{"splice", "batch"}, LaneMode{"splice", "none"},
                      LaneMode{"auto", "strict"}, LaneMode{"auto", "batch"}),
    [](const auto& param) {
        return std::string(param.param.lane) + "_" + param.param.durability;
    });

}  // namespace
}  // namespace splicegate::test
