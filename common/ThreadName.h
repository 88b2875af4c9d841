#pragma once
// Names the calling thread, so that `top -H`, `ps -L`, perf and /proc/PID/task/*/comm tell an
// operator which of the daemon's threads is busy: "sg-worker-0", "sg-admin", ... The kernel keeps
// at most 15 characters; a longer name is cut. Best effort: a refusal changes nothing else.
#include <pthread.h>

#include <string>

namespace splicegate {

inline void nameThisThread(std::string name) noexcept {
    if (name.size() > 15) name.resize(15);
    (void)::pthread_setname_np(::pthread_self(), name.c_str());
}

}  // namespace splicegate
