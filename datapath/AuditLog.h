#pragma once
// The writer seam behind AuditTap: what the tap needs of an audit log writer. A new writer (an
// O_DIRECT one with its own log buffer, say) implements this interface and nothing else; the tap
// keeps the policy (fail-closed or fail-open, strict durability, group commit timing) and the
// movers keep the moves.
//
// A chunk's life: reserve(length) gives an AuditSlot whose destination the mover writes the
// payload into (a file range by splice, or writer memory by read()/copy); then exactly one of
// recordChunk(written) or abandon() releases the slot. Open and Close records frame a
// connection's chunks. Durability is a group commit: startSync() submits (on the worker's ring,
// given to the writer when it is made) what makes every chunk recorded so far durable, tagging each
// submission with `tag` and a step number in tag.slot; each of those completions goes to
// syncCompleted(), which returns the sync's result once its last step is in.
//
// Thread affinity: the owning worker. Run-time calls are noexcept and return -errno.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "common/CompletionTag.h"
#include "datapath/Mover.h"

namespace splicegate {

// Payload a writer lost after recordChunk() accepted it (a deferred write failed).
struct AuditLoss {
    std::uint64_t connection = 0;
    std::uint8_t direction = 0;
    std::uint64_t bytes = 0;
    int error = 0;
};

struct AuditSlot {
    AuditDestination destination;
    std::uint32_t length = 0;
    std::shared_ptr<void> owner;  // the writer's: what keeps the destination valid
    bool reserved() const noexcept { return owner != nullptr; }
};

class AuditLog {
  public:
    virtual ~AuditLog() = default;

    virtual int reserve(std::uint32_t length, AuditSlot& out) noexcept = 0;
    // `written` bytes of the slot's payload landed. Strict durability passes `startWriteback`:
    // start writing them out now, so the group commit finds them under way.
    [[nodiscard]] virtual int recordChunk(AuditSlot& slot, std::uint64_t connection,
                                          std::uint8_t direction, std::uint32_t written,
                                          bool startWriteback) noexcept = 0;
    virtual void abandon(AuditSlot& slot) noexcept = 0;
    [[nodiscard]] virtual int recordOpen(std::uint64_t connection, std::string_view route,
                                         std::string_view client,
                                         std::string_view upstream) noexcept = 0;
    [[nodiscard]] virtual int recordClose(std::uint64_t connection, std::uint64_t c2uBytes,
                                          std::uint64_t u2cBytes,
                                          std::string_view reason) noexcept = 0;

    // Group commit. startSync(): 1 submitted, 0 nothing dirty, -errno when it could not start
    // (the sync counts as failed).
    virtual int startSync(CompletionTag tag) noexcept = 0;
    virtual std::optional<int> syncCompleted(CompletionTag tag, int result) noexcept = 0;
    // The last failed sync failed because a write did (a writer that writes at commit time:
    // the direct one), not an fdatasync.
    virtual bool lastSyncFailedInWrite() const noexcept { return false; }
    // Makes everything durable now, blocking (worker exit).
    virtual void syncNow() noexcept = 0;
    virtual bool dirty() const noexcept = 0;
    virtual bool syncInFlight() const noexcept = 0;
    // A chunk recorded now is durable once durableSequence() >= nextSyncSequence().
    virtual std::uint64_t nextSyncSequence() const noexcept = 0;
    virtual std::uint64_t durableSequence() const noexcept = 0;

    // Writes buffered records without a sync (durability none); a writer with a ring may queue
    // the write there rather than wait for it.
    virtual int flush() noexcept = 0;
    virtual int rotate() noexcept = 0;
    // Payload bytes reserve() could take now; a writer without a buffer of its own has no bound.
    // reserve() returns -ENOBUFS when it is 0: back-pressure, the flow waits for room.
    virtual std::size_t room() const noexcept { return SIZE_MAX; }
    // A byte accepted by recordChunk() can still be lost to a full disk (a writer that writes
    // later and cannot take the space first): fail-closed must then hold chunks until durable.
    virtual bool mayLoseAcceptedBytesToFullDisk() const noexcept { return false; }
    // Chunks lost since the last call (a writer that books after its own writes: the direct one).
    virtual std::vector<AuditLoss> takeLosses() noexcept { return {}; }
};

}  // namespace splicegate
