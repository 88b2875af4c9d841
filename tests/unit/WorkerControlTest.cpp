// How other threads reach a worker (relay/WorkerControl.h): the eventfd read it arms, the
// requests and tasks take() hands over, and the refusal of tasks once the worker has closed it.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "relay/WorkerControl.h"
#include "relay/WorkerOps.h"
#include "tests/support/FakeRing.h"

namespace splicegate {
namespace {

TEST(WorkerControlTest, ArmsAReadOfItsEventFdWithTheTagItIsGiven) {
    WorkerControl control;
    test::FakeRing ring;
    control.arm(ring, CompletionTag::make(WorkerOp::Control));
    ASSERT_EQ(ring.ops().size(), 1u);
    EXPECT_EQ(ring.ops()[0].op, RingOp::Read);
    EXPECT_GE(ring.ops()[0].fd, 0);
    EXPECT_EQ(ring.ops()[0].length, sizeof(std::uint64_t));
    EXPECT_EQ(ring.ops()[0].tag, CompletionTag::make(WorkerOp::Control));
}

TEST(WorkerControlTest, TakeRunsThePostedTasksInOrderAndReturnsTheRequestsOnce) {
    WorkerControl control;
    std::vector<int> ran;
    ASSERT_TRUE(control.post([&] { ran.push_back(1); }));
    ASSERT_TRUE(control.post([&] { ran.push_back(2); }));
    control.requestDrain();
    control.requestReload();
    auto requests = control.take();
    EXPECT_EQ(ran, (std::vector<int>{1, 2}));
    EXPECT_TRUE(requests.drain);
    EXPECT_TRUE(requests.reload);
    EXPECT_FALSE(requests.stop);
    requests = control.take();
    EXPECT_FALSE(requests.drain || requests.reload || requests.stop) << "each request once";
    EXPECT_EQ(ran.size(), 2u) << "each task once";
}

TEST(WorkerControlTest, AfterCloseTasksAreRefusedButThoseBeforeStillRun) {
    WorkerControl control;
    int ran = 0;
    ASSERT_TRUE(control.post([&] { ++ran; }));
    control.close();
    EXPECT_FALSE(control.post([&] { ++ran; }));
    control.take();
    EXPECT_EQ(ran, 1);
}

TEST(WorkerControlTest, PostsFromOtherThreadsAllArrive) {
    WorkerControl control;
    std::atomic<int> ran{0};
    std::vector<std::thread> posters;
    for (int t = 0; t < 4; ++t)
        posters.emplace_back([&] {
            for (int i = 0; i < 100; ++i) ASSERT_TRUE(control.post([&] { ++ran; }));
        });
    for (auto& poster : posters) poster.join();
    control.requestStop();
    EXPECT_TRUE(control.take().stop);
    EXPECT_EQ(ran.load(), 400);
}

}  // namespace
}  // namespace splicegate
