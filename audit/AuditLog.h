#pragma once
// The writer seam behind AuditTap (datapath/AuditTap.h): what the tap needs of an audit log
// writer. The tap keeps the policy (fail-closed or fail-open, strict durability, group commit
// timing) and the movers keep the moves; a writer implements this interface and nothing else.
// Two do, chosen in one place (audit/AuditLogFactory.h), both over the worker's segment store
// (audit/SegmentStore.h: segments, index records, seals):
//   SpliceAuditLog (audit/SpliceAuditLog.h)  the mover splices payload into the segment's data
//                                            file (page cache); a sync is one linked chain.
//   DirectAuditLog (audit/DirectAuditLog.h)  payload goes into the worker's log buffer and on to
//                                            the data file with O_DIRECT; index records follow
//                                            once their data is durable.
//
// A chunk's life: reserve(length) gives an AuditSlot whose destination the mover writes the
// payload into (a file range by splice, or writer memory by read()/copy); then exactly one of
// recordChunk(written) or abandon() releases the slot. Open and Close records frame a
// connection's chunks. Durability is a group commit: startSync(tag) submits (on the worker's
// ring, given to the writer when it is made) what makes every chunk recorded so far durable.
// `tag` is the tap's (RingOwner::AuditTap): a writer whose commit is one chain of SQEs tags them
// with it, its step in tag.slot; a writer with disk work of its own tags that RingOwner::AuditLog
// (audit/AuditLogOps.h). The worker hands every completion of either owner to the tap, which
// hands it to syncCompleted(); that returns the sync's result once its last step is in.
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
    // `via`: the load balancer's address when `client` came from its PROXY header; `sni`: the
    // TLS server name the route was chosen by. Empty when none.
    [[nodiscard]] virtual int recordOpen(std::uint64_t connection, std::string_view route,
                                         std::string_view client, std::string_view upstream,
                                         std::string_view via, std::string_view sni) noexcept = 0;
    [[nodiscard]] virtual int recordClose(std::uint64_t connection, std::uint64_t c2uBytes,
                                          std::uint64_t u2cBytes,
                                          std::string_view reason) noexcept = 0;

    // Group commit. startSync(): 1 submitted, 0 nothing dirty, -errno when it could not start
    // (the sync counts as failed).
    virtual int startSync(CompletionTag tag) noexcept = 0;
    virtual std::optional<int> syncCompleted(CompletionTag tag, int result) noexcept = 0;
    // The last failed sync failed because a write did (data or index records), not an
    // fdatasync: its connections close with reason audit-error rather than audit-sync-error.
    virtual bool lastSyncFailedInWrite() const noexcept = 0;
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
    // Payload bytes reserve() could take now. reserve() returns -ENOBUFS when it is 0:
    // back-pressure, the flow waits for room (the tap resumes it after a completion).
    virtual std::size_t room() const noexcept = 0;
    // Chunks that recordChunk() accepted and the writer lost since the last call, before they
    // were durable (a deferred write failed). Their bytes are not in the log; a sync that fails
    // loses nothing here (lostBySyncFailure() covers its connections).
    virtual std::vector<AuditLoss> takeLosses() noexcept = 0;
};

}  // namespace splicegate
