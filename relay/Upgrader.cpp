#include "relay/Upgrader.h"

#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "common/Error.h"
#include "common/Log.h"
#include "common/UniqueFd.h"
#include "relay/AuditHandover.h"
#include "relay/EdgeControl.h"
#include "relay/Handoff.h"

extern char** environ;

namespace splicegate {
namespace {
// After Failed, or the pair's close, the new process exits on its own: this long at most.
constexpr std::chrono::milliseconds kExitWait{5000};

std::string describeStatus(int status) {
    if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return std::string("killed by signal ") + ::strsignal(WTERMSIG(status));
    return "status " + std::to_string(status);
}

// Reaps `pid`, killing it when it has not exited within `wait`; describes how it ended.
std::string reap(pid_t pid, std::chrono::milliseconds wait) {
    const auto deadline = std::chrono::steady_clock::now() + wait;
    int status = 0;
    for (;;) {
        pid_t done = ::waitpid(pid, &status, WNOHANG);
        if (done == pid) return describeStatus(status);
        if (done < 0 && errno != EINTR) return "not reaped: " + errnoText(errno);
        if (std::chrono::steady_clock::now() >= deadline) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return "killed after " + std::to_string(wait.count()) + " ms";
}

// posix_spawn's attribute and file actions, released in any case.
class SpawnSetup {
  public:
    explicit SpawnSetup(int inherited) {
        ::posix_spawnattr_init(&attr_);
        ::posix_spawn_file_actions_init(&actions_);
        // The daemon blocks its control signals in every thread: the new process starts with
        // none blocked and the default actions (it sets up its own).
        sigset_t none;
        sigemptyset(&none);
        ::posix_spawnattr_setsigmask(&attr_, &none);
        sigset_t defaults;
        sigemptyset(&defaults);
        for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2}) sigaddset(&defaults, sig);
        ::posix_spawnattr_setsigdefault(&attr_, &defaults);
        ::posix_spawnattr_setflags(&attr_, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
        // dup2 onto itself clears FD_CLOEXEC (glibc 2.29+): the one fd the new process inherits
        // beyond 0-2.
        ::posix_spawn_file_actions_adddup2(&actions_, inherited, inherited);
    }
    ~SpawnSetup() {
        ::posix_spawn_file_actions_destroy(&actions_);
        ::posix_spawnattr_destroy(&attr_);
    }
    SpawnSetup(const SpawnSetup&) = delete;
    SpawnSetup& operator=(const SpawnSetup&) = delete;
    const posix_spawnattr_t* attr() const noexcept { return &attr_; }
    const posix_spawn_file_actions_t* actions() const noexcept { return &actions_; }

  private:
    posix_spawnattr_t attr_;
    posix_spawn_file_actions_t actions_;
};
}  // namespace

std::string currentExecutable() {
    char path[4096];
    ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
    if (n <= 0) return "/proc/self/exe";
    std::string text(path, static_cast<std::size_t>(n));
    constexpr std::string_view kDeleted = " (deleted)";
    if (text.size() > kDeleted.size() && text.ends_with(kDeleted))
        text.resize(text.size() - kDeleted.size());
    return text;
}

Upgrader::Upgrader(std::vector<std::string> arguments,
                   std::function<std::vector<HandoffSocket>()> sockets, std::string refusal,
                   std::chrono::milliseconds readyTimeout, AuditHandover* audit,
                   EdgeControl* edge, std::function<handoff::Maintenance()> maintenance)
    : executable_(currentExecutable()),
      arguments_(std::move(arguments)),
      sockets_(std::move(sockets)),
      refusal_(std::move(refusal)),
      readyTimeout_(readyTimeout),
      audit_(audit),
      edge_(edge),
      maintenance_(std::move(maintenance)) {}

UpgradeOutcome Upgrader::upgrade() {
    if (!refusal_.empty()) return {false, 0, "upgrade not possible: " + refusal_};
    if (handedOver())
        return {false, 0,
                "this process has handed over to PID " + std::to_string(successor()) +
                    " already and is draining"};
    std::unique_lock lock(running_, std::try_to_lock);
    if (!lock.owns_lock()) return {false, 0, "an upgrade is in progress already"};
    // No retention run of this process while the new one recovers the directory, nor after it
    // took over (the new one runs retention once this one is gone): the lock stays held until
    // handedOver() says so.
    std::unique_lock<std::mutex> maintenance;
    if (audit_) maintenance = std::unique_lock(audit_->maintenance());
    auto outcome = run();
    // Every failure reaped the new process first: what it leased is final, and it no longer
    // runs its program on the edge filter's link.
    if (!outcome.ready && audit_) audit_->abandon();
    if (edge_) {
        if (outcome.ready) edge_->handedOver();
        else edge_->upgradeFailed();
    }
    if (outcome.ready)
        logInfo("upgrade: PID ", outcome.pid,
                " serves now; this process stops accepting and drains");
    else
        logError("upgrade failed, this process goes on serving: ", outcome.problem);
    return outcome;
}

UpgradeOutcome Upgrader::run() {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0)
        return {false, 0, "socketpair: " + errnoText(errno)};
    HandoffChannel channel{UniqueFd(pair[0])};
    UniqueFd theirs(pair[1]);

    std::vector<std::string> argvText{executable_};
    argvText.insert(argvText.end(), arguments_.begin(), arguments_.end());
    std::vector<char*> argv;
    for (auto& arg : argvText) argv.push_back(arg.data());
    argv.push_back(nullptr);
    std::vector<std::string> envText;
    const std::string prefix = std::string(kUpgradeFdVariable) + "=";
    for (char** entry = environ; *entry != nullptr; ++entry)
        if (std::strncmp(*entry, prefix.c_str(), prefix.size()) != 0) envText.emplace_back(*entry);
    envText.push_back(prefix + std::to_string(theirs.get()));
    std::vector<char*> envp;
    for (auto& entry : envText) envp.push_back(entry.data());
    envp.push_back(nullptr);

    // Before the new process exists: the lease it starts past must not move any more.
    handoff::Message auditMessage;
    if (audit_) {
        try {
            auditMessage = audit_->prepare();
        } catch (const std::exception& error) {
            return {false, 0, std::string("audit: ") + error.what()};
        }
    }

    pid_t pid = 0;
    {
        SpawnSetup setup(theirs.get());
        if (int rc = ::posix_spawn(&pid, executable_.c_str(), setup.actions(), setup.attr(),
                                   argv.data(), envp.data());
            rc != 0)
            return {false, 0, "cannot start " + executable_ + ": " + errnoText(rc)};
    }
    theirs.reset();
    logInfo("upgrade: started ", executable_, " as PID ", pid, "; handing over the sockets");

    auto sockets = sockets_();
    for (const auto& socket : sockets) {
        handoff::Message message;
        message.mutable_socket()->set_kind(socket.kind);
        message.mutable_socket()->set_address(socket.address);
        if (int rc = channel.send(message, socket.fd.get()); rc < 0) {
            auto how = reap(pid, kExitWait);
            return {false, pid,
                    "handing over " + socket.address + " to PID " + std::to_string(pid) + ": " +
                        errnoText(-rc) + " (the new process: " + how + ")"};
        }
    }
    if (audit_) {
        if (int rc = channel.send(auditMessage, audit_->lockFd()); rc < 0) {
            auto how = reap(pid, kExitWait);
            return {false, pid, "handing the audit directory over to PID " + std::to_string(pid) +
                                    ": " + errnoText(-rc) + " (the new process: " + how + ")"};
        }
    }
    if (auto xdp = edge_ ? edge_->handoffMessage() : std::nullopt) {
        if (int rc = channel.send(*xdp, edge_->linkFd()); rc < 0) {
            auto how = reap(pid, kExitWait);
            return {false, pid, "handing the XDP edge filter over to PID " + std::to_string(pid) +
                                    ": " + errnoText(-rc) + " (the new process: " + how + ")"};
        }
    }
    if (maintenance_) {
        handoff::Message message;
        *message.mutable_maintenance() = maintenance_();
        if (message.maintenance().disabled_size() > 0) {
            if (int rc = channel.send(message); rc < 0) {
                auto how = reap(pid, kExitWait);
                return {false, pid, "handing the upstreams in maintenance over to PID " +
                                        std::to_string(pid) + ": " + errnoText(-rc) +
                                        " (the new process: " + how + ")"};
            }
        }
    }
    handoff::Message end;
    end.mutable_end()->set_count(static_cast<std::uint32_t>(sockets.size()));
    if (int rc = channel.send(end); rc < 0) {
        auto how = reap(pid, kExitWait);
        return {false, pid, "handing over to PID " + std::to_string(pid) + ": " + errnoText(-rc) +
                                " (the new process: " + how + ")"};
    }

    const auto deadline = std::chrono::steady_clock::now() + readyTimeout_;
    for (;;) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        std::string problem;
        auto received = left.count() > 0 ? channel.receive(left, problem) : std::nullopt;
        if (received && received->message.has_ready()) {
            successor_.store(pid, std::memory_order_release);
            handedOver_.store(true, std::memory_order_release);
            return {true, pid, {}};
        }
        if (received && received->message.has_failed()) {
            auto how = reap(pid, kExitWait);
            return {false, pid,
                    "the new process (PID " + std::to_string(pid) +
                        ") failed: " + received->message.failed().reason() + " (" + how + ")"};
        }
        if (received) continue;  // a message of a newer version
        if (problem == "closed") {
            auto how = reap(pid, kExitWait);
            return {false, pid,
                    "the new process (PID " + std::to_string(pid) + ") ended before it was ready (" +
                        how + "; see the daemon log)"};
        }
        if (left.count() <= 0 || problem.starts_with("no answer")) {
            ::kill(pid, SIGKILL);
            auto how = reap(pid, kExitWait);
            return {false, pid,
                    "the new process (PID " + std::to_string(pid) + ") was not ready within " +
                        std::to_string(readyTimeout_.count()) + " ms and was killed (" + how + ")"};
        }
        ::kill(pid, SIGKILL);
        auto how = reap(pid, kExitWait);
        return {false, pid, "upgrade hand-off: " + problem + " (the new process: " + how + ")"};
    }
}

}  // namespace splicegate
