#include "audit/SegmentStore.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <new>
#include <span>

#include "audit/AuditDirectory.h"
#include "audit/AuditReader.h"
#include "audit/Crc32c.h"
#include "audit/Records.h"
#include "common/Error.h"
#include "common/Log.h"
#include "common/RingOps.h"

namespace splicegate::audit {

std::int64_t wallClockNs() noexcept {
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    return static_cast<std::int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

namespace {

constexpr mode_t kSegmentFileMode = 0640;
constexpr mode_t kRecycledFileMode = 0600;  // until its seal (Segment::recycled)

// The seal of `worker`'s newest indexed segment below `first` (digest zero when there is none,
// or it is unsealed or older than the chain).
SealHead lastSeal(int dirFd, const std::string& dir, std::uint32_t worker, std::uint64_t first) {
    const SegmentFiles* newest = nullptr;
    auto segments = listSegments(dirFd, dir);
    for (const auto& files : segments)
        if (files.worker == worker && files.segment < first && files.hasIndex) newest = &files;
    SealHead head{worker, {}, {}};
    if (newest == nullptr) return head;
    head.indexFile = newest->indexName;
    Digest& digest = head.digest;
    UniqueFd fd = openInDirectoryOrThrow(dirFd, dir, newest->indexName, O_RDONLY);
    IndexReader reader(fd.get(), newest->indexPath);
    Record record;
    for (;;) {
        auto status = reader.next(record);
        if (status == IndexReader::Status::Corrupt) {
            if (!reader.resync()) break;
            continue;
        }
        if (status != IndexReader::Status::Record) break;
        if (record.type == RecordType::SegmentSealed)
            digest = record.chained ? record.digest : Digest{};
    }
    return head;
}

}  // namespace

SegmentStore::SegmentStore(std::string dir, std::uint32_t worker, std::uint64_t firstSegment,
                           std::uint64_t segmentBytes,
                           const std::atomic<std::uint64_t>* nextConnectionId,
                           std::shared_ptr<const ChainKey> chainKey, SealHeads* heads)
    : dir_(std::move(dir)),
      dirFd_(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)),
      chainKey_(std::move(chainKey)),
      heads_(heads),
      worker_(worker),
      segmentBytes_(segmentBytes),
      nextConnectionId_(nextConnectionId),
      nextSegment_(firstSegment) {
    if (!dirFd_) throwErrno(errno, "audit: cannot open directory " + dir_);
    auto head = lastSeal(dirFd_.get(), dir_, worker_, firstSegment);
    prevDigest_ = head.digest;
    if (heads_ && head.digest != Digest{}) heads_->record(std::move(head));
    int rc = openSegment(nextSegment_);
    if (rc < 0)
        throwErrno(-rc, "audit: cannot create segment " + dir_ + "/" +
                            segmentBaseName(worker_, nextSegment_));
    ++nextSegment_;
}

SegmentStore::~SegmentStore() {
    // The owner's ring is gone, and with it whatever disk work it had not run: that runs here.
    diskWorkOnRing_ = false;
    if (created_ && !creationAdopted_) {
        // Never used: gone, so that no empty segment outlives the daemon. A creation still out
        // may have made the names without our hearing of it; O_EXCL made them ours.
        ::unlinkat(dirFd_.get(), creation_.dataName.c_str(), 0);
        ::unlinkat(dirFd_.get(), creation_.indexName.c_str(), 0);
        created_.reset();
    }
    if (allocating_) {
        Segment& segment = *allocating_->segment;
        segment.allocating = false;
        // It may have run after the data file was cut to its last byte.
        if (allocating_->mode == 0) segment.grewAfterRetire = true;
        allocating_.reset();
    }
    if (auto segment = std::move(sealing_)) finishSeal(*segment, runDiskWork(pendingSeal_));
    if (current_) retire(current_, false);
    for (auto& segment : retired_) {
        // Writes still in flight cannot complete after the ring is gone: seal what we have.
        segment->writesInFlight = 0;
        segment->syncing = false;
        // Nor may the index writes of a sync or a flush that never ended have run: their
        // records go now.
        std::size_t written = 0;
        int rc = writeHandedOffIndex(*segment);
        if (rc == 0)
            rc = writeFullyAt(segment->index.get(), segment->indexFlushing,
                              segment->indexFlushingAt, written);
        segment->indexFlushing.clear();
        if (rc < 0) logError("audit: writing ", segment->dataPath, " index: ", errnoText(rc));
    }
    sealReady();
}

template <typename Encode>
int SegmentStore::append(Segment& segment, Encode encode) noexcept {
    auto before = segment.pendingRecords.size();
    try {
        encode(segment.pendingRecords);
    } catch (const std::bad_alloc&) {
        segment.pendingRecords.resize(before);
        return -ENOMEM;
    }
    if (segment.chain)
        segment.chain->update(segment.pendingRecords.data() + before,
                              segment.pendingRecords.size() - before);
    return 0;
}

std::shared_ptr<Segment> SegmentStore::newSegment(std::uint64_t number) {
    auto segment = std::make_shared<Segment>();
    segment->chain.emplace(chainKey_.get());
    segment->worker = worker_;
    segment->number = number;
    segment->dataPath = dir_ + "/" + segmentBaseName(worker_, number) + ".data";
    return segment;
}

int SegmentStore::openSegment(std::uint64_t number) noexcept {
    std::shared_ptr<Segment> segment;
    bool createdAhead = created_ && creationSteps_ == 0 && !creationAdopted_ &&
                        created_->number == number && created_->data && created_->index;
    if (createdAhead) {
        segment = std::move(created_);
    } else {
        try {
            segment = newSegment(number);
        } catch (const std::bad_alloc&) {
            return -ENOMEM;
        }
    }
    spaceWantedTo_ = 0;  // an offset in the segment that was current
    auto base = segmentBaseName(worker_, number);
    int rc = 0;
    if (!createdAhead) {
        // O_EXCL: never reuse or follow an existing name; the data file is readable for
        // payloadCrcFromFile(). Only names this writer made, or is making on the ring right
        // now, are opened whoever made them.
        int exclusive = ownNames_ == number ? 0 : O_EXCL;
        if (created_ && creationSteps_ > 0 && created_->number == number) creationAdopted_ = true;
        int fd = openInDirectory(dirFd_.get(), base + ".data", O_RDWR | O_CREAT | exclusive,
                                 kSegmentFileMode);
        if (fd < 0) return fd;
        segment->data.reset(fd);
        fd = openInDirectory(dirFd_.get(), base + ".index", O_WRONLY | O_CREAT | exclusive,
                             kSegmentFileMode);
        rc = fd < 0 ? fd : 0;
        if (fd >= 0) segment->index.reset(fd);
    }
    if (rc == 0) {
        // Relaxed is enough: the floor must exceed the ids this worker recorded in its earlier
        // segments, and this thread fetched those from the counter itself.
        std::uint64_t idFloor =
            nextConnectionId_ ? nextConnectionId_->load(std::memory_order_relaxed) : 0;
        rc = append(*segment, [&](std::string& out) {
            encodeSegmentStart(out, worker_, number, wallClockNs(), idFloor);
        });
        // On the ring the record goes with the segment's first flush or group commit.
        if (rc == 0 && !diskWorkOnRing_) rc = writePending(*segment);
    }
    // The new names must survive a power loss before any chunk in them is counted durable: the
    // group commit syncs the files' contents, not the directory entries. With the disk work on
    // the ring, the segment's first group commit (or its seal) fsyncs the directory; otherwise
    // it is done here, once per segment.
    if (rc == 0 && diskWorkOnRing_) segment->namesDurable = false;
    if (rc == 0 && !diskWorkOnRing_) rc = syncDirectory(dirFd_.get());
    if (rc < 0) {  // leave no half-made segment behind: the next attempt reuses the number
        // Names of ours stay: a creation on the ring may be making them, and the next attempt
        // opens them as they are.
        if (ownNames_ == number) return rc;
        ::unlinkat(dirFd_.get(), (base + ".data").c_str(), 0);
        if (segment->index) ::unlinkat(dirFd_.get(), (base + ".index").c_str(), 0);
        return rc;
    }
    if (ownNames_ == number) ownNames_ = 0;
    current_ = std::move(segment);
    return 0;
}

namespace {
// Data is allocated this far ahead of the reservations (a few fallocate calls per GiB), index
// space 1 MiB at a time; the slack leaves room for the Open, Close and seal records, which are
// not promised one by one.
constexpr std::uint64_t kDataAhead = std::uint64_t{64} << 20;
constexpr std::uint64_t kIndexAhead = std::uint64_t{1} << 20;
constexpr std::uint64_t kIndexSlack = std::uint64_t{64} << 10;

std::uint64_t chunkRecordBytes() {
    static const std::uint64_t bytes = [] {
        std::string record;
        encodeChunk(record, 0, 0, 0, 0, 0, 0u);
        return record.size();
    }();
    return bytes;
}

// Allocates [from, wanted) of `fd`, or at least [from, needed) when a nearly full disk has no
// room for the step ahead. Returns the new end, or -errno.
long long allocate(int fd, int mode, std::uint64_t from, std::uint64_t needed,
                   std::uint64_t wanted) noexcept {
    for (std::uint64_t end : {wanted, needed}) {
        if (::fallocate(fd, mode, static_cast<off_t>(from), static_cast<off_t>(end - from)) == 0)
            return static_cast<long long>(end);
        if (errno != ENOSPC || end == needed) return -errno;
    }
    return -ENOSPC;
}
}  // namespace

bool SegmentStore::reserveSpaceAhead(bool data) noexcept {
    // A probe on the current index file, past its end: EOPNOTSUPP (or EINVAL) means no
    // fallocate here; ENOSPC still means the mechanism works.
    if (current_) {
        int rc = ::fallocate(current_->index.get(), FALLOC_FL_KEEP_SIZE,
                             static_cast<off_t>(current_->indexBytes), 4096) == 0
                     ? 0
                     : -errno;
        if (rc == -EOPNOTSUPP || rc == -EINVAL) return false;
        if (rc == 0) current_->indexAllocated = current_->indexBytes + 4096;
    }
    reserveAhead_ = true;
    reserveDataAhead_ = data;
    return true;
}

// Takes the space before anything is accepted into it: a full disk is refused here, at once,
// never found by a write after the bytes were forwarded.
int SegmentStore::allocateAhead(Segment& segment, std::uint64_t dataEnd,
                                std::uint64_t indexNeed) noexcept {
    if (reserveDataAhead_ && dataEnd > segment.dataAllocated && diskWorkOnRing_ &&
        !allocateInPlace_) {
        // Not in place: the allocation goes on the ring (spaceAhead()) and the chunk waits for
        // it, as for a full buffer, rather than the worker waiting for the journal.
        spaceWantedTo_ = std::max(spaceWantedTo_, dataEnd);
        return -EAGAIN;
    }
    if (reserveDataAhead_ && dataEnd > segment.dataAllocated) {
        std::uint64_t wanted = std::max(dataEnd, std::min(segment.dataAllocated + kDataAhead,
                                                          std::max(segmentBytes_, dataEnd)));
        long long end = allocate(segment.data.get(), 0, segment.dataAllocated, dataEnd, wanted);
        if (end < 0) return static_cast<int>(end);
        segment.dataAllocated = static_cast<std::uint64_t>(end);
        if (segment.dataAllocated >= wanted) allocateInPlace_ = false;  // the space is back
    }
    std::uint64_t indexEnd = segment.indexBytes + segment.pendingRecords.size() +
                             segment.indexPromised + indexNeed + kIndexSlack;
    if (indexEnd > segment.indexAllocated) {
        std::uint64_t from = std::max(segment.indexAllocated, segment.indexBytes);
        const std::uint64_t wanted = std::max(indexEnd, from + kIndexAhead);
        long long end = allocate(segment.index.get(), FALLOC_FL_KEEP_SIZE, from, indexEnd, wanted);
        if (end < 0) return static_cast<int>(end);
        segment.indexAllocated = static_cast<std::uint64_t>(end);
        if (!reserveDataAhead_ && segment.indexAllocated >= wanted) allocateInPlace_ = false;
    }
    return 0;
}

void SegmentStore::releasePromise(Reservation& reservation) noexcept {
    if (!reservation.indexPromised) return;
    reservation.indexPromised = false;
    auto& promised = reservation.segment->indexPromised;
    promised -= std::min(promised, chunkRecordBytes());
}

int SegmentStore::writePending(Segment& segment) noexcept {
    std::size_t written = 0;
    int rc = writeFullyAt(segment.index.get(), segment.pendingRecords, segment.indexBytes, written);
    // A failed write leaves a whole prefix on disk; the rest goes next time.
    segment.indexBytes += written;
    segment.pendingRecords.erase(0, written);
    return rc;
}

int SegmentStore::reserve(std::uint32_t length, Reservation& out) noexcept {
    if (!current_) {  // the last attempt to start a segment failed (disk full?): try again
        if (int rc = openSegment(nextSegment_); rc < 0) return rc;
        ++nextSegment_;
    }
    if (current_->reservedBytes > 0 && current_->reservedBytes + length > segmentBytes_) {
        int rc = rotate();
        if (rc < 0) return rc;
    }
    if (reserveAhead_) {
        if (int rc = allocateAhead(*current_, current_->reservedBytes + length, chunkRecordBytes());
            rc < 0)
            return rc;
        current_->indexPromised += chunkRecordBytes();
    }
    out.segment = current_;
    out.offset = current_->reservedBytes;
    out.length = length;
    out.indexPromised = reserveAhead_;
    current_->reservedBytes += length;
    ++current_->writesInFlight;
    return 0;
}

int SegmentStore::recordChunk(Reservation& reservation, std::uint64_t connection,
                              std::uint8_t direction, std::uint32_t written, std::int64_t timeNs,
                              std::optional<std::uint32_t> payloadCrc) noexcept {
    auto& segment = *reservation.segment;
    releasePromise(reservation);  // the record takes the space it was promised
    // On -ENOMEM the payload stays unindexed: a hole the reader never serves.
    int rc = append(segment, [&](std::string& out) {
        encodeChunk(out, connection, direction, written, reservation.offset, timeNs, payloadCrc);
    });
    if (rc == 0) dirty_ = true;
    abandon(reservation);
    return rc;
}

int SegmentStore::payloadCrcFromFile(const Reservation& reservation, std::uint32_t written,
                                     std::uint32_t& crc) noexcept {
    if (!reservation.segment || !reservation.segment->data) return -EBADF;
    constexpr std::size_t kPiece = 64 * 1024;
    alignas(64) static thread_local std::uint8_t buffer[kPiece];
    std::uint32_t value = 0;
    std::uint64_t offset = reservation.offset;
    std::uint32_t left = written;
    while (left > 0) {
        ssize_t n = ::pread(reservation.segment->data.get(), buffer,
                            std::min<std::size_t>(left, kPiece), static_cast<off_t>(offset));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -errno;
        if (n == 0) return -EIO;
        value = crc32c(value, buffer, static_cast<std::size_t>(n));
        offset += static_cast<std::uint64_t>(n);
        left -= static_cast<std::uint32_t>(n);
    }
    crc = value;
    return 0;
}

void SegmentStore::abandon(Reservation& reservation) noexcept {
    if (!reservation.segment) return;
    releasePromise(reservation);
    auto segment = std::move(reservation.segment);
    --segment->writesInFlight;
    if (segment->retired) sealReady();
}

int SegmentStore::recordOpen(std::uint64_t connection, std::int64_t openedNs,
                             std::string_view route, std::string_view client,
                             std::string_view upstream, std::string_view via,
                             std::string_view sni) noexcept {
    if (!current_) return 0;
    if (reserveAhead_) {
        if (int rc = allocateAhead(*current_, 0, 0); rc < 0) return rc;
    }
    int rc = append(*current_, [&](std::string& out) {
        encodeOpen(out, connection, openedNs, route, client, upstream, via, sni);
    });
    if (rc == 0) dirty_ = true;
    return rc;
}

int SegmentStore::recordClose(std::uint64_t connection, std::int64_t closedNs,
                              std::uint64_t c2uBytes, std::uint64_t u2cBytes,
                              std::string_view reason) noexcept {
    if (!current_) return 0;
    if (reserveAhead_) {
        if (int rc = allocateAhead(*current_, 0, 0); rc < 0) return rc;
    }
    int rc = append(*current_, [&](std::string& out) {
        encodeClose(out, connection, closedNs, c2uBytes, u2cBytes, reason);
    });
    if (rc == 0) dirty_ = true;
    return rc;
}

std::shared_ptr<Segment> SegmentStore::beginSync() noexcept {
    if (!dirty_ || syncInFlight_ || !current_) return nullptr;
    dirty_ = false;
    ++startedSyncs_;
    Segment& segment = *current_;
    // Records encoded from now on go after these: flush() writes them at the offset past.
    segment.indexHandedOff.swap(segment.pendingRecords);
    segment.pendingRecords.clear();
    segment.indexHandedOffAt = segment.indexBytes;
    segment.indexBytes += segment.indexHandedOff.size();
    syncInFlight_ = true;
    segment.syncing = true;
    return current_;
}

int SegmentStore::writeHandedOffIndex(Segment& segment) noexcept {
    std::size_t written = 0;
    return writeFullyAt(segment.index.get(), segment.indexHandedOff, segment.indexHandedOffAt,
                        written);
}

namespace {
void queueRecordsWrite(RingOps& ring, int fd, const std::string& records, std::uint64_t at,
                       CompletionTag tag, SqeFlags flags = {}) noexcept {
    ring.write(fd, std::as_bytes(std::span(records.data(), records.size())), at, 0, tag, flags);
}

int recordsWriteResult(const std::string& records, int result) noexcept {
    if (result < 0) return result;
    return static_cast<std::size_t>(result) == records.size() ? 0 : -EIO;
}
}  // namespace

bool queueIndexWrite(RingOps& ring, const Segment& segment, CompletionTag tag) noexcept {
    if (segment.indexHandedOff.empty()) return false;
    // Linked: the index fdatasync that follows must see these records.
    queueRecordsWrite(ring, segment.index.get(), segment.indexHandedOff, segment.indexHandedOffAt,
                      tag, SqeFlag::Link);
    return true;
}

int indexWriteResult(const Segment& segment, int result) noexcept {
    return recordsWriteResult(segment.indexHandedOff, result);
}

void queueFlushWrite(RingOps& ring, const Segment& segment, CompletionTag tag) noexcept {
    ring.makeRoom(1);
    queueRecordsWrite(ring, segment.index.get(), segment.indexFlushing, segment.indexFlushingAt,
                      tag);
}

std::shared_ptr<Segment> SegmentStore::beginFlush() noexcept {
    if (!current_ || syncInFlight_ || current_->pendingRecords.empty() ||
        !current_->indexFlushing.empty())
        return nullptr;
    Segment& segment = *current_;
    segment.indexFlushing.swap(segment.pendingRecords);
    segment.pendingRecords.clear();
    segment.indexFlushingAt = segment.indexBytes;
    segment.indexBytes += segment.indexFlushing.size();
    return current_;
}

int SegmentStore::endFlush(const std::shared_ptr<Segment>& segment, int result) noexcept {
    result = recordsWriteResult(segment->indexFlushing, result);
    segment->indexFlushing.clear();
    if (result < 0) failSegment(segment, result);  // its index has a hole: never trusted again
    if (segment->retired) sealReady();
    return result;
}

void queueDiskWork(RingOps& ring, const DiskWork& work, CompletionTag tag) noexcept {
    auto step = [&](DiskStep kind) { return tag.withSlot(static_cast<std::uint32_t>(kind)); };
    if (work.kind == DiskWork::Kind::Create) {
        SegmentCreation& creation = *work.creation;  // liburing takes open_how non-const
        ring.makeRoom(creation.recycling ? 3 : 2);
        if (creation.recycling) {
            // Linked: without a spare to rename, the open after it is cancelled.
            ring.renameat(work.fd, creation.spareName.c_str(), work.fd, creation.dataName.c_str(),
                          RENAME_NOREPLACE, step(DiskStep::CreateRecycle), SqeFlag::Link);
        }
        ring.openat2(work.fd, creation.dataName.c_str(),
                     creation.recycling ? &creation.recycledHow : &creation.how,
                     step(DiskStep::CreateData));
        ring.openat2(work.fd, creation.indexName.c_str(), &creation.how,
                     step(DiskStep::CreateIndex));
        return;
    }
    if (work.kind == DiskWork::Kind::Allocate) {
        ring.makeRoom(1);
        ring.fallocate(work.fd, work.mode, work.from, work.to - work.from,
                       step(DiskStep::Allocate));
        return;
    }
    // One chain, in one submission: the index's records, SegmentSealed last, are written only
    // once the data they point into is durable, and the seal ends with the index's fdatasync.
    const Segment& segment = *work.segment;
    ring.makeRoom(kDiskSteps - 1);
    // Hard-linked: space not given back is no failure.
    if (work.to > work.from)
        ring.fallocate(segment.index.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, work.from,
                       work.to - work.from, step(DiskStep::SealPunch), SqeFlag::HardLink);
    else
        ring.nop(step(DiskStep::SealPunch), SqeFlag::HardLink);
    if (work.fd >= 0)
        ring.fsync(work.fd, SyncMode::Full, step(DiskStep::SealDirectorySync), SqeFlag::Link);
    else
        ring.nop(step(DiskStep::SealDirectorySync), SqeFlag::Link);
    ring.fsync(segment.data.get(), SyncMode::DataOnly, step(DiskStep::SealDataSync), SqeFlag::Link);
    queueRecordsWrite(ring, segment.index.get(), segment.indexHandedOff, segment.indexHandedOffAt,
                      step(DiskStep::SealWrite), SqeFlag::Link);
    ring.fsync(segment.index.get(), SyncMode::DataOnly, step(DiskStep::SealIndexSync));
}

void queueDirectorySync(RingOps& ring, const SegmentStore& store, const Segment& segment,
                        CompletionTag tag) noexcept {
    if (segment.namesDurable) return;
    // Linked: the group commit counts on the names being durable.
    ring.fsync(store.directoryFd(), SyncMode::Full, tag, SqeFlag::Link);
}

int runDiskWork(const DiskWork& work) noexcept {
    auto sysResult = [](int rc) { return rc == 0 ? 0 : -errno; };
    if (work.kind == DiskWork::Kind::Allocate)
        return sysResult(::fallocate(work.fd, work.mode, static_cast<off_t>(work.from),
                                     static_cast<off_t>(work.to - work.from)));
    const Segment& segment = *work.segment;
    if (work.to > work.from)
        ::fallocate(segment.index.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                    static_cast<off_t>(work.from), static_cast<off_t>(work.to - work.from));
    int rc = work.fd >= 0 ? sysResult(::fsync(work.fd)) : 0;
    // A failed segment's seal record is written, not synced: its data may be gone already.
    if (rc == 0 && !segment.failed) rc = sysResult(::fdatasync(segment.data.get()));
    std::size_t written = 0;
    if (rc == 0)
        rc = writeFullyAt(segment.index.get(), segment.indexHandedOff, segment.indexHandedOffAt,
                          written);
    if (rc == 0 && !segment.failed) rc = sysResult(::fdatasync(segment.index.get()));
    return rc;
}

void SegmentStore::endSync(const std::shared_ptr<Segment>& segment, int result) noexcept {
    syncInFlight_ = false;
    segment->syncing = false;
    segment->indexHandedOff.clear();
    if (result >= 0) {
        durableSyncs_ = startedSyncs_;
        segment->namesDurable = true;  // a directory fsync was in its chain if they were not
        sealReady();                   // it may have rolled while the sync ran
        return;
    }
    ++failedSyncs_;
    logError("audit: fdatasync of ", segment->dataPath, " failed: ", errnoText(result),
             "; sealing it as failed and starting a new segment");
    sealFailed(segment);
}

void SegmentStore::shrink(Reservation& reservation, std::uint32_t length) noexcept {
    if (!reservation.segment || length >= reservation.length) return;
    auto& segment = *reservation.segment;
    if (segment.reservedBytes == reservation.offset + reservation.length)
        segment.reservedBytes -= reservation.length - length;
    reservation.length = length;
}

void SegmentStore::failSegment(const std::shared_ptr<Segment>& segment, int error) noexcept {
    if (segment->failed) return;
    ++failedSyncs_;
    logError("audit: writing ", segment->dataPath, " failed: ", errnoText(error),
             "; sealing it as failed and starting a new segment");
    sealFailed(segment);
}

// Never retry and trust: a segment whose write or sync failed is sealed as failed, and when it
// was the current one the next segment starts.
void SegmentStore::sealFailed(const std::shared_ptr<Segment>& segment) noexcept {
    if (segment != current_) {
        segment->failed = true;
        sealReady();
        return;
    }
    retire(current_, true);
    current_.reset();
    if (int rc = ensureSegment(); rc < 0)
        logError("audit: cannot start a new segment in ", dir_, ": ", errnoText(rc));
}

int SegmentStore::ensureSegment() noexcept {
    if (current_) return 0;
    if (int rc = openSegment(nextSegment_); rc < 0) return rc;
    ++nextSegment_;
    return 0;
}

// Not while a sync's records are out to be written: records written past them first would leave
// a hole in the index if the daemon died before that write (readers would see it meanwhile).
int SegmentStore::flush() noexcept {
    return current_ && !syncInFlight_ ? writePending(*current_) : 0;
}

int SegmentStore::rotate() noexcept {
    auto previous = current_;
    int rc = openSegment(nextSegment_);
    if (rc < 0) {
        logError("audit: cannot start segment ", segmentBaseName(worker_, nextSegment_), " in ",
                 dir_, ": ", errnoText(rc));
        return rc;
    }
    ++nextSegment_;
    if (previous) retire(previous, false);
    return 0;
}

void SegmentStore::retire(const std::shared_ptr<Segment>& segment, bool failed) noexcept {
    segment->retired = true;
    segment->failed = segment->failed || failed;
    retired_.push_back(segment);
    sealReady();
}

// A retired segment is sealed once its last payload write and its group commit are in: the
// ring resolves the fds of a queued fdatasync only when it runs. Segments are retired in
// creation order, and a seal needs its predecessor's digest, so only the oldest retired segment
// may seal; a later one that finished first waits for it.
void SegmentStore::sealReady() noexcept {
    while (!retired_.empty()) {
        auto& oldest = *retired_.front();
        if (oldest.writesInFlight > 0 || oldest.syncing || oldest.allocating || oldest.sealing ||
            !oldest.indexFlushing.empty())
            return;
        seal(retired_.front());  // erases it from retired_, now or when its seal ends
    }
}

// The seal's fdatasyncs can wait for the journal: on the owner's ring when it has one
// (runDiskWorkOnRing()), in place otherwise (tests, and the destructor, whose ring is gone).
void SegmentStore::seal(std::shared_ptr<Segment> sealed) noexcept {
    Segment& segment = *sealed;
    if (segment.index && segment.chain) {
        try {
            prevDigest_ = encodeSegmentSealed(segment.pendingRecords, segment.reservedBytes,
                                              segment.failed ? kSealFailed : kSealClean,
                                              chainKey_.get(), prevDigest_, *segment.chain);
            segment.sealDigest = prevDigest_;
        } catch (const std::bad_alloc&) {
            // Still consistent: an unsealed segment is what recovery expects after a crash
            // (recovery seals it and continues the chain; the next seal here would not match,
            // which verify then reports).
            logError("audit: sealing ", segment.dataPath,
                     ": out of memory for its SegmentSealed record; it stays unsealed");
        }
        segment.chain.reset();
    }
    // Index space taken ahead and not used goes back (the file's size never included it).
    DiskWork work{DiskWork::Kind::Seal, sealed};
    if (!segment.namesDurable) work.fd = dirFd_.get();
    work.from = segment.indexBytes + segment.pendingRecords.size();
    work.to = std::max(work.from, segment.indexAllocated);
    segment.indexHandedOff.swap(segment.pendingRecords);
    segment.pendingRecords.clear();
    segment.indexHandedOffAt = segment.indexBytes;
    segment.indexBytes += segment.indexHandedOff.size();
    segment.sealing = true;
    if (diskWorkOnRing_ && !segment.failed) {
        sealing_ = std::move(sealed);
        sealHandedOut_ = false;
        sealError_ = 0;
        pendingSeal_ = std::move(work);
        return;
    }
    finishSeal(segment, runDiskWork(work));
}

void SegmentStore::finishSeal(Segment& segment, int result) noexcept {
    if (result < 0 && !segment.failed) {
        // Its chunks were counted durable by a group commit on the next segment: say so.
        ++failedSyncs_;
        logError("audit: sealing ", segment.dataPath, ": ", errnoText(result),
                 "; its last chunks may not be durable");
    }
    // Space allocated ahead and not used goes: a sealed data file ends at its last byte, so no
    // restart finds unindexed bytes to cut, and a recycled file no longer holds deleted ones.
    if (segment.data) cutAndOpenToGroup(segment);
    if (segment.sealDigest && result >= 0) {
        auto indexFile = segmentBaseName(worker_, segment.number) + ".index";
        logInfo("audit seal ", dir_, "/", indexFile, " digest=", digestHex(*segment.sealDigest));
        if (heads_) heads_->record({worker_, std::move(indexFile), *segment.sealDigest});
    }
    segment.sealing = false;
    segment.indexHandedOff.clear();
    segment.data.reset();
    segment.index.reset();
    std::erase_if(retired_, [&](const auto& s) { return s.get() == &segment; });
}

std::optional<DiskWork> SegmentStore::takeDiskWork() noexcept {
    if (sealing_ && !sealHandedOut_) {
        sealHandedOut_ = true;
        return pendingSeal_;
    }
    if (!diskWorkOnRing_) return std::nullopt;
    if (auto create = createAhead()) return create;
    // After a failed allocation (a full disk) chunks take their space in place until one finds
    // a whole step free again: retrying ahead at once would spin on ENOSPC.
    if (allocating_ || allocateInPlace_) return std::nullopt;
    allocating_ = spaceAhead();
    if (!allocating_) allocating_ = spaceAheadOfCreated();
    if (allocating_) allocating_->segment->allocating = true;
    return allocating_;
}

std::optional<DiskWork> SegmentStore::createAhead() noexcept {
    if (!createAhead_ || created_ || !current_ || current_->retired || sealing_ ||
        !retired_.empty() || current_->reservedBytes < segmentBytes_ / 2)
        return std::nullopt;
    try {
        created_ = newSegment(nextSegment_);
        auto base = segmentBaseName(worker_, nextSegment_);
        creation_.dataName = base + ".data";
        creation_.indexName = base + ".index";
    } catch (const std::bad_alloc&) {
        created_.reset();
        return std::nullopt;  // the roll opens them in place
    }
    creation_.how = open_how{};
    creation_.how.flags = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW;
    creation_.how.mode = kSegmentFileMode;
    creation_.how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH;
    creation_.recycling = recycleSpares_ && spareMisses_ < kSpareSlots;
    creation_.renamed = false;
    creation_.renameError = 0;
    if (creation_.recycling) {
        creation_.spareName = spareDataName(worker_, spareMisses_);
        creation_.recycledHow = creation_.how;
        creation_.recycledHow.flags = O_RDWR | O_CLOEXEC | O_NOFOLLOW;
        creation_.recycledHow.mode = 0;  // openat2 refuses a mode without O_CREAT
    } else {
        spareMisses_ = 0;  // a new file; the next creation looks from the first slot again
    }
    creationSteps_ = creation_.recycling ? 3 : 2;
    creationError_ = 0;
    creationAdopted_ = false;
    ownNames_ = nextSegment_;
    DiskWork work{DiskWork::Kind::Create, created_};
    work.fd = dirFd_.get();
    work.creation = &creation_;
    return work;
}

void SegmentStore::createDone(DiskStep step, int result) noexcept {
    bool opened = step != DiskStep::CreateRecycle;  // a rename's result is no fd
    UniqueFd fd(opened && result >= 0 ? result : -1);
    if (!created_ || creationSteps_ == 0) return;
    if (!opened) {
        creation_.renamed = result == 0;
        creation_.renameError = std::min(result, 0);
        if (creation_.renamed) spareMisses_ = 0;
    } else if (result < 0 && creationError_ == 0) {
        creationError_ = result;
    }
    if (fd && !creationAdopted_) {
        bool spare = step == DiskStep::CreateData && creation_.renamed;
        adjustCreatedFile(fd.get(), dirFd_.get(), spare ? kRecycledFileMode : kSegmentFileMode);
        if (spare) adoptSpare(fd.get());
        (step == DiskStep::CreateData ? created_->data : created_->index) = std::move(fd);
    }
    if (--creationSteps_ == 0 && (creationAdopted_ || creationError_ != 0)) discardCreated();
}

void SegmentStore::cutAndOpenToGroup(Segment& segment) noexcept {
    struct stat st {};
    if (::fstat(segment.data.get(), &st) != 0) return;
    if (static_cast<std::uint64_t>(st.st_size) > segment.reservedBytes &&
        ::ftruncate(segment.data.get(), static_cast<off_t>(segment.reservedBytes)) != 0) {
        // Then the deleted bytes past the end stay private: the file keeps mode 0600.
        logWarn("audit: cannot cut ", segment.dataPath, " to its ", segment.reservedBytes,
                " bytes: ", errnoText(errno));
        return;
    }
    if (segment.recycled && ::fchmod(segment.data.get(), kSegmentFileMode) != 0)
        logWarn("audit: cannot give ", segment.dataPath, " mode 0640: ", errnoText(errno));
}

// A spare is a whole segment's data file, every block written (sealed segments are cut to their
// last byte and have no holes): the space ahead of the first reservations is taken already.
void SegmentStore::adoptSpare(int fd) noexcept {
    struct stat st {};
    created_->recycled = true;
    if (::fstat(fd, &st) != 0) return;
    auto size = static_cast<std::uint64_t>(st.st_size);
    if (static_cast<std::uint64_t>(st.st_blocks) * 512 >= size) created_->dataAllocated = size;
}

// A creation that failed takes back the names it made; after a roll adopted them, they are the
// current segment's (or, if that roll failed, the next attempt's: ownNames_).
void SegmentStore::discardCreated() noexcept {
    auto segment = std::move(created_);
    if (creationAdopted_ || !segment) return;
    if (segment->data || creation_.renamed) ::unlinkat(dirFd_.get(), creation_.dataName.c_str(), 0);
    if (segment->index) ::unlinkat(dirFd_.get(), creation_.indexName.c_str(), 0);
    if (ownNames_ == segment->number) ownNames_ = 0;
    if (creationError_ == 0) return;
    if (creation_.renameError != 0) {
        // No spare in that slot (the usual case without retention): the next creation tries the
        // next slot, and makes a new file once every slot was empty. One that cannot be taken
        // stops the recycling.
        ++spareMisses_;
        if (creation_.renameError == -ENOENT) return;
        recycleSpares_ = false;
        logWarn("audit: taking ", dir_, "/", creation_.spareName, " as ", creation_.dataName,
                " failed (", errnoText(creation_.renameError), "): worker ", worker_,
                " creates new data files from now on");
        return;
    }
    createAhead_ = false;
    logWarn("audit: creating ", dir_, "/", creation_.dataName,
            " ahead on the worker's ring failed (", errnoText(creationError_), "): worker ",
            worker_, " creates its segments in place from now on");
}

// The created segment's first step of data and index space, once the current one has what it
// needs: its first chunks then find their space taken.
std::optional<DiskWork> SegmentStore::spaceAheadOfCreated() noexcept {
    if (!reserveAhead_ || !created_ || creationSteps_ > 0 || creationAdopted_) return std::nullopt;
    Segment& segment = *created_;
    DiskWork work{DiskWork::Kind::Allocate, created_};
    if (reserveDataAhead_ && segment.dataAllocated == 0) {
        work.fd = segment.data.get();
        work.to = std::min(kDataAhead, segmentBytes_);
        return work;
    }
    if (segment.indexAllocated == 0) {
        work.fd = segment.index.get();
        work.mode = FALLOC_FL_KEEP_SIZE;
        work.to = kIndexAhead;
        return work;
    }
    return std::nullopt;
}

// Keeps the current segment's data one step (kDataAhead) and its index half a step
// (kIndexAhead) allocated ahead of what is reserved, so that reserve() finds the space taken.
std::optional<DiskWork> SegmentStore::spaceAhead() noexcept {
    if (!reserveAhead_ || !current_ || current_->retired) return std::nullopt;
    Segment& segment = *current_;
    DiskWork work{DiskWork::Kind::Allocate, current_};
    std::uint64_t dataEnd = std::max({segmentBytes_, segment.reservedBytes, spaceWantedTo_});
    if (reserveDataAhead_ && segment.dataAllocated < dataEnd &&
        (segment.dataAllocated < segment.reservedBytes + kDataAhead ||
         segment.dataAllocated < spaceWantedTo_)) {
        work.fd = segment.data.get();
        work.from = segment.dataAllocated;
        work.to = std::max(spaceWantedTo_, std::min(segment.dataAllocated + kDataAhead, dataEnd));
        return work;
    }
    std::uint64_t indexUsed =
        segment.indexBytes + segment.pendingRecords.size() + segment.indexPromised + kIndexSlack;
    if (segment.indexAllocated < indexUsed + kIndexAhead / 2) {
        work.fd = segment.index.get();
        work.mode = FALLOC_FL_KEEP_SIZE;
        work.from = std::max(segment.indexAllocated, segment.indexBytes);
        work.to = indexUsed + kIndexAhead;
        return work;
    }
    return std::nullopt;
}

std::optional<int> SegmentStore::diskWorkDone(DiskStep step, int result) noexcept {
    if (step == DiskStep::CreateData || step == DiskStep::CreateIndex ||
        step == DiskStep::CreateRecycle) {
        createDone(step, result);
        return std::nullopt;
    }
    if (step == DiskStep::Allocate) {
        if (!allocating_) return std::nullopt;
        DiskWork work = std::move(*allocating_);
        allocating_.reset();
        Segment& segment = *work.segment;
        segment.allocating = false;
        // A chunk that waited for this space asks again; after a failure it allocates in place,
        // which meets a full disk with the exact space it needs.
        spaceWantedTo_ = 0;
        allocateInPlace_ = result < 0;
        if (result >= 0) {
            bool data = work.mode == 0;  // the index's space is taken with KEEP_SIZE
            auto& allocated = data ? segment.dataAllocated : segment.indexAllocated;
            allocated = std::max(allocated, work.to);
            if (data && segment.retired) segment.grewAfterRetire = true;
        }
        if (segment.retired) sealReady();
        return std::nullopt;
    }
    if (!sealing_) return std::nullopt;
    if (step == DiskStep::SealWrite) result = indexWriteResult(*sealing_, result);
    if (step == DiskStep::SealPunch) result = 0;  // only space not given back
    if (sealError_ == 0 && result < 0) sealError_ = result;
    if (step != DiskStep::SealIndexSync) return std::nullopt;
    auto segment = std::move(sealing_);
    int sealed = sealError_;
    finishSeal(*segment, sealed);
    sealReady();
    return sealed;
}

}  // namespace splicegate::audit
