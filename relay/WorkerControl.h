#pragma once
// How other threads reach a worker: request flags (reload, drain, stop) and posted tasks, and an
// eventfd whose read, armed on the worker's ring, wakes its loop when either arrives. The worker
// takes what arrived when that read completes; nothing else is shared between the threads.
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "common/CompletionTag.h"
#include "common/RingOps.h"
#include "common/UniqueFd.h"

namespace splicegate {

struct WorkerRequests {
    bool reload = false;
    bool drain = false;
    bool stop = false;
};

class WorkerControl {
  public:
    // Throws std::system_error when the eventfd cannot be made.
    WorkerControl();

    // Any thread.
    void requestReload() noexcept { signal(kReload); }
    void requestDrain() noexcept { signal(kDrain); }
    void requestStop() noexcept { signal(kStop); }
    // Queues `task` for the worker's thread. False once the worker has closed its control (the
    // task is dropped, not run).
    bool post(std::function<void()> task);

    // Worker thread: the eventfd read, completing with `tag` when something arrived.
    void arm(RingOps& ring, CompletionTag tag) noexcept;
    // The read completed: runs the posted tasks, then returns the requests that came (and arms
    // nothing: the caller arms again when it still wants to hear).
    WorkerRequests take();
    // The worker leaves its loop: later posts are refused. A task posted before is still run by
    // the next take().
    void close() noexcept;

  private:
    enum Request : std::uint32_t { kReload = 1, kDrain = 2, kStop = 4, kTasks = 8 };
    void signal(std::uint32_t request) noexcept;

    UniqueFd eventFd_;
    std::uint64_t value_ = 0;  // where the armed read puts the eventfd's count
    std::atomic<std::uint32_t> requests_{0};
    std::mutex tasksMutex_;
    bool closed_ = false;  // under tasksMutex_: no task can slip in after close()
    std::vector<std::function<void()>> tasks_;
};

}  // namespace splicegate
