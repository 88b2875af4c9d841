#include "tools/splicegatectl/AdminClient.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "common/Error.h"
#include "common/UniqueFd.h"
#include "proto/ProtocolVersion.h"
#include "admin/AdminFraming.h"

namespace splicegate::ctl {

namespace {

using Clock = std::chrono::steady_clock;

int remainingMs(Clock::time_point deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    return left.count() <= 0 ? 0 : static_cast<int>(left.count());
}

// Waits for `events` on fd until the deadline; false on timeout.
bool waitFor(int fd, short events, Clock::time_point deadline) {
    for (;;) {
        pollfd entry{fd, events, 0};
        int rc = ::poll(&entry, 1, remainingMs(deadline));
        if (rc > 0) return true;
        if (rc == 0) return false;
        if (errno != EINTR) return false;
    }
}

}  // namespace

admin::Response exchange(const std::string& socketPath, admin::Request request,
                         std::chrono::milliseconds timeout) {
    const std::string where = "cannot reach splicegate at " + socketPath;
    const auto deadline = Clock::now() + timeout;
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (socketPath.empty() || socketPath.size() >= sizeof(address.sun_path)) {
        throw Unreachable(where + ": not a valid socket path");
    }
    std::memcpy(address.sun_path, socketPath.data(), socketPath.size());

    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) throw Unreachable(where + ": socket: " + errnoText(errno));
    // A Unix connect does not wait: EAGAIN means the listen backlog is full; retry until the
    // deadline.
    for (;;) {
        if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) ==
            0) {
            break;
        }
        const int err = errno;
        if (err == EINTR) continue;
        if (err == EAGAIN && Clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
            continue;
        }
        if (err == EAGAIN) {
            throw Unreachable(where + ": the daemon did not accept within " +
                              std::to_string(timeout.count()) + " ms");
        }
        throw Unreachable(where + ": " + errnoText(err));
    }

    request.set_protocol_version(admin::kProtocolVersion);
    const std::string out = admin::encodeFrame(request);
    std::size_t sent = 0;
    bool writeClosed = false;
    while (sent < out.size()) {
        ssize_t n = ::send(fd.get(), out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
        if (n > 0) {
            sent += static_cast<std::size_t>(n);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) {
            if (!waitFor(fd.get(), POLLOUT, deadline)) {
                throw Unreachable(where + ": no answer within " + std::to_string(timeout.count()) +
                                  " ms");
            }
            continue;
        }
        // EPIPE / ECONNRESET: the daemon may already have answered (a refusal) and closed;
        // read what it sent.
        writeClosed = true;
        break;
    }

    admin::FrameAssembler frames(admin::kMaxFrameBytes, admin::kMaxFrameBytes);
    std::string buffer(64 * 1024, '\0');
    while (!frames.hasFrame()) {
        ssize_t n = ::recv(fd.get(), buffer.data(), buffer.size(), 0);
        if (n > 0) {
            if (!frames.feed(buffer.data(), static_cast<std::size_t>(n))) {
                throw ProtocolFailure("bad response from splicegate at " + socketPath + ": " +
                                      frames.error());
            }
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) {
            if (!waitFor(fd.get(), POLLIN, deadline)) {
                throw Unreachable(where + ": no answer within " + std::to_string(timeout.count()) +
                                  " ms");
            }
            continue;
        }
        if (n == 0) {
            throw Unreachable(
                where + ": the daemon closed the connection without answering" +
                (frames.midFrame() ? " (" + frames.partialFrame() + ")" : std::string()));
        }
        throw Unreachable(where + ": " + errnoText(errno) +
                          (writeClosed ? " (the daemon closed the connection)" : ""));
    }
    admin::Response response;
    const std::string frame = frames.popFrame();
    if (!response.ParseFromString(frame)) {
        throw ProtocolFailure("bad response from splicegate at " + socketPath + ": " +
                              std::to_string(frame.size()) +
                              " bytes that do not parse as a splicegate.admin.Response");
    }
    return response;
}

}  // namespace splicegate::ctl
