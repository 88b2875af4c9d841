// Peers resetting connections in the middle of full-duplex transfers, with audit on (no fault
// injection: real RSTs). The log must stay consistent (docs/operations.md, "Audit guarantees": "in
// every mode the log is consistent", `verify` exits 0): a connection closed while audit writes of
// the other direction are still in flight must not end up with a Close record whose byte counts
// disagree with its chunks. And, fail-closed, no far end may hold a byte that the audit lacks, and
// every byte a peer or the audit holds must be the connection's own.
//
// Regressions this test caught (at 173c573; fixed by f8b02a3 and 739c13a):
// 1. Both engines: a chunk whose audit write completed after the connection started closing was
//    indexed but not counted in the Close record, so `verify` exited 1 ("Close record of
//    connection N counts ..., but its chunks hold ...") on a log that never saw a crash.
// 2. Chain engine: a fill (socket -> pipe) completing after the close was dropped, leaving bytes
//    in the pipe that the flow did not book; the pool lent the pipe again as empty and the next
//    connection of that worker forwarded (and audited) them: other connections' bytes reached
//    peers (with the audit off too).
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/AuditSupport.h"
#include "tests/support/Daemon.h"
#include "tests/support/Sockets.h"
#include "tests/support/TestServer.h"
#include "tests/support/Traffic.h"

namespace splicegate::test {
namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;
constexpr uint64_t kStream = 16 * kMiB;  // each way; resets come long before the end

struct Plan {
    bool upstreamResets = false;  // else the client resets
    uint64_t after = 0;           // bytes the resetting side receives first
};

class AuditResetTest : public ::testing::TestWithParam<const char*> {};

TEST_P(AuditResetTest, ResetsMidTransferKeepTheLogConsistent) {
    const std::string engine = GetParam();
    constexpr std::size_t kPerRound = 8;
    constexpr int kRounds = 3;
    std::mt19937_64 random(0x5E7);
    std::uniform_int_distribution<uint64_t> after(64 * kKiB, 3 * kMiB);
    std::map<uint64_t, Plan> plans;  // fixed before any thread starts; read-only afterwards
    for (uint64_t id = 1; id <= kPerRound * kRounds; ++id)
        plans[id] = Plan{id % 2 == 0, after(random)};

    auto board = std::make_shared<CheckedBoard>();
    TestServer upstream([board, &plans](int fd, std::size_t) {
        Deadline deadline = deadlineIn(milliseconds(15000));
        CheckedUpstreamSide side;
        int error = 0;
        if (!recvHeader(fd, side.header, deadline, error)) return;
        side.headerAt = Clock::now();
        auto plan = plans.count(side.header.id) ? plans.at(side.header.id) : Plan{};
        std::atomic<bool> cancel{false};
        SendOptions options;
        options.cancel = &cancel;
        std::thread sender([&] {
            side.u2cSent =
                sendPattern(fd, u2cSeed(side.header.id), side.header.size, deadline, options);
        });
        side.c2u = receiveChecked(fd, ExpectedStream{std::nullopt, c2uSeed(side.header.id)},
                                  deadline, plan.upstreamResets ? plan.after : kStream + kMiB);
        cancel = true;
        sender.join();
        if (plan.upstreamResets) armReset(fd);  // the server's close sends the RST
        board->put(side.header.id, std::move(side));
    });
    TempDir root;
    ScratchDir out;
    const std::string auditDir = root.path() + "/audit";
    uint16_t port = pickFreePort();
    std::vector<CheckedClient> clients;
    {
        Daemon daemon(relayArgs(port, {upstream.address()},
                                {"--audit-dir", auditDir, "--splice-engine", engine}));
        ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
        uint64_t nextId = 1;
        for (int round = 0; round < kRounds; ++round) {
            std::vector<CheckedClient> batch(kPerRound);
            std::vector<std::thread> threads;
            for (auto& client : batch) {
                client.id = nextId++;
                client.c2uSize = client.u2cSize = kStream;
                threads.emplace_back([&, c = &client] {
                    const Plan plan = plans.at(c->id);
                    Deadline deadline = deadlineIn(milliseconds(15000));
                    UniqueFd fd = connectTcp(port, c->connectError);
                    if (!fd) return;
                    c->port = localPort(fd.get());
                    if (!sendHeader(fd.get(), StreamHeader{c->id, c->u2cSize}, deadline,
                                    c->headerError))
                        return;
                    std::atomic<bool> cancel{false};
                    SendOptions options;
                    options.cancel = &cancel;
                    std::thread sender([&] {
                        c->c2uSent =
                            sendPattern(fd.get(), c2uSeed(c->id), c->c2uSize, deadline, options);
                    });
                    c->u2c = receiveChecked(fd.get(), u2cStreamOf(*c), deadline,
                                            plan.upstreamResets ? kStream + kMiB : plan.after);
                    cancel = true;
                    sender.join();
                    if (!plan.upstreamResets) resetClose(fd);
                });
            }
            for (auto& thread : threads) thread.join();
            clients.insert(clients.end(), batch.begin(), batch.end());
        }
        waitHandlersDone(upstream, milliseconds(5000));
        ASSERT_TRUE(daemon.running()) << daemon.why();
        auto status = daemon.terminate(milliseconds(15000));
        EXPECT_TRUE(status && status->isExit(0)) << daemon.why();
    }
    upstream.stop();

    auto verify = auditVerify(auditDir);
    EXPECT_TRUE(verify.status && verify.status->isExit(0))
        << "verify after connections were reset mid-transfer (" << engine
        << " engine, no crash, clean drain): " << describeProcess(verify);

    auto listing = auditList(auditDir);
    ASSERT_TRUE(listing.process.status && !listing.process.status->signal) << listing.describe();
    EXPECT_EQ(listing.rows.size(), clients.size()) << listing.describe();
    std::map<uint16_t, const AuditRow*> byPort;
    for (const auto& row : listing.rows) byPort[portOf(row.client)] = &row;
    std::map<uint64_t, CheckedUpstreamSide> atUpstream;
    for (auto& [id, side] : board->snapshot()) atUpstream[id] = side;
    for (const auto& c : clients) {
        if (c.port == 0) continue;
        auto it = byPort.find(c.port);
        if (it == byPort.end()) {
            ADD_FAILURE() << c.describe() << ": not in the audit";
            continue;
        }
        const AuditRow& row = *it->second;
        EXPECT_EQ(row.state, "closed") << "connection " << row.id;
        if (row.c2u > 16 + c.c2uSize || row.u2c > c.u2cSize) {
            ADD_FAILURE() << c.describe() << ": audit connection " << row.id
                          << " claims more bytes than were sent";
            continue;
        }
        auto c2u = auditExtract(auditDir, row.id, "c2u", out.path() + "/c2u");
        auto u2c = auditExtract(auditDir, row.id, "u2c", out.path() + "/u2c");
        EXPECT_TRUE(c2u.ok() && u2c.ok())
            << describeProcess(c2u.process) << " / " << describeProcess(u2c.process);
        const char* who = plans.at(c.id).upstreamResets ? "upstream resets" : "client resets";
        EXPECT_TRUE(fileIsPrefixOf(c2u.path, c2uStreamOf(c)))
            << "the audit's c2u is not what the client sent: " << c.describe() << " (" << who
            << ", audit connection " << row.id << ")";
        EXPECT_TRUE(fileIsPrefixOf(u2c.path, u2cStreamOf(c)))
            << "the audit's u2c is not what the upstream sent: " << c.describe() << " (" << who
            << ", audit connection " << row.id << ")";
        auto u = atUpstream.find(c.id);
        EXPECT_TRUE(c.u2c.matches)
            << "the client received bytes that are not its stream: " << c.describe();
        if (u != atUpstream.end()) {
            EXPECT_TRUE(u->second.c2u.matches)
                << "the upstream received bytes that are not this client's stream: "
                << u->second.c2u.describe() << " for " << c.describe();
        }
        uint64_t c2uReceived = u == atUpstream.end() ? 0 : u->second.c2uStreamBytes();
        EXPECT_LE(c2uReceived, c2u.size)
            << c.describe() << ": the upstream received " << c2uReceived
            << " B of c2u that the audit (" << c2u.size << " B) lacks part of";
        EXPECT_LE(c.u2c.bytes, u2c.size) << c.describe() << ": the client received " << c.u2c.bytes
                                         << " B of u2c, the audit holds " << u2c.size << " B";
    }
}

INSTANTIATE_TEST_SUITE_P(Engines, AuditResetTest, ::testing::Values("inline", "chain"),
                         [](const auto& param) { return std::string(param.param); });

}  // namespace
}  // namespace splicegate::test
