#include "relay/CpuPlacement.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>

namespace splicegate {
namespace {

TEST(CpuPlacement, TwoWorkersOnTwoCpusGetOneEach) {
    EXPECT_EQ(workerCpu({0, 1}, 0), 0);
    EXPECT_EQ(workerCpu({0, 1}, 1), 1);
}

TEST(CpuPlacement, FollowsTheAllowedSetNotCpuNumbers) {
    EXPECT_EQ(workerCpu({2, 5, 7}, 0), 2);
    EXPECT_EQ(workerCpu({2, 5, 7}, 1), 5);
    EXPECT_EQ(workerCpu({2, 5, 7}, 2), 7);
}

TEST(CpuPlacement, MoreWorkersThanCpusGoRoundRobin) {
    EXPECT_EQ(workerCpu({0, 1}, 2), 0);
    EXPECT_EQ(workerCpu({0, 1}, 3), 1);
}

TEST(CpuPlacement, OneOrNoCpuLeavesTheThreadAlone) {
    EXPECT_EQ(workerCpu({3}, 0), std::nullopt);
    EXPECT_EQ(workerCpu({}, 1), std::nullopt);
}

TEST(CpuPlacement, AllowedCpusIncludesTheCpuWeRunOn) {
    auto cpus = allowedCpus();
    ASSERT_FALSE(cpus.empty());
    int current = sched_getcpu();
    ASSERT_GE(current, 0);
    EXPECT_NE(std::find(cpus.begin(), cpus.end(), current), cpus.end());
}

}  // namespace
}  // namespace splicegate
