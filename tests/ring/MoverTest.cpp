// Both splice movers on a real io_uring (no root): socketpairs for the source and the sink,
// pipes lent as a flow's would be, a temporary file as the audit log. Every transfer compares
// the bytes end to end; the audit chain's soft link is checked against the kernel's own
// cancellation (chain) and the inline mover's emulation of it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "common/Ring.h"
#include "common/UniqueFd.h"
#include "datapath/ChainMover.h"
#include "datapath/InlineMover.h"
#include "pipes/Pipe.h"
#include "tests/support/Daemon.h"

namespace splicegate {
namespace {

constexpr std::size_t kPipeSize = 65536;
// Completions are awaited at most this many times (1 s each): a hang fails, it never blocks.
constexpr int kMaxWaits = 20;

std::string pattern(std::size_t length, char seed) {
    std::string bytes(length, '\0');
    for (std::size_t i = 0; i < length; ++i) bytes[i] = static_cast<char>(seed + i * 7 % 251);
    return bytes;
}

class MoverTest : public ::testing::TestWithParam<const char*> {
  protected:
    void SetUp() override {
        try {
            ring_ = std::make_unique<Ring>(64, 1, 2);
        } catch (const std::system_error& error) {
            GTEST_SKIP() << "io_uring unavailable: " << error.what();
        }
        if (std::string(GetParam()) == "chain")
            mover_ = std::make_unique<ChainMover>(*ring_);
        else
            mover_ = std::make_unique<InlineMover>(*ring_);
        source_ = socketPair();
        sink_ = socketPair();
        ASSERT_EQ(Pipe::create(kPipeSize, pipe_), 0);
        ASSERT_EQ(Pipe::create(kPipeSize, auditPipe_), 0);
        log_.reset(
            ::open((dir_.path() + "/audit.log").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
        ASSERT_TRUE(log_.valid()) << "open audit.log: " << std::strerror(errno);
    }

    // [0] is the flow's end, [1] the test's peer.
    static std::array<UniqueFd, 2> socketPair() {
        int fds[2];
        EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
        return {UniqueFd(fds[0]), UniqueFd(fds[1])};
    }

    // The chain mover links the forward behind the audit write; the inline mover leaves it to
    // the next step, after the write is booked.
    bool forwardsInTheChain() const { return std::string(GetParam()) == "chain"; }

    MoveEnds ends() const {
        return MoveEnds{source_[0].get(), sink_[0].get(),      pipe_.readFd(),
                        pipe_.writeFd(),  auditPipe_.readFd(), auditPipe_.writeFd()};
    }

    MovePlan plan(MoveStage first, std::size_t length) const {
        MovePlan plan;
        plan.first = first;
        plan.length = length;
        plan.flow = CompletionTag::of(RingOwner::Mover, std::uint8_t{0}, 17, 5);
        return plan;
    }

    // Starts `plan` and, for a pending step, reaps completions until the mover reports.
    MoveReport run(const MovePlan& plan) {
        auto report = mover_->start(ends(), plan, state_);
        for (int waits = 0; report.pending && waits < kMaxWaits; ++waits) {
            ring_->submitAndWait(1000);
            ring_->drainCompletions([&](const io_uring_cqe& cqe) {
                auto tag = CompletionTag::decode(cqe.user_data);
                EXPECT_EQ(tag.owner, RingOwner::Mover);
                EXPECT_EQ(tag.slot, 17u);
                EXPECT_EQ(tag.generation, 5u);
                if (report.pending)
                    report = mover_->complete(tag, MoveCompletion{cqe.res, cqe.flags}, state_);
            });
        }
        EXPECT_FALSE(report.pending) << "no report after " << kMaxWaits << " waits";
        EXPECT_FALSE(state_.busy());
        return report;
    }

    void send(const std::string& bytes) {
        ASSERT_EQ(::write(source_[1].get(), bytes.data(), bytes.size()),
                  static_cast<ssize_t>(bytes.size()));
    }
    std::string received() {
        std::string out;
        char buffer[65536];
        ssize_t n;
        while ((n = ::read(sink_[1].get(), buffer, sizeof buffer)) > 0) out.append(buffer, n);
        return out;
    }
    std::string logAt(std::uint64_t offset, std::size_t length) {
        std::string out(length, '\0');
        auto n = ::pread(log_.get(), out.data(), length, static_cast<off_t>(offset));
        out.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
        return out;
    }

    std::unique_ptr<Ring> ring_;
    std::unique_ptr<Mover> mover_;
    MoveInFlight state_;
    std::array<UniqueFd, 2> source_;
    std::array<UniqueFd, 2> sink_;
    Pipe pipe_;
    Pipe auditPipe_;
    test::TempDir dir_;
    UniqueFd log_;
};

TEST_P(MoverTest, FillThenForwardDeliversTheBytesExactly) {
    auto bytes = pattern(40000, 'a');
    send(bytes);
    auto fill = run(plan(MoveStage::Fill, kPipeSize));
    ASSERT_EQ(fill.count, 1u);
    EXPECT_EQ(fill.results[0].stage, MoveStage::Fill);
    ASSERT_EQ(fill.results[0].result, 40000);
    auto forward = run(plan(MoveStage::Forward, 40000));
    ASSERT_EQ(forward.count, 1u);
    EXPECT_EQ(forward.results[0].result, 40000);
    EXPECT_EQ(received(), bytes);
}

TEST_P(MoverTest, FillReportsWouldBlockAndEndOfStream) {
    auto empty = run(plan(MoveStage::Fill, kPipeSize));
    ASSERT_EQ(empty.count, 1u);
    EXPECT_EQ(empty.results[0].result, -EAGAIN);
    ASSERT_EQ(::shutdown(source_[1].get(), SHUT_WR), 0);
    auto eof = run(plan(MoveStage::Fill, kPipeSize));
    ASSERT_EQ(eof.count, 1u);
    EXPECT_EQ(eof.results[0].result, 0);
}

TEST_P(MoverTest, AuditChainWritesTheLogAtItsOffsetThenForwards) {
    auto bytes = pattern(30000, 'k');
    send(bytes);
    ASSERT_EQ(run(plan(MoveStage::Fill, kPipeSize)).results[0].result, 30000);
    auto chain = plan(MoveStage::Tee, 30000);
    chain.thenAuditWrite = true;
    chain.thenForward = true;
    chain.audit = AuditDestination{log_.get(), 4096, {}};
    auto report = run(chain);
    ASSERT_EQ(report.count, forwardsInTheChain() ? 3u : 2u);
    EXPECT_EQ(report.results[0].stage, MoveStage::Tee);
    EXPECT_EQ(report.results[1].stage, MoveStage::AuditWrite);
    EXPECT_EQ(report.results[0].result, 30000);
    EXPECT_EQ(report.results[1].result, 30000);
    EXPECT_EQ(logAt(4096, 30000), bytes);
    if (forwardsInTheChain()) {
        EXPECT_EQ(report.results[2].stage, MoveStage::Forward);
        EXPECT_EQ(report.results[2].result, 30000);
    } else {
        EXPECT_EQ(received(), "") << "nothing forwarded before the write is booked";
        EXPECT_EQ(run(plan(MoveStage::Forward, 30000)).results[0].result, 30000);
    }
    EXPECT_EQ(received(), bytes);
}

TEST_P(MoverTest, AuditWriteIntoMemoryReadsTheAuditPipe) {
    auto bytes = pattern(5000, 'm');
    send(bytes);
    ASSERT_EQ(run(plan(MoveStage::Fill, kPipeSize)).results[0].result, 5000);
    std::vector<std::byte> memory(8192);
    auto chain = plan(MoveStage::Tee, 5000);
    chain.thenAuditWrite = true;
    chain.audit.memory = memory;
    auto report = run(chain);
    ASSERT_EQ(report.count, 2u);
    EXPECT_EQ(report.results[1].result, 5000);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(memory.data()), 5000), bytes);
    EXPECT_EQ(received(), "") << "not forwarded: the plan did not ask for it";
}

// A tee shorter than the chain's length breaks the soft link: neither the write nor the forward
// runs, so nothing unaudited leaves (docs/kernel-notes.md §2).
TEST_P(MoverTest, ShortTeeCancelsTheWriteAndTheForward) {
    auto bytes = pattern(1000, 's');
    send(bytes);
    ASSERT_EQ(run(plan(MoveStage::Fill, kPipeSize)).results[0].result, 1000);
    auto chain = plan(MoveStage::Tee, 2000);
    chain.thenAuditWrite = true;
    chain.thenForward = true;
    chain.audit = AuditDestination{log_.get(), 0, {}};
    auto report = run(chain);
    ASSERT_EQ(report.count, forwardsInTheChain() ? 3u : 2u);
    EXPECT_EQ(report.results[0].result, 1000);
    EXPECT_EQ(report.results[1].result, -ECANCELED);
    if (forwardsInTheChain()) {
        EXPECT_EQ(report.results[2].result, -ECANCELED);
    }
    EXPECT_EQ(logAt(0, 2000), "");
    EXPECT_EQ(received(), "");
}

// A write shorter than its length (the audit pipe holds less) forwards nothing: the chain's
// link breaks, and the inline mover never forwards in the write's step.
TEST_P(MoverTest, ShortAuditWriteForwardsNothing) {
    auto bytes = pattern(3000, 'w');
    send(bytes);
    ASSERT_EQ(run(plan(MoveStage::Fill, kPipeSize)).results[0].result, 3000);
    ASSERT_EQ(::tee(pipe_.readFd(), auditPipe_.writeFd(), 1000, SPLICE_F_NONBLOCK), 1000);
    auto chain = plan(MoveStage::AuditWrite, 3000);
    chain.thenForward = true;
    chain.audit = AuditDestination{log_.get(), 0, {}};
    auto report = run(chain);
    ASSERT_EQ(report.count, forwardsInTheChain() ? 2u : 1u);
    EXPECT_EQ(report.results[0].stage, MoveStage::AuditWrite);
    EXPECT_EQ(report.results[0].result, 1000);
    if (forwardsInTheChain()) {
        EXPECT_EQ(report.results[1].result, -ECANCELED);
    }
    EXPECT_EQ(logAt(0, 3000), bytes.substr(0, 1000));
    EXPECT_EQ(received(), "");
}

TEST_P(MoverTest, WaitReadableCompletesOnceDataArrives) {
    auto report = mover_->start(ends(), plan(MoveStage::WaitReadable, 0), state_);
    EXPECT_TRUE(report.pending) << "readiness is always a ring wait";
    ring_->submit();
    send("x");
    for (int waits = 0; report.pending && waits < kMaxWaits; ++waits) {
        ring_->submitAndWait(1000);
        ring_->drainCompletions([&](const io_uring_cqe& cqe) {
            report = mover_->complete(CompletionTag::decode(cqe.user_data),
                                      MoveCompletion{cqe.res, cqe.flags}, state_);
        });
    }
    ASSERT_EQ(report.count, 1u);
    EXPECT_EQ(report.results[0].stage, MoveStage::WaitReadable);
    EXPECT_GT(report.results[0].result, 0);
}

INSTANTIATE_TEST_SUITE_P(Movers, MoverTest, ::testing::Values("inline", "chain"),
                         [](const auto& param) { return std::string(param.param); });

}  // namespace
}  // namespace splicegate
