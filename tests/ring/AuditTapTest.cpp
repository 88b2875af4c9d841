// The audit tap over the splice writer on a real ring: Open, a chunk written where the
// reservation says, booked, made durable by the group commit (fdatasyncs through io_uring), the
// waiting flow resumed, Close; then the log read back. A new AuditLog writer can copy this test.
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <optional>
#include <string>
#include <system_error>

#include "audit/AuditReader.h"
#include "audit/SegmentStore.h"
#include "audit/SpliceAuditLog.h"
#include "common/Ring.h"
#include "datapath/AuditTap.h"
#include "tests/support/AuditSupport.h"
#include "tests/support/Daemon.h"

namespace splicegate {
namespace {

class AuditTapTest : public ::testing::Test {
  protected:
    void SetUp() override {
        try {
            ring_ = std::make_unique<Ring>(16, 1, 1);
        } catch (const std::system_error& error) {
            GTEST_SKIP() << "io_uring unavailable: " << error.what();
        }
        auto writer = std::make_unique<audit::SegmentStore>(dir_.path(), 0, 1, 1u << 20);
        AuditPolicy policy;
        policy.strict = true;
        auto log = std::make_unique<SpliceAuditLog>(std::move(writer), *ring_);
        log_ = log.get();
        tap_ = std::make_unique<AuditTap>(std::move(log), policy, stats_);
        io_.id = 42;
        io_.slot = 3;
        io_.generation = 1;
    }

    // Reaps until the group commit reports its outcome.
    std::optional<SyncOutcome> awaitSync() {
        std::optional<SyncOutcome> outcome;
        for (int waits = 0; !outcome && waits < 20; ++waits) {
            ring_->submitAndWait(1000);
            ring_->drainCompletions([&](const io_uring_cqe& cqe) {
                auto tag = CompletionTag::decode(cqe.user_data);
                ASSERT_EQ(tag.owner, RingOwner::AuditTap)
                    << "the splice writer tags its sync with the tap's tag";
                if (auto done = tap_->complete(tag, cqe.res)) outcome = done;
            });
        }
        return outcome;
    }

    test::TempDir dir_;
    std::unique_ptr<Ring> ring_;
    WorkerStats stats_;
    std::unique_ptr<AuditTap> tap_;
    SpliceAuditLog* log_ = nullptr;  // tap_'s
    ConnectionIo io_;
};

// What a mover does with a reserved slot: the payload lands at the reserved offset; then booked.
void writeAndBook(AuditTap& tap, ConnectionIo& io, Direction d, const std::string& payload) {
    auto& flow = io.at(d);
    ASSERT_EQ(tap.reserve(flow, payload.size()), 0);
    const auto& where = flow.auditSlot.destination;
    ASSERT_EQ(::pwrite(where.fd, payload.data(), payload.size(), static_cast<off_t>(where.offset)),
              static_cast<ssize_t>(payload.size()));
    ASSERT_EQ(tap.book(io, d, static_cast<int>(payload.size())), static_cast<int>(payload.size()));
}

TEST_F(AuditTapTest, ChunkBookedMadeDurableAndReadBack) {
    const auto d = Direction::ClientToUpstream;
    ASSERT_EQ(tap_->open(io_, "route", "192.0.2.1:1000", "192.0.2.2:2000"), AuditAction::Proceed);
    EXPECT_TRUE(io_.audited);

    const std::string payload = "the audited bytes";
    auto& flow = io_.at(d);
    ASSERT_EQ(tap_->reserve(flow, payload.size()), 0);
    ASSERT_TRUE(flow.auditSlot.reserved());
    const auto& where = flow.auditSlot.destination;
    ASSERT_GE(where.fd, 0);
    // What a mover's audit write does: the payload lands at the reserved offset.
    ASSERT_EQ(::pwrite(where.fd, payload.data(), payload.size(), static_cast<off_t>(where.offset)),
              static_cast<ssize_t>(payload.size()));
    EXPECT_EQ(tap_->book(io_, d, static_cast<int>(payload.size())),
              static_cast<int>(payload.size()));
    EXPECT_FALSE(flow.auditSlot.reserved()) << "booking releases the slot";
    EXPECT_EQ(flow.auditedBytes, payload.size());
    EXPECT_EQ(stats_.auditBytes.get(), payload.size());

    tap_->waitDurable(io_, d);
    EXPECT_FALSE(tap_->afterTurn().has_value()) << "the group commit started";
    auto outcome = awaitSync();
    ASSERT_TRUE(outcome.has_value()) << "no group commit outcome";
    EXPECT_EQ(outcome->result, 0);
    EXPECT_FALSE(outcome->closeUndurable);
    ASSERT_EQ(outcome->resume.size(), 1u);
    EXPECT_TRUE(outcome->resume[0] == io_.tag(d));
    EXPECT_FALSE(tap_->lostBySyncFailure(io_));

    tap_->close(io_, "closed");
    tap_->shutdown();
    tap_.reset();

    auto listing = audit::listConnections(dir_.path());
    ASSERT_EQ(listing.connections.size(), 1u);
    const auto& row = listing.connections[0];
    EXPECT_EQ(row.id, 42u);
    EXPECT_EQ(row.route, "route");
    EXPECT_EQ(row.reason, "closed");
    EXPECT_EQ(row.c2uBytes, payload.size());
    EXPECT_EQ(row.u2cBytes, 0u);
}

TEST_F(AuditTapTest, AWriteThatFailedGivesItsSpaceBackAndRecordsNothing) {
    const auto d = Direction::UpstreamToClient;
    ASSERT_EQ(tap_->open(io_, "route", "c", "u"), AuditAction::Proceed);
    ASSERT_EQ(tap_->reserve(io_.at(d), 100), 0);
    EXPECT_EQ(tap_->book(io_, d, -EIO), -EIO);
    EXPECT_FALSE(io_.at(d).auditSlot.reserved());
    EXPECT_EQ(io_.at(d).auditedBytes, 0u);
    EXPECT_EQ(tap_->failed(io_, d, -EIO), AuditAction::Close) << "fail-closed by default";
    EXPECT_EQ(stats_.auditWriteErrors.get(), 1u);
}

// The worker stops while a group commit is on its ring (its linked index write waits behind the
// data fdatasync). Shutdown must let it end: sealing at once would reuse the buffer that write
// still reads, and the index then held a record with its first byte zeroed (seen in CI).
TEST_F(AuditTapTest, ShutdownWaitsForTheGroupCommitOnTheRingBeforeSealing) {
    const auto d = Direction::ClientToUpstream;
    ASSERT_EQ(tap_->open(io_, "route", "c", "u"), AuditAction::Proceed);
    const std::string payload(3000, 'p');
    writeAndBook(*tap_, io_, d, payload);
    tap_->waitDurable(io_, d);
    EXPECT_FALSE(tap_->afterTurn().has_value()) << "the group commit started";
    ASSERT_TRUE(log_->syncInFlight());
    const auto covering = log_->nextSyncSequence() - 1;
    tap_->close(io_, "closed");

    tap_->shutdown();
    EXPECT_FALSE(log_->syncInFlight()) << "shutdown returned with the group commit still out";
    EXPECT_GE(log_->durableSequence(), covering) << "the booked chunk is not durable";
    tap_.reset();
    unsigned left = 0;
    ring_->submitAndPeek();
    left += ring_->drainCompletions([](const io_uring_cqe&) {});
    EXPECT_EQ(left, 0u) << "audit operations were still on the ring when the log was gone";

    EXPECT_TRUE(test::auditVerifies(dir_.path()));
    auto listing = audit::listConnections(dir_.path());
    ASSERT_EQ(listing.connections.size(), 1u);
    EXPECT_EQ(listing.connections[0].c2uBytes, payload.size());
    EXPECT_EQ(listing.connections[0].reason, "closed");
}

}  // namespace
}  // namespace splicegate
