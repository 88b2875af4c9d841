#include "relay/RetentionJob.h"

#include <exception>

#include "audit/AuditLogFactory.h"
#include "audit/SegmentStore.h"
#include "common/Log.h"
#include "metrics/MetricsExposer.h"

namespace splicegate {

RetentionJob::RetentionJob(const Config& config, std::shared_ptr<const audit::ChainKey> chainKey,
                           MetricsExposer* metrics)
    : policy_{config.audit.retentionBytes, config.audit.retentionHours,
              recyclesSpareDataFiles(config.audit.writer)},
      metrics_(metrics) {
    if (config.audit.dir.empty()) return;
    if (!config.audit.archiveStateDir.empty()) {
        ledger_.emplace(config.audit.archiveStateDir);
        policy_.archived = [this](unsigned worker, std::uint64_t segment,
                                  const audit::Digest& seal) {
            return archived(worker, segment, seal);
        };
        policy_.deleteUnarchivedOverBudget = config.audit.onError == AuditOnError::FailOpen;
    }
    if (policy_.maxBytes != 0 || policy_.maxAgeHours != 0 || ledger_)
        planner_.emplace(config.audit.dir, std::move(chainKey));
}

std::vector<unsigned> RetentionJob::tick() {
    std::vector<unsigned> roll;
    if (!planner_) return roll;
    ++ticks_;
    if (ticks_ >= nextRunTick_) roll = run();
    report();
    return roll;
}

void RetentionJob::report() {
    if (ticks_ % kReportEverySeconds != 0 || deletedFiles_ + agedSpares_ == 0) return;
    logInfo("audit retention: deleted ", deletedFiles_, " files (", freedBytes_, " bytes; ",
            recycledFiles_, " data files kept as spares; ", agedSpares_,
            " spares past --audit-retention-hours removed) in the last ", kReportEverySeconds,
            " s in ", planner_->directory());
    deletedFiles_ = freedBytes_ = recycledFiles_ = agedSpares_ = 0;
}

bool RetentionJob::archived(unsigned worker, std::uint64_t segment, const audit::Digest& seal) {
    auto answer = ledger_->verified(worker, segment, seal);
    if (!answer.problem.empty()) warnOnce("audit retention: " + answer.problem);
    return answer.verified;
}

void RetentionJob::warnOnce(const std::string& problem) {
    if (reported_.insert(problem).second) logWarn(problem);
}

std::vector<unsigned> RetentionJob::run() {
    bool busy = false;
    std::vector<unsigned> roll;
    try {
        auto result = planner_->apply(policy_, audit::wallClockNs());
        for (const auto& problem : result.problems) warnOnce("audit retention: " + problem);
        for (const auto& index : result.deletedUnarchived)
            logWarn("audit retention: deleted ", index,
                    " before the archive verified it (--audit-on-error fail-open, over "
                    "--audit-retention-bytes)");
        deletedFiles_ += result.deleted.size();
        freedBytes_ += result.freedBytes;
        recycledFiles_ += result.recycledFiles;
        agedSpares_ += result.agedSpares.size();
        if (metrics_ && ledger_)
            metrics_->recordAuditArchiveBacklog(result.unarchivedBytes,
                                                result.deletedUnarchived.size());
        busy = !result.deleted.empty() ||
               (policy_.maxBytes != 0 && result.totalBytesAfter > policy_.maxBytes);
        roll = std::move(result.rollRecycled);
    } catch (const std::exception& error) {
        logError("audit retention: ", error.what());
    }
    nextRunTick_ = ticks_ + (busy ? 1 : kIdleEverySeconds);
    return roll;
}

}  // namespace splicegate
