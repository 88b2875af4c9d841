// The direct writer's adapter (audit/DirectAuditLog.h) driven through a scripted ring: the SQEs a
// group commit prepares (data writes at their offsets, the data fdatasync once every write is
// in, then the index records' write and fdatasync), completions delivered in an order of the
// test's choosing, and what short writes, a full disk and I/O errors make of the sync's result,
// the chunks lost and the durable sequence. The segment files are real (the store opens them);
// nothing is ever written to them, since the fake ring runs nothing.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "audit/AuditLogOps.h"
#include "audit/DirectAuditLog.h"
#include "audit/SegmentStore.h"
#include "datapath/AuditTap.h"
#include "tests/support/Daemon.h"
#include "tests/support/FakeRing.h"

namespace splicegate {
namespace {

using audit::AuditLogOp;
using audit::auditLogTag;
using test::FakeRing;
using test::PreparedOp;

// Four buffers of 16 KiB. Chunk sizes are whole blocks, so a write's offset and length are the
// same whether the filesystem takes O_DIRECT (block-aligned writes) or not (exact ones).
constexpr std::size_t kBuffer = 16384;
constexpr std::size_t kBlock = 4096;
constexpr std::uint64_t kSegmentBytes = 1 << 20;

const CompletionTag kTapTag = CompletionTag::of(RingOwner::AuditTap, AuditTapOp::GroupCommit);

bool isWrite(const PreparedOp& op) {
    return op.op == RingOp::Write || op.op == RingOp::WriteFixed;
}

class DirectAuditLogTest : public ::testing::Test {
  protected:
    void SetUp() override {
        audit::DirectLogOptions options;
        options.bufferBytes = 4 * kBuffer;
        options.writeBytes = kBuffer;
        options.label = "audit test";
        log_ = std::make_unique<DirectAuditLog>(
            std::make_unique<audit::SegmentStore>(dir_.path(), 0, 1, kSegmentBytes), ring_,
            registration_, options);
        ring_.clearRecord();
    }

    // A chunk as the buffer lane records one: reserved, its bytes copied in, recorded.
    void record(std::uint64_t connection, std::size_t length, char fill) {
        AuditSlot slot;
        ASSERT_EQ(log_->reserve(static_cast<std::uint32_t>(length), slot), 0);
        ASSERT_EQ(slot.destination.memory.size(), length) << "the buffer had room for it all";
        std::memset(slot.destination.memory.data(), fill, length);
        ASSERT_EQ(log_->recordChunk(slot, connection, 0, static_cast<std::uint32_t>(length), false),
                  0);
    }

    // Delivers `result` for the pending operation carrying `tag`; the sync's result if it ended.
    std::optional<int> deliver(CompletionTag tag, int result) {
        EXPECT_TRUE(ring_.complete(tag, result))
            << "nothing pending carries op " << int(tag.op) << " slot " << tag.slot;
        std::optional<int> ended;
        ring_.drainCompletions([&](const io_uring_cqe& cqe) {
            auto done = log_->syncCompleted(CompletionTag::decode(cqe.user_data), cqe.res);
            if (done) ended = done;
        });
        return ended;
    }

    // Completes whatever is pending, oldest first, with success (a write: all of it), until
    // nothing is; the result of the sync that ended meanwhile, if one did.
    std::optional<int> finishAll() {
        std::optional<int> ended;
        for (int round = 0; round < 50; ++round) {
            auto pending = ring_.pending();
            if (pending.empty()) break;
            for (const auto& op : pending) {
                EXPECT_NE(op.op, RingOp::Openat2) << "no segment is created ahead in these tests";
                int result = isWrite(op) ? static_cast<int>(op.length) : 0;
                if (auto done = deliver(op.tag, result)) ended = done;
            }
        }
        EXPECT_TRUE(ring_.pending().empty());
        return ended;
    }

    // The operations prepared since the last look, forgotten for the next.
    std::vector<PreparedOp> takePrepared() {
        auto prepared = ring_.preparedSinceClear();
        ring_.clearRecord();
        return prepared;
    }

    test::TempDir dir_;
    FakeRing ring_;
    test::FakeRegistration registration_;
    std::unique_ptr<DirectAuditLog> log_;
};

TEST_F(DirectAuditLogTest, ACommitWritesEachBufferAtItsOffsetThenSyncsDataThenIndex) {
    ASSERT_EQ(log_->recordOpen(1, "web", "client", "upstream", "", ""), 0);
    record(1, kBuffer, 'a');  // fills buffer 0: written at once
    auto prepared = takePrepared();
    ASSERT_EQ(prepared.size(), 1u);
    const PreparedOp first = prepared[0];
    EXPECT_EQ(first.op, RingOp::WriteFixed) << "from the registered log buffer";
    EXPECT_EQ(registration_.registeredBuffers(), 4u);
    EXPECT_EQ(first.offset, 0u);
    EXPECT_EQ(first.length, kBuffer);
    EXPECT_EQ(first.tag, auditLogTag(AuditLogOp::DataWrite, 0));
    const int dataFd = first.fd;

    record(1, 2 * kBlock, 'b');  // buffer 1, partly: waits for a commit
    EXPECT_TRUE(takePrepared().empty());
    const auto target = log_->nextSyncSequence();
    ASSERT_EQ(log_->startSync(kTapTag), 1);
    prepared = takePrepared();
    ASSERT_EQ(prepared.size(), 1u) << "the commit writes the partial buffer, and nothing more yet";
    const PreparedOp second = prepared[0];
    EXPECT_TRUE(isWrite(second));
    EXPECT_EQ(second.fd, dataFd);
    EXPECT_EQ(second.offset, kBuffer);
    EXPECT_EQ(second.length, 2 * kBlock);
    EXPECT_EQ(second.tag, auditLogTag(AuditLogOp::DataWrite, 1));

    // The later write ends first: no fdatasync while an earlier byte is still out.
    EXPECT_FALSE(deliver(second.tag, static_cast<int>(second.length)));
    EXPECT_TRUE(takePrepared().empty());
    EXPECT_FALSE(deliver(first.tag, static_cast<int>(first.length)));
    prepared = takePrepared();
    ASSERT_EQ(prepared.size(), 1u);
    const PreparedOp dataSync = prepared[0];
    EXPECT_EQ(dataSync.op, RingOp::Fsync);
    EXPECT_EQ(dataSync.opFlags, 1) << "fdatasync";
    EXPECT_EQ(dataSync.fd, dataFd);
    EXPECT_EQ(dataSync.tag.owner, RingOwner::AuditLog);
    EXPECT_EQ(dataSync.tag.opAs<AuditLogOp>(), AuditLogOp::DataSync);

    // The data durable, the index follows: its records' write linked before its fdatasync.
    EXPECT_FALSE(deliver(dataSync.tag, 0));
    prepared = takePrepared();
    ASSERT_EQ(prepared.size(), 2u);
    const PreparedOp indexWrite = prepared[0];
    const PreparedOp indexSync = prepared[1];
    EXPECT_EQ(indexWrite.op, RingOp::Write);
    EXPECT_EQ(indexWrite.tag, auditLogTag(AuditLogOp::IndexWrite));
    EXPECT_TRUE(indexWrite.flags.has(SqeFlag::Link));
    EXPECT_GT(indexWrite.length, 0u);
    EXPECT_NE(indexWrite.fd, dataFd);
    EXPECT_EQ(indexSync.op, RingOp::Fsync);
    EXPECT_EQ(indexSync.opFlags, 1);
    EXPECT_EQ(indexSync.fd, indexWrite.fd);
    EXPECT_EQ(indexSync.tag, auditLogTag(AuditLogOp::IndexSync));
    EXPECT_EQ(ring_.roomRequests().back(), 3u) << "the index's chain goes in one submission";

    EXPECT_FALSE(deliver(indexWrite.tag, static_cast<int>(indexWrite.length)));
    EXPECT_EQ(log_->durableSequence(), 0u);
    EXPECT_EQ(deliver(indexSync.tag, 0), std::optional<int>(0));
    EXPECT_EQ(log_->durableSequence(), target);
    EXPECT_FALSE(log_->syncInFlight());
    EXPECT_FALSE(log_->lastSyncFailedInWrite());
    EXPECT_TRUE(log_->takeLosses().empty());
    for (const auto& op : ring_.ops())
        EXPECT_EQ(op.tag.owner, RingOwner::AuditLog) << "the tap's tag is not the direct writer's";
    EXPECT_TRUE(ring_.pending().empty());
}

TEST_F(DirectAuditLogTest, AShortWriteIsWrittenAgainFromWhereItStopped) {
    ASSERT_EQ(log_->recordOpen(1, "web", "client", "upstream", "", ""), 0);
    record(1, kBuffer, 'a');
    ASSERT_EQ(log_->startSync(kTapTag), 1);
    auto prepared = takePrepared();
    ASSERT_EQ(prepared.size(), 1u);
    const PreparedOp write = prepared[0];

    EXPECT_FALSE(deliver(write.tag, static_cast<int>(kBlock)));  // the disk took one block
    prepared = takePrepared();
    ASSERT_EQ(prepared.size(), 1u) << "the rest goes again, no fdatasync yet";
    EXPECT_TRUE(isWrite(prepared[0]));
    EXPECT_EQ(prepared[0].fd, write.fd);
    EXPECT_EQ(prepared[0].offset, kBlock);
    EXPECT_EQ(prepared[0].length, kBuffer - kBlock);
    EXPECT_EQ(prepared[0].tag, write.tag);

    EXPECT_EQ(finishAll(), std::optional<int>(0));
    EXPECT_EQ(log_->durableSequence(), 1u);
    EXPECT_TRUE(log_->takeLosses().empty());
}

TEST_F(DirectAuditLogTest, AFullDiskLosesTheChunksOfTheFileAndFailsTheSyncAsAWrite) {
    ASSERT_EQ(log_->recordOpen(1, "web", "client", "upstream", "", ""), 0);
    ASSERT_EQ(log_->recordOpen(2, "web", "client", "upstream", "", ""), 0);
    record(1, kBuffer, 'a');
    record(2, 2 * kBlock, 'b');
    ASSERT_EQ(log_->startSync(kTapTag), 1);
    auto writes = takePrepared();
    ASSERT_EQ(writes.size(), 2u);
    const int dataFd = writes[0].fd;

    EXPECT_FALSE(deliver(writes[1].tag, static_cast<int>(writes[1].length)));
    EXPECT_FALSE(deliver(writes[0].tag, -ENOSPC));
    EXPECT_EQ(finishAll(), std::optional<int>(-ENOSPC));
    EXPECT_TRUE(log_->lastSyncFailedInWrite());
    EXPECT_EQ(log_->durableSequence(), 0u);
    auto losses = log_->takeLosses();
    ASSERT_EQ(losses.size(), 2u) << "every chunk of the failed file, not only the failed write's";
    EXPECT_EQ(losses[0].connection, 1u);
    EXPECT_EQ(losses[0].bytes, kBuffer);
    EXPECT_EQ(losses[0].error, -ENOSPC);
    EXPECT_EQ(losses[1].connection, 2u);
    EXPECT_EQ(losses[1].bytes, 2 * kBlock);
    EXPECT_TRUE(log_->takeLosses().empty()) << "each loss is reported once";

    // A connection with a hole takes no more chunks; another one goes on, into a new file.
    AuditSlot slot;
    ASSERT_EQ(log_->reserve(kBlock, slot), 0);
    EXPECT_EQ(log_->recordChunk(slot, 1, 0, kBlock, false), -EIO);
    ASSERT_EQ(log_->recordOpen(3, "web", "client", "upstream", "", ""), 0);
    ring_.clearRecord();
    record(3, kBlock, 'c');
    ASSERT_EQ(log_->startSync(kTapTag), 1);
    auto next = takePrepared();
    ASSERT_FALSE(next.empty());
    const auto write = std::find_if(next.begin(), next.end(), isWrite);
    ASSERT_NE(write, next.end());
    EXPECT_NE(write->fd, dataFd) << "the failed segment is never written again";
    EXPECT_EQ(write->offset, 0u);
    EXPECT_EQ(finishAll(), std::optional<int>(0));
    EXPECT_FALSE(log_->lastSyncFailedInWrite());
    EXPECT_EQ(log_->durableSequence(), log_->nextSyncSequence() - 1);
}

TEST_F(DirectAuditLogTest, AFailedDataSyncLosesItsChunksAndIsNoWriteFailure) {
    ASSERT_EQ(log_->recordOpen(1, "web", "client", "upstream", "", ""), 0);
    record(1, 2 * kBlock, 'a');
    ASSERT_EQ(log_->startSync(kTapTag), 1);
    auto prepared = takePrepared();
    ASSERT_EQ(prepared.size(), 1u);
    EXPECT_FALSE(deliver(prepared[0].tag, static_cast<int>(prepared[0].length)));
    prepared = takePrepared();
    ASSERT_EQ(prepared.size(), 1u);
    ASSERT_EQ(prepared[0].tag.opAs<AuditLogOp>(), AuditLogOp::DataSync);
    EXPECT_FALSE(deliver(prepared[0].tag, -EIO));
    EXPECT_EQ(finishAll(), std::optional<int>(-EIO));
    EXPECT_FALSE(log_->lastSyncFailedInWrite());
    EXPECT_EQ(log_->durableSequence(), 0u);
    auto losses = log_->takeLosses();
    ASSERT_EQ(losses.size(), 1u);
    EXPECT_EQ(losses[0].bytes, 2 * kBlock);
    EXPECT_EQ(losses[0].error, -EIO);
}

TEST_F(DirectAuditLogTest, AFailedIndexSyncFailsTheSyncWithoutLosingBookedChunks) {
    ASSERT_EQ(log_->recordOpen(1, "web", "client", "upstream", "", ""), 0);
    record(1, 2 * kBlock, 'a');
    ASSERT_EQ(log_->startSync(kTapTag), 1);
    std::optional<int> ended;
    for (int round = 0; round < 10 && !ended; ++round) {
        for (const auto& op : ring_.pending()) {
            bool indexSync = op.tag == auditLogTag(AuditLogOp::IndexSync);
            int result = indexSync ? -EIO : isWrite(op) ? static_cast<int>(op.length) : 0;
            if (auto done = deliver(op.tag, result)) ended = done;
        }
    }
    EXPECT_EQ(ended, std::optional<int>(-EIO));
    EXPECT_FALSE(log_->lastSyncFailedInWrite());
    EXPECT_EQ(log_->durableSequence(), 0u);
    EXPECT_TRUE(log_->takeLosses().empty()) << "booked: the failed sync covers them";
    finishAll();  // the failed segment's seal
}

TEST_F(DirectAuditLogTest, AFullBufferIsRoomToWaitForNotAnError) {
    std::vector<AuditSlot> slots(4);
    for (auto& slot : slots) ASSERT_EQ(log_->reserve(kBuffer, slot), 0);
    EXPECT_EQ(log_->room(), 0u);
    AuditSlot more;
    EXPECT_EQ(log_->reserve(kBlock, more), -ENOBUFS);
    for (auto& slot : slots) ASSERT_EQ(log_->recordChunk(slot, 1, 0, kBuffer, false), 0);
    auto writes = takePrepared();
    ASSERT_EQ(writes.size(), 4u) << "full buffers are written at once";
    EXPECT_EQ(log_->room(), 0u);
    EXPECT_FALSE(deliver(writes[2].tag, static_cast<int>(kBuffer)));
    EXPECT_EQ(log_->room(), kBuffer) << "a written buffer is free again";
    EXPECT_EQ(log_->reserve(kBlock, more), 0);
    log_->abandon(more);
}

TEST_F(DirectAuditLogTest, CompletionsOfOtherOwnersAreNotItsOwn) {
    record(1, 2 * kBlock, 'a');
    ASSERT_EQ(log_->startSync(kTapTag), 1);
    auto prepared = takePrepared();
    ASSERT_EQ(prepared.size(), 1u);
    EXPECT_FALSE(log_->syncCompleted(kTapTag, -EIO));
    auto foreign = prepared[0].tag;
    foreign.owner = RingOwner::Mover;
    EXPECT_FALSE(log_->syncCompleted(foreign, -EIO));
    EXPECT_EQ(finishAll(), std::optional<int>(0)) << "neither touched the sync";
    EXPECT_TRUE(log_->takeLosses().empty());
}

}  // namespace
}  // namespace splicegate
