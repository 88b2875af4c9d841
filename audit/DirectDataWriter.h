#pragma once
// The direct audit writer: one worker's audited bytes, appended to a log buffer in user memory
// (audit/LogBuffer) and written to the segment's data file with O_DIRECT through the worker's
// io_uring, several writes in flight (docs/kernel-notes.md §12: the page cache throttles a
// writer that splices faster than the disk, and sleeps the thread that does it; O_DIRECT writes
// from our own buffers cost one memcpy and never enter writeback throttling).
//
// The log is a byte sequence numbered by LSN (log sequence number: bytes appended since the
// writer was made, over all files). Each file receives a contiguous LSN range at offsets from 0.
// A buffer covers one aligned file range; it is written once full, and its partial tail block
// when a commit needs it: padded with zeros to the block and rewritten once more bytes arrived,
// as WAL writers do (audit/FORMAT.md "Direct writer"). A filesystem that refuses O_DIRECT gets
// buffered writes from the same buffers (one log line), which io_uring runs in its own workers.
//
// The writer only reports; it never calls back into its owner:
//   append*()      bytes appended now, with their LSN and file offset (fewer than asked, or none,
//                  when the buffer is full: back-pressure, the caller stops reading its source);
//   writtenLsn()   every byte below it reached the file (the buffers it used are free again);
//   durableLsn()   every byte below it is durable or reported lost in takeFailures();
//   takeFailures() LSN ranges lost to a write or fdatasync error. Never retried: after an
//                  fdatasync error the kernel may have dropped the dirty state, so the file is
//                  done for (the owner seals the segment as failed and starts a new one).
// Completions: every SQE it submits carries an audit::auditLogTag (audit/AuditLogOps.h: a data
// write, its delay, a data fdatasync); the owner hands each completion of those ops to
// onCompletion().
//
// Thread affinity: the ring's thread. Error contract: the constructor throws (std::system_error,
// std::invalid_argument); everything else is noexcept and returns -errno. Lifetime: destroy it
// only once idle(), or after the ring is gone (the kernel may still read its buffers).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <vector>

#include "audit/AuditLogOps.h"
#include "audit/LogBuffer.h"
#include "common/RingOps.h"
#include "common/RingRegistration.h"
#include "common/UniqueFd.h"

namespace splicegate::audit {

struct DirectLogOptions {
    std::size_t bufferBytes = std::size_t{64} << 20;  // --audit-buffer-bytes
    std::size_t writeBytes = std::size_t{2} << 20;    // one buffer, one write when full
    unsigned maxWritesInFlight = 8;
    // RWF_DSYNC on every write: a write's bytes are durable when it completes, no fdatasync of
    // the data file. Otherwise durability comes from an fdatasync after the writes.
    bool dsyncWrites = false;
    // fallocate this much of each new file (its size too), so no write extends the file; once
    // the writer is done with a file it truncates it to the bytes appended. 0 = none. An error
    // here is not one (the writes will tell).
    std::uint64_t preallocateBytes = 0;
    // Test only: every write starts this late (a hard-linked IORING_OP_TIMEOUT before it), a
    // disk that falls behind without any thread sleeping.
    std::chrono::milliseconds writeDelay{0};
    std::string label = "audit";  // names the directory in log lines
};

struct LogAppend {
    long bytes = 0;  // appended (0: the buffer is full), or -errno (-EAGAIN: the pipe was empty)
    std::uint64_t lsn = 0;         // of the first byte appended
    std::uint64_t fileOffset = 0;  // of the first byte appended, in the current file
};

// Space in the log for bytes that are filled later (a read of the audit pipe through io_uring,
// say): `memory` is the writer's until complete() gives it back.
struct LogReservation {
    std::span<std::byte> memory;  // empty: the buffer is full
    std::uint64_t lsn = 0;
    std::uint64_t fileOffset = 0;
    std::uint32_t slot = 0;
};

struct LogFailure {
    std::uint64_t fileId = 0;
    int error = 0;               // -errno of the write or fdatasync
    bool inWrite = false;        // a write failed (false: an fdatasync)
    std::uint64_t lostFrom = 0;  // LSNs [lostFrom, lostTo) are not durable and never will be
    std::uint64_t lostTo = 0;
};

struct DirectLogStats {
    std::uint64_t appendedBytes = 0;
    std::uint64_t writes = 0;
    std::uint64_t writtenBytes = 0;  // including padding and rewritten blocks
    std::uint64_t tailWrites = 0;    // writes of a partial buffer a commit needed
    std::uint64_t syncs = 0;
    std::uint64_t fullAppends = 0;  // appends cut short because the buffer was full
};

class DirectDataWriter {
  public:
    // Maps the buffer and registers it with `registration`, `ring`'s (refused: plain writes,
    // one log line).
    DirectDataWriter(RingOps& ring, RingRegistration& registration,
                     const DirectLogOptions& options);
    ~DirectDataWriter();
    DirectDataWriter(const DirectDataWriter&) = delete;
    DirectDataWriter& operator=(const DirectDataWriter&) = delete;

    // Appends go to `fd` from offset 0 on (the writer keeps its own dup of it, closed once the
    // file is written and durable; `fileId` names it in failures). The previous file gets its
    // tail written and synced without waiting for a commit. O_DIRECT is switched on here.
    int startFile(int fd, std::uint64_t fileId) noexcept;

    // Up to `length` bytes of log space, contiguous (less where a buffer ends; none when the
    // buffer is full). Returns 0, -EBADF before startFile(), -EIO when the current file failed.
    // Every reservation must be completed; nothing after it is written before it is.
    int reserve(std::size_t length, LogReservation& out) noexcept;
    // `filled` bytes of the reservation hold data. An unfilled rest is given back when nothing was
    // reserved after it, otherwise zeroed: a gap that no index record names.
    void complete(LogReservation& reservation, std::size_t filled) noexcept;

    // No more appends to the current file: its tail is written and synced, and the file cut to
    // its last byte, without waiting for a commit (shutdown). Appends fail until startFile().
    void closeFile() noexcept;

    // Reads up to `length` bytes from a non-blocking pipe (a tee'd audit copy) into the log.
    LogAppend appendFromPipe(int pipeFd, std::size_t length) noexcept;
    // Copies up to `length` bytes of user memory (the buffer lane's bytes) into the log.
    LogAppend append(const void* data, std::size_t length) noexcept;
    // Bytes an append could take now.
    std::size_t room() const noexcept;
    bool full() const noexcept { return room() == 0; }

    // Makes every byte appended so far (and completed, for reservations) durable. Group commit:
    // call it once per loop turn, not per chunk. Progress shows in durableLsn().
    void commit() noexcept;
    // Writes every byte appended so far (a partial tail padded, as for a commit) without making
    // it durable (durability none). Progress shows in writtenLsn().
    void writeOut() noexcept;
    // A completion of one of this writer's SQEs (DataWrite, DataWriteDelay, DataSync).
    void onCompletion(CompletionTag tag, int result) noexcept;
    std::vector<LogFailure> takeFailures() noexcept;

    std::uint64_t appendedLsn() const noexcept { return appendedLsn_; }
    std::uint64_t writtenLsn() const noexcept;
    std::uint64_t durableLsn() const noexcept;
    // No write, sync or delay in flight.
    bool idle() const noexcept { return inFlight_ == 0; }
    // The current file is written with O_DIRECT (false: the filesystem refused it).
    bool directIo() const noexcept;
    bool fixedBuffers() const noexcept { return buffer_.registered(); }
    const LogBuffer& buffer() const noexcept { return buffer_; }
    const DirectLogStats& stats() const noexcept { return stats_; }

  private:
    struct Slot {
        std::uint32_t file = 0;  // File::serial
        std::uint64_t lsn = 0;
        std::uint64_t fileOffset = 0;
        std::size_t fill = 0;       // appended or reserved
        unsigned reservations = 0;  // not completed yet: the memory is someone else's meanwhile
        std::size_t written = 0;    // reached the file
        std::size_t submitStart = 0;
        std::size_t submitFill = 0;  // `fill` when the write in flight was submitted
        bool writing = false;
        bool sealed = false;   // no more appends: full, or its file was switched
        bool discard = false;  // its file failed: free it once its write is back
    };
    struct File {
        UniqueFd fd;
        std::uint64_t id = 0;
        std::uint32_t serial = 0;
        bool direct = false;
        bool current = true;
        bool failed = false;
        bool syncing = false;
        unsigned writesInFlight = 0;
        std::uint64_t lsnBegin = 0;
        std::uint64_t lsnEnd = 0;  // once it is no longer current
        std::uint64_t nextOffset = 0;
        std::uint64_t durable = 0;     // LSN: [lsnBegin, durable) is durable
        std::uint64_t syncTarget = 0;  // LSN the fdatasync in flight covers
    };
    struct Pending {
        std::uint64_t lsn = 0;
        bool done = false;
    };
    template <typename Copy>
    LogAppend appendWith(std::size_t length, Copy&& copy) noexcept;
    std::uint64_t readyLsn() const noexcept;
    std::size_t readyBytes(const Slot& slot) const noexcept;
    int appendSlot(File& file) noexcept;
    void retire(File& file) noexcept;  // slot index, or -1 when the buffer is full
    void pump() noexcept;
    void submitWrite(unsigned index) noexcept;
    void startSyncs() noexcept;
    void onWrite(unsigned index, int result) noexcept;
    void onSync(std::uint32_t serial, int result) noexcept;
    void fail(File& file, int error, bool inWrite) noexcept;
    void release(unsigned index) noexcept;
    void closeFinishedFiles() noexcept;
    File* findFile(std::uint32_t serial) noexcept;
    std::uint64_t fileEnd(const File& file) const noexcept;

    RingOps& ring_;
    const DirectLogOptions options_;
    LogBuffer buffer_;
    __kernel_timespec delay_{};
    std::vector<Slot> slots_;
    std::vector<unsigned> free_;
    std::vector<unsigned> active_;  // slots in use, in LSN order (capacity: every slot)
    std::deque<File> files_;        // oldest first; the last is current
    std::vector<LogFailure> failures_;
    std::deque<Pending> pending_;  // reservations in LSN order, until the oldest completes
    std::uint32_t nextSerial_ = 1;
    std::uint64_t appendedLsn_ = 0;
    std::uint64_t commitTarget_ = 0;
    std::uint64_t writeTarget_ = 0;  // writeOut()'s: written, not synced
    unsigned writesInFlight_ = 0;
    unsigned inFlight_ = 0;  // writes, syncs and delays: the kernel still holds references
    bool warnedBuffered_ = false;
    DirectLogStats stats_;
};

}  // namespace splicegate::audit
