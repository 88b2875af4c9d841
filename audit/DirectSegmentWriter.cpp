#include "audit/DirectSegmentWriter.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <new>

#include "audit/Crc32c.h"
#include "common/Error.h"
#include "common/Log.h"

namespace splicegate::audit {

DirectSegmentWriter::DirectSegmentWriter(std::unique_ptr<SegmentStore> segments, RingOps& ring,
                                         RingRegistration& registration,
                                         const DirectLogOptions& options)
    : segments_(std::move(segments)), ring_(ring), writer_(ring, registration, options) {
    segments_->runDiskWorkOnRing();
}

DirectSegmentWriter::~DirectSegmentWriter() {
    for (auto& waiting : waiting_)
        if (!waiting.close) segments_->abandon(waiting.segment);
}

int DirectSegmentWriter::follow(const std::shared_ptr<Segment>& segment) noexcept {
    int rc = writer_.startFile(segment->data.get(), segment->number);
    if (rc < 0) return rc;
    current_ = segment;
    try {
        recent_.push_back(segment);
    } catch (const std::bad_alloc&) {
        return 0;  // only failures of that segment would go unsealed-as-failed; its sync still
                   // fails
    }
    // A few are enough: the writer lets a file go once it is written and synced.
    if (recent_.size() > 8) recent_.pop_front();
    return 0;
}

int DirectSegmentWriter::reserve(std::uint32_t length, DirectChunk& chunk) noexcept {
    chunk = DirectChunk{};
    auto want = static_cast<std::uint32_t>(std::min<std::size_t>(length, writer_.room()));
    if (want == 0) return 0;  // full: the caller stops reading until room() grows
    if (int rc = segments_->reserve(want, chunk.segment); rc < 0) {
        if (rc != -EAGAIN) return rc;
        queueDiskWork();  // the allocation it waits for; room() is 0 until it is in
        return 0;
    }
    if (chunk.segment.segment != current_) {
        if (int rc = follow(chunk.segment.segment); rc < 0) {
            segments_->shrink(chunk.segment, 0);
            segments_->abandon(chunk.segment);
            return rc;
        }
    }
    int rc = writer_.reserve(want, chunk.log);
    // Both logs hand out offsets in the same order, so the segment's is the writer's.
    if (rc == 0 && !chunk.log.memory.empty() && chunk.log.fileOffset != chunk.segment.offset) {
        logError("audit: direct writer at offset ", chunk.log.fileOffset, " of ",
                 chunk.segment.segment->dataPath, ", index at ", chunk.segment.offset);
        writer_.complete(chunk.log, 0);
        rc = -EIO;
    }
    segments_->shrink(chunk.segment,
                      rc < 0 ? 0 : static_cast<std::uint32_t>(chunk.log.memory.size()));
    if (rc < 0 || chunk.log.memory.empty()) {
        segments_->abandon(chunk.segment);
        chunk = DirectChunk{};
        return rc;
    }
    chunk.memory = chunk.log.memory;
    queueDiskWork();
    return 0;
}

int DirectSegmentWriter::recordChunk(DirectChunk& chunk, std::uint64_t connection,
                                     std::uint8_t direction, std::uint32_t written) noexcept {
    if (!chunk.reserved()) return -EINVAL;
    if (auto found = lostBytes_.find(connection); found != lostBytes_.end()) {
        // The connection lost earlier chunks to a write error: its log has a hole, so it takes no
        // more (the tap applies fail-closed or fail-open to this error, as to a failed write).
        abandon(chunk);
        return -EIO;
    }
    written = static_cast<std::uint32_t>(std::min<std::size_t>(written, chunk.memory.size()));
    // The bytes pass through user memory: their checksum costs one pass, in cache.
    std::uint32_t crc = crc32c(0, chunk.memory.data(), written);
    std::uint64_t lsn = chunk.log.lsn;
    std::uint64_t appendedBefore = writer_.appendedLsn();
    writer_.complete(chunk.log, written);
    // Where the writer took the unfilled rest back, the segment gives the same bytes back.
    if (writer_.appendedLsn() < appendedBefore) segments_->shrink(chunk.segment, written);
    chunk.memory = {};
    if (written == 0) {
        segments_->abandon(chunk.segment);
        return 0;
    }
    try {
        Waiting waiting;
        waiting.lsnBegin = lsn;
        waiting.lsnEnd = lsn + written;
        waiting.connection = connection;
        waiting.segment = std::move(chunk.segment);
        waiting.direction = direction;
        waiting.length = written;
        waiting.crc = crc;
        waiting.timeNs = wallClockNs();
        waiting_.push_back(std::move(waiting));
    } catch (const std::bad_alloc&) {
        segments_->abandon(chunk.segment);
        return -ENOMEM;
    }
    recordedSinceSync_ = true;
    return 0;
}

void DirectSegmentWriter::abandon(DirectChunk& chunk) noexcept {
    if (!chunk.reserved()) return;
    std::uint64_t appendedBefore = writer_.appendedLsn();
    writer_.complete(chunk.log, 0);
    if (writer_.appendedLsn() < appendedBefore) segments_->shrink(chunk.segment, 0);
    segments_->abandon(chunk.segment);
    chunk = DirectChunk{};
    queueDiskWork();
}

int DirectSegmentWriter::recordOpen(std::uint64_t connection, std::string_view route,
                                    std::string_view client, std::string_view upstream,
                                    std::string_view via, std::string_view sni) noexcept {
    // After a failed segment the next one may not exist yet (disk full): an Open record must not
    // be dropped, its chunks would have no connection.
    if (int rc = segments_->ensureSegment(); rc < 0) return rc;
    return segments_->recordOpen(connection, wallClockNs(), route, client, upstream, via, sni);
}

std::vector<LostChunk> DirectSegmentWriter::takeLost() noexcept {
    std::vector<LostChunk> taken;
    taken.swap(lost_);
    return taken;
}

int DirectSegmentWriter::recordClose(std::uint64_t connection, std::uint64_t c2uBytes,
                                     std::uint64_t u2cBytes, std::string_view reason) noexcept {
    if (auto found = lostBytes_.find(connection); found != lostBytes_.end() && waiting_.empty()) {
        c2uBytes -= std::min(c2uBytes, found->second[0]);
        u2cBytes -= std::min(u2cBytes, found->second[1]);
        lostBytes_.erase(found);
    }
    recordedSinceSync_ = true;
    // After every chunk of the connection: those still waiting for their data go first.
    if (waiting_.empty())
        return segments_->recordClose(connection, wallClockNs(), c2uBytes, u2cBytes, reason);
    try {
        Waiting waiting;
        waiting.lsnBegin = waiting.lsnEnd = writer_.appendedLsn();
        waiting.connection = connection;
        waiting.close = true;
        waiting.timeNs = wallClockNs();
        waiting.c2uBytes = c2uBytes;
        waiting.u2cBytes = u2cBytes;
        waiting.reason = reason;
        waiting_.push_back(std::move(waiting));
    } catch (const std::bad_alloc&) {
        return -ENOMEM;
    }
    return 0;
}

bool DirectSegmentWriter::dirty() const noexcept {
    return recordedSinceSync_ || segments_->dirty() || !waiting_.empty() ||
           writer_.durableLsn() < writer_.appendedLsn();
}

int DirectSegmentWriter::startSync() noexcept {
    if (state_ != State::Idle || !dirty()) return 0;
    ++startedSyncs_;
    recordedSinceSync_ = false;
    target_ = writer_.appendedLsn();
    state_ = State::WaitingData;
    writer_.commit();
    advance();
    queueDiskWork();
    return 1;
}

std::optional<int> DirectSegmentWriter::complete(CompletionTag tag, int result) noexcept {
    if (tag.owner != RingOwner::AuditLog) return std::nullopt;
    switch (tag.opAs<AuditLogOp>()) {
        case AuditLogOp::DiskWork: {
            if (tag.slot >= kDiskSteps) return std::nullopt;
            auto sealed = segments_->diskWorkDone(static_cast<DiskStep>(tag.slot), result);
            queueDiskWork();
            if (sealed && *sealed < 0 && heldResult_ && *heldResult_ >= 0) heldResult_ = *sealed;
            if (!heldResult_ || segments_->sealInFlight()) return std::nullopt;
            int held = *heldResult_;
            heldResult_.reset();
            return finish(held);
        }
        case AuditLogOp::IndexWrite:
            if (indexSegment_) indexWriteResult_ = indexWriteResult(*indexSegment_, result);
            return std::nullopt;
        case AuditLogOp::DirectorySync:
            directorySyncResult_ = result;
            return std::nullopt;
        case AuditLogOp::IndexFlush:
            // Records lost with a failed write fail the sync that would count their chunks
            // durable.
            if (auto segment = std::move(flushSegment_))
                if (int rc = segments_->endFlush(segment, result); rc < 0) noteSyncError(rc, true);
            handleFailures();
            advance();  // a sync may wait for this write
            queueDiskWork();
            return std::nullopt;
        case AuditLogOp::IndexSync:
            // The first step that failed cancelled the rest: report it, not their -ECANCELED.
            if (directorySyncResult_ < 0)
                result = directorySyncResult_;
            else if (indexWriteResult_ < 0)
                result = indexWriteResult_;
            if (indexSegment_) segments_->endSync(indexSegment_, result);
            indexSegment_.reset();
            queueDiskWork();  // the sync may have let a rolled segment's seal go
            result = result < 0 ? result : syncError_;
            // Chunks this sync booked into a rolled segment are in that segment's seal: the sync
            // ends when the seal does.
            if (segments_->sealInFlight()) {
                heldResult_ = result;
                return std::nullopt;
            }
            return finish(result);
        case AuditLogOp::DataWrite:
        case AuditLogOp::DataWriteDelay:
        case AuditLogOp::DataSync:
            writer_.onCompletion(tag, result);
            advance();
            queueDiskWork();
            return std::nullopt;
    }
    return std::nullopt;
}

void DirectSegmentWriter::queueDiskWork() noexcept {
    while (auto work = segments_->takeDiskWork())
        audit::queueDiskWork(ring_, *work, auditLogTag(AuditLogOp::DiskWork));
}

void DirectSegmentWriter::advance() noexcept {
    handleFailures();
    bookDurable();
    // A reservation given back after the sync began lowers the appended end below the target.
    // The records of a flush still being written must be in before the index is synced.
    if (state_ != State::WaitingData ||
        writer_.durableLsn() < std::min(target_, writer_.appendedLsn()) || flushSegment_)
        return;
    state_ = State::WaitingIndex;
    indexSegment_ = segments_->beginSync();
    // Even with nothing to fdatasync the sync ends through a completion, as every sync does.
    submitIndexSync(indexSegment_ ? indexSegment_->index.get() : -1);
}

void DirectSegmentWriter::submitIndexSync(int fd) noexcept {
    indexWriteResult_ = 0;
    directorySyncResult_ = 0;
    ring_.makeRoom(3);
    if (indexSegment_) {
        queueDirectorySync(ring_, *segments_, *indexSegment_,
                           auditLogTag(AuditLogOp::DirectorySync));
        queueIndexWrite(ring_, *indexSegment_, auditLogTag(AuditLogOp::IndexWrite));
    }
    if (fd >= 0)
        ring_.fsync(fd, SyncMode::DataOnly, auditLogTag(AuditLogOp::IndexSync));
    else
        ring_.nop(auditLogTag(AuditLogOp::IndexSync));
}

void DirectSegmentWriter::handleFailures() noexcept {
    for (const auto& failure : writer_.takeFailures()) {
        noteSyncError(failure.error, failure.inWrite);
        // Chunks whose bytes were lost are never booked.
        std::erase_if(waiting_, [&](Waiting& waiting) {
            bool lost = !waiting.close && waiting.lsnBegin < failure.lostTo &&
                        waiting.lsnEnd > failure.lostFrom;
            if (lost) {
                segments_->abandon(waiting.segment);
                try {
                    lost_.push_back(
                        {waiting.connection, waiting.direction, waiting.length, failure.error});
                    lostBytes_[waiting.connection][waiting.direction & 1] += waiting.length;
                } catch (const std::bad_alloc&) {
                    // Only the report is lost: the sync still fails for these chunks.
                }
            }
            return lost;
        });
        for (const auto& segment : recent_) {
            if (segment->number != failure.fileId) continue;
            segments_->failSegment(segment, failure.error);
            if (segment == current_) current_.reset();  // the next reserve follows the new one
            break;
        }
    }
}

void DirectSegmentWriter::bookDurable() noexcept {
    bookUpTo(writer_.durableLsn());
}

void DirectSegmentWriter::bookUpTo(std::uint64_t lsn) noexcept {
    while (!waiting_.empty() && waiting_.front().lsnEnd <= lsn) {
        Waiting& waiting = waiting_.front();
        if (waiting.close) {
            // The Close record counts what the log holds: chunks lost to a write error are out.
            if (auto found = lostBytes_.find(waiting.connection); found != lostBytes_.end()) {
                waiting.c2uBytes -= std::min(waiting.c2uBytes, found->second[0]);
                waiting.u2cBytes -= std::min(waiting.u2cBytes, found->second[1]);
                lostBytes_.erase(found);
            }
        }
        int rc =
            waiting.close
                ? segments_->recordClose(waiting.connection, waiting.timeNs, waiting.c2uBytes,
                                         waiting.u2cBytes, waiting.reason)
                : segments_->recordChunk(waiting.segment, waiting.connection, waiting.direction,
                                         waiting.length, waiting.timeNs, waiting.crc);
        if (rc < 0) noteSyncError(rc, true);  // a record that could not be buffered
        waiting_.pop_front();
    }
}

void DirectSegmentWriter::noteSyncError(int error, bool inWrite) noexcept {
    if (syncError_ != 0) return;  // the first failure is the cause
    syncError_ = error;
    syncErrorInWrite_ = inWrite;
}

std::optional<int> DirectSegmentWriter::finish(int result) noexcept {
    state_ = State::Idle;
    lastFailureInWrite_ = syncError_ != 0 && syncErrorInWrite_;
    syncError_ = 0;
    syncErrorInWrite_ = false;
    if (result >= 0) {
        durableSyncs_ = startedSyncs_;
        return 0;
    }
    ++failedSyncs_;
    return result;
}

// Durability none: records follow their data once it is written (not synced), the tail written
// out each time, so neither the index nor the records held for it wait for a roll.
int DirectSegmentWriter::flush() noexcept {
    handleFailures();
    bookUpTo(writer_.writtenLsn());
    writer_.writeOut();
    queueDiskWork();
    if (flushSegment_) return 0;
    flushSegment_ = segments_->beginFlush();
    if (flushSegment_) queueFlushWrite(ring_, *flushSegment_, auditLogTag(AuditLogOp::IndexFlush));
    return 0;
}

int DirectSegmentWriter::rotate() noexcept {
    int rc = segments_->rotate();
    // The retired segment is sealed once its waiting chunks are booked: start the commit that
    // books them now rather than at the next interval.
    if (rc == 0) startSync();
    queueDiskWork();
    return rc;
}

bool DirectSegmentWriter::nothingInFlight() const noexcept {
    return state_ == State::Idle && writer_.idle() && !segments_->diskWorkInFlight() &&
           !flushSegment_;
}

template <typename Done>
DirectSegmentWriter::Wait DirectSegmentWriter::waitFor(Done done,
                                                       std::optional<int>& ended) noexcept {
    // Bounded by the clock, not by rounds: other completions on the worker's ring end a wait
    // early. A disk that answers nothing for a minute is gone.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
    while (std::chrono::steady_clock::now() < deadline) {
        queueDiskWork();
        if (done()) return Wait::Done;
        if (nothingInFlight()) return Wait::Stalled;
        ring_.submitAndWait(100);
        // Only this log's: the worker's loop, which routes the rest, is over.
        ring_.drainCompletions([&](const io_uring_cqe& cqe) {
            if (auto result = complete(CompletionTag::decode(cqe.user_data), cqe.res))
                ended = result;
        });
    }
    return Wait::TimedOut;
}

void DirectSegmentWriter::syncNow() noexcept {
    std::optional<int> ended;
    auto wait = waitFor(
        [&] {
            if (ended && *ended < 0) return true;  // failed: what could be sealed is sealed
            if (nothingInFlight() && !dirty()) return true;
            if (state_ == State::Idle) startSync();
            return false;
        },
        ended);
    if (wait == Wait::TimedOut)
        logError("audit: the audit log did not become durable within a minute at shutdown");
    else if (wait == Wait::Stalled)
        logError(
            "audit: records written since the last sync could not be made durable at "
            "shutdown (an earlier write or sync failed); recovery cuts what the index does "
            "not cover");
}

void DirectSegmentWriter::finishFile() noexcept {
    syncNow();
    // The data file is cut to its last byte once written and synced (no padding, no
    // preallocation left); the segment's seal then makes that durable.
    writer_.closeFile();
    std::optional<int> ended;
    waitFor([&] { return writer_.idle() && !segments_->diskWorkInFlight() && !flushSegment_; },
            ended);
}

}  // namespace splicegate::audit
