#pragma once
// The audit log of audit::AuditWriter behind the AuditLog seam: payload lands by splice into the
// segment's data file at the reserved offset; the group commit is an fdatasync of the data file
// linked before one of the index file (the index must never point at data that is not durable).
#include <memory>
#include <string>

#include "audit/AuditWriter.h"
#include "datapath/AuditLog.h"

namespace splicegate {

class Ring;

class SegmentAuditLog final : public AuditLog {
  public:
    // Syncs are submitted on `ring`, the owning worker's.
    SegmentAuditLog(std::unique_ptr<audit::AuditWriter> writer, Ring& ring) noexcept
        : writer_(std::move(writer)), ring_(ring) {}
    ~SegmentAuditLog() override;
    SegmentAuditLog(const SegmentAuditLog&) = delete;
    SegmentAuditLog& operator=(const SegmentAuditLog&) = delete;

    int reserve(std::uint32_t length, AuditSlot& out) noexcept override;
    int recordChunk(AuditSlot& slot, std::uint64_t connection, std::uint8_t direction,
                    std::uint32_t written, bool startWriteback) noexcept override;
    void abandon(AuditSlot& slot) noexcept override;
    int recordOpen(std::uint64_t connection, std::string_view route, std::string_view client,
                   std::string_view upstream) noexcept override;
    int recordClose(std::uint64_t connection, std::uint64_t c2uBytes, std::uint64_t u2cBytes,
                    std::string_view reason) noexcept override;

    int startSync(CompletionTag tag) noexcept override;
    std::optional<int> syncCompleted(CompletionTag tag, int result) noexcept override;
    void syncNow() noexcept override;
    bool dirty() const noexcept override { return writer_->dirty(); }
    bool syncInFlight() const noexcept override { return writer_->syncInFlight(); }
    std::uint64_t nextSyncSequence() const noexcept override { return writer_->nextSyncSequence(); }
    std::uint64_t durableSequence() const noexcept override { return writer_->durableSequence(); }
    int flush() noexcept override { return writer_->flush(); }
    int rotate() noexcept override { return writer_->rotate(); }

  private:
    static audit::Reservation toReservation(AuditSlot& slot) noexcept;
    // Reaps the ring until the sync in flight ends; false when it did not within a minute.
    bool awaitRingSync() noexcept;

    std::unique_ptr<audit::AuditWriter> writer_;
    Ring& ring_;
    std::shared_ptr<audit::Segment> syncing_;
    CompletionTag syncTag_;  // of the sync in flight; its steps differ in slot only
    int syncDataResult_ = 0;
    int indexWriteResult_ = 0;
};

}  // namespace splicegate
