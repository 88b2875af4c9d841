// The connection id lease (audit/ConnectionIdLease.h): its file, renewal ahead of the ids, the
// wait when ids outrun it, the shrink at a clean stop, a renewal that fails, and an upgrade's
// hand-off (suspend: a whole block ahead, then nothing written; resume after a failed one).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "audit/AuditDirectory.h"
#include "audit/ConnectionIdLease.h"
#include "common/UniqueFd.h"
#include "tests/support/Daemon.h"

namespace splicegate::audit {
namespace {

using namespace std::chrono_literals;

class ConnectionIdLeaseTest : public ::testing::Test {
  protected:
    void SetUp() override {
        dirFd_.reset(::open(dir_.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        ASSERT_TRUE(dirFd_) << dir_.path();
    }

    std::uint64_t leasedEnd() const {
        auto read = readConnectionIdLease(dirFd_.get(), dir_.path());
        EXPECT_TRUE(read.problem.empty()) << read.problem;
        return read.end;
    }

    // Polls (bounded) until the file says at least `end`.
    bool leaseReaches(std::uint64_t end) const {
        for (int i = 0; i < 500; ++i) {
            if (leasedEnd() >= end) return true;
            std::this_thread::sleep_for(10ms);
        }
        return false;
    }

    test::TempDir dir_;
    UniqueFd dirFd_;
};

TEST(ConnectionIdLeaseFile, RoundTripsAndRefusesDamage) {
    std::string problem;
    auto bytes = encodeConnectionIdLease(1234567);
    auto end = decodeConnectionIdLease(bytes, problem);
    ASSERT_TRUE(end.has_value()) << problem;
    EXPECT_EQ(*end, 1234567u);

    auto flipped = bytes;
    flipped[9] ^= 0x01;
    EXPECT_FALSE(decodeConnectionIdLease(flipped, problem).has_value());
    EXPECT_EQ(problem, "bad CRC");
    EXPECT_FALSE(decodeConnectionIdLease(bytes.substr(0, 19), problem).has_value());
    EXPECT_EQ(problem, "19 bytes, not 20");
    auto otherMagic = bytes;
    otherMagic[0] = 'X';
    EXPECT_FALSE(decodeConnectionIdLease(otherMagic, problem).has_value());
    EXPECT_EQ(problem, "bad magic");
}

TEST_F(ConnectionIdLeaseTest, NoFileIsNoLeaseAndGarbageIsReportedNamingTheFile) {
    auto none = readConnectionIdLease(dirFd_.get(), dir_.path());
    EXPECT_EQ(none.end, 0u);
    EXPECT_TRUE(none.problem.empty());
    {
        UniqueFd file(::open((dir_.path() + "/" + kConnectionIdsName).c_str(),
                             O_WRONLY | O_CREAT | O_CLOEXEC, 0640));
        ASSERT_EQ(::write(file.get(), "not a lease", 11), 11);
    }
    auto garbage = readConnectionIdLease(dirFd_.get(), dir_.path());
    EXPECT_EQ(garbage.end, 0u);
    EXPECT_NE(garbage.problem.find(dir_.path() + "/connection-ids: 11 bytes"), std::string::npos)
        << garbage.problem;
}

TEST_F(ConnectionIdLeaseTest, TheFirstBlockIsDurableBeforeAnyIdAndRenewedAheadPastItsHalf) {
    ConnectionIdLease lease(dirFd_.get(), dir_.path(), 10, 100);
    EXPECT_EQ(leasedEnd(), 110u) << "leased before the constructor returned";
    for (std::uint64_t id = 10; id < 59; ++id) lease.cover(id);
    std::this_thread::sleep_for(50ms);
    EXPECT_EQ(leasedEnd(), 110u) << "renewed before half the block was used";
    lease.cover(60);  // the half: a renewal starts, the id is covered already
    EXPECT_TRUE(leaseReaches(210)) << "no renewal past the half of the block";
    EXPECT_EQ(lease.end(), 210u);
}

TEST_F(ConnectionIdLeaseTest, IdsThatOutranTheLeaseWaitUntilItCoversThem) {
    ConnectionIdLease lease(dirFd_.get(), dir_.path(), 1, 100);
    lease.cover(5000);  // returns only once covered
    EXPECT_GT(lease.end(), 5000u);
    EXPECT_GT(leasedEnd(), 5000u) << "the id is handed out before its lease is durable";
}

// Workers racing far past the lease while a renewal is being written (here the block is tiny,
// so every write is outrun): each one that asked is covered by a later renewal, none waits
// for ever.
TEST_F(ConnectionIdLeaseTest, WorkersThatOutranARenewalBeingWrittenAreCoveredByTheNext) {
    ConnectionIdLease lease(dirFd_.get(), dir_.path(), 1, 16);
    std::atomic<std::uint64_t> next{1};
    constexpr int kWorkers = 4;
    constexpr std::uint64_t kIdsEach = 3000;
    std::vector<std::future<void>> workers;
    for (int w = 0; w < kWorkers; ++w)
        workers.push_back(std::async(std::launch::async, [&] {
            for (std::uint64_t i = 0; i < kIdsEach; ++i) lease.cover(next.fetch_add(1));
        }));
    for (auto& worker : workers)
        ASSERT_EQ(worker.wait_for(60s), std::future_status::ready)
            << "a worker still waits for its id to be covered";
    EXPECT_GE(lease.end(), next.load());
    EXPECT_GE(leasedEnd(), next.load()) << "an id was handed out beyond the durable lease";
}

TEST_F(ConnectionIdLeaseTest, ACleanStopShrinksTheLeaseToTheIdsUsed) {
    ConnectionIdLease lease(dirFd_.get(), dir_.path(), 1, 100);
    for (std::uint64_t id = 1; id < 42; ++id) lease.cover(id);
    lease.release(42);
    EXPECT_EQ(leasedEnd(), 42u);
    EXPECT_EQ(lease.end(), 42u);
}

TEST_F(ConnectionIdLeaseTest, ASuspendedLeaseIsABlockAheadAndWritesNothingUntilResumed) {
    ConnectionIdLease lease(dirFd_.get(), dir_.path(), 1, 100);
    for (std::uint64_t id = 1; id < 40; ++id) lease.cover(id);
    EXPECT_EQ(lease.suspend(40), 140u) << "a whole block past the next id";
    EXPECT_EQ(leasedEnd(), 140u);
    // The new process owns the file now: it writes its own lease past 140.
    replaceFileDurably(dirFd_.get(), dir_.path(), "connection-ids.new", "connection-ids",
                       encodeConnectionIdLease(1000));
    // Past the half, and even past the end: no renewal, no wait.
    for (std::uint64_t id = 40; id < 150; ++id) lease.cover(id);
    std::this_thread::sleep_for(50ms);
    EXPECT_EQ(leasedEnd(), 1000u) << "a suspended lease wrote the file";

    // The upgrade failed: renewals go on past what the failed process leased.
    lease.resume(1000);
    EXPECT_EQ(lease.end(), 1000u);
    lease.cover(960);
    EXPECT_TRUE(leaseReaches(1100)) << "no renewal after resume";
}

TEST_F(ConnectionIdLeaseTest, ARenewalThatFailsLetsIdsGoOnAndIsTriedAgain) {
    ConnectionIdLease lease(dirFd_.get(), dir_.path(), 1, 100);
    // The replacement file cannot be opened for writing: every renewal fails.
    const std::string blocker = dir_.path() + "/" + kConnectionIdsReplacing;
    ASSERT_EQ(::mkdir(blocker.c_str(), 0700), 0);
    auto covered = std::async(std::launch::async, [&] { lease.cover(500); });
    ASSERT_EQ(covered.wait_for(5s), std::future_status::ready)
        << "a worker waited on a lease that cannot be renewed";
    EXPECT_EQ(leasedEnd(), 101u) << "the old lease stays";
    ASSERT_EQ(::rmdir(blocker.c_str()), 0);
    lease.cover(560);  // another half block of ids: tried again, and now it succeeds
    EXPECT_TRUE(leaseReaches(661));
}

}  // namespace
}  // namespace splicegate::audit
