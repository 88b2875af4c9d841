// SegmentStore (audit/SegmentStore.h) without a ring: payload written with pwrite where the worker
// would splice, group commits begun and ended by hand. Covers the segment roll while a group
// commit is queued (the fds it names must stay open until it ends), a failed sync on a segment
// that already rolled, a directory that verifies after each, and the connection id floor each
// segment's SegmentStart takes from the daemon's counter.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "audit/AuditReader.h"
#include "audit/Records.h"
#include "audit/SegmentStore.h"
#include "tests/support/Daemon.h"

namespace splicegate::audit {
namespace {

using test::TempDir;

constexpr std::uint32_t kChunk = 4096;
constexpr std::uint64_t kSegmentBytes = 3 * kChunk;

// Reserves and writes one chunk of connection 1, as the worker does after its splice.
void writeChunk(SegmentStore& writer, char fill) {
    Reservation slot;
    ASSERT_EQ(writer.reserve(kChunk, slot), 0);
    const std::string payload(kChunk, fill);
    ASSERT_EQ(::pwrite(slot.segment->data.get(), payload.data(), payload.size(),
                       static_cast<off_t>(slot.offset)),
              static_cast<ssize_t>(kChunk));
    ASSERT_EQ(writer.recordChunk(slot, 1, 0, kChunk, wallClockNs()), 0);
}

// A writer on `dir` with connection 1 open and one chunk of 'a' recorded, no sync begun.
std::unique_ptr<SegmentStore> writerWithOneChunk(const TempDir& dir) {
    auto writer = std::make_unique<SegmentStore>(dir.path(), 0, 1, kSegmentBytes);
    EXPECT_EQ(writer->recordOpen(1, wallClockNs(), "default", "127.0.0.1:1", "127.0.0.1:2"), 0);
    writeChunk(*writer, 'a');
    return writer;
}

TEST(SegmentStoreTest, SegmentRolledDuringASyncKeepsItsFilesUntilTheSyncEnds) {
    TempDir dir;
    auto writer = writerWithOneChunk(dir);
    std::shared_ptr<Segment> syncing = writer->beginSync();
    ASSERT_TRUE(syncing);
    for (char fill : {'b', 'c', 'd'}) writeChunk(*writer, fill);  // the third one rolls
    ASSERT_TRUE(syncing->retired);
    EXPECT_TRUE(syncing->data.valid()) << "the queued fdatasync would fail with EBADF";
    EXPECT_TRUE(syncing->index.valid());
    EXPECT_EQ(::fdatasync(syncing->data.get()), 0);
    ASSERT_EQ(writer->writeHandedOffIndex(*syncing), 0);

    writer->endSync(syncing, 0);
    EXPECT_FALSE(syncing->data.valid()) << "sealed once the sync ended";
    EXPECT_EQ(writer->failedSyncs(), 0u);
    EXPECT_EQ(writer->durableSequence(), 1u);
    ASSERT_EQ(writer->recordClose(1, wallClockNs(), 4 * kChunk, 0, "closed"), 0);
    writer.reset();  // seals the current segment, as the worker's shutdown does
    auto problems = verifyDirectory(dir.path());
    EXPECT_TRUE(problems.empty()) << problems.front();
}

// The worker writes a sync's index records on its ring while it goes on recording: records
// encoded meanwhile wait for that write (a flush writes nothing past the handed-off records, so
// the index never has a hole) and land after them.
TEST(SegmentStoreTest, RecordsEncodedDuringASyncWaitForItsIndexWrite) {
    TempDir dir;
    auto writer = writerWithOneChunk(dir);
    std::shared_ptr<Segment> syncing = writer->beginSync();
    ASSERT_TRUE(syncing);
    ASSERT_FALSE(syncing->indexHandedOff.empty());
    EXPECT_TRUE(syncing->pendingRecords.empty()) << "the sync took every record so far";
    writeChunk(*writer, 'b');
    ASSERT_EQ(writer->flush(), 0);
    struct stat st {};
    ASSERT_EQ(::fstat(syncing->index.get(), &st), 0);
    EXPECT_EQ(static_cast<std::uint64_t>(st.st_size), syncing->indexHandedOffAt)
        << "a record was written past the sync's, which are not in the file yet";
    ASSERT_EQ(writer->writeHandedOffIndex(*syncing), 0);
    writer->endSync(syncing, 0);
    EXPECT_TRUE(syncing->indexHandedOff.empty());
    ASSERT_EQ(writer->flush(), 0);  // now 'b' goes
    ASSERT_EQ(writer->recordClose(1, wallClockNs(), 2 * kChunk, 0, "closed"), 0);
    writer.reset();
    auto problems = verifyDirectory(dir.path());
    EXPECT_TRUE(problems.empty()) << problems.front();
    const std::string out = dir.path() + "/c2u.out";
    auto extracted = extractConnection(dir.path(), 1, 0, [&] {
        return ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    });
    EXPECT_EQ(extracted.chunks, 2u);
    std::ifstream in(out, std::ios::binary);
    const std::string stream{std::istreambuf_iterator<char>(in), {}};
    EXPECT_EQ(stream, std::string(kChunk, 'a') + std::string(kChunk, 'b'));
}

// A worker that stops while a group commit is queued destroys its ring before the linked index
// write may have run: the writer's destructor writes those records itself before sealing.
TEST(SegmentStoreTest, ASyncThatNeverEndedStillLeavesItsIndexRecordsBehind) {
    TempDir dir;
    auto writer = writerWithOneChunk(dir);
    ASSERT_TRUE(writer->beginSync());
    writeChunk(*writer, 'b');
    writer.reset();
    auto problems = verifyDirectory(dir.path());
    EXPECT_TRUE(problems.empty()) << problems.front();
    auto listed = listConnections(dir.path());
    ASSERT_EQ(listed.connections.size(), 1u);
    EXPECT_EQ(listed.connections[0].c2uBytes, 2 * kChunk);
}

TEST(SegmentStoreTest, FailedSyncOfARolledSegmentSealsItAsFailed) {
    TempDir dir;
    SegmentStore writer(dir.path(), 0, 1, kSegmentBytes);
    ASSERT_EQ(writer.recordOpen(1, wallClockNs(), "default", "127.0.0.1:1", "127.0.0.1:2"), 0);
    writeChunk(writer, 'a');
    std::shared_ptr<Segment> syncing = writer.beginSync();
    ASSERT_TRUE(syncing);
    for (char fill : {'b', 'c', 'd'}) writeChunk(writer, fill);
    writer.endSync(syncing, -EIO);
    EXPECT_TRUE(syncing->failed);
    EXPECT_FALSE(syncing->data.valid());
    EXPECT_EQ(writer.failedSyncs(), 1u);
    EXPECT_EQ(writer.durableSequence(), 0u) << "a failed sync makes nothing durable";
}

struct stat statOf(const std::string& path) {
    struct stat st {};
    EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
    return st;
}

// With space taken ahead, a reservation's data and index space exist before anything is accepted
// into it, and a reservation whose space cannot be had is refused at once, leaving the rest.
TEST(SegmentStoreTest, SpaceTakenAheadCoversAReservationOrRefusesItAtOnce) {
    TempDir dir;
    constexpr std::uint64_t kMiB = 1 << 20;
    SegmentStore writer(dir.path(), 0, 1, 256 * kMiB);
    ASSERT_TRUE(writer.reserveSpaceAhead(true)) << "this filesystem has no fallocate";
    ASSERT_EQ(writer.recordOpen(1, wallClockNs(), "default", "127.0.0.1:1", "127.0.0.1:2"), 0);
    Reservation first;
    ASSERT_EQ(writer.reserve(kChunk, first), 0);
    const std::string base = dir.path() + "/" + segmentBaseName(0, 1);
    auto data = statOf(base + ".data");
    EXPECT_GE(static_cast<std::uint64_t>(data.st_size), 64 * kMiB) << "taken ahead, size set";
    EXPECT_GE(static_cast<std::uint64_t>(data.st_blocks) * 512, 64 * kMiB);
    auto index = statOf(base + ".index");
    EXPECT_GT(static_cast<std::uint64_t>(index.st_blocks) * 512,
              static_cast<std::uint64_t>(index.st_size))
        << "index space past its end, its size unchanged";

    // A file size limit makes the next step's fallocate fail (EFBIG), as a full disk would.
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    struct sigaction previous {};
    ASSERT_EQ(::sigaction(SIGXFSZ, &ignore, &previous), 0);
    rlimit saved{};
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
    rlimit limited = saved;
    limited.rlim_cur = static_cast<rlim_t>(data.st_size);
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limited), 0);
    Reservation beyond;
    int refused = writer.reserve(static_cast<std::uint32_t>(data.st_size), beyond);
    Reservation within;
    int accepted = writer.reserve(kChunk, within);
    ::setrlimit(RLIMIT_FSIZE, &saved);
    ::sigaction(SIGXFSZ, &previous, nullptr);
    EXPECT_EQ(refused, -EFBIG);
    EXPECT_FALSE(beyond.segment) << "a refused reservation holds nothing";
    ASSERT_EQ(accepted, 0) << "space already taken still serves";
    EXPECT_EQ(within.offset, first.offset + kChunk) << "the refused one left no gap";
    writer.abandon(first);
    writer.abandon(within);
}

// The SegmentStart record of segment `number` of worker 0.
Record segmentStart(const std::string& dir, std::uint64_t number) {
    IndexReader reader(dir + "/" + segmentBaseName(0, number) + ".index");
    Record record;
    EXPECT_EQ(reader.next(record), IndexReader::Status::Record);
    EXPECT_EQ(record.type, RecordType::SegmentStart);
    return record;
}

TEST(SegmentStoreTest, EverySegmentTakesTheIdFloorFromTheCounter) {
    TempDir dir;
    std::atomic<std::uint64_t> nextConnectionId{500};
    {
        SegmentStore writer(dir.path(), 0, 1, kSegmentBytes, &nextConnectionId);
        nextConnectionId = 731;
        ASSERT_EQ(writer.rotate(), 0);
        nextConnectionId = 9000;
        for (char fill : {'a', 'b', 'c', 'd'}) writeChunk(writer, fill);  // the fourth one rolls
    }
    std::vector<std::uint64_t> floors;
    for (std::uint64_t number : {1u, 2u, 3u}) {
        auto start = segmentStart(dir.path(), number);
        EXPECT_EQ(start.version, kFormatVersion);
        floors.push_back(start.idFloor);
    }
    EXPECT_EQ(floors, (std::vector<std::uint64_t>{500, 731, 9000}));
}

TEST(SegmentStoreTest, WithoutACounterTheIdFloorIsZero) {
    TempDir dir;
    { SegmentStore writer(dir.path(), 0, 1, kSegmentBytes); }
    EXPECT_EQ(segmentStart(dir.path(), 1).idFloor, 0u);
}

}  // namespace
}  // namespace splicegate::audit
