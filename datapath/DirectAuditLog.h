#pragma once
// The direct writer (audit/DirectSegmentLog.h) behind the AuditLog seam: reserve() hands the
// mover memory in the worker's log buffer (filled by read() from the audit pipe, or a copy), not
// a file range; -ENOBUFS when that buffer is full, which the tap turns into a wait for room
// (room()), never into an audit failure. The writer's own completions (data writes, their
// fdatasync, the index fdatasync) carry op kOp and reach syncCompleted() through the tap.
#include <memory>
#include <vector>

#include "audit/DirectSegmentLog.h"
#include "datapath/AuditLog.h"

namespace splicegate {

class DirectAuditLog final : public AuditLog {
  public:
    // In AuditTap's range of audit ops (0x20..0x2f).
    static constexpr std::uint8_t kOp = 0x21;

    DirectAuditLog(std::unique_ptr<audit::AuditWriter> writer, Ring& ring,
                   const audit::DirectLogOptions& options);

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
    bool mayLoseAcceptedBytesToFullDisk() const noexcept override {
        return !log_.reservesSpaceAhead();
    }
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
    audit::DirectSegmentLog log_;
    std::vector<std::shared_ptr<audit::DirectChunk>> spareChunks_;  // capacity kSpareChunks
};

}  // namespace splicegate
