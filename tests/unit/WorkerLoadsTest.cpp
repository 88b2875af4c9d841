// Spreading new connections over the workers (relay/WorkerLoads.h).
#include <gtest/gtest.h>

#include "relay/WorkerLoads.h"

namespace splicegate {
namespace {

TEST(WorkerLoads, KeepsAConnectionUntilTheSlackIsReached) {
    WorkerLoads loads(2);
    loads.add(0, 5);
    loads.add(1, 4);
    EXPECT_FALSE(loads.lighterThan(0, 2)) << "one more than the other is within the slack";
    loads.add(0, 1);
    EXPECT_EQ(loads.lighterThan(0, 2), 1u);
    EXPECT_FALSE(loads.lighterThan(1, 2)) << "the lighter worker never hands over";
}

TEST(WorkerLoads, PicksTheLeastBusyOfSeveral) {
    WorkerLoads loads(4);
    loads.add(0, 10);
    loads.add(1, 7);
    loads.add(2, 3);
    loads.add(3, 5);
    EXPECT_EQ(loads.lighterThan(0, 2), 2u);
    EXPECT_EQ(loads.lighterThan(3, 2), 2u);
    EXPECT_FALSE(loads.lighterThan(2, 2));
}

TEST(WorkerLoads, ASpreadOfRandomArrivalsStaysWithinTheSlack) {
    // Arrivals always at worker 0 (the worst a reuseport hash can do): booked for the worker that
    // will own each one, the spread never exceeds the slack.
    WorkerLoads loads(2);
    for (int i = 0; i < 64; ++i) {
        auto target = loads.lighterThan(0, 2);
        loads.add(target.value_or(0), 1);
    }
    EXPECT_LE(loads.load(0) - loads.load(1), 2);
    EXPECT_EQ(loads.load(0) + loads.load(1), 64);
}

TEST(WorkerLoads, OneWorkerKeepsEverything) {
    WorkerLoads loads(1);
    loads.add(0, 100);
    EXPECT_FALSE(loads.lighterThan(0, 2));
}

}  // namespace
}  // namespace splicegate
