#include "datapath/AuditTap.h"

#include <cerrno>

#include "common/Error.h"
#include "common/Log.h"
#include "datapath/Failpoints.h"

namespace splicegate {

namespace {
// A failing disk fails every chunk of every connection: each kind of per-connection audit
// failure is logged once per window, the rest summed (the counts are in the metrics).
constexpr std::string_view kOpenFailures = "audit Open record failures";
constexpr std::string_view kCloseFailures = "audit Close record failures";
constexpr std::string_view kFailClosedWrites = "audit write failures (fail-closed)";
constexpr std::string_view kFailOpenWrites = "audit write failures (fail-open)";
constexpr std::string_view kLostChunks = "audit chunks lost";
}  // namespace
namespace {
// Test builds only: an allocation failure injected before an index record is buffered, so the
// record is really missing, as it would be. 0 otherwise.
int injectedRecordFailure() noexcept {
    return failpointResult(FailSite::AuditRecord, 0);
}
}  // namespace

AuditTap::AuditTap(std::unique_ptr<AuditLog> log, AuditPolicy policy, WorkerStats& stats) noexcept
    : log_(std::move(log)), policy_(policy), stats_(stats) {}

AuditAction AuditTap::open(ConnectionIo& io, std::string_view route, std::string_view client,
                           std::string_view upstream, std::string_view via,
                           std::string_view sni) noexcept {
    io.audited = true;  // the flows take it from here when they start
    int rc = injectedRecordFailure();
    if (rc == 0) rc = log_->recordOpen(io.id, route, client, upstream, via, sni);
    if (rc == 0) return AuditAction::Proceed;
    // Chunks of a connection without its Open record could never be extracted, and a Close
    // record without it would be a problem for verify: the connection is not in the log at all.
    stats_.auditWriteErrors.add(1);
    io.audited = false;
    if (policy_.failClosed) {
        logWarnLimited(kOpenFailures, "connection ", io.id, ": its audit Open record failed (",
                       errnoText(rc), "): closing it, fail-closed");
        return AuditAction::Close;
    }
    io.auditLost = true;
    logWarnLimited(kOpenFailures, "connection ", io.id, ": its audit Open record failed (",
                   errnoText(rc), "): relaying it unaudited, fail-open");
    return AuditAction::ForwardUnaudited;
}

void AuditTap::close(ConnectionIo& io, std::string_view reason) noexcept {
    for (auto& flow : io.flows) log_->abandon(flow.auditSlot);
    if (!io.audited) return;
    int rc = injectedRecordFailure();
    if (rc == 0)
        rc = log_->recordClose(io.id, io.flows[0].auditedBytes, io.flows[1].auditedBytes, reason);
    if (rc < 0) {
        stats_.auditWriteErrors.add(1);
        logWarnLimited(kCloseFailures, "connection ", io.id, ": its audit Close record was lost (",
                       errnoText(rc),
                       "): the log shows it open, and recovery will mark it truncated");
    }
}

int AuditTap::reserve(FlowIo& flow, std::size_t length) noexcept {
    log_->abandon(flow.auditSlot);  // a slot left by a cancelled write
    return log_->reserve(static_cast<std::uint32_t>(length), flow.auditSlot);
}

int AuditTap::book(ConnectionIo& io, Direction d, int result) noexcept {
    auto& flow = io.at(d);
    if (result <= 0 || !flow.auditSlot.reserved()) {
        log_->abandon(flow.auditSlot);
        return result;
    }
    int rc = injectedRecordFailure();
    if (rc < 0)
        log_->abandon(flow.auditSlot);
    else
        rc = log_->recordChunk(flow.auditSlot, io.id, static_cast<std::uint8_t>(d),
                               static_cast<std::uint32_t>(result), policy_.strict);
    if (rc < 0) return rc;
    // Counted whatever the connection's state: the bytes are in the log, and the Close record's
    // counts must match the chunks.
    stats_.auditBytes.add(static_cast<std::uint64_t>(result));
    flow.auditedBytes += static_cast<std::uint64_t>(result);
    io.auditSyncTarget = log_->nextSyncSequence();
    if (policy_.strict) syncWanted_ = true;
    return result;
}

AuditAction AuditTap::failed(ConnectionIo& io, Direction d, int error) noexcept {
    stats_.auditWriteErrors.add(1);
    if (policy_.failClosed) {
        logWarnLimited(kFailClosedWrites, "connection ", io.id, ": audit write failed (",
                       errnoText(error), "): closing it, fail-closed");
        return AuditAction::Close;
    }
    auto& flow = io.at(d);
    log_->abandon(flow.auditSlot);
    auto lost = flow.abandonAudit();
    stats_.auditLostBytes.add(lost);
    logWarnLimited(kFailOpenWrites, "connection ", io.id, ": audit write failed (",
                   errnoText(error), "): ", lost, " bytes forwarded unaudited, fail-open");
    return AuditAction::ForwardUnaudited;
}

void AuditTap::waitDurable(const ConnectionIo& io, Direction d) noexcept {
    waiters_.push_back({io.tag(d), io.auditSyncTarget});
    syncWanted_ = true;
}

// Group commit: a sync starts once the completions of a loop turn have been handled, so every
// chunk written in that turn shares it. A sync in flight re-asks when it ends.
std::optional<SyncOutcome> AuditTap::afterTurn() noexcept {
    if (!syncWanted_) return std::nullopt;
    syncWanted_ = false;
    if (log_->syncInFlight()) return std::nullopt;
    return startSync();
}

std::optional<SyncOutcome> AuditTap::tick() noexcept {
    if (!policy_.groupCommit) {
        log_->flush();
        return std::nullopt;
    }
    // A sync still running has its index records to write: those recorded since wait for the
    // next one (written first, they could leave a hole in the index if the daemon died).
    if (log_->syncInFlight()) return std::nullopt;
    return startSync();
}

std::optional<SyncOutcome> AuditTap::startSync() noexcept {
    syncStarted_ = std::chrono::steady_clock::now();
    int rc = log_->startSync(CompletionTag::of(RingOwner::AuditTap, AuditTapOp::GroupCommit));
    if (rc < 0) return finishSync(rc);
    return std::nullopt;
}

void AuditTap::waitRoom(const ConnectionIo& io, Direction d) noexcept {
    try {
        roomWaiters_.push_back(io.tag(d));
    } catch (const std::bad_alloc&) {
        // Not lost: the next completion that frees room resumes every waiter of this worker, and
        // a flow that is not on the list is driven again by its own next event.
    }
}

void AuditTap::reportLosses() noexcept {
    for (const auto& loss : log_->takeLosses()) {
        // Strict forwards nothing before it is durable: its connections close with the sync.
        if (policy_.strict) continue;
        stats_.auditLostBytes.add(loss.bytes);
        logWarnLimited(kLostChunks, "connection ", loss.connection, ": audit write failed (",
                       errnoText(loss.error), "): ", loss.bytes, " bytes forwarded unaudited",
                       policy_.failClosed ? "; it closes (fail-closed)" : ", fail-open");
    }
}

std::optional<SyncOutcome> AuditTap::complete(CompletionTag tag, int result) noexcept {
    auto done = log_->syncCompleted(tag, result);
    reportLosses();
    if (!done) {
        if (roomWaiters_.empty() || log_->room() == 0) return std::nullopt;
        SyncOutcome outcome;
        outcome.roomFreed.swap(roomWaiters_);
        return outcome;
    }
    auto took = std::chrono::steady_clock::now() - syncStarted_;
    stats_.observeFsync(static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(took).count()));
    auto outcome = finishSync(*done);
    if (log_->room() > 0) outcome.roomFreed.swap(roomWaiters_);
    return outcome;
}

SyncOutcome AuditTap::finishSync(int result) noexcept {
    SyncOutcome outcome;
    outcome.result = result;
    if (result < 0) {
        outcome.writeFailed = log_->lastSyncFailedInWrite();
        (outcome.writeFailed ? stats_.auditWriteErrors : stats_.auditSyncErrors).add(1);
        // Chunks written since the last good sync may be gone: their connections close.
        outcome.closeUndurable = policy_.failClosed;
    }
    auto waiters = std::move(waiters_);
    waiters_.clear();
    for (const auto& waiter : waiters) {
        if (result >= 0 && waiter.syncSequence > log_->durableSequence())
            waiters_.push_back(waiter);  // needs the next sync
        else
            outcome.resume.push_back(waiter.flow);
    }
    // After a failure the next sync waits for the timer: retrying at once on a full or broken
    // disk would spin through new segments.
    if (result >= 0 && (!waiters_.empty() || (log_->dirty() && policy_.strict))) syncWanted_ = true;
    return outcome;
}

}  // namespace splicegate
