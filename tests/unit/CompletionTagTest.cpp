// The user_data codec and the owner -> handler table every ring owner routes through.
#include <gtest/gtest.h>

#include <vector>

#include "common/CompletionRouter.h"
#include "common/CompletionTag.h"

namespace splicegate {
namespace {

enum class SampleOp : std::uint8_t { First = 0, Last = 0xff };

TEST(CompletionTag, RoundTripsEveryFieldAtItsLimits) {
    for (unsigned owner = 0; owner < kRingOwnerCount; ++owner) {
        for (std::uint8_t direction :
             {std::uint8_t{0}, std::uint8_t{1}, std::uint8_t{kMaxDirection}}) {
            auto tag = CompletionTag::of(static_cast<RingOwner>(owner), SampleOp::Last, 0xffffffffu,
                                         0xffff, direction);
            auto back = CompletionTag::decode(tag.encode());
            EXPECT_EQ(back, tag) << "owner " << owner << " direction " << int(direction);
        }
    }
    auto zero = CompletionTag::of(RingOwner::Worker, SampleOp::First);
    EXPECT_EQ(zero.encode(), 0u);
}

TEST(CompletionTag, OwnerTellsTwoOwnersSameOpApart) {
    auto lane = CompletionTag::of(RingOwner::BufferLane, std::uint8_t{3}, 7, 2);
    auto admin = CompletionTag::of(RingOwner::AdminServer, std::uint8_t{3}, 7, 2);
    EXPECT_NE(lane.encode(), admin.encode());
    EXPECT_EQ(CompletionTag::decode(lane.encode()).owner, RingOwner::BufferLane);
    EXPECT_EQ(CompletionTag::decode(admin.encode()).owner, RingOwner::AdminServer);
}

TEST(CompletionTag, MakeIsAWorkerTagAndWithersKeepTheRest) {
    auto tag = CompletionTag::make(SampleOp::Last, 9, 4, 1);
    EXPECT_EQ(tag.owner, RingOwner::Worker);
    auto moved = tag.withSlot(10).withOp(SampleOp::First);
    EXPECT_EQ(moved.slot, 10u);
    EXPECT_EQ(moved.op, 0);
    EXPECT_EQ(moved.generation, 4);
    EXPECT_EQ(moved.direction, 1);
    EXPECT_EQ(moved.owner, RingOwner::Worker);
}

struct Recorder {
    std::vector<CompletionTag> seen;
    std::vector<int> results;
    void onCompletion(CompletionTag tag, const io_uring_cqe& cqe) {
        seen.push_back(tag);
        results.push_back(cqe.res);
    }
};

io_uring_cqe cqeFor(CompletionTag tag, int result) {
    io_uring_cqe cqe{};
    cqe.user_data = tag.encode();
    cqe.res = result;
    return cqe;
}

TEST(CompletionRouter, HandsEachCompletionToItsOwnerOnly) {
    Recorder worker;
    Recorder admin;
    CompletionRouter router;
    router.route<&Recorder::onCompletion>(RingOwner::Worker, worker);
    router.route<&Recorder::onCompletion>(RingOwner::AdminServer, admin);

    auto adminTag = CompletionTag::of(RingOwner::AdminServer, std::uint8_t{2}, 5, 1);
    auto workerTag = CompletionTag::of(RingOwner::Worker, std::uint8_t{2}, 5, 1);
    EXPECT_TRUE(router.dispatch(cqeFor(adminTag, 17)));
    EXPECT_TRUE(router.dispatch(cqeFor(workerTag, -11)));

    ASSERT_EQ(admin.seen.size(), 1u);
    EXPECT_EQ(admin.seen[0], adminTag);
    EXPECT_EQ(admin.results[0], 17);
    ASSERT_EQ(worker.seen.size(), 1u);
    EXPECT_EQ(worker.seen[0], workerTag);
    EXPECT_EQ(worker.results[0], -11);
    EXPECT_EQ(router.unrouted(), 0u);
}

TEST(CompletionRouter, DropsAndCountsCompletionsOfAnOwnerWithoutRoute) {
    Recorder worker;
    CompletionRouter router;
    router.route<&Recorder::onCompletion>(RingOwner::Worker, worker);
    EXPECT_FALSE(router.dispatch(cqeFor(CompletionTag::of(RingOwner::Mover, std::uint8_t{1}), 0)));
    // An owner value beyond the enum (a corrupt user_data) is dropped too, never indexed.
    io_uring_cqe corrupt{};
    corrupt.user_data = std::uint64_t{0xf} << 60;
    EXPECT_FALSE(router.dispatch(corrupt));
    EXPECT_EQ(router.unrouted(), 2u);
    EXPECT_TRUE(worker.seen.empty());

    router.unroute(RingOwner::Worker);
    EXPECT_FALSE(router.routes(RingOwner::Worker));
    EXPECT_FALSE(router.dispatch(cqeFor(CompletionTag::make(std::uint8_t{1}), 0)));
    EXPECT_EQ(router.unrouted(), 3u);
}

}  // namespace
}  // namespace splicegate
