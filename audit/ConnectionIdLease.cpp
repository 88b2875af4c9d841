#include "audit/ConnectionIdLease.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <exception>

#include "audit/AuditDirectory.h"
#include "common/Error.h"
#include "common/Log.h"
#include "common/ThreadName.h"

namespace splicegate::audit {

LeaseRead readConnectionIdLease(int dirFd, const std::string& dir) {
    LeaseRead read;
    const std::string path = dir + "/" + kConnectionIdsName;
    int fd = openInDirectory(dirFd, kConnectionIdsName, O_RDONLY);
    if (fd == -ENOENT) return read;
    if (fd < 0) {
        read.problem = path + ": " + errnoText(fd);
        return read;
    }
    UniqueFd file(fd);
    char bytes[kConnectionIdLeaseSize + 1];
    ssize_t n = ::pread(file.get(), bytes, sizeof bytes, 0);
    if (n < 0) {
        read.problem = path + ": " + errnoText(-errno);
        return read;
    }
    std::string problem;
    if (auto end = decodeConnectionIdLease({bytes, static_cast<std::size_t>(n)}, problem))
        read.end = *end;
    else
        read.problem = path + ": " + problem;
    return read;
}

ConnectionIdLease::ConnectionIdLease(int dirFd, std::string dir, std::uint64_t first,
                                     std::uint64_t block)
    : dirFd_(dirFd), dir_(std::move(dir)), block_(std::max<std::uint64_t>(block, 2)) {
    end_ = first + block_;
    write(end_);
    renewAt_.store(end_ - block_ / 2, std::memory_order_release);
    renewer_ = std::thread([this] {
        nameThisThread("sg-id-lease");
        renewLoop();
    });
}

ConnectionIdLease::~ConnectionIdLease() {
    stopRenewer();
}

void ConnectionIdLease::stopRenewer() noexcept {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    renewed_.notify_all();
    if (renewer_.joinable()) renewer_.join();
}

std::uint64_t ConnectionIdLease::end() const noexcept {
    std::lock_guard lock(mutex_);
    return end_;
}

void ConnectionIdLease::coverSlow(std::uint64_t id) noexcept {
    std::unique_lock lock(mutex_);
    highest_ = std::max(highest_, id);
    if (suspended_) {
        // No renewal comes while the new process holds the file: waiting would stop the worker.
        if (id >= end_ && !warnedPastEnd_) {
            warnedPastEnd_ = true;
            logError("audit: connection id ", id, " is past the lease handed over to the upgrade (",
                     end_, "); the new process may hand it out too");
        }
        return;
    }
    if (!wanted_) {
        wanted_ = true;
        wake_.notify_one();
    }
    renewed_.wait(lock, [&] { return id < end_ || failing_ || stopping_; });
}

void ConnectionIdLease::renewLoop() noexcept {
    std::unique_lock lock(mutex_);
    for (;;) {
        wake_.wait(lock, [&] { return (wanted_ && !suspended_) || stopping_; });
        if (stopping_) return;
        std::uint64_t target = std::max(end_, highest_ + 1) + block_;
        writing_ = true;
        lock.unlock();
        bool written = true;
        try {
            write(target);
        } catch (const std::exception& error) {
            written = false;
            logError("audit: renewing the connection id lease: ", error.what(),
                     "; ids go on past it (a crash now could let the next daemon reuse some)");
        }
        lock.lock();
        writing_ = false;
        if (written) end_ = target;
        failing_ = !written;
        // After a failure the next try waits for another half block of ids.
        renewAt_.store(written ? end_ - block_ / 2 : highest_ + block_ / 2,
                       std::memory_order_release);
        // Ids that passed the new mark while the file was written want the next renewal now:
        // their workers asked once already and wait for it.
        wanted_ = written && highest_ >= renewAt_.load(std::memory_order_relaxed);
        renewed_.notify_all();
    }
}

std::uint64_t ConnectionIdLease::suspend(std::uint64_t next) {
    std::unique_lock lock(mutex_);
    suspended_ = true;
    warnedPastEnd_ = false;
    // A renewal being written finishes first: after this nothing of ours reaches the file.
    renewed_.wait(lock, [&] { return !writing_; });
    const std::uint64_t target = std::max(end_, next + block_);
    if (target != end_) {
        try {
            write(target);  // the mutex held: workers past renewAt_ wait for it, as for a renewal
        } catch (...) {
            suspended_ = false;
            throw;
        }
        end_ = target;
    }
    // Every id below the end passes cover() at once; past it coverSlow() only warns.
    renewAt_.store(end_, std::memory_order_release);
    return end_;
}

void ConnectionIdLease::resume(std::uint64_t atLeast) noexcept {
    {
        std::lock_guard lock(mutex_);
        suspended_ = false;
        end_ = std::max(end_, atLeast);
        renewAt_.store(end_ - block_ / 2, std::memory_order_release);
        wanted_ = highest_ >= end_ - block_ / 2;
    }
    wake_.notify_one();
    renewed_.notify_all();
}

void ConnectionIdLease::release(std::uint64_t next) noexcept {
    stopRenewer();
    if (next == end_) return;
    try {
        write(next);
        end_ = next;
    } catch (const std::exception& error) {
        // The larger lease stays: the next daemon skips ids, it reuses none.
        logWarn("audit: shrinking the connection id lease: ", error.what());
    }
}

void ConnectionIdLease::write(std::uint64_t end) {
    replaceFileDurably(dirFd_, dir_, kConnectionIdsReplacing, kConnectionIdsName,
                       encodeConnectionIdLease(end));
}

}  // namespace splicegate::audit
