// DirectDataWriter (audit/DirectDataWriter.h) on a real io_uring and real files under /var/tmp:
// bytes read back exactly whatever the path they took (memcpy or pipe, O_DIRECT or buffered,
// fixed or plain buffers, fdatasync or RWF_DSYNC); a tail block written padded and rewritten;
// back-pressure when the buffer is full; a roll to the next file; write and fdatasync errors from
// the kernel itself (/dev/full refuses writes, /dev/null refuses fdatasync, a read-only fd
// refuses both) reported once as lost LSN ranges and never retried; and a filesystem that refuses
// O_DIRECT (ramfs, mounted in a private mount namespace of a child process).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "audit/DirectDataWriter.h"
#include "common/Ring.h"
#include "common/UniqueFd.h"
#include "tests/support/Daemon.h"

namespace splicegate::audit {
namespace {

constexpr std::size_t kBlock = LogBuffer::kAlignment;

// A private directory on a disk filesystem, removed with everything in it.
class ScratchDir : public test::TempDir {
  public:
    ScratchDir() : TempDir("/var/tmp") {}
};

UniqueFd createFile(const std::string& path) {
    return UniqueFd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
}

std::string readAll(const std::string& path) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    std::string content;
    if (!fd) return content;
    char chunk[65536];
    for (;;) {
        auto got = ::read(fd.get(), chunk, sizeof chunk);
        if (got <= 0) break;
        content.append(chunk, static_cast<std::size_t>(got));
    }
    return content;
}

std::string pattern(std::size_t length, unsigned seed) {
    std::mt19937 random(seed);
    std::string bytes(length, '\0');
    for (auto& byte : bytes) byte = static_cast<char>(random());
    return bytes;
}

DirectLogOptions smallOptions() {
    DirectLogOptions options;
    options.bufferBytes = 256 * 1024;  // 4 buffers of 64 KiB
    options.writeBytes = 64 * 1024;
    options.maxWritesInFlight = 2;
    return options;
}

// Routes the ring's completions to the writer until `done` (bounded: 400 waits of 50 ms).
bool driveUntil(Ring& ring, DirectDataWriter& writer, const std::function<bool()>& done) {
    for (int round = 0; round < 400 && !done(); ++round) {
        ring.submitAndWait(50);
        ring.drainCompletions([&](const io_uring_cqe& cqe) {
            auto tag = CompletionTag::decode(cqe.user_data);
            EXPECT_EQ(tag.owner, RingOwner::AuditLog);
            writer.onCompletion(tag, cqe.res);
        });
    }
    return done();
}

bool commitAndWait(Ring& ring, DirectDataWriter& writer) {
    writer.commit();
    return driveUntil(ring, writer,
                      [&] { return writer.durableLsn() == writer.appendedLsn() && writer.idle(); });
}

// Appends all of `bytes` in pieces of `piece`, waiting for room when the buffer is full.
void appendAll(Ring& ring, DirectDataWriter& writer, const std::string& bytes, std::size_t piece) {
    std::size_t done = 0;
    while (done < bytes.size()) {
        auto want = std::min(piece, bytes.size() - done);
        auto appended = writer.append(bytes.data() + done, want);
        ASSERT_GE(appended.bytes, 0);
        ASSERT_EQ(appended.lsn, writer.appendedLsn() - static_cast<std::uint64_t>(appended.bytes));
        done += static_cast<std::size_t>(appended.bytes);
        if (static_cast<std::size_t>(appended.bytes) < want) {
            EXPECT_TRUE(writer.full());
            ASSERT_TRUE(driveUntil(ring, writer, [&] { return !writer.full(); }));
        }
    }
}

class DirectDataWriterTest : public ::testing::Test {
  protected:
    Ring ring_{64, 2, 2};
    ScratchDir dir_;
};

TEST_F(DirectDataWriterTest, BytesFromMemoryAndPipeReadBackExactly) {
    DirectDataWriter writer(ring_, ring_.registration(), smallOptions());
    auto path = dir_.file("a.data");
    auto fd = createFile(path);
    ASSERT_TRUE(fd);
    ASSERT_EQ(writer.startFile(fd.get(), 1), 0);
    ASSERT_TRUE(writer.directIo()) << "/var/tmp refuses O_DIRECT here";
    EXPECT_TRUE(writer.fixedBuffers());

    // Odd piece sizes cross buffer and block boundaries; 1 MiB is four times the buffer.
    auto memoryPart = pattern(1 << 20, 1);
    appendAll(ring_, writer, memoryPart, 10007);

    int pipeFds[2];
    ASSERT_EQ(::pipe2(pipeFds, O_NONBLOCK | O_CLOEXEC), 0);
    UniqueFd pipeRead(pipeFds[0]), pipeWrite(pipeFds[1]);
    auto pipePart = pattern(300000, 2);
    std::size_t sent = 0;
    while (sent < pipePart.size()) {
        auto put = ::write(pipeWrite.get(), pipePart.data() + sent,
                           std::min<std::size_t>(30011, pipePart.size() - sent));
        ASSERT_GT(put, 0);
        std::size_t inPipe = static_cast<std::size_t>(put);
        while (inPipe > 0) {
            auto appended = writer.appendFromPipe(pipeRead.get(), inPipe);
            ASSERT_GE(appended.bytes, 0);
            ASSERT_EQ(appended.fileOffset, memoryPart.size() + sent);
            inPipe -= static_cast<std::size_t>(appended.bytes);
            sent += static_cast<std::size_t>(appended.bytes);
            if (inPipe > 0) {
                ASSERT_TRUE(driveUntil(ring_, writer, [&] { return !writer.full(); }));
            }
        }
    }
    EXPECT_EQ(writer.appendFromPipe(pipeRead.get(), 100).bytes, -EAGAIN);

    ASSERT_TRUE(commitAndWait(ring_, writer));
    auto expected = memoryPart + pipePart;
    auto content = readAll(path);
    ASSERT_GE(content.size(), expected.size());
    EXPECT_EQ(content.size() % kBlock, 0u);
    EXPECT_TRUE(content.compare(0, expected.size(), expected) == 0);
    EXPECT_EQ(content.find_first_not_of('\0', expected.size()), std::string::npos)
        << "padding after the last byte is zeros";
    EXPECT_EQ(writer.stats().appendedBytes, expected.size());
    EXPECT_TRUE(writer.takeFailures().empty());
}

TEST_F(DirectDataWriterTest, PartialTailBlockIsWrittenPaddedThenRewritten) {
    DirectDataWriter writer(ring_, ring_.registration(), smallOptions());
    auto path = dir_.file("tail.data");
    auto fd = createFile(path);
    ASSERT_EQ(writer.startFile(fd.get(), 7), 0);
    ASSERT_TRUE(writer.directIo());

    auto first = pattern(100, 3);
    ASSERT_EQ(writer.append(first.data(), first.size()).bytes, 100);
    ASSERT_TRUE(commitAndWait(ring_, writer));
    auto content = readAll(path);
    ASSERT_EQ(content.size(), kBlock);
    EXPECT_EQ(content.substr(0, 100), first);
    EXPECT_EQ(content.find_first_not_of('\0', 100), std::string::npos);

    // The next commit rewrites the partly filled block with the bytes that joined it.
    auto second = pattern(5000, 4);
    ASSERT_EQ(writer.append(second.data(), second.size()).bytes, 5000);
    ASSERT_TRUE(commitAndWait(ring_, writer));
    content = readAll(path);
    ASSERT_EQ(content.size(), 2 * kBlock);
    EXPECT_EQ(content.substr(0, 5100), first + second);
    EXPECT_EQ(content.find_first_not_of('\0', 5100), std::string::npos);

    // Filling the buffer writes it once more, whole: the tail blocks end up as if written once.
    auto rest = pattern(smallOptions().writeBytes - 5100 + 10, 5);
    appendAll(ring_, writer, rest, rest.size());
    ASSERT_TRUE(commitAndWait(ring_, writer));
    EXPECT_EQ(readAll(path).substr(0, 5100 + rest.size()), first + second + rest);
    EXPECT_EQ(writer.stats().tailWrites, 3u);  // two commits mid-buffer, the last one's 10 bytes
}

TEST_F(DirectDataWriterTest, FullBufferCutsAppendsShortWithoutBlocking) {
    auto options = smallOptions();
    DirectDataWriter writer(ring_, ring_.registration(), options);
    auto path = dir_.file("full.data");
    auto fd = createFile(path);
    ASSERT_EQ(writer.startFile(fd.get(), 1), 0);

    auto bytes = pattern(options.bufferBytes + 12345, 6);
    // No completion is routed to the writer, so none of its buffers comes back.
    auto appended = writer.append(bytes.data(), bytes.size());
    EXPECT_EQ(appended.bytes, static_cast<long>(options.bufferBytes));
    EXPECT_TRUE(writer.full());
    EXPECT_EQ(writer.room(), 0u);
    EXPECT_EQ(writer.append(bytes.data(), 1).bytes, 0);
    EXPECT_GE(writer.stats().fullAppends, 2u);

    int pipeFds[2];
    ASSERT_EQ(::pipe2(pipeFds, O_NONBLOCK | O_CLOEXEC), 0);
    UniqueFd pipeRead(pipeFds[0]), pipeWrite(pipeFds[1]);
    ASSERT_EQ(::write(pipeWrite.get(), "abc", 3), 3);
    EXPECT_EQ(writer.appendFromPipe(pipeRead.get(), 3).bytes, 0) << "the pipe keeps its bytes";

    // Writes completing give room back; the rest goes in and everything reads back.
    ASSERT_TRUE(driveUntil(ring_, writer, [&] { return !writer.full(); }));
    std::size_t rest = bytes.size() - options.bufferBytes;
    std::size_t done = 0;
    while (done < rest) {
        auto more = writer.append(bytes.data() + options.bufferBytes + done, rest - done);
        ASSERT_GE(more.bytes, 0);
        done += static_cast<std::size_t>(more.bytes);
        if (done < rest) {
            ASSERT_TRUE(driveUntil(ring_, writer, [&] { return !writer.full(); }));
        }
    }
    ASSERT_EQ(writer.appendFromPipe(pipeRead.get(), 3).bytes, 3);
    ASSERT_TRUE(commitAndWait(ring_, writer));
    EXPECT_EQ(readAll(path).substr(0, bytes.size() + 3), bytes + "abc");
}

TEST_F(DirectDataWriterTest, DelayedWritesHoldTheBufferFullUntilTheyComplete) {
    auto options = smallOptions();
    options.writeDelay = std::chrono::milliseconds(300);
    DirectDataWriter writer(ring_, ring_.registration(), options);
    auto path = dir_.file("delay.data");
    auto fd = createFile(path);
    ASSERT_EQ(writer.startFile(fd.get(), 1), 0);

    auto bytes = pattern(options.bufferBytes, 7);
    ASSERT_EQ(writer.append(bytes.data(), bytes.size()).bytes, static_cast<long>(bytes.size()));
    ASSERT_GT(io_uring_submit(ring_.raw()), 0);
    EXPECT_TRUE(writer.full());
    EXPECT_FALSE(writer.idle());
    ASSERT_TRUE(commitAndWait(ring_, writer));
    EXPECT_EQ(readAll(path), bytes);
}

TEST_F(DirectDataWriterTest, NextFileGetsOffsetsFromZeroAndThePreviousTailIsSyncedWithoutACommit) {
    DirectDataWriter writer(ring_, ring_.registration(), smallOptions());
    auto pathA = dir_.file("a.data"), pathB = dir_.file("b.data");
    auto fdA = createFile(pathA), fdB = createFile(pathB);
    ASSERT_EQ(writer.startFile(fdA.get(), 1), 0);
    auto partA = pattern(70000, 8), partB = pattern(3000, 9);
    appendAll(ring_, writer, partA, partA.size());
    ASSERT_EQ(writer.startFile(fdB.get(), 2), 0);
    auto appended = writer.append(partB.data(), partB.size());
    ASSERT_EQ(appended.bytes, 3000);
    EXPECT_EQ(appended.fileOffset, 0u);
    EXPECT_EQ(appended.lsn, partA.size());

    ASSERT_TRUE(driveUntil(ring_, writer, [&] { return writer.durableLsn() >= partA.size(); }));
    EXPECT_EQ(writer.durableLsn(), partA.size()) << "file B waits for a commit";
    ASSERT_TRUE(commitAndWait(ring_, writer));
    EXPECT_EQ(readAll(pathA), partA) << "cut to its last byte once done: no padding";
    EXPECT_EQ(readAll(pathB).substr(0, partB.size()), partB);
    EXPECT_EQ(writer.stats().syncs, 2u);
}

TEST_F(DirectDataWriterTest, ReservationFilledLateHoldsBackWhatFollowsIt) {
    DirectDataWriter writer(ring_, ring_.registration(), smallOptions());
    auto path = dir_.file("reserve.data");
    auto fd = createFile(path);
    ASSERT_EQ(writer.startFile(fd.get(), 1), 0);
    auto a = pattern(1000, 20), b = pattern(2000, 21);
    LogReservation first, second;
    ASSERT_EQ(writer.reserve(a.size(), first), 0);
    ASSERT_EQ(writer.reserve(b.size(), second), 0);
    ASSERT_EQ(first.memory.size(), a.size());
    ASSERT_EQ(second.memory.size(), b.size());
    EXPECT_EQ(second.fileOffset, a.size());
    std::memcpy(second.memory.data(), b.data(), b.size());
    writer.complete(second, b.size());
    writer.commit();
    ASSERT_TRUE(driveUntil(ring_, writer, [&] { return writer.idle(); }));
    EXPECT_EQ(writer.durableLsn(), 0u) << "nothing after an open reservation is durable";

    std::memcpy(first.memory.data(), a.data(), a.size());
    writer.complete(first, a.size());
    ASSERT_TRUE(commitAndWait(ring_, writer));
    EXPECT_EQ(readAll(path).substr(0, 3000), a + b);
}

TEST_F(DirectDataWriterTest, ShortFilledReservationIsGivenBackAtTheEndOrZeroedInside) {
    DirectDataWriter writer(ring_, ring_.registration(), smallOptions());
    auto path = dir_.file("short.data");
    auto fd = createFile(path);
    ASSERT_EQ(writer.startFile(fd.get(), 1), 0);
    auto bytes = pattern(3000, 22);
    LogReservation only;
    ASSERT_EQ(writer.reserve(1000, only), 0);
    std::memcpy(only.memory.data(), bytes.data(), 400);
    writer.complete(only, 400);
    EXPECT_EQ(writer.appendedLsn(), 400u) << "the last reservation's rest goes back";

    LogReservation x, y;
    ASSERT_EQ(writer.reserve(1000, x), 0);
    ASSERT_EQ(writer.reserve(1000, y), 0);
    std::memset(x.memory.data(), 'x', x.memory.size());  // stale bytes that must not stay
    std::memcpy(x.memory.data(), bytes.data() + 400, 300);
    writer.complete(x, 300);
    std::memcpy(y.memory.data(), bytes.data() + 700, 1000);
    writer.complete(y, 1000);
    EXPECT_EQ(writer.appendedLsn(), 2400u);
    ASSERT_TRUE(commitAndWait(ring_, writer));
    auto content = readAll(path);
    EXPECT_EQ(content.substr(0, 700), bytes.substr(0, 700));
    EXPECT_EQ(content.substr(700, 700), std::string(700, '\0')) << "a gap no record names";
    EXPECT_EQ(content.substr(1400, 1000), bytes.substr(700, 1000));
}

TEST_F(DirectDataWriterTest, DsyncWritesNeedNoFdatasync) {
    auto options = smallOptions();
    options.dsyncWrites = true;
    DirectDataWriter writer(ring_, ring_.registration(), options);
    auto path = dir_.file("dsync.data");
    auto fd = createFile(path);
    ASSERT_EQ(writer.startFile(fd.get(), 1), 0);
    auto bytes = pattern(200000, 10);
    appendAll(ring_, writer, bytes, 4099);
    ASSERT_TRUE(commitAndWait(ring_, writer));
    EXPECT_EQ(writer.stats().syncs, 0u);
    EXPECT_EQ(readAll(path).substr(0, bytes.size()), bytes);
}

TEST_F(DirectDataWriterTest, RingWithFixedBuffersAlreadyFallsBackToPlainWrites) {
    std::vector<char> other(kBlock);
    iovec vector{other.data(), other.size()};
    ASSERT_EQ(io_uring_register_buffers(ring_.raw(), &vector, 1), 0);
    {
        DirectDataWriter writer(ring_, ring_.registration(), smallOptions());
        EXPECT_FALSE(writer.fixedBuffers());
        auto path = dir_.file("plain.data");
        auto fd = createFile(path);
        ASSERT_EQ(writer.startFile(fd.get(), 1), 0);
        auto bytes = pattern(150001, 11);
        appendAll(ring_, writer, bytes, bytes.size());
        ASSERT_TRUE(commitAndWait(ring_, writer));
        EXPECT_EQ(readAll(path).substr(0, bytes.size()), bytes);
    }
    io_uring_unregister_buffers(ring_.raw());
}

TEST_F(DirectDataWriterTest, WriteErrorReportsTheLostRangeOnceAndRefusesThatFile) {
    DirectDataWriter writer(ring_, ring_.registration(), smallOptions());
    UniqueFd full(::open("/dev/full", O_WRONLY | O_CLOEXEC));
    ASSERT_TRUE(full) << "/dev/full: " << std::strerror(errno);
    ASSERT_EQ(writer.startFile(full.get(), 41), 0);
    auto bytes = pattern(10000, 12);
    ASSERT_EQ(writer.append(bytes.data(), bytes.size()).bytes, 10000);
    ASSERT_TRUE(commitAndWait(ring_, writer)) << "lost bytes count as resolved";

    auto failures = writer.takeFailures();
    ASSERT_EQ(failures.size(), 1u);
    EXPECT_EQ(failures[0].fileId, 41u);
    EXPECT_EQ(failures[0].error, -ENOSPC);
    EXPECT_TRUE(failures[0].inWrite) << "a write failed, not an fdatasync";
    EXPECT_EQ(failures[0].lostFrom, 0u);
    EXPECT_EQ(failures[0].lostTo, 10000u);
    EXPECT_EQ(writer.append(bytes.data(), 10).bytes, -EIO);
    EXPECT_EQ(writer.stats().writes, 1u) << "never retried";

    // A new file takes appends again; the failed one is let go.
    auto path = dir_.file("after.data");
    auto fd = createFile(path);
    ASSERT_EQ(writer.startFile(fd.get(), 42), 0);
    auto after = pattern(5000, 13);
    auto appended = writer.append(after.data(), after.size());
    ASSERT_EQ(appended.bytes, 5000);
    EXPECT_EQ(appended.lsn, 10000u);
    ASSERT_TRUE(commitAndWait(ring_, writer));
    EXPECT_TRUE(writer.takeFailures().empty());
    EXPECT_EQ(readAll(path).substr(0, after.size()), after);
}

TEST_F(DirectDataWriterTest, WriteErrorOnARealFileWithWritesInFlightFreesEveryBuffer) {
    auto options = smallOptions();
    DirectDataWriter writer(ring_, ring_.registration(), options);
    auto path = dir_.file("ro.data");
    { auto created = createFile(path); }
    UniqueFd readOnly(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_EQ(writer.startFile(readOnly.get(), 5), 0);
    EXPECT_TRUE(writer.directIo());
    auto bytes = pattern(options.bufferBytes, 14);
    ASSERT_EQ(writer.append(bytes.data(), bytes.size()).bytes, static_cast<long>(bytes.size()));
    EXPECT_TRUE(writer.full());
    ASSERT_TRUE(driveUntil(ring_, writer, [&] { return writer.idle(); }));
    auto failures = writer.takeFailures();
    ASSERT_EQ(failures.size(), 1u);
    EXPECT_EQ(failures[0].error, -EBADF);
    EXPECT_EQ(failures[0].lostTo, bytes.size());
    EXPECT_EQ(writer.room(), options.bufferBytes) << "every buffer is free again";
    EXPECT_EQ(writer.durableLsn(), writer.appendedLsn());
}

TEST_F(DirectDataWriterTest, FdatasyncErrorIsNeverRetried) {
    DirectDataWriter writer(ring_, ring_.registration(), smallOptions());
    // /dev/null takes every write and refuses fdatasync (EINVAL): the sync fails, not the write.
    UniqueFd null(::open("/dev/null", O_WRONLY | O_CLOEXEC));
    ASSERT_EQ(writer.startFile(null.get(), 9), 0);
    auto bytes = pattern(3000, 15);
    ASSERT_EQ(writer.append(bytes.data(), bytes.size()).bytes, 3000);
    ASSERT_TRUE(commitAndWait(ring_, writer));
    auto failures = writer.takeFailures();
    ASSERT_EQ(failures.size(), 1u);
    EXPECT_EQ(failures[0].fileId, 9u);
    EXPECT_EQ(failures[0].error, -EINVAL);
    EXPECT_FALSE(failures[0].inWrite) << "the fdatasync failed, not a write";
    EXPECT_EQ(failures[0].lostTo, 3000u);
    writer.commit();
    ASSERT_TRUE(driveUntil(ring_, writer, [&] { return writer.idle(); }));
    EXPECT_EQ(writer.stats().syncs, 1u);
    EXPECT_EQ(writer.append(bytes.data(), 1).bytes, -EIO);
}

// ramfs has no direct I/O (open and F_SETFL with O_DIRECT give EINVAL). Mounting it needs a
// mount namespace, so the scenario runs in a child process: 0 pass, 77 skip, else a failure
// described on the child's stderr (a pipe read here).
int bufferedScenario(int logPipe) {
    ::dup2(logPipe, STDERR_FILENO);
    if (::unshare(CLONE_NEWNS) != 0) {
        uid_t uid = ::getuid();
        gid_t gid = ::getgid();
        if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return 77;
        auto writeFile = [](const char* path, const std::string& text) {
            UniqueFd fd(::open(path, O_WRONLY | O_CLOEXEC));
            return fd &&
                   ::write(fd.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size());
        };
        if (!writeFile("/proc/self/setgroups", "deny") ||
            !writeFile("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1") ||
            !writeFile("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1"))
            return 77;
    }
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return 77;
    std::string mountPoint = "/var/tmp/splicegate-ramfs." + std::to_string(::getpid());
    if (::mkdir(mountPoint.c_str(), 0700) != 0) return 2;
    int rc = 0;
    if (::mount("none", mountPoint.c_str(), "ramfs", 0, nullptr) != 0) {
        rc = 77;
    } else {
        auto path = mountPoint + "/log.data";
        // (the refused open still creates the file: probe on a name of its own)
        auto probePath = mountPoint + "/probe";
        UniqueFd probe(::open(probePath.c_str(), O_WRONLY | O_CREAT | O_DIRECT | O_CLOEXEC, 0600));
        if (probe) {
            rc = 77;  // this kernel's ramfs takes O_DIRECT: nothing to fall back from
        } else {
            try {
                Ring ring(64, 2, 2);
                DirectDataWriter writer(ring, ring.registration(), smallOptions());
                auto fd = createFile(path);
                auto second = createFile(path + ".2");
                auto bytes = pattern(200003, 16);
                if (writer.startFile(fd.get(), 1) != 0 || writer.directIo()) {
                    rc = 3;
                } else {
                    appendAll(ring, writer, bytes, 7001);
                    bool done = commitAndWait(ring, writer) && writer.takeFailures().empty();
                    // Exact length: buffered writes need no padding.
                    if (!done || readAll(path) != bytes) rc = 4;
                    // A second file on the same filesystem: no second log line.
                    if (rc == 0 && writer.startFile(second.get(), 2) != 0) rc = 5;
                    if (rc == 0 && ::testing::Test::HasFailure()) rc = 6;
                }
            } catch (const std::exception& e) {
                std::fprintf(stderr, "child: %s\n", e.what());
                rc = 7;
            }
        }
        ::umount2(mountPoint.c_str(), MNT_DETACH);
    }
    ::rmdir(mountPoint.c_str());
    return rc;
}

TEST(DirectDataWriterBufferedTest, FilesystemRefusingODirectGetsBufferedWritesAndOneLogLine) {
    int logPipe[2];
    ASSERT_EQ(::pipe2(logPipe, O_CLOEXEC), 0);
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        ::close(logPipe[0]);
        std::fflush(nullptr);
        ::_exit(bufferedScenario(logPipe[1]));
    }
    ::close(logPipe[1]);
    std::string log;
    char chunk[4096];
    for (ssize_t got; (got = ::read(logPipe[0], chunk, sizeof chunk)) > 0;)
        log.append(chunk, static_cast<std::size_t>(got));
    ::close(logPipe[0]);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status)) << log;
    if (WEXITSTATUS(status) == 77)
        GTEST_SKIP() << "no ramfs in a private mount namespace here (or it takes O_DIRECT)";
    ASSERT_EQ(WEXITSTATUS(status), 0) << log;
    std::size_t lines = 0;
    for (std::size_t at = log.find("refuses O_DIRECT"); at != std::string::npos;
         at = log.find("refuses O_DIRECT", at + 1))
        ++lines;
    EXPECT_EQ(lines, 1u) << log;
}

}  // namespace
}  // namespace splicegate::audit
