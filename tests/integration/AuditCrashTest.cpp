// kill -9 at random moments during transfers, then restart on the same audit directory (issue 3,
// "Tests"; docs/operations.md, "Audit guarantees"). Each crash point: a daemon, 8 paced full-duplex
// connections, SIGKILL after a random 50-500 ms, a restart that recovers the directory, SIGTERM.
// Then:
// - `splicegate-audit verify` exits 0;
// - every connection of that run in the audit is `truncated` (all were open at the kill);
// - every extracted stream is a prefix of what the client/upstream really sent (nothing invented);
// - strict: every byte the far end received is in the audit (received is a prefix of extracted);
// - batch: bytes the far end received that the audit lacks all arrived within the last
//   kBatchWindow before the kill (fsync interval + scheduling slack; see kBatchSlack), plus
//   twice the slowest fdatasync a probe on the same filesystem saw during that run.
// The runs of one mode share one audit directory, so recovery also runs over earlier crashes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/UniqueFd.h"
#include "tests/support/AuditSupport.h"
#include "tests/support/Daemon.h"
#include "tests/support/PatternStream.h"
#include "tests/support/Sockets.h"
#include "tests/support/TestServer.h"
#include "tests/support/Traffic.h"

namespace splicegate::test {
namespace {

using std::chrono::duration_cast;

constexpr std::size_t kConnectionsPerRun = 8;
constexpr uint64_t kEndless = 1ULL << 32;  // paced senders stop at the crash, never here
constexpr int kFsyncIntervalMs = 50;
// Batch bound: a chunk's index record is written when the worker's timer next starts a sync
// (every interval), so a byte the far end received that the recovered audit lacks must have
// arrived at most about one interval before the kill. The slack covers timer and scheduling
// delay on a loaded 2-core box and, mainly, the daemon's design: a tick that finds the previous
// fdatasync still running writes no index records (SegmentStore::beginSync), so under heavy
// writeback the window grows by the fdatasync time (up to ~125 ms measured here, against the
// 50 ms interval). Pacing keeps each direction at <= ~16 MiB/s, so the window still bounds the
// loss to about 4 MiB per direction; kills come 50-500 ms into the transfers.
constexpr milliseconds kBatchSlack{200};
constexpr milliseconds kBatchWindow = milliseconds(kFsyncIntervalMs) + kBatchSlack;

// The filesystem's own sync latency while a crash point runs. On ext4 (data=ordered) an
// fdatasync that commits metadata (the daemon's do: new segments, extents written for the first
// time) waits for the journal commit, which writes out every file's dirty pages first, also
// those of other processes: in CI, another test's page-cache writes made the daemon's syncs take
// over 400 ms. The probe appends 4 KiB and fdatasyncs it every 20 ms in a file next to the audit
// directory (a metadata change, like the daemon's), and keeps the slowest; a batch loss window is
// judged against the interval plus that (twice: the daemon writes, then syncs).
class SyncLatencyProbe {
  public:
    explicit SyncLatencyProbe(const std::string& dir)
        : fd_(::open((dir + "/sync-probe").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600)),
          thread_([this] { run(); }) {}
    ~SyncLatencyProbe() { stop(); }
    SyncLatencyProbe(const SyncLatencyProbe&) = delete;
    SyncLatencyProbe& operator=(const SyncLatencyProbe&) = delete;

    void stop() {
        stopping_ = true;
        if (thread_.joinable()) thread_.join();
    }
    milliseconds slowest() const { return milliseconds(slowestMs_.load()); }

  private:
    void run() {
        const std::string block(4096, 'p');
        for (off_t offset = 0; !stopping_ && fd_; offset += 4096) {
            auto start = Clock::now();
            if (::pwrite(fd_.get(), block.data(), block.size(), offset) < 0 ||
                ::fdatasync(fd_.get()) != 0)
                return;
            long took = duration_cast<milliseconds>(Clock::now() - start).count();
            if (took > slowestMs_.load()) slowestMs_ = took;
            std::this_thread::sleep_for(milliseconds(20));
        }
    }

    UniqueFd fd_;
    std::atomic<bool> stopping_{false};
    std::atomic<long> slowestMs_{0};
    std::thread thread_;
};

SendOptions pacedOptions(const std::atomic<bool>* cancel) {
    SendOptions options;
    options.chunk = 32 * 1024;
    options.pauseEveryChunk = std::chrono::microseconds(2000);
    options.shutdownWrite = false;
    options.cancel = cancel;
    return options;
}

// Bytes of one direction that the far end received, and when byte i arrived.
struct FarEnd {
    uint64_t bytes = 0;
    std::function<std::optional<Clock::time_point>(uint64_t)> arrival;
};

struct Outcome {
    uint64_t rounds = 0;
    uint64_t auditedConnections = 0;
    uint64_t missingBytes = 0;  // batch: received but not in the audit, summed
    uint64_t receivedBytes = 0;
    long maxLagMs = 0;  // the earliest arrival (before the kill) of a byte missing from the audit
};

class AuditCrashTest : public ::testing::Test {
  protected:
    // Runs `rounds` crash points in `durability` mode on one audit directory; `laneArgs` pick
    // the daemon's lane (--lane; the default, auto, when empty).
    void crashRounds(const std::string& durability, int rounds, uint64_t seed,
                     const std::vector<std::string>& laneArgs = {}) {
        raiseFdLimit();
        TempDir auditRoot;
        const std::string auditDir = auditRoot.path() + "/audit";
        ScratchDir out;
        std::mt19937_64 random(seed);
        std::uniform_int_distribution<int> killAfterMs(50, 500);
        uint64_t maxIdBefore = 0;
        uint64_t nextClientId = 1;
        Outcome outcome;
        std::vector<std::string> auditArgs{"--audit-dir",
                                           auditDir,
                                           "--audit-durability",
                                           durability,
                                           "--audit-fsync-interval-ms",
                                           std::to_string(kFsyncIntervalMs)};
        auditArgs.insert(auditArgs.end(), laneArgs.begin(), laneArgs.end());

        for (int round = 0; round < rounds; ++round) {
            SCOPED_TRACE(durability + " crash point " + std::to_string(round + 1) + " of " +
                         std::to_string(rounds));
            std::atomic<bool> cancel{false};
            auto board = std::make_shared<CheckedBoard>();
            TestServer upstream(checkedUpstream(board, milliseconds(15000), pacedOptions(&cancel)));
            uint16_t port = pickFreePort();
            auto args = relayArgs(port, {upstream.address()}, auditArgs);
            std::vector<CheckedClient> clients(kConnectionsPerRun);
            Clock::time_point killedAt;
            int killAfter = killAfterMs(random);
            // Other tests' dirty pages would otherwise be written out inside this run's syncs.
            if (UniqueFd root(::open(auditRoot.path().c_str(), O_RDONLY | O_CLOEXEC)); root)
                ::syncfs(root.get());
            SyncLatencyProbe probe(auditRoot.path());
            {
                Daemon daemon(args);
                ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
                std::vector<std::thread> threads;
                for (auto& client : clients) {
                    client.id = nextClientId++;
                    client.c2uSize = client.u2cSize = kEndless;
                    threads.emplace_back([&, c = &client] {
                        runCheckedClient(port, *c, milliseconds(15000), pacedOptions(&cancel));
                    });
                }
                std::this_thread::sleep_for(milliseconds(killAfter));
                killedAt = Clock::now();
                daemon.signal(SIGKILL);
                auto status = daemon.waitExit(milliseconds(5000));
                cancel = true;
                probe.stop();
                batchWindow_ = kBatchWindow + 2 * probe.slowest();
                for (auto& thread : threads) thread.join();
                ASSERT_TRUE(status && status->signal == SIGKILL)
                    << "the daemon was not killed by SIGKILL: "
                    << (status ? status->describe() : "still running") << daemon.why();
            }
            upstream.waitFinished(kConnectionsPerRun, deadlineIn(milliseconds(5000)));
            upstream.stop();
            std::map<uint64_t, CheckedUpstreamSide> atUpstream;
            for (auto& [id, side] : board->snapshot()) atUpstream[id] = side;

            // Restart on the same directory: recovery runs, then a clean drain. On a fresh port:
            // the killed daemon's listener can outlive it for a moment (its io_uring is torn
            // down asynchronously), and would pass the readiness probe for the new one.
            {
                TestServer idle(nullptr);
                uint16_t restartPort = pickFreePort();
                Daemon restarted(relayArgs(restartPort, {idle.address()}, auditArgs));
                ASSERT_TRUE(restarted.waitReady(restartPort))
                    << "the daemon did not start again after kill -9" << restarted.why();
                auto status = restarted.terminate(milliseconds(10000));
                ASSERT_TRUE(status && status->isExit(0)) << restarted.why();
                restartLog_ = restarted.log();
            }

            auto verify = auditVerify(auditDir);
            ASSERT_TRUE(verify.status && verify.status->isExit(0))
                << "verify after kill -9 and restart (killed " << killAfter
                << " ms into the transfers): " << describeProcess(verify) << "\nrecovery log:\n"
                << recoveryLines();

            auto listing = auditList(auditDir);
            ASSERT_TRUE(listing.ok()) << listing.describe();
            std::map<uint16_t, const AuditRow*> byPort;
            uint64_t maxId = maxIdBefore;
            bool anyTruncated = false;
            for (const auto& row : listing.rows) {
                maxId = std::max(maxId, row.id);
                if (row.id <= maxIdBefore) continue;  // an earlier crash point's
                byPort[portOf(row.client)] = &row;
                EXPECT_EQ(row.state, "truncated")
                    << "audit connection " << row.id << " was open at the kill";
                anyTruncated = anyTruncated || row.state == "truncated";
            }
            if (anyTruncated) {
                EXPECT_FALSE(grepLines(restartLog_, "truncated").empty())
                    << "the restarted daemon did not log the truncated connections:\n"
                    << restartLog_;
            }
            maxIdBefore = maxId;

            for (const auto& c : clients) {
                if (c.connectError != 0 || c.port == 0) continue;
                auto up = atUpstream.find(c.id);
                const CheckedUpstreamSide* u = up == atUpstream.end() ? nullptr : &up->second;
                EXPECT_TRUE(c.u2c.matches)
                    << "client " << c.id << " received wrong u2c bytes: " << c.u2c.describe();
                if (u != nullptr) {
                    EXPECT_TRUE(u->c2u.matches) << "upstream received wrong c2u bytes for client "
                                                << c.id << ": " << u->c2u.describe();
                }
                // Far ends: c2u at the upstream (header + payload), u2c at the client.
                FarEnd c2uFar;
                if (u != nullptr) {
                    c2uFar.bytes = u->c2uStreamBytes();
                    c2uFar.arrival = [u](uint64_t i) { return u->c2uArrival(i); };
                }
                FarEnd u2cFar;
                u2cFar.bytes = c.u2c.bytes;
                u2cFar.arrival = [&c](uint64_t i) { return c.u2c.timeline.arrivalOf(i); };

                auto it = byPort.find(c.port);
                const AuditRow* row = it == byPort.end() ? nullptr : it->second;
                if (row != nullptr) ++outcome.auditedConnections;
                checkDirection(durability, c.id, row, auditDir, out.path(), "c2u", c2uStreamOf(c),
                               c2uFar, killedAt, killAfter, outcome);
                checkDirection(durability, c.id, row, auditDir, out.path(), "u2c", u2cStreamOf(c),
                               u2cFar, killedAt, killAfter, outcome);
            }
            ++outcome.rounds;
            if (HasFatalFailure()) return;
        }
        std::cout << "[ info ] " << durability << ": " << outcome.rounds << " crash points, "
                  << outcome.auditedConnections << " audited connections, " << outcome.receivedBytes
                  << " B received at far ends, " << outcome.missingBytes
                  << " B of them missing from the audit; the oldest "
                  << "missing byte arrived " << outcome.maxLagMs << " ms before its kill\n";
        EXPECT_GT(outcome.receivedBytes, 0u) << "no traffic ever reached the far ends";
    }

    void checkDirection(const std::string& durability, uint64_t clientId, const AuditRow* row,
                        const std::string& auditDir, const std::string& outDir,
                        const std::string& direction, const ExpectedStream& expected,
                        const FarEnd& far, Clock::time_point killedAt, int killAfter,
                        Outcome& outcome) {
        std::ostringstream where;
        where << "client " << clientId << " " << direction << " (killed " << killAfter
              << " ms in): ";
        uint64_t audited = 0;
        if (row != nullptr) {
            auto extracted = auditExtract(auditDir, row->id, direction, outDir + "/" + direction);
            ASSERT_TRUE(extracted.ok()) << where.str() << "extract of audit connection " << row->id
                                        << ": " << describeProcess(extracted.process);
            audited = extracted.size;
            EXPECT_EQ(audited, direction == "c2u" ? row->c2u : row->u2c)
                << where.str() << "extract size differs from list's byte count";
            EXPECT_TRUE(fileIsPrefixOf(extracted.path, expected))
                << where.str() << "the audit holds bytes the sender never sent";
        }
        outcome.receivedBytes += far.bytes;
        if (far.bytes <= audited) return;
        uint64_t missing = far.bytes - audited;
        outcome.missingBytes += missing;
        auto firstMissingAt = far.arrival(audited);
        auto before =
            firstMissingAt ? duration_cast<milliseconds>(killedAt - *firstMissingAt).count() : 0;
        outcome.maxLagMs = std::max<long>(outcome.maxLagMs, before);
        if (durability == "strict") {
            ADD_FAILURE() << where.str() << "strict mode: the far end received " << far.bytes
                          << " B but the audit holds only " << audited << " B ("
                          << (row ? "audit connection " + std::to_string(row->id)
                                  : std::string("connection not in the audit at all"))
                          << "); the first missing byte arrived " << before
                          << " ms before the kill\nrecovery log:\n"
                          << recoveryLines();
        } else if (durability == "batch") {
            EXPECT_LE(before, batchWindow_.count())
                << where.str() << "batch mode: " << missing << " B received by the far end are "
                << "missing from the audit (received " << far.bytes << ", audited " << audited
                << "); the first of them arrived " << before
                << " ms before the kill, more than the fsync interval " << kFsyncIntervalMs
                << " ms + slack " << kBatchSlack.count() << " ms + twice the slowest probe "
                << "fdatasync " << (batchWindow_ - kBatchWindow).count() / 2
                << " ms\nrecovery log:\n"
                << recoveryLines();
        }
    }

    std::string recoveryLines() const {
        std::string text;
        for (const auto& line : grepLines(restartLog_, "audit")) text += line + "\n";
        return text;
    }

    std::string restartLog_;
    milliseconds batchWindow_ = kBatchWindow;  // of the crash point being checked
};

TEST_F(AuditCrashTest, StrictKill9KeepsEveryReceivedByte) {
    crashRounds("strict", 10, 0x5171C7);
}

TEST_F(AuditCrashTest, BatchKill9LosesAtMostTheLastInterval) {
    crashRounds("batch", 10, 0xBA7C4);
}

TEST_F(AuditCrashTest, NoneKill9LeavesAConsistentLog) {
    crashRounds("none", 4, 0x40E);
}

// The buffer lane writes the audit from received memory: strict still means every byte a far end
// received is in the log after kill -9.
TEST_F(AuditCrashTest, StrictKill9KeepsEveryReceivedByteInTheBufferLane) {
    crashRounds("strict", 6, 0xB0FFE2, {"--lane", "buffer"});
}

}  // namespace
}  // namespace splicegate::test
