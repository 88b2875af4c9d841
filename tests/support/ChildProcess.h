#pragma once
// A helper program (promtool, openssl s_server, ...) as a child process for the length of a test,
// with stdout+stderr in `logPath`, killed (SIGKILL) if the test process dies. stop() (and the
// destructor) sends SIGTERM to its pid and reaps it, SIGKILL after 10 s.
// Thread affinity: create and destroy from the test's main thread (the death signal is tied to
// the forking thread). Error contract: open/fork failures throw std::system_error.
#include <sys/types.h>

#include <string>
#include <vector>

namespace splicegate::test {

class ChildProcess {
  public:
    // argv[0] is the binary's path (execv: no PATH search).
    ChildProcess(const std::vector<std::string>& argv, const std::string& logPath);
    ChildProcess(const ChildProcess&) = delete;
    ChildProcess& operator=(const ChildProcess&) = delete;
    ~ChildProcess() { stop(); }

    bool running();
    // SIGTERM, wait up to 10 s, then SIGKILL. True when it exited after SIGTERM.
    bool stop();
    pid_t pid() const noexcept { return pid_; }

  private:
    pid_t pid_ = -1;
};

}  // namespace splicegate::test
