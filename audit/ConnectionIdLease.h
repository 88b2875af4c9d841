#pragma once
// Connection ids are never handed out twice, also when a crash lost the records that named them
// (a torn index tail, a batch interval not yet durable): the daemon leases ids in blocks, and each
// lease is durable in `connection-ids` (FORMAT.md "Connection id lease") before an id of it is
// used. A clean stop shrinks the lease to the ids actually used, so ids continue without a gap;
// after a crash the next daemon starts past the whole lease.
//
// Renewal runs on a thread of its own: a worker only reads an atomic, and waits only when the ids
// outran a renewal by half a block (a million accepts during one fdatasync).
// Error contract: set-up throws std::system_error naming the file; a failed renewal is logged
// (once per failure) and ids go on past the lease rather than refuse connections.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "audit/Records.h"

namespace splicegate::audit {

struct LeaseRead {
    std::uint64_t end = 0;  // 0: no lease (none written yet)
    std::string problem;    // set when a file was there and could not be read as a lease
};
// Reads the lease a previous daemon left in the directory `dirFd` (`dir` for messages).
LeaseRead readConnectionIdLease(int dirFd, const std::string& dir);

class ConnectionIdLease {
  public:
    static constexpr std::uint64_t kDefaultBlock = std::uint64_t{1} << 20;

    // Leases [first, first + block) durably before returning, then renews in the background.
    ConnectionIdLease(int dirFd, std::string dir, std::uint64_t first,
                      std::uint64_t block = kDefaultBlock);
    ~ConnectionIdLease();
    ConnectionIdLease(const ConnectionIdLease&) = delete;
    ConnectionIdLease& operator=(const ConnectionIdLease&) = delete;

    // `id` was just handed out. Past half the lease a renewal starts; returns once `id` is
    // covered (at once, unless the ids outran the renewal or a renewal failed).
    void cover(std::uint64_t id) noexcept {
        if (id < renewAt_.load(std::memory_order_acquire)) return;
        coverSlow(id);
    }
    // Clean stop: no id at or past `next` was handed out. The lease shrinks to it.
    void release(std::uint64_t next) noexcept;
    // An upgrade: the new process leases past this one's end and writes the file from then on,
    // so this one writes it no more (a renewal would shrink the new one's lease). First the lease
    // is extended to a whole block past `next` (the next id this process hands out), so that
    // the ids it hands out until it stops accepting stay below the end returned; an id past it
    // (a million accepts during the hand-off) is logged as one the new process may hand out too.
    // Throws std::system_error naming the file when that extension cannot be written.
    std::uint64_t suspend(std::uint64_t next);
    // The upgrade failed: renewals go on, the lease at least `atLeast` (the end the failed new
    // process wrote; the caller moves the next id past it too).
    void resume(std::uint64_t atLeast) noexcept;
    std::uint64_t end() const noexcept;

  private:
    void coverSlow(std::uint64_t id) noexcept;
    void renewLoop() noexcept;
    void stopRenewer() noexcept;
    void write(std::uint64_t end);

    const int dirFd_;
    const std::string dir_;
    const std::uint64_t block_;
    std::atomic<std::uint64_t> renewAt_;
    mutable std::mutex mutex_;
    std::condition_variable wake_;     // the renewer: wanted_ or stopping_
    std::condition_variable renewed_;  // workers past the lease
    std::uint64_t end_ = 0;            // durable
    std::uint64_t highest_ = 0;        // the highest id seen past renewAt_
    bool wanted_ = false;
    bool failing_ = false;  // the last renewal failed: ids go on uncovered, renewals go on
    bool stopping_ = false;
    bool suspended_ = false;  // handed to an upgrade's new process: nothing is written
    bool writing_ = false;    // the renewer writes the file (the mutex is not held then)
    bool warnedPastEnd_ = false;
    std::thread renewer_;
};

}  // namespace splicegate::audit
