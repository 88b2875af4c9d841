#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "pipes/PipePool.h"

namespace splicegate {
namespace {

TEST(PipeBudget, ReservesUpToTheLimitAndNoFurther) {
    PipeBudget budget(3 * 4096);
    EXPECT_TRUE(budget.tryReserve(4096));
    EXPECT_TRUE(budget.tryReserve(8192));
    EXPECT_FALSE(budget.tryReserve(1));
    budget.release(4096);
    EXPECT_EQ(budget.used(), 8192u);
    EXPECT_TRUE(budget.tryReserve(4096));
}

TEST(PipeBudget, ZeroMeansUnlimitedButStillCounts) {
    PipeBudget budget(0);
    EXPECT_TRUE(budget.tryReserve(1u << 30));
    EXPECT_EQ(budget.used(), 1u << 30);
}

TEST(PipePool, LendsFullSizePipesWithinTheBudget) {
    PipeBudget budget(2 * 65536);
    PipePool pool(budget, 65536, 4);
    Pipe first, second;
    ASSERT_EQ(pool.acquire(first), 0);
    ASSERT_EQ(pool.acquire(second), 0);
    EXPECT_EQ(first.capacity(), 65536u);
    EXPECT_EQ(second.capacity(), 65536u);
    EXPECT_EQ(budget.used(), 2u * 65536);
    EXPECT_EQ(pool.stats().inUse, 2u);
    EXPECT_EQ(pool.stats().overflowInUse, 0u);
}

TEST(PipePool, LendsOnePagePipesWhenTheBudgetIsSpent) {
    PipeBudget budget(65536);
    PipePool pool(budget, 65536, 4);
    Pipe full, overflow;
    ASSERT_EQ(pool.acquire(full), 0);
    ASSERT_EQ(pool.acquire(overflow), 0);
    EXPECT_LT(overflow.capacity(), 65536u);
    EXPECT_EQ(pool.stats().overflowInUse, 1u);
    EXPECT_EQ(budget.used(), 65536u);  // overflow pipes are outside the budget
    pool.release(std::move(overflow), 0);
    EXPECT_EQ(pool.stats().overflowInUse, 0u);
    EXPECT_EQ(pool.stats().idle, 0u);  // overflow pipes are closed, not kept
}

// The pipe cap counts pipes in existence, lent or idle: past it acquire() says EMFILE (the
// caller goes on without a pipe), and a pipe closed makes room again.
TEST(PipePool, PipeCapRefusesNewPipesUntilOneIsClosed) {
    PipeBudget budget(0, 2);
    PipePool pool(budget, 4096, 1);
    Pipe a, b, c;
    ASSERT_EQ(pool.acquire(a), 0);
    ASSERT_EQ(pool.acquire(b), 0);
    EXPECT_EQ(pool.acquire(c), -EMFILE);
    EXPECT_FALSE(c.valid());
    EXPECT_EQ(pool.stats().capRefusals, 1u);
    pool.release(std::move(a), 0);  // kept idle: still a pipe in existence, and reused
    ASSERT_EQ(pool.acquire(c), 0);
    EXPECT_EQ(pool.acquire(a), -EMFILE);
    pool.release(std::move(b), 1);  // not empty: closed
    EXPECT_EQ(pool.acquire(a), 0);
}

TEST(PipePool, ReusesReturnedPipesAndKeepsAtMostMaxIdle) {
    PipeBudget budget(0);
    PipePool pool(budget, 4096, 1);
    Pipe a, b;
    ASSERT_EQ(pool.acquire(a), 0);
    ASSERT_EQ(pool.acquire(b), 0);
    int readEnd = a.readFd();
    pool.release(std::move(a), 0);
    pool.release(std::move(b), 0);
    EXPECT_EQ(pool.stats().idle, 1u);
    EXPECT_EQ(budget.used(), 4096u);  // the pipe beyond maxIdle was closed and its budget freed
    Pipe again;
    ASSERT_EQ(pool.acquire(again), 0);
    EXPECT_EQ(again.readFd(), readEnd);
    EXPECT_EQ(pool.stats().created, 2u);
}

TEST(PipePool, NeverLendsAgainAPipeReturnedWithBytesInIt) {
    PipeBudget budget(0);
    PipePool pool(budget, 4096, 4);
    Pipe dirty;
    ASSERT_EQ(pool.acquire(dirty), 0);
    ASSERT_EQ(::write(dirty.writeFd(), "abc", 3), 3);
    EXPECT_EQ(dirty.bufferedBytes(), 3);
    pool.release(std::move(dirty), 3);
    EXPECT_EQ(pool.stats().discardedNonEmpty, 1u);
    EXPECT_EQ(pool.stats().idle, 0u);
    EXPECT_EQ(budget.used(), 0u);
    Pipe fresh;
    ASSERT_EQ(pool.acquire(fresh), 0);
    EXPECT_EQ(fresh.bufferedBytes(), 0);
}

TEST(PipePool, RoundsThePipeSizeLikeTheKernel) {
    PipeBudget budget(0);
    PipePool pool(budget, 5000, 4);
    EXPECT_EQ(pool.pipeSize(), 8192u);
    Pipe pipe;
    ASSERT_EQ(pool.acquire(pipe), 0);
    EXPECT_EQ(pipe.capacity(), 8192u);
    EXPECT_EQ(pool.stats().overflowInUse, 0u);
}

TEST(PipePool, ManyBorrowersShareATinyBudget) {
    PipeBudget budget(4 * 4096);
    PipePool pool(budget, 4096, 4);
    std::vector<Pipe> lent(32);
    for (auto& pipe : lent) ASSERT_EQ(pool.acquire(pipe), 0);
    EXPECT_EQ(budget.used(), 4u * 4096);
    EXPECT_EQ(pool.stats().inUse, 32u);
    EXPECT_EQ(pool.stats().overflowInUse, 28u);
    for (auto& pipe : lent) pool.release(std::move(pipe), 0);
    EXPECT_EQ(pool.stats().inUse, 0u);
    EXPECT_EQ(pool.stats().idle, 4u);
    EXPECT_EQ(budget.used(), 4u * 4096);
}

TEST(PipeBudget, FairShareIsTheLimitOverThePipesLentRoundedDown) {
    PipeBudget budget(4 << 20);
    EXPECT_EQ(budget.fairShare(1 << 20), 1u << 20);  // nothing lent
    for (int i = 0; i < 8; ++i) budget.countLent();
    EXPECT_EQ(budget.fairShare(1 << 20), 512u << 10);
    for (int i = 0; i < 4; ++i) budget.countLent();
    EXPECT_EQ(budget.fairShare(1 << 20), 256u << 10);  // 4 MiB / 12, rounded down
    for (int i = 0; i < 500; ++i) budget.countLent();
    EXPECT_EQ(budget.fairShare(1 << 20), 64u << 10);  // never below 64 KiB
    EXPECT_EQ(budget.fairShare(4096), 4096u);         // nor above the pipe size
    EXPECT_EQ(PipeBudget(0).fairShare(1 << 20), 1u << 20);
}

// Sixteen borrowers that never give a pipe back on their own (uploads that never run dry) must
// all get budgeted pipes: the early ones learn theirs became too large and trade them.
TEST(PipePool, BorrowersShareTheBudgetFairlyAndTradeOversizedPipes) {
    PipeBudget budget(4 << 20);
    PipePool pool(budget, 1 << 20, 4);
    std::vector<Pipe> lent(16);
    for (auto& pipe : lent) ASSERT_EQ(pool.acquire(pipe), 0);
    EXPECT_EQ(lent.front().capacity(), 1u << 20) << "alone, the first gets a whole pipe";
    EXPECT_LE(budget.used(), budget.limit());
    EXPECT_TRUE(pool.wrongSize(lent.front())) << "16 borrowers: 1 MiB is over the fair share";
    for (auto& pipe : lent) {
        if (!pool.wrongSize(pipe)) continue;
        pool.release(std::move(pipe), 0);
        ASSERT_EQ(pool.acquire(pipe), 0);
    }
    for (const auto& pipe : lent) {
        EXPECT_TRUE(pipe.budgeted()) << "no borrower left on a one-page pipe";
        EXPECT_EQ(pipe.capacity(), 256u << 10);
        EXPECT_FALSE(pool.wrongSize(pipe));
    }
    EXPECT_EQ(pool.stats().overflowInUse, 0u);
    EXPECT_EQ(budget.used(), 4u << 20);
    for (auto& pipe : lent) pool.release(std::move(pipe), 0);
    EXPECT_EQ(pool.stats().idle, 0u) << "smaller pipes are not kept for reuse";
    EXPECT_EQ(budget.used(), 0u);
}

TEST(PipePool, OverflowPipeIsTradedOnceTheBudgetHasRoom) {
    PipeBudget budget(65536);
    PipePool pool(budget, 65536, 4);
    Pipe full, overflow;
    ASSERT_EQ(pool.acquire(full), 0);
    ASSERT_EQ(pool.acquire(overflow), 0);
    ASSERT_FALSE(overflow.budgeted());
    EXPECT_FALSE(pool.wrongSize(overflow)) << "no room yet";
    pool.release(std::move(full), 0);
    EXPECT_TRUE(pool.wrongSize(overflow)) << "room for a budgeted pipe again";
}

}  // namespace
}  // namespace splicegate
