// `bulk`: N streams for T seconds. Direction "down" reads from a `server --mode source` and
// counts the bytes the client actually received inside the measuring window. Direction "up"
// writes to a `server --mode sink`, counts bytes sent inside the window, and afterwards
// half-closes every stream and checks the sink's byte count against the total sent, so a relay
// that loses bytes is reported as a failure. With --first-bytes FILE (a TLS ClientHello) every
// stream sends the file's bytes first, before the window: what a relay routing by SNI reads.
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <cerrno>
#include <iostream>
#include <memory>
#include <thread>

#include "tools/bench/BenchUtil.h"
#include "tools/bench/Commands.h"

namespace splicegate::bench {
namespace {

struct Stream {
    UniqueFd fd;
    std::atomic<std::uint64_t> bytes{0};  // total moved on this stream (read by main too)
    std::uint64_t bytesAtWindowStart = 0;
    bool alive = true;
};

struct alignas(64) ThreadCounter {
    std::atomic<std::uint64_t> bytes{0};
    std::atomic<int> deadStreams{0};
};

// `bytesPerSecond` > 0 paces this thread: it moves no more than that on average since it began.
void streamLoop(std::vector<Stream*> streams, bool down, std::size_t chunk, double bytesPerSecond,
                ThreadCounter& counter, const std::atomic<bool>& stop) {
    const auto began = Clock::now();
    std::uint64_t moved = 0;
    UniqueFd epoll(checkSys(epoll_create1(EPOLL_CLOEXEC), "epoll_create1"));
    for (Stream* s : streams) {
        epoll_event ev{};
        ev.events = (down ? EPOLLIN : EPOLLOUT) | EPOLLRDHUP;
        ev.data.ptr = s;
        checkSys(epoll_ctl(epoll.get(), EPOLL_CTL_ADD, s->fd.get(), &ev), "epoll_ctl");
    }
    std::string buffer(chunk, 'b');
    epoll_event events[64];
    while (!stop.load(std::memory_order_relaxed) && !stopRequested()) {
        if (bytesPerSecond > 0 &&
            static_cast<double>(moved) > bytesPerSecond * secondsBetween(began, Clock::now())) {
            std::this_thread::sleep_for(std::chrono::microseconds(500));
            continue;
        }
        int n = epoll_wait(epoll.get(), events, 64, 20);
        for (int i = 0; i < n; ++i) {
            auto* s = static_cast<Stream*>(events[i].data.ptr);
            if (!s->alive) continue;
            for (int op = 0; op < 16; ++op) {
                ssize_t r = down ? recv(s->fd.get(), buffer.data(), buffer.size(), 0)
                                 : send(s->fd.get(), buffer.data(), buffer.size(), MSG_NOSIGNAL);
                if (r > 0) {
                    moved += static_cast<std::uint64_t>(r);
                    s->bytes.fetch_add(static_cast<std::uint64_t>(r), std::memory_order_relaxed);
                    counter.bytes.fetch_add(static_cast<std::uint64_t>(r),
                                            std::memory_order_relaxed);
                    continue;
                }
                if (r < 0 && (errno == EAGAIN || errno == EINTR)) break;
                s->alive = false;  // EOF or error before the end: the relay dropped the stream
                counter.deadStreams.fetch_add(1);
                epoll_ctl(epoll.get(), EPOLL_CTL_DEL, s->fd.get(), nullptr);
                break;
            }
        }
    }
}

// After the window: half-close every stream and read the sink's 8-byte count (up direction).
bool confirmUp(std::vector<std::unique_ptr<Stream>>& streams, double timeoutSeconds,
               std::uint64_t& confirmed) {
    confirmed = 0;
    bool allOk = true;
    auto deadline = Clock::now() + secondsToDuration(timeoutSeconds);
    for (auto& s : streams)
        if (s->alive) shutdown(s->fd.get(), SHUT_WR);
    for (auto& s : streams) {
        if (!s->alive) {
            allOk = false;
            continue;
        }
        unsigned char count[8];
        std::size_t got = 0;
        while (got < sizeof count) {
            int left = static_cast<int>(
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now())
                    .count());
            if (left <= 0) break;
            pollfd p{s->fd.get(), POLLIN, 0};
            if (poll(&p, 1, left) <= 0) break;
            ssize_t r = recv(s->fd.get(), count + got, sizeof count - got, 0);
            if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
            if (r <= 0) break;
            got += static_cast<std::size_t>(r);
        }
        if (got < sizeof count) {
            std::cerr << "bulk: no byte count from the sink on a stream (relay lost the "
                         "half-close or the reply)"
                      << std::endl;
            allOk = false;
            continue;
        }
        std::uint64_t value = 0;
        for (int b = 7; b >= 0; --b) value = (value << 8) | count[b];
        confirmed += value;
        if (value != s->bytes.load()) {
            std::cerr << "bulk: stream sent " << s->bytes.load() << " bytes but the sink received "
                      << value << std::endl;
            allOk = false;
        }
    }
    return allOk;
}

}  // namespace

int runBulk(int argc, char** argv) {
    Options opts("bulk",
                 "N TCP streams for T seconds; reports Gbit/s of bytes moved end to end inside "
                 "the window\n(after --warmup). down: read from `server --mode source`; up: write "
                 "to `server --mode sink`\nand verify the sink's byte count at the end.",
                 {
                     {"connect", "ADDR:PORT", "", "relay or server address"},
                     {"streams", "N", "1", "parallel TCP streams"},
                     {"duration", "SECONDS", "5", "measuring window"},
                     {"warmup", "SECONDS", "0.5", "transfer before the window opens (not counted)"},
                     {"direction", "DIR", "down", "down (server to client) or up"},
                     {"threads", "N", "0", "client threads; 0 = min(streams, 2)"},
                     {"chunk", "BYTES", "262144", "read/write size"},
                     {"first-bytes", "FILE", "",
                      "each stream sends this file's bytes (a TLS ClientHello) first", true},
                     {"rate-mbps", "MBIT/S", "0",
                      "pace all streams together to this rate; 0 = as fast as possible"},
                     {"watch-pid", "PID", "0", "relay process: report its CPU over the window"},
                     {"also-watch-pid", "PID", "0",
                      "a companion process (a capture) whose CPU counts with the relay's"},
                 },
                 argc, argv, 2);
    auto address = opts.address("connect");
    auto streamCount = static_cast<std::size_t>(opts.integer("streams", 1, 4096));
    double duration = opts.number("duration", 0.1, 3600);
    double warmup = opts.number("warmup", 0, 600);
    std::string direction = opts.str("direction");
    if (direction != "down" && direction != "up")
        throw UsageError("bulk: --direction wants down or up, got '" + direction + "'");
    bool down = direction == "down";
    auto threadCount = static_cast<std::size_t>(opts.integer("threads", 0, 64));
    if (threadCount == 0) threadCount = std::min<std::size_t>(streamCount, 2);
    threadCount = std::min(threadCount, streamCount);
    auto chunk = static_cast<std::size_t>(opts.integer("chunk", 64, 16 << 20));
    const double bytesPerSecond =
        opts.number("rate-mbps", 0, 1e6) * 1e6 / 8 / static_cast<double>(threadCount);
    auto pid = static_cast<pid_t>(opts.integer("watch-pid", 0, 1 << 30));
    auto companion = static_cast<pid_t>(opts.integer("also-watch-pid", 0, 1 << 30));
    const std::string firstBytes = opts.fileBytes("first-bytes");

    installSignalHandlers();
    requireFds(streamCount + 64, "bulk");
    std::vector<std::unique_ptr<Stream>> streams;
    for (std::size_t i = 0; i < streamCount; ++i) {
        auto s = std::make_unique<Stream>();
        s->fd = connectWithTimeout(address, 10);
        if (!firstBytes.empty()) {
            // A fresh socket's send buffer takes a ClientHello whole (the socket is non-blocking).
            ssize_t w = send(s->fd.get(), firstBytes.data(), firstBytes.size(), MSG_NOSIGNAL);
            if (w != static_cast<ssize_t>(firstBytes.size()))
                throw std::runtime_error("bulk: sending --first-bytes failed");
            // Up: the sink counts them with the stream's bytes (before the window opens).
            if (!down) s->bytes.fetch_add(firstBytes.size());
        }
        streams.push_back(std::move(s));
    }
    std::vector<ThreadCounter> counters(threadCount);
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (std::size_t t = 0; t < threadCount; ++t) {
        std::vector<Stream*> mine;
        for (std::size_t i = t; i < streamCount; i += threadCount) mine.push_back(streams[i].get());
        threads.emplace_back([&, t, mine] {
            try {
                streamLoop(mine, down, chunk, bytesPerSecond, counters[t], stop);
            } catch (const std::exception& e) {
                std::cerr << "bulk: " << e.what() << std::endl;
                failures.fetch_add(1);
            }
        });
    }
    auto total = [&] {
        std::uint64_t sum = 0;
        for (auto& c : counters) sum += c.bytes.load(std::memory_order_relaxed);
        return sum;
    };
    auto start = Clock::now();
    sleepUntil(start + secondsToDuration(warmup));
    auto windowStart = Clock::now();
    std::uint64_t bytesStart = total();
    ProcSample cpuStart = sampleRelayCpu(pid, companion);
    for (auto& s : streams) s->bytesAtWindowStart = s->bytes.load(std::memory_order_relaxed);
    sleepUntil(windowStart + secondsToDuration(duration));
    std::uint64_t bytesEnd = total();
    ProcSample cpuEnd = sampleRelayCpu(pid, companion);
    // A stream that moved nothing in the whole window is stuck in the relay.
    int stalled = 0;
    for (auto& s : streams)
        if (s->bytes.load(std::memory_order_relaxed) == s->bytesAtWindowStart) ++stalled;
    auto windowEnd = Clock::now();
    stop.store(true);
    for (auto& t : threads) t.join();
    if (stopRequested()) {
        std::cerr << "bulk: interrupted" << std::endl;
        return 1;
    }

    int dead = 0;
    for (auto& c : counters) dead += c.deadStreams.load();
    bool ok = failures.load() == 0 && dead == 0 && stalled == 0;
    std::uint64_t confirmed = 0;
    if (!down && ok) ok = confirmUp(streams, 15, confirmed);

    double seconds = secondsBetween(windowStart, windowEnd);
    double bytes = static_cast<double>(bytesEnd - bytesStart);
    double gib = bytes / (1024.0 * 1024.0 * 1024.0);
    ResultLine line("bulk");
    line.add("direction", direction).add("streams", streamCount).addFixed("seconds", seconds, 3);
    line.add("bytes", bytesEnd - bytesStart).addFixed("gbps", bytes * 8 / seconds / 1e9, 3);
    line.add("dead_streams", dead).add("stalled_streams", stalled);
    if (!down) line.add("confirmed_bytes", confirmed);
    if (cpuStart.ok && cpuEnd.ok) {
        double cpu = cpuEnd.cpuSeconds - cpuStart.cpuSeconds;
        line.addFixed("relay_cpu_s", cpu, 3);
        line.addFixed("relay_cpu_pct", 100 * cpu / seconds, 1);
        line.addFixed("relay_cpu_s_per_gib", gib > 0 ? cpu / gib : 0, 4);
    }
    line.add("ok", ok ? 1 : 0);
    line.print();
    if (!ok)
        std::cerr << "bulk: " << dead << " stream(s) ended early or failed, " << stalled
                  << " moved nothing in the window" << std::endl;
    return ok ? 0 : 1;
}

}  // namespace splicegate::bench
