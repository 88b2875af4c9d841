#include "relay/FdBudget.h"

#include <algorithm>

namespace splicegate {

FdBudget FdBudget::plan(std::uint64_t fdLimit, std::uint64_t wantedConnections, unsigned workers,
                        std::uint64_t routes, std::uint64_t idlePipesPerWorker,
                        std::uint64_t controlFds, bool pipes) noexcept {
    FdBudget budget;
    budget.fdLimit = fdLimit;
    budget.perConnection = kSocketsPerConnection + (pipes ? kPipeFdsPerConnection : 0);
    budget.reserved = kProcessFds + controlFds +
                      std::uint64_t{workers} * (kWorkerFds + 2 * routes + 2 * idlePipesPerWorker);
    auto available = fdLimit > budget.reserved ? fdLimit - budget.reserved : 0;
    budget.connections = std::min(wantedConnections, available / budget.perConnection);
    return budget;
}

}  // namespace splicegate
