// `server`: the upstream of every benchmark. One listening socket shared by N threads, each with
// its own epoll set (EPOLLEXCLUSIVE on the listener, so one accept wakes one thread); level-
// triggered events and a bounded number of reads/writes per event keep streams fair.
// The thread that accepts a connection hands it to the thread that owns the fewest: a thread woken
// for a burst of connects would otherwise accept them all (64 rr connections split about 49/15 or
// 59/5 as often as not), and the busy thread's connections, not the relay, would set the tail.
#include <sys/epoll.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include "tools/bench/BenchUtil.h"
#include "tools/bench/Commands.h"

namespace splicegate::bench {
namespace {

enum class Mode { Sink, Source, Echo };

constexpr int kOpsPerEvent = 16;  // reads or writes per readiness event before moving on

struct ServerConn {
    int fd = -1;
    std::uint64_t received = 0;
    std::string pending;  // echo: bytes read but not yet written back
    std::size_t pendingOffset = 0;
    bool closing = false;  // echo: EOF seen, close once pending is flushed
};

class ServerThread {
  public:
    ServerThread(int listenFd, Mode mode, std::size_t chunk, Clock::time_point deadline,
                 std::vector<ServerThread*>& all)
        : listenFd_(listenFd),
          mode_(mode),
          buffer_(chunk, 'x'),
          deadline_(deadline),
          all_(all),
          epollFd_(checkSys(epoll_create1(EPOLL_CLOEXEC), "epoll_create1")),
          epoll_(epollFd_.get()) {}

    void run() {
        epoll_event ev{};
        ev.events = EPOLLIN | EPOLLEXCLUSIVE;
        ev.data.ptr = nullptr;
        checkSys(epoll_ctl(epoll_, EPOLL_CTL_ADD, listenFd_, &ev), "epoll_ctl listener");
        epoll_event events[256];
        while (!stopRequested() && Clock::now() < deadline_) {
            int n = epoll_wait(epoll_, events, 256, 100);
            if (n < 0) {
                if (errno == EINTR) continue;
                throwErrno(errno, "epoll_wait");
            }
            // After the wait: a connection handed over is in the inbox before its fd is in
            // this epoll set, so before any of its events.
            adoptHandedOver();
            for (int i = 0; i < n; ++i) {
                if (events[i].data.ptr == nullptr) {
                    acceptSome();
                } else {
                    handle(static_cast<ServerConn*>(events[i].data.ptr), events[i].events);
                }
            }
        }
        adoptHandedOver();
        for (ServerConn* conn : conns_) {
            ::close(conn->fd);
            delete conn;
        }
        conns_.clear();
    }

  private:
    void acceptSome() {
        for (int i = 0; i < 256; ++i) {
            int fd = accept4(listenFd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0) return;  // EAGAIN (another thread took it), EMFILE, ...: try next event
            if (mode_ == Mode::Echo) setNoDelay(fd);
            auto* conn = new ServerConn;
            conn->fd = fd;
            leastLoaded().handOver(conn);
        }
    }

    ServerThread& leastLoaded() {
        ServerThread* best = this;
        for (ServerThread* thread : all_)
            if (thread->owned_.load() < best->owned_.load()) best = thread;
        return *best;
    }

    // Called by any thread; epoll_ctl on another thread's set is safe.
    void handOver(ServerConn* conn) {
        owned_.fetch_add(1);
        {
            std::lock_guard lock(inboxMutex_);
            inbox_.push_back(conn);
        }
        epoll_event ev{};
        ev.events = (mode_ == Mode::Source ? EPOLLOUT : EPOLLIN) | EPOLLRDHUP;
        ev.data.ptr = conn;
        if (epoll_ctl(epoll_, EPOLL_CTL_ADD, conn->fd, &ev) < 0)
            ::shutdown(conn->fd, SHUT_RDWR);  // never readable: closed at exit
    }

    void adoptHandedOver() {
        std::lock_guard lock(inboxMutex_);
        for (ServerConn* conn : inbox_) conns_.insert(conn);
        inbox_.clear();
    }

    void closeConn(ServerConn* conn) {
        ::close(conn->fd);  // also leaves the epoll set: the fd is never dup'ed
        conns_.erase(conn);
        owned_.fetch_sub(1);
        delete conn;
    }

    void setInterest(ServerConn* conn, std::uint32_t events) {
        epoll_event ev{};
        ev.events = events | EPOLLRDHUP;
        ev.data.ptr = conn;
        if (epoll_ctl(epoll_, EPOLL_CTL_MOD, conn->fd, &ev) < 0) closeConn(conn);
    }

    void handle(ServerConn* conn, std::uint32_t events) {
        switch (mode_) {
            case Mode::Sink:
                return handleSink(conn);
            case Mode::Source:
                return handleSource(conn, events);
            case Mode::Echo:
                return handleEcho(conn, events);
        }
    }

    // Reads and discards; at EOF answers the byte count (8 bytes, little endian) and closes, so
    // a client can confirm how many bytes really arrived end to end.
    void handleSink(ServerConn* conn) {
        for (int i = 0; i < kOpsPerEvent; ++i) {
            ssize_t n = recv(conn->fd, buffer_.data(), buffer_.size(), 0);
            if (n > 0) {
                conn->received += static_cast<std::uint64_t>(n);
                continue;
            }
            if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
            if (n == 0) {
                unsigned char count[8];
                for (int b = 0; b < 8; ++b)
                    count[b] = static_cast<unsigned char>(conn->received >> (8 * b));
                (void)send(conn->fd, count, sizeof count, MSG_NOSIGNAL);
            }
            return closeConn(conn);
        }
    }

    void handleSource(ServerConn* conn, std::uint32_t events) {
        if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) return closeConn(conn);
        for (int i = 0; i < kOpsPerEvent; ++i) {
            ssize_t n = send(conn->fd, buffer_.data(), buffer_.size(), MSG_NOSIGNAL);
            if (n > 0) continue;
            if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
            return closeConn(conn);
        }
    }

    void handleEcho(ServerConn* conn, std::uint32_t events) {
        if (!conn->pending.empty()) {
            if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) return;
            ssize_t n = send(conn->fd, conn->pending.data() + conn->pendingOffset,
                             conn->pending.size() - conn->pendingOffset, MSG_NOSIGNAL);
            if (n < 0 && errno != EAGAIN && errno != EINTR) return closeConn(conn);
            if (n > 0) conn->pendingOffset += static_cast<std::size_t>(n);
            if (conn->pendingOffset < conn->pending.size()) return;
            conn->pending.clear();
            conn->pendingOffset = 0;
            if (conn->closing) return closeConn(conn);
            return setInterest(conn, EPOLLIN);
        }
        for (int i = 0; i < kOpsPerEvent; ++i) {
            ssize_t n = recv(conn->fd, buffer_.data(), buffer_.size(), 0);
            if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
            if (n <= 0) return closeConn(conn);
            ssize_t written =
                send(conn->fd, buffer_.data(), static_cast<std::size_t>(n), MSG_NOSIGNAL);
            if (written < 0) {
                if (errno != EAGAIN && errno != EINTR) return closeConn(conn);
                written = 0;
            }
            if (written < n) {  // peer not reading: stop reading until it does (back-pressure)
                conn->pending.assign(buffer_.data() + written,
                                     static_cast<std::size_t>(n - written));
                conn->pendingOffset = 0;
                return setInterest(conn, EPOLLOUT);
            }
        }
    }

    int listenFd_;
    Mode mode_;
    std::string buffer_;
    Clock::time_point deadline_;
    std::vector<ServerThread*>& all_;
    UniqueFd epollFd_;
    int epoll_;
    std::unordered_set<ServerConn*> conns_;
    std::atomic<long> owned_{0};  // connections handed to this thread and not yet closed
    std::mutex inboxMutex_;
    std::vector<ServerConn*> inbox_;
};

}  // namespace

int runServer(int argc, char** argv) {
    Options opts("server",
                 "Upstream for the benchmarks. sink: read and discard, answer the byte count (8 "
                 "bytes LE) at EOF;\nsource: send as fast as the peer reads; echo: send back what "
                 "arrives. Runs until SIGTERM/SIGINT or --duration.",
                 {
                     {"listen", "ADDR:PORT", "", "address to listen on"},
                     {"mode", "MODE", "", "sink, source or echo"},
                     {"threads", "N", "2", "threads, each with its own epoll set"},
                     {"chunk", "BYTES", "262144", "read/write size"},
                     {"backlog", "N", "4096", "listen backlog"},
                     {"duration", "SECONDS", "3600", "exit after this long at the latest"},
                 },
                 argc, argv, 2);
    std::string modeText = opts.str("mode");
    Mode mode;
    if (modeText == "sink")
        mode = Mode::Sink;
    else if (modeText == "source")
        mode = Mode::Source;
    else if (modeText == "echo")
        mode = Mode::Echo;
    else
        throw UsageError("server: --mode wants sink, source or echo, got '" + modeText + "'");
    auto address = opts.address("listen");
    long threads = opts.integer("threads", 1, 64);
    auto chunk = static_cast<std::size_t>(opts.integer("chunk", 64, 16 << 20));
    int backlog = static_cast<int>(opts.integer("backlog", 1, 65535));
    double duration = opts.number("duration", 0.1, 86400);

    installSignalHandlers();
    raiseFdLimit();
    UniqueFd listener = makeListener(address, backlog);
    auto deadline = Clock::now() + secondsToDuration(duration);
    std::cerr << "server: " << modeText << " on " << address.text() << ", " << threads << " threads"
              << std::endl;
    std::vector<std::unique_ptr<ServerThread>> servers;
    std::vector<ServerThread*> all;
    for (long i = 0; i < threads; ++i) {
        servers.push_back(
            std::make_unique<ServerThread>(listener.get(), mode, chunk, deadline, all));
        all.push_back(servers.back().get());
    }
    std::vector<std::thread> pool;
    std::atomic<int> failures{0};
    for (auto& server : servers) {
        pool.emplace_back([&, thread = server.get()] {
            try {
                thread->run();
            } catch (const std::exception& e) {
                std::cerr << "server: " << e.what() << std::endl;
                failures.fetch_add(1);
            }
        });
    }
    for (auto& t : pool) t.join();
    return failures.load() ? 1 : 0;
}

}  // namespace splicegate::bench
