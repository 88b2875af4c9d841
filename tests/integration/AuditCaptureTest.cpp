// Audit capture end to end (issue 3, "Tests"): 100 concurrent connections with random sizes in
// each durability mode (and both splice engines): after the daemon drains, `splicegate-audit
// verify` exits 0, `list` shows every connection closed with the right byte counts, and the
// extracted bytes of each connection and direction hash equal to what the other end received.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/AuditSupport.h"
#include "tests/support/Daemon.h"
#include "tests/support/PatternStream.h"
#include "tests/support/Sockets.h"
#include "tests/support/TestServer.h"
#include "tests/support/Traffic.h"

namespace splicegate::test {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;
constexpr std::size_t kConnections = 100;
constexpr uint64_t kFirstId = 1000;

struct Mode {
    const char* durability;
    const char* engine;
};

std::string modeName(const ::testing::TestParamInfo<Mode>& info) {
    return std::string(info.param.durability) + "_" + info.param.engine;
}

// One client of the duplex protocol (tests/support/Traffic.h) that also remembers its local
// port: the audit log names connections by client address.
struct Client : HeaderedClient {
    DuplexResult result;
};

void runClient(uint16_t relayPort, Client& client, milliseconds timeout) {
    Deadline deadline = deadlineIn(timeout);
    UniqueFd fd = connectAndSendHeader(relayPort, client, deadline);
    if (!fd) return;
    client.result = duplex(fd.get(), c2uSeed(client.id), client.c2uSize, deadline);
}

class AuditCaptureTest : public ::testing::TestWithParam<Mode> {};

TEST_P(AuditCaptureTest, HundredConcurrentConnectionsExtractEqualsWhatEachEndReceived) {
    const Mode mode = GetParam();
    raiseFdLimit();
    // Deterministic random sizes, 0..2 MiB each way; a few forced to 0 and to the maximum.
    std::mt19937_64 random(0xA0D17C0FFEEULL);
    std::uniform_int_distribution<uint64_t> size(0, 2 * kMiB);
    std::vector<Client> clients(kConnections);
    for (std::size_t i = 0; i < kConnections; ++i) {
        clients[i].id = kFirstId + i;
        clients[i].c2uSize = size(random);
        clients[i].u2cSize = size(random);
        if (i % 17 == 3) clients[i].c2uSize = 0;
        if (i % 19 == 5) clients[i].u2cSize = 0;
        if (i == 7) clients[i].c2uSize = clients[i].u2cSize = 2 * kMiB;
        if (i == 11) clients[i].c2uSize = clients[i].u2cSize = 0;
    }

    auto board = std::make_shared<DuplexBoard>();
    TestServer upstream(duplexUpstream(board, milliseconds(90000)));
    TempDir auditRoot;
    const std::string auditDir = auditRoot.path() + "/audit";
    uint16_t port = pickFreePort();
    Daemon daemon(relayArgs(port, {upstream.address()},
                            {"--audit-dir", auditDir, "--audit-durability", mode.durability,
                             "--audit-fsync-interval-ms", "50", "--splice-engine", mode.engine}));
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();

    auto started = Clock::now();
    auto phase = [&](const char* what) {
        std::cout << "[ info ] " << mode.durability << "/" << mode.engine << ": " << what << " at "
                  << std::chrono::duration_cast<milliseconds>(Clock::now() - started).count()
                  << " ms\n";
    };
    {
        std::vector<std::thread> threads;
        for (auto& client : clients)
            threads.emplace_back([&, c = &client] { runClient(port, *c, milliseconds(60000)); });
        for (auto& thread : threads) thread.join();
    }
    phase("transfers done");
    board->waitSize(kConnections, deadlineIn(milliseconds(5000)));
    std::map<uint64_t, DuplexResult> atUpstream;
    for (auto& [id, result] : board->snapshot()) atUpstream[id] = result;

    // 1. The relay itself was byte-exact (otherwise the audit comparison means little).
    int broken = 0;
    for (const auto& c : clients) {
        std::ostringstream why;
        if (c.connectError != 0 || c.headerError != 0) {
            why << "connect/header failed (" << c.connectError << "/" << c.headerError << ")";
        } else {
            auto it = atUpstream.find(c.id);
            if (it == atUpstream.end()) {
                why << "the upstream never recorded it";
            } else {
                const auto& u = it->second;
                if (!c.result.sent.ok() || c.result.sent.bytes != c.c2uSize)
                    why << "client send: " << c.result.sent.describe() << "; ";
                if (!u.received.ok() || !u.received.eof || u.received.bytes != c.c2uSize ||
                    u.received.sha256 != patternSha256(c2uSeed(c.id), c.c2uSize))
                    why << "c2u at upstream: " << u.received.describe() << " of " << c.c2uSize << "; ";
                if (!c.result.received.ok() || !c.result.received.eof ||
                    c.result.received.bytes != c.u2cSize ||
                    c.result.received.sha256 != patternSha256(u2cSeed(c.id), c.u2cSize))
                    why << "u2c at client: " << c.result.received.describe() << " of " << c.u2cSize;
            }
        }
        if (!why.str().empty() && ++broken <= 10)
            ADD_FAILURE() << "connection id " << c.id << " not relayed byte-exact: " << why.str();
    }
    ASSERT_EQ(broken, 0) << "connections not relayed byte-exact" << daemon.why(30);

    // 2. The index keeps up while the daemon runs (every mode, durability none too): within a
    // few intervals every connection reads closed, with the bytes it moved, without a stop.
    uint64_t wantBytes = 0, listedBytes = 0;
    std::size_t listedClosed = 0;
    for (const auto& c : clients) wantBytes += sizeof(StreamHeader) + c.c2uSize + c.u2cSize;
    for (Deadline deadline = deadlineIn(milliseconds(10000)); Clock::now() < deadline;
         std::this_thread::sleep_for(milliseconds(100))) {
        auto live = auditList(auditDir);
        listedBytes = 0;
        listedClosed = 0;
        for (const auto& row : live.rows) {
            listedBytes += row.c2u + row.u2c;
            listedClosed += row.state == "closed";
        }
        if (live.ok() && listedClosed == kConnections && listedBytes == wantBytes) break;
    }
    EXPECT_EQ(listedClosed, kConnections) << "connections the live index shows closed";
    EXPECT_EQ(listedBytes, wantBytes) << "bytes the live index holds";
    phase("live index caught up");

    // 3. Drain: SIGTERM makes the audit durable and exits 0.
    ASSERT_TRUE(terminatesCleanly(daemon, milliseconds(20000))) << "daemon did not drain cleanly";

    phase("drained");
    // 4. verify exits 0.
    EXPECT_TRUE(auditVerifies(auditDir)) << "after a clean drain";

    // 5. list: 100 closed connections with the right byte counts (c2u includes the 16-byte
    //    header the client sends first).
    auto listing = auditList(auditDir);
    ASSERT_TRUE(listing.ok()) << listing.describe();
    EXPECT_EQ(listing.rows.size(), kConnections) << listing.describe();
    std::map<uint16_t, const AuditRow*> byPort;
    for (const auto& row : listing.rows) {
        uint16_t rowPort = portOf(row.client);
        EXPECT_EQ(byPort.count(rowPort), 0u) << "two audit rows with client port " << rowPort;
        byPort[rowPort] = &row;
        EXPECT_EQ(row.state, "closed") << "connection " << row.id;
        EXPECT_EQ(row.reason, "closed") << "connection " << row.id;
        EXPECT_TRUE(row.closed) << "connection " << row.id << " has no close time";
        EXPECT_EQ(row.route, "default");
        EXPECT_EQ(row.upstream, upstream.address()) << "connection " << row.id;
    }

    phase("verified and listed");
    // 6. extract (the shipped binary) equals what the other end received, by SHA-256.
    ScratchDir out;
    int mismatches = 0;
    for (const auto& c : clients) {
        auto it = byPort.find(c.port);
        if (it == byPort.end()) {
            ADD_FAILURE() << "connection id " << c.id << " (client port " << c.port
                          << ") is not in the audit list";
            ++mismatches;
            continue;
        }
        const AuditRow& row = *it->second;
        EXPECT_EQ(row.c2u, 16 + c.c2uSize) << "c2u_bytes of audit connection " << row.id;
        EXPECT_EQ(row.u2c, c.u2cSize) << "u2c_bytes of audit connection " << row.id;
        const DuplexResult& u = atUpstream[c.id];

        auto c2u = auditExtract(auditDir, row.id, "c2u", out.path() + "/c2u");
        if (!c2u.ok()) {
            ADD_FAILURE() << "extract c2u of " << row.id << ": " << describeProcess(c2u.process);
            ++mismatches;
            continue;
        }
        ExpectedStream c2uStream{StreamHeader{c.id, c.u2cSize}, c2uSeed(c.id)};
        bool c2uOk = c2u.size == 16 + u.received.bytes &&
                     fileSha256(c2u.path, 16) == u.received.sha256 &&
                     expectedBytes(c2uStream, 16) == readFile(c2u.path).substr(0, 16);
        if (!c2uOk) {
            ++mismatches;
            ADD_FAILURE() << "audit connection " << row.id << " c2u: extracted " << c2u.size
                          << " B (header + " << (c2u.size >= 16 ? c2u.size - 16 : 0)
                          << "), upstream received header + " << u.received.bytes
                          << " B; digest after the header "
                          << fileSha256(c2u.path, 16).substr(0, 16) << " vs upstream's "
                          << u.received.sha256.substr(0, 16) << "; "
                          << fileIsPrefixOf(c2u.path, c2uStream).message();
        }
        auto u2c = auditExtract(auditDir, row.id, "u2c", out.path() + "/u2c");
        if (!u2c.ok()) {
            ADD_FAILURE() << "extract u2c of " << row.id << ": " << describeProcess(u2c.process);
            ++mismatches;
            continue;
        }
        if (u2c.size != c.result.received.bytes ||
            fileSha256(u2c.path) != c.result.received.sha256) {
            ++mismatches;
            ADD_FAILURE() << "audit connection " << row.id << " u2c: extracted " << u2c.size
                          << " B sha " << fileSha256(u2c.path).substr(0, 16)
                          << ", client received " << c.result.received.bytes << " B sha "
                          << c.result.received.sha256.substr(0, 16) << "; "
                          << fileIsPrefixOf(u2c.path, ExpectedStream{std::nullopt, u2cSeed(c.id)})
                                 .message();
        }
        if (mismatches > 10) break;
    }
    EXPECT_EQ(mismatches, 0);
    phase("extracts compared");
}

INSTANTIATE_TEST_SUITE_P(Modes, AuditCaptureTest,
                         ::testing::Values(Mode{"strict", "inline"}, Mode{"strict", "chain"},
                                           Mode{"batch", "inline"}, Mode{"batch", "chain"},
                                           Mode{"none", "inline"}, Mode{"none", "chain"}),
                         modeName);

}  // namespace
}  // namespace splicegate::test
