#include "xdp/testing/VethNamespace.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "common/Error.h"

extern char** environ;

namespace splicegate::xdptest {
namespace {

constexpr unsigned kSubnets = 8192;  // /29s in 198.19.0.0/16

bool processAlive(long pid) {
    return kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

std::string joined(const std::vector<std::string>& args) {
    std::string text;
    for (const auto& arg : args) text += (text.empty() ? "" : " ") + arg;
    return text;
}

sockaddr_storage socketAddress(const std::string& address, std::uint16_t port, socklen_t& length) {
    sockaddr_storage storage{};
    if (address.find(':') == std::string::npos) {
        auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
        v4->sin_family = AF_INET;
        v4->sin_port = htons(port);
        if (inet_pton(AF_INET, address.c_str(), &v4->sin_addr) != 1)
            throw std::invalid_argument("not an IPv4 address: " + address);
        length = sizeof(sockaddr_in);
    } else {
        auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(port);
        if (inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) != 1)
            throw std::invalid_argument("not an IPv6 address: " + address);
        length = sizeof(sockaddr_in6);
    }
    return storage;
}

}  // namespace

CommandResult runCommand(const std::vector<std::string>& args) {
    int pipeFds[2];
    checkSys(pipe2(pipeFds, O_CLOEXEC), "pipe2");
    UniqueFd readEnd(pipeFds[0]);
    UniqueFd writeEnd(pipeFds[1]);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, writeEnd.get(), 1);
    posix_spawn_file_actions_adddup2(&actions, writeEnd.get(), 2);
    std::vector<char*> argv;
    for (const auto& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    pid_t pid = 0;
    int err = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    writeEnd.reset();
    CommandResult result;
    if (err != 0) {
        result.output = args[0] + ": " + std::strerror(err);
        return result;
    }
    char buffer[4096];
    ssize_t n;
    while ((n = read(readEnd.get(), buffer, sizeof(buffer))) > 0)
        result.output.append(buffer, static_cast<std::size_t>(n));
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return result;
}

void mustRun(const std::vector<std::string>& args) {
    CommandResult result = runCommand(args);
    if (result.status != 0)
        throw std::runtime_error(joined(args) + " failed (" + std::to_string(result.status) +
                                 "): " + result.output);
}

unsigned nextTestIndex() {
    static std::atomic<unsigned> counter{0};
    return counter++;
}

void VethNamespace::sweepLeftovers() {
    if (DIR* dir = opendir("/run/netns")) {
        while (dirent* entry = readdir(dir)) {
            long pid = 0;
            if (std::sscanf(entry->d_name, "sgxdp-%ld-", &pid) == 1 && !processAlive(pid))
                runCommand({"ip", "netns", "del", entry->d_name});
        }
        closedir(dir);
    }
    if (struct if_nameindex* names = if_nameindex()) {
        for (struct if_nameindex* it = names; it->if_index != 0; ++it) {
            long pid = 0;
            char kind = 0;
            if (std::sscanf(it->if_name, "sgx%c%ld", &kind, &pid) == 2 && !processAlive(pid))
                runCommand({"ip", "link", "del", std::string(it->if_name)});
        }
        if_freenameindex(names);
    }
}

// The claim is a bound abstract Unix socket: the kernel frees it when the process dies,
// however it dies, and no file is left behind.
VethNamespace::SubnetLease::SubnetLease(unsigned hint) {
    for (unsigned attempt = 0; attempt < kSubnets; ++attempt) {
        const unsigned subnet = (hint + attempt) % kSubnets;
        UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
        sockaddr_un address{};
        address.sun_family = AF_UNIX;
        const std::string name = "splicegate-xdp-test-subnet-" + std::to_string(subnet);
        std::memcpy(address.sun_path + 1, name.data(), name.size());
        const auto length =
            static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
        if (fd && bind(fd.get(), reinterpret_cast<sockaddr*>(&address), length) == 0) {
            subnet_ = subnet;
            claim_ = std::move(fd);
            return;
        }
    }
    throw std::runtime_error("no free test subnet in 198.19.0.0/16");
}

VethNamespace::VethNamespace() : VethNamespace(nextTestIndex()) {}

VethNamespace::VethNamespace(unsigned n) : lease_(static_cast<unsigned>(getpid()) * 16 + n) {
    const long pid = getpid();
    ns_ = "sgxdp-" + std::to_string(pid) + "-" + std::to_string(n);
    host_ = "sgxh" + std::to_string(pid) + "_" + std::to_string(n);
    peer_ = "sgxp" + std::to_string(pid) + "_" + std::to_string(n);
    const unsigned subnet = lease_.subnet();
    auto v4 = [&](unsigned host) {
        return "198.19." + std::to_string(subnet / 32) + "." +
               std::to_string(subnet % 32 * 8 + host);
    };
    hostAddress_ = v4(1);
    clientAddress_ = v4(2);
    otherClientAddress_ = v4(3);
    char v6[64];
    std::snprintf(v6, sizeof(v6), "2001:2:0:%x::", subnet);
    hostAddress6_ = std::string(v6) + "1";
    clientAddress6_ = std::string(v6) + "2";
    try {
        mustRun({"ip", "netns", "add", ns_});
        created_ = true;
        mustRun({"ip", "link", "add", host_, "type", "veth", "peer", "name", peer_, "netns", ns_});
        mustRun({"ip", "addr", "add", hostAddress_ + "/29", "dev", host_});
        mustRun({"ip", "addr", "add", hostAddress6_ + "/64", "dev", host_, "nodad"});
        mustRun({"ip", "link", "set", host_, "up"});
        mustRun({"ip", "-n", ns_, "addr", "add", clientAddress_ + "/29", "dev", peer_});
        mustRun({"ip", "-n", ns_, "addr", "add", otherClientAddress_ + "/29", "dev", peer_});
        mustRun({"ip", "-n", ns_, "addr", "add", clientAddress6_ + "/64", "dev", peer_, "nodad"});
        mustRun({"ip", "-n", ns_, "link", "set", peer_, "up"});
        mustRun({"ip", "-n", ns_, "link", "set", "lo", "up"});
    } catch (...) {
        cleanUp();
        throw;
    }
}

VethNamespace::~VethNamespace() {
    cleanUp();
}

void VethNamespace::cleanUp() noexcept {
    // Deleting the namespace deletes the peer, and with it the host end of the pair.
    if (created_) runCommand({"ip", "netns", "del", ns_});
    if (if_nametoindex(host_.c_str()) != 0) runCommand({"ip", "link", "del", host_});
    created_ = false;
}

unsigned VethNamespace::hostIndex() const {
    return if_nametoindex(host_.c_str());
}

UniqueFd VethNamespace::socketInside(int family) const {
    UniqueFd result;
    int err = 0;
    // setns() moves only the calling thread; the socket keeps the namespace it was made in.
    std::thread([&] {
        UniqueFd nsFd(open(("/run/netns/" + ns_).c_str(), O_RDONLY | O_CLOEXEC));
        if (!nsFd || setns(nsFd.get(), CLONE_NEWNET) != 0) {
            err = errno;
            return;
        }
        result.reset(socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
        if (!result) err = errno;
    }).join();
    if (!result) throwErrno(err, "socket in netns " + ns_);
    return result;
}

UniqueFd VethNamespace::connect(const std::string& source, const std::string& destination,
                                std::uint16_t port, std::chrono::milliseconds timeout,
                                int& error) const {
    socklen_t sourceLength = 0, destinationLength = 0;
    sockaddr_storage from = socketAddress(source, 0, sourceLength);
    sockaddr_storage to = socketAddress(destination, port, destinationLength);
    UniqueFd fd = socketInside(from.ss_family);
    checkSys(bind(fd.get(), reinterpret_cast<sockaddr*>(&from), sourceLength), "bind " + source);
    const int flags = fcntl(fd.get(), F_GETFL);
    fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK);
    error = 0;
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&to), destinationLength) != 0) {
        if (errno != EINPROGRESS) {
            error = errno;
            return {};
        }
        pollfd pfd{fd.get(), POLLOUT, 0};
        if (poll(&pfd, 1, static_cast<int>(timeout.count())) == 0) {
            error = ETIMEDOUT;
            return {};
        }
        socklen_t length = sizeof(error);
        getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &length);
        if (error != 0) return {};
    }
    fcntl(fd.get(), F_SETFL, flags);
    timeval io{2, 0};
    setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &io, sizeof(io));
    setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &io, sizeof(io));
    return fd;
}

}  // namespace splicegate::xdptest
