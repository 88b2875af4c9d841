#pragma once
// Audit retention (--audit-retention-bytes, --audit-retention-hours; FORMAT.md "Files"): deletes
// the oldest *closed* audit data, that is sealed segments, so that what remains still passes
// `verify` and every remaining connection can still be listed and extracted.
//
// What may be deleted. Per worker, only a prefix of its segments [first..k] (so segment numbers
// stay contiguous from the newest one down), and only when every segment in it is sealed
// (ends with SegmentSealed), undamaged and readable, and none holds records of a connection that
// also has records in another worker's log (damage). The newest indexed segment of a worker is
// never deleted, sealed or not: the running daemon writes it, and after a restart it keeps the
// worker's segment numbers from being reused. Open connections do not hold segments back: a
// connection with records in a deleted segment and in one that stays keeps the latter, and the
// readers continue it from there (DeletedHeads in AuditReader.h). Otherwise one long-lived
// connection would pin every later segment until the disk filled.
//   - maxAgeHours: deletes the longest deletable prefix whose segments' newest record times are
//     all older than nowNs - maxAgeHours.
//   - maxBytes: then deletes segments, oldest first by SegmentStart time across workers, while
//     the directory's audit bytes (data + index files of every segment) exceed maxBytes. What is
//     current or damaged cannot go: totalBytesAfter may stay above maxBytes.
//   - Both 0: nothing is deleted (apply() only measures).
// When a limit is set, data files without an index file numbered below their worker's newest
// indexed segment (left by a deletion interrupted between its two unlinks; recovery would remove
// them too) are removed as well. A lone data file at or above it may be a segment being created
// and is left alone.
//
// Deletion order. Segments go one at a time, oldest first, each announced by its own retention
// log entry; of each segment the index file goes before the data file. An interrupted deletion
// leaves at most one segment announced but still there (verify accepts the chain either way) or
// a data file without its index, which list/extract ignore (verify reports it) and recovery or
// the next run removes. The directory is fsynced after deleting.
//
// Caching. A sealed segment never changes, so its summary (the connections that cross its
// boundaries, its times, its damage) is kept between runs and reused while the index file's
// identity (device, inode, size, mtime) and the data file's size stay the same; unsealed segments
// are re-read each run. Connections opened and ended within one segment are not kept in the
// summary: they cannot be referenced from anywhere else in a valid log.
//
// Thread affinity: none, but one planner must not be used by two threads at once; run it off the
// workers' threads (unlinking a large file can take a while). Error contract: damaged or
// unreadable segments never throw: they are not deleted (nor anything after them in their
// worker) and are reported in `problems`, as "FILE:OFFSET: what" where there is a place; only
// a directory that cannot be read throws std::system_error naming it.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "audit/SealChain.h"

namespace splicegate::audit {

// The retention log (kRetentionLogName, FORMAT.md "Hash chain"): before deleting a group of
// segments, retention appends (and syncs) one SegmentsDeleted entry naming them and the chain
// digest of the newest one, so that verify accepts the chain starting after them. Entries are
// chained to each other by their macs.
struct RetentionLogEntry {
    unsigned worker = 0;
    std::uint64_t first = 0;
    std::uint64_t last = 0;
    Digest lastDigest{};
    std::int64_t timeNs = 0;  // when the deletion was announced
};

struct RetentionLogRepair {
    std::vector<RetentionLogEntry> entries;  // the valid entries, in order
    Digest lastMac{};                        // the last valid entry's mac (zero: none)
    std::uint64_t goodEnd = 0;
    std::string cut;  // non-empty: what recovery cut (a torn or damaged tail)
};

// Reads the retention log of the directory open as `dirFd` and, when `repair`, cuts a torn or
// damaged tail (a crash while appending: the deletion it announced never started). Macs are
// not checked here (verify does). Throws std::system_error naming the file on I/O errors and
// when it is a symlink.
RetentionLogRepair repairRetentionLog(int dirFd, const std::string& dir, bool repair = true);

struct RetentionPolicy {
    std::uint64_t maxBytes = 0;     // 0 = no size limit
    std::uint64_t maxAgeHours = 0;  // 0 = no age limit
    // A deleted segment's data file becomes one of its worker's spares (spareDataName, mode
    // 0600) when a slot is free, instead of being unlinked: one of the direct writer's next
    // segments takes it (SegmentStore::recycleSpareDataFiles). It leaves the log all the same.
    // With maxAgeHours, a spare whose last write is older than the limit is unlinked, so deleted
    // bytes do not outlive the age limit on disk (whether or not this run recycles).
    bool recycleDataFiles = false;
    // With an archive (splicegate-archive, --audit-archive-state-dir): whether the archive
    // verified the segment whose seal is `seal`. When set, a segment it has not verified is
    // never deleted by either limit, so what goes first is what is safe off the box; the rest
    // of its worker waits behind it (the prefix rule above). Null: no archive, no such check.
    std::function<bool(unsigned worker, std::uint64_t segment, const Digest& seal)> archived =
        nullptr;
    // --audit-on-error fail-open: when the verified segments are not enough to get under
    // maxBytes, unarchived ones go too (oldest first), each listed in deletedUnarchived.
    // fail-closed keeps them: the disk fills and the writers' own fail-closed handling stops
    // the audited flows rather than losing evidence the archive never received.
    bool deleteUnarchivedOverBudget = false;
};

struct RetentionResult {
    std::vector<std::string> deleted;  // paths removed from the log, in deletion order
    std::uint64_t freedBytes = 0;      // their sizes (a recycled data file's too)
    std::uint64_t recycledFiles = 0;   // data files among them kept as spares
    // Spares unlinked because their bytes passed maxAgeHours (paths; not part of the log).
    std::vector<std::string> agedSpares;
    // Workers whose current segment is a recycled data file (mode 0600: past its new payload it
    // still holds a deleted segment's bytes) started before the maxAgeHours cutoff: rolling it
    // (its seal cuts the file to its payload) keeps deleted bytes from outliving the age limit
    // on a worker whose segment fills slowly. The owner acts; the planner only reports.
    std::vector<unsigned> rollRecycled;
    std::uint64_t totalBytesAfter = 0;  // audit bytes left in the directory (as measured)
    // With RetentionPolicy::archived: the bytes of the sealed segments left that the archive
    // has not verified (the backlog as the relay sees it), and the unarchived segments deleted
    // because of deleteUnarchivedOverBudget (paths of their index files).
    std::uint64_t unarchivedBytes = 0;
    std::vector<std::string> deletedUnarchived;
    // Damaged or unreadable segments (which block deletion in their worker), failed deletions.
    std::vector<std::string> problems;
};

// Removes the spare data files (spareDataName) that no writer will take: those of workers not
// in `keep` (the chains this daemon's workers write when its writer recycles, and those an
// upgrade's live old process writes; a writer that does not recycle keeps only the latter), and
// slots past kSpareSlots. Returns the names removed; throws std::system_error naming the
// directory when it cannot be read.
std::vector<std::string> removeSpareDataFiles(int dirFd, const std::string& dir,
                                              const std::set<unsigned>& keep);

class RetentionPlanner {
  public:
    // `chainKey`: --audit-hmac-key-file, for the retention log's entries (null: unkeyed).
    explicit RetentionPlanner(std::string dir, std::shared_ptr<const ChainKey> chainKey = nullptr);
    ~RetentionPlanner();
    RetentionPlanner(RetentionPlanner&&) noexcept;
    RetentionPlanner& operator=(RetentionPlanner&&) noexcept;

    // Scans the directory (reusing the cached summaries of sealed segments), deletes what
    // `policy` allows and returns what it did. `nowNs`: wall clock, ns since the Unix epoch.
    RetentionResult apply(const RetentionPolicy& policy, std::int64_t nowNs);

    const std::string& directory() const noexcept { return dir_; }
    // Index files read so far (cache misses plus unsealed segments); for tests and debugging.
    std::uint64_t indexScans() const noexcept { return indexScans_; }
    // The retention log's size from which the next append first compacts it (default 1 MiB,
    // about 7,000 entries); tests set a small one.
    void setLogCompactionBytes(std::uint64_t bytes) noexcept { compactAt_ = bytes; }

  private:
    struct Cache;  // summaries of sealed segments (Retention.cpp)

    // Appends one SegmentsDeleted entry (after the log's last valid entry) and syncs it.
    void appendRetentionEntry(int dirFd, unsigned worker, std::uint64_t first, std::uint64_t last,
                              const Digest& lastDigest, std::int64_t nowNs);

    std::string dir_;
    std::shared_ptr<const ChainKey> chainKey_;
    std::unique_ptr<Cache> cache_;
    std::uint64_t indexScans_ = 0;
    // Where the retention log ended after this planner's last append, so that the next append
    // need not read the whole log again (one entry per deleted segment, until it is compacted).
    // Trusted only while the file is the same one and has exactly that size.
    struct LogTail {
        std::uint64_t device = 0;
        std::uint64_t inode = 0;
        std::uint64_t end = 0;
        Digest lastMac{};
    };
    std::optional<LogTail> logTail_;
    // Rewrites the log, whose valid entries are `entries`, with each worker's older entries
    // merged into one (Retention.cpp); the new file's tail, or nothing when no entry could merge.
    std::optional<LogTail> compactRetentionLog(int dirFd,
                                               const std::vector<RetentionLogEntry>& entries);
    std::uint64_t compactAt_ = std::uint64_t{1} << 20;
};

}  // namespace splicegate::audit
