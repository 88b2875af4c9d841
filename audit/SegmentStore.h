#pragma once
// The runtime side of the audit log: one writer per worker (not thread-safe), appending to that
// worker's segments (FORMAT.md). Payload reaches the data file by splice from the worker's ring
// (or by a writer that has the bytes in user memory) at offsets reserved here; index records are
// buffered here and handed to each sync, whose owner writes them on its ring ahead of the
// fdatasyncs (group commit) and reports the results back. Files are created relative to the
// directory's fd without following symlinks, and the directory is fsynced once both files of a new
// segment exist. Segments are sealed in order, each seal chaining to its predecessor's (FORMAT.md
// "Hash chain").
//
// Error contract: set-up throws std::system_error naming the file; run-time calls are noexcept
// and return -errno.
#include <linux/openat2.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "audit/SealChain.h"
#include "audit/SealHeads.h"
#include "common/CompletionTag.h"
#include "common/UniqueFd.h"

namespace splicegate {
class RingOps;
}

namespace splicegate::audit {

struct Segment {
    std::uint32_t worker = 0;
    std::uint64_t number = 0;
    std::string dataPath;
    UniqueFd data;
    UniqueFd index;
    std::uint64_t reservedBytes = 0;  // next free data offset
    std::uint64_t indexBytes = 0;     // written to the index file
    // Space taken ahead (reserveSpaceAhead()): data bytes allocated (the file's size too), index
    // bytes allocated past its end, and index bytes promised to reservations not yet recorded.
    std::uint64_t dataAllocated = 0;
    std::uint64_t indexAllocated = 0;
    std::uint64_t indexPromised = 0;
    std::string pendingRecords;  // encoded, not yet written
    // Records a running group commit took (beginSync()), at index offset indexHandedOffAt. An
    // io_uring write may be reading this buffer until endSync().
    std::string indexHandedOff;
    std::uint64_t indexHandedOffAt = 0;
    // Records a flush took (beginFlush()), at index offset indexFlushingAt; the same rule.
    std::string indexFlushing;
    std::uint64_t indexFlushingAt = 0;
    std::optional<ChainHasher> chain;  // every index byte encoded so far; spent by the seal
    std::optional<Digest> sealDigest;  // its seal record's, once encoded
    unsigned writesInFlight = 0;
    bool syncing = false;     // an fdatasync naming its fds is queued or running: keep them open
    bool allocating = false;  // an allocation ahead of it is on the owner's ring
    bool grewAfterRetire = false;  // that allocation ended after the roll: cut the data at seal
    bool sealing = false;          // its seal is on the owner's ring
    // Its files' names are durable (the directory was fsynced since they were made). With the
    // disk work on the ring, the first group commit or the seal makes them so.
    bool namesDurable = true;
    bool retired = false;
    bool failed = false;
    // Its data file is a recycled spare: past reservedBytes it still holds a deleted segment's
    // bytes, so it stays 0600 (not the audit group's) until the seal cuts it to its last byte.
    bool recycled = false;
};

// Work on a segment's files that can wait for the filesystem's journal (tens of milliseconds
// under writeback, measured), which a worker thread must not do: with runDiskWorkOnRing() the
// writer hands it to its owner (takeDiskWork()), which queues it on its ring (queueDiskWork())
// and reports the end (diskWorkDone()).
// The SQEs of disk work, one completion each; a seal's run in this order, linked.
enum class DiskStep : std::uint8_t {
    Allocate,
    SealPunch,
    SealDirectorySync,
    SealDataSync,
    SealWrite,
    SealIndexSync,
    CreateData,
    CreateIndex,
    CreateRecycle,  // the worker's spare renamed to the data file's name, before CreateData
};
inline constexpr unsigned kDiskSteps = 9;

// The names and open flags of a Create: the ring reads them when it submits.
struct SegmentCreation {
    std::string dataName;
    std::string indexName;
    open_how how{};
    // Recycling: a spare (spareDataName) is renamed to dataName, then opened with
    // `recycledHow` (no O_CREAT); without a spare the open is cancelled.
    bool recycling = false;
    std::string spareName;
    open_how recycledHow{};
    bool renamed = false;
    int renameError = 0;
};

struct DiskWork {
    enum class Kind : std::uint8_t {
        // fallocate(fd, mode, from, to - from): space ahead of the reservations, taken before it
        // is needed so that reserve() rarely allocates in place.
        Allocate,
        // The seal of a rolled segment: the index's unused space [from, to) given back, the
        // directory fsynced (fd, when the segment's names are not durable yet), the data
        // fdatasync'd, the last index records (Segment::indexHandedOff, ending with
        // SegmentSealed) written and the index fdatasync'd. A failed segment's seal only writes.
        Seal,
        // The next segment's two files, created while the current one fills (openat2 relative to
        // the directory `fd`, O_EXCL, no symlinks followed; names in `creation`), so that the
        // roll opens nothing on the worker. Its space ahead follows as Allocate work. When
        // recycling, the data file is the worker's spare, renamed (RENAME_NOREPLACE) and opened.
        Create,
    };
    Kind kind = Kind::Allocate;
    std::shared_ptr<Segment> segment;
    // Allocate: the file; Seal: the directory, or -1 when no fsync of it is due; Create: the
    // directory.
    int fd = -1;
    int mode = 0;
    std::uint64_t from = 0;
    std::uint64_t to = 0;
    SegmentCreation* creation = nullptr;  // Create
};

struct Reservation {
    std::shared_ptr<Segment> segment;
    std::uint64_t offset = 0;
    std::uint32_t length = 0;
    bool indexPromised = false;  // index space for its Chunk record is set aside
};

class SegmentStore {
  public:
    // Opens segment `firstSegment` of `worker` in `dir` (creating both files). Throws naming the
    // file on failure. `nextConnectionId` is the daemon's id counter, read as the connection id
    // floor of every segment this writer opens; null writes floor 0. It must outlive the writer.
    // `chainKey`: --audit-hmac-key-file (null: unkeyed SHA-256 chain). The chain continues from
    // the seal of the worker's newest segment below `firstSegment` (recovery sealed it).
    // `heads` (may be null; must outlive the writer) is told of that seal and of every seal
    // written, each of which is also logged (`audit seal FILE digest=HEX`, info).
    SegmentStore(std::string dir, std::uint32_t worker, std::uint64_t firstSegment,
                 std::uint64_t segmentBytes,
                 const std::atomic<std::uint64_t>* nextConnectionId = nullptr,
                 std::shared_ptr<const ChainKey> chainKey = nullptr, SealHeads* heads = nullptr);
    ~SegmentStore();
    SegmentStore(const SegmentStore&) = delete;
    SegmentStore& operator=(const SegmentStore&) = delete;

    // From now on the disk space of what is accepted is taken before it is accepted: reserve()
    // allocates index space for the Chunk records of its reservations (fallocate past the
    // index's end) and, with `data`, the data file ahead of them (fallocate, the file's size
    // too), and fails with -ENOSPC when it cannot. Index records are written after their chunk
    // was forwarded (a short index write on a full disk would tear the log), and a writer that
    // fills its data file later (the direct writer, whose O_DIRECT writes would otherwise find a
    // full disk only after the bytes were forwarded) needs the data space too; the splice
    // writer's splice fails at once and takes none ahead. Returns false when the filesystem
    // cannot allocate ahead (no fallocate): nothing changes then.
    bool reserveSpaceAhead(bool data) noexcept;
    bool reservesSpaceAhead() const noexcept { return reserveAhead_; }

    // Space for a chunk's payload in the current segment (rolling first when it is full).
    // Returns -errno when a new segment cannot be created, or (reserveSpaceAhead()) its space
    // cannot be allocated; -EAGAIN when the disk work runs on the ring and the data space is
    // not allocated yet (waitingForSpace(): the allocation is the owner's next DiskWork).
    int reserve(std::uint32_t length, Reservation& out) noexcept;
    // The payload of `reservation` landed (`written` bytes of it, at its offset); the
    // reservation is released either way. The record* calls return 0, or -ENOMEM when the
    // record could not be buffered: the caller treats that as an audit write error (an unindexed
    // chunk is not in the log, and a connection without its Open record cannot be extracted).
    // `payloadCrc`: crc32c(0, payload) of the `written` bytes (audit/Crc32c.h). A writer whose
    // bytes pass through user memory computes it on the way; the splice writer may get it from
    // payloadCrcFromFile(). Without it the Chunk record says "no CRC" and verify cannot check
    // that chunk's payload (FORMAT.md).
    [[nodiscard]] int recordChunk(Reservation& reservation, std::uint64_t connection,
                                  std::uint8_t direction, std::uint32_t written,
                                  std::int64_t timeNs,
                                  std::optional<std::uint32_t> payloadCrc = std::nullopt) noexcept;
    // Reads back the `written` bytes that landed at `reservation`'s offset (page cache, just
    // written) and computes their CRC-32C. For the splice writer, whose bytes never are in user
    // memory. Returns 0 or -errno (a short file is -EIO).
    static int payloadCrcFromFile(const Reservation& reservation, std::uint32_t written,
                                  std::uint32_t& crc) noexcept;
    // The payload write failed or was abandoned: the reservation is released, nothing recorded.
    void abandon(Reservation& reservation) noexcept;
    // Gives back the end of the latest reservation, which keeps `length` bytes (the direct
    // writer, audit/DirectSegmentWriter, found less room in its buffer than was reserved here).
    void shrink(Reservation& reservation, std::uint32_t length) noexcept;
    // A data write or fdatasync outside this writer's group commit failed (the direct writer's):
    // the same rule as a failed sync, never retried; the segment is sealed as failed and, when
    // it is the current one, a new one starts.
    void failSegment(const std::shared_ptr<Segment>& segment, int error) noexcept;
    // Starts a segment when the last attempt failed (disk full): 0, or -errno. Records written
    // while there is none would be dropped.
    int ensureSegment() noexcept;
    // `via`, `sni`: see audit::encodeOpen (empty: none).
    [[nodiscard]] int recordOpen(std::uint64_t connection, std::int64_t openedNs,
                                 std::string_view route, std::string_view client,
                                 std::string_view upstream, std::string_view via = {},
                                 std::string_view sni = {}) noexcept;
    // Without its Close record a connection reads as open, until recovery marks it truncated.
    [[nodiscard]] int recordClose(std::uint64_t connection, std::int64_t closedNs,
                                  std::uint64_t c2uBytes, std::uint64_t u2cBytes,
                                  std::string_view reason) noexcept;

    // Group commit. beginSync() hands the buffered index records to the sync
    // (Segment::indexHandedOff, their file offset already counted in indexBytes) and returns the
    // segment to fdatasync (data file, then index file), or null when nothing is dirty. The
    // caller writes them: queueIndexWrite() on the worker's ring, linked before the index
    // fdatasync, so that the worker never waits in write(2) for the journal the last commit
    // holds; writeHandedOffIndex() where blocking is fine. A sync covers every chunk recorded
    // before it began. endSync() takes the result of the write and both fdatasyncs: an error is
    // never retried (the kernel may have dropped the pages), the segment is sealed as failed and
    // a new one started.
    std::shared_ptr<Segment> beginSync() noexcept;
    [[nodiscard]] int writeHandedOffIndex(Segment& segment) noexcept;
    void endSync(const std::shared_ptr<Segment>& segment, int result) noexcept;
    bool dirty() const noexcept { return dirty_; }
    bool syncInFlight() const noexcept { return syncInFlight_; }
    // Sync sequence numbers: a chunk recorded now is durable once durableSequence() >= this.
    std::uint64_t nextSyncSequence() const noexcept { return startedSyncs_ + 1; }
    std::uint64_t durableSequence() const noexcept { return durableSyncs_; }
    std::uint64_t failedSyncs() const noexcept { return failedSyncs_; }

    // Disk work (DiskWork) goes to the owner's ring from now on; without this call the writer
    // does it in place. takeDiskWork() gives the next piece, or nothing; at most one of each
    // kind is out at a time. diskWorkDone() takes each step's completion. An allocation that
    // failed is not an error: reserve() allocates in place when it needs the space, and meets a
    // full disk there.
    void runDiskWorkOnRing() noexcept { diskWorkOnRing_ = true; }
    // Segments created ahead take one of the worker's spare data files (spareDataName, left by
    // retention) when there is one, instead of a new file: its blocks are allocated and written
    // already, so O_DIRECT writes into it change no extent (no journal commit in the fdatasyncs)
    // and nothing is freed, which a filesystem mounted with `discard` pays for at once
    // (docs/kernel-notes.md §19). No spare: a new file, as without this call. For the direct
    // writer.
    void recycleSpareDataFiles() noexcept { recycleSpares_ = true; }
    std::optional<DiskWork> takeDiskWork() noexcept;
    // Returns the seal's result when its last step is in.
    std::optional<int> diskWorkDone(DiskStep step, int result) noexcept;
    bool diskWorkInFlight() const noexcept { return allocating_ || sealing_ || creationSteps_ > 0; }
    bool sealInFlight() const noexcept { return sealing_ != nullptr; }
    // A reservation was refused (-EAGAIN) until the data space allocated on the ring arrives:
    // back-pressure, as for a full buffer.
    bool waitingForSpace() const noexcept { return spaceWantedTo_ != 0; }
    int directoryFd() const noexcept { return dirFd_.get(); }

    // Writes buffered records (no sync); for durability mode none and at shutdown. Nothing while
    // a sync is in flight: its handed-off records must reach the file before any after them.
    int flush() noexcept;
    // The same on the owner's ring: beginFlush() hands the current segment's buffered records
    // to Segment::indexFlushing (their offset counted at once) and returns the segment, or null
    // when there are none, a sync is in flight or the last flush is still out; the owner writes
    // them (queueFlushWrite()) and reports the write's result to endFlush(), where a failed one
    // seals the segment as failed (endFlush() returns it as 0 or -errno; a short write is -EIO). A
    // group commit must not start its index write and fdatasync before the flush's write is in, or
    // it could count records not yet written.
    std::shared_ptr<Segment> beginFlush() noexcept;
    int endFlush(const std::shared_ptr<Segment>& segment, int result) noexcept;
    // Rolls to a new segment now (admin "audit-rotate").
    int rotate() noexcept;
    const std::string& directory() const noexcept { return dir_; }

  private:
    int openSegment(std::uint64_t number) noexcept;
    std::shared_ptr<Segment> newSegment(std::uint64_t number);
    std::optional<DiskWork> createAhead() noexcept;
    void createDone(DiskStep step, int result) noexcept;
    void discardCreated() noexcept;
    void adoptSpare(int fd) noexcept;
    std::optional<DiskWork> spaceAheadOfCreated() noexcept;
    int allocateAhead(Segment& segment, std::uint64_t dataEnd, std::uint64_t indexNeed) noexcept;
    void releasePromise(Reservation& reservation) noexcept;
    int writePending(Segment& segment) noexcept;
    void retire(const std::shared_ptr<Segment>& segment, bool failed) noexcept;
    // Seals retired segments in order, oldest first, as long as the oldest one is done (its
    // writes and its sync are in): each seal needs its predecessor's digest.
    void sealReady() noexcept;
    void sealFailed(const std::shared_ptr<Segment>& segment) noexcept;
    void seal(std::shared_ptr<Segment> sealed) noexcept;
    void finishSeal(Segment& segment, int result) noexcept;
    // At its seal: the data file cut to its last byte, and a recycled one given kSegmentFileMode.
    void cutAndOpenToGroup(Segment& segment) noexcept;
    std::optional<DiskWork> spaceAhead() noexcept;
    template <typename Encode>
    int append(Segment& segment, Encode encode) noexcept;

    const std::string dir_;
    UniqueFd dirFd_;
    const std::shared_ptr<const ChainKey> chainKey_;
    Digest prevDigest_{};  // the digest of this worker's last sealed segment
    SealHeads* const heads_;
    const std::uint32_t worker_;
    const std::uint64_t segmentBytes_;
    const std::atomic<std::uint64_t>* const nextConnectionId_;
    std::uint64_t nextSegment_;
    std::shared_ptr<Segment> current_;
    std::vector<std::shared_ptr<Segment>> retired_;
    bool dirty_ = false;
    bool reserveAhead_ = false;
    bool reserveDataAhead_ = false;
    bool syncInFlight_ = false;
    bool diskWorkOnRing_ = false;
    std::shared_ptr<Segment> sealing_;  // its seal is queued (sealHandedOut_) or about to be
    DiskWork pendingSeal_;
    bool sealHandedOut_ = false;
    int sealError_ = 0;                   // the first failed step of the seal on the ring
    std::optional<DiskWork> allocating_;  // out on the owner's ring
    // A reservation waits for data space up to here (0: none waits): the next allocation on the
    // ring covers it. After an allocation on the ring failed, reserve() allocates in place.
    std::uint64_t spaceWantedTo_ = 0;
    bool allocateInPlace_ = false;
    // The next segment, created ahead on the ring (DiskWork::Kind::Create) once the current one
    // is half full and no seal is out: at most two segments of a worker are unsealed at a time,
    // which is what readers of a live directory allow for.
    std::shared_ptr<Segment> created_;
    SegmentCreation creation_;
    unsigned creationSteps_ = 0;  // Create completions not in yet
    int creationError_ = 0;
    // A roll came before the creation was in: it opened the same names in place, and what the
    // ring opens is only closed.
    bool creationAdopted_ = false;
    // The segment number whose names a creation made or is making (0: none): openSegment()
    // opens them without O_EXCL, and keeps them when it fails.
    std::uint64_t ownNames_ = 0;
    bool createAhead_ = true;  // false once a creation on the ring failed: in place from then on
    bool recycleSpares_ = false;
    unsigned spareMisses_ = 0;  // spare slots found empty since the last creation
    std::uint64_t startedSyncs_ = 0;
    std::uint64_t durableSyncs_ = 0;
    std::uint64_t failedSyncs_ = 0;
};

std::int64_t wallClockNs() noexcept;

// Queues the write of `segment`'s handed-off index records on `ring`, tagged `tag` and linked to
// the SQE queued next (the index fdatasync; make room for both first). Returns false, queueing
// nothing, when there are none.
bool queueIndexWrite(RingOps& ring, const Segment& segment, CompletionTag tag) noexcept;
// That write's completion as 0 or -errno (a short write is -EIO: the fdatasync after it was
// cancelled, and the records past it are not in the file).
int indexWriteResult(const Segment& segment, int result) noexcept;
// Queues `work` on `ring` (making room for all of it first); each SQE carries `tag` with its
// DiskStep in the slot. A seal is a linked chain in DiskStep's order (the index follows the
// data), ending in the index fdatasync: a failed step cancels what follows, except a failed punch.
void queueDiskWork(RingOps& ring, const DiskWork& work, CompletionTag tag) noexcept;
// Queues an fsync of `store`'s directory, linked to the SQE queued next, when `segment`'s names
// are not durable yet (with the disk work on the ring, a new segment's first group commit does
// it; make room first).
void queueDirectorySync(RingOps& ring, const SegmentStore& store, const Segment& segment,
                        CompletionTag tag) noexcept;
// Queues the write of `segment`'s flushed records (Segment::indexFlushing) on `ring`.
void queueFlushWrite(RingOps& ring, const Segment& segment, CompletionTag tag) noexcept;
// The same work in place, blocking: 0 or the first -errno.
int runDiskWork(const DiskWork& work) noexcept;

}  // namespace splicegate::audit
