#include "relay/WorkerControl.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <span>

#include "common/Error.h"

namespace splicegate {

WorkerControl::WorkerControl()
    : eventFd_(checkSys(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), "eventfd")) {}

void WorkerControl::signal(std::uint32_t request) noexcept {
    requests_.fetch_or(request, std::memory_order_release);
    std::uint64_t one = 1;
    // EAGAIN only when the counter is saturated: a wake-up is pending anyway.
    [[maybe_unused]] auto written = ::write(eventFd_.get(), &one, sizeof one);
}

bool WorkerControl::post(std::function<void()> task) {
    {
        std::lock_guard lock(tasksMutex_);
        if (closed_) return false;
        tasks_.push_back(std::move(task));
    }
    signal(kTasks);
    return true;
}

void WorkerControl::close() noexcept {
    std::lock_guard lock(tasksMutex_);
    closed_ = true;
}

void WorkerControl::arm(RingOps& ring, CompletionTag tag) noexcept {
    ring.read(eventFd_.get(), std::as_writable_bytes(std::span(&value_, 1)), 0, tag);
}

WorkerRequests WorkerControl::take() {
    auto requests = requests_.exchange(0, std::memory_order_acquire);
    if (requests & kTasks) {
        std::vector<std::function<void()>> tasks;
        {
            std::lock_guard lock(tasksMutex_);
            tasks.swap(tasks_);
        }
        for (auto& task : tasks) task();
    }
    return WorkerRequests{(requests & kReload) != 0, (requests & kDrain) != 0,
                          (requests & kStop) != 0};
}

}  // namespace splicegate
