#include "relay/AuditHolders.h"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace splicegate {

AuditHolders::AuditHolders(const handoff::Audit& audit) {
    for (const auto& holder : audit.holders()) {
        for (auto chain : holder.chains()) handedChains_.insert(chain);
        // A pidfd refers to that process, not to whoever gets its pid next.
        int fd = static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(holder.pid()), 0));
        if (fd < 0) continue;  // ESRCH: gone already
        holders_.push_back({holder, UniqueFd(fd)});
    }
}

bool AuditHolders::exited(const Holder& holder) noexcept {
    pollfd ready{holder.pidfd.get(), POLLIN, 0};
    return ::poll(&ready, 1, 0) != 0;  // readable (or an error): it has exited
}

bool AuditHolders::alive() const noexcept {
    for (const auto& holder : holders_)
        if (!exited(holder)) return true;
    return false;
}

std::vector<handoff::AuditHolder> AuditHolders::running() const {
    std::vector<handoff::AuditHolder> out;
    for (const auto& holder : holders_)
        if (!exited(holder)) out.push_back(holder.described);
    return out;
}

}  // namespace splicegate
