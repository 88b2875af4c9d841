#pragma once
// What the upgrade tests share (tests/integration/UpgradeTest.cpp, AuditUpgradeTest.cpp):
// - Successor: the process an upgrade started. The test process is a child subreaper
//   (PR_SET_CHILD_SUBREAPER in the suite's set-up), so the new daemon, orphaned when the old one
//   exits, is reparented to it and reaped by PID (killed by PID when a check fails).
// - newPidOf(): the new PID in `splicegatectl upgrade`'s answer.
// - runLoad(): a client opening `rate` connections per second (1 KiB each way through an echo
//   upstream), counting what was refused, reset or echoed wrong.
// Thread affinity: Successor from the test's main thread; runLoad runs its own threads.
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "tests/support/Sockets.h"

namespace splicegate::test {

class Successor {
  public:
    explicit Successor(pid_t pid) : pid_(pid) {}
    ~Successor();
    Successor(const Successor&) = delete;
    Successor& operator=(const Successor&) = delete;
    pid_t pid() const noexcept { return pid_; }
    bool running() const;
    // SIGTERM and the exit status within `timeout` (nullopt: it did not exit; still reaped).
    std::optional<int> terminate(milliseconds timeout);
    // Reaps it once it has exited on its own within `timeout` (its drain after the next upgrade).
    std::optional<int> waitExit(milliseconds timeout);

  private:
    pid_t pid_;
    bool reaped_ = false;
};

// "upgraded: PID N serves; ..." -> N (-1: not there).
pid_t newPidOf(const std::string& out);

struct LoadCounts {
    std::atomic<std::uint64_t> done{0};
    std::atomic<std::uint64_t> refused{0};
    std::atomic<std::uint64_t> reset{0};
    std::atomic<std::uint64_t> otherFailures{0};
    std::atomic<std::uint64_t> mismatched{0};
    std::string firstProblem;
    std::mutex mutex;
    void problem(const std::string& text);
};

// `rate` connections per second for `duration`, spread over a few threads each on its own
// schedule (a slow connection does not hold the others back).
void runLoad(uint16_t port, unsigned rate, milliseconds duration, LoadCounts& counts);

}  // namespace splicegate::test
