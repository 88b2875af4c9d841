#include "datapath/SegmentAuditLog.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "common/Log.h"
#include "common/Ring.h"
#include "datapath/Failpoints.h"

namespace splicegate {
namespace {
enum SyncStep : std::uint32_t { kSyncData = 0, kSyncIndex = 1, kWriteIndex = 2 };
}

SegmentAuditLog::~SegmentAuditLog() {
    // A group commit that never ended may still write from the writer's buffers into its fds:
    // both stay until the process exits, unsealed, and the next start's recovery seals the
    // segment. Sealing now would rewrite the buffer that write reads.
    if (syncing_) (void)writer_.release();
}

audit::Reservation SegmentAuditLog::toReservation(AuditSlot& slot) noexcept {
    audit::Reservation reservation;
    reservation.segment = std::static_pointer_cast<audit::Segment>(std::move(slot.owner));
    reservation.offset = slot.destination.offset;
    reservation.length = slot.length;
    slot = AuditSlot{};
    return reservation;
}

int SegmentAuditLog::reserve(std::uint32_t length, AuditSlot& out) noexcept {
    audit::Reservation reservation;
    if (int rc = writer_->reserve(length, reservation); rc < 0) return rc;
    out.destination = AuditDestination{reservation.segment->data.get(), reservation.offset, {}};
    out.length = reservation.length;
    out.owner = std::move(reservation.segment);
    return 0;
}

int SegmentAuditLog::recordChunk(AuditSlot& slot, std::uint64_t connection, std::uint8_t direction,
                                 std::uint32_t written, bool startWriteback) noexcept {
    if (startWriteback) {
        // Advisory: an error here shows up in the group commit's fdatasync.
        ::sync_file_range(slot.destination.fd, static_cast<off64_t>(slot.destination.offset),
                          written, SYNC_FILE_RANGE_WRITE);
    }
    auto reservation = toReservation(slot);
    // The bytes went file-ward by splice and never passed through user space: their CRC is read
    // back from the page cache they were just spliced into (still hot), so that verify can tell
    // an edited payload from the one forwarded.
    std::uint32_t crc = 0;
    if (int rc = audit::AuditWriter::payloadCrcFromFile(reservation, written, crc); rc < 0) {
        writer_->abandon(reservation);
        return rc;
    }
    return writer_->recordChunk(reservation, connection, direction, written, audit::wallClockNs(),
                                crc);
}

void SegmentAuditLog::abandon(AuditSlot& slot) noexcept {
    if (!slot.reserved()) return;
    auto reservation = toReservation(slot);
    writer_->abandon(reservation);
}

int SegmentAuditLog::recordOpen(std::uint64_t connection, std::string_view route,
                                std::string_view client, std::string_view upstream) noexcept {
    return writer_->recordOpen(connection, audit::wallClockNs(), route, client, upstream);
}

int SegmentAuditLog::recordClose(std::uint64_t connection, std::uint64_t c2uBytes,
                                 std::uint64_t u2cBytes, std::string_view reason) noexcept {
    return writer_->recordClose(connection, audit::wallClockNs(), c2uBytes, u2cBytes, reason);
}

int SegmentAuditLog::startSync(CompletionTag tag) noexcept {
    auto segment = writer_->beginSync();
    if (!segment) return 0;
    syncing_ = segment;
    syncTag_ = tag;
    syncDataResult_ = 0;
    indexWriteResult_ = 0;
    ring_.makeRoom(3);
    auto* sqe = ring_.sqe();
    io_uring_prep_fsync(sqe, segment->data.get(), IORING_FSYNC_DATASYNC);
    tag.slot = kSyncData;
    io_uring_sqe_set_data64(sqe, tag.encode());
    sqe->flags |= IOSQE_IO_LINK;  // data first, then the index that points into it
    tag.slot = kWriteIndex;
    audit::queueIndexWrite(ring_, *segment, tag.encode());
    sqe = ring_.sqe();
    io_uring_prep_fsync(sqe, segment->index.get(), IORING_FSYNC_DATASYNC);
    tag.slot = kSyncIndex;
    io_uring_sqe_set_data64(sqe, tag.encode());
    return 1;
}

std::optional<int> SegmentAuditLog::syncCompleted(CompletionTag tag, int result) noexcept {
    if (tag.slot == kSyncData) {
        syncDataResult_ = result;
        return std::nullopt;
    }
    if (tag.slot == kWriteIndex) {
        if (syncing_) indexWriteResult_ = audit::indexWriteResult(*syncing_, result);
        return std::nullopt;
    }
    // The first step that failed cancelled the rest: report it, not their -ECANCELED.
    int first = syncDataResult_ < 0     ? syncDataResult_
                : indexWriteResult_ < 0 ? indexWriteResult_
                                        : result;
    result = failpointResult(FailSite::AuditSync, first);
    if (auto segment = std::move(syncing_)) writer_->endSync(segment, result);
    return result;
}

// The sync on the ring reads the index records it was handed until its last step is in: the
// writer must not seal the segment (whose seal reuses that buffer and closes its fds) before.
bool SegmentAuditLog::awaitRingSync() noexcept {
    // Bounded as the direct writer's shutdown: waits of 100 ms, a minute in all.
    for (int round = 0; round < 600 && syncing_; ++round) {
        ring_.submitAndWait(100);
        ring_.drainCompletions([&](const io_uring_cqe& cqe) {
            auto tag = CompletionTag::decode(cqe.user_data);
            if (syncing_ && tag.op == syncTag_.op && tag.generation == syncTag_.generation)
                syncCompleted(tag, cqe.res);
        });
    }
    return !syncing_;
}

void SegmentAuditLog::syncNow() noexcept {
    if (!awaitRingSync()) {
        logError("audit: the group commit on ", writer_->directory(),
                 " did not end within a minute at shutdown; its segment is left for recovery");
        return;
    }
    if (auto segment = writer_->beginSync()) {
        int rc = ::fdatasync(segment->data.get()) == 0 ? 0 : -errno;
        if (rc == 0) rc = writer_->writeHandedOffIndex(*segment);
        if (rc == 0) rc = ::fdatasync(segment->index.get()) == 0 ? 0 : -errno;
        writer_->endSync(segment, rc);
    }
}

}  // namespace splicegate
