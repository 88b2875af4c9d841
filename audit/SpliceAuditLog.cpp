#include "audit/SpliceAuditLog.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "common/Log.h"
#include "common/RingOps.h"
#include "datapath/Failpoints.h"

namespace splicegate {
namespace {
enum SyncStep : std::uint32_t { kSyncData = 0, kSyncIndex = 1, kWriteIndex = 2 };
}

SpliceAuditLog::~SpliceAuditLog() {
    // A group commit that never ended may still write from the store's buffers into its fds:
    // both stay until the process exits, unsealed, and the next start's recovery seals the
    // segment. Sealing now would rewrite the buffer that write reads.
    if (syncing_) (void)store_.release();
}

audit::Reservation SpliceAuditLog::toReservation(AuditSlot& slot) noexcept {
    audit::Reservation reservation;
    reservation.segment = std::static_pointer_cast<audit::Segment>(std::move(slot.owner));
    reservation.offset = slot.destination.offset;
    reservation.length = slot.length;
    slot = AuditSlot{};
    return reservation;
}

int SpliceAuditLog::reserve(std::uint32_t length, AuditSlot& out) noexcept {
    audit::Reservation reservation;
    if (int rc = store_->reserve(length, reservation); rc < 0) return rc;
    out.destination = AuditDestination{reservation.segment->data.get(), reservation.offset, {}};
    out.length = reservation.length;
    out.owner = std::move(reservation.segment);
    return 0;
}

int SpliceAuditLog::recordChunk(AuditSlot& slot, std::uint64_t connection, std::uint8_t direction,
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
    if (int rc = audit::SegmentStore::payloadCrcFromFile(reservation, written, crc); rc < 0) {
        store_->abandon(reservation);
        return rc;
    }
    return store_->recordChunk(reservation, connection, direction, written, audit::wallClockNs(),
                               crc);
}

void SpliceAuditLog::abandon(AuditSlot& slot) noexcept {
    if (!slot.reserved()) return;
    auto reservation = toReservation(slot);
    store_->abandon(reservation);
}

int SpliceAuditLog::recordOpen(std::uint64_t connection, std::string_view route,
                               std::string_view client, std::string_view upstream,
                               std::string_view via, std::string_view sni) noexcept {
    return store_->recordOpen(connection, audit::wallClockNs(), route, client, upstream, via, sni);
}

int SpliceAuditLog::recordClose(std::uint64_t connection, std::uint64_t c2uBytes,
                                std::uint64_t u2cBytes, std::string_view reason) noexcept {
    return store_->recordClose(connection, audit::wallClockNs(), c2uBytes, u2cBytes, reason);
}

int SpliceAuditLog::startSync(CompletionTag tag) noexcept {
    auto segment = store_->beginSync();
    if (!segment) return 0;
    syncing_ = segment;
    syncTag_ = tag;
    syncDataResult_ = 0;
    indexWriteResult_ = 0;
    ring_.makeRoom(3);
    // Linked: data first, then the index that points into it.
    ring_.fsync(segment->data.get(), SyncMode::DataOnly, tag.withSlot(kSyncData), SqeFlag::Link);
    audit::queueIndexWrite(ring_, *segment, tag.withSlot(kWriteIndex));
    ring_.fsync(segment->index.get(), SyncMode::DataOnly, tag.withSlot(kSyncIndex));
    return 1;
}

bool SpliceAuditLog::isSyncStep(CompletionTag tag) const noexcept {
    return syncing_ && tag.owner == syncTag_.owner && tag.op == syncTag_.op &&
           tag.generation == syncTag_.generation;
}

std::optional<int> SpliceAuditLog::syncCompleted(CompletionTag tag, int result) noexcept {
    if (!isSyncStep(tag)) return std::nullopt;
    if (tag.slot == kSyncData) {
        syncDataResult_ = result;
        return std::nullopt;
    }
    if (tag.slot == kWriteIndex) {
        indexWriteResult_ = audit::indexWriteResult(*syncing_, result);
        return std::nullopt;
    }
    // The first step that failed cancelled the rest: report it, not their -ECANCELED.
    int first = syncDataResult_ < 0     ? syncDataResult_
                : indexWriteResult_ < 0 ? indexWriteResult_
                                        : result;
    lastFailureInWrite_ = syncDataResult_ >= 0 && indexWriteResult_ < 0;
    result = failpointResult(FailSite::AuditSync, first);
    if (result >= 0) lastFailureInWrite_ = false;
    if (auto segment = std::move(syncing_)) store_->endSync(segment, result);
    return result;
}

// The sync on the ring reads the index records it was handed until its last step is in: the
// store must not seal the segment (whose seal reuses that buffer and closes its fds) before.
bool SpliceAuditLog::awaitRingSync() noexcept {
    // Bounded as the direct writer's shutdown: waits of 100 ms, a minute in all.
    for (int round = 0; round < 600 && syncing_; ++round) {
        ring_.submitAndWait(100);
        ring_.drainCompletions([&](const io_uring_cqe& cqe) {
            syncCompleted(CompletionTag::decode(cqe.user_data), cqe.res);
        });
    }
    return !syncing_;
}

void SpliceAuditLog::syncNow() noexcept {
    if (!awaitRingSync()) {
        logError("audit: the group commit on ", store_->directory(),
                 " did not end within a minute at shutdown; its segment is left for recovery");
        return;
    }
    if (auto segment = store_->beginSync()) {
        int rc = ::fdatasync(segment->data.get()) == 0 ? 0 : -errno;
        if (rc == 0) rc = store_->writeHandedOffIndex(*segment);
        if (rc == 0) rc = ::fdatasync(segment->index.get()) == 0 ? 0 : -errno;
        store_->endSync(segment, rc);
    }
}

}  // namespace splicegate
