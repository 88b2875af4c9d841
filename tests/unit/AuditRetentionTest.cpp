// Audit retention (audit/Retention.h) on crafted directories: the age and size rules, oldest
// segments first, connections that span a deleted segment keeping their tail (DeletedHeads),
// current segments kept, damaged segments skipped and reported, cached summaries reused and
// refreshed; after every run the directory still verifies and every remaining connection lists
// and extracts.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "audit/AuditDirectory.h"
#include "audit/AuditReader.h"
#include "audit/ReaderSupport.h"
#include "audit/Records.h"
#include "audit/Recovery.h"
#include "audit/Retention.h"
#include "common/UniqueFd.h"
#include "tests/support/AuditSegmentBuilder.h"
#include "tests/support/Daemon.h"

namespace splicegate::audit {
namespace {

using test::TempDir;

constexpr std::int64_t kT0 = 1'700'000'000'000'000'000;
constexpr std::int64_t kHour = 3'600'000'000'000;
constexpr std::uint64_t kNoLimit = 1ull << 50;  // a size limit nothing here reaches

void writeFile(const std::string& path, const std::string& content) {
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    ASSERT_TRUE(fd.valid()) << path;
    ASSERT_EQ(::write(fd.get(), content.data(), content.size()),
              static_cast<ssize_t>(content.size()));
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

std::uint64_t fileSize(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
}

std::string joined(const std::vector<std::string>& lines) {
    std::string text;
    for (const auto& line : lines) text += line + "\n";
    return text;
}

// One segment pair built with the real encoders; every record at an explicit time.
class Seg {
public:
  // `idFloor`: the ids handed out before the segment began are below it.
  Seg(const std::string& dir, unsigned worker, std::uint64_t segment, std::int64_t startNs,
      std::uint64_t idFloor = 0)
      : dir_(dir),
        worker_(worker),
        segment_(segment),
        base_(dir + "/" + segmentBaseName(worker, segment)) {
      encodeSegmentStart(index_, worker, segment, startNs, idFloor);
  }
    Seg& open(std::uint64_t id, std::int64_t t) {
        encodeOpen(index_, id, t, "web", "198.51.100.1:4000", "192.0.2.1:443");
        return *this;
    }
    Seg& chunk(std::uint64_t id, std::uint8_t direction, const std::string& payload,
               std::int64_t t) {
        encodeChunk(index_, id, direction, static_cast<std::uint32_t>(payload.size()),
                    data_.size(), t);
        data_ += payload;
        return *this;
    }
    Seg& close(std::uint64_t id, std::uint64_t c2u, std::uint64_t u2c, std::int64_t t) {
        encodeClose(index_, id, t, c2u, u2c, "done");
        return *this;
    }
    Seg& truncated(std::uint64_t id, std::int64_t t) {
        encodeTruncated(index_, id, t);
        return *this;
    }
    // A connection opened and closed in this segment: 5 bytes c2u, 6 bytes u2c.
    Seg& whole(std::uint64_t id, std::int64_t t) {
        return open(id, t)
            .chunk(id, kDirectionC2U, "hello", t)
            .chunk(id, kDirectionU2C, "world!", t)
            .close(id, 5, 6, t);
    }
    Seg& seal() {
        sealDigest_ = splicegate::test::sealChained(index_, data_.size(), dir_, worker_, segment_);
        return *this;
    }
    const Digest& sealDigest() const { return sealDigest_; }
    unsigned worker() const { return worker_; }
    std::uint64_t segment() const { return segment_; }
    const Seg& write() const {
        writeFile(indexPath(), index_);
        writeFile(dataPath(), data_);
        return *this;
    }
    std::string indexPath() const { return base_ + ".index"; }
    std::string dataPath() const { return base_ + ".data"; }
    std::uint64_t bytes() const { return fileSize(indexPath()) + fileSize(dataPath()); }
    std::string& index() { return index_; }

private:
  std::string dir_;
  unsigned worker_;
  std::uint64_t segment_;
  std::string base_, index_, data_;
  Digest sealDigest_{};
};

// The newest segments in these tests are the running writers' (unsealed), which verify reports
// (their records are not in the hash chain yet); retention is not about that.
std::vector<std::string> withoutUnsealed(std::vector<std::string> lines) {
    std::erase_if(lines, [](const std::string& line) {
        return line.find("the segment is not sealed") != std::string::npos;
    });
    return lines;
}

// verify finds nothing (or exactly `expectedVerify`), and every connection left lists as before
// and extracts its recorded bytes.
void expectConsistent(const std::string& dir, const ListResult& before,
                      const std::vector<std::string>& expectedVerify = {}) {
    auto problems = withoutUnsealed(verifyDirectory(dir));
    EXPECT_EQ(problems, withoutUnsealed(expectedVerify)) << joined(problems);
    auto after = listConnections(dir);
    std::map<std::uint64_t, const ConnectionSummary*> old;
    for (const auto& c : before.connections) old[c.id] = &c;
    for (const auto& c : after.connections) {
        SCOPED_TRACE("connection " + std::to_string(c.id));
        ASSERT_EQ(old.count(c.id), 1u);
        const auto& o = *old[c.id];
        EXPECT_EQ(c.state, o.state);
        EXPECT_EQ(c.openedNs, o.openedNs);
        EXPECT_EQ(c.c2uBytes, o.c2uBytes);
        EXPECT_EQ(c.u2cBytes, o.u2cBytes);
        if (!expectedVerify.empty()) continue;  // damage may make the bytes unavailable
        for (auto direction : {kDirectionC2U, kDirectionU2C}) {
            UniqueFd sink(::open("/dev/null", O_WRONLY | O_CLOEXEC));
            auto got = extractConnection(dir, c.id, direction, [&] { return sink.get(); });
            EXPECT_TRUE(got.found);
            EXPECT_EQ(got.bytes, direction == kDirectionC2U ? c.c2uBytes : c.u2cBytes);
        }
    }
}

std::set<std::string> pathsOf(std::initializer_list<const Seg*> segs) {
    std::set<std::string> paths;
    for (const auto* s : segs) {
        paths.insert(s->indexPath());
        paths.insert(s->dataPath());
    }
    return paths;
}

std::set<std::string> asSet(const std::vector<std::string>& v) { return {v.begin(), v.end()}; }

TEST(AuditRetentionTest, AgeDeletesOldClosedSegments) {
    TempDir dir;
    Seg s1(dir.path(), 0, 1, kT0);
    s1.whole(1, kT0 + 1 * kHour).seal().write();
    Seg s2(dir.path(), 0, 2, kT0 + 2 * kHour);
    s2.whole(2, kT0 + 3 * kHour).seal().write();
    Seg s3(dir.path(), 0, 3, kT0 + 20 * kHour);
    s3.whole(3, kT0 + 30 * kHour).seal().write();
    Seg s4(dir.path(), 0, 4, kT0 + 31 * kHour);
    s4.whole(4, kT0 + 32 * kHour).write();  // the current segment
    auto before = listConnections(dir.path());
    auto total = s1.bytes() + s2.bytes() + s3.bytes() + s4.bytes();

    RetentionPlanner planner(dir.path());
    auto idle = planner.apply({}, kT0 + 1000 * kHour);  // 0/0: keep all
    EXPECT_TRUE(idle.deleted.empty());
    EXPECT_EQ(idle.totalBytesAfter, total);

    // Cutoff kT0+16h: s1 and s2 are older; s3's newest record (30h) is not.
    auto result = planner.apply({0, 24}, kT0 + 40 * kHour);
    EXPECT_TRUE(result.problems.empty()) << joined(result.problems);
    // Independent segments oldest first (the rest stays a suffix), index before data.
    EXPECT_EQ(result.deleted, (std::vector<std::string>{s1.indexPath(), s1.dataPath(),
                                                        s2.indexPath(), s2.dataPath()}));
    EXPECT_EQ(result.freedBytes, total - s3.bytes() - s4.bytes());
    EXPECT_EQ(result.totalBytesAfter, s3.bytes() + s4.bytes());
    expectConsistent(dir.path(), before);
    auto left = listConnections(dir.path());
    ASSERT_EQ(left.connections.size(), 2u);
    EXPECT_EQ(left.connections[0].id, 3u);

    EXPECT_TRUE(planner.apply({0, 24}, kT0 + 40 * kHour).deleted.empty());
    // Later the third one ages out too; the current segment never does.
    result = planner.apply({0, 24}, kT0 + 1000 * kHour);
    EXPECT_EQ(asSet(result.deleted), pathsOf({&s3}));
    EXPECT_TRUE(exists(s4.indexPath()));
    expectConsistent(dir.path(), before);
}

TEST(AuditRetentionTest, BytesDeleteOldestFirstAcrossWorkers) {
    TempDir dir;
    std::vector<Seg> w0, w1;
    std::uint64_t id = 1;
    for (std::uint64_t n = 1; n <= 4; ++n) {
        // Start times interleave: w0 s1 (0h), w1 s1 (1h), w0 s2 (2h), w1 s2 (3h), ...
        for (unsigned worker : {0u, 1u}) {
            auto start = kT0 + static_cast<std::int64_t>(2 * (n - 1) + worker) * kHour;
            auto& list = worker == 0 ? w0 : w1;
            list.emplace_back(dir.path(), worker, n, start);
            list.back().whole(id++, start + 1);
            // A bigger payload in w1 s2, so sizes differ between segments.
            if (worker == 1 && n == 2) list.back().whole(id++, start + 2);
            if (n < 4) list.back().seal();
            list.back().write();
        }
    }
    auto before = listConnections(dir.path());
    std::uint64_t total = 0;
    for (const auto* list : {&w0, &w1})
        for (const auto& s : *list) total += s.bytes();

    RetentionPlanner planner(dir.path());
    // Exactly the three oldest must go: w0 s1, w1 s1, w0 s2.
    auto limit = total - w0[0].bytes() - w1[0].bytes() - w0[1].bytes();
    auto result = planner.apply({limit, 0}, kT0);
    EXPECT_TRUE(result.problems.empty()) << joined(result.problems);
    EXPECT_EQ(asSet(result.deleted), pathsOf({&w0[0], &w1[0], &w0[1]}));
    EXPECT_EQ(result.totalBytesAfter, limit);
    expectConsistent(dir.path(), before);

    // One byte over the limit after that: the next oldest (w1 s2) goes, nothing else.
    result = planner.apply({limit - 1, 0}, kT0);
    EXPECT_EQ(asSet(result.deleted), pathsOf({&w1[1]}));
    expectConsistent(dir.path(), before);

    // Everything deletable goes; the current segments stay, and that is not a problem.
    result = planner.apply({1, 0}, kT0);
    EXPECT_EQ(asSet(result.deleted), pathsOf({&w0[2], &w1[2]}));
    EXPECT_TRUE(result.problems.empty());
    EXPECT_EQ(result.totalBytesAfter, w0[3].bytes() + w1[3].bytes());
    expectConsistent(dir.path(), before);
}

// With an archive: only segments it verified (with the seal they have now) go, by either limit;
// the rest of their worker waits behind an unverified one. fail-open lets the size limit take
// unarchived ones too, each reported; the unarchived backlog is measured either way.
TEST(AuditRetentionTest, WithAnArchiveOnlyVerifiedSegmentsGo) {
    TempDir dir;
    std::vector<Seg> w0;
    for (std::uint64_t n = 1; n <= 4; ++n) {
        auto start = kT0 + static_cast<std::int64_t>(n) * kHour;
        w0.emplace_back(dir.path(), 0, n, start);
        w0.back().whole(n, start + 1);
        if (n < 4) w0.back().seal();
        w0.back().write();
    }
    auto before = listConnections(dir.path());
    std::set<std::uint64_t> verified = {1, 3};  // s2 is not: s3 waits behind it
    RetentionPolicy policy{1, 0};
    policy.archived = [&](unsigned worker, std::uint64_t segment, const Digest& seal) {
        EXPECT_EQ(worker, 0u);
        return verified.count(segment) != 0 && seal == w0[segment - 1].sealDigest();
    };
    RetentionPlanner planner(dir.path());
    auto result = planner.apply(policy, kT0);
    EXPECT_TRUE(result.problems.empty()) << joined(result.problems);
    EXPECT_EQ(asSet(result.deleted), pathsOf({&w0[0]}));
    EXPECT_TRUE(result.deletedUnarchived.empty());
    EXPECT_EQ(result.unarchivedBytes, w0[1].bytes());  // s3 is verified, s4 is not sealed
    expectConsistent(dir.path(), before);

    // The age limit honours the archive too.
    auto aged = planner.apply({0, 1, false, policy.archived, false}, kT0 + 100 * kHour);
    EXPECT_TRUE(aged.deleted.empty());

    // Verified with another seal: a replaced segment, kept.
    verified.insert(2);
    auto replaced = policy;
    replaced.archived = [&](unsigned, std::uint64_t segment, const Digest& seal) {
        return segment != 2 && seal == w0[segment - 1].sealDigest();
    };
    EXPECT_TRUE(planner.apply(replaced, kT0).deleted.empty());

    auto failOpen = replaced;
    failOpen.deleteUnarchivedOverBudget = true;
    result = planner.apply(failOpen, kT0);
    EXPECT_EQ(asSet(result.deleted), pathsOf({&w0[1], &w0[2]}));
    EXPECT_EQ(result.deletedUnarchived, std::vector<std::string>{w0[1].indexPath()});
    EXPECT_EQ(result.unarchivedBytes, 0u);
    expectConsistent(dir.path(), before);
}

// With recycling (the direct writer), deleted data files fill their worker's spare slots,
// unreadable to the audit group; once every slot of a worker is taken, its next deleted data file
// is unlinked, and so is one a reader holds (it keeps reading its bytes). Spares are no segments:
// the log stays consistent, they are not counted as audit bytes, and removeSpareDataFiles() takes
// away those no worker will take.
TEST(AuditRetentionTest, DeletedDataFilesFillTheWorkersSpareSlots) {
    TempDir dir;
    std::vector<Seg> w0, w1;
    std::uint64_t id = 1;
    for (std::uint64_t n = 1; n <= 4; ++n)
        for (unsigned worker : {0u, 1u}) {
            auto start = kT0 + static_cast<std::int64_t>(2 * (n - 1) + worker) * kHour;
            auto& list = worker == 0 ? w0 : w1;
            list.emplace_back(dir.path(), worker, n, start);
            list.back().whole(id++, start + 1);
            if (n < 4) list.back().seal();
            list.back().write();
        }
    auto before = listConnections(dir.path());
    auto sparePath = [&](unsigned worker, unsigned slot) {
        return dir.path() + "/" + spareDataName(worker, slot);
    };
    UniqueFd dirFd(::open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    auto held = listSegments(dir.path()).front();  // worker 0's first segment
    ASSERT_EQ(held.dataPath, w0[0].dataPath());
    UniqueFd reader = openIn(dirFd.get(), held, false);
    std::string heldBytes(static_cast<std::size_t>(fileSize(held.dataPath)), '\0');
    ASSERT_GT(heldBytes.size(), 0u);
    ASSERT_EQ(::pread(reader.get(), heldBytes.data(), heldBytes.size(), 0),
              static_cast<ssize_t>(heldBytes.size()));
    struct stat second {};
    ASSERT_EQ(::stat(w0[1].dataPath().c_str(), &second), 0);

    RetentionPlanner planner(dir.path());
    RetentionPolicy policy{1, 0, true};
    auto result = planner.apply(policy, kT0);
    EXPECT_TRUE(result.problems.empty()) << joined(result.problems);
    EXPECT_EQ(asSet(result.deleted), pathsOf({&w0[0], &w1[0], &w0[1], &w1[1], &w0[2], &w1[2]}));
    EXPECT_EQ(result.recycledFiles, 2 * kSpareSlots)
        << "worker 0's held first and worker 1's third are unlinked";
    EXPECT_EQ(result.totalBytesAfter, w0[3].bytes() + w1[3].bytes());
    struct stat spare {};
    ASSERT_EQ(::stat(sparePath(0, 0).c_str(), &spare), 0);
    EXPECT_EQ(spare.st_ino, second.st_ino) << "worker 0's oldest data file no reader holds";
    EXPECT_EQ(spare.st_mode & 07777, 0600u);
    for (unsigned worker : {0u, 1u})
        for (unsigned slot = 0; slot < kSpareSlots; ++slot)
            EXPECT_TRUE(exists(sparePath(worker, slot))) << worker << "/" << slot;
    EXPECT_FALSE(exists(w0[0].dataPath()));
    std::string stillThere(heldBytes.size(), '\0');
    ASSERT_EQ(::pread(reader.get(), stillThere.data(), stillThere.size(), 0),
              static_cast<ssize_t>(stillThere.size()));
    EXPECT_EQ(stillThere, heldBytes);
    expectConsistent(dir.path(), before);

    auto removed = removeSpareDataFiles(dirFd.get(), dir.path(), {0});
    EXPECT_EQ(asSet(removed), (std::set<std::string>{spareDataName(1, 0), spareDataName(1, 1)}));
    EXPECT_TRUE(exists(sparePath(0, 0)));
    EXPECT_FALSE(exists(sparePath(1, 0)));
}

// Deleted bytes do not outlive --audit-retention-hours in a spare: one last written before the
// age limit is unlinked at the next run, recycling or not; a younger one stays for the writer.
// With a size limit only, spares wait for the writer whatever their age.
TEST(AuditRetentionTest, SparesPastTheAgeLimitAreUnlinked) {
    TempDir dir;
    Seg current(dir.path(), 0, 5, kT0 - kHour / 2);
    current.whole(1, kT0 - kHour / 2 + 1).write();
    auto spareAged = [&](unsigned slot, std::int64_t writtenNs) {
        auto path = dir.write(spareDataName(0, slot), std::string(4096, '\xee'));
        timespec times[2] = {{writtenNs / 1'000'000'000, writtenNs % 1'000'000'000},
                             {writtenNs / 1'000'000'000, writtenNs % 1'000'000'000}};
        EXPECT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
        return path;
    };
    auto old = spareAged(0, kT0 - 2 * kHour);
    auto young = spareAged(1, kT0 - kHour / 2);

    RetentionPlanner planner(dir.path());
    auto sizeOnly = planner.apply(RetentionPolicy{1, 0, true}, kT0);
    EXPECT_TRUE(sizeOnly.agedSpares.empty());
    EXPECT_TRUE(exists(old) && exists(young)) << "a size limit does not age spares";

    for (bool recycle : {true, false}) {
        spareAged(0, kT0 - 2 * kHour);
        auto result = planner.apply(RetentionPolicy{0, 1, recycle}, kT0);
        EXPECT_TRUE(result.problems.empty()) << joined(result.problems);
        EXPECT_EQ(result.agedSpares, std::vector<std::string>{old}) << "recycle " << recycle;
        EXPECT_FALSE(exists(old));
        EXPECT_TRUE(exists(young));
        EXPECT_TRUE(exists(current.dataPath())) << "the current segment is never deleted";
    }
}

// A current segment in a recycled data file (0600: past its payload it still holds a deleted
// segment's bytes) that began before the age limit is reported for a roll; its seal cuts them.
TEST(AuditRetentionTest, AnAgedRecycledCurrentSegmentIsReportedForARoll) {
    TempDir dir;
    Seg sealedOld(dir.path(), 0, 4, kT0 - 3 * kHour);
    sealedOld.whole(1, kT0 - 3 * kHour + 1).seal().write();
    Seg current(dir.path(), 0, 5, kT0 - 2 * kHour);
    current.whole(2, kT0 - 2 * kHour + 1).write();
    Seg ahead(dir.path(), 0, 6, kT0 - kHour / 2);  // the next, created ahead: young
    ahead.write();
    Seg otherWorker(dir.path(), 1, 1, kT0 - 2 * kHour);
    otherWorker.whole(3, kT0 - 2 * kHour + 1).write();
    ::chmod(current.dataPath().c_str(), 0600);
    ::chmod(ahead.dataPath().c_str(), 0600);
    ::chmod(otherWorker.dataPath().c_str(), 0640);  // a new file: nothing deleted in it

    RetentionPlanner planner(dir.path());
    EXPECT_TRUE(planner.apply(RetentionPolicy{1, 0, true}, kT0).rollRecycled.empty())
        << "only the age limit bounds how long deleted bytes stay";
    auto result = planner.apply(RetentionPolicy{0, 1, true}, kT0);
    EXPECT_TRUE(result.problems.empty()) << joined(result.problems);
    EXPECT_EQ(result.rollRecycled, std::vector<unsigned>{0});
    EXPECT_TRUE(planner.apply(RetentionPolicy{0, 3, true}, kT0).rollRecycled.empty())
        << "younger than the limit";
    ::chmod(current.dataPath().c_str(), 0640);  // sealed since: cut and opened to the group
    EXPECT_TRUE(planner.apply(RetentionPolicy{0, 1, true}, kT0).rollRecycled.empty());
}

// A reader that opened a data file just before retention recycled it finds that out once it holds
// the file: it reads as deleted (ENOENT), never as the segment a worker may be writing into it.
TEST(AuditRetentionTest, ADataFileRecycledAsItIsOpenedReadsAsDeleted) {
    TempDir dir;
    Seg s1(dir.path(), 0, 1, kT0);
    s1.whole(1, kT0 + 1).seal().write();
    UniqueFd dirFd(::open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    auto files = listSegments(dir.path()).front();
    UniqueFd opened(::open(files.dataPath.c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(opened);
    EXPECT_NO_THROW(holdDataFile(dirFd.get(), opened.get(), files));
    auto spare = dir.path() + "/" + spareDataName(0, 0);
    ASSERT_EQ(::rename(files.dataPath.c_str(), spare.c_str()), 0);
    try {
        holdDataFile(dirFd.get(), opened.get(), files);
        ADD_FAILURE() << "a recycled data file was held as the segment's";
    } catch (const std::system_error& error) {
        EXPECT_EQ(error.code().value(), ENOENT) << error.what();
    }
}

std::string extracted(const std::string& dir, std::uint64_t id, std::uint8_t direction,
                      ExtractResult& result) {
    TempDir out;
    std::string path = out.path() + "/stream";
    UniqueFd file(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    result = extractConnection(dir, id, direction, [&] { return file.get(); });
    std::string bytes(static_cast<std::size_t>(fileSize(path)), '\0');
    EXPECT_EQ(::pread(file.get(), bytes.data(), bytes.size(), 0),
              static_cast<ssize_t>(bytes.size()));
    return bytes;
}

const ConnectionSummary* findConnection(const ListResult& list, std::uint64_t id) {
    for (const auto& c : list.connections)
        if (c.id == id) return &c;
    return nullptr;
}

// A long-lived connection must not pin the log: its oldest segments go like any others, and
// what is left of it reads as a connection whose head was deleted.
TEST(AuditRetentionTest, ConnectionSpanningDeletedSegmentsKeepsItsTail) {
    TempDir dir;
    Seg s1(dir.path(), 0, 1, kT0, 10);
    s1.open(10, kT0).chunk(10, kDirectionC2U, "abc", kT0).whole(11, kT0).seal().write();
    Seg s2(dir.path(), 0, 2, kT0 + kHour, 12);
    s2.chunk(10, kDirectionU2C, "defg", kT0 + kHour).seal().write();
    Seg s3(dir.path(), 0, 3, kT0 + 2 * kHour, 12);
    s3.whole(12, kT0 + 2 * kHour).chunk(10, kDirectionC2U, "hi", kT0 + 2 * kHour).write();

    RetentionPlanner planner(dir.path());
    auto result = planner.apply({0, 1}, kT0 + 2 * kHour + 1);
    EXPECT_TRUE(result.problems.empty()) << joined(result.problems);
    // Oldest first, one segment at a time: each has its own retention log entry.
    EXPECT_EQ(result.deleted, (std::vector<std::string>{s1.indexPath(), s1.dataPath(),
                                                        s2.indexPath(), s2.dataPath()}));
    std::vector<std::string> problems;
    auto summary =
        verifyDirectory(dir.path(), [&](const std::string& line) { problems.push_back(line); });
    EXPECT_TRUE(withoutUnsealed(problems).empty()) << joined(problems);
    EXPECT_EQ(summary.deletedByRetention, 2u);
    EXPECT_EQ(summary.headsDeleted, 1u);

    auto list = listConnections(dir.path());
    EXPECT_TRUE(list.problems.empty()) << joined(list.problems);
    const auto* tail = findConnection(list, 10);
    ASSERT_NE(tail, nullptr);
    EXPECT_TRUE(tail->headDeleted);
    EXPECT_EQ(tail->state, ConnectionState::Open);
    EXPECT_EQ(tail->segment, 3u);
    EXPECT_EQ(tail->openedNs, 0);
    EXPECT_TRUE(tail->route.empty());
    EXPECT_EQ(tail->c2uBytes, 2u);
    EXPECT_EQ(tail->u2cBytes, 0u);
    ASSERT_NE(findConnection(list, 12), nullptr);
    EXPECT_FALSE(findConnection(list, 12)->headDeleted);
    EXPECT_EQ(findConnection(list, 11), nullptr);
    ExtractResult got;
    EXPECT_EQ(extracted(dir.path(), 10, kDirectionC2U, got), "hi");
    EXPECT_TRUE(got.found);
    EXPECT_TRUE(got.headDeleted);

    // It closes: the Close counts all its bytes, the list the bytes the log still holds.
    s3.close(10, 5, 4, kT0 + 3 * kHour).write();
    problems.clear();
    verifyDirectory(dir.path(), [&](const std::string& line) { problems.push_back(line); });
    EXPECT_TRUE(withoutUnsealed(problems).empty()) << joined(problems);
    tail = findConnection(listConnections(dir.path()), 10);
    ASSERT_NE(tail, nullptr);
    EXPECT_EQ(tail->state, ConnectionState::Closed);
    EXPECT_EQ(tail->c2uBytes, 2u);
}

// Only ids below the first remaining segment's floor can have lost their Open to retention: a
// record of a later id without its Open is still damage, and so is a Close that counts fewer
// bytes than the chunks left.
TEST(AuditRetentionTest, OnlyIdsBelowTheFloorContinueADeletedHead) {
    TempDir dir;
    Seg s1(dir.path(), 0, 1, kT0, 1);
    s1.open(1, kT0).chunk(1, kDirectionC2U, "abc", kT0).seal().write();
    Seg s2(dir.path(), 0, 2, kT0 + 1, 2);
    s2.chunk(1, kDirectionC2U, "de", kT0 + 1).chunk(2, kDirectionC2U, "x", kT0 + 1).seal().write();
    Seg s3(dir.path(), 0, 3, kT0 + 2, 3);
    s3.write();
    RetentionPlanner planner(dir.path());
    EXPECT_EQ(asSet(planner.apply({0, 1}, kT0 + kHour + 1).deleted), pathsOf({&s1}));
    auto problems = withoutUnsealed(verifyDirectory(dir.path()));
    ASSERT_EQ(problems.size(), 1u) << joined(problems);
    EXPECT_NE(problems[0].find("Chunk record for connection 2 without an earlier Open record"),
              std::string::npos)
        << problems[0];

    s3.close(1, 1, 0, kT0 + 3).write();
    problems = withoutUnsealed(verifyDirectory(dir.path()));
    ASSERT_EQ(problems.size(), 2u) << joined(problems);
    EXPECT_NE(problems[1].find("Close record of connection 1 counts c2u 1"), std::string::npos)
        << problems[1];
}

// verify on a live directory: retention deletes segments 1 and 2 of worker 0 and segment 1 of
// worker 1 after verify has listed them and read worker 0's segment 1. The segments it then
// cannot open are not a problem, nor is the connection whose Open verify saw in segment 1: it
// continues in segment 3 as a connection whose head was deleted.
TEST(AuditRetentionTest, VerifyTakesSegmentsRetentionDeletesWhileItReads) {
    TempDir dir;
    Seg s1(dir.path(), 0, 1, kT0, 1);
    s1.open(1, kT0).chunk(1, kDirectionC2U, "abc", kT0).whole(2, kT0).seal().write();
    Seg s2(dir.path(), 0, 2, kT0 + 1, 3);
    s2.chunk(1, kDirectionC2U, "de", kT0 + 1).seal().write();
    Seg s3(dir.path(), 0, 3, kT0 + 2 * kHour, 3);
    s3.chunk(1, kDirectionC2U, "fg", kT0 + 2 * kHour).close(1, 7, 0, kT0 + 2 * kHour);
    s3.seal().write();
    Seg(dir.path(), 0, 4, kT0 + 2 * kHour, 3).write();
    Seg t1(dir.path(), 1, 1, kT0, 10);
    t1.whole(10, kT0).seal().write();
    Seg(dir.path(), 1, 2, kT0 + 2 * kHour, 11).write();

    RetentionPlanner planner(dir.path());
    std::vector<std::string> deleted;
    VerifyOptions options;
    options.beforeSegment = [&](unsigned worker, std::uint64_t segment) {
        if (worker == 0 && segment == 2)
            deleted = planner.apply({0, 1}, kT0 + 2 * kHour + 1).deleted;
    };
    std::vector<std::string> problems;
    auto summary = verifyDirectory(
        dir.path(), [&](const std::string& line) { problems.push_back(line); }, options);
    EXPECT_EQ(asSet(deleted), pathsOf({&s1, &s2, &t1}));
    EXPECT_TRUE(withoutUnsealed(problems).empty()) << joined(problems);
    EXPECT_EQ(summary.deletedByRetention, 3u);
    EXPECT_EQ(summary.headsDeleted, 1u);
    EXPECT_EQ(summary.segments, 4u);     // read: 0/1, 0/3, 0/4 and 1/2
    EXPECT_EQ(summary.connections, 2u);  // 1 and 2 (closed in segment 1); 10 was never read

    // A segment that vanishes without a retention log entry is still a problem.
    problems.clear();
    options.beforeSegment = [&](unsigned worker, std::uint64_t segment) {
        if (worker == 0 && segment == 3) ::unlink(s3.indexPath().c_str());
    };
    verifyDirectory(
        dir.path(), [&](const std::string& line) { problems.push_back(line); }, options);
    ASSERT_FALSE(problems.empty());
    EXPECT_NE(problems[0].find("cannot open " + s3.indexPath()), std::string::npos)
        << joined(problems);
}

// A data file stands alone twice in a segment's life: retention unlinks the index first (after
// recording the deletion), and a writer creates the data file first. verify, listing the
// directory at either moment, must not call that damage; a data file alone that is neither is.
TEST(AuditRetentionTest, VerifyTakesADataFileWhoseIndexIsBeingDeletedOrCreated) {
    TempDir parent;
    const std::string path = parent.path() + "/audit";
    std::optional<AuditDirectory> held = AuditDirectory::open(path);  // a daemon runs
    Seg s1(path, 0, 1, kT0, 1);
    s1.whole(1, kT0).seal().write();
    Seg s2(path, 0, 2, kT0 + 2 * kHour, 2);
    s2.whole(2, kT0 + 2 * kHour).seal().write();
    Seg(path, 0, 3, kT0 + 2 * kHour, 3).write();
    RetentionPlanner planner(path);
    ASSERT_EQ(asSet(planner.apply({0, 1}, kT0 + 2 * kHour + 1).deleted), pathsOf({&s1}));
    // Between retention's two unlinks: segment 1's data file is back alone.
    writeFile(s1.dataPath(), "hello");
    // A writer between its two creates: segment 4's data file, no index yet.
    const std::string creating = path + "/" + segmentBaseName(0, 4) + ".data";
    writeFile(creating, "");

    std::vector<std::string> problems;
    auto summary =
        verifyDirectory(path, [&](const std::string& line) { problems.push_back(line); });
    EXPECT_TRUE(withoutUnsealed(problems).empty()) << joined(problems);
    EXPECT_EQ(summary.segments, 2u);  // 2 and 3

    // With no daemon running, segment 4's data file alone is what a crash left: reported.
    held.reset();
    problems.clear();
    verifyDirectory(path, [&](const std::string& line) { problems.push_back(line); });
    problems = withoutUnsealed(problems);
    ASSERT_EQ(problems.size(), 1u) << joined(problems);
    EXPECT_NE(problems[0].find(creating + ":0: data file without an index file"), std::string::npos)
        << joined(problems);
}

// extract on a live directory: once it has found the connection it holds the rest of the
// worker's segments open, so retention deleting them (here when the output is opened, right
// after) takes no byte from the copy.
TEST(AuditRetentionTest, ExtractKeepsTheSegmentsItNeedsWhileRetentionDeletesThem) {
    TempDir dir;
    Seg s1(dir.path(), 0, 1, kT0, 1);
    s1.open(1, kT0).chunk(1, kDirectionC2U, "abc", kT0).seal().write();
    Seg s2(dir.path(), 0, 2, kT0 + 1, 2);
    s2.chunk(1, kDirectionC2U, "de", kT0 + 1).seal().write();
    Seg s3(dir.path(), 0, 3, kT0 + 2 * kHour, 2);
    s3.chunk(1, kDirectionC2U, "fg", kT0 + 2 * kHour).close(1, 7, 0, kT0 + 2 * kHour).write();

    RetentionPlanner planner(dir.path());
    std::vector<std::string> deleted;
    TempDir out;
    const std::string path = out.path() + "/c2u";
    auto got = extractConnection(dir.path(), 1, kDirectionC2U, [&] {
        deleted = planner.apply({0, 1}, kT0 + 2 * kHour + 1).deleted;
        return ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    });
    EXPECT_EQ(asSet(deleted), pathsOf({&s1, &s2}));
    EXPECT_TRUE(got.found);
    EXPECT_FALSE(got.headDeleted);
    EXPECT_EQ(got.state, ConnectionState::Closed);
    EXPECT_EQ(got.bytes, 7u);
    std::string bytes(16, '\0');
    UniqueFd in(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    bytes.resize(static_cast<std::size_t>(::read(in.get(), bytes.data(), bytes.size())));
    EXPECT_EQ(bytes, "abcdefg");
}

// An open connection no longer holds back the segments before it; after a crash, recovery
// truncates it although its Open is gone.
TEST(AuditRetentionTest, SizeCapDeletesThroughAnOpenConnection) {
    TempDir dir;
    Seg s1(dir.path(), 0, 1, kT0, 1);
    s1.whole(1, kT0).seal().write();
    Seg s2(dir.path(), 0, 2, kT0 + 1, 2);
    s2.open(2, kT0 + 1).chunk(2, kDirectionC2U, "xyz", kT0 + 1).whole(3, kT0 + 1).seal().write();
    Seg s3(dir.path(), 0, 3, kT0 + 2, 4);
    s3.chunk(2, kDirectionC2U, "more", kT0 + 2).whole(4, kT0 + 2).seal().write();
    Seg s4(dir.path(), 0, 4, kT0 + 3, 5);
    s4.chunk(2, kDirectionC2U, "end", kT0 + 3).whole(5, kT0 + 3).write();

    RetentionPlanner planner(dir.path());
    auto result = planner.apply({1, 0}, kT0);
    EXPECT_EQ(asSet(result.deleted), pathsOf({&s1, &s2, &s3}));
    EXPECT_TRUE(withoutUnsealed(verifyDirectory(dir.path())).empty());
    auto left = listConnections(dir.path());
    ASSERT_EQ(left.connections.size(), 2u);
    EXPECT_EQ(left.connections[0].id, 2u);
    EXPECT_TRUE(left.connections[0].headDeleted);
    EXPECT_EQ(left.connections[0].c2uBytes, 3u);
    ExtractResult got;
    EXPECT_EQ(extracted(dir.path(), 2, kDirectionC2U, got), "end");

    // The daemon died with connection 2 open.
    auto report = recoverAuditDirectory(dir.path());
    EXPECT_EQ(report.truncatedConnections, 1u) << joined(report.actions);
    EXPECT_TRUE(verifyDirectory(dir.path()).empty()) << joined(verifyDirectory(dir.path()));
    left = listConnections(dir.path());
    ASSERT_EQ(left.connections.size(), 2u);
    EXPECT_EQ(left.connections[0].state, ConnectionState::Truncated);
}

// The planner remembers where the retention log ended after its own append; a log that changed
// since (here: a torn tail, as a crash in the middle of an append leaves) is read again, and the
// next entry goes after its last good one.
TEST(AuditRetentionTest, RetentionLogChangedBetweenRunsIsReadAgain) {
    TempDir dir;
    Seg s1(dir.path(), 0, 1, kT0, 1);
    s1.whole(1, kT0).seal().write();
    Seg s2(dir.path(), 0, 2, kT0 + kHour, 2);
    s2.whole(2, kT0 + kHour).seal().write();
    Seg s3(dir.path(), 0, 3, kT0 + 2 * kHour, 3);
    s3.whole(3, kT0 + 2 * kHour).seal().write();
    Seg s4(dir.path(), 0, 4, kT0 + 3 * kHour, 4);
    s4.write();
    RetentionPlanner planner(dir.path());
    EXPECT_EQ(asSet(planner.apply({0, 1}, kT0 + kHour + 1).deleted), pathsOf({&s1}));
    {
        UniqueFd log(::open((dir.path() + "/" + kRetentionLogName).c_str(),
                            O_WRONLY | O_APPEND | O_CLOEXEC));
        ASSERT_TRUE(log.valid());
        ASSERT_EQ(::write(log.get(), "torn entry", 10), 10);
    }
    EXPECT_EQ(asSet(planner.apply({0, 1}, kT0 + 2 * kHour + 1).deleted), pathsOf({&s2}));
    EXPECT_EQ(asSet(planner.apply({0, 1}, kT0 + 3 * kHour + 1).deleted), pathsOf({&s3}));
    std::vector<std::string> problems;
    auto summary =
        verifyDirectory(dir.path(), [&](const std::string& line) { problems.push_back(line); });
    EXPECT_TRUE(withoutUnsealed(problems).empty()) << joined(problems);
    EXPECT_EQ(summary.deletedByRetention, 3u);
}

// The retention log grows by one entry per deleted segment; past its compaction size it is
// rewritten with each worker's older entries merged into one. What readers need stays: every
// deleted segment is still recorded (verify counts them all), the first remaining segment's
// predecessor digest is recorded (the chain verifies), a connection whose head was deleted still
// continues, and the two newest entries of each worker stay as they were.
TEST(AuditRetentionTest, RetentionLogIsCompactedAndStillCoversEveryDeletion) {
    TempDir dir;
    constexpr std::uint64_t kSegments = 14;
    std::vector<std::unique_ptr<Seg>> segs;
    for (unsigned worker = 0; worker < 2; ++worker) {
        for (std::uint64_t n = 1; n <= kSegments; ++n) {
            std::uint64_t id = 1000 * (worker + 1) + n;
            auto seg =
                std::make_unique<Seg>(dir.path(), worker, n, kT0 + n * kHour, n == 1 ? 0 : id - 1);
            if (worker == 0 && n == 1) seg->open(1, kT0 + kHour);
            if (worker == 0) seg->chunk(1, kDirectionC2U, "x", kT0 + n * kHour);
            seg->whole(id, kT0 + n * kHour);
            if (n < kSegments) seg->seal();
            seg->write();
            segs.push_back(std::move(seg));
        }
    }
    RetentionPlanner planner(dir.path());
    planner.setLogCompactionBytes(1000);  // about six entries
    std::uint64_t deleted = 0;
    for (std::uint64_t hour = 2; hour <= kSegments; ++hour)
        deleted += planner.apply({0, 1}, kT0 + hour * kHour + kHour / 2).deleted.size() / 2;
    ASSERT_EQ(deleted, 2 * (kSegments - 1));  // all but each worker's newest

    UniqueFd dirFd(::open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    auto log = repairRetentionLog(dirFd.get(), dir.path(), false);
    EXPECT_TRUE(log.cut.empty()) << log.cut;
    EXPECT_LT(log.entries.size(), deleted) << "the log was compacted";
    EXPECT_FALSE(exists(dir.path() + "/" + kRetentionLogCompacting));
    for (unsigned worker = 0; worker < 2; ++worker) {
        SCOPED_TRACE("worker " + std::to_string(worker));
        std::vector<RetentionLogEntry> mine;
        for (const auto& entry : log.entries)
            if (entry.worker == worker) mine.push_back(entry);
        ASSERT_GE(mine.size(), 2u);
        std::uint64_t next = 1;  // the entries cover 1..kSegments-1, in order, without a gap
        for (const auto& entry : mine) {
            EXPECT_EQ(entry.first, next);
            next = entry.last + 1;
        }
        EXPECT_EQ(next, kSegments);
        EXPECT_EQ(mine[mine.size() - 2].first, mine[mine.size() - 2].last);
        EXPECT_EQ(mine.back().first, kSegments - 1);
        EXPECT_EQ(mine.back().last, kSegments - 1);
    }
    std::vector<std::string> problems;
    auto summary =
        verifyDirectory(dir.path(), [&](const std::string& line) { problems.push_back(line); });
    EXPECT_TRUE(withoutUnsealed(problems).empty()) << joined(problems);
    EXPECT_EQ(summary.deletedByRetention, deleted);
    EXPECT_EQ(summary.headsDeleted, 1u);
    auto list = listConnections(dir.path());
    const auto* tail = findConnection(list, 1);
    ASSERT_NE(tail, nullptr);
    EXPECT_TRUE(tail->headDeleted);
    EXPECT_EQ(tail->c2uBytes, 1u);
    ExtractResult got;
    EXPECT_EQ(extracted(dir.path(), 1, kDirectionC2U, got), "x");
    EXPECT_TRUE(got.headDeleted);
    EXPECT_EQ(extracted(dir.path(), 2000 + kSegments, kDirectionU2C, got), "world!");
}

TEST(AuditRetentionTest, CurrentAndNewestSegmentsAreNeverDeleted) {
    TempDir dir;
    Seg s1(dir.path(), 0, 1, kT0);
    s1.whole(1, kT0).write();  // unsealed and newest: the daemon writes it
    RetentionPlanner planner(dir.path());
    EXPECT_TRUE(planner.apply({1, 1}, kT0 + 1000 * kHour).deleted.empty());
    s1.seal().write();  // sealed, but still the worker's newest: keeps its segment numbering
    EXPECT_TRUE(planner.apply({1, 1}, kT0 + 1000 * kHour).deleted.empty());

    // An unsealed segment before the newest (a roll with writes still in flight) stays too.
    Seg s2(dir.path(), 0, 2, kT0 + 1);
    s2.whole(2, kT0 + 1).write();
    Seg s3(dir.path(), 0, 3, kT0 + 2);
    s3.write();
    auto before = listConnections(dir.path());
    auto result = planner.apply({1, 1}, kT0 + 1000 * kHour);
    EXPECT_EQ(asSet(result.deleted), pathsOf({&s1}));
    EXPECT_TRUE(exists(s2.indexPath()));
    EXPECT_TRUE(exists(s3.indexPath()));
    expectConsistent(dir.path(), before);
}

TEST(AuditRetentionTest, TruncatedConnectionCountsAsEnded) {
    TempDir dir;
    Seg s1(dir.path(), 0, 1, kT0);
    s1.open(7, kT0).chunk(7, kDirectionU2C, "partial", kT0).seal().write();
    // What recovery writes when the last segment was already sealed.
    Seg s2(dir.path(), 0, 2, kT0 + kHour);
    s2.truncated(7, kT0 + kHour).seal().write();
    Seg s3(dir.path(), 0, 3, kT0 + 2 * kHour);
    s3.write();
    auto before = listConnections(dir.path());
    ASSERT_EQ(before.connections.at(0).state, ConnectionState::Truncated);
    RetentionPlanner planner(dir.path());
    auto result = planner.apply({0, 1}, kT0 + 3 * kHour);
    EXPECT_EQ(asSet(result.deleted), pathsOf({&s1, &s2}));
    expectConsistent(dir.path(), before);
}

TEST(AuditRetentionTest, DamagedSegmentIsSkippedAndReported) {
    TempDir dir;
    Seg a1(dir.path(), 0, 1, kT0);
    a1.whole(1, kT0).seal().write();
    Seg a2(dir.path(), 0, 2, kT0 + 1);
    a2.whole(2, kT0 + 1).seal();
    a2.index()[kSegmentStartRecordSize + 30] ^= 0x55;  // inside the Open record: bad CRC
    a2.write();
    Seg a3(dir.path(), 0, 3, kT0 + 2);
    a3.whole(3, kT0 + 2).seal().write();
    Seg a4(dir.path(), 0, 4, kT0 + 3);
    a4.write();
    // Worker 1: its first data file lost its tail, so a chunk lies beyond it.
    Seg b1(dir.path(), 1, 1, kT0 + 4);
    b1.whole(4, kT0 + 4).seal().write();
    ASSERT_EQ(::truncate(b1.dataPath().c_str(), 3), 0);
    Seg b2(dir.path(), 1, 2, kT0 + 5);
    b2.whole(5, kT0 + 5).seal().write();
    Seg b3(dir.path(), 1, 3, kT0 + 6);
    b3.write();
    auto damage = verifyDirectory(dir.path());
    ASSERT_FALSE(damage.empty());
    auto before = listConnections(dir.path());

    RetentionPlanner planner(dir.path());
    auto result = planner.apply({1, 0}, kT0);
    // Only a1 can go: a2 is damaged (and blocks a3), b1 is damaged (and blocks b2).
    EXPECT_EQ(asSet(result.deleted), pathsOf({&a1}));
    ASSERT_EQ(result.problems.size(), 2u) << joined(result.problems);
    EXPECT_NE(result.problems[0].find(a2.indexPath() + ":"), std::string::npos)
        << result.problems[0];
    EXPECT_NE(result.problems[1].find(b1.indexPath() + ":"), std::string::npos)
        << result.problems[1];
    EXPECT_NE(result.problems[1].find("beyond"), std::string::npos) << result.problems[1];
    expectConsistent(dir.path(), before, damage);  // the same damage, nothing new

    // Reported again on the next run, from the cached summaries.
    auto scans = planner.indexScans();
    result = planner.apply({1, 0}, kT0);
    EXPECT_TRUE(result.deleted.empty());
    EXPECT_EQ(result.problems.size(), 2u);
    EXPECT_EQ(planner.indexScans(), scans + 2);  // the two current segments only
}

TEST(AuditRetentionTest, MissingDataFileIsDamage) {
    TempDir dir;
    Seg s1(dir.path(), 0, 1, kT0);
    s1.whole(1, kT0).seal().write();
    ASSERT_EQ(::unlink(s1.dataPath().c_str()), 0);
    Seg s2(dir.path(), 0, 2, kT0 + 1);
    s2.write();
    RetentionPlanner planner(dir.path());
    auto result = planner.apply({1, 0}, kT0);
    EXPECT_TRUE(result.deleted.empty());
    ASSERT_EQ(result.problems.size(), 1u);
    EXPECT_NE(result.problems[0].find("missing"), std::string::npos) << result.problems[0];
}

TEST(AuditRetentionTest, CachedSummariesAreReusedAndRefreshed) {
    TempDir dir;
    Seg s1(dir.path(), 0, 1, kT0);
    s1.whole(1, kT0).seal().write();
    Seg s2(dir.path(), 0, 2, kT0 + 1);
    s2.whole(2, kT0 + 1).seal().write();
    Seg s3(dir.path(), 0, 3, kT0 + 2);
    s3.whole(3, kT0 + 2).seal().write();
    Seg s4(dir.path(), 0, 4, kT0 + 3);
    s4.whole(4, kT0 + 3).write();

    RetentionPlanner planner(dir.path());
    EXPECT_TRUE(planner.apply({kNoLimit, 0}, kT0).deleted.empty());
    EXPECT_EQ(planner.indexScans(), 4u);
    EXPECT_TRUE(planner.apply({kNoLimit, 0}, kT0).deleted.empty());
    EXPECT_EQ(planner.indexScans(), 5u);  // only the unsealed s4 again

    // s2 is rewritten without its seal. A stale summary would still call it sealed, and let it
    // (and s3 after it) be deleted.
    Seg s2b(dir.path(), 0, 2, kT0 + 1);
    s2b.whole(2, kT0 + 1).write();
    auto before = listConnections(dir.path());
    auto result = planner.apply({1, 0}, kT0);
    EXPECT_EQ(asSet(result.deleted), pathsOf({&s1}));
    EXPECT_EQ(planner.indexScans(), 7u);  // s2 and s4
    expectConsistent(dir.path(), before);

    EXPECT_TRUE(planner.apply({1, 0}, kT0).deleted.empty());
    EXPECT_EQ(planner.indexScans(), 9u);  // both unsealed: read each run

    // A fresh planner reads everything again and decides the same.
    RetentionPlanner other(dir.path());
    EXPECT_TRUE(other.apply({1, 0}, kT0).deleted.empty());
    EXPECT_EQ(other.indexScans(), 3u);
}

TEST(AuditRetentionTest, LoneDataFilesBelowTheNewestSegmentAreRemoved) {
    TempDir dir;
    Seg s1(dir.path(), 0, 1, kT0);
    s1.whole(1, kT0).seal().write();
    ASSERT_EQ(::unlink(s1.indexPath().c_str()), 0);  // a deletion interrupted between unlinks
    Seg s2(dir.path(), 0, 2, kT0 + 1);
    s2.whole(2, kT0 + 1).seal().write();
    Seg s3(dir.path(), 0, 3, kT0 + 2);
    s3.write();
    writeFile(dir.path() + "/" + segmentBaseName(0, 4) + ".data", "");  // being created
    auto verifyBefore = withoutUnsealed(verifyDirectory(dir.path()));
    ASSERT_EQ(verifyBefore.size(), 2u) << joined(verifyBefore);
    auto before = listConnections(dir.path());

    RetentionPlanner planner(dir.path());
    EXPECT_TRUE(planner.apply({}, kT0).deleted.empty());  // no limit: nothing at all
    auto result = planner.apply({kNoLimit, 0}, kT0);
    EXPECT_EQ(result.deleted, std::vector<std::string>{s1.dataPath()});
    EXPECT_TRUE(exists(dir.path() + "/" + segmentBaseName(0, 4) + ".data"));
    expectConsistent(dir.path(), before, {verifyBefore[1]});
}

TEST(AuditRetentionTest, UnreadableDirectoryThrows) {
    TempDir dir;
    RetentionPlanner planner(dir.path() + "/missing");
    EXPECT_THROW(planner.apply({1, 1}, kT0), std::system_error);
    RetentionPlanner empty(dir.path());
    auto result = empty.apply({1, 1}, kT0);
    EXPECT_TRUE(result.deleted.empty());
    EXPECT_EQ(result.totalBytesAfter, 0u);
}

}  // namespace
}  // namespace splicegate::audit
