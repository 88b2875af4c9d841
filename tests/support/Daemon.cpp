#include "tests/support/Daemon.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <system_error>
#include <thread>

namespace splicegate::test {
namespace {

[[noreturn]] void throwErrno(const std::string& what) {
    throw std::system_error(errno, std::generic_category(), what);
}

std::string quote(const std::string& arg) {
    if (!arg.empty() && arg.find_first_of(" '\"\\$") == std::string::npos) return arg;
    std::string quoted = "'";
    for (char c : arg) {
        if (c == '\'') {
            quoted += "'\\''";
        } else {
            quoted += c;
        }
    }
    return quoted + "'";
}

ExitStatus decode(int status) {
    ExitStatus result;
    if (WIFEXITED(status)) {
        result.exited = true;
        result.code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
        result.signal = WTERMSIG(status);
    }
    return result;
}

// fork + exec with stdout/stderr redirected to files. Everything the child touches is prepared
// before fork(): between fork and exec only async-signal-safe calls are made.
pid_t spawn(const std::vector<std::string>& argv, const std::string& outPath,
            const std::string& errPath) {
    if (::access(argv.at(0).c_str(), X_OK) != 0) {
        throwErrno("cannot execute " + argv[0] +
                   " (build the daemon, or point SPLICEGATE_BIN at a splicegate binary)");
    }
    std::vector<char*> cargv;
    for (const auto& arg : argv) cargv.push_back(const_cast<char*>(arg.c_str()));
    cargv.push_back(nullptr);
    int devNull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    int out = ::open(outPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int err = outPath == errPath
                  ? out
                  : ::open(errPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (devNull < 0 || out < 0 || err < 0) {
        int saved = errno;
        if (devNull >= 0) ::close(devNull);
        if (out >= 0) ::close(out);
        if (err >= 0 && err != out) ::close(err);
        errno = saved;
        throwErrno("open log file " + errPath);
    }
    pid_t parent = ::getpid();
    sigset_t empty;
    sigemptyset(&empty);
    pid_t pid = ::fork();
    if (pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) ::_exit(127);
        ::dup2(devNull, 0);
        ::dup2(out, 1);
        ::dup2(err, 2);
        ::close_range(3, ~0U, 0);
        struct sigaction dfl {};
        dfl.sa_handler = SIG_DFL;
        for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGCHLD}) ::sigaction(sig, &dfl, nullptr);
        ::sigprocmask(SIG_SETMASK, &empty, nullptr);
        ::execv(cargv[0], cargv.data());
        static const char kMessage[] = "exec of the daemon binary failed\n";
        ssize_t ignored = ::write(2, kMessage, sizeof kMessage - 1);
        (void)ignored;
        ::_exit(127);
    }
    int saved = errno;
    ::close(devNull);
    ::close(out);
    if (err != out) ::close(err);
    if (pid < 0) {
        errno = saved;
        throwErrno("fork");
    }
    return pid;
}

std::optional<ExitStatus> reap(pid_t pid, milliseconds timeout) {
    Deadline deadline = deadlineIn(timeout);
    for (;;) {
        int status = 0;
        pid_t r = ::waitpid(pid, &status, WNOHANG);
        if (r == pid) return decode(status);
        if (r < 0 && errno != EINTR) return ExitStatus{};  // not our child any more
        if (Clock::now() >= deadline) return std::nullopt;
        std::this_thread::sleep_for(milliseconds(5));
    }
}

}  // namespace

TempDir::TempDir(const std::string& parent) {
    std::filesystem::path base =
        parent.empty() ? std::filesystem::temp_directory_path() : std::filesystem::path(parent);
    std::string pattern = (base / "splicegate-it-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throwErrno("mkdtemp " + pattern);
    path_ = pattern;
}

TempDir::~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
}

std::string TempDir::write(const std::string& name, const std::string& content) const {
    std::string target = path_ + "/" + name;
    std::string temp = target + ".tmp";
    {
        std::ofstream out(temp, std::ios::trunc);
        out << content;
        if (!out.flush()) throw std::runtime_error("cannot write " + temp);
    }
    std::filesystem::rename(temp, target);
    return target;
}

std::string readFile(const std::string& path) {
    std::ifstream in(path);
    std::ostringstream content;
    content << in.rdbuf();
    return content.str();
}

std::string ExitStatus::describe() const {
    if (exited) return "exit code " + std::to_string(code);
    if (signal != 0) return std::string("killed by signal ") + ::strsignal(signal);
    return "unknown status";
}

std::string daemonBinary() {
    if (const char* env = std::getenv("SPLICEGATE_BIN"); env != nullptr && *env != '\0') {
        return env;
    }
    return std::string(SPLICEGATE_BIN_DIR) + "/splicegate";
}

ProcessResult runProcess(const std::vector<std::string>& argv, milliseconds timeout) {
    TempDir dir;
    std::string outPath = dir.path() + "/stdout";
    std::string errPath = dir.path() + "/stderr";
    pid_t pid = spawn(argv, outPath, errPath);
    ProcessResult result;
    result.status = reap(pid, timeout);
    if (!result.status) {
        ::kill(pid, SIGKILL);
        reap(pid, milliseconds(5000));
    }
    result.out = readFile(outPath);
    result.err = readFile(errPath);
    return result;
}

std::vector<std::string> grepLines(const std::string& text, const std::string& needle) {
    auto lower = [](std::string s) {
        std::transform(s.begin(), s.end(), s.begin(),
                       [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        return s;
    };
    std::string wanted = lower(needle);
    std::vector<std::string> lines;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        if (lower(line).find(wanted) != std::string::npos) lines.push_back(line);
    }
    return lines;
}

std::vector<std::string> relayArgs(uint16_t listenPort, const std::vector<std::string>& upstreams,
                                   const std::vector<std::string>& extra, unsigned workers) {
    std::vector<std::string> args{"--listen", loopback(listenPort)};
    for (const auto& upstream : upstreams) {
        args.emplace_back("--upstream");
        args.push_back(upstream);
    }
    args.emplace_back("--workers");
    args.push_back(std::to_string(workers));
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
}

std::string routeSection(const std::string& name, const std::string& listen,
                         const std::vector<std::string>& upstreams) {
    std::string text = "[route." + name + "]\nlisten = " + listen + "\n";
    for (const auto& upstream : upstreams) text += "upstream = " + upstream + "\n";
    return text + "\n";
}

Daemon::Daemon(std::vector<std::string> args, bool addQuietDefaults) {
    std::vector<std::string> argv{daemonBinary()};
    argv.insert(argv.end(), args.begin(), args.end());
    if (addQuietDefaults) {
        for (const char* option : {"--admin-socket", "--metrics-listen", "--audit-dir"}) {
            if (std::find(args.begin(), args.end(), option) == args.end()) {
                argv.emplace_back(option);
                argv.emplace_back("");
            }
        }
    }
    // CTest runs the audit suites a second time with the other audit writer (tests/CMakeLists).
    if (const char* writer = std::getenv("SPLICEGATE_TEST_AUDIT_WRITER");
        writer != nullptr && *writer != '\0' &&
        std::find(args.begin(), args.end(), "--audit-writer") == args.end()) {
        argv.emplace_back("--audit-writer");
        argv.emplace_back(writer);
    }
    // Appended piece by piece: `"literal" + std::string&&` makes GCC 12 at -O3 report a false
    // -Wrestrict overlap inside std::string::insert (GCC bug 105651).
    for (const auto& arg : argv) {
        if (!commandLine_.empty()) commandLine_ += ' ';
        commandLine_ += quote(arg);
    }
    logPath_ = dir_.path() + "/daemon.log";
    pid_ = spawn(argv, logPath_, logPath_);
}

Daemon::~Daemon() {
    if (running()) {
        ::kill(pid_, SIGKILL);
        reap(pid_, milliseconds(10000));
    }
    if (::testing::Test::HasFailure()) {
        std::cerr << "---- splicegate (pid " << pid_ << ") " << commandLine_ << "\n"
                  << "---- state: " << (status_ ? status_->describe() : "killed by the test")
                  << "\n---- log tail:\n"
                  << logTail(60) << "---- end of log\n";
    }
}

bool Daemon::running() {
    if (status_) return false;
    int status = 0;
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
        status_ = decode(status);
        return false;
    }
    return r == 0;
}

bool Daemon::waitReady(uint16_t port, milliseconds timeout) {
    Deadline deadline = deadlineIn(timeout);
    for (;;) {
        if (!running()) return false;
        // The listeners are bound before the workers set up (a client may wait in the backlog),
        // so LISTEN alone does not mean every worker has opened its audit segment yet.
        if (isListening(port) && log().find(" started: ") != std::string::npos) return true;
        if (Clock::now() >= deadline) return false;
        std::this_thread::sleep_for(milliseconds(10));
    }
}

std::size_t Daemon::waitLogLines(const std::string& needle, std::size_t count,
                                 milliseconds timeout) {
    Deadline deadline = deadlineIn(timeout);
    for (;;) {
        auto found = grepLines(log(), needle).size();
        if (found >= count || Clock::now() >= deadline) return found;
        std::this_thread::sleep_for(milliseconds(20));
    }
}

void Daemon::signal(int sig) const {
    if (!status_) ::kill(pid_, sig);
}

std::optional<ExitStatus> Daemon::waitExit(milliseconds timeout) {
    if (status_) return status_;
    status_ = reap(pid_, timeout);
    return status_;
}

std::optional<ExitStatus> Daemon::terminate(milliseconds timeout) {
    signal(SIGTERM);
    return waitExit(timeout);
}

long Daemon::statusField(const char* name) const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    std::size_t length = std::strlen(name);
    while (std::getline(in, line)) {
        if (line.compare(0, length, name) == 0 && line.size() > length && line[length] == ':') {
            return std::strtol(line.c_str() + length + 1, nullptr, 10);
        }
    }
    return -1;
}

long Daemon::rssKiB() const {
    return statusField("VmRSS");
}
long Daemon::threadCount() const {
    return statusField("Threads");
}

Daemon::FdCounts Daemon::fdCounts() const {
    FdCounts counts;
    std::string path = "/proc/" + std::to_string(pid_) + "/fd";
    DIR* dir = ::opendir(path.c_str());
    if (dir == nullptr) return {-1, -1, -1};
    while (dirent* entry = ::readdir(dir)) {
        if (entry->d_name[0] == '.') continue;
        ++counts.total;
        char target[256];
        ssize_t n = ::readlinkat(::dirfd(dir), entry->d_name, target, sizeof target - 1);
        std::string_view link(target, n > 0 ? static_cast<std::size_t>(n) : 0);
        if (link.starts_with("pipe:")) ++counts.pipes;
        if (link.starts_with("socket:")) ++counts.sockets;
    }
    ::closedir(dir);
    return counts;
}

std::string Daemon::log() const {
    return readFile(logPath_);
}

std::string Daemon::logTail(std::size_t lines) const {
    std::vector<std::string> all;
    std::istringstream in(log());
    std::string line;
    while (std::getline(in, line)) all.push_back(line);
    std::size_t first = all.size() > lines ? all.size() - lines : 0;
    std::string tail;
    if (first > 0) tail = "  [... " + std::to_string(first) + " earlier lines]\n";
    for (std::size_t i = first; i < all.size(); ++i) tail += "  " + all[i] + "\n";
    return tail;
}

std::string Daemon::why(std::size_t lines) {
    std::ostringstream out;
    bool alive = running();
    out << "\n  daemon: " << commandLine_ << "\n  state: "
        << (alive     ? std::string("running")
            : status_ ? status_->describe()
                      : std::string("gone"))
        << "\n  log tail:\n"
        << logTail(lines);
    return out.str();
}

}  // namespace splicegate::test
