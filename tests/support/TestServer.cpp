#include "tests/support/TestServer.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

#include "common/Error.h"

namespace splicegate::test {

TestServer::TestServer(Handler handler, bool ipv6) : handler_(std::move(handler)), ipv6_(ipv6) {
    listener_ = listenTcp(port_, ipv6_);
    acceptor_ = std::thread([this] { acceptLoop(); });
}

void TestServer::setReceiveBuffer(int bytes) {
    checkSys(::setsockopt(listener_.get(), SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes),
             "setsockopt SO_RCVBUF");
}

TestServer::~TestServer() {
    stop();
}

void TestServer::acceptLoop() {
    while (!stopping_.load()) {
        pollfd p{listener_.get(), POLLIN, 0};
        if (::poll(&p, 1, 50) <= 0) continue;
        UniqueFd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
        if (!fd) continue;  // EAGAIN, ECONNABORTED, EMFILE: try again (bounded by stop)
        setIoTimeout(fd.get(), milliseconds(250));
        std::lock_guard lock(mutex_);
        std::size_t index = accepted_++;
        connections_.emplace_back();
        Connection& connection = connections_.back();
        connection.fd = std::move(fd);
        if (handler_) {
            int raw = connection.fd.get();
            connection.thread = std::thread([this, raw, index, &connection] {
                handler_(raw, index);
                std::lock_guard inner(mutex_);
                connection.done = true;
                connection.fd.reset();
                ++finished_;
                changed_.notify_all();
            });
        }
        changed_.notify_all();
    }
}

std::size_t TestServer::acceptedCount() const {
    std::lock_guard lock(mutex_);
    return accepted_;
}

bool TestServer::waitAccepted(std::size_t count, Deadline deadline) const {
    std::unique_lock lock(mutex_);
    return changed_.wait_until(lock, deadline, [&] { return accepted_ >= count; });
}

std::size_t TestServer::finishedCount() const {
    std::lock_guard lock(mutex_);
    return finished_;
}

bool TestServer::waitFinished(std::size_t count, Deadline deadline) const {
    std::unique_lock lock(mutex_);
    return changed_.wait_until(lock, deadline, [&] { return finished_ >= count; });
}

std::vector<int> TestServer::heldFds() const {
    std::lock_guard lock(mutex_);
    std::vector<int> fds;
    for (const auto& connection : connections_) {
        if (connection.fd) fds.push_back(connection.fd.get());
    }
    return fds;
}

void TestServer::stop() {
    if (stopping_.exchange(true)) return;
    if (acceptor_.joinable()) acceptor_.join();
    listener_.reset();
    {
        std::lock_guard lock(mutex_);
        for (auto& connection : connections_) {
            // Unblocks a handler still reading or writing; the fd stays owned until it returns.
            if (!connection.done && connection.fd) ::shutdown(connection.fd.get(), SHUT_RDWR);
        }
    }
    for (auto& connection : connections_) {
        if (connection.thread.joinable()) connection.thread.join();
    }
    std::lock_guard lock(mutex_);
    connections_.clear();
}

}  // namespace splicegate::test
