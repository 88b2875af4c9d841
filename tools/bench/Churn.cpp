// `churn`: new connections per second. Each of K slots loops: non-blocking connect, send SIZE
// bytes, receive the SIZE-byte echo, close (the client closes first, as a typical client does).
// With --first-bytes FILE (a TLS ClientHello), the file's bytes go first, in the same send, and
// are echoed too: what a relay that routes by SNI must read before it can connect.
// A slot stuck longer than --timeout-ms is aborted and counted as a timeout.
#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <iostream>
#include <thread>

#include "tools/bench/BenchUtil.h"
#include "tools/bench/Commands.h"

namespace splicegate::bench {
namespace {

enum class SlotState { Idle, Connecting, Receiving };

struct Slot {
    UniqueFd fd;
    SlotState state = SlotState::Idle;
    std::size_t received = 0;
    Clock::time_point startedAt;
    Clock::time_point retryAt;  // after an error, wait a little before the next attempt
};

struct ChurnThreadResult {
    std::uint64_t completed = 0;  // inside the window
    std::uint64_t connectErrors = 0, ioErrors = 0, earlyEof = 0, timeouts = 0;
    std::vector<std::uint32_t> latenciesNs;
};

void churnLoop(std::size_t slotCount, const Endpoint& address, const std::string& firstBytes,
               std::size_t payloadSize, Clock::time_point windowStart, Clock::time_point windowEnd,
               Clock::duration timeout, ChurnThreadResult& result) {
    UniqueFd epoll(checkSys(epoll_create1(EPOLL_CLOEXEC), "epoll_create1"));
    std::vector<Slot> slots(slotCount);
    const std::string payload = firstBytes + std::string(payloadSize, 'c');
    const std::size_t size = payload.size();
    std::string buffer(std::max<std::size_t>(size, 4096), '\0');
    result.latenciesNs.reserve(1 << 18);
    const auto errorBackoff = std::chrono::milliseconds(10);

    auto abort = [&](Slot& s, std::uint64_t& counter) {
        ++counter;
        s.fd.reset();
        s.state = SlotState::Idle;
        s.retryAt = Clock::now() + errorBackoff;
    };
    auto start = [&](Slot& s) {
        int err = 0;
        s.fd = startConnect(address, err);
        s.startedAt = Clock::now();
        if (!s.fd) return abort(s, result.connectErrors);
        epoll_event ev{};
        ev.events = EPOLLOUT;
        ev.data.ptr = &s;
        if (epoll_ctl(epoll.get(), EPOLL_CTL_ADD, s.fd.get(), &ev) < 0)
            return abort(s, result.connectErrors);
        s.state = SlotState::Connecting;
        s.received = 0;
    };

    epoll_event events[256];
    auto lastScan = Clock::now();
    while (!stopRequested()) {
        auto now = Clock::now();
        if (now >= windowEnd) break;
        for (Slot& s : slots)
            if (s.state == SlotState::Idle && now >= s.retryAt) start(s);
        int n = epoll_wait(epoll.get(), events, 256, 5);
        for (int i = 0; i < n; ++i) {
            Slot& s = *static_cast<Slot*>(events[i].data.ptr);
            if (s.state == SlotState::Connecting) {
                if (int err = socketError(s.fd.get()); err != 0) {
                    abort(s, result.connectErrors);
                    continue;
                }
                ssize_t w = send(s.fd.get(), payload.data(), size, MSG_NOSIGNAL);
                if (w != static_cast<ssize_t>(size)) {  // SIZE fits a fresh socket buffer
                    abort(s, result.ioErrors);
                    continue;
                }
                epoll_event ev{};
                ev.events = EPOLLIN | EPOLLRDHUP;
                ev.data.ptr = &s;
                if (epoll_ctl(epoll.get(), EPOLL_CTL_MOD, s.fd.get(), &ev) < 0) {
                    abort(s, result.ioErrors);
                    continue;
                }
                s.state = SlotState::Receiving;
            } else if (s.state == SlotState::Receiving) {
                ssize_t r = recv(s.fd.get(), buffer.data(), buffer.size(), 0);
                if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
                if (r < 0) {
                    abort(s, result.ioErrors);
                    continue;
                }
                if (r == 0) {
                    abort(s, result.earlyEof);
                    continue;
                }
                s.received += static_cast<std::size_t>(r);
                if (s.received < size) continue;
                auto done = Clock::now();
                s.fd.reset();  // close: leaves the epoll set
                s.state = SlotState::Idle;
                s.retryAt = done;
                if (done >= windowStart && done < windowEnd) {
                    ++result.completed;
                    auto ns =
                        std::chrono::duration_cast<std::chrono::nanoseconds>(done - s.startedAt)
                            .count();
                    result.latenciesNs.push_back(
                        static_cast<std::uint32_t>(std::min<long long>(ns, 0xffffffffLL)));
                }
                start(s);  // right away, before the next epoll_wait
            }
        }
        now = Clock::now();
        if (now - lastScan > std::chrono::milliseconds(100)) {
            lastScan = now;
            for (Slot& s : slots)
                if (s.state != SlotState::Idle && now - s.startedAt > timeout)
                    abort(s, result.timeouts);
        }
    }
}

}  // namespace

int runChurn(int argc, char** argv) {
    Options opts("churn",
                 "New connections per second: each in-flight slot connects, sends SIZE bytes, "
                 "receives the\nSIZE-byte echo from `server --mode echo`, closes, and starts "
                 "over.",
                 {
                     {"connect", "ADDR:PORT", "", "relay or server address"},
                     {"concurrency", "N", "32", "connections in flight"},
                     {"size", "BYTES", "1024", "bytes sent and echoed per connection"},
                     {"first-bytes", "FILE", "",
                      "send this file's bytes (a TLS ClientHello) before the SIZE bytes; echoed "
                      "too", true},
                     {"threads", "N", "2", "client threads"},
                     {"duration", "SECONDS", "5", "measuring window"},
                     {"warmup", "SECONDS", "0.5", "churn before the window opens"},
                     {"timeout-ms", "MS", "2000", "abort a connection stuck this long"},
                     {"watch-pid", "PID", "0", "relay process: report its CPU over the window"},
                     {"also-watch-pid", "PID", "0",
                      "a companion process (a capture) whose CPU counts with the relay's"},
                 },
                 argc, argv, 2);
    auto address = opts.address("connect");
    auto concurrency = static_cast<std::size_t>(opts.integer("concurrency", 1, 4096));
    auto size = static_cast<std::size_t>(opts.integer("size", 1, 65536));
    const std::string firstBytes = opts.fileBytes("first-bytes");
    if (firstBytes.size() > 16384) throw UsageError("churn: --first-bytes: over 16 KiB");
    auto threadCount = static_cast<std::size_t>(opts.integer("threads", 1, 64));
    threadCount = std::min(threadCount, concurrency);
    double duration = opts.number("duration", 0.1, 3600);
    double warmup = opts.number("warmup", 0, 600);
    auto timeout = std::chrono::milliseconds(opts.integer("timeout-ms", 10, 600000));
    auto pid = static_cast<pid_t>(opts.integer("watch-pid", 0, 1 << 30));
    auto companion = static_cast<pid_t>(opts.integer("also-watch-pid", 0, 1 << 30));

    installSignalHandlers();
    requireFds(concurrency + 64, "churn");
    auto windowStart = Clock::now() + secondsToDuration(warmup);
    auto windowEnd = windowStart + secondsToDuration(duration);
    std::vector<ChurnThreadResult> results(threadCount);
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (std::size_t t = 0; t < threadCount; ++t) {
        std::size_t slots = concurrency / threadCount + (t < concurrency % threadCount ? 1 : 0);
        threads.emplace_back([&, t, slots] {
            try {
                churnLoop(slots, address, firstBytes, size, windowStart, windowEnd, timeout,
                          results[t]);
            } catch (const std::exception& e) {
                std::cerr << "churn: " << e.what() << std::endl;
                failures.fetch_add(1);
            }
        });
    }
    sleepUntil(windowStart);
    ProcSample cpuStart = sampleRelayCpu(pid, companion);
    sleepUntil(windowEnd);
    ProcSample cpuEnd = sampleRelayCpu(pid, companion);
    for (auto& t : threads) t.join();
    if (stopRequested()) {
        std::cerr << "churn: interrupted" << std::endl;
        return 1;
    }

    ChurnThreadResult sum;
    std::vector<std::uint32_t> all;
    for (auto& r : results) {
        sum.completed += r.completed;
        sum.connectErrors += r.connectErrors;
        sum.ioErrors += r.ioErrors;
        sum.earlyEof += r.earlyEof;
        sum.timeouts += r.timeouts;
        all.insert(all.end(), r.latenciesNs.begin(), r.latenciesNs.end());
    }
    std::sort(all.begin(), all.end());
    std::uint64_t errors = sum.connectErrors + sum.ioErrors + sum.earlyEof + sum.timeouts;
    double seconds = secondsBetween(windowStart, windowEnd);
    // A healthy relay makes no errors here; allow 1 % before calling the measurement failed.
    bool ok = failures.load() == 0 && sum.completed > 0 && errors * 100 <= sum.completed;
    ResultLine line("churn");
    line.add("concurrency", concurrency).add("size", size);
    if (!firstBytes.empty()) line.add("first_bytes", firstBytes.size());
    line.addFixed("seconds", seconds, 3);
    line.add("connections", sum.completed);
    line.addFixed("cps", static_cast<double>(sum.completed) / seconds, 0);
    line.addFixed("p50_us", percentile(all, 0.50) / 1000, 1);
    line.addFixed("p99_us", percentile(all, 0.99) / 1000, 1);
    line.add("errors", errors).add("connect_errors", sum.connectErrors);
    line.add("io_errors", sum.ioErrors).add("early_eof", sum.earlyEof);
    line.add("timeouts", sum.timeouts);
    if (cpuStart.ok && cpuEnd.ok && sum.completed > 0) {
        double cpu = cpuEnd.cpuSeconds - cpuStart.cpuSeconds;
        line.addFixed("relay_cpu_pct", 100 * cpu / seconds, 1);
        line.addFixed("relay_cpu_us_per_conn", cpu * 1e6 / static_cast<double>(sum.completed), 2);
    }
    line.add("ok", ok ? 1 : 0);
    line.print();
    return ok ? 0 : 1;
}

}  // namespace splicegate::bench
