// The daemon starting over damaged audit logs (issue 3, "Tests"; FORMAT.md "Crash recovery"):
// torn or garbage tails are cut and reported, and `verify` exits 0 afterwards; damage inside a
// sealed segment (flipped bytes, a truncated data file) is left for `verify` to report as
// FILE:OFFSET and exit 1, and the daemon still starts, relays and audits new connections.
// (The offline tool's own handling of damage is AuditToolTest's subject; here: the daemon side.)
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "audit/AuditReader.h"
#include "audit/ConnectionIdLease.h"
#include "audit/Records.h"
#include "audit/Retention.h"
#include "audit/SegmentStore.h"
#include "tests/support/AuditSupport.h"
#include "tests/support/Daemon.h"
#include "tests/support/Sockets.h"
#include "tests/support/TestServer.h"
#include "tests/support/Traffic.h"

namespace splicegate::test {
namespace {

constexpr uint64_t kKiB = 1024;

struct IndexEntry {
    uint64_t offset = 0;
    audit::Record record;
};

std::vector<IndexEntry> readIndex(const std::string& path) {
    std::vector<IndexEntry> entries;
    audit::IndexReader reader(path);
    audit::Record record;
    for (int guard = 0; guard < 1000000; ++guard) {
        if (reader.next(record) != audit::IndexReader::Status::Record) break;
        entries.push_back({reader.recordOffset(), record});
    }
    return entries;
}

uint64_t fileSize(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

void appendBytes(const std::string& path, const std::string& bytes) {
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
    ASSERT_TRUE(fd) << path;
    ASSERT_EQ(::write(fd.get(), bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
}

void flipByte(const std::string& path, uint64_t offset) {
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
    ASSERT_TRUE(fd) << path;
    unsigned char byte = 0;
    ASSERT_EQ(::pread(fd.get(), &byte, 1, static_cast<off_t>(offset)), 1);
    byte ^= 0x5a;
    ASSERT_EQ(::pwrite(fd.get(), &byte, 1, static_cast<off_t>(offset)), 1);
}

std::string garbage(std::size_t size, uint64_t seed) {
    std::mt19937_64 random(seed);
    std::string bytes(size, '\0');
    for (auto& ch : bytes) ch = static_cast<char>(random() & 0xff);
    return bytes;
}

class AuditRecoveryTest : public ::testing::Test {
  protected:
    void SetUp() override {
        auditDir_ = root_.path() + "/audit";
        index_ = auditDir_ + "/" + audit::segmentBaseName(0, 1) + ".index";
        data_ = auditDir_ + "/" + audit::segmentBaseName(0, 1) + ".data";
        board_ = std::make_shared<CheckedBoard>();
        upstream_ = std::make_unique<TestServer>(
            checkedUpstream(board_, milliseconds(20000), {}, 64 << 20));
        port_ = pickFreePort();
        // A clean log: one worker, five connections, drained (segment 1 sealed).
        for (std::size_t i = 0; i < 5; ++i)
            clients_.push_back(makeCheckedClient(10 + i, 200 * kKiB + 11 * i, 150 * kKiB + 13 * i));
        Daemon daemon(args());
        ASSERT_TRUE(daemon.waitReady(port_)) << daemon.why();
        runCheckedClients(port_, clients_, milliseconds(15000));
        for (const auto& c : clients_) ASSERT_TRUE(c.complete()) << c.describe() << daemon.why(20);
        ASSERT_TRUE(terminatesCleanly(daemon));
        ASSERT_TRUE(auditVerifies(auditDir_));
        entries_ = readIndex(index_);
        ASSERT_GE(entries_.size(), 12u);
        ASSERT_EQ(entries_.back().record.type, audit::RecordType::SegmentSealed);
        before_ = auditList(auditDir_);
        ASSERT_TRUE(before_.ok()) << before_.describe();
        ASSERT_EQ(before_.rows.size(), clients_.size());
    }

    std::vector<std::string> args() const {
        return relayArgs(port_, {upstream_->address()}, {"--audit-dir", auditDir_}, 1);
    }

    // Starts the daemon on the (damaged) directory: it must start, relay and audit a new
    // connection, and drain. Returns its log.
    std::string startOverDamage(uint64_t newId) {
        port_ = pickFreePort();  // the first daemon's listener may linger a moment
        Daemon daemon(args());
        EXPECT_TRUE(daemon.waitReady(port_))
            << "the daemon refused to start over a damaged log" << daemon.why();
        if (!daemon.running()) return daemon.log();
        CheckedClient fresh = makeCheckedClient(newId, 100 * kKiB + 1, 90 * kKiB + 3);
        runCheckedClient(port_, fresh, milliseconds(10000));
        EXPECT_TRUE(fresh.complete()) << fresh.describe() << daemon.why(20);
        EXPECT_TRUE(terminatesCleanly(daemon));
        fresh_ = fresh;
        return daemon.log();
    }

    // The row of the connection made by startOverDamage(), closed with all its bytes; or null.
    const AuditRow* freshRow(const AuditListing& listing) const {
        const AuditRow* row = nullptr;
        for (const auto& r : listing.rows)
            if (portOf(r.client) == fresh_.port && r.state == "closed" &&
                r.c2u == 16 + fresh_.c2uSize)
                row = &r;
        return row;
    }

    // The connection made by startOverDamage() is audited exactly, with a new id and in a new
    // segment.
    void expectFreshAudited() {
        auto listing = auditList(auditDir_);
        const AuditRow* row = freshRow(listing);
        ASSERT_NE(row, nullptr) << "the connection made after recovery is not audited: "
                                << listing.describe();
        EXPECT_GT(row->id, maxOldId()) << "connection ids must continue after the largest found";
        auto c2u = auditExtract(auditDir_, row->id, "c2u", out_.path() + "/c2u");
        auto u2c = auditExtract(auditDir_, row->id, "u2c", out_.path() + "/u2c");
        ASSERT_TRUE(c2u.ok() && u2c.ok());
        EXPECT_EQ(c2u.size, 16 + fresh_.c2uSize);
        EXPECT_EQ(u2c.size, fresh_.u2cSize);
        EXPECT_TRUE(fileIsPrefixOf(c2u.path, c2uStreamOf(fresh_)));
        EXPECT_TRUE(fileIsPrefixOf(u2c.path, u2cStreamOf(fresh_)));
        auto summary = audit::listConnections(auditDir_);
        for (const auto& s : summary.connections)
            if (s.id == row->id) {
                EXPECT_GT(s.segment, 1u) << "new connections go to a new segment";
            }
    }

    // Every connection of the original log still lists and extracts as before (nothing durable
    // was lost).
    void expectOriginalIntact() {
        auto listing = auditList(auditDir_);
        for (const auto& old : before_.rows) {
            const AuditRow* now = listing.find(old.id);
            ASSERT_NE(now, nullptr) << "connection " << old.id << " disappeared";
            EXPECT_EQ(now->state, old.state) << "connection " << old.id;
            EXPECT_EQ(now->c2u, old.c2u) << "connection " << old.id;
            EXPECT_EQ(now->u2c, old.u2c) << "connection " << old.id;
        }
        for (const auto& c : clients_) {
            const AuditRow* row = nullptr;
            for (const auto& r : listing.rows)
                if (portOf(r.client) == c.port && r.id <= maxOldId()) row = &r;
            ASSERT_NE(row, nullptr) << c.describe();
            auto c2u = auditExtract(auditDir_, row->id, "c2u", out_.path() + "/c2u");
            auto u2c = auditExtract(auditDir_, row->id, "u2c", out_.path() + "/u2c");
            EXPECT_EQ(c2u.size, 16 + c.c2uSize);
            EXPECT_EQ(u2c.size, c.u2cSize);
            EXPECT_TRUE(fileIsPrefixOf(c2u.path, c2uStreamOf(c)));
            EXPECT_TRUE(fileIsPrefixOf(u2c.path, u2cStreamOf(c)));
        }
    }

    uint64_t maxOldId() const {
        uint64_t id = 0;
        for (const auto& r : before_.rows) id = std::max(id, r.id);
        return id;
    }

    // An index entry of type `type` near the middle of the index.
    const IndexEntry& middle(audit::RecordType type) const {
        std::size_t i = entries_.size() / 2;
        while (i < entries_.size() && entries_[i].record.type != type) ++i;
        if (i == entries_.size()) {
            i = entries_.size() / 2;
            while (i > 0 && entries_[i].record.type != type) --i;
        }
        return entries_[i];
    }

    TempDir root_;
    ScratchDir out_;
    std::string auditDir_;
    std::string index_;
    std::string data_;
    std::shared_ptr<CheckedBoard> board_;
    std::unique_ptr<TestServer> upstream_;
    uint16_t port_ = 0;
    std::vector<CheckedClient> clients_;
    std::vector<IndexEntry> entries_;
    AuditListing before_;
    CheckedClient fresh_;
};

std::string recoveryLines(const std::string& log) {
    std::string text;
    for (const auto& line : grepLines(log, "audit recovery")) text += line + "\n";
    return text;
}

// A torn index tail in the middle of a record (what a crash mid-write leaves): the daemon cuts
// it, marks the connections whose Close was lost as truncated, and verify exits 0.
TEST_F(AuditRecoveryTest, IndexTruncatedMidRecordIsCutAndReported) {
    const IndexEntry& chunk = middle(audit::RecordType::Chunk);
    ASSERT_EQ(chunk.record.type, audit::RecordType::Chunk);
    const uint64_t cutAt = chunk.offset + 10;
    ASSERT_EQ(::truncate(index_.c_str(), static_cast<off_t>(cutAt)), 0);
    auto pre = auditVerify(auditDir_);
    EXPECT_TRUE(pre.status && pre.status->exited && pre.status->code <= 1)
        << "verify crashed on a torn index: " << describeProcess(pre);

    std::string log = startOverDamage(100);
    auto lines = recoveryLines(log);
    EXPECT_NE(lines.find("cut"), std::string::npos) << "recovery did not report the cut:\n" << log;
    EXPECT_NE(lines.find(std::to_string(chunk.offset)), std::string::npos)
        << "recovery did not name the cut offset " << chunk.offset << ":\n"
        << lines;
    EXPECT_TRUE(auditVerifies(auditDir_)) << "after recovery of a torn index\n" << lines;
    // Connections whose Close record was cut are truncated; their extracts are real prefixes.
    auto listing = auditList(auditDir_);
    ASSERT_TRUE(listing.ok()) << listing.describe();
    int truncated = 0;
    for (const auto& c : clients_) {
        for (const auto& r : listing.rows) {
            if (portOf(r.client) != c.port || r.id > maxOldId()) continue;
            EXPECT_TRUE(r.state == "closed" || r.state == "truncated") << r.state;
            truncated += r.state == "truncated";
            auto c2u = auditExtract(auditDir_, r.id, "c2u", out_.path() + "/c2u");
            auto u2c = auditExtract(auditDir_, r.id, "u2c", out_.path() + "/u2c");
            EXPECT_TRUE(c2u.ok() && u2c.ok());
            EXPECT_TRUE(fileIsPrefixOf(c2u.path, c2uStreamOf(c)));
            EXPECT_TRUE(fileIsPrefixOf(u2c.path, u2cStreamOf(c)));
        }
    }
    EXPECT_GT(truncated, 0) << "cutting the index mid-way must leave connections truncated";
    EXPECT_FALSE(grepLines(log, "marked truncated").empty()) << lines;
    expectFreshAudited();
}

// Garbage after the seal of the index and after the end of the data file: cut, reported, and
// nothing durable is lost.
TEST_F(AuditRecoveryTest, GarbageAppendedIsCutAndNothingDurableLost) {
    const uint64_t indexSize = fileSize(index_);
    const uint64_t dataSize = fileSize(data_);
    appendBytes(index_, garbage(333, 1));
    appendBytes(data_, garbage(5000, 2));
    auto pre = auditVerify(auditDir_);
    EXPECT_TRUE(pre.status && pre.status->exited && pre.status->code <= 1) << describeProcess(pre);

    std::string log = startOverDamage(100);
    auto lines = recoveryLines(log);
    EXPECT_NE(lines.find(std::to_string(indexSize)), std::string::npos)
        << "recovery did not report cutting the index garbage at " << indexSize << ":\n"
        << log;
    EXPECT_NE(lines.find(std::to_string(dataSize)), std::string::npos)
        << "recovery did not report cutting the data garbage at " << dataSize << ":\n"
        << log;
    EXPECT_EQ(fileSize(data_), dataSize);
    EXPECT_TRUE(auditVerifies(auditDir_)) << "after recovery of appended garbage\n" << lines;
    expectOriginalIntact();
    expectFreshAudited();
}

// A flipped byte inside a record in the middle of a sealed segment is corruption, not a torn
// tail: verify exits 1 naming FILE:OFFSET, the daemon starts anyway (leaving it for verify),
// and the records after it are not thrown away.
TEST_F(AuditRecoveryTest, FlippedByteInSealedSegmentIsReportedNotCut) {
    const IndexEntry& chunk = middle(audit::RecordType::Chunk);
    ASSERT_EQ(chunk.record.type, audit::RecordType::Chunk);
    flipByte(index_, chunk.offset + 30);  // inside the body (length/offset fields)
    const uint64_t indexSize = fileSize(index_);
    const std::string place =
        audit::segmentBaseName(0, 1) + ".index:" + std::to_string(chunk.offset);

    auto pre = auditVerify(auditDir_);
    EXPECT_TRUE(pre.status && pre.status->isExit(1)) << describeProcess(pre);
    EXPECT_NE((pre.out + pre.err).find(place), std::string::npos)
        << "verify does not name " << place << ": " << describeProcess(pre);

    std::string log = startOverDamage(100);
    auto lines = recoveryLines(log);
    EXPECT_NE(lines.find(place), std::string::npos)
        << "the daemon did not report the damage at " << place << ":\n"
        << log;
    EXPECT_EQ(fileSize(index_), indexSize) << "recovery changed a sealed, damaged index";
    auto verify = auditVerify(auditDir_);
    EXPECT_TRUE(verify.status && verify.status->isExit(1)) << describeProcess(verify);
    EXPECT_NE((verify.out + verify.err).find(place), std::string::npos) << describeProcess(verify);
    // Records after the damaged one survive: every connection is still listed, closed.
    auto listing = auditList(auditDir_);
    for (const auto& old : before_.rows) {
        const AuditRow* now = listing.find(old.id);
        ASSERT_NE(now, nullptr) << "connection " << old.id << " lost after the flipped byte";
        EXPECT_EQ(now->state, "closed");
    }
    expectFreshAudited();
}

// A sealed segment whose data file lost its second half: verify names the first chunk beyond
// the data file; the daemon starts and leaves it for verify.
TEST_F(AuditRecoveryTest, TruncatedDataFileOfSealedSegmentIsReported) {
    const uint64_t dataSize = fileSize(data_);
    ASSERT_EQ(::truncate(data_.c_str(), static_cast<off_t>(dataSize / 2)), 0);
    uint64_t firstBeyond = 0;
    for (const auto& e : entries_) {
        if (e.record.type == audit::RecordType::Chunk && e.record.chunkEnd() > dataSize / 2) {
            firstBeyond = e.offset;
            break;
        }
    }
    ASSERT_GT(firstBeyond, 0u);
    const std::string place =
        audit::segmentBaseName(0, 1) + ".index:" + std::to_string(firstBeyond);
    auto pre = auditVerify(auditDir_);
    EXPECT_TRUE(pre.status && pre.status->isExit(1)) << describeProcess(pre);
    EXPECT_NE((pre.out + pre.err).find(place), std::string::npos) << describeProcess(pre);

    std::string log = startOverDamage(100);
    EXPECT_NE(recoveryLines(log).find(place), std::string::npos)
        << "the daemon did not report the damage at " << place << ":\n"
        << log;
    EXPECT_EQ(fileSize(data_), dataSize / 2);
    auto verify = auditVerify(auditDir_);
    EXPECT_TRUE(verify.status && verify.status->isExit(1)) << describeProcess(verify);
    EXPECT_NE((verify.out + verify.err).find(place), std::string::npos) << describeProcess(verify);
    expectFreshAudited();
}

// An index file that is garbage from its first byte (and has no data file), with a higher
// segment number: recovery rewrites it as an empty sealed segment, verify exits 0, and new
// segments continue after its number.
TEST_F(AuditRecoveryTest, GarbageIndexFileIsRepairedAndNumberingContinues) {
    const std::string junk = auditDir_ + "/" + audit::segmentBaseName(0, 7) + ".index";
    {
        UniqueFd fd(::open(junk.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640));
        ASSERT_TRUE(fd);
        auto bytes = garbage(777, 3);
        ASSERT_EQ(::write(fd.get(), bytes.data(), bytes.size()),
                  static_cast<ssize_t>(bytes.size()));
    }
    auto pre = auditVerify(auditDir_);
    EXPECT_TRUE(pre.status && pre.status->isExit(1)) << describeProcess(pre);
    EXPECT_NE((pre.out + pre.err).find(audit::segmentBaseName(0, 7) + ".index:0"),
              std::string::npos)
        << describeProcess(pre);

    std::string log = startOverDamage(100);
    EXPECT_NE(recoveryLines(log).find(audit::segmentBaseName(0, 7)), std::string::npos) << log;
    EXPECT_TRUE(auditVerifies(auditDir_)) << "\n" << recoveryLines(log);
    EXPECT_GT(fileSize(auditDir_ + "/" + audit::segmentBaseName(0, 8) + ".index"), 0u)
        << "the new segment should be number 8";
    expectOriginalIntact();
    expectFreshAudited();
}

// Ids handed out by a daemon that was killed may have left no durable record (a batch interval,
// a torn index tail), yet the upstream saw those connections: the next daemon starts past the
// whole lease of the killed one. A clean stop shrank the lease to the ids used.
TEST_F(AuditRecoveryTest, IdsHandedOutBeforeACrashAreNotReused) {
    int dirFd = ::open(auditDir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(dirFd, 0);
    UniqueFd dir(dirFd);
    auto leased = audit::readConnectionIdLease(dir.get(), auditDir_);
    ASSERT_TRUE(leased.problem.empty()) << leased.problem;
    EXPECT_EQ(leased.end, maxOldId() + 1) << "a clean stop leaves the lease at the ids used";
    {
        port_ = pickFreePort();
        Daemon daemon(args());
        ASSERT_TRUE(daemon.waitReady(port_)) << daemon.why();
        CheckedClient killedIn = makeCheckedClient(60, 50 * kKiB, 40 * kKiB);
        runCheckedClient(port_, killedIn, milliseconds(10000));
        daemon.signal(SIGKILL);
        auto status = daemon.waitExit(milliseconds(10000));
        ASSERT_TRUE(status && status->signal == SIGKILL) << daemon.why();
    }
    const auto killedLease = audit::readConnectionIdLease(dir.get(), auditDir_).end;
    EXPECT_EQ(killedLease, maxOldId() + 1 + audit::ConnectionIdLease::kDefaultBlock);

    startOverDamage(100);
    auto listing = auditList(auditDir_);
    const AuditRow* fresh = freshRow(listing);
    ASSERT_NE(fresh, nullptr) << listing.describe();
    EXPECT_GE(fresh->id, killedLease) << "an id the killed daemon may have handed out is reused";
    expectOriginalIntact();
}

// After a restart, retention deletes the segment holding every Open record (the worker's newest
// segment, the daemon's new one, stays): the next daemon must still not reuse their ids, or
// `extract ID` would become ambiguous. The new segment's connection id floor remembers them.
TEST_F(AuditRecoveryTest, IdsAreNotReusedAfterRetentionDeletedTheirSegments) {
    const std::string segment2 = auditDir_ + "/" + audit::segmentBaseName(0, 2) + ".index";
    {
        port_ = pickFreePort();
        Daemon daemon(args());
        ASSERT_TRUE(daemon.waitReady(port_)) << daemon.why();
        ASSERT_TRUE(terminatesCleanly(daemon));
    }
    auto restarted = readIndex(segment2);
    ASSERT_FALSE(restarted.empty());
    EXPECT_EQ(restarted.front().record.idFloor, maxOldId() + 1);
    audit::RetentionPlanner retention(auditDir_);
    auto result = retention.apply({1, 0}, audit::wallClockNs());
    EXPECT_TRUE(result.problems.empty()) << result.problems.front();
    EXPECT_EQ(result.deleted, (std::vector<std::string>{index_, data_}));
    ASSERT_TRUE(auditList(auditDir_).rows.empty());

    startOverDamage(100);
    expectFreshAudited();
}

// Spare data files (audit/FORMAT.md "Recycled data files") are not part of the log: verify
// and recovery leave them alone, and the daemon removes at start those no worker will take: of
// a worker it does not run, in a slot past the last, and every one when its writer is `splice`.
TEST_F(AuditRecoveryTest, SparesNoWorkerWillTakeAreRemovedAtStart) {
    auto placeSpare = [&](const std::string& name) {
        std::string path = auditDir_ + "/" + name;
        UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
        ASSERT_TRUE(fd) << path;
        std::string stale = garbage(300 * kKiB, 19);
        ASSERT_EQ(::write(fd.get(), stale.data(), stale.size()),
                  static_cast<ssize_t>(stale.size()));
    };
    const std::string kept = auditDir_ + "/" + audit::spareDataName(0, 0);
    const std::string otherWorker = auditDir_ + "/" + audit::spareDataName(3, 1);
    const std::string pastSlots = auditDir_ + "/" + audit::spareDataName(0, audit::kSpareSlots);
    for (const auto& path : {kept, otherWorker, pastSlots})
        placeSpare(path.substr(auditDir_.size() + 1));
    EXPECT_TRUE(auditVerifies(auditDir_)) << "spares are no segments";

    auto log = startOverDamage(60);
    expectFreshAudited();
    // This suite runs once more with SPLICEGATE_TEST_AUDIT_WRITER=splice (tests/CMakeLists.txt).
    const char* writer = std::getenv("SPLICEGATE_TEST_AUDIT_WRITER");
    if (writer != nullptr && std::string(writer) == "splice")
        EXPECT_NE(::access(kept.c_str(), F_OK), 0) << "the splice writer takes no spare";
    else
        EXPECT_EQ(::access(kept.c_str(), F_OK), 0) << "worker 0's spare waits for its next segment";
    EXPECT_NE(::access(otherWorker.c_str(), F_OK), 0) << "no worker 3 runs";
    EXPECT_NE(::access(pastSlots.c_str(), F_OK), 0);
    EXPECT_NE(log.find(audit::spareDataName(3, 1) + ", a spare no worker will take"),
              std::string::npos)
        << log;

    port_ = pickFreePort();
    Daemon splice(relayArgs(port_, {upstream_->address()},
                            {"--audit-dir", auditDir_, "--audit-writer", "splice"}, 1));
    ASSERT_TRUE(splice.waitReady(port_)) << splice.why();
    EXPECT_TRUE(terminatesCleanly(splice));
    EXPECT_NE(::access(kept.c_str(), F_OK), 0) << "the splice writer takes no spare";
    EXPECT_TRUE(auditVerifies(auditDir_));
}

}  // namespace
}  // namespace splicegate::test
