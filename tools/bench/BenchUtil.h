#pragma once
// Shared pieces of splicegate-bench: option parsing, clocks, process sampling from /proc, socket
// helpers and the one-line result format the run script parses ("key=value key=value ...").
// Thread affinity: everything here may be called from any thread; stopRequested() is the only
// shared state (set by SIGINT/SIGTERM).
#include <sys/socket.h>
#include <sys/types.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "common/UniqueFd.h"

// Apart from Boost.Program_options, self-contained on purpose (only the header-only fd owner from
// common/): the load tools must build and run whatever state the daemon's libraries are in.
namespace splicegate::bench {

// Bad command-line input: main() prints it as one line and exits 2.
class UsageError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

[[noreturn]] inline void throwErrno(int err, const std::string& what) {
    throw std::system_error(err, std::system_category(), what);
}
template <typename T>
T checkSys(T result, const std::string& what) {
    if (result < 0) throwErrno(errno, what);
    return result;
}

// A numeric IPv4 "a.b.c.d:port" or IPv6 "[addr]:port" socket address.
class Endpoint {
  public:
    static std::optional<Endpoint> parse(const std::string& text);
    const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage_); }
    socklen_t length() const { return length_; }
    int family() const { return storage_.ss_family; }
    const std::string& text() const { return text_; }

  private:
    sockaddr_storage storage_{};
    socklen_t length_ = 0;
    std::string text_;
};

using Clock = std::chrono::steady_clock;

inline double secondsBetween(Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration<double>(to - from).count();
}
inline Clock::duration secondsToDuration(double seconds) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// ---- command-line options -------------------------------------------------------------------
struct OptionSpec {
    std::string name;          // without the leading "--"
    std::string valueName;     // shown in the usage: "--name VALUE"
    std::string defaultValue;  // empty with a value name: required, unless `optional`
    std::string help;
    bool optional = false;     // no default, and may be left out (str() gives "")
};

// `--help` anywhere on a command's line: main() prints the usage on stdout and exits 0.
class HelpRequested : public std::exception {
  public:
    explicit HelpRequested(std::string usage) : usage_(std::move(usage)) {}
    const char* what() const noexcept override { return usage_.c_str(); }

  private:
    std::string usage_;
};

// A command's options, parsed by Boost.Program_options from "--name value" or "--name=value". Bad
// input throws UsageError naming the option; --help throws HelpRequested.
class Options {
  public:
    Options(std::string command, std::string summary, std::vector<OptionSpec> specs, int argc,
            char** argv, int first);

    std::string str(const std::string& name) const;
    long integer(const std::string& name, long min, long max) const;
    double number(const std::string& name, double min, double max) const;
    Endpoint address(const std::string& name) const;
    // The whole content of the file the option names ("" when not given); an unreadable or
    // empty file is a usage error naming it. For --first-bytes (a TLS ClientHello).
    std::string fileBytes(const std::string& name) const;

  private:
    const OptionSpec& spec(const std::string& name) const;

    std::string command_;
    std::vector<OptionSpec> specs_;
    std::map<std::string, std::string> values_;
};

// ---- results ----------------------------------------------------------------------------------
// Collects "key=value" pairs and prints them as one line on stdout (the run script parses it).
class ResultLine {
  public:
    explicit ResultLine(const std::string& test) { out_ << "result=" << test; }
    template <typename T>
    ResultLine& add(const std::string& key, const T& value) {
        out_ << ' ' << key << '=' << value;
        return *this;
    }
    ResultLine& addFixed(const std::string& key, double value, int decimals);
    void print() const;

  private:
    std::ostringstream out_;
};

// ---- /proc sampling ---------------------------------------------------------------------------
struct ProcSample {
    bool ok = false;
    double cpuSeconds = 0;  // utime + stime of all threads, live and exited (incl. io-wq workers)
    long rssKib = 0;        // VmRSS
    long threads = 0;       // Threads:
    long fds = -1;          // open fds (only when counted)
    long pipes = -1;        // of them, pipe ends
};
// pid <= 0 returns ok == false. Counting fds reads /proc/PID/fd (costly with 16k fds: ~10 ms).
ProcSample sampleProcess(pid_t pid, bool countFds);
// The relay's sample with the CPU of a companion process added (companion <= 0: none), e.g. the
// tcpdump that keeps HAProxy's copy of the streams: its cost is the relay set-up's cost.
ProcSample sampleRelayCpu(pid_t relay, pid_t companion);

// ---- process set-up ---------------------------------------------------------------------------
// Raises RLIMIT_NOFILE's soft limit to the hard limit; returns the resulting soft limit.
std::size_t raiseFdLimit();
// Throws std::runtime_error when `needed` fds do not fit under the (raised) soft limit.
void requireFds(std::size_t needed, const std::string& what);
// SIGINT/SIGTERM set the stop flag; SIGPIPE is ignored (sends use MSG_NOSIGNAL anyway).
// main() of a tool with one command: prints the version for a lone --version, else runs `run`
// and turns what it throws into an exit code: HelpRequested printed (0), UsageError (2) and any
// other exception (1) as one line naming the tool.
int runTool(const char* name, int (*run)(int argc, char** argv), int argc, char** argv);

void installSignalHandlers();
bool stopRequested();

// ---- sockets ----------------------------------------------------------------------------------
UniqueFd makeListener(const Endpoint& address, int backlog);
// Non-blocking socket with a connect in progress (or done). Returns an invalid fd and sets `err`
// (errno) on immediate failure.
UniqueFd startConnect(const Endpoint& address, int& err);
// Blocking-style connect with a timeout, returning a connected non-blocking socket; throws.
UniqueFd connectWithTimeout(const Endpoint& address, double timeoutSeconds);
void setNoDelay(int fd);
void setNonBlocking(int fd);
int socketError(int fd);

// ---- statistics ----------------------------------------------------------------------------
// Nearest-rank percentile of `sorted` (ascending), q in [0, 1]. 0 when empty.
double percentile(const std::vector<std::uint32_t>& sorted, double q);
double median(std::vector<double> values);

// Sleeps until `until` or until a stop is requested (checked every 20 ms).
void sleepUntil(Clock::time_point until);

}  // namespace splicegate::bench
