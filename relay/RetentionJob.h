#pragma once
// Deletes closed audit data beyond --audit-retention-bytes/-hours (audit/Retention.h). Runs on
// the main thread: unlinking a large segment can take a while and must not stall a worker. While
// it finds work (it deleted something, or the directory is still above the cap) it runs every
// second: at a GB/s of audit, a slower pace lets the directory outgrow its cap by that many GB.
// Otherwise every 10 s, since a run lists and stats every segment (sealed segments' summaries are
// cached, the current ones' indexes are read again). What it deleted is logged once a minute,
// summed.
//
// With --audit-archive-state-dir it deletes only what splicegate-archive verified
// (archive/ArchiveLedger.h); under --audit-on-error fail-open, unarchived segments too when the
// size limit cannot be met otherwise, each one a warning. It publishes the unarchived backlog
// (splicegate_audit_unarchived_bytes) even without a limit, so the alert on a backlog over half
// the budget does not depend on the archiver being up to report it.
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "archive/ArchiveLedger.h"
#include "audit/Retention.h"
#include "relay/Config.h"

namespace splicegate {

class MetricsExposer;

class RetentionJob {
  public:
    // `chainKey`: the writers' key, for the retention log's chained entries. `metrics`: may be
    // null.
    RetentionJob(const Config& config, std::shared_ptr<const audit::ChainKey> chainKey,
                 MetricsExposer* metrics);
    // Called about once a second. Returns the workers whose current segment should be rolled
    // (RetentionResult::rollRecycled) for the caller to act on.
    std::vector<unsigned> tick();

  private:
    void report();
    std::vector<unsigned> run();
    bool archived(unsigned worker, std::uint64_t segment, const audit::Digest& seal);
    void warnOnce(const std::string& problem);

    static constexpr unsigned kIdleEverySeconds = 10;
    static constexpr unsigned kReportEverySeconds = 60;
    audit::RetentionPolicy policy_;
    std::optional<audit::RetentionPlanner> planner_;
    std::optional<archive::ArchiveLedger> ledger_;
    MetricsExposer* metrics_;
    std::set<std::string> reported_;
    std::uint64_t ticks_ = 0;
    std::uint64_t nextRunTick_ = 1;
    std::uint64_t deletedFiles_ = 0;
    std::uint64_t freedBytes_ = 0;
    std::uint64_t recycledFiles_ = 0;
    std::uint64_t agedSpares_ = 0;
};

}  // namespace splicegate
