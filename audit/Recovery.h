#pragma once
// Crash recovery of an audit directory (audit/FORMAT.md "Crash recovery"), run by the daemon at
// start before any worker writes: cuts torn index tails and unindexed data tails, marks
// connections left open as Truncated, seals every segment, and tells the daemon where to continue
// (segment numbers per worker, connection ids). Running it twice changes nothing the second time.
// Thread affinity: call from one thread while nothing else writes the directory. Error contract:
// damaged content never throws (it is repaired and reported in `actions`); std::system_error,
// naming the directory or file, when the directory cannot be created or read or a file cannot be
// opened, truncated, written or synced.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "audit/SealChain.h"

namespace splicegate::audit {

struct RecoveryReport {
    // One human-readable line per repair: cut, seal, truncation, created or removed file, and per
    // damaged sealed segment left for `verify` to report.
    std::vector<std::string> actions;
    std::uint64_t maxConnectionId = 0;  // largest connection id in the directory (0: none)
    // Largest SegmentStart connection id floor in the directory, those recovery wrote included
    // (0: none). New ids start at the larger of it and maxConnectionId + 1.
    std::uint64_t maxIdFloor = 0;
    // Per worker: the largest segment number in the directory (new segments continue after it).
    std::map<unsigned, std::uint64_t> lastSegment;
    std::uint64_t truncatedConnections = 0;  // Truncated records appended by this run
    // Index files of unsealed segments recovery did not seal: older than what a crash leaves
    // unsealed (the newest three per worker), or after a seal that does not hold. Reported in
    // `actions` too; the older ones are left exactly as they were.
    std::vector<std::string> leftUnsealed;
};

class AuditDirectory;

// The daemon's form: `dir` is held (locked) by this process. `key`: --audit-hmac-key-file, used
// for the seals recovery writes (null: unkeyed chain). A file with a segment's name that is not
// a regular file (a symlink) makes it throw std::system_error (ELOOP) naming the file: it is
// never followed nor changed. `liveChains`: worker numbers whose segments another live process
// writes (an upgrade's old process, draining): not read, repaired or sealed; only their segment
// numbers are in lastSegment.
RecoveryReport recoverAuditDirectory(const AuditDirectory& dir, const ChainKey* key,
                                     const std::set<unsigned>& liveChains = {});
// For tools and tests: opens (and creates, with missing parents, mode 0750) `dir` itself,
// without the lock.
RecoveryReport recoverAuditDirectory(const std::string& dir, const ChainKey* key = nullptr);

}  // namespace splicegate::audit
