// The edge filter (EdgeFilter, no daemon) on a real interface: a veth pair whose far end sits in a
// network namespace (xdp/testing/VethNamespace.h: 198.19.x.y from 198.18.0.0/15, 2001:2::/48),
// clients connecting from inside it to a TCP echo server on the host side, where the filter is
// attached in native or generic mode: deny, allow over deny, rule changes at run time, the SYN
// limit, counters, detach on destruction, stale and foreign programs, attach errors.
// Needs root (namespaces, XDP attach); every namespace, veth and bridge interface is removed on
// every exit path (RAII), and ones left behind by a killed run are swept at start.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <gtest/gtest.h>
#include <linux/if_link.h>
#include <net/if.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "common/UniqueFd.h"
#include "xdp/EdgeFilter.h"
#include "xdp/edge_filter_shared.h"
#include "xdp/testing/EchoServer.h"
#include "xdp/testing/VethNamespace.h"
#include "xdp/testing/XdpTestRun.h"

namespace splicegate {
namespace {

using std::chrono::milliseconds;

// A SYN dropped at the edge never completes; the first retransmission comes after 1 s.
constexpr milliseconds kDeniedTimeout{600};
constexpr milliseconds kAllowedTimeout{5000};

using xdptest::CommandResult;
using xdptest::echoes;
using xdptest::EchoServer;
using xdptest::nextTestIndex;
using xdptest::runCommand;
using xdptest::VethNamespace;

// An interface without native XDP support in our namespace: a bridge (built into most kernels;
// this one lacks the dummy driver), else an ifb device.
class NoNativeXdpInterface {
  public:
    NoNativeXdpInterface()
        : name_("sgxb" + std::to_string(getpid()) + "_" + std::to_string(nextTestIndex())) {
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

// Runs `body` in a forked child that then exits without destructors, as a crash would; true when
// the body did not throw.
template <typename Body>
bool runInChild(Body body) {
    pid_t child = fork();
    if (child < 0) return false;
    if (child == 0) {
        try {
            body();
        } catch (...) {
            _exit(1);
        }
        _exit(0);
    }
    int status = 0;
    return waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// What an earlier splicegate left: our program, denying `cidr`, attached through netlink (which
// outlives the process). Call in a child; the program object is leaked on purpose.
void attachThroughNetlink(const Cidr& cidr, XdpAttachMode mode, const std::string& interface) {
    auto* program = new EdgeFilterProgram();
    program->addDeny(cidr);
    const std::uint32_t flag =
        mode == XdpAttachMode::Native ? XDP_FLAGS_DRV_MODE : XDP_FLAGS_SKB_MODE;
    const int ifindex = static_cast<int>(XdpAttachment::interfaceIndex(interface));
    if (bpf_xdp_attach(ifindex, program->programFd(), flag, nullptr) != 0)
        throw std::runtime_error("netlink attach failed");
}

class XdpEdgeFilterTest : public ::testing::TestWithParam<XdpAttachMode> {
  protected:
    void SetUp() override {
        if (geteuid() != 0) GTEST_SKIP() << "needs root: network namespaces and XDP attach";
        VethNamespace::sweepLeftovers();
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
        UniqueFd fd = net_->connect(source, destination, port(),
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

TEST_P(XdpEdgeFilterTest, SynRateLimitPerSourceAddress) {
    EdgeFilterOptions opts = options();
    opts.listenPorts = {port()};
    opts.synLimit.rate = 1;
    opts.synLimit.burst = 2;
    opts.synLimit.prefixV4 = 32;  // per address: the two clients share a /29
    EdgeFilter filter(opts);
    std::vector<UniqueFd> held;
    for (int i = 0; i < 2; ++i) {
        int error = 0;
        held.push_back(net_->connect(net_->clientAddress(), net_->hostAddress(), port(),
                                     kAllowedTimeout, error));
        ASSERT_TRUE(held.back()) << "connection " << i + 1
                                 << " within the burst: " << std::strerror(error);
    }
    expectConnect(net_->clientAddress(), false, "third SYN in the same second");
    EXPECT_GE(count(filter, "drop", "syn_rate"), 1u);
    expectConnect(net_->otherClientAddress(), true, "another address has its own bucket");
    // Data on the established connections is not limited.
    for (auto& fd : held) EXPECT_TRUE(echoes(fd.get(), 64 * 1024));
}

TEST_P(XdpEdgeFilterTest, SynRateLimitPerPrefixByDefault) {
    EdgeFilterOptions opts = options();
    opts.listenPorts = {port()};
    opts.synLimit.rate = 1;
    opts.synLimit.burst = 2;
    EdgeFilter filter(opts);
    std::vector<UniqueFd> held;
    for (const std::string* source : {&net_->clientAddress(), &net_->otherClientAddress()}) {
        int error = 0;
        held.push_back(net_->connect(*source, net_->hostAddress(), port(), kAllowedTimeout, error));
        ASSERT_TRUE(held.back()) << *source << " within the /24's burst: " << std::strerror(error);
    }
    expectConnect(net_->otherClientAddress(), false, "third SYN from the same /24");
    expectConnect(net_->clientAddress(), false, "fourth SYN from the same /24");
    EXPECT_GE(count(filter, "drop", "syn_rate"), 2u);
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

// A process killed without running destructors: the kernel drops its bpf_link, and with it the
// program. Nothing is left on the interface and nothing filters.
TEST_P(XdpEdgeFilterTest, CrashLeavesNothingAttached) {
    const unsigned ifindex = net_->hostIndex();
    EdgeFilterOptions opts = options();
    opts.deny = {*Cidr::parse(net_->clientAddress())};
    ASSERT_TRUE(runInChild([&] { [[maybe_unused]] auto* leaked = new EdgeFilter(opts); }));
    EXPECT_EQ(xdpState(ifindex).programId, 0u);
    expectConnect(net_->clientAddress(), true, "the crashed filter is gone");
    EdgeFilter filter(opts);
    EXPECT_EQ(xdpState(ifindex).programId, filter.programId());
    expectConnect(net_->clientAddress(), false, "the new filter denies");
}

// An earlier version attached through netlink, which outlives the process. The next start
// recognises the program by name, removes it and attaches its own link in the requested mode.
TEST_P(XdpEdgeFilterTest, NetlinkProgramOfOursIsReplaced) {
    const unsigned ifindex = net_->hostIndex();
    const Cidr denied = *Cidr::parse(net_->clientAddress());
    ASSERT_TRUE(runInChild(
        [&] { attachThroughNetlink(denied, XdpAttachMode::Native, net_->hostInterface()); }));
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

// While one process holds the interface's link, another filter cannot take it over.
TEST_P(XdpEdgeFilterTest, LiveFilterOfAnotherProcessIsNotTakenOver) {
    EdgeFilter first(options());
    try {
        EdgeFilter second(options());
        ADD_FAILURE() << "a second filter attached over a live one";
    } catch (const std::system_error& error) {
        EXPECT_NE(std::string(error.what()).find("another splicegate running?"), std::string::npos)
            << error.what();
    }
    EXPECT_EQ(xdpState(net_->hostIndex()).programId, first.programId());
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
        VethNamespace::sweepLeftovers();
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
    ASSERT_TRUE(runInChild([&] {
        attachThroughNetlink(*Cidr::parse("198.51.100.0/24"), XdpAttachMode::Generic,
                             net.hostInterface());
    }));
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
