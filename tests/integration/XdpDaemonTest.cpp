// The edge filter through the real daemon (issue 5 "Tests"): build/bin/splicegate with
// --xdp-interface on the host end of a veth pair (xdp/testing/VethNamespace.h), a route listening
// on that end's address, an echo upstream on loopback, clients inside the namespace:
// - a source from --xdp-deny cannot connect to the relay; another relays byte-exact;
// - `splicegatectl xdp list|del|add` changes that at run time;
// - the drops are in splicegate_xdp_packets_total{action="drop",reason="deny"};
// - after SIGTERM the program is gone from the interface, and after SIGKILL too (the kernel drops
//   the daemon's bpf_link); the next start attaches again.
// Needs root; namespaces, links and daemons go away on every exit path.
#include <bpf/libbpf.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/UniqueFd.h"
#include "tests/support/ControlPlaneDaemon.h"
#include "xdp/XdpAttachment.h"
#include "xdp/testing/EchoServer.h"
#include "xdp/testing/VethNamespace.h"

namespace splicegate::test {
namespace {

using xdptest::echoes;
using xdptest::EchoServer;
using xdptest::VethNamespace;

constexpr milliseconds kDeniedTimeout{600};  // a dropped SYN is retransmitted after 1 s
constexpr milliseconds kAllowedTimeout{5000};
constexpr std::size_t kTransfer = 1 << 20;

unsigned attachedProgram(unsigned ifindex) {
    bpf_xdp_query_opts query{};
    query.sz = sizeof(query);
    if (bpf_xdp_query(static_cast<int>(ifindex), 0, &query) != 0) return 0;
    return query.prog_id;
}

std::string show(const ProcessResult& result) {
    std::string text = result.status ? result.status->describe() : std::string("did not finish");
    return text + "\n  stdout: " + result.out + "\n  stderr: " + result.err;
}

class XdpDaemonTest : public ::testing::TestWithParam<XdpAttachMode> {
  protected:
    void SetUp() override {
        if (geteuid() != 0) GTEST_SKIP() << "needs root: network namespaces and XDP attach";
        VethNamespace::sweepLeftovers();
        net_ = std::make_unique<VethNamespace>();
        upstream_ = std::make_unique<EchoServer>("127.0.0.1");
        edgePort_ = pickFreePort();
    }

    // The config file: `deny` as xdp-deny keys, and a route `edge` on the veth's host address.
    std::string configText(const std::vector<std::string>& deny) const {
        std::string text;
        for (const auto& cidr : deny) text += "xdp-deny = " + cidr + "\n";
        return text + "[route.edge]\nlisten = " + net_->hostAddress() + ":" +
               std::to_string(edgePort_) + "\nupstream = " + upstream_->endpoint() + "\n";
    }

    // The daemon with that config and the edge filter on the veth's host end.
    void startDaemon(const std::vector<std::string>& deny) {
        ControlPlaneOptions options;
        options.upstreams = {upstream_->endpoint()};
        options.workers = 1;
        options.configText = configText(deny);
        options.extra = {"--xdp-interface", net_->hostInterface(), "--xdp-mode",
                         xdpAttachModeName(GetParam())};
        daemon_ = std::make_unique<ControlPlaneDaemon>(options);
        ASSERT_TRUE(daemon_->start()) << daemon_->why();
        ASSERT_TRUE(waitListening(edgePort_, true, deadlineIn(milliseconds(5000))))
            << daemon_->why();
    }

    // Through the relay from `source` inside the namespace: connects and echoes, or must not.
    void expectRelay(const std::string& source, bool works, const std::string& why) {
        int error = 0;
        UniqueFd fd = net_->connect(source, net_->hostAddress(), edgePort_,
                                    works ? kAllowedTimeout : kDeniedTimeout, error);
        if (works) {
            ASSERT_TRUE(fd) << why << ": connect from " << source << ": " << std::strerror(error);
            EXPECT_TRUE(echoes(fd.get(), kTransfer)) << why << ": relay from " << source;
        } else {
            EXPECT_FALSE(fd) << why << ": connect from " << source << " should not complete";
            EXPECT_EQ(error, ETIMEDOUT) << why << ": " << std::strerror(error);
        }
    }

    ProcessResult ctl(const std::vector<std::string>& args) { return daemon_->ctl(args); }

    std::unique_ptr<VethNamespace> net_;
    std::unique_ptr<EchoServer> upstream_;
    std::unique_ptr<ControlPlaneDaemon> daemon_;
    uint16_t edgePort_ = 0;
};

TEST_P(XdpDaemonTest, DenyAdminChangesMetricsAndDetachOnStop) {
    const std::string denied = net_->clientAddress() + "/32";
    const std::string other = net_->otherClientAddress() + "/32";
    ASSERT_NO_FATAL_FAILURE(startDaemon({denied}));
    const unsigned ifindex = net_->hostIndex();
    EXPECT_NE(attachedProgram(ifindex), 0u);

    expectRelay(net_->clientAddress(), false, "--xdp-deny");
    expectRelay(net_->otherClientAddress(), true, "not denied");

    auto list = ctl({"xdp", "list"});
    ASSERT_TRUE(list.status && list.status->isExit(0)) << show(list);
    EXPECT_NE(list.out.find(denied), std::string::npos) << list.out;

    auto del = ctl({"xdp", "del", denied});
    ASSERT_TRUE(del.status && del.status->isExit(0)) << show(del);
    expectRelay(net_->clientAddress(), true, "after splicegatectl xdp del");

    auto add = ctl({"xdp", "add", net_->otherClientAddress()});
    ASSERT_TRUE(add.status && add.status->isExit(0)) << show(add);
    expectRelay(net_->otherClientAddress(), false, "after splicegatectl xdp add");
    list = ctl({"--json", "xdp", "list"});
    EXPECT_NE(list.out.find(other), std::string::npos) << list.out;
    EXPECT_EQ(list.out.find(denied), std::string::npos) << list.out;

    auto bad = ctl({"xdp", "add", "10.0.0.0/33"});
    ASSERT_TRUE(bad.status);
    EXPECT_FALSE(bad.status->isExit(0)) << show(bad);
    EXPECT_NE(bad.err.find("10.0.0.0/33"), std::string::npos) << show(bad);

    auto page = httpGet(daemon_->metricsPort(), "/metrics");
    ASSERT_TRUE(page.error.empty()) << page.error;
    auto samples = parseMetrics(page.body);
    auto drops = sampleValue(samples, "splicegate_xdp_packets_total",
                             {{"action", "drop"}, {"reason", "deny"}});
    ASSERT_TRUE(drops) << page.body;
    EXPECT_GE(*drops, 2.0);
    auto passes = sampleValue(samples, "splicegate_xdp_packets_total",
                              {{"action", "pass"}, {"reason", "no_match"}});
    ASSERT_TRUE(passes) << page.body;
    EXPECT_GE(*passes, 10.0);

    auto status = daemon_->daemon().terminate();
    ASSERT_TRUE(status && status->isExit(0)) << daemon_->why();
    EXPECT_EQ(attachedProgram(ifindex), 0u) << "the program outlived the daemon";
    // The source denied last now gets a RST from the stack: its SYN is no longer dropped.
    int error = 0;
    UniqueFd fd = net_->connect(net_->otherClientAddress(), net_->hostAddress(), edgePort_,
                                kAllowedTimeout, error);
    EXPECT_FALSE(fd);
    EXPECT_EQ(error, ECONNREFUSED) << std::strerror(error);
}

// SIGHUP applies the difference of the config's xdp-deny keys; admin rules stay.
TEST_P(XdpDaemonTest, ReloadAppliesTheDenyDifference) {
    ASSERT_NO_FATAL_FAILURE(startDaemon({net_->clientAddress() + "/32"}));
    expectRelay(net_->clientAddress(), false, "denied in the config");
    auto add = ctl({"xdp", "add", net_->clientAddress6() + "/128"});
    ASSERT_TRUE(add.status && add.status->isExit(0)) << show(add);

    daemon_->writeConfig(configText({net_->otherClientAddress()}));
    daemon_->daemon().signal(SIGHUP);
    // The reload is asynchronous: wait for its effect on the rule list.
    const Deadline deadline = deadlineIn(milliseconds(5000));
    std::string rules;
    while (Clock::now() < deadline) {
        rules = ctl({"xdp", "list"}).out;
        if (rules.find(net_->otherClientAddress() + "/32") != std::string::npos) break;
        std::this_thread::sleep_for(milliseconds(50));
    }
    EXPECT_NE(rules.find(net_->otherClientAddress() + "/32"), std::string::npos) << rules;
    EXPECT_EQ(rules.find(net_->clientAddress() + "/32"), std::string::npos) << rules;
    EXPECT_NE(rules.find(net_->clientAddress6() + "/128"), std::string::npos)
        << "an admin rule survives a reload:\n"
        << rules;
    expectRelay(net_->clientAddress(), true, "no longer in the config");
    expectRelay(net_->otherClientAddress(), false, "now in the config");
}

// A crash takes the program with it (bpf_link); the next start attaches a new one.
TEST_P(XdpDaemonTest, CrashDetachesAndTheNextStartAttaches) {
    const unsigned ifindex = net_->hostIndex();
    ASSERT_NO_FATAL_FAILURE(startDaemon({net_->clientAddress()}));
    const unsigned crashed = attachedProgram(ifindex);
    ASSERT_NE(crashed, 0u);
    daemon_->daemon().signal(SIGKILL);
    ASSERT_TRUE(daemon_->daemon().waitExit(milliseconds(5000)));
    EXPECT_EQ(attachedProgram(ifindex), 0u) << "a killed daemon's program stayed attached";

    ASSERT_NO_FATAL_FAILURE(startDaemon({net_->otherClientAddress()}));
    const unsigned restarted = attachedProgram(ifindex);
    EXPECT_NE(restarted, 0u);
    EXPECT_NE(restarted, crashed);
    expectRelay(net_->clientAddress(), true, "the new daemon does not deny it");
    expectRelay(net_->otherClientAddress(), false, "the new daemon denies it");
    auto status = daemon_->daemon().terminate();
    ASSERT_TRUE(status && status->isExit(0)) << daemon_->why();
    EXPECT_EQ(attachedProgram(ifindex), 0u);
}

INSTANTIATE_TEST_SUITE_P(Modes, XdpDaemonTest,
                         ::testing::Values(XdpAttachMode::Native, XdpAttachMode::Generic),
                         [](const ::testing::TestParamInfo<XdpAttachMode>& mode) {
                             return std::string(xdpAttachModeName(mode.param));
                         });

}  // namespace
}  // namespace splicegate::test
