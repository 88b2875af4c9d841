#pragma once
// The processes, other than this one, that still write segment chains in the audit directory:
// after an upgrade, the old process (and one before it, when two upgrades came within a drain)
// goes on sealing the chains of its draining connections while this one audits new ones. Handed
// over in the upgrade's Audit message (proto/splicegate/handoff.proto). While any of them lives,
// this process's recovery and retention leave the audit directory's shared state alone: recovery
// skips their chains, retention does not run (retention.log has one writer at a time), and the
// worker numbers of this process's chains are chosen among those nobody holds.
// A holder that dies without sealing (kill -9 during its drain) leaves its newest segments
// unsealed; the next start, or the next upgrade's new process, recovers them (docs/operations.md).
// Thread affinity: built before the workers start; alive()/liveChains() from any one thread.
// Error contract: never throws; a holder whose pidfd cannot be opened has exited already.
#include <sys/types.h>

#include <cstdint>
#include <set>
#include <vector>

#include "common/UniqueFd.h"
#include "splicegate/handoff.pb.h"

namespace splicegate {

class AuditHolders {
  public:
    AuditHolders() = default;
    // The holders of an upgrade's Audit message.
    explicit AuditHolders(const handoff::Audit& audit);

    // The chains every holder was handed over with, whether it lives or not (recovery leaves them
    // all alone: a holder that died just now may have left them half written; the next start
    // recovers them).
    const std::set<unsigned>& handedChains() const noexcept { return handedChains_; }
    // Some holder has not exited yet.
    bool alive() const noexcept;
    // The holders still running, for the next upgrade's Audit message.
    std::vector<handoff::AuditHolder> running() const;

  private:
    struct Holder {
        handoff::AuditHolder described;
        UniqueFd pidfd;  // readable once the process has exited (Linux 5.3)
    };
    static bool exited(const Holder& holder) noexcept;

    std::vector<Holder> holders_;
    std::set<unsigned> handedChains_;
};

}  // namespace splicegate
