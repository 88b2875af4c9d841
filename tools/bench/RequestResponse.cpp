// `rr`: C connections to an echo server, each with one SIZE-byte request in flight; a request is
// complete when its SIZE-byte echo has arrived. Reports completed requests per second inside the
// window and the latency distribution (send of the request to arrival of the last response byte).
// With --rate, each connection sends on a fixed schedule instead of right after each reply (an
// offered load, not a saturating one), and a request's latency counts from when it was due: a
// request sent late because the previous reply was late counts its wait too.
#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <iostream>
#include <memory>
#include <queue>
#include <thread>

#include "tools/bench/BenchUtil.h"
#include "tools/bench/Commands.h"

namespace splicegate::bench {
namespace {

constexpr std::size_t kMaxSamplesPerThread = 64u << 20;

struct RrConn {
    UniqueFd fd;
    std::size_t received = 0;
    Clock::time_point sentAt;   // or, paced, when the request was due
    bool alive = true;
};

struct RrThreadResult {
    std::uint64_t completed = 0;  // inside the window
    std::uint64_t errors = 0;
    std::uint64_t stalled = 0;  // waiting over 1 s for a response when the window closed
    std::vector<std::uint32_t> latenciesNs;
};

// The connections whose next request is not due yet, soonest first.
using Due = std::pair<Clock::time_point, RrConn*>;
using DueQueue = std::priority_queue<Due, std::vector<Due>, std::greater<>>;

timespec untilOrAtMost(Clock::time_point when, Clock::time_point now, std::chrono::milliseconds cap) {
    auto wait = std::clamp<Clock::duration>(when - now, Clock::duration::zero(), cap);
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
    return timespec{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
}

// period: each connection's time between requests (--rate); zero sends on each reply.
void rrLoop(std::vector<RrConn*> conns, std::size_t size, Clock::duration period,
            Clock::time_point windowStart, Clock::time_point windowEnd, RrThreadResult& result) {
    UniqueFd epoll(checkSys(epoll_create1(EPOLL_CLOEXEC), "epoll_create1"));
    std::string request(size, 'r');
    std::string buffer(std::max<std::size_t>(size, 4096), '\0');
    result.latenciesNs.reserve(1 << 20);
    auto fail = [&](RrConn* c) {
        c->alive = false;
        ++result.errors;
        epoll_ctl(epoll.get(), EPOLL_CTL_DEL, c->fd.get(), nullptr);
    };
    DueQueue waiting;
    auto sendRequest = [&](RrConn* c, Clock::time_point due) {
        c->received = 0;
        c->sentAt = due;
        // SIZE bytes always fit an empty socket buffer: one request is in flight per connection.
        ssize_t n = send(c->fd.get(), request.data(), size, MSG_NOSIGNAL);
        if (n != static_cast<ssize_t>(size)) fail(c);
    };
    for (RrConn* c : conns) {
        epoll_event ev{};
        ev.events = EPOLLIN | EPOLLRDHUP;
        ev.data.ptr = c;
        checkSys(epoll_ctl(epoll.get(), EPOLL_CTL_ADD, c->fd.get(), &ev), "epoll_ctl");
    }
    auto first = Clock::now();
    for (std::size_t i = 0; i < conns.size(); ++i) {
        if (period == Clock::duration::zero())
            sendRequest(conns[i], first);
        else  // spread over one period, not all at once
            waiting.emplace(first + period * static_cast<long>(i) / static_cast<long>(conns.size()), conns[i]);
    }
    epoll_event events[256];
    while (!stopRequested()) {
        auto now = Clock::now();
        if (now >= windowEnd) break;
        while (!waiting.empty() && waiting.top().first <= now) {
            auto [due, c] = waiting.top();
            waiting.pop();
            if (c->alive) sendRequest(c, due);
        }
        auto next = waiting.empty() ? now + std::chrono::milliseconds(10) : waiting.top().first;
        timespec timeout = untilOrAtMost(next, now, std::chrono::milliseconds(10));
        int n = epoll_pwait2(epoll.get(), events, 256, &timeout, nullptr);
        for (int i = 0; i < n; ++i) {
            auto* c = static_cast<RrConn*>(events[i].data.ptr);
            if (!c->alive) continue;
            ssize_t r = recv(c->fd.get(), buffer.data(), size - c->received, 0);
            if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
            if (r <= 0) {
                fail(c);
                continue;
            }
            c->received += static_cast<std::size_t>(r);
            if (c->received < size) continue;
            auto done = Clock::now();
            if (done >= windowStart && done < windowEnd) {
                ++result.completed;
                if (result.latenciesNs.size() < kMaxSamplesPerThread) {
                    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(done - c->sentAt)
                                  .count();
                    result.latenciesNs.push_back(
                        static_cast<std::uint32_t>(std::min<long long>(ns, 0xffffffffLL)));
                }
            }
            if (period == Clock::duration::zero())
                sendRequest(c, Clock::now());
            else
                waiting.emplace(c->sentAt + period, c);
        }
    }
    // A relay that loses a wake-up leaves a connection waiting forever; count those (a paced
    // connection between requests has its whole reply).
    auto end = Clock::now();
    for (RrConn* c : conns)
        if (c->alive && c->received < size && end - c->sentAt > std::chrono::seconds(1)) ++result.stalled;
}

}  // namespace

int runRequestResponse(int argc, char** argv) {
    Options opts("rr",
                 "Request/response ping-pong: C connections to `server --mode echo`, one "
                 "SIZE-byte request in\nflight on each. Reports req/s and latency percentiles "
                 "(microseconds) inside the window.",
                 {
                     {"connect", "ADDR:PORT", "", "relay or server address"},
                     {"conns", "N", "64", "connections"},
                     {"size", "BYTES", "64", "request and response size"},
                     {"threads", "N", "2", "client threads (epoll each)"},
                     {"duration", "SECONDS", "5", "measuring window"},
                     {"warmup", "SECONDS", "0.5", "ping-pong before the window opens"},
                     {"watch-pid", "PID", "0", "relay process: report its CPU over the window"},
                     {"rate", "REQ/S", "0", "offered requests per second in all, on a fixed "
                                             "schedule (0: each connection sends on each reply)"},
                 },
                 argc, argv, 2);
    auto address = opts.address("connect");
    auto connCount = static_cast<std::size_t>(opts.integer("conns", 1, 16384));
    auto size = static_cast<std::size_t>(opts.integer("size", 1, 65536));
    auto threadCount = static_cast<std::size_t>(opts.integer("threads", 1, 64));
    threadCount = std::min(threadCount, connCount);
    double duration = opts.number("duration", 0.1, 3600);
    double warmup = opts.number("warmup", 0, 600);
    auto pid = static_cast<pid_t>(opts.integer("watch-pid", 0, 1 << 30));
    double rate = opts.number("rate", 0, 1e8);
    auto period = rate > 0 ? std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(static_cast<double>(connCount) / rate))
                           : Clock::duration::zero();

    installSignalHandlers();
    requireFds(connCount + 64, "rr");
    std::vector<std::unique_ptr<RrConn>> conns;
    for (std::size_t i = 0; i < connCount; ++i) {
        auto c = std::make_unique<RrConn>();
        c->fd = connectWithTimeout(address, 10);
        setNoDelay(c->fd.get());
        conns.push_back(std::move(c));
    }
    auto start = Clock::now();
    auto windowStart = start + secondsToDuration(warmup);
    auto windowEnd = windowStart + secondsToDuration(duration);
    std::vector<RrThreadResult> results(threadCount);
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (std::size_t t = 0; t < threadCount; ++t) {
        std::vector<RrConn*> mine;
        for (std::size_t i = t; i < connCount; i += threadCount) mine.push_back(conns[i].get());
        threads.emplace_back([&, t, mine] {
            try {
                rrLoop(mine, size, period, windowStart, windowEnd, results[t]);
            } catch (const std::exception& e) {
                std::cerr << "rr: " << e.what() << std::endl;
                failures.fetch_add(1);
            }
        });
    }
    sleepUntil(windowStart);
    ProcSample cpuStart = sampleProcess(pid, false);
    sleepUntil(windowEnd);
    ProcSample cpuEnd = sampleProcess(pid, false);
    for (auto& t : threads) t.join();
    if (stopRequested()) {
        std::cerr << "rr: interrupted" << std::endl;
        return 1;
    }

    std::uint64_t completed = 0, errors = 0, stalled = 0;
    std::vector<std::uint32_t> all;
    for (auto& r : results) {
        completed += r.completed;
        errors += r.errors;
        stalled += r.stalled;
        all.insert(all.end(), r.latenciesNs.begin(), r.latenciesNs.end());
    }
    std::sort(all.begin(), all.end());
    double seconds = secondsBetween(windowStart, windowEnd);
    bool ok = failures.load() == 0 && errors == 0 && stalled == 0 && completed > 0;
    ResultLine line("rr");
    line.add("conns", connCount).add("size", size).addFixed("rate", rate, 0).addFixed("seconds", seconds, 3);
    line.add("requests", completed).addFixed("rps", static_cast<double>(completed) / seconds, 0);
    line.addFixed("p50_us", percentile(all, 0.50) / 1000, 1);
    line.addFixed("p99_us", percentile(all, 0.99) / 1000, 1);
    line.addFixed("p999_us", percentile(all, 0.999) / 1000, 1);
    line.addFixed("max_us", all.empty() ? 0 : all.back() / 1000.0, 1);
    line.add("errors", errors).add("stalled", stalled);
    if (cpuStart.ok && cpuEnd.ok && completed > 0) {
        double cpu = cpuEnd.cpuSeconds - cpuStart.cpuSeconds;
        line.addFixed("relay_cpu_pct", 100 * cpu / seconds, 1);
        line.addFixed("relay_cpu_us_per_req", cpu * 1e6 / static_cast<double>(completed), 2);
    }
    line.add("ok", ok ? 1 : 0);
    line.print();
    if (!ok)
        std::cerr << "rr: " << errors << " connection(s) failed, " << stalled << " stalled over 1 s"
                  << std::endl;
    return ok ? 0 : 1;
}

}  // namespace splicegate::bench
