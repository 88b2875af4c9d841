// DirectSegmentWriter (audit/DirectSegmentWriter.h): the direct writer behind segments and an
// index, on a real io_uring under /var/tmp. What it writes must be a log `verify` accepts and
// `extract` reads back exactly (payload CRCs checked), across segment rolls; a Close record waits
// for its connection's chunks; a full buffer gives no memory and the segment's offsets stay in step
// with the writer's.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "audit/AuditReader.h"
#include "audit/DirectSegmentWriter.h"
#include "audit/Records.h"
#include "common/Ring.h"
#include "tests/support/Daemon.h"

namespace splicegate::audit {
namespace {

// The tag of a completion, and whether it is disk work of the segment store.
CompletionTag tagOf(const io_uring_cqe& cqe) {
    return CompletionTag::decode(cqe.user_data);
}
bool isDiskWork(CompletionTag tag) {
    return tag.opAs<AuditLogOp>() == AuditLogOp::DiskWork;
}

// A private directory on a disk filesystem, removed with everything in it.
class ScratchDir : public test::TempDir {
  public:
    ScratchDir() : TempDir("/var/tmp") {}
};

std::string pattern(std::size_t length, unsigned seed) {
    std::mt19937 random(seed);
    std::string bytes(length, '\0');
    for (auto& byte : bytes) byte = static_cast<char>(random());
    return bytes;
}

DirectLogOptions smallOptions(std::uint64_t segmentBytes) {
    DirectLogOptions options;
    options.bufferBytes = 256 * 1024;
    options.writeBytes = 64 * 1024;
    options.maxWritesInFlight = 2;
    options.preallocateBytes = segmentBytes;
    return options;
}

class DirectSegmentWriterTest : public ::testing::Test {
  protected:
    // Routes completions until a sync ends; its result (bounded: 400 waits of 50 ms).
    std::optional<int> driveSync(DirectSegmentWriter& log) {
        for (int round = 0; round < 400; ++round) {
            ring_.submitAndWait(50);
            std::optional<int> ended;
            ring_.drainCompletions([&](const io_uring_cqe& cqe) {
                EXPECT_EQ(tagOf(cqe).owner, RingOwner::AuditLog);
                if (auto result = log.complete(tagOf(cqe), cqe.res)) ended = result;
            });
            if (ended) return ended;
        }
        return std::nullopt;
    }
    // Routes completions until the log has room again.
    bool driveRoom(DirectSegmentWriter& log) {
        for (int round = 0; round < 400 && log.room() == 0; ++round) {
            ring_.submitAndWait(50);
            ring_.drainCompletions(
                [&](const io_uring_cqe& cqe) { log.complete(tagOf(cqe), cqe.res); });
        }
        return log.room() > 0;
    }
    // Appends `bytes` as chunks of at most `piece` bytes of connection `id`, direction 0.
    void send(DirectSegmentWriter& log, std::uint64_t id, const std::string& bytes,
              std::size_t piece) {
        std::size_t done = 0;
        while (done < bytes.size()) {
            DirectChunk chunk;
            auto want = static_cast<std::uint32_t>(std::min(piece, bytes.size() - done));
            ASSERT_EQ(log.reserve(want, chunk), 0);
            if (chunk.memory.empty()) {
                ASSERT_TRUE(driveRoom(log));
                continue;
            }
            auto size = static_cast<std::uint32_t>(chunk.memory.size());
            std::memcpy(chunk.memory.data(), bytes.data() + done, size);
            ASSERT_EQ(log.recordChunk(chunk, id, 0, size), 0);
            done += size;
        }
    }
    // Routes completions until `done` holds (bounded: 400 waits of 50 ms).
    bool driveUntil(DirectSegmentWriter& log, const std::function<bool()>& done) {
        for (int round = 0; round < 400 && !done(); ++round) {
            ring_.submitAndWait(50);
            ring_.drainCompletions(
                [&](const io_uring_cqe& cqe) { log.complete(tagOf(cqe), cqe.res); });
        }
        return done();
    }
    // One worker's log whose store takes its space ahead and recycles spare data files, as the
    // daemon's does (audit/AuditLogFactory.cpp).
    std::unique_ptr<DirectSegmentWriter> makeLog(std::uint64_t segmentBytes) {
        auto writer = std::make_unique<SegmentStore>(dir_.path(), 0, 1, segmentBytes);
        EXPECT_TRUE(writer->reserveSpaceAhead(true));
        writer->recycleSpareDataFiles();
        return std::make_unique<DirectSegmentWriter>(std::move(writer), ring_, ring_.registration(),
                                                     smallOptions(0));
    }
    // Routes completions until `segment` is created ahead: both files, the data's space (the
    // file's size), then the index's (its blocks; the size stays 0).
    bool createdAhead(DirectSegmentWriter& log, std::uint64_t segment) {
        return driveUntil(log, [&] {
            return sizeIfAny(segmentPath(segment, ".data")) > 0 &&
                   blocksIfAny(segmentPath(segment, ".index")) > 0;
        });
    }
    std::string segmentPath(std::uint64_t segment, const char* suffix) const {
        return dir_.path() + "/" + segmentBaseName(0, segment) + suffix;
    }
    std::uint64_t fileSize(const std::string& path) const {
        struct stat st {};
        EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
        return static_cast<std::uint64_t>(st.st_size);
    }
    // 0 while the file does not exist yet.
    // The file's stat, all zero when it does not exist (yet).
    static struct stat statIfAny(const std::string& path) {
        struct stat st {};
        if (::stat(path.c_str(), &st) != 0) st = {};
        return st;
    }
    static std::uint64_t sizeIfAny(const std::string& path) {
        return static_cast<std::uint64_t>(statIfAny(path).st_size);
    }
    // Space allocated to the file: what an fallocate with FALLOC_FL_KEEP_SIZE (the index's
    // space ahead) changes, where the size does not.
    static std::uint64_t blocksIfAny(const std::string& path) {
        return static_cast<std::uint64_t>(statIfAny(path).st_blocks);
    }
    bool sealed(std::uint64_t segment) const {
        std::string path = segmentPath(segment, ".index");
        UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
        if (!fd) return false;
        IndexReader reader(fd.get(), path);
        Record record;
        while (reader.next(record) == IndexReader::Status::Record)
            if (record.type == RecordType::SegmentSealed) return true;
        return false;
    }
    std::string extract(std::uint64_t id) {
        std::string path = dir_.path() + "/extract.out";
        ::unlink(path.c_str());
        auto result = extractConnection(dir_.path(), id, 0, [&] {
            return ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        });
        EXPECT_TRUE(result.found);
        std::string content;
        UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
        char buffer[65536];
        for (ssize_t got; fd && (got = ::read(fd.get(), buffer, sizeof buffer)) > 0;)
            content.append(buffer, static_cast<std::size_t>(got));
        return content;
    }

    Ring ring_{64, 2, 2};
    ScratchDir dir_;
};

TEST_F(DirectSegmentWriterTest, WhatItWritesVerifiesAndReadsBackAcrossSegmentRolls) {
    constexpr std::uint64_t kSegmentBytes = 300 * 1024;
    {
        DirectSegmentWriter log(std::make_unique<SegmentStore>(dir_.path(), 0, 1, kSegmentBytes),
                                ring_, ring_.registration(), smallOptions(kSegmentBytes));
        EXPECT_TRUE(log.writer().fixedBuffers());
        auto first = pattern(700 * 1024, 1), second = pattern(123457, 2);
        ASSERT_EQ(log.recordOpen(1, "web", "192.0.2.1:1000", "192.0.2.2:80"), 0);
        ASSERT_EQ(log.recordOpen(2, "web", "192.0.2.1:1001", "192.0.2.2:80"), 0);
        send(log, 1, first.substr(0, 100000), 30011);
        send(log, 2, second, 9999);
        send(log, 1, first.substr(100000), 65536);
        ASSERT_EQ(log.recordClose(1, first.size(), 0, "client-closed"), 0);
        ASSERT_EQ(log.recordClose(2, second.size(), 0, "client-closed"), 0);
        auto target = log.nextSyncSequence();
        ASSERT_EQ(log.startSync(), 1);
        auto result = driveSync(log);
        ASSERT_TRUE(result);
        EXPECT_EQ(*result, 0);
        EXPECT_GE(log.durableSequence(), target);
        EXPECT_EQ(extract(1), first);
        EXPECT_EQ(extract(2), second);
        log.syncNow();
    }
    VerifySummary summary;
    std::vector<std::string> problems;
    summary = verifyDirectory(dir_.path(), [&](const std::string& p) { problems.push_back(p); });
    EXPECT_TRUE(problems.empty()) << problems.front();
    EXPECT_GE(summary.segments, 3u) << "the log rolled";
    EXPECT_EQ(summary.uncheckedChunks, 0u) << "every chunk carries its payload CRC";
    EXPECT_EQ(summary.checkedPayloadBytes, 700u * 1024 + 123457);
}

TEST_F(DirectSegmentWriterTest, CloseRecordWaitsForItsChunksToBeDurable) {
    DirectSegmentWriter log(std::make_unique<SegmentStore>(dir_.path(), 0, 1, 1 << 30), ring_,
                            ring_.registration(), smallOptions(0));
    auto bytes = pattern(5000, 3);
    ASSERT_EQ(log.recordOpen(7, "web", "c", "u"), 0);
    send(log, 7, bytes, bytes.size());
    ASSERT_EQ(log.recordClose(7, bytes.size(), 0, "client-closed"), 0);
    ASSERT_EQ(log.flush(), 0);  // the Open record, written on the ring
    auto listed = listConnections(dir_.path());
    ASSERT_TRUE(driveUntil(log, [&] {
        listed = listConnections(dir_.path());
        return listed.connections.size() == 1;
    }));
    // Nothing is durable yet: the index holds the Open record only.
    EXPECT_EQ(listed.connections[0].state, ConnectionState::Open);
    EXPECT_EQ(listed.connections[0].c2uBytes, 0u);

    ASSERT_EQ(log.startSync(), 1);
    ASSERT_EQ(driveSync(log), std::optional<int>(0));
    listed = listConnections(dir_.path());
    EXPECT_EQ(listed.connections[0].state, ConnectionState::Closed);
    EXPECT_EQ(extract(7), bytes);
}

TEST_F(DirectSegmentWriterTest, FullBufferGivesNoMemoryAndTheSegmentOffsetsStayInStep) {
    std::string sent;
    {
        DirectSegmentWriter log(std::make_unique<SegmentStore>(dir_.path(), 0, 1, 1 << 30), ring_,
                                ring_.registration(), smallOptions(0));
        ASSERT_EQ(log.recordOpen(1, "web", "c", "u"), 0);
        // Fill the whole buffer without routing a completion.
        for (unsigned i = 0;; ++i) {
            DirectChunk chunk;
            ASSERT_EQ(log.reserve(50000, chunk), 0);
            if (chunk.memory.empty()) break;
            auto piece = pattern(chunk.memory.size(), 10 + i);
            std::memcpy(chunk.memory.data(), piece.data(), piece.size());
            // Half filled: the rest goes back and the next reservation starts right after.
            auto half = static_cast<std::uint32_t>(piece.size() / 2 + 1);
            ASSERT_EQ(log.recordChunk(chunk, 1, 0, half), 0);
            sent += piece.substr(0, half);
        }
        EXPECT_EQ(log.room(), 0u);
        ASSERT_TRUE(driveRoom(log));
        ASSERT_EQ(log.recordClose(1, sent.size(), 0, "client-closed"), 0);
        ASSERT_EQ(log.startSync(), 1);
        ASSERT_EQ(driveSync(log), std::optional<int>(0));
        EXPECT_EQ(extract(1), sent);
        log.syncNow();
    }
    auto problems = verifyDirectory(dir_.path());
    EXPECT_TRUE(problems.empty()) << problems.front();
}

// The data file's space is taken ahead on the ring (fallocate there, not on the worker): a new
// segment's first chunk waits for its space as for a full buffer (no room meanwhile), and the
// next step arrives by completion before it is needed. At the roll the file is cut to its last
// byte, and the seal (on the ring too) makes the segment verifiable.
TEST_F(DirectSegmentWriterTest, SpaceIsTakenAheadOnTheRingAndTheRollCutsTheFileToItsData) {
    constexpr std::uint64_t kStep = std::uint64_t{64} << 20;
    auto bytes = pattern(100000, 4);
    {
        auto writer = std::make_unique<SegmentStore>(dir_.path(), 0, 1, 4 * kStep);
        ASSERT_TRUE(writer->reserveSpaceAhead(true));
        DirectSegmentWriter log(std::move(writer), ring_, ring_.registration(), smallOptions(0));
        ASSERT_EQ(log.recordOpen(1, "web", "c", "u"), 0);
        send(log, 1, bytes, 30000);
        EXPECT_TRUE(driveUntil(log, [&] { return fileSize(segmentPath(1, ".data")) >= 2 * kStep; }))
            << "the step ahead of the first one is allocated by a completion";
        ASSERT_EQ(log.rotate(), 0);
        DirectChunk first;
        ASSERT_EQ(log.reserve(30000, first), 0);
        EXPECT_TRUE(first.memory.empty()) << "the new segment's space was allocated in place";
        EXPECT_EQ(log.room(), 0u);
        ASSERT_TRUE(driveRoom(log));
        send(log, 1, bytes, 30000);
        ASSERT_EQ(log.recordClose(1, 2 * bytes.size(), 0, "client-closed"), 0);
        EXPECT_TRUE(driveUntil(log, [&] { return sealed(1); }));
        EXPECT_EQ(fileSize(segmentPath(1, ".data")), bytes.size());
        log.finishFile();
    }
    EXPECT_EQ(fileSize(segmentPath(2, ".data")), bytes.size());
    auto problems = verifyDirectory(dir_.path());
    EXPECT_TRUE(problems.empty()) << problems.front();
    EXPECT_EQ(extract(1), bytes + bytes);
}

// Once the current segment is half full, the next one's files are created on the ring and its
// first step of space taken there: the roll opens and allocates nothing on the worker, and the
// new segment's first chunk finds its space (contrast the test above, where a roll with nothing
// created ahead waits for it). The segment created ahead and never used is gone at shutdown.
TEST_F(DirectSegmentWriterTest, TheNextSegmentIsCreatedAheadSoTheRollWaitsForNothing) {
    constexpr std::uint64_t kSegmentBytes = 256 * 1024;
    auto bytes = pattern(2 * kSegmentBytes + 150000, 5);
    {
        auto owned = makeLog(kSegmentBytes);
        DirectSegmentWriter& log = *owned;
        ASSERT_EQ(log.recordOpen(1, "web", "c", "u"), 0);
        send(log, 1, bytes.substr(0, kSegmentBytes / 2 + 1000), 30000);
        EXPECT_TRUE(createdAhead(log, 2))
            << "segment 2 is created, and its data and index space taken, on the ring";
        EXPECT_EQ(fileSize(segmentPath(2, ".data")), kSegmentBytes);
        EXPECT_EQ(fileSize(segmentPath(2, ".index")), 0u) << "its SegmentStart waits for the roll";
        send(log, 1, bytes.substr(kSegmentBytes / 2 + 1000, kSegmentBytes / 2 - 1000), 30000);
        ASSERT_TRUE(driveUntil(log, [&] { return log.room() >= 30000; }));
        DirectChunk first;
        ASSERT_EQ(log.reserve(30000, first), 0);
        ASSERT_EQ(first.memory.size(), 30000u) << "the roll found segment 2 ready";
        std::memcpy(first.memory.data(), bytes.data() + kSegmentBytes, 30000);
        ASSERT_EQ(log.recordChunk(first, 1, 0, 30000), 0);
        send(log, 1, bytes.substr(kSegmentBytes + 30000), 30000);  // into segment 3
        ASSERT_EQ(log.recordClose(1, bytes.size(), 0, "client-closed"), 0);
        EXPECT_TRUE(driveUntil(log, [&] { return sizeIfAny(segmentPath(4, ".data")) > 0; }))
            << "segment 3 is half full: segment 4 is created ahead";
        log.finishFile();
    }
    std::vector<std::string> left;
    for (const auto& entry : std::filesystem::directory_iterator(dir_.path()))
        left.push_back(entry.path().filename().string());
    std::sort(left.begin(), left.end());
    std::vector<std::string> expected;
    for (std::uint64_t segment : {1, 2, 3})
        for (const char* suffix : {".data", ".index"})
            expected.push_back(segmentBaseName(0, segment) + suffix);
    EXPECT_EQ(left, expected) << "segment 4, created ahead and never used, is gone";
    auto problems = verifyDirectory(dir_.path());
    EXPECT_TRUE(problems.empty()) << problems.front();
    EXPECT_EQ(extract(1), bytes);
}

// Retention leaves a deleted segment's data file as one of the worker's spares; the next segment
// created ahead takes it (renamed, the same inode) instead of a new file. The spare's stale bytes
// past what the segment writes are cut at its seal, and until then the file is 0600: no byte of
// a deleted segment is readable by the audit group. Everything reads back exactly. With every
// slot empty the creation after it makes a new file.
TEST_F(DirectSegmentWriterTest, TheNextSegmentTakesTheSpareDataFileAndItsStaleBytesAreCut) {
    constexpr std::uint64_t kSegmentBytes = 256 * 1024;
    // In the second slot: the first creation finds the first empty and tries again.
    const std::string spare = dir_.path() + "/" + spareDataName(0, 1);
    {
        UniqueFd fd(::open(spare.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
        ASSERT_TRUE(fd);
        std::string stale(3 * kSegmentBytes, '\xee');  // longer than a segment: the cut shows
        ASSERT_EQ(::write(fd.get(), stale.data(), stale.size()),
                  static_cast<ssize_t>(stale.size()));
    }
    const auto spareInode = statIfAny(spare).st_ino;
    auto bytes = pattern(2 * kSegmentBytes + 150000, 11);
    {
        auto owned = makeLog(kSegmentBytes);
        DirectSegmentWriter& log = *owned;
        ASSERT_EQ(log.recordOpen(1, "web", "c", "u"), 0);
        send(log, 1, bytes.substr(0, kSegmentBytes / 2 + 1000), 30000);
        EXPECT_TRUE(createdAhead(log, 2)) << "segment 2 is created ahead";
        auto second = statIfAny(segmentPath(2, ".data"));
        EXPECT_EQ(second.st_ino, spareInode) << "segment 2's data file is the spare";
        EXPECT_EQ(second.st_mode & 07777, 0600u)
            << "not the audit group's while it holds a deleted segment's bytes";
        EXPECT_FALSE(std::filesystem::exists(spare));
        EXPECT_EQ(second.st_size, static_cast<off_t>(3 * kSegmentBytes)) << "kept until the cut";
        send(log, 1, bytes.substr(kSegmentBytes / 2 + 1000), 30000);  // into segment 3
        ASSERT_EQ(log.recordClose(1, bytes.size(), 0, "client-closed"), 0);
        // The seal's last step (the index's sync) ends before the cut: wait for both.
        EXPECT_TRUE(driveUntil(log, [&] {
            return sealed(2) && (statIfAny(segmentPath(2, ".data")).st_mode & 07777) == 0640;
        }));
        auto sealedSpare = statIfAny(segmentPath(2, ".data"));
        EXPECT_EQ(sealedSpare.st_mode & 07777, 0640u) << "cut at its seal: a segment's mode again";
        EXPECT_LE(sealedSpare.st_size, static_cast<off_t>(kSegmentBytes + 30000));
        auto third = statIfAny(segmentPath(3, ".data"));
        EXPECT_NE(third.st_ino, 0u) << "no spare left: segment 3 is a new file";
        EXPECT_NE(third.st_ino, spareInode);
        log.finishFile();
    }
    EXPECT_LE(fileSize(segmentPath(2, ".data")), kSegmentBytes + 30000)
        << "the spare's stale bytes past segment 2's data are cut";
    auto problems = verifyDirectory(dir_.path());
    EXPECT_TRUE(problems.empty()) << problems.front();
    EXPECT_EQ(extract(1), bytes);
}

// A roll that comes while the creation is still on the ring (here before it is even submitted)
// opens the same names in place; the ring's O_EXCL opens then fail, and that is neither an error
// nor a reason to unlink the files the roll is using. The next segment is created ahead again.
TEST_F(DirectSegmentWriterTest, ARollBeforeTheCreationAheadIsInUsesTheSameFiles) {
    constexpr std::uint64_t kSegmentBytes = 256 * 1024;
    auto bytes = pattern(kSegmentBytes + 40000, 6);
    {
        auto writer = std::make_unique<SegmentStore>(dir_.path(), 0, 1, kSegmentBytes);
        ASSERT_TRUE(writer->reserveSpaceAhead(true));
        DirectSegmentWriter log(std::move(writer), ring_, ring_.registration(), smallOptions(0));
        ASSERT_EQ(log.recordOpen(1, "web", "c", "u"), 0);
        send(log, 1, bytes.substr(0, kSegmentBytes / 2 + 1000), 30000);  // queues the creation
        ASSERT_EQ(log.rotate(), 0);
        send(log, 1, bytes.substr(kSegmentBytes / 2 + 1000), 30000);
        EXPECT_TRUE(driveUntil(log, [&] { return sizeIfAny(segmentPath(3, ".data")) > 0; }))
            << "segment 3 is created ahead as usual";
        ASSERT_EQ(log.recordClose(1, bytes.size(), 0, "client-closed"), 0);
        log.finishFile();
    }
    EXPECT_TRUE(std::filesystem::exists(segmentPath(2, ".index")));
    EXPECT_FALSE(std::filesystem::exists(segmentPath(3, ".index")));
    auto problems = verifyDirectory(dir_.path());
    EXPECT_TRUE(problems.empty()) << problems.front();
    EXPECT_EQ(extract(1), bytes);
}

// The same race, with the roll's own open failing (here: no file descriptor left). The names the
// ring then makes are this writer's: the next roll opens them as they are, where an O_EXCL open
// would find them taken for good.
TEST_F(DirectSegmentWriterTest, ARollThatFailsDuringTheCreationAheadLeavesItsNamesToTheNextRoll) {
    constexpr std::uint64_t kSegmentBytes = 256 * 1024;
    auto bytes = pattern(kSegmentBytes / 2 + 1000, 7);
    {
        auto writer = std::make_unique<SegmentStore>(dir_.path(), 0, 1, kSegmentBytes);
        ASSERT_TRUE(writer->reserveSpaceAhead(true));
        DirectSegmentWriter log(std::move(writer), ring_, ring_.registration(), smallOptions(0));
        ASSERT_EQ(log.recordOpen(1, "web", "c", "u"), 0);
        send(log, 1, bytes, 30000);  // queues the creation of segment 2
        rlimit saved{};
        ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
        rlimit none = saved;
        none.rlim_cur = 3;  // below every fd this process holds
        ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &none), 0);
        int failed = log.rotate();
        ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
        EXPECT_EQ(failed, -EMFILE);
        EXPECT_TRUE(driveUntil(log, [&] {
            return sizeIfAny(segmentPath(2, ".index")) == 0 &&
                   std::filesystem::exists(segmentPath(2, ".index"));
        }));
        ASSERT_EQ(log.rotate(), 0) << "the next roll opens segment 2's names as they are";
        send(log, 1, bytes, 30000);
        ASSERT_EQ(log.recordClose(1, 2 * bytes.size(), 0, "client-closed"), 0);
        log.finishFile();
    }
    auto problems = verifyDirectory(dir_.path());
    EXPECT_TRUE(problems.empty()) << problems.front();
    EXPECT_EQ(extract(1), bytes + bytes);
}

// A sync that books chunks into a segment that has rolled ends only once that segment's seal,
// which carries their index records, is durable: strict mode forwards those chunks then. The
// seal's completions are handed to the log after the group commit's own (the kernel may end
// them in either order).
TEST_F(DirectSegmentWriterTest, ASyncEndsAfterTheSealOfTheRolledSegmentItBookedInto) {
    constexpr std::uint64_t kSegmentBytes = 300 * 1024;
    const auto kSealEnd =
        auditLogTag(AuditLogOp::DiskWork, static_cast<std::uint32_t>(DiskStep::SealIndexSync));
    DirectSegmentWriter log(std::make_unique<SegmentStore>(dir_.path(), 0, 1, kSegmentBytes), ring_,
                            ring_.registration(), smallOptions(kSegmentBytes));
    ASSERT_EQ(log.recordOpen(1, "web", "c", "u"), 0);
    auto bytes = pattern(400 * 1024, 5);
    send(log, 1, bytes, 50000);  // rolls once, the first segment's chunks not yet durable
    EXPECT_FALSE(sealed(1));
    ASSERT_EQ(log.startSync(), 1);
    std::vector<io_uring_cqe> held;
    bool groupCommitIn = false, sealEnded = false;
    std::optional<int> ended;
    auto deliver = [&](const io_uring_cqe& cqe) {
        auto tag = tagOf(cqe);
        if (tag == kSealEnd) sealEnded = true;
        if (auto result = log.complete(tag, cqe.res)) {
            ended = result;
            EXPECT_TRUE(sealEnded) << "the sync ended before the seal holding its records";
        }
    };
    for (int round = 0; round < 400 && !ended; ++round) {
        ring_.submitAndWait(50);
        ring_.drainCompletions([&](const io_uring_cqe& cqe) {
            auto tag = tagOf(cqe);
            if (isDiskWork(tag) && !groupCommitIn) return held.push_back(cqe);
            deliver(cqe);
            if (tag != auditLogTag(AuditLogOp::IndexSync)) return;
            groupCommitIn = true;
            for (const auto& later : held) deliver(later);
        });
    }
    EXPECT_TRUE(sealEnded) << "the first segment was sealed on the ring";
    EXPECT_EQ(ended, std::optional<int>(0));
    EXPECT_TRUE(sealed(1));
    EXPECT_FALSE(sealed(2));
    log.syncNow();
}

// Durability none never syncs: a flush books the chunks whose data is written (the tail written
// out, padded, for it), so the index keeps up while the daemon runs and nothing piles up in
// memory waiting for a roll.
TEST_F(DirectSegmentWriterTest, WithoutSyncsAFlushBooksTheChunksWhoseDataIsWritten) {
    DirectSegmentWriter log(std::make_unique<SegmentStore>(dir_.path(), 0, 1, 1 << 30), ring_,
                            ring_.registration(), smallOptions(0));
    auto bytes = pattern(70000, 7);
    ASSERT_EQ(log.recordOpen(4, "web", "c", "u"), 0);
    send(log, 4, bytes, 30000);
    ASSERT_EQ(log.recordClose(4, bytes.size(), 0, "client-closed"), 0);
    ListResult listed;
    EXPECT_TRUE(driveUntil(log, [&] {
        log.flush();  // as the timer does, once per interval
        listed = listConnections(dir_.path());
        return listed.connections.size() == 1 &&
               listed.connections[0].state == ConnectionState::Closed;
    })) << "the Close record never reached the index without a sync";
    EXPECT_EQ(listed.connections[0].c2uBytes, bytes.size());
    EXPECT_EQ(log.durableSequence(), 0u) << "no sync ran";
    EXPECT_EQ(extract(4), bytes);
    log.syncNow();
}

// A flush writes the index records on the ring; a group commit that starts meanwhile syncs the
// index only once that write is in (else its fdatasync could miss records it counts durable).
TEST_F(DirectSegmentWriterTest, ASyncWaitsForTheFlushWriteBeforeItSyncsTheIndex) {
    DirectSegmentWriter log(std::make_unique<SegmentStore>(dir_.path(), 0, 1, 1 << 30), ring_,
                            ring_.registration(), smallOptions(0));
    auto bytes = pattern(20000, 6);
    ASSERT_EQ(log.recordOpen(3, "web", "c", "u"), 0);
    ASSERT_EQ(log.flush(), 0);
    send(log, 3, bytes, bytes.size());
    ASSERT_EQ(log.startSync(), 1);
    bool flushHeld = false;
    int flushResult = 0;  // of the flush's write, held back
    bool indexSyncedBeforeFlush = false;
    std::optional<int> ended;
    for (int round = 0; round < 400 && !ended; ++round) {
        ring_.submitAndWait(50);
        ring_.drainCompletions([&](const io_uring_cqe& cqe) {
            auto tag = tagOf(cqe);
            if (tag == auditLogTag(AuditLogOp::IndexFlush)) {
                flushHeld = true;
                flushResult = cqe.res;
                return;
            }
            if (tag == auditLogTag(AuditLogOp::IndexSync) && flushHeld)
                indexSyncedBeforeFlush = true;
            if (auto result = log.complete(tag, cqe.res)) ended = result;
        });
        // Handed back late: after 10 rounds (500 ms at most) of everything else.
        if (flushHeld && round == 10) {
            ASSERT_FALSE(log.complete(auditLogTag(AuditLogOp::IndexFlush), flushResult));
            flushHeld = false;
        }
    }
    EXPECT_FALSE(indexSyncedBeforeFlush);
    ASSERT_EQ(ended, std::optional<int>(0));
    ASSERT_EQ(log.recordClose(3, bytes.size(), 0, "client-closed"), 0);
    log.syncNow();
    EXPECT_EQ(extract(3), bytes);
}

// A seal is one chain: nothing of the index is written before the data is durable, and the
// seal ends (SealIndexSync) only after its write ran, since that write reads a buffer the seal's
// end gives back. liburing's prep helpers reset an SQE's flags, so the links are checked on the
// SQEs as queued, then by the order of the completions.
TEST_F(DirectSegmentWriterTest, ASealIsOneLinkedChainInStepOrder) {
    auto segment = std::make_shared<Segment>();
    auto path = dir_.path() + "/chain";
    segment->data.reset(::open((path + ".data").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    segment->index.reset(::open((path + ".index").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    ASSERT_TRUE(segment->data && segment->index);
    segment->indexHandedOff = "records";
    DiskWork work{DiskWork::Kind::Seal, segment};
    work.fd = ::open(dir_.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    UniqueFd directory(work.fd);
    work.from = 0;
    work.to = 4096;
    io_uring& raw = *ring_.raw();
    unsigned queuedBefore = raw.sq.sqe_tail - raw.sq.sqe_head;
    queueDiskWork(ring_, work, auditLogTag(AuditLogOp::DiskWork));
    const std::vector<std::pair<DiskStep, unsigned>> expected = {
        {DiskStep::SealPunch, IOSQE_IO_HARDLINK},
        {DiskStep::SealDirectorySync, IOSQE_IO_LINK},
        {DiskStep::SealDataSync, IOSQE_IO_LINK},
        {DiskStep::SealWrite, IOSQE_IO_LINK},
        {DiskStep::SealIndexSync, 0},
    };
    ASSERT_EQ(raw.sq.sqe_tail - raw.sq.sqe_head - queuedBefore, expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i) {
        const io_uring_sqe& sqe =
            raw.sq.sqes[(raw.sq.sqe_head + queuedBefore + i) & raw.sq.ring_mask];
        EXPECT_EQ(sqe.user_data,
                  auditLogTag(AuditLogOp::DiskWork, static_cast<std::uint32_t>(expected[i].first))
                      .encode())
            << "step " << i;
        EXPECT_EQ(sqe.flags & (IOSQE_IO_LINK | IOSQE_IO_HARDLINK), expected[i].second)
            << "step " << i;
    }
    std::vector<std::uint64_t> order;
    for (int round = 0; round < 100 && order.size() < expected.size(); ++round) {
        ring_.submitAndWait(100);
        ring_.drainCompletions([&](const io_uring_cqe& cqe) {
            EXPECT_GE(cqe.res, 0) << "step " << tagOf(cqe).slot;
            order.push_back(tagOf(cqe).slot);
        });
    }
    ASSERT_EQ(order.size(), expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i)
        EXPECT_EQ(order[i], static_cast<std::uint64_t>(expected[i].first)) << "completion " << i;
    struct stat st {};
    ASSERT_EQ(::fstat(segment->index.get(), &st), 0);
    EXPECT_EQ(static_cast<std::size_t>(st.st_size), segment->indexHandedOff.size());
}

}  // namespace
}  // namespace splicegate::audit
