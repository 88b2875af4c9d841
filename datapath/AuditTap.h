#pragma once
// The audit tap of one worker: Open and Close records, the log space of each chunk, booking
// written chunks in the index, the group commit, and the ONE place where an audit failure is
// judged fail-closed or fail-open. It returns decisions (AuditDecision, SyncOutcome) and never
// closes a connection itself: the connection layer acts on them.
//
// The log writer is behind the AuditLog seam (audit/AuditLog.h), chosen with this tap's policy
// in audit/AuditLogFactory.h. Thread affinity: the owning worker. Everything on the data path is
// noexcept.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "audit/AuditLog.h"
#include "datapath/ConnectionIo.h"
#include "metrics/Stats.h"

namespace splicegate {

struct AuditPolicy {
    bool strict = false;      // chunks are forwarded only once durable (group commit)
    bool failClosed = true;   // an audit failure closes the connection (else: relay unaudited)
    bool groupCommit = true;  // false: durability none, records only reach the page cache
};

enum class AuditAction : std::uint8_t {
    Proceed,           // audited as configured
    ForwardUnaudited,  // fail-open: what the flow holds goes on unaudited (audit pipe discarded)
    Close,             // fail-closed: close the connection with reason audit-error, reset peers
};

struct SyncOutcome {
    int result = 0;
    // Flows that waited for room in the log's buffer (reserve() said -ENOBUFS): drive them again.
    std::vector<CompletionTag> roomFreed;
    // Flows whose waiting chunks may now go on (durable, or the sync failed fail-open).
    std::vector<CompletionTag> resume;
    // Fail-closed after a failed sync: every connection with lostBySyncFailure() closes, with
    // reason audit-error when a write failed (writeFailed), audit-sync-error when an fdatasync did.
    bool closeUndurable = false;
    bool writeFailed = false;
};

// The tap's op codes (RingOwner::AuditTap): the tag it hands its log's startSync().
enum class AuditTapOp : std::uint8_t { GroupCommit = 1 };

class AuditTap {
  public:
    AuditTap(std::unique_ptr<AuditLog> log, AuditPolicy policy, WorkerStats& stats) noexcept;

    bool strict() const noexcept { return policy_.strict; }

    // A connection starts relaying: writes its Open record and configures its flows.
    // `via`, `sni`: see AuditLog::recordOpen (empty: none).
    AuditAction open(ConnectionIo& io, std::string_view route, std::string_view client,
                     std::string_view upstream, std::string_view via = {},
                     std::string_view sni = {}) noexcept;
    // The connection is released: reservations go back, its Close record is written.
    void close(ConnectionIo& io, std::string_view reason) noexcept;

    // Log space for the flow's next audit write (AuditSlot in its FlowIo).
    int reserve(FlowIo& flow, std::size_t length) noexcept;
    // An audit write ended: books it in the index (or gives its space up). Returns the result as
    // the flow must see it: an error when the chunk could not be indexed.
    int book(ConnectionIo& io, Direction d, int result) noexcept;
    // An audit stage failed with `error`: THE fail-closed / fail-open decision. Fail-open gives
    // up the audit stage of the lane the direction is in (its bytes are counted lost).
    AuditAction failed(ConnectionIo& io, Direction d, int error) noexcept;

    // The log's buffer is full (reserve() gave -ENOBUFS): the flow stops reading its source until
    // a completion frees room (SyncOutcome::roomFreed). Nothing else on the worker waits.
    void waitRoom(const ConnectionIo& io, Direction d) noexcept;
    // Strict: the flow waits for the group commit that covers its last chunk.
    void waitDurable(const ConnectionIo& io, Direction d) noexcept;
    void wantSync() noexcept { syncWanted_ = true; }
    // End of a loop turn: every chunk written in it shares one group commit. Timer tick: index
    // records reach the page cache, and (batch) a group commit starts. Either returns an outcome
    // when a sync could not even start (it counts as failed).
    std::optional<SyncOutcome> afterTurn() noexcept;
    std::optional<SyncOutcome> tick() noexcept;
    // A completion of RingOwner::AuditTap (the group commit) or RingOwner::AuditLog (the log's
    // own disk work, audit/AuditLogOps.h), routed here by the worker: the sync's outcome once
    // its last step is in.
    std::optional<SyncOutcome> complete(CompletionTag tag, int result) noexcept;
    bool lostBySyncFailure(const ConnectionIo& io) const noexcept {
        return io.audited && io.auditSyncTarget > log_->durableSequence();
    }

    int rotate() noexcept { return log_->rotate(); }
    // Worker exit: the tail made durable.
    void shutdown() noexcept { log_->syncNow(); }

  private:
    struct Waiter {
        CompletionTag flow;
        std::uint64_t syncSequence;
    };
    std::optional<SyncOutcome> startSync() noexcept;
    void reportLosses() noexcept;
    SyncOutcome finishSync(int result) noexcept;

    std::unique_ptr<AuditLog> log_;
    const AuditPolicy policy_;
    WorkerStats& stats_;
    bool syncWanted_ = false;
    std::vector<Waiter> waiters_;
    std::vector<CompletionTag> roomWaiters_;
    std::chrono::steady_clock::time_point syncStarted_;
};

}  // namespace splicegate
