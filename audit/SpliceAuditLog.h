#pragma once
// The splice writer behind the AuditLog seam (--audit-writer splice): the worker's segment store
// (audit/SegmentStore.h) with payload landing by splice into the segment's data file at the
// reserved offset (the mover splices; the bytes never pass through user space). The group
// commit is one linked chain on the worker's ring: an fdatasync of the data file, the write of
// the index records and an fdatasync of the index file (the index must never point at data that
// is not durable), each step tagged with the tap's tag and its step in the slot.
#include <cstddef>
#include <memory>
#include <string>

#include "audit/AuditLog.h"
#include "audit/SegmentStore.h"

namespace splicegate {

class RingOps;

class SpliceAuditLog final : public AuditLog {
  public:
    // Syncs are submitted on `ring`, the owning worker's.
    SpliceAuditLog(std::unique_ptr<audit::SegmentStore> store, RingOps& ring) noexcept
        : store_(std::move(store)), ring_(ring) {}
    ~SpliceAuditLog() override;
    SpliceAuditLog(const SpliceAuditLog&) = delete;
    SpliceAuditLog& operator=(const SpliceAuditLog&) = delete;

    int reserve(std::uint32_t length, AuditSlot& out) noexcept override;
    int recordChunk(AuditSlot& slot, std::uint64_t connection, std::uint8_t direction,
                    std::uint32_t written, bool startWriteback) noexcept override;
    void abandon(AuditSlot& slot) noexcept override;
    int recordOpen(std::uint64_t connection, std::string_view route, std::string_view client,
                   std::string_view upstream, std::string_view via,
                   std::string_view sni) noexcept override;
    int recordClose(std::uint64_t connection, std::uint64_t c2uBytes, std::uint64_t u2cBytes,
                    std::string_view reason) noexcept override;

    int startSync(CompletionTag tag) noexcept override;
    std::optional<int> syncCompleted(CompletionTag tag, int result) noexcept override;
    // Only the index records' write is a write in this writer's commit (the payload was spliced
    // before the chunk was recorded, and a failed splice fails that chunk at once).
    bool lastSyncFailedInWrite() const noexcept override { return lastFailureInWrite_; }
    void syncNow() noexcept override;
    bool dirty() const noexcept override { return store_->dirty(); }
    bool syncInFlight() const noexcept override { return store_->syncInFlight(); }
    std::uint64_t nextSyncSequence() const noexcept override { return store_->nextSyncSequence(); }
    std::uint64_t durableSequence() const noexcept override { return store_->durableSequence(); }
    int flush() noexcept override { return store_->flush(); }
    int rotate() noexcept override { return store_->rotate(); }
    // No buffer of its own: the page cache takes what is spliced, and a full disk fails the
    // splice (an audit write error), never a reservation.
    std::size_t room() const noexcept override { return SIZE_MAX; }
    // Nothing is written after recordChunk() but the index records, which go with the sync: a
    // chunk is lost only with a failed sync, which fails every connection it covers.
    std::vector<AuditLoss> takeLosses() noexcept override { return {}; }

  private:
    static audit::Reservation toReservation(AuditSlot& slot) noexcept;
    // Reaps the ring until the sync in flight ends; false when it did not within a minute.
    bool awaitRingSync() noexcept;
    bool isSyncStep(CompletionTag tag) const noexcept;

    std::unique_ptr<audit::SegmentStore> store_;
    RingOps& ring_;
    std::shared_ptr<audit::Segment> syncing_;
    CompletionTag syncTag_;  // of the sync in flight; its steps differ in slot only
    int syncDataResult_ = 0;
    int indexWriteResult_ = 0;
    bool lastFailureInWrite_ = false;
};

}  // namespace splicegate
