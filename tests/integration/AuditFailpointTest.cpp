// Audit under injected faults (issue 3, "Tests"), with the test-only `splicegate-failpoints`
// daemon (datapath/Failpoints.h: SPLICEGATE_FAILPOINTS="site:action:first[:count]"):
// - audit-write EIO at hit 5, fail-closed: that connection closes (audit-error), the others are
//   byte-exact, verify exits 0;
// - audit-sync EIO in strict mode: the waiting connections close (audit-sync-error), the segment
//   is sealed as failed, a new segment is used afterwards, verify exits 0;
// - `short` on audit-write, tee, forward and fill (every hit): transfers and audit stay exact;
// - fill ECONNRESET: the connection is closed as a reset, the daemon carries on;
// - audit-record ENOMEM (an Open or Chunk index record that cannot be buffered): fail-closed
//   closes that connection, fail-open relays it and counts the bytes the log lacks as lost.
// In every case no far end received a byte that the audit lacks, and the audit holds only bytes
// really sent.
#include <gtest/gtest.h>
#include <signal.h>

#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "audit/AuditReader.h"
#include "audit/Records.h"
#include "tests/support/AuditSupport.h"
#include "tests/support/ControlPlaneDaemon.h"
#include "tests/support/HttpFetch.h"
#include "tests/support/Daemon.h"
#include "tests/support/Sockets.h"
#include "tests/support/TestServer.h"
#include "tests/support/Traffic.h"

namespace splicegate::test {
namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

std::unique_ptr<Daemon> startFailpointDaemon(const std::string& failpoints,
                                             const std::vector<std::string>& args) {
    ScopedEnv binary("SPLICEGATE_BIN", failpointsBinary());
    ScopedEnv points("SPLICEGATE_FAILPOINTS", failpoints);
    return std::make_unique<Daemon>(args);
}

std::vector<CheckedClient> makeClients(std::size_t count, uint64_t firstId, uint64_t c2u,
                                       uint64_t u2c) {
    std::vector<CheckedClient> clients;
    for (std::size_t i = 0; i < count; ++i)
        clients.push_back(makeCheckedClient(firstId + i, c2u + 97 * i, u2c + 131 * i));
    return clients;
}

std::vector<CheckedClient> concatenated(std::vector<CheckedClient> first,
                                        const std::vector<CheckedClient>& second) {
    first.insert(first.end(), second.begin(), second.end());
    return first;
}

struct AuditView {
    const AuditRow* row = nullptr;
    uint64_t c2u = 0;  // extracted bytes
    uint64_t u2c = 0;
};

// For every client: the far ends received nothing the audit lacks, the audit holds only real
// bytes, and a complete connection is audited exactly and closed normally. Returns the rows
// by client id (for further checks).
std::map<uint64_t, AuditView> checkAudit(const std::string& auditDir, const AuditListing& listing,
                                         const std::vector<CheckedClient>& clients,
                                         const std::map<uint64_t, CheckedUpstreamSide>& upstream,
                                         const std::string& outDir, bool checkUnforwarded = true) {
    std::map<uint64_t, AuditView> views;
    std::map<uint16_t, const AuditRow*> byPort;
    for (const auto& row : listing.rows) byPort[portOf(row.client)] = &row;
    for (const auto& c : clients) {
        if (c.port == 0) continue;
        AuditView view;
        auto it = byPort.find(c.port);
        if (it != byPort.end() &&
            (it->second->c2u > 16 + c.c2uSize || it->second->u2c > c.u2cSize)) {
            ADD_FAILURE() << c.describe() << ": audit connection " << it->second->id << " holds c2u "
                          << it->second->c2u << " B, u2c " << it->second->u2c
                          << " B: more than was ever sent (not extracted)";
            views[c.id] = AuditView{it->second, it->second->c2u, it->second->u2c};
            continue;
        }
        if (it != byPort.end()) {
            view.row = it->second;
            auto c2u = auditExtract(auditDir, view.row->id, "c2u", outDir + "/c2u");
            auto u2c = auditExtract(auditDir, view.row->id, "u2c", outDir + "/u2c");
            EXPECT_TRUE(c2u.ok() && u2c.ok())
                << describeProcess(c2u.process) << " / " << describeProcess(u2c.process);
            view.c2u = c2u.size;
            view.u2c = u2c.size;
            EXPECT_TRUE(fileIsPrefixOf(c2u.path, c2uStreamOf(c))) << c.describe();
            EXPECT_TRUE(fileIsPrefixOf(u2c.path, u2cStreamOf(c))) << c.describe();
        }
        auto up = upstream.find(c.id);
        uint64_t c2uReceived = up == upstream.end() ? 0 : up->second.c2uStreamBytes();
        if (up != upstream.end()) {
            EXPECT_TRUE(up->second.c2u.matches) << "upstream: " << up->second.c2u.describe();
        }
        EXPECT_TRUE(c.u2c.matches) << c.describe();
        if (checkUnforwarded) {
            EXPECT_LE(c2uReceived, view.c2u)
                << c.describe() << ": the upstream received " << c2uReceived
                << " B of c2u (header included) but the audit holds " << view.c2u << " B";
            EXPECT_LE(c.u2c.bytes, view.u2c)
                << c.describe() << ": the client received " << c.u2c.bytes
                << " B of u2c but the audit holds " << view.u2c << " B";
        }
        if (c.complete()) {
            EXPECT_NE(view.row, nullptr) << c.describe() << ": not in the audit";
            if (view.row != nullptr) {
                EXPECT_EQ(view.c2u, 16 + c.c2uSize) << c.describe();
                EXPECT_EQ(view.u2c, c.u2cSize) << c.describe();
                EXPECT_EQ(view.row->state, "closed") << c.describe();
                EXPECT_EQ(view.row->c2u, view.c2u);
                EXPECT_EQ(view.row->u2c, view.u2c);
            }
        }
        views[c.id] = view;
    }
    return views;
}

// Every test: an audit directory of its own, a checked upstream and the failpoint daemon in
// front of it; after the drain, the audit is checked against what both ends saw.
template <typename TestBase>
class FailpointAuditFixture : public TestBase {
  protected:
    // `upstreamTimeout` bounds each upstream connection, so it outlasts the test's transfers.
    std::unique_ptr<Daemon> startRelay(milliseconds upstreamTimeout, const std::string& failpoints,
                                       const std::vector<std::string>& auditArgs,
                                       unsigned workers = 2) {
        upstream_ =
            std::make_unique<TestServer>(checkedUpstream(board_, upstreamTimeout, {}, 64 << 20));
        port_ = pickFreePort();
        std::vector<std::string> extra{"--audit-dir", auditDir_};
        extra.insert(extra.end(), auditArgs.begin(), auditArgs.end());
        return startFailpointDaemon(failpoints,
                                    relayArgs(port_, {upstream_->address()}, extra, workers));
    }

    // Verify must accept what the drained daemon left before the listing means anything.
    AuditListing listDrainedAudit() {
        EXPECT_TRUE(auditVerifies(auditDir_));
        return auditList(auditDir_);
    }

    std::map<uint64_t, AuditView> checkClients(const AuditListing& listing,
                                               const std::vector<CheckedClient>& clients,
                                               bool checkUnforwarded = true) {
        return checkAudit(auditDir_, listing, clients, upstreamResults(*board_), out_.path(),
                          checkUnforwarded);
    }

    TempDir root_;
    ScratchDir out_;
    const std::string auditDir_ = root_.path() + "/audit";
    std::shared_ptr<CheckedBoard> board_ = std::make_shared<CheckedBoard>();
    std::unique_ptr<TestServer> upstream_;
    uint16_t port_ = 0;
};

// ---- audit-write EIO, fail-closed ----------------------------------------------------------

class AuditWriteErrorTest : public FailpointAuditFixture<::testing::TestWithParam<const char*>> {};

TEST_P(AuditWriteErrorTest, EioAtHit5ClosesThatConnectionOnly) {
    const std::string engine = GetParam();
    auto clients = makeClients(6, 10, 1 * kMiB, 1 * kMiB);
    {
        auto daemon = startRelay(
            milliseconds(20000), "audit-write:EIO:5",
            {"--audit-on-error", "fail-closed", "--splice-engine", engine, "--log-level", "debug"});
        ASSERT_TRUE(daemon->waitReady(port_)) << daemon->why();
        runCheckedClients(port_, clients, milliseconds(20000));
        waitHandlersDone(*upstream_, milliseconds(3000));
        EXPECT_FALSE(grepLines(daemon->log(), "audit write failed").empty()) << daemon->why(30);
        ASSERT_TRUE(daemon->running()) << daemon->why();
        // The daemon carries on.
        CheckedClient later = makeCheckedClient(50, 300 * kKiB, 300 * kKiB);
        runCheckedClient(port_, later, milliseconds(10000));
        EXPECT_TRUE(later.complete()) << later.describe() << daemon->why(20);
        clients.push_back(later);
        waitHandlersDone(*upstream_, milliseconds(3000));
        EXPECT_TRUE(terminatesCleanly(*daemon));
    }
    auto listing = listDrainedAudit();
    ASSERT_TRUE(listing.ok()) << listing.describe();
    EXPECT_EQ(listing.rows.size(), clients.size()) << listing.describe();
    // The failpoint fails the write before the kernel runs it, so for the chain engine io_uring
    // cancels the forward linked behind it as it would after a real error: the far end of the
    // failed connection holds nothing the audit lacks, for both engines.
    auto views = checkClients(listing, clients);
    int failed = 0;
    for (const auto& c : clients) {
        const AuditView& view = views[c.id];
        if (view.row != nullptr && view.row->reason == "audit-error") {
            ++failed;
            EXPECT_FALSE(c.complete()) << c.describe() << " completed although its audit failed";
        } else {
            EXPECT_TRUE(c.complete()) << "only the connection of the failed write may be cut: "
                                      << c.describe() << " (audit reason "
                                      << (view.row ? view.row->reason : "none") << ")";
        }
    }
    EXPECT_EQ(failed, 1) << "exactly one connection should close with reason audit-error";
}

INSTANTIATE_TEST_SUITE_P(Engines, AuditWriteErrorTest, ::testing::Values("inline", "chain"),
                         [](const auto& param) { return std::string(param.param); });

// ---- audit-sync EIO, strict ----------------------------------------------------------------

class AuditSyncErrorTest : public FailpointAuditFixture<::testing::Test> {};

TEST_F(AuditSyncErrorTest, StrictEioClosesWaitersSealsSegmentFailedAndMovesOn) {
    auto clients = makeClients(4, 10, 2 * kMiB, 2 * kMiB);
    auto later = makeClients(2, 40, 512 * kKiB, 512 * kKiB);
    {
        auto daemon = startRelay(milliseconds(20000), "audit-sync:EIO:3",
                                 {"--audit-durability", "strict", "--audit-on-error", "fail-closed",
                                  "--log-level", "debug"},
                                 1);
        ASSERT_TRUE(daemon->waitReady(port_)) << daemon->why();
        runCheckedClients(port_, clients, milliseconds(20000));
        waitHandlersDone(*upstream_, milliseconds(3000));
        EXPECT_FALSE(grepLines(daemon->log(), "sealing it as failed").empty())
            << "no log line about the failed fdatasync" << daemon->why(30);
        EXPECT_FALSE(grepLines(daemon->log(), "audit-sync-error").empty())
            << "no connection closed with reason audit-sync-error" << daemon->why(30);
        ASSERT_TRUE(daemon->running()) << daemon->why();
        runCheckedClients(port_, later, milliseconds(10000));
        for (const auto& c : later)
            EXPECT_TRUE(c.complete()) << "after the failed sync: " << c.describe() << daemon->why(20);
        waitHandlersDone(*upstream_, milliseconds(3000));
        EXPECT_TRUE(terminatesCleanly(*daemon));
    }
    auto listing = listDrainedAudit();
    ASSERT_TRUE(listing.ok()) << listing.describe();
    auto views = checkClients(listing, concatenated(clients, later));
    int syncErrors = 0;
    for (const auto& c : clients) {
        const AuditView& view = views[c.id];
        if (view.row != nullptr && view.row->reason == "audit-sync-error") {
            ++syncErrors;
            EXPECT_FALSE(c.complete()) << c.describe();
        } else {
            EXPECT_TRUE(c.complete()) << c.describe() << " (audit reason "
                                      << (view.row ? view.row->reason : "none") << ")";
        }
    }
    EXPECT_GE(syncErrors, 1) << "no connection closed with reason audit-sync-error";

    // Segment 1 of worker 0 is sealed as failed; the later connections live in a later segment.
    const std::string first = auditDir_ + "/" + audit::segmentBaseName(0, 1) + ".index";
    audit::IndexReader reader(first);
    audit::Record record;
    std::optional<audit::Record> last;
    for (int guard = 0; guard < 1000000; ++guard) {
        auto status = reader.next(record);
        if (status != audit::IndexReader::Status::Record) {
            EXPECT_EQ(status, audit::IndexReader::Status::End) << reader.problem();
            break;
        }
        last = record;
    }
    ASSERT_TRUE(last.has_value()) << first << " is empty";
    EXPECT_EQ(last->type, audit::RecordType::SegmentSealed) << first << " does not end sealed";
    EXPECT_EQ(last->status, audit::kSealFailed) << first << " is not sealed as failed";
    auto summary = audit::listConnections(auditDir_);
    for (const auto& c : later) {
        auto view = views[c.id];
        if (view.row == nullptr) continue;
        for (const auto& s : summary.connections) {
            if (s.id == view.row->id) {
                EXPECT_GT(s.segment, 1u) << "connection " << s.id
                                         << " opened after the failed sync is in segment 1";
            }
        }
    }
}

// ---- short moves ---------------------------------------------------------------------------

struct ShortCase {
    const char* failpoints;
    const char* engine;
    const char* durability;
};

class AuditShortMoveTest : public FailpointAuditFixture<::testing::TestWithParam<ShortCase>> {};

TEST_P(AuditShortMoveTest, TransfersAndAuditStayExact) {
    const ShortCase param = GetParam();
    auto clients = makeClients(4, 10, 1 * kMiB + 3, 1 * kMiB + 5);
    {
        auto daemon =
            startRelay(milliseconds(30000), param.failpoints,
                       {"--audit-durability", param.durability, "--splice-engine", param.engine});
        ASSERT_TRUE(daemon->waitReady(port_)) << daemon->why();
        runCheckedClients(port_, clients, milliseconds(30000));
        waitHandlersDone(*upstream_, milliseconds(3000));
        for (const auto& c : clients)
            EXPECT_TRUE(c.complete()) << param.failpoints << ": " << c.describe() << daemon->why(20);
        EXPECT_TRUE(terminatesCleanly(*daemon));
    }
    auto listing = listDrainedAudit();
    ASSERT_TRUE(listing.ok()) << listing.describe();
    EXPECT_EQ(listing.rows.size(), clients.size());
    for (const auto& row : listing.rows) EXPECT_EQ(row.reason, "closed") << "connection " << row.id;
    checkClients(listing, clients);
}

std::string shortName(const ::testing::TestParamInfo<ShortCase>& info) {
    std::string points = info.param.failpoints;
    std::string name = points.substr(0, points.find(':'));
    if (std::string(info.param.failpoints).find(',') != std::string::npos) name = "all";
    for (auto& ch : name)
        if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
    return name + "_" + info.param.engine + "_" + info.param.durability;
}

constexpr const char* kAllShort =
    "fill:short:1:0,tee:short:1:0,audit-write:short:1:0,forward:short:1:0";

INSTANTIATE_TEST_SUITE_P(
    Sites, AuditShortMoveTest,
    ::testing::Values(ShortCase{"audit-write:short:1:0", "inline", "batch"},
                      ShortCase{"audit-write:short:1:0", "chain", "batch"},
                      ShortCase{"tee:short:1:0", "inline", "batch"},
                      ShortCase{"tee:short:1:0", "chain", "batch"},
                      ShortCase{"forward:short:1:0", "inline", "batch"},
                      ShortCase{"forward:short:1:0", "chain", "batch"},
                      ShortCase{kAllShort, "inline", "strict"},
                      ShortCase{kAllShort, "chain", "strict"}),
    shortName);

// ---- fill ECONNRESET -----------------------------------------------------------------------

// The 4th fill (socket -> pipe splice) of the daemon's only worker reports ECONNRESET: that
// connection is closed as a reset, and the daemon carries on with byte-exact connections.
// Regression (found at 173c573, fixed by 739c13a): the failpoint replaces the result of a splice
// that already moved bytes into the pipe, so the pipe held bytes the flow did not book; the pool
// lent it again as empty and every later connection of that worker forwarded (and audited) the
// previous connection's leftover bytes ahead of its own. The later-connection checks below are
// the ones that caught it.
class AuditFillResetTest : public FailpointAuditFixture<::testing::Test> {};

TEST_F(AuditFillResetTest, ConnectionClosedAsResetAndDaemonCarriesOn) {
    auto victim = makeClients(1, 10, 2 * kMiB, 2 * kMiB);
    auto later = makeClients(2, 20, 512 * kKiB, 512 * kKiB);
    {
        auto daemon =
            startRelay(milliseconds(10000), "fill:ECONNRESET:4", {"--log-level", "debug"}, 1);
        ASSERT_TRUE(daemon->waitReady(port_)) << daemon->why();
        runCheckedClients(port_, victim, milliseconds(10000));
        EXPECT_FALSE(victim[0].complete()) << "the injected reset did not end the connection: "
                                           << victim[0].describe();
        EXPECT_TRUE(victim[0].u2c.error != 0 || victim[0].c2uSent.error != 0)
            << "the client should see the reset on one of its directions: "
            << victim[0].describe();
        ASSERT_TRUE(daemon->running()) << daemon->why();
        runCheckedClients(port_, later, milliseconds(10000));
        waitHandlersDone(*upstream_, milliseconds(3000));
        auto atUpstream = upstreamResults(*board_);
        for (const auto& c : later) {
            auto u = atUpstream.find(c.id);
            bool upstreamOk = u != atUpstream.end() && u->second.c2u.matches &&
                              u->second.c2u.eof && u->second.c2u.bytes == c.c2uSize;
            EXPECT_TRUE(c.complete() && upstreamOk)
                << "a connection made after the injected reset is not byte-exact (stale pipe "
                   "bytes of the reset connection leaking into later ones?): "
                << c.describe() << "; c2u at the upstream: "
                << (u == atUpstream.end() ? std::string("nothing recorded")
                                          : u->second.c2u.describe());
        }
        EXPECT_TRUE(terminatesCleanly(*daemon));
    }
    auto listing = listDrainedAudit();
    ASSERT_TRUE(listing.ok()) << listing.describe();
    auto views = checkClients(listing, concatenated(victim, later));
    const AuditView& view = views[victim[0].id];
    ASSERT_NE(view.row, nullptr) << "the reset connection is not in the audit";
    EXPECT_NE(view.row->reason.find("reset"), std::string::npos)
        << "close reason of the reset connection: '" << view.row->reason << "'";
    EXPECT_EQ(view.row->state, "closed");
}

// ---- index records that cannot be buffered (allocation failure) ----------------------------
// The failpoint counts the worker's record bookings in order: with one worker and one
// connection at a time, hit 1 is the victim's Open record, hit 2 its first Chunk record.

struct RecordCase {
    const char* label;
    const char* failpoints;
    const char* onError;
};

class AuditRecordErrorTest : public FailpointAuditFixture<::testing::TestWithParam<RecordCase>> {
  protected:
    double lostBytes(uint16_t metricsPort) {
        HttpReply page = httpGet(metricsPort, "/metrics");
        EXPECT_EQ(page.error, "");
        auto lost = sampleValue(parseMetrics(page.body), "splicegate_audit_lost_bytes_total");
        EXPECT_TRUE(lost.has_value()) << page.body;
        return lost.value_or(-1);
    }
};

TEST_P(AuditRecordErrorTest, NoByteLeavesThatTheLogCannotServe) {
    const RecordCase param = GetParam();
    const bool failOpen = std::string(param.onError) == "fail-open";
    const bool openRecord = std::string(param.failpoints).ends_with(":1");
    auto victim = makeClients(1, 10, 1 * kMiB, 1 * kMiB);
    auto later = makeClients(2, 20, 256 * kKiB, 256 * kKiB);
    const uint16_t metricsPort = pickFreePort();
    double lost = 0;
    {
        auto daemon = startRelay(milliseconds(10000), param.failpoints,
                                 {"--audit-on-error", param.onError, "--metrics-listen",
                                  loopback(metricsPort)},
                                 1);
        ASSERT_TRUE(daemon->waitReady(port_)) << daemon->why();
        ASSERT_TRUE(waitListening(metricsPort, true, deadlineIn(milliseconds(5000))));
        runCheckedClients(port_, victim, milliseconds(10000));
        waitHandlersDone(*upstream_, milliseconds(3000));
        const char* logged = openRecord ? "its audit Open record failed (" : "audit write failed (";
        EXPECT_FALSE(grepLines(daemon->log(), logged).empty()) << daemon->why(20);
        if (failOpen) {
            EXPECT_TRUE(victim[0].complete()) << "fail-open must relay it: "
                                              << victim[0].describe();
        } else {
            EXPECT_FALSE(victim[0].complete()) << "fail-closed must close it: "
                                               << victim[0].describe();
        }
        lost = lostBytes(metricsPort);
        ASSERT_TRUE(daemon->running()) << daemon->why();
        runCheckedClients(port_, later, milliseconds(10000));
        for (const auto& c : later)
            EXPECT_TRUE(c.complete()) << "after the failed record: " << c.describe();
        waitHandlersDone(*upstream_, milliseconds(3000));
        EXPECT_TRUE(terminatesCleanly(*daemon));
    }
    auto listing = listDrainedAudit();
    ASSERT_TRUE(listing.ok()) << listing.describe();
    // Fail-closed: no far end holds a byte the log lacks. Fail-open relays the victim with a gap
    // in its audit by definition, so it is checked against the lost-bytes count instead.
    checkClients(listing, failOpen ? later : concatenated(victim, later));
    const AuditRow* row = nullptr;
    for (const auto& r : listing.rows)
        if (portOf(r.client) == victim[0].port) row = &r;
    if (openRecord) {
        EXPECT_EQ(row, nullptr) << "a connection without its Open record is listed";
        EXPECT_EQ(listing.rows.size(), later.size()) << listing.describe();
    } else {
        ASSERT_NE(row, nullptr) << listing.describe();
        EXPECT_EQ(row->reason, failOpen ? "closed" : "audit-error");
    }
    if (failOpen) {
        // Every relayed byte is either in the log or counted lost.
        const uint64_t relayed = 16 + victim[0].c2uSize + victim[0].u2cSize;
        const uint64_t audited = row ? row->c2u + row->u2c : 0;
        EXPECT_GT(lost, 0);
        EXPECT_EQ(static_cast<uint64_t>(lost) + audited, relayed)
            << "lost " << lost << " B, audited " << audited << " B";
    } else {
        EXPECT_EQ(lost, 0) << "fail-closed forwards nothing unaudited";
    }
}

INSTANTIATE_TEST_SUITE_P(
    Records, AuditRecordErrorTest,
    ::testing::Values(RecordCase{"openFailClosed", "audit-record:ENOMEM:1", "fail-closed"},
                      RecordCase{"openFailOpen", "audit-record:ENOMEM:1", "fail-open"},
                      RecordCase{"chunkFailClosed", "audit-record:ENOMEM:2", "fail-closed"},
                      RecordCase{"chunkFailOpen", "audit-record:ENOMEM:2", "fail-open"}),
    [](const auto& param) { return std::string(param.param.label); });

}  // namespace
}  // namespace splicegate::test
