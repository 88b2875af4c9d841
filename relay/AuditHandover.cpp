#include "relay/AuditHandover.h"

#include <unistd.h>

#include "common/Log.h"
#include "relay/Relay.h"

namespace splicegate {

AuditHandover::AuditHandover(const audit::AuditDirectory& directory,
                             audit::ConnectionIdLease& lease, std::vector<unsigned> chains,
                             const AuditHolders& predecessors, Relay& relay)
    : directory_(directory),
      lease_(lease),
      chains_(std::move(chains)),
      predecessors_(predecessors),
      relay_(relay) {}

handoff::Message AuditHandover::prepare() {
    const auto end = lease_.suspend(relay_.nextConnectionId());
    suspended_ = true;
    handedEnd_ = end;
    handoff::Message message;
    auto& audit = *message.mutable_audit();
    audit.set_directory(directory_.path());
    audit.set_connection_id_lease_end(end);
    auto& self = *audit.add_holders();
    self.set_pid(static_cast<std::uint32_t>(::getpid()));
    for (auto chain : chains_) self.add_chains(chain);
    for (const auto& holder : predecessors_.running()) *audit.add_holders() = holder;
    return message;
}

void AuditHandover::abandon() noexcept {
    if (!suspended_) return;
    suspended_ = false;
    // The failed process may have leased ids and used some (it accepted before it failed): they
    // are below the lease it wrote, which this process now passes.
    auto written = audit::readConnectionIdLease(directory_.fd(), directory_.path());
    if (!written.problem.empty()) logWarn("audit: after the failed upgrade: ", written.problem);
    // A lease that cannot be read: the failed process may have written one, so pass it as a start
    // passes an unreadable lease (two blocks).
    const auto leased = written.problem.empty()
                            ? written.end
                            : handedEnd_ + 2 * audit::ConnectionIdLease::kDefaultBlock;
    if (leased > handedEnd_) {
        relay_.skipConnectionIdsTo(leased);
        logInfo("audit: the failed upgrade's process had leased connection ids up to ", leased,
                "; this process's ids go on past them");
    }
    lease_.resume(std::max(leased, handedEnd_));
}

}  // namespace splicegate
