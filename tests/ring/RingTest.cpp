// The ring wrapper's set-up variants on the running kernel: each must carry a request through
// (submit, complete, reap) with the flags it was given, or fall back to what the kernel has.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <system_error>

#include "common/CompletionTag.h"
#include "common/Ring.h"

namespace splicegate {
namespace {

// A ring with `options`, or null when the kernel has no io_uring or refuses the options.
std::unique_ptr<Ring> makeRing(RingOptions options, std::string& why) {
    try {
        return std::make_unique<Ring>(8, 1, 1, options);
    } catch (const std::system_error& error) {
        why = error.what();
        return nullptr;
    }
}

// One NOP through the ring; its tag must come back intact. Returns the completions reaped.
int roundTrip(Ring& ring, bool wait) {
    const CompletionTag tag{0x41, 1, 77, 12345};
    auto* sqe = ring.sqe();
    io_uring_prep_nop(sqe);
    io_uring_sqe_set_data64(sqe, tag.encode());
    int reaped = 0;
    for (int tries = 0; reaped == 0 && tries < 10; ++tries) {
        if (wait)
            ring.submitAndWait(1000);
        else
            ring.submitAndPeek();
        ring.drainCompletions([&](const io_uring_cqe& cqe) {
            EXPECT_TRUE(CompletionTag::decode(cqe.user_data) == tag);
            EXPECT_EQ(cqe.res, 0);
            ++reaped;
        });
    }
    return reaped;
}

TEST(RingTest, DefaultsDeferTaskWorkWhereTheKernelCan) {
    std::string why;
    auto ring = makeRing({}, why);
    if (!ring) GTEST_SKIP() << "io_uring unavailable: " << why;
    EXPECT_EQ(roundTrip(*ring, true), 1);
    EXPECT_EQ(roundTrip(*ring, false), 1) << "submitAndPeek reaps without waiting";
    if (!(ring->flags() & IORING_SETUP_DEFER_TASKRUN))
        GTEST_SKIP() << "this kernel refused IORING_SETUP_DEFER_TASKRUN (6.1+): fell back";
    EXPECT_TRUE(ring->flags() & IORING_SETUP_SINGLE_ISSUER);
}

TEST(RingTest, WithoutDeferredTaskWork) {
    std::string why;
    RingOptions options;
    options.deferTaskrun = false;
    auto ring = makeRing(options, why);
    if (!ring) GTEST_SKIP() << "io_uring unavailable: " << why;
    EXPECT_FALSE(ring->flags() & IORING_SETUP_DEFER_TASKRUN);
    EXPECT_EQ(roundTrip(*ring, true), 1);
    EXPECT_EQ(roundTrip(*ring, false), 1);
}

TEST(RingTest, SubmissionQueuePolling) {
    std::string why;
    RingOptions options;
    options.sqpoll = true;
    auto ring = makeRing(options, why);
    if (!ring) GTEST_SKIP() << "SQPOLL refused (before 5.11 it needs CAP_SYS_NICE): " << why;
    EXPECT_TRUE(ring->flags() & IORING_SETUP_SQPOLL);
    EXPECT_FALSE(ring->flags() & IORING_SETUP_DEFER_TASKRUN) << "the two exclude each other";
    EXPECT_EQ(roundTrip(*ring, true), 1);
}

}  // namespace
}  // namespace splicegate
