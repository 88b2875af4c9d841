// The audit tap over the segment log on a real ring: Open, a chunk written where the
// reservation says, booked, made durable by the group commit (fdatasyncs through io_uring), the
// waiting flow resumed, Close; then the log read back. A new AuditLog writer can copy this test.
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <optional>
#include <string>
#include <system_error>

#include "audit/AuditReader.h"
#include "audit/AuditWriter.h"
#include "common/Ring.h"
#include "datapath/AuditTap.h"
#include "datapath/SegmentAuditLog.h"
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
        auto writer = std::make_unique<audit::AuditWriter>(dir_.path(), 0, 1, 1u << 20);
        AuditPolicy policy;
        policy.strict = true;
        tap_ = std::make_unique<AuditTap>(
            std::make_unique<SegmentAuditLog>(std::move(writer), *ring_), policy, stats_);
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
                ASSERT_TRUE(AuditTap::isAuditOp(tag.op));
                if (auto done = tap_->complete(tag, cqe.res)) outcome = done;
            });
        }
        return outcome;
    }

    test::TempDir dir_;
    std::unique_ptr<Ring> ring_;
    WorkerStats stats_;
    std::unique_ptr<AuditTap> tap_;
    ConnectionIo io_;
};

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

}  // namespace
}  // namespace splicegate
