#include "relay/FdBudget.h"

#include <algorithm>

namespace splicegate {

FdBudget FdBudget::plan(std::uint64_t fdLimit, std::uint64_t wantedConnections, unsigned workers,
                        std::uint64_t routes, std::uint64_t idlePipesPerWorker,
                        std::uint64_t controlFds, PipeFds pipeFds) noexcept {
    FdBudget budget;
    budget.fdLimit = fdLimit;
    budget.perConnection =
        kSocketsPerConnection + (pipeFds == PipeFds::PerConnection ? kPipeFdsPerConnection : 0);
    budget.reserved = kProcessFds + controlFds + std::uint64_t{workers} * (kWorkerFds + 2 * routes);
    if (pipeFds == PipeFds::Shared) {
        // The pool's cap covers idle pipes too: they are pipes in existence.
        budget.pipes = std::max(kMinSharedPipes, fdLimit / 16);
        budget.reserved += 2 * budget.pipes;
    } else if (pipeFds == PipeFds::PerConnection) {
        budget.reserved += std::uint64_t{workers} * 2 * idlePipesPerWorker;
    }
    auto available = fdLimit > budget.reserved ? fdLimit - budget.reserved : 0;
    budget.connections = std::min(wantedConnections, available / budget.perConnection);
    return budget;
}

}  // namespace splicegate
