#pragma once
// The running daemon's side of `splicegatectl upgrade`: starts the binary found at the daemon's
// path again (resolved at start, so a package upgrade's new file is the one started) with the
// same arguments and one end of a hand-off socket pair (relay/Handoff.h), sends it every
// listening socket, and waits until the new process says it is ready, says why it failed, exits
// or runs out of time. Only a ready new process makes this one stop accepting and drain; on any
// failure this process goes on serving as before and the reason goes back to the operator.
// Thread affinity: upgrade() on the admin thread, handedOver() from any thread. Error contract:
// never throws; failures are in the outcome.
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "common/UniqueFd.h"
#include "splicegate/handoff.pb.h"

namespace splicegate {

class AuditHandover;
class EdgeControl;

struct HandoffSocket {
    handoff::SocketKind kind;
    std::string address;
    UniqueFd fd;  // a duplicate, closed once sent
};

struct UpgradeOutcome {
    bool ready = false;
    pid_t pid = 0;
    std::string problem;  // when not ready: one line for the operator
};

class Upgrader {
  public:
    // `arguments`: the daemon's argv without argv[0]. `sockets` lists what to hand over at the
    // time of the upgrade. `refusal`: non-empty when this process's configuration cannot be
    // handed over (the reason). `audit`: the audit log's hand-off (null: audit off); `edge`:
    // the XDP edge filter, whose link goes to the new process (null or disabled: none). Both
    // outlive this. `maintenance`: the upstreams in maintenance at the time of the upgrade,
    // which the new process keeps disabled (empty function: none).
    Upgrader(std::vector<std::string> arguments, std::function<std::vector<HandoffSocket>()> sockets,
             std::string refusal, std::chrono::milliseconds readyTimeout,
             AuditHandover* audit = nullptr, EdgeControl* edge = nullptr,
             std::function<handoff::Maintenance()> maintenance = {});

    UpgradeOutcome upgrade();
    // A new process is ready: this one stops accepting and drains.
    bool handedOver() const noexcept { return handedOver_.load(std::memory_order_acquire); }
    pid_t successor() const noexcept { return successor_.load(std::memory_order_acquire); }
    const std::string& executable() const noexcept { return executable_; }

  private:
    UpgradeOutcome run();

    std::string executable_;
    std::vector<std::string> arguments_;
    std::function<std::vector<HandoffSocket>()> sockets_;
    std::string refusal_;
    std::chrono::milliseconds readyTimeout_;
    AuditHandover* audit_;
    EdgeControl* edge_;
    std::function<handoff::Maintenance()> maintenance_;
    std::mutex running_;
    std::atomic<bool> handedOver_{false};
    std::atomic<pid_t> successor_{0};
};

// The daemon's binary as the path it was started from ("/usr/sbin/splicegate"), read from
// /proc/self/exe at start (a replaced file reads " (deleted)" afterwards).
std::string currentExecutable();

}  // namespace splicegate
