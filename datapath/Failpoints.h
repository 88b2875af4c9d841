#pragma once
// Test-only fault injection for the data path (built into `splicegate-failpoints`, never into
// the shipped `splicegate`). Moves are failed where a mover starts them, before the kernel acts,
// so a failed linked request really cancels what follows. Configured from the environment:
//   SPLICEGATE_FAILPOINTS="site:action:first[:count],..."
// site:   fill | forward | tee | audit-write | audit-sync | audit-record (buffering an index
//         record: Open, Chunk or Close, in the order the worker books them)
// action: an errno name (EIO, ENOSPC, ECONNRESET, EPIPE, ENOMEM) the operation fails with, or
//         `short`, halving the length submitted so the kernel really moves less
// first:  1-based hit number of the site at which injection starts
// count:  how many hits are affected (default 1; 0 = every hit from `first` on)
// And SPLICEGATE_AUDIT_WRITE_DELAY_MS=N: each write of the direct audit writer starts N ms late
// (a disk that falls behind, with no thread sleeping).
#include <cstddef>

namespace splicegate {

enum class FailSite { Fill, Forward, Tee, AuditWrite, AuditSync, AuditRecord, Count };

#ifdef SPLICEGATE_FAILPOINTS
// Parses the environment once; throws UsageError naming a malformed entry.
void loadFailpoints();
// The result to report for a completion of `site` (the real one, or an injected -errno).
int failpointResult(FailSite site, int result) noexcept;
// The length to submit for `site` (the real one, or a shortened one).
std::size_t failpointLength(FailSite site, std::size_t length) noexcept;
unsigned failpointAuditWriteDelayMs() noexcept;
#else
inline void loadFailpoints() {}
inline int failpointResult(FailSite, int result) noexcept {
    return result;
}
inline std::size_t failpointLength(FailSite, std::size_t length) noexcept {
    return length;
}
inline unsigned failpointAuditWriteDelayMs() noexcept {
    return 0;
}
#endif

// Consumes one hit of `site`: the errno to inject before the kernel acts, or 0 (the real
// operation runs). Movers call it where they start an operation (datapath/Mover.h).
inline int injectedErrno(FailSite site) noexcept {
    return -failpointResult(site, 0);
}

}  // namespace splicegate
