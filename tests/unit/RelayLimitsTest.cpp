// Connection limits decided before a connection exists: per source address and the fd budget.
#include <gtest/gtest.h>

#include "relay/FdBudget.h"
#include "relay/SourceLimiter.h"
#include "tests/support/Sockets.h"

namespace splicegate {
namespace {

using test::numericAddress;

TEST(SourceLimiterTest, CountsPerAddressNotPerPort) {
    SourceLimiter limiter(2);
    EXPECT_TRUE(limiter.tryAcquire(numericAddress("127.0.0.2:1000")));
    EXPECT_TRUE(limiter.tryAcquire(numericAddress("127.0.0.2:1001")));
    EXPECT_FALSE(limiter.tryAcquire(numericAddress("127.0.0.2:1002")));
    EXPECT_TRUE(limiter.tryAcquire(numericAddress("127.0.0.3:1000")));  // another source
    EXPECT_EQ(limiter.openFrom(numericAddress("127.0.0.2:9")), 2u);
    limiter.release(numericAddress("127.0.0.2:1000"));
    EXPECT_TRUE(limiter.tryAcquire(numericAddress("127.0.0.2:1003")));
}

TEST(SourceLimiterTest, MappedIPv6CountsAsItsIPv4Address) {
    SourceLimiter limiter(1);
    EXPECT_TRUE(limiter.tryAcquire(numericAddress("127.0.0.2:1000")));
    EXPECT_FALSE(limiter.tryAcquire(numericAddress("[::ffff:127.0.0.2]:1000")));
    EXPECT_TRUE(limiter.tryAcquire(numericAddress("[::1]:1000")));
}

TEST(SourceLimiterTest, ZeroMeansNoLimit) {
    SourceLimiter limiter(0);
    for (int i = 0; i < 1000; ++i) EXPECT_TRUE(limiter.tryAcquire(numericAddress("127.0.0.2:1")));
    EXPECT_EQ(limiter.openFrom(numericAddress("127.0.0.2:1")), 0u);
}

TEST(FdBudgetTest, CountsSocketsPipesAndAuditPipes) {
    auto budget = FdBudget::plan(1048576, 65536, 4, 2, 16);
    EXPECT_EQ(budget.perConnection, 10u);  // 2 sockets + 2 directions x 2 pipes x 2 fds
    EXPECT_EQ(budget.connections, 65536u);
}

TEST(FdBudgetTest, SmallLimitGivesFewerConnectionsThatFitEntirely) {
    auto budget = FdBudget::plan(200, 65536, 1, 1, 16);
    EXPECT_GT(budget.connections, 0u);
    EXPECT_LE(budget.reserved + budget.connections * budget.perConnection, 200u);
    EXPECT_GT(budget.reserved + (budget.connections + 1) * budget.perConnection, 200u);
}

TEST(FdBudgetTest, ControlPlanePeersAreReserved) {
    auto without = FdBudget::plan(20000, 65536, 2, 1, 16);
    auto with = FdBudget::plan(20000, 65536, 2, 1, 16, 1024 + 64);
    EXPECT_EQ(with.reserved, without.reserved + 1024 + 64);
    EXPECT_LT(with.connections, without.connections);
}

// --lane buffer: received bytes wait in provided buffers, so a connection holds its sockets only.
TEST(FdBudgetTest, WithoutPipesAConnectionCountsItsSocketsOnly) {
    auto with = FdBudget::plan(20000, 65536, 2, 1, 16, 0, PipeFds::PerConnection);
    auto without = FdBudget::plan(20000, 65536, 2, 1, 16, 0, PipeFds::None);
    EXPECT_EQ(without.perConnection, FdBudget::kSocketsPerConnection);
    EXPECT_LT(without.reserved, with.reserved) << "no idle pipes either";
    EXPECT_EQ(without.pipes, 0u);
    EXPECT_GT(without.connections, with.connections);
}

// --lane auto: the pipes are a capped pool of their own, reserved once; a connection counts its
// sockets, so 8,000 idle connections fit in 20,000 fds.
TEST(FdBudgetTest, SharedPipesAreAPoolReservedOnce) {
    auto shared = FdBudget::plan(20000, 65536, 2, 1, 16, 0, PipeFds::Shared);
    EXPECT_EQ(shared.perConnection, FdBudget::kSocketsPerConnection);
    EXPECT_EQ(shared.pipes, 20000u / 16);
    EXPECT_GE(shared.connections, 8000u);
    EXPECT_LE(shared.reserved + 2 * shared.connections, 20000u);
    EXPECT_GE(shared.reserved, 2 * shared.pipes) << "every pooled pipe's two fds";
    EXPECT_EQ(FdBudget::plan(200, 65536, 1, 1, 16, 0, PipeFds::Shared).pipes,
              FdBudget::kMinSharedPipes);
}

TEST(FdBudgetTest, LimitBelowTheReserveFitsNothing) {
    EXPECT_EQ(FdBudget::plan(50, 10, 1, 1, 16).connections, 0u);
}

}  // namespace
}  // namespace splicegate
