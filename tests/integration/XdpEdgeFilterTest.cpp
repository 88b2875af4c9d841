// The edge filter on a real interface: a veth pair whose far end sits in a network namespace,
// clients connecting from inside it (198.19.x.y from 198.18.0.0/15, 2001:2::/48 for IPv6) to a
// TCP echo server on the host side, where the filter is attached in native or generic mode.
// Needs root (namespaces, XDP attach); every namespace, veth and bridge interface is removed on
// every exit path (RAII), and ones left behind by a killed run are swept at start.
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/if_link.h>
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
#include <chrono>
#include <cstddef>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/Error.h"
#include "common/UniqueFd.h"
#include "xdp/EdgeFilter.h"
#include "xdp/edge_filter_shared.h"
#include "xdp/testing/XdpTestRun.h"

extern char** environ;

namespace splicegate {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// A SYN dropped at the edge never completes; the first retransmission comes after 1 s.
constexpr milliseconds kDeniedTimeout{600};
constexpr milliseconds kAllowedTimeout{5000};

struct CommandResult {
    int status = -1;     // exit code, or -1 if it did not exit normally
    std::string output;  // stdout and stderr
};

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

std::string joined(const std::vector<std::string>& args) {
    std::string text;
    for (const auto& arg : args) text += (text.empty() ? "" : " ") + arg;
    return text;
}

void mustRun(const std::vector<std::string>& args) {
    CommandResult result = runCommand(args);
    if (result.status != 0)
        throw std::runtime_error(joined(args) + " failed (" + std::to_string(result.status) +
                                 "): " + result.output);
}

bool processAlive(long pid) {
    return kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

// Namespaces and interfaces of earlier runs that were killed before their destructors ran.
void sweepLeftovers() {
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

// Claims one of the 8,192 /29 subnets of 198.19.0.0/16 for as long as it lives, so tests running
// in parallel (ctest -j runs each test as its own process) never share one. The claim is a bound
// abstract Unix socket: the kernel frees it when the process dies, however it dies.
class SubnetLease {
  public:
    explicit SubnetLease(unsigned hint) {
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
    unsigned subnet() const { return subnet_; }

  private:
    static constexpr unsigned kSubnets = 8192;
    unsigned subnet_ = 0;
    UniqueFd claim_;
};

unsigned nextIndex() {
    static std::atomic<unsigned> counter{0};
    return counter++;
}

// A veth pair: `host` in our namespace with .1, `peer` in namespace `ns` with .2 and .3 of a /29
// inside 198.19.0.0/16, plus 2001:2:0:N::1 and ::2.
class VethNamespace {
  public:
    VethNamespace() : VethNamespace(nextIndex()) {}
    explicit VethNamespace(unsigned n) : lease_(static_cast<unsigned>(getpid()) * 16 + n) {
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
            mustRun(
                {"ip", "link", "add", host_, "type", "veth", "peer", "name", peer_, "netns", ns_});
            mustRun({"ip", "addr", "add", hostAddress_ + "/29", "dev", host_});
            mustRun({"ip", "addr", "add", hostAddress6_ + "/64", "dev", host_, "nodad"});
            mustRun({"ip", "link", "set", host_, "up"});
            mustRun({"ip", "-n", ns_, "addr", "add", clientAddress_ + "/29", "dev", peer_});
            mustRun({"ip", "-n", ns_, "addr", "add", otherClientAddress_ + "/29", "dev", peer_});
            mustRun(
                {"ip", "-n", ns_, "addr", "add", clientAddress6_ + "/64", "dev", peer_, "nodad"});
            mustRun({"ip", "-n", ns_, "link", "set", peer_, "up"});
            mustRun({"ip", "-n", ns_, "link", "set", "lo", "up"});
        } catch (...) {
            cleanUp();
            throw;
        }
    }
    VethNamespace(const VethNamespace&) = delete;
    VethNamespace& operator=(const VethNamespace&) = delete;
    ~VethNamespace() { cleanUp(); }

    const std::string& hostInterface() const { return host_; }
    const std::string& hostAddress() const { return hostAddress_; }
    const std::string& hostAddress6() const { return hostAddress6_; }
    const std::string& clientAddress() const { return clientAddress_; }
    const std::string& otherClientAddress() const { return otherClientAddress_; }
    const std::string& clientAddress6() const { return clientAddress6_; }
    unsigned hostIndex() const { return if_nametoindex(host_.c_str()); }

    // A TCP socket created inside the namespace (a socket keeps the namespace it was made in).
    UniqueFd socketInside(int family) const {
        UniqueFd result;
        int err = 0;
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

  private:
    void cleanUp() noexcept {
        // Deleting the namespace deletes the peer, and with it the host end of the pair.
        if (created_) runCommand({"ip", "netns", "del", ns_});
        if (if_nametoindex(host_.c_str()) != 0) runCommand({"ip", "link", "del", host_});
        created_ = false;
    }

    SubnetLease lease_;
    std::string ns_, host_, peer_;
    std::string hostAddress_, clientAddress_, otherClientAddress_;
    std::string hostAddress6_, clientAddress6_;
    bool created_ = false;
};

// An interface without native XDP support in our namespace: a bridge (built into most kernels;
// this one lacks the dummy driver), else an ifb device.
class NoNativeXdpInterface {
  public:
    NoNativeXdpInterface()
        : name_("sgxb" + std::to_string(getpid()) + "_" + std::to_string(nextIndex())) {
        for (const char* type : {"bridge", "ifb"}) {
            CommandResult result = runCommand({"ip", "link", "add", name_, "type", type});
            if (result.status == 0) {
                created_ = true;
                break;
            }
            why_ += std::string(type) + ": " + result.output;
        }
    }
    NoNativeXdpInterface(const NoNativeXdpInterface&) = delete;
    NoNativeXdpInterface& operator=(const NoNativeXdpInterface&) = delete;
    ~NoNativeXdpInterface() {
        if (created_) runCommand({"ip", "link", "del", name_});
    }
    bool created() const { return created_; }
    const std::string& why() const { return why_; }
    const std::string& name() const { return name_; }

  private:
    std::string name_;
    std::string why_;
    bool created_ = false;
};

sockaddr_storage socketAddress(const std::string& address, std::uint16_t port, socklen_t& length) {
    sockaddr_storage storage{};
    if (address.find(':') == std::string::npos) {
        auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
        v4->sin_family = AF_INET;
        v4->sin_port = htons(port);
        inet_pton(AF_INET, address.c_str(), &v4->sin_addr);
        length = sizeof(sockaddr_in);
    } else {
        auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(port);
        inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr);
        length = sizeof(sockaddr_in6);
    }
    return storage;
}

// Echoes whatever each connection sends, on one poll thread; stop() closes everything.
class EchoServer {
  public:
    explicit EchoServer(const std::string& address) {
        socklen_t length = 0;
        sockaddr_storage bound = socketAddress(address, 0, length);
        listener_.reset(checkSys(socket(bound.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0), "socket"));
        checkSys(bind(listener_.get(), reinterpret_cast<sockaddr*>(&bound), length),
                 "bind " + address);
        checkSys(listen(listener_.get(), 64), "listen");
        checkSys(getsockname(listener_.get(), reinterpret_cast<sockaddr*>(&bound), &length),
                 "getsockname");
        port_ =
            ntohs(bound.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&bound)->sin_port
                                             : reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
        int pipeFds[2];
        checkSys(pipe2(pipeFds, O_CLOEXEC), "pipe2");
        stopRead_.reset(pipeFds[0]);
        stopWrite_.reset(pipeFds[1]);
        thread_ = std::thread([this] { loop(); });
    }
    EchoServer(const EchoServer&) = delete;
    EchoServer& operator=(const EchoServer&) = delete;
    ~EchoServer() {
        if (write(stopWrite_.get(), "x", 1) < 0) {
        }
        thread_.join();
    }
    std::uint16_t port() const { return port_; }

  private:
    void loop() {
        std::vector<UniqueFd> connections;
        char buffer[65536];
        for (;;) {
            std::vector<pollfd> fds = {{stopRead_.get(), POLLIN, 0}, {listener_.get(), POLLIN, 0}};
            for (const auto& fd : connections) fds.push_back({fd.get(), POLLIN, 0});
            if (poll(fds.data(), fds.size(), 1000) < 0 && errno != EINTR) return;
            if (fds[0].revents) return;
            if (fds[1].revents & POLLIN) {
                int fd = accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
                if (fd >= 0) connections.emplace_back(fd);
            }
            for (std::size_t i = 2; i < fds.size(); ++i) {
                if (!fds[i].revents) continue;
                ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
                if (n <= 0) {
                    connections[i - 2].reset();
                    continue;
                }
                for (ssize_t sent = 0; sent < n;) {
                    ssize_t m = write(fds[i].fd, buffer + sent, static_cast<std::size_t>(n - sent));
                    if (m <= 0) break;
                    sent += m;
                }
            }
            std::erase_if(connections, [](const UniqueFd& fd) { return !fd.valid(); });
        }
    }

    UniqueFd listener_;
    UniqueFd stopRead_, stopWrite_;
    std::uint16_t port_ = 0;
    std::thread thread_;
};

// Connects from `source` (inside the namespace) to `destination`:`port`; the socket on success,
// else an invalid fd and `error` (ETIMEDOUT when the SYN went unanswered).
UniqueFd connectFrom(const VethNamespace& net, const std::string& source,
                     const std::string& destination, std::uint16_t port, milliseconds timeout,
                     int& error) {
    socklen_t sourceLength = 0, destinationLength = 0;
    sockaddr_storage from = socketAddress(source, 0, sourceLength);
    sockaddr_storage to = socketAddress(destination, port, destinationLength);
    UniqueFd fd = net.socketInside(from.ss_family);
    checkSys(bind(fd.get(), reinterpret_cast<sockaddr*>(&from), sourceLength), "bind " + source);
    int flags = fcntl(fd.get(), F_GETFL);
    fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK);
    error = 0;
    if (connect(fd.get(), reinterpret_cast<sockaddr*>(&to), destinationLength) != 0) {
        if (errno != EINPROGRESS) {
            error = errno;
            return {};
        }
        pollfd pfd{fd.get(), POLLOUT, 0};
        int ready = poll(&pfd, 1, static_cast<int>(timeout.count()));
        if (ready == 0) {
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

// Sends `size` bytes of a pattern and reads them back: the filter passed data both ways intact.
bool echoes(int fd, std::size_t size) {
    std::vector<char> out(size), in(size);
    for (std::size_t i = 0; i < size; ++i) out[i] = static_cast<char>(i * 131 + i / 251);
    std::thread writer([&] {
        for (std::size_t sent = 0; sent < size;) {
            ssize_t n = write(fd, out.data() + sent, size - sent);
            if (n <= 0) return;
            sent += static_cast<std::size_t>(n);
        }
    });
    std::size_t received = 0;
    while (received < size) {
        ssize_t n = read(fd, in.data() + received, size - received);
        if (n <= 0) break;
        received += static_cast<std::size_t>(n);
    }
    writer.join();
    return received == size && in == out;
}

std::uint64_t count(const EdgeFilter& filter, const char* action, const char* reason) {
    auto counts = filter.packetCounts();
    return counts[{action, reason}];
}

struct XdpState {
    unsigned programId = 0;
    unsigned mode = XDP_ATTACHED_NONE;
};

XdpState xdpState(unsigned ifindex) {
    bpf_xdp_query_opts query{};
    query.sz = sizeof(query);
    XdpState state;
    if (bpf_xdp_query(static_cast<int>(ifindex), 0, &query) == 0) {
        state.programId = query.prog_id;
        state.mode = query.attach_mode;
    }
    return state;
}

std::string programName(unsigned id) {
    UniqueFd fd(bpf_prog_get_fd_by_id(id));
    if (!fd) return "";
    bpf_prog_info info{};
    __u32 length = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd.get(), &info, &length) != 0) return "";
    return info.name;
}

unsigned expectedAttachMode(XdpAttachMode mode) {
    return mode == XdpAttachMode::Native ? XDP_ATTACHED_DRV : XDP_ATTACHED_SKB;
}

class XdpEdgeFilterTest : public ::testing::TestWithParam<XdpAttachMode> {
  protected:
    void SetUp() override {
        if (geteuid() != 0) GTEST_SKIP() << "needs root: network namespaces and XDP attach";
        sweepLeftovers();
        net_ = std::make_unique<VethNamespace>();
        server_ = std::make_unique<EchoServer>(net_->hostAddress());
    }
    void TearDown() override {
        server_.reset();
        net_.reset();
    }

    EdgeFilterOptions options() const {
        EdgeFilterOptions result;
        result.interface = net_->hostInterface();
        result.mode = GetParam();
        return result;
    }

    // Connect from `source` to the echo server, expecting it to work (with bytes echoed) or not.
    void expectConnect(const std::string& source, bool works, const std::string& why) {
        const std::string& destination =
            source.find(':') == std::string::npos ? net_->hostAddress() : net_->hostAddress6();
        int error = 0;
        UniqueFd fd = connectFrom(*net_, source, destination, port(),
                                  works ? kAllowedTimeout : kDeniedTimeout, error);
        if (works) {
            ASSERT_TRUE(fd) << why << ": connect from " << source << ": " << std::strerror(error);
            EXPECT_TRUE(echoes(fd.get(), 256 * 1024)) << why << ": echo from " << source;
        } else {
            EXPECT_FALSE(fd) << why << ": connect from " << source << " should not complete";
            EXPECT_EQ(error, ETIMEDOUT) << why << ": " << std::strerror(error);
        }
    }

    std::uint16_t port() const { return server_->port(); }

    std::unique_ptr<VethNamespace> net_;
    std::unique_ptr<EchoServer> server_;
};

TEST_P(XdpEdgeFilterTest, DeniedSourceCannotConnectUntilRuleRemoved) {
    EdgeFilterOptions opts = options();
    const Cidr denied = *Cidr::parse(net_->clientAddress());
    opts.deny = {denied};
    EdgeFilter filter(opts);
    EXPECT_STREQ(filter.attachedMode(), xdpAttachModeName(GetParam()));

    expectConnect(net_->clientAddress(), false, "denied from the start");
    expectConnect(net_->otherClientAddress(), true, "neighbour not denied");
    EXPECT_GE(count(filter, "drop", "deny"), 1u);
    EXPECT_GE(count(filter, "pass", "no_match"), 3u);  // SYN, ACK, data of the neighbour

    EXPECT_TRUE(filter.removeDeny(denied));
    expectConnect(net_->clientAddress(), true, "after removeDeny");
    filter.addDeny(*Cidr::parse(net_->otherClientAddress() + "/32"));
    expectConnect(net_->otherClientAddress(), false, "after addDeny at run time");
}

TEST_P(XdpEdgeFilterTest, AllowBeatsDeny) {
    EdgeFilter filter(options());
    filter.addDeny(*Cidr::parse(net_->clientAddress() + "/29"));  // both clients
    filter.addAllow(*Cidr::parse(net_->otherClientAddress()));
    expectConnect(net_->clientAddress(), false, "in the denied /29");
    expectConnect(net_->otherClientAddress(), true, "allowed inside the denied /29");
    EXPECT_GE(count(filter, "pass", "allow"), 3u);
    EXPECT_GE(count(filter, "drop", "deny"), 1u);
    auto rules = filter.rules();
    ASSERT_EQ(rules.size(), 2u);
    EXPECT_FALSE(rules[0].second);
    EXPECT_TRUE(rules[1].second);
}

TEST_P(XdpEdgeFilterTest, Ipv6DenyAndRemove) {
    EdgeFilter filter(options());
    const Cidr denied = *Cidr::parse(net_->clientAddress6() + "/128");
    // The IPv6 echo server listens on the host's IPv6 address.
    server_ = std::make_unique<EchoServer>(net_->hostAddress6());
    expectConnect(net_->clientAddress6(), true, "IPv6 before any rule");
    filter.addDeny(denied);
    expectConnect(net_->clientAddress6(), false, "IPv6 denied");
    EXPECT_GE(count(filter, "drop", "deny"), 1u);
    EXPECT_TRUE(filter.removeDeny(denied));
    expectConnect(net_->clientAddress6(), true, "IPv6 after removeDeny");
}

TEST_P(XdpEdgeFilterTest, SynRateLimitPerSource) {
    EdgeFilterOptions opts = options();
    opts.listenPorts = {port()};
    opts.synRate = 1;
    opts.synBurst = 2;
    EdgeFilter filter(opts);
    std::vector<UniqueFd> held;
    for (int i = 0; i < 2; ++i) {
        int error = 0;
        held.push_back(connectFrom(*net_, net_->clientAddress(), net_->hostAddress(), port(),
                                   kAllowedTimeout, error));
        ASSERT_TRUE(held.back()) << "connection " << i + 1
                                 << " within the burst: " << std::strerror(error);
    }
    expectConnect(net_->clientAddress(), false, "third SYN in the same second");
    EXPECT_GE(count(filter, "drop", "syn_rate"), 1u);
    expectConnect(net_->otherClientAddress(), true, "another source has its own bucket");
    // Data on the established connections is not limited.
    for (auto& fd : held) EXPECT_TRUE(echoes(fd.get(), 64 * 1024));
}

TEST_P(XdpEdgeFilterTest, ProgramGoneAfterDestruction) {
    const unsigned ifindex = net_->hostIndex();
    ASSERT_NE(ifindex, 0u);
    {
        EdgeFilter filter(options());
        XdpState state = xdpState(ifindex);
        EXPECT_EQ(state.programId, filter.programId());
        EXPECT_EQ(state.mode, expectedAttachMode(GetParam()));
        EXPECT_EQ(programName(state.programId), SG_XDP_PROG_NAME);
        CommandResult link = runCommand({"ip", "link", "show", "dev", net_->hostInterface()});
        EXPECT_NE(link.output.find(GetParam() == XdpAttachMode::Native ? " xdp " : " xdpgeneric "),
                  std::string::npos)
            << link.output;
        EXPECT_NE(link.output.find("prog/xdp id " + std::to_string(state.programId) +
                                   " name " SG_XDP_PROG_NAME),
                  std::string::npos)
            << link.output;
    }
    EXPECT_EQ(xdpState(ifindex).programId, 0u);
    CommandResult link = runCommand({"ip", "link", "show", "dev", net_->hostInterface()});
    EXPECT_EQ(link.status, 0);
    EXPECT_EQ(link.output.find(" xdp"), std::string::npos) << link.output;
    EXPECT_EQ(link.output.find("prog/xdp"), std::string::npos) << link.output;
    expectConnect(net_->clientAddress(), true, "no filter left");
}

// A daemon killed without detaching leaves its program attached (netlink XDP outlives the
// process). The next start replaces it atomically in the same mode.
TEST_P(XdpEdgeFilterTest, StaleProgramOfOursIsReplaced) {
    const unsigned ifindex = net_->hostIndex();
    EdgeFilterOptions opts = options();
    opts.deny = {*Cidr::parse(net_->clientAddress())};
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        // No destructors: exactly what a crash leaves behind.
        try {
            [[maybe_unused]] auto* leaked = new EdgeFilter(opts);
        } catch (...) {
            _exit(1);
        }
        _exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    const XdpState stale = xdpState(ifindex);
    ASSERT_NE(stale.programId, 0u);
    ASSERT_EQ(programName(stale.programId), SG_XDP_PROG_NAME);
    expectConnect(net_->clientAddress(), false, "the stale program still filters");

    {
        EdgeFilter filter(options());  // no deny rules this time
        const XdpState now = xdpState(ifindex);
        EXPECT_EQ(now.programId, filter.programId());
        EXPECT_NE(now.programId, stale.programId);
        EXPECT_EQ(now.mode, expectedAttachMode(GetParam()));
        expectConnect(net_->clientAddress(), true, "the new program has no deny rule");
    }
    EXPECT_EQ(xdpState(ifindex).programId, 0u);
}

// A program that is not ours is never replaced.
TEST_P(XdpEdgeFilterTest, ForeignProgramIsLeftAlone) {
    const unsigned ifindex = net_->hostIndex();
    UniqueFd foreign = xdptest::loadPassProgram("foreign_xdp");
    ASSERT_TRUE(foreign) << "loading a trivial XDP program";
    const std::uint32_t flag =
        GetParam() == XdpAttachMode::Native ? XDP_FLAGS_DRV_MODE : XDP_FLAGS_SKB_MODE;
    ASSERT_EQ(bpf_xdp_attach(static_cast<int>(ifindex), foreign.get(), flag, nullptr), 0);
    struct Detach {
        unsigned ifindex;
        std::uint32_t flag;
        ~Detach() { bpf_xdp_detach(static_cast<int>(ifindex), flag, nullptr); }
    } detach{ifindex, flag};
    const unsigned foreignId = xdpState(ifindex).programId;

    try {
        EdgeFilter filter(options());
        ADD_FAILURE() << "attached over a foreign program";
    } catch (const std::system_error& error) {
        EXPECT_NE(std::string(error.what()).find("another XDP program ('foreign_xdp'"),
                  std::string::npos)
            << error.what();
        EXPECT_NE(std::string(error.what()).find(net_->hostInterface()), std::string::npos)
            << error.what();
    }
    EXPECT_EQ(xdpState(ifindex).programId, foreignId);
}

INSTANTIATE_TEST_SUITE_P(Modes, XdpEdgeFilterTest,
                         ::testing::Values(XdpAttachMode::Native, XdpAttachMode::Generic),
                         [](const ::testing::TestParamInfo<XdpAttachMode>& mode) {
                             return std::string(xdpAttachModeName(mode.param));
                         });

class XdpEdgeFilterModeTest : public ::testing::Test {
  protected:
    void SetUp() override {
        if (geteuid() != 0) GTEST_SKIP() << "needs root: network namespaces and XDP attach";
        sweepLeftovers();
    }
};

TEST_F(XdpEdgeFilterModeTest, MissingInterfaceIsNamed) {
    EdgeFilterOptions options;
    options.interface = "sgxnone" + std::to_string(getpid());
    try {
        EdgeFilter filter(options);
        FAIL() << "no exception";
    } catch (const std::system_error& error) {
        EXPECT_EQ(std::string(error.what())
                      .rfind("xdp-interface " + options.interface + ": no such interface", 0),
                  0u)
            << error.what();
        EXPECT_EQ(error.code().value(), ENODEV);
    }
}

TEST_F(XdpEdgeFilterModeTest, AutoPrefersNativeOnVeth) {
    VethNamespace net;
    EdgeFilterOptions options;
    options.interface = net.hostInterface();
    options.mode = XdpAttachMode::Auto;
    EdgeFilter filter(options);
    EXPECT_STREQ(filter.attachedMode(), "native");
    EXPECT_EQ(xdpState(net.hostIndex()).mode, static_cast<unsigned>(XDP_ATTACHED_DRV));
}

TEST_F(XdpEdgeFilterModeTest, NativeUnsupportedIsClearAndAutoFallsBack) {
    NoNativeXdpInterface device;
    if (!device.created()) GTEST_SKIP() << "no bridge or ifb interface here: " << device.why();
    EdgeFilterOptions options;
    options.interface = device.name();
    options.mode = XdpAttachMode::Native;
    try {
        EdgeFilter filter(options);
        FAIL() << "native XDP on a bridge attached";
    } catch (const std::system_error& error) {
        EXPECT_NE(std::string(error.what())
                      .find("xdp-interface " + device.name() + ": cannot attach in native mode"),
                  std::string::npos)
            << error.what();
    }
    options.mode = XdpAttachMode::Auto;
    EdgeFilter filter(options);
    EXPECT_STREQ(filter.attachedMode(), "generic");
    EXPECT_EQ(xdpState(if_nametoindex(device.name().c_str())).mode,
              static_cast<unsigned>(XDP_ATTACHED_SKB));
}

// A stale generic program and a native start: the kernel allows only one mode at a time, so the
// stale one is detached first (the one non-atomic case), and nothing of it remains.
TEST_F(XdpEdgeFilterModeTest, StaleProgramInTheOtherModeIsReplaced) {
    VethNamespace net;
    const unsigned ifindex = net.hostIndex();
    EdgeFilterOptions options;
    options.interface = net.hostInterface();
    options.mode = XdpAttachMode::Generic;
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        try {
            [[maybe_unused]] auto* leaked = new EdgeFilter(options);
        } catch (...) {
            _exit(1);
        }
        _exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ASSERT_EQ(xdpState(ifindex).mode, static_cast<unsigned>(XDP_ATTACHED_SKB));

    options.mode = XdpAttachMode::Native;
    {
        EdgeFilter filter(options);
        const XdpState state = xdpState(ifindex);
        EXPECT_EQ(state.mode, static_cast<unsigned>(XDP_ATTACHED_DRV));
        EXPECT_EQ(state.programId, filter.programId());
    }
    EXPECT_EQ(xdpState(ifindex).programId, 0u);
}

}  // namespace
}  // namespace splicegate
