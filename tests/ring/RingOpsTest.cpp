// Ring's typed operations on the running kernel: each must reach the kernel as the operation it
// names, with its tag intact and its SQE flags in effect (a link holds the next one back).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/falloc.h>
#include <linux/openat2.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "common/Ring.h"
#include "common/UniqueFd.h"
#include "tests/support/Daemon.h"
#include "tests/support/Sockets.h"

namespace splicegate {
namespace {

CompletionTag tagOf(std::uint8_t op, std::uint32_t slot = 0) {
    return CompletionTag::of(RingOwner::Test, op, slot);
}

// Submits and reaps until `count` completions came (a bounded number of waits), by tag.
std::multimap<std::uint64_t, io_uring_cqe> reap(Ring& ring, std::size_t count) {
    std::multimap<std::uint64_t, io_uring_cqe> seen;
    for (int waits = 0; seen.size() < count && waits < 100; ++waits) {
        ring.submitAndWait(1000);
        ring.drainCompletions([&](const io_uring_cqe& cqe) { seen.emplace(cqe.user_data, cqe); });
    }
    return seen;
}
int resultOf(const std::multimap<std::uint64_t, io_uring_cqe>& seen, CompletionTag tag) {
    auto it = seen.find(tag.encode());
    return it == seen.end() ? INT32_MIN : it->second.res;
}

std::span<const std::byte> bytesOf(const std::string& text) {
    return std::as_bytes(std::span(text.data(), text.size()));
}

std::array<UniqueFd, 2> makePipe() {
    int ends[2];
    EXPECT_EQ(::pipe2(ends, O_CLOEXEC | O_NONBLOCK), 0);
    return {UniqueFd(ends[0]), UniqueFd(ends[1])};
}

TEST(RingOpsTest, FileOperationsRunInTheirLinkedOrder) {
    Ring ring(16, 1, 1);
    test::TempDir dir;
    // The paths are read when the SQE is submitted: they must live until then.
    const std::string first = dir.file("a");
    const std::string second = dir.file("b");
    open_how how{};
    how.flags = O_RDWR | O_CREAT | O_CLOEXEC;
    how.mode = 0600;
    ring.openat2(AT_FDCWD, first.c_str(), &how, tagOf(1));
    auto opened = reap(ring, 1);
    int rc = resultOf(opened, tagOf(1));
    ASSERT_GE(rc, 0) << "openat2: " << std::strerror(-rc);
    UniqueFd file(rc);

    const std::string text = "typed ring operations";
    ring.makeRoom(3);
    ring.fallocate(file.get(), FALLOC_FL_KEEP_SIZE, 0, 4096, tagOf(2), SqeFlag::Link);
    ring.write(file.get(), bytesOf(text), 0, 0, tagOf(3), SqeFlag::Link);
    ring.fsync(file.get(), SyncMode::DataOnly, tagOf(4));
    auto written = reap(ring, 3);
    EXPECT_EQ(resultOf(written, tagOf(2)), 0);
    EXPECT_EQ(resultOf(written, tagOf(3)), static_cast<int>(text.size()));
    EXPECT_EQ(resultOf(written, tagOf(4)), 0);

    std::array<std::byte, 64> back{};
    ring.read(file.get(), back, 0, tagOf(5));
    auto read = reap(ring, 1);
    ASSERT_EQ(resultOf(read, tagOf(5)), static_cast<int>(text.size()));
    EXPECT_EQ(std::memcmp(back.data(), text.data(), text.size()), 0);

    ring.renameat(AT_FDCWD, first.c_str(), AT_FDCWD, second.c_str(), 0, tagOf(6), SqeFlag::Link);
    ring.fsync(file.get(), SyncMode::Full, tagOf(7));
    auto renamed = reap(ring, 2);
    EXPECT_EQ(resultOf(renamed, tagOf(6)), 0);
    EXPECT_EQ(resultOf(renamed, tagOf(7)), 0);
    EXPECT_EQ(::access(second.c_str(), F_OK), 0);
}

// What a seam that holds a RingOps& does with the ring itself (the audit's direct writer): its
// buffers registered (RingRegistration) for writeFixed, and at shutdown a wait and a drain
// through the interface.
TEST(RingOpsTest, RegisteredBuffersWriteFixedAndTheInterfaceWaitsAndDrains) {
    Ring ring(8, 1, 1);
    RingOps& ops = ring;
    RingRegistration& registration = ring.registration();
    test::TempDir dir;
    UniqueFd file(::open(dir.file("fixed").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    ASSERT_TRUE(file);
    alignas(4096) static std::array<std::byte, 4096> buffer;
    std::memset(buffer.data(), 'f', buffer.size());
    iovec vector{buffer.data(), buffer.size()};
    int rc = registration.registerBuffers(&vector, 1);
    if (rc == -ENOMEM) GTEST_SKIP() << "RLIMIT_MEMLOCK is below one page";
    ASSERT_EQ(rc, 0) << std::strerror(-rc);
    EXPECT_EQ(registration.registerBuffers(&vector, 1), -EBUSY)
        << "a ring has one set of fixed buffers";
    ops.writeFixed(file.get(), std::span(buffer).first(100), 0, 0, 0, tagOf(1));
    std::vector<std::uint64_t> seen;
    std::vector<int> results;
    for (int waits = 0; seen.empty() && waits < 10; ++waits) {
        EXPECT_GE(ops.submitAndWait(1000), 0);
        ops.drainCompletions([&](const io_uring_cqe& cqe) {
            seen.push_back(cqe.user_data);
            results.push_back(cqe.res);
        });
    }
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0], tagOf(1).encode());
    EXPECT_EQ(results[0], 100);
    EXPECT_EQ(registration.unregisterBuffers(), 0);
    EXPECT_EQ(registration.registerBuffers(&vector, 1), 0) << "unregistered, the table is free";
    EXPECT_EQ(registration.unregisterBuffers(), 0);
    EXPECT_EQ(ops.submitAndWait(10), -ETIME) << "nothing in flight: the wait times out";
}

TEST(RingOpsTest, AFailedLinkCancelsWhatFollows) {
    Ring ring(8, 1, 1);
    const std::string text = "x";
    ring.makeRoom(3);
    ring.write(-1, bytesOf(text), 0, 0, tagOf(1), SqeFlag::Link);  // EBADF
    ring.nop(tagOf(2), SqeFlag::HardLink);
    ring.nop(tagOf(3));
    auto seen = reap(ring, 3);
    EXPECT_EQ(resultOf(seen, tagOf(1)), -EBADF);
    EXPECT_EQ(resultOf(seen, tagOf(2)), -ECANCELED) << "a soft link breaks on failure";
    EXPECT_EQ(resultOf(seen, tagOf(3)), -ECANCELED) << "the rest of the chain with it";
}

TEST(RingOpsTest, SpliceAndTeeMoveBetweenPipes) {
    Ring ring(8, 1, 1);
    auto source = makePipe();
    auto copy = makePipe();
    auto sink = makePipe();
    const std::string text = "spliced";
    ASSERT_EQ(::write(source[1].get(), text.data(), text.size()),
              static_cast<ssize_t>(text.size()));
    // Exactly the bytes there are: a short splice or tee breaks its link like a failure.
    auto length = static_cast<unsigned>(text.size());
    ring.tee(source[0].get(), copy[1].get(), length, SPLICE_F_NONBLOCK, tagOf(1), SqeFlag::Link);
    ring.splice(source[0].get(), -1, sink[1].get(), -1, length, SPLICE_F_NONBLOCK, tagOf(2));
    auto seen = reap(ring, 2);
    EXPECT_EQ(resultOf(seen, tagOf(1)), static_cast<int>(text.size()));
    EXPECT_EQ(resultOf(seen, tagOf(2)), static_cast<int>(text.size()));
    char back[16];
    EXPECT_EQ(::read(copy[0].get(), back, sizeof back), static_cast<ssize_t>(text.size()));
    EXPECT_EQ(::read(sink[0].get(), back, sizeof back), static_cast<ssize_t>(text.size()));
}

TEST(RingOpsTest, PollsTimeoutsAndCancelsNameTheirTargetByTag) {
    Ring ring(16, 1, 1);
    auto idle = makePipe();
    ring.pollAdd(idle[0].get(), POLLIN, tagOf(1));
    ring.pollAdd(idle[0].get(), POLLIN, tagOf(2));
    ring.pollAdd(idle[0].get(), POLLIN, tagOf(3));
    ring.submit();
    ring.pollRemove(tagOf(1), tagOf(4));
    ring.cancel(tagOf(2), tagOf(5));
    __kernel_timespec soon{0, 1000000};
    ring.timeout(&soon, 0, 0, tagOf(6));
    auto seen = reap(ring, 5);
    EXPECT_EQ(resultOf(seen, tagOf(1)), -ECANCELED);
    EXPECT_EQ(resultOf(seen, tagOf(4)), 0);
    EXPECT_EQ(resultOf(seen, tagOf(2)), -ECANCELED);
    EXPECT_EQ(resultOf(seen, tagOf(5)), 0);
    EXPECT_EQ(resultOf(seen, tagOf(6)), -ETIME);

    ring.cancelFd(idle[0].get(), IORING_ASYNC_CANCEL_ALL, tagOf(7));
    auto cancelled = reap(ring, 2);
    EXPECT_EQ(resultOf(cancelled, tagOf(3)), -ECANCELED);
    EXPECT_EQ(resultOf(cancelled, tagOf(7)), 1) << "one operation cancelled";
}

TEST(RingOpsTest, ConnectAcceptAndSendOverLoopback) {
    Ring ring(16, 1, 1);
    std::uint16_t port = 0;
    UniqueFd listener = test::listenTcp(port);
    ring.acceptMultishot(listener.get(), SOCK_CLOEXEC, tagOf(1));

    UniqueFd client(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    __kernel_timespec limit{10, 0};
    ring.connect(client.get(), reinterpret_cast<sockaddr*>(&address), sizeof address, &limit,
                 tagOf(2), tagOf(3));
    auto seen = reap(ring, 3);
    EXPECT_EQ(resultOf(seen, tagOf(2)), 0);
    EXPECT_EQ(resultOf(seen, tagOf(3)), -ECANCELED) << "the connect beat its timeout";
    auto accepted = seen.find(tagOf(1).encode());
    ASSERT_NE(accepted, seen.end());
    ASSERT_GE(accepted->second.res, 0);
    EXPECT_TRUE(accepted->second.flags & IORING_CQE_F_MORE) << "the multishot accept stays armed";
    UniqueFd server(accepted->second.res);

    const std::string text = "ping";
    ring.send(client.get(), bytesOf(text), MSG_NOSIGNAL, tagOf(4));
    auto sent = reap(ring, 1);
    EXPECT_EQ(resultOf(sent, tagOf(4)), static_cast<int>(text.size()));
    char back[8];
    EXPECT_EQ(::recv(server.get(), back, sizeof back, 0), static_cast<ssize_t>(text.size()));
    ring.cancel(tagOf(1), tagOf(5));
    reap(ring, 2);
}

}  // namespace
}  // namespace splicegate
