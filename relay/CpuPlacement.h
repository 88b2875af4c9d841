#pragma once
// Which CPU a worker thread runs on. Left to the scheduler, the two workers of a 2-CPU machine
// spend whole runs on the same CPU (wake-ups pull a woken worker next to the thread that woke
// it), and then every request of every connection queues behind the other worker: the rr tail
// doubled in such runs (issue 32, "the rr tail is bimodal"). Each worker is therefore pinned to
// one CPU of the set the daemon may use (taskset, systemd CPUAffinity=), worker i to the i-th
// allowed CPU, round robin when there are more workers than CPUs. Clients, upstreams and io-wq
// threads keep floating. Thread affinity: placeThisWorker() acts on the calling thread only.
#include <optional>
#include <vector>

namespace splicegate {

// The CPU for worker `index` among `allowed` (ascending CPU numbers); nothing when the set is
// empty or holds one CPU (nothing to spread).
std::optional<int> workerCpu(const std::vector<int>& allowed, unsigned index) noexcept;

// The CPUs the calling thread may run on, ascending; empty when the kernel does not say.
std::vector<int> allowedCpus();

// Pins the calling thread to workerCpu(allowedCpus(), index). Returns 0, or -errno of
// sched_setaffinity (the thread then stays where the scheduler puts it).
int placeThisWorker(unsigned index) noexcept;

}  // namespace splicegate
