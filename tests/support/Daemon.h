#pragma once
// The real splicegate daemon as a child process, for integration tests.
// - TempDir: a private directory under /tmp, removed with everything in it.
// - runProcess(): runs a binary to completion (bounded), capturing stdout and stderr apart.
// - Daemon: starts build/bin/splicegate (or $SPLICEGATE_BIN) with fork/exec, stdout+stderr to a
//   log file in its own TempDir, always adding `--admin-socket '' --metrics-listen ''
//   --audit-dir ''` unless told not to. The child gets PR_SET_PDEATHSIG(SIGKILL), a clean signal
//   mask and no inherited fds beyond 0-2. The destructor SIGKILLs (by pid) and reaps it if it
//   is still running, and prints the log's tail when the current test has failed.
// Thread affinity: create, signal and destroy a Daemon from the test's main thread (the death
// signal is tied to the forking thread). Error contract: spawn failures throw std::system_error.
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/Sockets.h"

namespace splicegate::test {

class TempDir {
  public:
    // Under `parent` (default: the system's temporary directory; disk tests pass /var/tmp, which
    // is not a tmpfs where /tmp is).
    explicit TempDir(const std::string& parent = {});
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    ~TempDir();
    const std::string& path() const noexcept { return path_; }
    std::string file(const std::string& name) const { return path_ + "/" + name; }
    // Writes `content` to path()/name atomically (temp file + rename); returns the full path.
    std::string write(const std::string& name, const std::string& content) const;

  private:
    std::string path_;
};

std::string readFile(const std::string& path);

struct ExitStatus {
    bool exited = false;  // normal exit (code valid) vs killed by a signal
    int code = -1;
    int signal = 0;
    bool isExit(int wanted) const noexcept { return exited && code == wanted; }
    std::string describe() const;
};

struct ProcessResult {
    std::optional<ExitStatus> status;  // empty: did not finish in time (it was killed)
    std::string out;
    std::string err;
};

// Path of the daemon binary: $SPLICEGATE_BIN if set, else SPLICEGATE_BIN_DIR "/splicegate".
std::string daemonBinary();

// Runs argv (argv[0] is the binary path) to completion, killing it after `timeout`.
ProcessResult runProcess(const std::vector<std::string>& argv,
                         milliseconds timeout = milliseconds(10000));

// Lines of `text` containing `needle` (case-insensitive).
std::vector<std::string> grepLines(const std::string& text, const std::string& needle);

// Command line of a one-route relay: --listen 127.0.0.1:listenPort, one --upstream per entry,
// --workers N, then `extra`.
std::vector<std::string> relayArgs(uint16_t listenPort, const std::vector<std::string>& upstreams,
                                   const std::vector<std::string>& extra = {},
                                   unsigned workers = 2);
// An INI `[route.NAME]` section.
std::string routeSection(const std::string& name, const std::string& listen,
                         const std::vector<std::string>& upstreams);

class Daemon {
  public:
    // Starts the daemon with `args` (without the binary path). Does not wait for readiness.
    explicit Daemon(std::vector<std::string> args, bool addQuietDefaults = true);
    Daemon(const Daemon&) = delete;
    Daemon& operator=(const Daemon&) = delete;
    ~Daemon();

    // Waits until `port` is in LISTEN state and every worker is set up (the log's "started"
    // line) while the daemon is alive.
    // On failure returns false; why() says what happened.
    bool waitReady(uint16_t port, milliseconds timeout = milliseconds(10000));

    // Waits until the log has `count` lines containing `needle` (case-insensitive), at most
    // `timeout`; returns how many it has then. A line is written after the effect it reports
    // (a close is seen by the peer before its access line), so tests wait for it.
    std::size_t waitLogLines(const std::string& needle, std::size_t count, milliseconds timeout);

    void signal(int sig) const;
    // Reaps the daemon if it exits within `timeout`.
    std::optional<ExitStatus> waitExit(milliseconds timeout);
    // SIGTERM, then waitExit(timeout).
    std::optional<ExitStatus> terminate(milliseconds timeout = milliseconds(10000));
    bool running();
    const std::optional<ExitStatus>& exitStatus() const noexcept { return status_; }

    pid_t pid() const noexcept { return pid_; }
    // From /proc/PID/status; -1 when the process is gone.
    long rssKiB() const;
    long threadCount() const;

    // Open fds of the daemon by kind (from /proc/PID/fd); all -1 when the process is gone.
    struct FdCounts {
        long total = 0;
        long pipes = 0;
        long sockets = 0;
    };
    FdCounts fdCounts() const;

    std::string log() const;
    std::string logTail(std::size_t lines = 40) const;
    const std::string& commandLine() const noexcept { return commandLine_; }
    const TempDir& dir() const noexcept { return dir_; }
    // A one-paragraph explanation for failure messages: command, state, log tail.
    std::string why(std::size_t lines = 40);

  private:
    long statusField(const char* name) const;

    TempDir dir_;
    std::string logPath_;
    std::string commandLine_;
    pid_t pid_ = -1;
    std::optional<ExitStatus> status_;
};

}  // namespace splicegate::test
