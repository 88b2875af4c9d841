#include "tests/support/ChildProcess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "common/Error.h"
#include "tests/support/Sockets.h"

namespace splicegate::test {

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const std::string& logPath) {
    std::vector<char*> cargv;
    for (const auto& arg : argv) cargv.push_back(const_cast<char*>(arg.c_str()));
    cargv.push_back(nullptr);
    int devNull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    int log = ::open(logPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (devNull < 0 || log < 0) {
        int saved = errno;
        if (devNull >= 0) ::close(devNull);
        if (log >= 0) ::close(log);
        throwErrno(saved, "open " + logPath);
    }
    pid_t parent = ::getpid();
    sigset_t empty;
    sigemptyset(&empty);
    pid_ = ::fork();
    if (pid_ == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) ::_exit(127);
        ::dup2(devNull, 0);
        ::dup2(log, 1);
        ::dup2(log, 2);
        ::close_range(3, ~0U, 0);
        ::sigprocmask(SIG_SETMASK, &empty, nullptr);
        ::execv(cargv[0], cargv.data());
        ::_exit(127);
    }
    int saved = errno;
    ::close(devNull);
    ::close(log);
    if (pid_ < 0) throwErrno(saved, "fork");
}

bool ChildProcess::running() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
    }
    return true;
}

bool ChildProcess::stop() {
    if (!running()) return true;
    ::kill(pid_, SIGTERM);
    Deadline deadline = deadlineIn(milliseconds(10000));
    while (Clock::now() < deadline) {
        int status = 0;
        if (::waitpid(pid_, &status, WNOHANG) == pid_) {
            pid_ = -1;
            return true;
        }
        std::this_thread::sleep_for(milliseconds(20));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
    return false;
}

}  // namespace splicegate::test
