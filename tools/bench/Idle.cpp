// `idle`: opens N connections (at most --concurrency connects in flight), proves each one is
// relayed end to end with a 1-byte echo, then holds them all idle for --hold seconds while
// sampling the relay process (RSS, threads, fds, pipes) from /proc. Reports the state before the
// first connection and while all are held, so RSS per idle connection can be stated.
#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <iostream>

#include "tools/bench/BenchUtil.h"
#include "tools/bench/Commands.h"

namespace splicegate::bench {
namespace {

enum class IdleState { Connecting, WaitingEcho, Held, Failed };

struct IdleConn {
    UniqueFd fd;
    IdleState state = IdleState::Connecting;
};

}  // namespace

int runIdle(int argc, char** argv) {
    Options opts("idle",
                 "Opens N connections through the relay to `server --mode echo`, checks each with "
                 "a 1-byte echo,\nholds them idle, and samples the relay process (--watch-pid) "
                 "before and while they are held.",
                 {
                     {"connect", "ADDR:PORT", "", "relay or server address"},
                     {"conns", "N", "8000", "connections to hold"},
                     {"concurrency", "N", "256", "connects in flight while opening"},
                     {"hold", "SECONDS", "5", "how long to hold them once all are open"},
                     {"settle", "SECONDS", "1", "wait after opening before the first sample"},
                     {"open-timeout", "SECONDS", "60", "give up opening after this long"},
                     {"watch-pid", "PID", "0", "relay process to sample"},
                 },
                 argc, argv, 2);
    auto address = opts.address("connect");
    auto connCount = static_cast<std::size_t>(opts.integer("conns", 1, 1 << 20));
    auto concurrency = static_cast<std::size_t>(opts.integer("concurrency", 1, 65536));
    double hold = opts.number("hold", 0, 3600);
    double settle = opts.number("settle", 0, 600);
    double openTimeout = opts.number("open-timeout", 1, 3600);
    auto pid = static_cast<pid_t>(opts.integer("watch-pid", 0, 1 << 30));

    installSignalHandlers();
    requireFds(connCount + 64, "idle (client side)");
    ProcSample before = sampleProcess(pid, true);

    UniqueFd epoll(checkSys(epoll_create1(EPOLL_CLOEXEC), "epoll_create1"));
    std::vector<IdleConn> conns(connCount);
    std::size_t next = 0, inFlight = 0, held = 0, failed = 0;
    auto fail = [&](IdleConn& c) {
        c.state = IdleState::Failed;
        c.fd.reset();
        ++failed;
        --inFlight;
    };
    auto openStart = Clock::now();
    auto openDeadline = openStart + secondsToDuration(openTimeout);
    epoll_event events[512];
    char byte = 'i';
    while (held + failed < connCount && !stopRequested() && Clock::now() < openDeadline) {
        while (inFlight < concurrency && next < connCount) {
            IdleConn& c = conns[next++];
            int err = 0;
            c.fd = startConnect(address, err);
            ++inFlight;
            if (!c.fd) {
                fail(c);
                continue;
            }
            epoll_event ev{};
            ev.events = EPOLLOUT;
            ev.data.ptr = &c;
            if (epoll_ctl(epoll.get(), EPOLL_CTL_ADD, c.fd.get(), &ev) < 0) fail(c);
        }
        int n = epoll_wait(epoll.get(), events, 512, 20);
        for (int i = 0; i < n; ++i) {
            IdleConn& c = *static_cast<IdleConn*>(events[i].data.ptr);
            if (c.state == IdleState::Connecting) {
                if (socketError(c.fd.get()) != 0 || send(c.fd.get(), &byte, 1, MSG_NOSIGNAL) != 1) {
                    fail(c);
                    continue;
                }
                epoll_event ev{};
                ev.events = EPOLLIN | EPOLLRDHUP;
                ev.data.ptr = &c;
                if (epoll_ctl(epoll.get(), EPOLL_CTL_MOD, c.fd.get(), &ev) < 0) {
                    fail(c);
                    continue;
                }
                c.state = IdleState::WaitingEcho;
            } else if (c.state == IdleState::WaitingEcho) {
                char reply = 0;
                ssize_t r = recv(c.fd.get(), &reply, 1, 0);
                if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
                if (r != 1) {
                    fail(c);
                    continue;
                }
                c.state = IdleState::Held;
                ++held;
                --inFlight;
                // Still watched for EPOLLIN/EPOLLRDHUP: a relay that drops it shows up below.
            }
        }
    }
    double openSeconds = secondsBetween(openStart, Clock::now());
    std::size_t notOpened = connCount - held - failed;
    if (stopRequested()) {
        std::cerr << "idle: interrupted" << std::endl;
        return 1;
    }
    std::cerr << "idle: " << held << " connections held after " << openSeconds << " s (" << failed
              << " failed, " << notOpened << " not opened in time)" << std::endl;

    // Hold: sample every 250 ms; a held connection that becomes readable was closed or reset by
    // the relay (the echo server never sends unprompted).
    auto holdStart = Clock::now();
    sleepUntil(holdStart + secondsToDuration(std::min(settle, hold)));
    ProcSample during = sampleProcess(pid, true);
    long maxThreads = during.threads, maxRss = during.rssKib;
    std::size_t dropped = 0;
    auto holdEnd = holdStart + secondsToDuration(hold);
    while (!stopRequested() && Clock::now() < holdEnd) {
        int n = epoll_wait(epoll.get(), events, 512, 250);
        for (int i = 0; i < n; ++i) {
            IdleConn& c = *static_cast<IdleConn*>(events[i].data.ptr);
            if (c.state != IdleState::Held) continue;
            c.state = IdleState::Failed;
            c.fd.reset();
            ++dropped;
        }
        ProcSample s = sampleProcess(pid, false);
        if (s.ok) {
            maxThreads = std::max(maxThreads, s.threads);
            maxRss = std::max(maxRss, s.rssKib);
        }
    }
    ProcSample last = sampleProcess(pid, true);
    if (!last.ok) last = during;
    maxThreads = std::max(maxThreads, last.threads);
    maxRss = std::max(maxRss, last.rssKib);
    conns.clear();  // closes every connection

    ResultLine line("idle");
    line.add("conns", connCount).add("held", held - dropped).add("failed", failed);
    line.add("not_opened", notOpened).add("dropped", dropped);
    line.addFixed("open_seconds", openSeconds, 2);
    // "held" figures are sampled at the end of the hold, when whatever the opening burst
    // started (io-wq workers park for a few seconds before exiting) has had time to go away;
    // "max" is the highest seen from --settle on.
    if (before.ok && during.ok) {
        std::size_t stillHeld = held - dropped;
        line.add("rss_before_kib", before.rssKib).add("rss_held_kib", last.rssKib);
        line.add("rss_max_kib", maxRss);
        double perConn = stillHeld > 0 ? static_cast<double>(last.rssKib - before.rssKib) * 1024.0 /
                                             static_cast<double>(stillHeld)
                                       : 0;
        line.addFixed("rss_per_conn_bytes", perConn, 0);
        line.add("threads_before", before.threads).add("threads_held", last.threads);
        line.add("threads_max", maxThreads);
        line.add("fds_before", before.fds).add("fds_held", last.fds);
        line.add("pipes_before", before.pipes).add("pipes_settle", during.pipes);
        line.add("pipes_held", last.pipes);
    }
    bool ok = held == connCount && dropped == 0;
    line.add("ok", ok ? 1 : 0);
    line.print();
    return ok ? 0 : 1;
}

}  // namespace splicegate::bench
