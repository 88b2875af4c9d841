// The splice writer's adapter (audit/SpliceAuditLog.h) driven through a scripted ring: its group
// commit is one chain carrying the tap's tag (data fdatasync, index records' write, index
// fdatasync, linked in that order), and what each step's failure makes of the sync's result and
// of lastSyncFailedInWrite(). The payload lands as a mover's splice would leave it (pwrite at the
// reserved offset), since the adapter reads it back for its CRC.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "audit/SegmentStore.h"
#include "audit/SpliceAuditLog.h"
#include "datapath/AuditTap.h"
#include "tests/support/Daemon.h"
#include "tests/support/FakeRing.h"

namespace splicegate {
namespace {

using test::FakeRing;
using test::PreparedOp;

const CompletionTag kTapTag = CompletionTag::of(RingOwner::AuditTap, AuditTapOp::GroupCommit);

class SpliceAuditLogTest : public ::testing::Test {
  protected:
    void SetUp() override {
        log_ = std::make_unique<SpliceAuditLog>(
            std::make_unique<audit::SegmentStore>(dir_.path(), 0, 1, 1 << 20), ring_);
    }

    // A chunk as the splice lane records one: reserved, spliced into the file, recorded.
    void record(std::uint64_t connection, const std::string& payload) {
        AuditSlot slot;
        ASSERT_EQ(log_->reserve(static_cast<std::uint32_t>(payload.size()), slot), 0);
        const auto& where = slot.destination;
        ASSERT_GE(where.fd, 0);
        ASSERT_EQ(
            ::pwrite(where.fd, payload.data(), payload.size(), static_cast<off_t>(where.offset)),
            static_cast<ssize_t>(payload.size()));
        ASSERT_EQ(log_->recordChunk(slot, connection, 0, static_cast<std::uint32_t>(payload.size()),
                                    false),
                  0);
    }

    // Starts a sync; the three steps of its chain, in the order prepared.
    std::vector<PreparedOp> startSync() {
        ring_.clearRecord();
        EXPECT_EQ(log_->startSync(kTapTag), 1);
        return ring_.preparedSinceClear();
    }

    std::optional<int> deliver(CompletionTag tag, int result) {
        EXPECT_TRUE(ring_.complete(tag, result));
        std::optional<int> ended;
        ring_.drainCompletions([&](const io_uring_cqe& cqe) {
            auto done = log_->syncCompleted(CompletionTag::decode(cqe.user_data), cqe.res);
            if (done) ended = done;
        });
        return ended;
    }

    test::TempDir dir_;
    FakeRing ring_;
    std::unique_ptr<SpliceAuditLog> log_;
};

TEST_F(SpliceAuditLogTest, ASyncIsOneChainCarryingTheTapsTag) {
    ASSERT_EQ(log_->recordOpen(1, "web", "client", "upstream", "", ""), 0);
    record(1, std::string(3000, 'p'));
    const auto target = log_->nextSyncSequence();
    auto steps = startSync();
    ASSERT_EQ(steps.size(), 3u);
    EXPECT_EQ(ring_.roomRequests().back(), 3u) << "the chain goes in one submission";
    EXPECT_EQ(steps[0].op, RingOp::Fsync);
    EXPECT_EQ(steps[0].opFlags, 1) << "fdatasync";
    EXPECT_TRUE(steps[0].flags.has(SqeFlag::Link));
    EXPECT_EQ(steps[1].op, RingOp::Write);
    EXPECT_TRUE(steps[1].flags.has(SqeFlag::Link));
    EXPECT_GT(steps[1].length, 0u) << "the index records of the Open and the chunk";
    EXPECT_EQ(steps[2].op, RingOp::Fsync);
    EXPECT_EQ(steps[2].fd, steps[1].fd) << "the index file, after its records";
    EXPECT_NE(steps[0].fd, steps[1].fd) << "the data file first";
    for (const auto& step : steps) {
        EXPECT_EQ(step.tag.owner, RingOwner::AuditTap);
        EXPECT_EQ(step.tag.op, kTapTag.op);
    }

    EXPECT_FALSE(deliver(steps[0].tag, 0));
    EXPECT_FALSE(deliver(steps[1].tag, static_cast<int>(steps[1].length)));
    EXPECT_EQ(deliver(steps[2].tag, 0), std::optional<int>(0));
    EXPECT_EQ(log_->durableSequence(), target);
    EXPECT_FALSE(log_->syncInFlight());
    EXPECT_FALSE(log_->lastSyncFailedInWrite());
    EXPECT_TRUE(log_->takeLosses().empty());
    EXPECT_EQ(log_->room(), SIZE_MAX) << "no buffer of its own: never back-pressure";
}

TEST_F(SpliceAuditLogTest, AFailedIndexWriteFailsTheSyncAsAWrite) {
    ASSERT_EQ(log_->recordOpen(1, "web", "client", "upstream", "", ""), 0);
    record(1, std::string(3000, 'p'));
    auto steps = startSync();
    ASSERT_EQ(steps.size(), 3u);
    EXPECT_FALSE(deliver(steps[0].tag, 0));
    EXPECT_FALSE(deliver(steps[1].tag, -ENOSPC));
    EXPECT_EQ(deliver(steps[2].tag, -ECANCELED), std::optional<int>(-ENOSPC))
        << "the first failed step, not the cancelled one after it";
    EXPECT_TRUE(log_->lastSyncFailedInWrite());
    EXPECT_EQ(log_->durableSequence(), 0u);
    EXPECT_TRUE(log_->takeLosses().empty()) << "the failed sync covers its chunks";

    // The next segment's sync succeeds, and says so.
    record(1, std::string(100, 'q'));
    steps = startSync();
    ASSERT_EQ(steps.size(), 3u);
    // Delivered out of order: the result waits for the last step.
    EXPECT_FALSE(deliver(steps[1].tag, static_cast<int>(steps[1].length)));
    EXPECT_FALSE(deliver(steps[0].tag, 0));
    EXPECT_EQ(deliver(steps[2].tag, 0), std::optional<int>(0));
    EXPECT_FALSE(log_->lastSyncFailedInWrite());
}

TEST_F(SpliceAuditLogTest, AFailedDataSyncIsNoWriteFailure) {
    ASSERT_EQ(log_->recordOpen(1, "web", "client", "upstream", "", ""), 0);
    record(1, std::string(3000, 'p'));
    auto steps = startSync();
    ASSERT_EQ(steps.size(), 3u);
    EXPECT_FALSE(deliver(steps[0].tag, -EIO));
    EXPECT_FALSE(deliver(steps[1].tag, -ECANCELED));
    EXPECT_EQ(deliver(steps[2].tag, -ECANCELED), std::optional<int>(-EIO));
    EXPECT_FALSE(log_->lastSyncFailedInWrite());
    EXPECT_EQ(log_->durableSequence(), 0u);
}

TEST_F(SpliceAuditLogTest, CompletionsOfOtherTagsAreNotItsSyncs) {
    ASSERT_EQ(log_->recordOpen(1, "web", "client", "upstream", "", ""), 0);
    auto steps = startSync();
    ASSERT_EQ(steps.size(), 3u);
    EXPECT_FALSE(
        log_->syncCompleted(CompletionTag::of(RingOwner::AuditLog, std::uint8_t{1}, 1), -EIO));
    EXPECT_FALSE(deliver(steps[0].tag, 0));
    EXPECT_FALSE(deliver(steps[1].tag, static_cast<int>(steps[1].length)));
    EXPECT_EQ(deliver(steps[2].tag, 0), std::optional<int>(0)) << "the foreign one changed nothing";
}

}  // namespace
}  // namespace splicegate
