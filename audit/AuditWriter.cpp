#include "audit/AuditWriter.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <new>

#include "audit/Records.h"
#include "common/Error.h"
#include "common/Log.h"

namespace splicegate::audit {

std::int64_t wallClockNs() noexcept {
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    return static_cast<std::int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

AuditWriter::AuditWriter(std::string dir, std::uint32_t worker, std::uint64_t firstSegment,
                         std::uint64_t segmentBytes,
                         const std::atomic<std::uint64_t>* nextConnectionId)
    : dir_(std::move(dir)),
      worker_(worker),
      segmentBytes_(segmentBytes),
      nextConnectionId_(nextConnectionId),
      nextSegment_(firstSegment) {
    int rc = openSegment(nextSegment_);
    if (rc < 0)
        throwErrno(-rc, "audit: cannot create segment " + dir_ + "/" +
                            segmentBaseName(worker_, nextSegment_));
    ++nextSegment_;
}

AuditWriter::~AuditWriter() {
    if (current_) retire(current_, false);
    auto remaining = retired_;
    for (auto& segment : remaining) {
        // Writes still in flight cannot complete after the ring is gone: seal what we have.
        segment->writesInFlight = 0;
        segment->syncing = false;
        sealIfDone(*segment);
    }
}

int AuditWriter::openSegment(std::uint64_t number) noexcept {
    auto segment = std::make_shared<Segment>();
    segment->worker = worker_;
    segment->number = number;
    auto base = dir_ + "/" + segmentBaseName(worker_, number);
    segment->dataPath = base + ".data";
    constexpr int flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC;
    segment->data.reset(::open(segment->dataPath.c_str(), flags, 0640));
    if (!segment->data) return -errno;
    auto indexPath = base + ".index";
    segment->index.reset(::open(indexPath.c_str(), flags, 0640));
    int rc = segment->index ? 0 : -errno;
    if (rc == 0) {
        // Relaxed is enough: the floor must exceed the ids this worker recorded in its earlier
        // segments, and this thread fetched those from the counter itself.
        std::uint64_t idFloor =
            nextConnectionId_ ? nextConnectionId_->load(std::memory_order_relaxed) : 0;
        encodeSegmentStart(segment->pendingRecords, worker_, number, wallClockNs(), idFloor);
        rc = writePending(*segment);
    }
    if (rc < 0) {  // leave no half-made segment behind: the next attempt reuses the number
        ::unlink(segment->dataPath.c_str());
        if (segment->index) ::unlink(indexPath.c_str());
        return rc;
    }
    current_ = std::move(segment);
    return 0;
}

int AuditWriter::writePending(Segment& segment) noexcept {
    while (!segment.pendingRecords.empty()) {
        auto written =
            ::pwrite(segment.index.get(), segment.pendingRecords.data(),
                     segment.pendingRecords.size(), static_cast<off_t>(segment.indexBytes));
        if (written < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        // A short write leaves a whole prefix on disk; the rest goes next time.
        segment.indexBytes += static_cast<std::uint64_t>(written);
        segment.pendingRecords.erase(0, static_cast<std::size_t>(written));
    }
    return 0;
}

int AuditWriter::reserve(std::uint32_t length, Reservation& out) noexcept {
    if (!current_) {  // the last attempt to start a segment failed (disk full?): try again
        if (int rc = openSegment(nextSegment_); rc < 0) return rc;
        ++nextSegment_;
    }
    if (current_->reservedBytes > 0 && current_->reservedBytes + length > segmentBytes_) {
        int rc = rotate();
        if (rc < 0) return rc;
    }
    out.segment = current_;
    out.offset = current_->reservedBytes;
    out.length = length;
    current_->reservedBytes += length;
    ++current_->writesInFlight;
    return 0;
}

int AuditWriter::recordChunk(Reservation& reservation, std::uint64_t connection,
                             std::uint8_t direction, std::uint32_t written,
                             std::int64_t timeNs) noexcept {
    auto& segment = *reservation.segment;
    int rc = 0;
    try {
        encodeChunk(segment.pendingRecords, connection, direction, written, reservation.offset,
                    timeNs);
        dirty_ = true;
    } catch (const std::bad_alloc&) {
        rc = -ENOMEM;  // the payload stays unindexed: a hole the reader never serves
    }
    abandon(reservation);
    return rc;
}

void AuditWriter::abandon(Reservation& reservation) noexcept {
    if (!reservation.segment) return;
    auto segment = std::move(reservation.segment);
    --segment->writesInFlight;
    if (segment->retired) sealIfDone(*segment);
}

int AuditWriter::recordOpen(std::uint64_t connection, std::int64_t openedNs, std::string_view route,
                            std::string_view client, std::string_view upstream) noexcept {
    if (!current_) return 0;
    try {
        encodeOpen(current_->pendingRecords, connection, openedNs, route, client, upstream);
    } catch (const std::bad_alloc&) {
        return -ENOMEM;
    }
    dirty_ = true;
    return 0;
}

int AuditWriter::recordClose(std::uint64_t connection, std::int64_t closedNs,
                             std::uint64_t c2uBytes, std::uint64_t u2cBytes,
                             std::string_view reason) noexcept {
    if (!current_) return 0;
    try {
        encodeClose(current_->pendingRecords, connection, closedNs, c2uBytes, u2cBytes, reason);
    } catch (const std::bad_alloc&) {
        return -ENOMEM;
    }
    dirty_ = true;
    return 0;
}

std::shared_ptr<Segment> AuditWriter::beginSync() noexcept {
    if (!dirty_ || syncInFlight_ || !current_) return nullptr;
    dirty_ = false;
    ++startedSyncs_;
    int rc = writePending(*current_);
    if (rc < 0) {
        logError("audit: writing ", current_->dataPath, " index: ", errnoText(rc));
        syncInFlight_ = true;
        endSync(current_, rc);
        return nullptr;
    }
    syncInFlight_ = true;
    current_->syncing = true;
    return current_;
}

void AuditWriter::endSync(const std::shared_ptr<Segment>& segment, int result) noexcept {
    syncInFlight_ = false;
    segment->syncing = false;
    if (result >= 0) {
        durableSyncs_ = startedSyncs_;
        sealIfDone(*segment);  // it may have rolled while the sync ran
        return;
    }
    ++failedSyncs_;
    logError("audit: fdatasync of ", segment->dataPath, " failed: ", errnoText(result),
             "; sealing it as failed and starting a new segment");
    if (segment != current_) {
        segment->failed = true;
        sealIfDone(*segment);
    } else {
        retire(current_, true);
        current_.reset();
        if (int rc = openSegment(nextSegment_); rc < 0)
            logError("audit: cannot start a new segment in ", dir_, ": ", errnoText(rc));
        else
            ++nextSegment_;
    }
}

int AuditWriter::flush() noexcept {
    return current_ ? writePending(*current_) : 0;
}

int AuditWriter::rotate() noexcept {
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

void AuditWriter::retire(const std::shared_ptr<Segment>& segment, bool failed) noexcept {
    segment->retired = true;
    segment->failed = segment->failed || failed;
    retired_.push_back(segment);
    sealIfDone(*segment);
}

// A retired segment is sealed once its last payload write and its group commit are in: the
// ring resolves the fds of a queued fdatasync only when it runs. Rolls are rare (one per segment
// size), so the final fdatasync here runs synchronously.
void AuditWriter::sealIfDone(Segment& segment) noexcept {
    if (!segment.retired || segment.writesInFlight > 0 || segment.syncing || !segment.index) return;
    try {
        encodeSegmentSealed(segment.pendingRecords, segment.reservedBytes, segment.failed ? 1 : 0);
    } catch (const std::bad_alloc&) {
        // Still consistent: an unsealed segment is what recovery expects after a crash.
        logError("audit: sealing ", segment.dataPath,
                 ": out of memory for its SegmentSealed record; it stays unsealed");
    }
    if (writePending(segment) == 0 && !segment.failed) {
        int rc = ::fdatasync(segment.data.get()) == 0 && ::fdatasync(segment.index.get()) == 0
                     ? 0
                     : -errno;
        if (rc < 0) {
            // Its chunks were counted durable by a group commit on the next segment: say so.
            ++failedSyncs_;
            logError("audit: sealing ", segment.dataPath, ": fdatasync failed: ", errnoText(rc),
                     "; its last chunks may not be durable");
        }
    }
    segment.data.reset();
    segment.index.reset();
    std::erase_if(retired_, [&](const auto& s) { return s.get() == &segment; });
}

}  // namespace splicegate::audit
