#pragma once
// The direct writer behind the AuditLog seam (--audit-writer direct, the default): the worker's
// segment store written by audit/DirectSegmentWriter, whose payload goes through the worker's log
// buffer to the data file with O_DIRECT (audit/DirectDataWriter). reserve() hands the mover
// memory in that buffer (filled by read() from the audit pipe, or a copy), not a file range;
// -ENOBUFS when the buffer is full, which the tap turns into a wait for room (room()), never into
// an audit failure. Its own completions (data writes, their fdatasync, the index write and
// fdatasync, the segments' disk work) carry RingOwner::AuditLog tags (audit/AuditLogOps.h) and
// reach syncCompleted() through the tap; the tap's own tag goes unused.
#include <cstddef>
#include <memory>
#include <vector>

#include "audit/AuditLog.h"
#include "audit/DirectSegmentWriter.h"

namespace splicegate {

class DirectAuditLog final : public AuditLog {
  public:
    // Submits on `ring`, the owning worker's; its log buffer is registered with `registration`,
    // the ring's.
    DirectAuditLog(std::unique_ptr<audit::SegmentStore> store, RingOps& ring,
                   RingRegistration& registration, const audit::DirectLogOptions& options);

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
    bool lastSyncFailedInWrite() const noexcept override { return log_.lastFailureInWrite(); }
    void syncNow() noexcept override { log_.finishFile(); }
    bool dirty() const noexcept override { return log_.dirty(); }
    bool syncInFlight() const noexcept override { return log_.syncInFlight(); }
    std::uint64_t nextSyncSequence() const noexcept override { return log_.nextSyncSequence(); }
    std::uint64_t durableSequence() const noexcept override { return log_.durableSequence(); }
    int flush() noexcept override { return log_.flush(); }
    int rotate() noexcept override { return log_.rotate(); }
    std::size_t room() const noexcept override { return log_.room(); }
    std::vector<AuditLoss> takeLosses() noexcept override;

  private:
    // A chunk's holder, reused: the buffer lane reserves one per small message, and an
    // allocation each showed in its profile.
    std::shared_ptr<audit::DirectChunk> takeChunk();
    void keepChunk(std::shared_ptr<audit::DirectChunk> chunk) noexcept;

    static constexpr std::size_t kSpareChunks = 256;
    audit::DirectSegmentWriter log_;
    std::vector<std::shared_ptr<audit::DirectChunk>> spareChunks_;  // capacity kSpareChunks
};

}  // namespace splicegate
