#pragma once
// What the relay's retention reads of the archive (--audit-archive-state-dir): whether
// splicegate-archive verified a segment, from the archiver's upload states (UploadState.h),
// opened for reading only. The relay never writes there; the archiver never writes the audit
// directory. A segment counts as archived only when its state is Verified *and* the seal the
// state recorded is the seal the local segment has now: a state left from a segment that was
// replaced since (a restore, a rewrite) protects nothing.
#include <cstdint>
#include <optional>
#include <string>

#include "archive/UploadState.h"
#include "audit/SealChain.h"

namespace splicegate::archive {

struct LedgerAnswer {
    bool verified = false;
    std::string problem;  // non-empty: a damaged or unreadable state, or a seal that differs
};

class ArchiveLedger {
  public:
    // Opens `stateDir` at the first question, and again at each one until that works: the relay
    // may start before the archiver made it. Until then nothing counts as verified.
    explicit ArchiveLedger(std::string stateDir) : dir_(std::move(stateDir)) {}

    LedgerAnswer verified(unsigned worker, std::uint64_t segment, const audit::Digest& seal);

    const std::string& dir() const noexcept { return dir_; }

  private:
    std::string dir_;
    std::optional<UploadStateStore> states_;
};

}  // namespace splicegate::archive
