#include "tests/support/Sockets.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <system_error>
#include <thread>
#include <vector>

#include "tests/support/PatternStream.h"
#include "tests/support/Sha256.h"

namespace splicegate::test {

SocketAddress numericAddress(const char* text) {
    auto address = SocketAddress::parseNumeric(text);
    EXPECT_TRUE(address.has_value()) << text;
    return address.value_or(SocketAddress{});
}
namespace {

[[noreturn]] void throwErrno(const std::string& what) {
    throw std::system_error(errno, std::generic_category(), what);
}

socklen_t makeLoopback(sockaddr_storage& storage, uint16_t port, bool ipv6) {
    std::memset(&storage, 0, sizeof storage);
    if (ipv6) {
        auto* a = reinterpret_cast<sockaddr_in6*>(&storage);
        a->sin6_family = AF_INET6;
        a->sin6_port = htons(port);
        a->sin6_addr = in6addr_loopback;
        return sizeof(sockaddr_in6);
    }
    auto* a = reinterpret_cast<sockaddr_in*>(&storage);
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return sizeof(sockaddr_in);
}

uint16_t boundPort(int fd) {
    sockaddr_storage storage{};
    socklen_t length = sizeof storage;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&storage), &length) != 0) {
        throwErrno("getsockname");
    }
    if (storage.ss_family == AF_INET6) {
        return ntohs(reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port);
    }
    return ntohs(reinterpret_cast<sockaddr_in*>(&storage)->sin_port);
}

bool isTimeout(int error) {
    return error == EAGAIN || error == EWOULDBLOCK || error == EINTR;
}

}  // namespace

std::string loopback(uint16_t port, bool ipv6) {
    return (ipv6 ? std::string("[::1]:") : std::string("127.0.0.1:")) + std::to_string(port);
}

UniqueFd lonelySocket() {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) != 0)
        throw std::system_error(errno, std::generic_category(), "socketpair");
    ::close(fds[1]);
    return UniqueFd(fds[0]);
}

UniqueFd listenTcp(uint16_t& port, bool ipv6, int backlog) {
    UniqueFd fd(::socket(ipv6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) throwErrno("socket");
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_storage storage{};
    socklen_t length = makeLoopback(storage, port, ipv6);
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&storage), length) != 0) {
        throwErrno("bind " + loopback(port, ipv6));
    }
    if (::listen(fd.get(), backlog) != 0) throwErrno("listen");
    port = boundPort(fd.get());
    return fd;
}

// The port stays bound (SO_REUSEADDR, not listening) by this process until it exits, so that
// no test running beside it is handed the same port in the meantime (a port picked and let go
// was seen taken by a parallel test before the daemon bound it). Binding it explicitly still
// works for a socket with SO_REUSEADDR (the daemon's listeners, listenLoopback()); a bind to
// port 0 and a connect's ephemeral port pass it over.
uint16_t pickFreePort() {
    static std::mutex mutex;
    static std::vector<UniqueFd> reserved;
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) throwErrno("socket");
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_storage storage{};
    socklen_t length = makeLoopback(storage, 0, false);
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&storage), length) != 0) {
        throwErrno("bind 127.0.0.1:0");
    }
    uint16_t port = boundPort(fd.get());
    std::lock_guard lock(mutex);
    reserved.push_back(std::move(fd));
    return port;
}

void setIoTimeout(int fd, milliseconds timeout) {
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

UniqueFd connectFrom(const char* source, uint16_t port, int& error) {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in local{};
    local.sin_family = AF_INET;
    ::inet_pton(AF_INET, source, &local.sin_addr);
    sockaddr_in remote{};
    remote.sin_family = AF_INET;
    remote.sin_port = htons(port);
    remote.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&local), sizeof local) != 0 ||
        ::connect(fd.get(), reinterpret_cast<sockaddr*>(&remote), sizeof remote) != 0) {
        error = errno;
        return UniqueFd();
    }
    setIoTimeout(fd.get(), milliseconds(250));
    return fd;
}

UniqueFd connectTcp(uint16_t port, int& error, milliseconds timeout, bool ipv6) {
    error = 0;
    UniqueFd fd(::socket(ipv6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) {
        error = errno;
        return {};
    }
    sockaddr_storage storage{};
    socklen_t length = makeLoopback(storage, port, ipv6);
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&storage), length) != 0) {
        if (errno != EINPROGRESS) {
            error = errno;
            return {};
        }
        pollfd p{fd.get(), POLLOUT, 0};
        int ready = ::poll(&p, 1, static_cast<int>(timeout.count()));
        if (ready <= 0) {
            error = ready == 0 ? ETIMEDOUT : errno;
            return {};
        }
        int soError = 0;
        socklen_t soLength = sizeof soError;
        ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &soError, &soLength);
        if (soError != 0) {
            error = soError;
            return {};
        }
    }
    int flags = ::fcntl(fd.get(), F_GETFL);
    ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
    setIoTimeout(fd.get(), milliseconds(250));
    return fd;
}

void armReset(int fd) {
    linger l{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
}

void resetClose(UniqueFd& fd) {
    if (!fd) return;
    armReset(fd.get());
    fd.reset();
}

uint16_t localPort(int fd) {
    sockaddr_storage storage{};
    socklen_t length = sizeof storage;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&storage), &length) != 0) return 0;
    if (storage.ss_family == AF_INET)
        return ntohs(reinterpret_cast<sockaddr_in*>(&storage)->sin_port);
    if (storage.ss_family == AF_INET6)
        return ntohs(reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port);
    return 0;
}

namespace {
// "0100007F:1F90" -> 0x1F90; the part after the last colon, in hex.
unsigned long hexAfterColon(const std::string& field) {
    auto colon = field.rfind(':');
    return colon == std::string::npos ? 0 : std::stoul(field.substr(colon + 1), nullptr, 16);
}
}  // namespace

std::vector<TcpTableRow> tcpTable(bool withIpv6) {
    std::vector<TcpTableRow> rows;
    for (const char* path : {"/proc/net/tcp", "/proc/net/tcp6"}) {
        if (!withIpv6 && std::string(path).ends_with('6')) break;
        std::ifstream in(path);
        std::string line;
        std::getline(in, line);  // header
        while (std::getline(in, line)) {
            std::istringstream fields(line);
            std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout;
            fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
                timeout;
            TcpTableRow row;
            row.localPort = static_cast<uint16_t>(hexAfterColon(local));
            row.remotePort = static_cast<uint16_t>(hexAfterColon(remote));
            row.state = static_cast<int>(std::stoul(state, nullptr, 16));
            row.txQueue = std::stol(queues.substr(0, queues.find(':')), nullptr, 16);
            row.rxQueue = static_cast<long>(hexAfterColon(queues));
            fields >> row.inode;
            rows.push_back(row);
        }
    }
    return rows;
}

namespace {
// The descriptor under which process `pid` holds the socket `inode`, or -1.
int descriptorOfSocket(pid_t pid, unsigned long inode) {
    const std::string wanted = "socket:[" + std::to_string(inode) + "]";
    std::error_code error;
    for (const auto& entry :
         std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", error)) {
        std::error_code readError;
        auto target = std::filesystem::read_symlink(entry.path(), readError);
        if (!readError && target.string() == wanted)
            return std::stoi(entry.path().filename().string());
    }
    return -1;
}
}  // namespace

UniqueFd borrowSocket(pid_t pid, uint16_t localPort, uint16_t remotePort, Deadline deadline) {
    UniqueFd process(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
    if (!process) return {};
    for (;;) {
        for (const auto& row : tcpTable(true)) {
            if (row.localPort != localPort || row.remotePort != remotePort || row.inode == 0)
                continue;
            int descriptor = descriptorOfSocket(pid, row.inode);
            if (descriptor >= 0)
                return UniqueFd(
                    static_cast<int>(::syscall(SYS_pidfd_getfd, process.get(), descriptor, 0)));
        }
        if (Clock::now() >= deadline) return {};
        std::this_thread::sleep_for(milliseconds(5));
    }
}

bool isListening(uint16_t port) {
    for (const auto& row : tcpTable(true))
        if (row.state == 0x0A && row.localPort == port) return true;  // TCP_LISTEN
    return false;
}

bool waitListening(uint16_t port, bool wanted, Deadline deadline) {
    for (;;) {
        if (isListening(port) == wanted) return true;
        if (Clock::now() >= deadline) return false;
        std::this_thread::sleep_for(milliseconds(10));
    }
}

uint64_t raiseFdLimit() {
    // The hard limit is host state (a login's limits.conf, a container's default): as root the
    // test raises it itself rather than depend on it, up to the kernel's fs.nr_open.
    constexpr rlim_t kWanted = 65536;
    rlimit limit{};
    ::getrlimit(RLIMIT_NOFILE, &limit);
    if (limit.rlim_max < kWanted) {
        rlimit raised{kWanted, kWanted};
        if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
    }
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
    ::getrlimit(RLIMIT_NOFILE, &limit);
    return limit.rlim_cur;
}

std::string StreamResult::describe() const {
    std::ostringstream out;
    out << bytes << " bytes, sha256 " << (sha256.empty() ? "-" : sha256.substr(0, 16) + "...");
    if (eof) out << ", EOF";
    if (error != 0) out << ", error " << std::strerror(error);
    if (timedOut) out << ", TIMED OUT";
    return out.str();
}

bool sendAll(int fd, const void* data, std::size_t size, Deadline deadline, int& error) {
    const auto* p = static_cast<const uint8_t*>(data);
    error = 0;
    while (size > 0) {
        ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);
        if (n > 0) {
            p += n;
            size -= static_cast<std::size_t>(n);
            continue;
        }
        if (n < 0 && isTimeout(errno)) {
            if (Clock::now() >= deadline) {
                error = ETIMEDOUT;
                return false;
            }
            continue;
        }
        error = n < 0 ? errno : EPIPE;
        return false;
    }
    return true;
}

bool recvExact(int fd, void* data, std::size_t size, Deadline deadline, int& error) {
    auto* p = static_cast<uint8_t*>(data);
    error = 0;
    while (size > 0) {
        ssize_t n = ::recv(fd, p, size, 0);
        if (n > 0) {
            p += n;
            size -= static_cast<std::size_t>(n);
            continue;
        }
        if (n == 0) {
            error = -1;
            return false;
        }
        if (isTimeout(errno)) {
            if (Clock::now() >= deadline) {
                error = ETIMEDOUT;
                return false;
            }
            continue;
        }
        error = errno;
        return false;
    }
    return true;
}

StreamResult sendPattern(int fd, uint64_t seed, uint64_t size, Deadline deadline,
                         const SendOptions& options) {
    StreamResult result;
    PatternStream stream(seed);
    Sha256 sha;
    std::vector<uint8_t> buffer(options.chunk);
    uint64_t left = size;
    while (left > 0) {
        if (options.cancel != nullptr && options.cancel->load()) {
            result.sha256 = sha.finishHex();
            return result;
        }
        std::size_t n = left < buffer.size() ? static_cast<std::size_t>(left) : buffer.size();
        stream.fill(buffer.data(), n);
        std::size_t offset = 0;
        while (offset < n) {
            ssize_t sent = ::send(fd, buffer.data() + offset, n - offset, MSG_NOSIGNAL);
            if (sent > 0) {
                sha.update(buffer.data() + offset, static_cast<std::size_t>(sent));
                offset += static_cast<std::size_t>(sent);
                result.bytes += static_cast<uint64_t>(sent);
                if (options.progress != nullptr) {
                    options.progress->fetch_add(static_cast<uint64_t>(sent));
                }
                continue;
            }
            if (sent < 0 && isTimeout(errno)) {
                if (options.cancel != nullptr && options.cancel->load()) break;
                if (Clock::now() >= deadline) {
                    result.timedOut = true;
                    result.sha256 = sha.finishHex();
                    return result;
                }
                continue;
            }
            result.error = sent < 0 ? errno : EPIPE;
            result.sha256 = sha.finishHex();
            return result;
        }
        left -= n;
        if (options.pauseEveryChunk.count() > 0)
            std::this_thread::sleep_for(options.pauseEveryChunk);
    }
    if (options.shutdownWrite && ::shutdown(fd, SHUT_WR) != 0) result.error = errno;
    result.sha256 = sha.finishHex();
    return result;
}

ReceiveEnd receiveChunks(int fd, Deadline deadline, uint64_t limit, const ChunkSink& onChunk) {
    ReceiveEnd end;
    std::vector<uint8_t> buffer(256 * 1024);
    while (end.bytes < limit) {
        uint64_t want = limit - end.bytes;
        std::size_t n = want < buffer.size() ? static_cast<std::size_t>(want) : buffer.size();
        ssize_t got = ::recv(fd, buffer.data(), n, 0);
        if (got > 0) {
            onChunk(buffer.data(), static_cast<std::size_t>(got), end.bytes);
            end.bytes += static_cast<uint64_t>(got);
            continue;
        }
        if (got == 0) {
            end.eof = true;
            break;
        }
        if (isTimeout(errno)) {
            if (Clock::now() >= deadline) {
                end.timedOut = true;
                break;
            }
            continue;
        }
        end.error = errno;
        break;
    }
    return end;
}

StreamResult receiveAll(int fd, Deadline deadline, uint64_t limit,
                        std::atomic<uint64_t>* progress) {
    Sha256 sha;
    ReceiveEnd end =
        receiveChunks(fd, deadline, limit, [&](const uint8_t* data, std::size_t size, uint64_t) {
            sha.update(data, size);
            if (progress != nullptr) progress->fetch_add(size);
        });
    StreamResult result;
    result.bytes = end.bytes;
    result.eof = end.eof;
    result.error = end.error;
    result.timedOut = end.timedOut;
    result.sha256 = sha.finishHex();
    return result;
}

DuplexResult duplex(int fd, uint64_t seed, uint64_t size, Deadline deadline) {
    DuplexResult result;
    std::thread sender([&] { result.sent = sendPattern(fd, seed, size, deadline); });
    result.received = receiveAll(fd, deadline);
    sender.join();
    return result;
}

const char* toString(PeerClose kind) noexcept {
    switch (kind) {
        case PeerClose::Eof:
            return "EOF";
        case PeerClose::Reset:
            return "RST";
        case PeerClose::Timeout:
            return "no close before the deadline";
        case PeerClose::OtherError:
            return "error";
    }
    return "?";
}

PeerClose waitPeerClose(int fd, Deadline deadline, uint64_t* discarded, int* error) {
    std::vector<uint8_t> buffer(256 * 1024);
    for (;;) {
        ssize_t got = ::recv(fd, buffer.data(), buffer.size(), 0);
        if (got > 0) {
            if (discarded != nullptr) *discarded += static_cast<uint64_t>(got);
            if (Clock::now() >= deadline) return PeerClose::Timeout;
            continue;
        }
        if (got == 0) return PeerClose::Eof;
        int e = errno;
        if (isTimeout(e)) {
            if (Clock::now() >= deadline) return PeerClose::Timeout;
            continue;
        }
        if (error != nullptr) *error = e;
        return e == ECONNRESET ? PeerClose::Reset : PeerClose::OtherError;
    }
}

bool sendHeader(int fd, const StreamHeader& header, Deadline deadline, int& error) {
    uint8_t bytes[16];
    for (int i = 0; i < 8; ++i) {
        bytes[i] = static_cast<uint8_t>(header.id >> (8 * i));
        bytes[8 + i] = static_cast<uint8_t>(header.size >> (8 * i));
    }
    return sendAll(fd, bytes, sizeof bytes, deadline, error);
}

bool recvHeader(int fd, StreamHeader& header, Deadline deadline, int& error) {
    uint8_t bytes[16];
    if (!recvExact(fd, bytes, sizeof bytes, deadline, error)) return false;
    header = {};
    for (int i = 0; i < 8; ++i) {
        header.id |= static_cast<uint64_t>(bytes[i]) << (8 * i);
        header.size |= static_cast<uint64_t>(bytes[8 + i]) << (8 * i);
    }
    return true;
}

}  // namespace splicegate::test
