#pragma once
// One worker's audit log with the direct writer: segments and index records from SegmentStore,
// payload through DirectDataWriter (O_DIRECT from the log buffer). The index follows the data: a
// Chunk record (and a Close record, which must come after its connection's chunks) is booked
// into the index only once its payload is durable, and the group commit then writes and
// fdatasyncs the index. So an index never names bytes that a crash could lose.
//
// Group commit, driven by completions routed to complete():
//   startSync()  commits the log buffer (tail block written, data fdatasync'd by the writer);
//   when the data is durable, the waiting records are booked and the index written and
//   fdatasync'd; that completion returns the sync's result. A write or fdatasync error of the
//   data (never retried) seals its segment as failed, starts a new one, drops the chunks it lost
//   and fails the sync in progress.
// Back-pressure: reserve() gives less memory than asked, or none when the buffer is full or the
// segment's data space is still being allocated; the caller stops reading its source and tries
// again after completions (room()).
//
// Thread affinity: the owning worker. Run-time calls are noexcept and return -errno.
#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "audit/DirectDataWriter.h"
#include "audit/SegmentStore.h"

namespace splicegate::audit {

// Payload bytes a data write or fdatasync error took before they were durable (never booked).
struct LostChunk {
    std::uint64_t connection = 0;
    std::uint8_t direction = 0;
    std::uint32_t bytes = 0;
    int error = 0;
};

// A chunk's space: fill `memory` (up to its size), then recordChunk() or abandon().
struct DirectChunk {
    std::span<std::byte> memory;  // empty: the log buffer is full
    Reservation segment;          // the segment and data offset the bytes go to
    LogReservation log;
    bool reserved() const noexcept { return segment.segment != nullptr; }
};

class DirectSegmentWriter {
  public:
    // Submits on `ring` (its log buffer registered with `registration`, the ring's); every SQE,
    // its data writer's too, carries an auditLogTag (audit/AuditLogOps.h), and the owner hands
    // each such completion to complete().
    DirectSegmentWriter(std::unique_ptr<SegmentStore> segments, RingOps& ring,
                        RingRegistration& registration, const DirectLogOptions& options);
    ~DirectSegmentWriter();
    DirectSegmentWriter(const DirectSegmentWriter&) = delete;
    DirectSegmentWriter& operator=(const DirectSegmentWriter&) = delete;

    // Space for up to `length` payload bytes (chunk.memory may be shorter, or empty when full).
    int reserve(std::uint32_t length, DirectChunk& chunk) noexcept;
    // `written` bytes of chunk.memory hold the payload (its CRC-32C is taken here).
    [[nodiscard]] int recordChunk(DirectChunk& chunk, std::uint64_t connection,
                                  std::uint8_t direction, std::uint32_t written) noexcept;
    void abandon(DirectChunk& chunk) noexcept;
    [[nodiscard]] int recordOpen(std::uint64_t connection, std::string_view route,
                                 std::string_view client, std::string_view upstream,
                                 std::string_view via = {}, std::string_view sni = {}) noexcept;
    [[nodiscard]] int recordClose(std::uint64_t connection, std::uint64_t c2uBytes,
                                  std::uint64_t u2cBytes, std::string_view reason) noexcept;

    // 1: a sync started (its result comes from complete()); 0: nothing to make durable or a
    // sync is in flight already.
    int startSync() noexcept;
    // A completion of RingOwner::AuditLog. Returns the result of the sync it finished.
    std::optional<int> complete(CompletionTag tag, int result) noexcept;
    // Durable, blocking: the worker's exit (routes completions itself until done).
    void syncNow() noexcept;
    // syncNow(), then the current data file is let go: its tail written and synced, the file cut
    // to its last byte. Nothing can be appended afterwards (the worker is exiting).
    void finishFile() noexcept;
    // Chunks lost since the last call; their connections' Close records count without them.
    std::vector<LostChunk> takeLost() noexcept;
    bool dirty() const noexcept;
    bool syncInFlight() const noexcept { return state_ != State::Idle; }
    // A chunk recorded now is durable once durableSequence() >= nextSyncSequence().
    std::uint64_t nextSyncSequence() const noexcept { return startedSyncs_ + 1; }
    std::uint64_t durableSequence() const noexcept { return durableSyncs_; }
    std::uint64_t failedSyncs() const noexcept { return failedSyncs_; }
    // The last failed sync failed in a write (of data or index), not in an fdatasync.
    bool lastFailureInWrite() const noexcept { return lastFailureInWrite_; }
    // Durability none: index records whose data is written (not synced) go to the page cache,
    // by a write on the ring; a flush while the last one's write is out waits for the next.
    int flush() noexcept;
    int rotate() noexcept;

    // Payload bytes reserve() could take now: none while the buffer is full or a chunk waits for
    // data space being allocated on the ring.
    std::size_t room() const noexcept { return segments_->waitingForSpace() ? 0 : writer_.room(); }
    bool reservesSpaceAhead() const noexcept { return segments_->reservesSpaceAhead(); }
    const DirectDataWriter& writer() const noexcept { return writer_; }

  private:
    enum class State : std::uint8_t { Idle, WaitingData, WaitingIndex };
    struct Waiting {  // a record held until the data before lsnEnd is durable
        std::uint64_t lsnBegin = 0;
        std::uint64_t lsnEnd = 0;
        std::uint64_t connection = 0;
        bool close = false;
        // Chunk
        Reservation segment;
        std::uint8_t direction = 0;
        std::uint32_t length = 0;
        std::uint32_t crc = 0;
        std::int64_t timeNs = 0;
        // Close
        std::uint64_t c2uBytes = 0;
        std::uint64_t u2cBytes = 0;
        std::string reason;
    };

    int follow(const std::shared_ptr<Segment>& segment) noexcept;
    void advance() noexcept;
    void handleFailures() noexcept;
    void bookDurable() noexcept;
    // Books the records held for data below `lsn` into the index (the segments' buffers).
    void bookUpTo(std::uint64_t lsn) noexcept;
    void submitIndexSync(int fd) noexcept;
    // Queues the disk work the segments have for the ring (allocation ahead, seals).
    void queueDiskWork() noexcept;
    // Routes completions until `done` holds (Done), nothing of this log is in flight any more so
    // waiting cannot change anything (Stalled), or a minute passed (TimedOut); shutdown only.
    // `ended` gets the result of each sync that ends meanwhile.
    enum class Wait { Done, Stalled, TimedOut };
    template <typename Done>
    Wait waitFor(Done done, std::optional<int>& ended) noexcept;
    bool nothingInFlight() const noexcept;
    void noteSyncError(int error, bool inWrite) noexcept;
    std::optional<int> finish(int result) noexcept;

    std::unique_ptr<SegmentStore> segments_;
    RingOps& ring_;
    DirectDataWriter writer_;
    std::shared_ptr<Segment> current_;             // the segment the writer appends to
    std::deque<std::shared_ptr<Segment>> recent_;  // segments the writer may still report on
    std::deque<Waiting> waiting_;
    std::vector<LostChunk> lost_;
    std::map<std::uint64_t, std::array<std::uint64_t, 2>> lostBytes_;  // by connection, direction
    State state_ = State::Idle;
    std::uint64_t target_ = 0;  // LSN the sync in flight makes durable
    std::shared_ptr<Segment> indexSegment_;
    int indexWriteResult_ = 0;  // of the index records' write in this sync
    int directorySyncResult_ = 0;
    std::optional<int> heldResult_;          // of the sync that waits for a seal to end
    std::shared_ptr<Segment> flushSegment_;  // its flushed records' write is out
    int syncError_ = 0;                      // a data failure during this sync
    bool syncErrorInWrite_ = false;
    bool lastFailureInWrite_ = false;
    // A record came in since the last sync began: the next one must run even if that record was
    // already booked by the sync in flight, or a waiter told to wait for the next would hang.
    bool recordedSinceSync_ = false;
    std::uint64_t startedSyncs_ = 0;
    std::uint64_t durableSyncs_ = 0;
    std::uint64_t failedSyncs_ = 0;
};

}  // namespace splicegate::audit
