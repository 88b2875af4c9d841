#include "audit/DirectAuditLog.h"

#include <cerrno>
#include <new>

#include "datapath/Failpoints.h"

namespace splicegate {
namespace {
std::shared_ptr<audit::DirectChunk> chunkOf(AuditSlot& slot) noexcept {
    return std::static_pointer_cast<audit::DirectChunk>(slot.owner);
}
}  // namespace

DirectAuditLog::DirectAuditLog(std::unique_ptr<audit::SegmentStore> store, RingOps& ring,
                               RingRegistration& registration,
                               const audit::DirectLogOptions& options)
    : log_(std::move(store), ring, registration, options) {
    spareChunks_.reserve(kSpareChunks);
}

std::shared_ptr<audit::DirectChunk> DirectAuditLog::takeChunk() {
    if (spareChunks_.empty()) return std::make_shared<audit::DirectChunk>();
    auto chunk = std::move(spareChunks_.back());
    spareChunks_.pop_back();
    return chunk;
}

void DirectAuditLog::keepChunk(std::shared_ptr<audit::DirectChunk> chunk) noexcept {
    // Only a holder nobody else shares, emptied, and never beyond the reserved capacity (so the
    // push cannot allocate).
    if (!chunk || chunk.use_count() != 1 || spareChunks_.size() >= kSpareChunks) return;
    *chunk = audit::DirectChunk{};
    spareChunks_.push_back(std::move(chunk));
}

int DirectAuditLog::reserve(std::uint32_t length, AuditSlot& out) noexcept {
    std::shared_ptr<audit::DirectChunk> chunk;
    try {
        chunk = takeChunk();
    } catch (const std::bad_alloc&) {
        return -ENOMEM;
    }
    int rc = log_.reserve(length, *chunk);
    if (rc < 0 || chunk->memory.empty()) {
        keepChunk(std::move(chunk));
        return rc < 0 ? rc : -ENOBUFS;  // an empty reservation is back-pressure, not an error
    }
    out.destination = AuditDestination{-1, chunk->segment.offset, chunk->memory};
    out.length = static_cast<std::uint32_t>(chunk->memory.size());
    out.owner = std::move(chunk);
    return 0;
}

int DirectAuditLog::recordChunk(AuditSlot& slot, std::uint64_t connection, std::uint8_t direction,
                                std::uint32_t written, bool) noexcept {
    // Strict mode's early writeback is the group commit's tail write here: nothing to start.
    auto chunk = chunkOf(slot);
    slot = AuditSlot{};
    if (!chunk) return -EINVAL;
    int rc = log_.recordChunk(*chunk, connection, direction, written);
    keepChunk(std::move(chunk));
    return rc;
}

void DirectAuditLog::abandon(AuditSlot& slot) noexcept {
    auto chunk = chunkOf(slot);
    slot = AuditSlot{};
    if (!chunk) return;
    log_.abandon(*chunk);
    keepChunk(std::move(chunk));
}

int DirectAuditLog::recordOpen(std::uint64_t connection, std::string_view route,
                               std::string_view client, std::string_view upstream,
                               std::string_view via, std::string_view sni) noexcept {
    return log_.recordOpen(connection, route, client, upstream, via, sni);
}

int DirectAuditLog::recordClose(std::uint64_t connection, std::uint64_t c2uBytes,
                                std::uint64_t u2cBytes, std::string_view reason) noexcept {
    return log_.recordClose(connection, c2uBytes, u2cBytes, reason);
}

std::vector<AuditLoss> DirectAuditLog::takeLosses() noexcept {
    std::vector<AuditLoss> losses;
    try {
        for (const auto& lost : log_.takeLost())
            losses.push_back({lost.connection, lost.direction, lost.bytes, lost.error});
    } catch (const std::bad_alloc&) {
    }
    return losses;
}

int DirectAuditLog::startSync(CompletionTag) noexcept {
    return log_.startSync();
}

std::optional<int> DirectAuditLog::syncCompleted(CompletionTag tag, int result) noexcept {
    if (tag.owner != RingOwner::AuditLog) return std::nullopt;
    // The index fdatasync is where the group commit can fail: injected there, before the segment
    // learns the result (it is sealed as failed, as for a real error).
    if (tag.opAs<audit::AuditLogOp>() == audit::AuditLogOp::IndexSync)
        result = failpointResult(FailSite::AuditSync, result);
    return log_.complete(tag, result);
}

}  // namespace splicegate
