// The offline reader (audit/AuditReader.h): streaming index reading and resynchronisation, list,
// extract (exact bytes across segments) and every verify check, each naming FILE:OFFSET.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "audit/AuditReader.h"
#include "audit/Records.h"
#include "common/UniqueFd.h"
#include "tests/support/AuditSegmentBuilder.h"
#include "tests/support/Daemon.h"

namespace splicegate::audit {
namespace {

using test::joined;
using test::readFile;
using test::SegmentBuilder;
using test::TempDir;

constexpr std::int64_t kT0 = test::kCraftedLogStartNs;

std::string pattern(char seed, std::size_t size) {
    std::string text(size, '\0');
    for (std::size_t i = 0; i < size; ++i) text[i] = static_cast<char>(seed + i * 7 % 251);
    return text;
}

std::string extractToString(const std::string& dir, std::uint64_t id, std::uint8_t direction,
                            ExtractResult* result = nullptr) {
    TempDir out;
    std::string path = out.path() + "/out";
    UniqueFd fd;
    auto r = extractConnection(dir, id, direction, [&] {
        fd.reset(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
        return fd.get();
    });
    if (result) *result = r;
    fd.reset();
    return r.found ? readFile(path) : std::string();
}

// A consistent two-segment log of worker 0 plus one segment of worker 1:
// connection 1 spans both segments of worker 0 (closed), 2 is closed in segment 1, 3 stays open,
// 4 (worker 1) is truncated.
struct SampleLog {
    TempDir dir;
    std::string c2u1 = pattern('a', 3000) + pattern('b', 5000);
    std::string u2c1 = pattern('c', 100) + pattern('d', 7000);
    std::string c2u2 = pattern('e', 10);

    SampleLog() {
        SegmentBuilder one(dir.path(), 0, 1);
        one.open(1);
        one.open(2, "db");
        one.chunk(1, kDirectionC2U, c2u1.substr(0, 3000));
        one.chunk(2, kDirectionC2U, c2u2);
        one.chunk(1, kDirectionU2C, u2c1.substr(0, 100));
        one.close(2, 10, 0, "upstream closed");
        one.seal();
        one.write();
        SegmentBuilder two(dir.path(), 0, 2);
        two.open(3);
        two.chunk(1, kDirectionC2U, c2u1.substr(3000));
        two.chunk(3, kDirectionU2C, "hello");
        two.chunk(1, kDirectionU2C, u2c1.substr(100));
        two.close(1, c2u1.size(), u2c1.size(), "client closed");
        two.write();
        SegmentBuilder other(dir.path(), 1, 1);
        other.open(4);
        other.chunk(4, kDirectionC2U, "abc");
        other.truncated(4);
        other.seal();
        other.write();
    }
};

// ---- IndexReader

TEST(AuditReaderTest, IndexReaderStreamsLargeFilesThroughItsBuffer) {
    TempDir dir;
    SegmentBuilder segment(dir.path(), 0, 1);
    segment.open(1);
    constexpr int kChunks = 50000;  // 2.4 MB of records: several buffer refills
    for (int i = 0; i < kChunks; ++i) segment.chunkAt(1, kDirectionC2U, 10, 10ull * i);
    segment.write();
    IndexReader reader(segment.indexPath());
    Record record;
    int chunks = 0;
    std::uint64_t expectedOffset = 0;
    IndexReader::Status status;
    while ((status = reader.next(record)) == IndexReader::Status::Record) {
        EXPECT_EQ(reader.recordOffset(), expectedOffset);
        expectedOffset = reader.goodEnd();
        if (record.type == RecordType::Chunk) {
            ASSERT_EQ(record.offset, 10ull * chunks);
            ++chunks;
        }
    }
    EXPECT_EQ(status, IndexReader::Status::End);
    EXPECT_EQ(chunks, kChunks);
    EXPECT_EQ(reader.goodEnd(), segment.index().size());
}

TEST(AuditReaderTest, IndexReaderReportsTornTailAndResyncsAfterCorruption) {
    TempDir dir;
    SegmentBuilder segment(dir.path(), 0, 1);
    segment.open(1);
    auto bad = segment.chunkAt(1, kDirectionC2U, 10, 0);
    auto good = segment.chunkAt(1, kDirectionC2U, 10, 10);
    segment.index()[bad + 20] ^= 0x40;
    std::string full;
    encodeClose(full, 1, 2, 3, 4, "x");
    segment.index() += full.substr(0, full.size() - 3);  // torn tail
    segment.write();

    IndexReader reader(segment.indexPath());
    Record record;
    ASSERT_EQ(reader.next(record), IndexReader::Status::Record);  // SegmentStart
    ASSERT_EQ(reader.next(record), IndexReader::Status::Record);  // Open
    ASSERT_EQ(reader.next(record), IndexReader::Status::Corrupt);
    EXPECT_EQ(reader.recordOffset(), bad);
    EXPECT_NE(reader.problem().find("bad CRC"), std::string::npos) << reader.problem();
    ASSERT_TRUE(reader.resync());
    EXPECT_EQ(reader.position(), good);
    ASSERT_EQ(reader.next(record), IndexReader::Status::Record);
    EXPECT_EQ(record.offset, 10u);
    auto end = reader.goodEnd();
    EXPECT_EQ(reader.next(record), IndexReader::Status::Torn);
    EXPECT_EQ(reader.goodEnd(), end);
    EXPECT_NE(reader.problem().find("torn"), std::string::npos) << reader.problem();
}

TEST(AuditReaderTest, ResyncOverGarbageFindsNothing) {
    TempDir dir;
    std::string garbage(300000, '\0');
    std::mt19937 random(7);
    for (auto& c : garbage) c = static_cast<char>(random());
    garbage.replace(1000, 4, "SGIX");  // a false magic
    std::string path = dir.write("w00-0000000001.index", garbage);
    IndexReader reader(path);
    Record record;
    ASSERT_EQ(reader.next(record), IndexReader::Status::Corrupt);
    EXPECT_FALSE(reader.resync());
    EXPECT_EQ(reader.next(record), IndexReader::Status::End);
}

// ---- list

TEST(AuditReaderTest, ListShowsEveryConnectionWithItsState) {
    SampleLog log;
    auto result = listConnections(log.dir.path());
    EXPECT_TRUE(result.problems.empty()) << joined(result.problems);
    ASSERT_EQ(result.connections.size(), 4u);
    const auto& c1 = result.connections[0];
    EXPECT_EQ(c1.id, 1u);
    EXPECT_EQ(c1.route, "web");
    EXPECT_EQ(c1.client, "198.51.100.1:4000");
    EXPECT_EQ(c1.upstream, "192.0.2.1:443");
    EXPECT_EQ(c1.openedNs, kT0 + 1);
    ASSERT_TRUE(c1.closedNs.has_value());
    EXPECT_EQ(*c1.closedNs, kT0 + 9'000'000);
    EXPECT_EQ(c1.c2uBytes, log.c2u1.size());
    EXPECT_EQ(c1.u2cBytes, log.u2c1.size());
    EXPECT_EQ(c1.state, ConnectionState::Closed);
    EXPECT_EQ(c1.reason, "client closed");
    EXPECT_EQ(result.connections[1].route, "db");
    EXPECT_EQ(result.connections[1].state, ConnectionState::Closed);
    EXPECT_EQ(result.connections[1].c2uBytes, 10u);
    const auto& c3 = result.connections[2];
    EXPECT_EQ(c3.state, ConnectionState::Open);
    EXPECT_FALSE(c3.closedNs.has_value());
    EXPECT_EQ(c3.u2cBytes, 5u);  // recorded so far
    EXPECT_EQ(c3.segment, 2u);
    const auto& c4 = result.connections[3];
    EXPECT_EQ(c4.state, ConnectionState::Truncated);
    EXPECT_EQ(c4.worker, 1u);
    EXPECT_EQ(c4.c2uBytes, 3u);
    EXPECT_STREQ(connectionStateName(ConnectionState::Truncated), "truncated");
}

TEST(AuditReaderTest, ListIgnoresTheTornTailOfTheCurrentSegmentButReportsCorruption) {
    SampleLog log;
    std::string path = log.dir.path() + "/w00-0000000002.index";
    std::string index = readFile(path);
    std::string record;
    encodeOpen(record, 9, 1, "r", "c", "u");
    SegmentBuilder::writeFile(path, index + record.substr(0, 20));
    auto result = listConnections(log.dir.path());
    EXPECT_TRUE(result.problems.empty()) << joined(result.problems);
    EXPECT_EQ(result.connections.size(), 4u);

    index[kSegmentStartRecordSize + 3] ^= 1;  // the Open of connection 3: bad magic
    SegmentBuilder::writeFile(path, index);
    result = listConnections(log.dir.path());
    ASSERT_EQ(result.problems.size(), 1u) << joined(result.problems);
    EXPECT_EQ(result.problems[0].find(path + ":" + std::to_string(kSegmentStartRecordSize) +
                                      ": bad magic"),
              0u)
        << result.problems[0];
    EXPECT_EQ(result.connections.size(), 3u);  // 3 is lost, the rest is still read
    EXPECT_EQ(result.connections[0].state, ConnectionState::Closed);
}

// ---- extract

TEST(AuditReaderTest, ExtractReturnsExactBytesAcrossTwoSegments) {
    SampleLog log;
    ExtractResult result;
    EXPECT_EQ(extractToString(log.dir.path(), 1, kDirectionC2U, &result), log.c2u1);
    EXPECT_TRUE(result.found);
    EXPECT_EQ(result.bytes, log.c2u1.size());
    EXPECT_EQ(result.chunks, 2u);
    EXPECT_EQ(result.state, ConnectionState::Closed);
    EXPECT_EQ(extractToString(log.dir.path(), 1, kDirectionU2C), log.u2c1);
    EXPECT_EQ(extractToString(log.dir.path(), 2, kDirectionC2U), log.c2u2);
    EXPECT_EQ(extractToString(log.dir.path(), 2, kDirectionU2C), "");
    EXPECT_EQ(extractToString(log.dir.path(), 3, kDirectionU2C, &result), "hello");
    EXPECT_EQ(result.state, ConnectionState::Open);
    EXPECT_EQ(extractToString(log.dir.path(), 4, kDirectionC2U, &result), "abc");
    EXPECT_EQ(result.state, ConnectionState::Truncated);
}

TEST(AuditReaderTest, ExtractOfAnUnknownIdOpensNoOutput) {
    SampleLog log;
    bool opened = false;
    auto result = extractConnection(log.dir.path(), 99, kDirectionC2U, [&] {
        opened = true;
        return -1;
    });
    EXPECT_FALSE(result.found);
    EXPECT_FALSE(opened);
}

TEST(AuditReaderTest, ExtractIntoAPipeAndCoalescedRanges) {
    TempDir dir;
    SegmentBuilder segment(dir.path(), 0, 1);
    segment.open(1);
    std::string expected;
    for (int i = 0; i < 200; ++i) {  // adjacent chunks: copied as one range
        auto piece = pattern(static_cast<char>(i), 1000 + static_cast<std::size_t>(i));
        segment.chunk(1, kDirectionU2C, piece);
        expected += piece;
    }
    segment.write();
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    UniqueFd readEnd(fds[0]), writeEnd(fds[1]);
    std::string received;
    // The pipe is drained by a reader thread so sendfile into it can block safely.
    std::thread drain([&] {
        char buffer[65536];
        ssize_t n;
        while ((n = ::read(readEnd.get(), buffer, sizeof buffer)) > 0)
            received.append(buffer, static_cast<std::size_t>(n));
    });
    auto result = extractConnection(dir.path(), 1, kDirectionU2C, [&] { return writeEnd.get(); });
    writeEnd.reset();
    drain.join();
    EXPECT_EQ(result.bytes, expected.size());
    EXPECT_EQ(received, expected);
}

TEST(AuditReaderTest, ExtractFailsNamingTheChunkBeyondTheDataFile) {
    TempDir dir;
    SegmentBuilder segment(dir.path(), 0, 1);
    segment.open(1);
    segment.chunk(1, kDirectionC2U, "abcdef");
    auto bad = segment.chunkAt(1, kDirectionC2U, 100, 6);
    segment.write();
    try {
        extractToString(dir.path(), 1, kDirectionC2U);
        FAIL() << "no exception";
    } catch (const std::runtime_error& error) {
        std::string what = error.what();
        EXPECT_EQ(what.find(segment.indexPath() + ":" + std::to_string(bad) + ": "), 0u) << what;
        EXPECT_NE(what.find("beyond"), std::string::npos) << what;
    }
}

TEST(AuditReaderTest, CopyFileRangeCopiesBigRangesExactly) {
    TempDir dir;
    std::string content = pattern('q', 5 << 20);
    SegmentBuilder::writeFile(dir.path() + "/in", content);
    UniqueFd in(::open((dir.path() + "/in").c_str(), O_RDONLY | O_CLOEXEC));
    UniqueFd out(::open((dir.path() + "/out").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
    copyFileRange(in.get(), 12345, 4 << 20, out.get(), "in");
    copyFileRange(in.get(), 0, 10, out.get(), "in");
    EXPECT_EQ(readFile(dir.path() + "/out"),
              content.substr(12345, 4 << 20) + content.substr(0, 10));
    EXPECT_THROW(copyFileRange(in.get(), content.size() - 5, 10, out.get(), "in"),
                 std::runtime_error);
}

// ---- verify

TEST(AuditReaderTest, VerifyAcceptsAConsistentLog) {
    SampleLog log;
    std::vector<std::string> problems;
    auto summary =
        verifyDirectory(log.dir.path(), [&](const std::string& line) { problems.push_back(line); });
    // Worker 0's current segment is not sealed yet: its records are not in the hash chain, the
    // only thing verify reports (once the writer or recovery seals it, nothing).
    ASSERT_EQ(problems.size(), 1u) << joined(problems);
    EXPECT_NE(problems[0].find("w00-0000000002.index:"), std::string::npos) << problems[0];
    EXPECT_NE(problems[0].find("the segment is not sealed"), std::string::npos) << problems[0];
    EXPECT_EQ(summary.problems, 1u);
    EXPECT_EQ(summary.segments, 3u);
    EXPECT_EQ(summary.connections, 4u);
    EXPECT_EQ(summary.chunkBytes, log.c2u1.size() + log.u2c1.size() + 10 + 5 + 3);
}

// Expects exactly one problem, at FILE:OFFSET, mentioning `what`.
// A segment these tests leave unsealed (as a running daemon's current one) is reported too
// ("the segment is not sealed", AuditIntegrityTest covers it); it is not what they look for.
void expectOneProblem(const std::string& dir, const std::string& file, std::uint64_t offset,
                      const std::string& what) {
    auto problems = verifyDirectory(dir);
    std::erase_if(problems, [](const std::string& line) {
        return line.find("the segment is not sealed") != std::string::npos;
    });
    ASSERT_EQ(problems.size(), 1u) << joined(problems);
    std::string place = file + ":" + std::to_string(offset) + ": ";
    EXPECT_EQ(problems[0].rfind(place, 0), 0u) << problems[0] << "\nwanted " << place;
    EXPECT_NE(problems[0].find(what), std::string::npos) << problems[0] << "\nwanted " << what;
}

TEST(AuditReaderTest, VerifyDetectsABadCrc) {
    TempDir dir;
    SegmentBuilder segment(dir.path(), 0, 1);
    segment.open(1);
    auto bad = segment.chunk(1, kDirectionC2U, "abc");
    segment.index()[bad + 40] ^= 0x01;  // inside the time field
    segment.write();
    expectOneProblem(dir.path(), segment.indexPath(), bad, "bad CRC");
}

TEST(AuditReaderTest, VerifyDetectsOverlappingChunks) {
    TempDir dir;
    SegmentBuilder segment(dir.path(), 0, 1);
    segment.open(1);
    segment.open(2);
    segment.chunk(1, kDirectionC2U, "0123456789");
    auto bad = segment.chunkAt(2, kDirectionU2C, 2, 7);
    segment.close(1, 10, 0);
    segment.close(2, 0, 2);
    segment.write();
    expectOneProblem(dir.path(), segment.indexPath(), bad, "overlaps data bytes 7..9");
}

TEST(AuditReaderTest, VerifyDetectsAChunkPastTheDataEnd) {
    TempDir dir;
    SegmentBuilder segment(dir.path(), 0, 1);
    segment.open(1);
    segment.chunk(1, kDirectionC2U, "0123456789");
    auto bad = segment.chunkAt(1, kDirectionC2U, 5, 10);
    segment.write();
    expectOneProblem(dir.path(), segment.indexPath(), bad, "beyond the end");
}

TEST(AuditReaderTest, VerifyDetectsACloseByteCountMismatch) {
    TempDir dir;
    SegmentBuilder segment(dir.path(), 0, 1);
    segment.open(1);
    segment.chunk(1, kDirectionC2U, "0123456789");
    segment.chunk(1, kDirectionU2C, "ab");
    auto bad = segment.close(1, 10, 3);
    segment.write();
    expectOneProblem(dir.path(), segment.indexPath(), bad, "u2c 3 bytes, but its chunks hold");
}

TEST(AuditReaderTest, VerifyDetectsAChunkBeforeItsOpen) {
    TempDir dir;
    SegmentBuilder segment(dir.path(), 0, 1);
    auto bad = segment.chunk(1, kDirectionC2U, "abc");
    segment.open(1);
    segment.close(1, 3, 0);
    segment.write();
    auto problems = verifyDirectory(dir.path());
    ASSERT_FALSE(problems.empty());
    EXPECT_EQ(problems[0].rfind(segment.indexPath() + ":" + std::to_string(bad) + ": ", 0), 0u)
        << problems[0];
    EXPECT_NE(problems[0].find("without an earlier Open"), std::string::npos) << problems[0];
}

TEST(AuditReaderTest, VerifyDetectsAMissingSegmentStart) {
    TempDir dir;
    SegmentBuilder segment(dir.path(), 0, 1);
    segment.open(1);
    segment.index().erase(0, kSegmentStartRecordSize);
    segment.write();
    expectOneProblem(dir.path(), segment.indexPath(), 0, "not SegmentStart");

    SegmentBuilder::writeFile(segment.indexPath(), "");
    expectOneProblem(dir.path(), segment.indexPath(), 0, "empty index");
}

TEST(AuditReaderTest, VerifyDetectsStructuralProblems) {
    TempDir dir;
    SegmentBuilder segment(dir.path(), 0, 1);
    segment.open(1);
    segment.open(1);  // twice
    segment.close(1, 0, 0);
    segment.truncated(1);  // after Close
    segment.seal();
    segment.open(2);  // after SegmentSealed
    segment.write();
    SegmentBuilder misnamed(dir.path(), 0, 2);
    misnamed.index().clear();
    encodeSegmentStart(misnamed.index(), 0, 7, kT0, 0);
    misnamed.write();
    SegmentBuilder::writeFile(dir.path() + "/w03-0000000001.data", "lonely");
    auto text = joined(verifyDirectory(dir.path()));
    EXPECT_NE(text.find("second Open record for connection 1"), std::string::npos) << text;
    EXPECT_NE(text.find("Truncated record for connection 1 after its Close"), std::string::npos)
        << text;
    EXPECT_NE(text.find("Open record after SegmentSealed"), std::string::npos) << text;
    EXPECT_NE(text.find("SegmentStart names worker 0 segment 7"), std::string::npos) << text;
    EXPECT_NE(text.find("w03-0000000001.data:0: data file without an index"), std::string::npos)
        << text;
}

TEST(AuditReaderTest, VerifySurvivesGarbage) {
    TempDir dir;
    std::mt19937 random(99);
    for (int i = 0; i < 20; ++i) {
        std::string garbage(random() % 5000, '\0');
        for (auto& c : garbage) c = static_cast<char>(random());
        if (i % 3 == 0 && garbage.size() > 4) garbage.replace(0, 4, "SGIX");
        dir.write(segmentBaseName(0, static_cast<std::uint64_t>(i) + 1) + ".index", garbage);
        dir.write(segmentBaseName(0, static_cast<std::uint64_t>(i) + 1) + ".data", garbage);
    }
    auto problems = verifyDirectory(dir.path());
    EXPECT_GE(problems.size(), 20u);
    auto list = listConnections(dir.path());
    EXPECT_FALSE(list.problems.empty());
    EXPECT_THROW(extractToString(dir.path(), 1, kDirectionC2U), std::runtime_error);
}

// DeletedHeads, the rule behind reading a log whose oldest segments retention deleted: only ids
// below the floor of a worker's first remaining segment, only where a segment below it was
// deleted, only that worker.
TEST(DeletedHeadsTest, IdsBelowTheFirstRemainingSegmentsFloorContinue) {
    DeletedHeads heads({{0, 1, 1, {}}, {0, 2, 2, {}}});
    heads.segmentStart(0, 3, 12);
    heads.segmentStart(1, 1, 4);
    EXPECT_TRUE(heads.continues(0, 11));
    EXPECT_FALSE(heads.continues(0, 12));  // handed out after segment 3 began: needs its Open
    EXPECT_FALSE(heads.continues(1, 3));   // worker 1 lost nothing
}

TEST(DeletedHeadsTest, OnlyEachWorkersFirstSegmentCounts) {
    DeletedHeads heads({{0, 1, 1, {}}});
    heads.segmentStart(0, 2, 5);
    heads.segmentStart(0, 3, 20);
    EXPECT_TRUE(heads.continues(0, 4));
    EXPECT_FALSE(heads.continues(0, 15));
}

// An interrupted deletion: the entry for segment 3 was written but segment 3 is still there. Its
// connections still have their Open records in it.
TEST(DeletedHeadsTest, AnAnnouncedSegmentStillThereCutsNothing) {
    DeletedHeads heads({{0, 3, 3, {}}});
    heads.segmentStart(0, 3, 12);
    EXPECT_FALSE(heads.continues(0, 11));
    DeletedHeads none;
    none.segmentStart(0, 3, 12);
    EXPECT_FALSE(none.continues(0, 11));
}

}  // namespace
}  // namespace splicegate::audit
