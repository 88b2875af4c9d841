#include "relay/CpuPlacement.h"

#include <sched.h>

#include <cerrno>

namespace splicegate {

std::optional<int> workerCpu(const std::vector<int>& allowed, unsigned index) noexcept {
    if (allowed.size() < 2) return std::nullopt;
    return allowed[index % allowed.size()];
}

std::vector<int> allowedCpus() {
    cpu_set_t set;
    CPU_ZERO(&set);
    std::vector<int> cpus;
    if (::sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
        if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
    return cpus;
}

int placeThisWorker(unsigned index) noexcept {
    try {
        auto cpu = workerCpu(allowedCpus(), index);
        if (!cpu) return 0;
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(*cpu, &set);
        return ::sched_setaffinity(0, sizeof set, &set) == 0 ? 0 : -errno;
    } catch (...) {  // std::bad_alloc of the CPU list: leave the thread to the scheduler
        return -ENOMEM;
    }
}

}  // namespace splicegate
