#include "tests/support/Upgrade.h"

#include <signal.h>
#include <sys/wait.h>

#include <cstring>
#include <thread>
#include <vector>

namespace splicegate::test {

Successor::~Successor() {
    if (pid_ <= 0 || reaped_) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
}

bool Successor::running() const {
    return pid_ > 0 && !reaped_ && ::kill(pid_, 0) == 0;
}

std::optional<int> Successor::waitExit(milliseconds timeout) {
    if (pid_ <= 0) return std::nullopt;
    auto deadline = deadlineIn(timeout);
    int status = 0;
    while (Clock::now() < deadline) {
        pid_t done = ::waitpid(pid_, &status, WNOHANG);
        if (done == pid_) {
            reaped_ = true;
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        // Reparenting happens when the old process exits: until then waitpid says ECHILD.
        std::this_thread::sleep_for(milliseconds(20));
    }
    return std::nullopt;
}

std::optional<int> Successor::terminate(milliseconds timeout) {
    if (pid_ <= 0) return std::nullopt;
    ::kill(pid_, SIGTERM);
    return waitExit(timeout);
}

pid_t newPidOf(const std::string& out) {
    const std::string marker = "upgraded: PID ";
    auto at = out.find(marker);
    if (at == std::string::npos) return -1;
    return static_cast<pid_t>(std::stol(out.substr(at + marker.size())));
}

void LoadCounts::problem(const std::string& text) {
    std::lock_guard lock(mutex);
    if (firstProblem.empty()) firstProblem = text;
}

namespace {
// One short connection: connect, 1 KiB each way through the echo upstream, close.
void oneConnection(uint16_t port, std::uint64_t id, LoadCounts& counts) {
    int error = 0;
    UniqueFd fd = connectTcp(port, error, milliseconds(3000));
    if (!fd) {
        (error == ECONNREFUSED ? counts.refused : counts.otherFailures).fetch_add(1);
        counts.problem("connection " + std::to_string(id) + ": connect: " + std::strerror(error));
        return;
    }
    std::vector<std::uint8_t> sent(1024), echoed(1024);
    for (std::size_t i = 0; i < sent.size(); ++i)
        sent[i] = static_cast<std::uint8_t>((id * 131 + i * 7) & 0xff);
    auto deadline = deadlineIn(milliseconds(5000));
    if (!sendAll(fd.get(), sent.data(), sent.size(), deadline, error) ||
        !recvExact(fd.get(), echoed.data(), echoed.size(), deadline, error)) {
        (error == ECONNRESET || error == EPIPE ? counts.reset : counts.otherFailures).fetch_add(1);
        counts.problem("connection " + std::to_string(id) + ": " + std::strerror(error));
        return;
    }
    if (echoed != sent) {
        counts.mismatched.fetch_add(1);
        counts.problem("connection " + std::to_string(id) + ": echoed bytes differ");
        return;
    }
    counts.done.fetch_add(1);
}
}  // namespace

void runLoad(uint16_t port, unsigned rate, milliseconds duration, LoadCounts& counts) {
    constexpr unsigned kThreads = 6;
    const auto start = std::chrono::steady_clock::now();
    const std::uint64_t total = rate * static_cast<std::uint64_t>(duration.count()) / 1000;
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            for (std::uint64_t i = t; i < total; i += kThreads) {
                std::this_thread::sleep_until(start +
                                              std::chrono::microseconds(i * 1'000'000 / rate));
                oneConnection(port, i, counts);
            }
        });
    }
    for (auto& thread : threads) thread.join();
}

}  // namespace splicegate::test
