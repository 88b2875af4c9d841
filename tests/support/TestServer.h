#pragma once
// An in-process TCP server on 127.0.0.1 (or ::1) playing an upstream: it accepts in a background
// thread and runs `handler(fd, index)` for each connection on its own thread (index = accept
// order). The server owns the fd; it is closed when the handler returns (arm SO_LINGER 0 in the
// handler for an RST). Without a handler, connections are only held open (idle-connection
// tests: no thread per connection).
// Thread affinity: construct/stop/destroy from one thread; the queries are thread-safe.
// Error contract: the constructor throws std::system_error when it cannot listen. stop() shuts
// down every connection still in a handler (unblocking its I/O) and joins all threads, so
// handlers must use bounded waits.
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/support/Sockets.h"

namespace splicegate::test {

class TestServer {
  public:
    using Handler = std::function<void(int fd, std::size_t index)>;

    explicit TestServer(Handler handler, bool ipv6 = false);
    TestServer(const TestServer&) = delete;
    TestServer& operator=(const TestServer&) = delete;
    ~TestServer();

    uint16_t port() const noexcept { return port_; }
    std::string address() const { return loopback(port_, ipv6_); }
    std::size_t acceptedCount() const;
    bool waitAccepted(std::size_t count, Deadline deadline) const;
    // SO_RCVBUF of the listener, inherited by connections accepted from now on: a small one
    // makes a peer that never reads fill up after a few KiB.
    void setReceiveBuffer(int bytes);
    // Hold mode: the fds currently held (owned by the server).
    std::vector<int> heldFds() const;
    // Handlers that have returned.
    std::size_t finishedCount() const;
    bool waitFinished(std::size_t count, Deadline deadline) const;

    void stop();

  private:
    struct Connection {
        UniqueFd fd;
        std::thread thread;
        bool done = false;
    };

    void acceptLoop();

    Handler handler_;
    bool ipv6_;
    uint16_t port_ = 0;
    UniqueFd listener_;
    std::atomic<bool> stopping_{false};
    std::thread acceptor_;
    mutable std::mutex mutex_;
    mutable std::condition_variable changed_;
    std::list<Connection> connections_;
    std::size_t accepted_ = 0;
    std::size_t finished_ = 0;
};

// Collects one value per key from handler threads; the test waits for how many it expects.
template <typename Key, typename Value>
class ResultBoard {
  public:
    void put(const Key& key, Value value) {
        std::lock_guard lock(mutex_);
        values_.emplace_back(key, std::move(value));
        changed_.notify_all();
    }
    bool waitSize(std::size_t count, Deadline deadline) const {
        std::unique_lock lock(mutex_);
        return changed_.wait_until(lock, deadline, [&] { return values_.size() >= count; });
    }
    // Waits until `done(values)` holds (called under the lock with the current values).
    template <typename Predicate>
    bool waitUntil(Predicate done, Deadline deadline) const {
        std::unique_lock lock(mutex_);
        return changed_.wait_until(lock, deadline, [&] { return done(values_); });
    }
    std::vector<std::pair<Key, Value>> snapshot() const {
        std::lock_guard lock(mutex_);
        return values_;
    }

  private:
    mutable std::mutex mutex_;
    mutable std::condition_variable changed_;
    std::vector<std::pair<Key, Value>> values_;
};

}  // namespace splicegate::test
