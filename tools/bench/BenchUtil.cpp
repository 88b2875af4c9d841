#include "tools/bench/BenchUtil.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <stdexcept>
#include <thread>

namespace splicegate::bench {

namespace po = boost::program_options;

// ---- addresses ---------------------------------------------------------------------------------
std::optional<Endpoint> Endpoint::parse(const std::string& text) {
    Endpoint result;
    std::string host, portText;
    bool v6 = !text.empty() && text.front() == '[';
    if (v6) {
        auto close = text.find(']');
        if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':')
            return std::nullopt;
        host = text.substr(1, close - 1);
        portText = text.substr(close + 2);
    } else {
        auto colon = text.rfind(':');
        if (colon == std::string::npos) return std::nullopt;
        host = text.substr(0, colon);
        portText = text.substr(colon + 1);
    }
    unsigned port = 0;
    auto [end, ec] = std::from_chars(portText.data(), portText.data() + portText.size(), port);
    if (portText.empty() || ec != std::errc{} || end != portText.data() + portText.size() ||
        port > 65535)
        return std::nullopt;
    if (v6) {
        auto* a = reinterpret_cast<sockaddr_in6*>(&result.storage_);
        if (inet_pton(AF_INET6, host.c_str(), &a->sin6_addr) != 1) return std::nullopt;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons(static_cast<std::uint16_t>(port));
        result.length_ = sizeof(sockaddr_in6);
    } else {
        auto* a = reinterpret_cast<sockaddr_in*>(&result.storage_);
        if (inet_pton(AF_INET, host.c_str(), &a->sin_addr) != 1) return std::nullopt;
        a->sin_family = AF_INET;
        a->sin_port = htons(static_cast<std::uint16_t>(port));
        result.length_ = sizeof(sockaddr_in);
    }
    result.text_ = text;
    return result;
}

// ---- options ----------------------------------------------------------------------------------
namespace {

// Every value is kept as text: integer(), number() and address() check it against the range the
// command asks for and name the option in the error.
po::options_description describe(const std::vector<OptionSpec>& specs) {
    po::options_description described("options");
    auto add = described.add_options();
    for (const auto& s : specs) {
        auto* value = po::value<std::string>()->value_name(s.valueName);
        if (!s.defaultValue.empty())
            value->default_value(s.defaultValue);
        else if (!s.optional)
            value->required();
        add(s.name.c_str(), value, s.help.c_str());
    }
    add("help,h", "this text");
    return described;
}

}  // namespace

Options::Options(std::string command, std::string summary, std::vector<OptionSpec> specs, int argc,
                 char** argv, int first)
    : command_(std::move(command)), specs_(std::move(specs)) {
    po::options_description described = describe(specs_);
    po::variables_map parsed;
    try {
        // The parser skips its first argument as the program's name: hand it the command word.
        po::store(po::command_line_parser(argc - first + 1, argv + first - 1)
                      .options(described)
                      .positional(po::positional_options_description())  // none: strays are errors
                      .run(),
                  parsed);
        if (parsed.count("help")) {
            std::ostringstream usage;
            usage << "usage: splicegate-bench " << command_ << " [options]\n"
                  << summary << "\n\n"
                  << described;
            throw HelpRequested(usage.str());
        }
        po::notify(parsed);
    } catch (const po::error& e) {
        throw UsageError(command_ + ": " + e.what() + " (see --help)");
    }
    for (const auto& [name, value] : parsed) values_[name] = value.as<std::string>();
}

const OptionSpec& Options::spec(const std::string& name) const {
    for (const auto& s : specs_)
        if (s.name == name) return s;
    throw std::logic_error(command_ + ": asks for option '--" + name + "' it did not declare");
}

std::string Options::str(const std::string& name) const {
    const OptionSpec& s = spec(name);
    auto it = values_.find(name);
    return it != values_.end() ? it->second : s.defaultValue;
}

long Options::integer(const std::string& name, long min, long max) const {
    std::string text = str(name);
    long value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc{} || end != text.data() + text.size() || value < min || value > max)
        throw UsageError(command_ + ": --" + name + " wants an integer in [" + std::to_string(min) +
                         ", " + std::to_string(max) + "], got '" + text + "'");
    return value;
}

double Options::number(const std::string& name, double min, double max) const {
    std::string text = str(name);
    char* end = nullptr;
    errno = 0;
    double value = std::strtod(text.c_str(), &end);
    if (text.empty() || errno != 0 || *end != '\0' || !(value >= min && value <= max)) {
        std::ostringstream msg;
        msg << command_ << ": --" << name << " wants a number in [" << min << ", " << max
            << "], got '" << text << "'";
        throw UsageError(msg.str());
    }
    return value;
}

Endpoint Options::address(const std::string& name) const {
    std::string text = str(name);
    auto parsed = Endpoint::parse(text);
    if (!parsed)
        throw UsageError(command_ + ": --" + name + " wants ADDR:PORT or [IPv6]:PORT, got '" +
                         text + "'");
    return *parsed;
}

std::string Options::fileBytes(const std::string& name) const {
    std::string path = str(name);
    if (path.empty()) return {};
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof())
        throw UsageError(command_ + ": --" + name + ": cannot read '" + path + "'");
    if (bytes.empty()) throw UsageError(command_ + ": --" + name + ": '" + path + "' is empty");
    return bytes;
}

// ---- results ----------------------------------------------------------------------------------
ResultLine& ResultLine::addFixed(const std::string& key, double value, int decimals) {
    out_ << ' ' << key << '=' << std::fixed << std::setprecision(decimals) << value
         << std::defaultfloat;
    return *this;
}

void ResultLine::print() const {
    std::cout << out_.str() << std::endl;
}

// ---- /proc ------------------------------------------------------------------------------------
ProcSample sampleRelayCpu(pid_t relay, pid_t companion) {
    ProcSample sample = sampleProcess(relay, false);
    if (companion > 0) {
        ProcSample other = sampleProcess(companion, false);
        sample.ok = sample.ok && other.ok;
        sample.cpuSeconds += other.cpuSeconds;
    }
    return sample;
}

ProcSample sampleProcess(pid_t pid, bool countFds) {
    ProcSample sample;
    if (pid <= 0) return sample;
    std::string base = "/proc/" + std::to_string(pid);
    {
        std::ifstream stat(base + "/stat");
        std::string line;
        if (!std::getline(stat, line)) return sample;
        auto paren = line.rfind(')');  // comm may hold spaces and parentheses
        if (paren == std::string::npos) return sample;
        std::istringstream rest(line.substr(paren + 2));
        // Fields from 3 (state) on; utime and stime are fields 14 and 15.
        std::string field;
        unsigned long long utime = 0, stime = 0;
        for (int index = 3; index <= 15 && (rest >> field); ++index) {
            if (index == 14) utime = std::stoull(field);
            if (index == 15) stime = std::stoull(field);
        }
        double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
        sample.cpuSeconds = static_cast<double>(utime + stime) / ticks;
    }
    {
        std::ifstream status(base + "/status");
        std::string line;
        while (std::getline(status, line)) {
            if (line.rfind("VmRSS:", 0) == 0) sample.rssKib = std::stol(line.substr(6));
            if (line.rfind("Threads:", 0) == 0) sample.threads = std::stol(line.substr(8));
        }
    }
    if (countFds) {
        sample.fds = 0;
        sample.pipes = 0;
        std::string dirPath = base + "/fd";
        if (DIR* dir = opendir(dirPath.c_str())) {
            char target[256];
            while (dirent* entry = readdir(dir)) {
                if (entry->d_name[0] == '.') continue;
                ++sample.fds;
                std::string link = dirPath + "/" + entry->d_name;
                ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
                if (n > 0) {
                    target[n] = '\0';
                    if (std::string_view(target, static_cast<size_t>(n)).rfind("pipe:", 0) == 0)
                        ++sample.pipes;
                }
            }
            closedir(dir);
        }
    }
    sample.ok = true;
    return sample;
}

// ---- process set-up ---------------------------------------------------------------------------
std::size_t raiseFdLimit() {
    rlimit limit{};
    checkSys(getrlimit(RLIMIT_NOFILE, &limit), "getrlimit(RLIMIT_NOFILE)");
    if (limit.rlim_cur < limit.rlim_max) {
        limit.rlim_cur = limit.rlim_max;
        checkSys(setrlimit(RLIMIT_NOFILE, &limit), "setrlimit(RLIMIT_NOFILE)");
    }
    return limit.rlim_cur == RLIM_INFINITY ? static_cast<std::size_t>(1) << 30
                                           : static_cast<std::size_t>(limit.rlim_cur);
}

void requireFds(std::size_t needed, const std::string& what) {
    std::size_t limit = raiseFdLimit();
    if (needed > limit)
        throw std::runtime_error(what + " needs " + std::to_string(needed) +
                                 " file descriptors but RLIMIT_NOFILE allows " +
                                 std::to_string(limit));
}

namespace {
std::atomic<bool> gStop{false};
extern "C" void onStopSignal(int) {
    gStop.store(true, std::memory_order_relaxed);
}
}  // namespace

int runTool(const char* name, int (*run)(int argc, char** argv), int argc, char** argv) {
    if (argc == 2 && std::strcmp(argv[1], "--version") == 0) {
        std::cout << name << ' ' << SPLICEGATE_VERSION << '\n';
        return 0;
    }
    try {
        return run(argc, argv);
    } catch (const HelpRequested& help) {
        std::cout << help.what();
        return 0;
    } catch (const UsageError& e) {
        std::cerr << name << ": " << e.what() << '\n';
        return 2;
    } catch (const std::exception& e) {
        std::cerr << name << ": " << e.what() << '\n';
        return 1;
    }
}

void installSignalHandlers() {
    struct sigaction action {};
    action.sa_handler = onStopSignal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);
    signal(SIGPIPE, SIG_IGN);
}

bool stopRequested() {
    return gStop.load(std::memory_order_relaxed);
}

// ---- sockets ----------------------------------------------------------------------------------
UniqueFd makeListener(const Endpoint& address, int backlog) {
    UniqueFd fd(checkSys(socket(address.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0),
                         "socket"));
    int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    checkSys(bind(fd.get(), address.get(), address.length()), "bind " + address.text());
    checkSys(listen(fd.get(), backlog), "listen " + address.text());
    return fd;
}

UniqueFd startConnect(const Endpoint& address, int& err) {
    err = 0;
    UniqueFd fd(socket(address.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd) {
        err = errno;
        return fd;
    }
    if (connect(fd.get(), address.get(), address.length()) < 0 && errno != EINPROGRESS) {
        err = errno;
        fd.reset();
    }
    return fd;
}

UniqueFd connectWithTimeout(const Endpoint& address, double timeoutSeconds) {
    int err = 0;
    UniqueFd fd = startConnect(address, err);
    if (!fd) throwErrno(err, "connect " + address.text());
    pollfd p{fd.get(), POLLOUT, 0};
    int rc = poll(&p, 1, static_cast<int>(timeoutSeconds * 1000));
    if (rc == 0) throwErrno(ETIMEDOUT, "connect " + address.text());
    checkSys(rc, "poll");
    if (int soErr = socketError(fd.get())) throwErrno(soErr, "connect " + address.text());
    return fd;
}

void setNoDelay(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void setNonBlocking(int fd) {
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

int socketError(int fd) {
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0) return errno;
    return err;
}

// ---- statistics -------------------------------------------------------------------------------
double percentile(const std::vector<std::uint32_t>& sorted, double q) {
    if (sorted.empty()) return 0;
    double rank = std::ceil(q * static_cast<double>(sorted.size()));
    std::size_t index = rank < 1 ? 0 : static_cast<std::size_t>(rank) - 1;
    return sorted[std::min(index, sorted.size() - 1)];
}

double median(std::vector<double> values) {
    if (values.empty()) return 0;
    std::sort(values.begin(), values.end());
    std::size_t n = values.size();
    return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

void sleepUntil(Clock::time_point until) {
    while (!stopRequested()) {
        auto now = Clock::now();
        if (now >= until) return;
        std::this_thread::sleep_for(
            std::min<Clock::duration>(until - now, std::chrono::milliseconds(20)));
    }
}

}  // namespace splicegate::bench
