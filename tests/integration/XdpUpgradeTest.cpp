// `splicegatectl upgrade` with the XDP edge filter on (and the audit log, which the control-plane
// daemon has on): the old process hands the edge filter's bpf_link over and the new one swaps
// its own program onto it (bpf_link_update). Through the real daemon on the host end of a veth
// pair (xdp/testing/VethNamespace.h), clients inside the namespace:
// - a probe from a denied source tries to connect every 50 ms all through the upgrade and never
//   gets through (the interface is never without the filter);
// - afterwards the program id has changed, the link (its id) is the same, the new process's
//   drop counter counts the probe's SYNs, the rule `splicegatectl xdp add` denied in the old
//   process still denies, an allowed source relays byte-exact;
// - the filter stays when the old process exits, and goes when the new one stops;
// - an upgrade whose new process fails after it swapped its program in leaves the old process's
//   program back on the link, and its metrics endpoint serving.
// Needs root; namespaces, links and daemons go away on every exit path (by name and PID).
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/UniqueFd.h"
#include "tests/support/AuditSupport.h"
#include "tests/support/ControlPlaneDaemon.h"
#include "tests/support/Upgrade.h"
#include "xdp/XdpAttachment.h"
#include "xdp/testing/EchoServer.h"
#include "xdp/testing/VethNamespace.h"

namespace splicegate::test {
namespace {

using xdptest::echoes;
using xdptest::EchoServer;
using xdptest::VethNamespace;

constexpr milliseconds kProbeTimeout{300};  // a dropped SYN is retransmitted after 1 s
constexpr milliseconds kAllowedTimeout{5000};

unsigned attachedProgram(unsigned ifindex) {
    bpf_xdp_query_opts query{};
    query.sz = sizeof(query);
    if (bpf_xdp_query(static_cast<int>(ifindex), 0, &query) != 0) return 0;
    return query.prog_id;
}

// The id of the XDP bpf_link on `ifindex` (0: none).
unsigned xdpLinkOn(unsigned ifindex) {
    __u32 id = 0;
    while (bpf_link_get_next_id(id, &id) == 0) {
        UniqueFd fd(bpf_link_get_fd_by_id(id));
        if (!fd) continue;
        bpf_link_info info{};
        __u32 length = sizeof(info);
        if (bpf_obj_get_info_by_fd(fd.get(), &info, &length) == 0 &&
            info.type == BPF_LINK_TYPE_XDP && info.xdp.ifindex == ifindex)
            return id;
    }
    return 0;
}

std::string show(const ProcessResult& result) {
    std::string text = result.status ? result.status->describe() : std::string("did not finish");
    return text + "\n  stdout: " + result.out + "\n  stderr: " + result.err;
}

class XdpUpgradeTest : public ::testing::TestWithParam<XdpAttachMode> {
  protected:
    static void SetUpTestSuite() { ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0); }
    void SetUp() override {
        if (geteuid() != 0) GTEST_SKIP() << "needs root: network namespaces and XDP attach";
        VethNamespace::sweepLeftovers();
        net_ = std::make_unique<VethNamespace>();
        upstream_ = std::make_unique<EchoServer>("127.0.0.1");
        edgePort_ = pickFreePort();
    }

    std::string configText(const std::string& extra = "") const {
        return "xdp-deny = " + net_->clientAddress() + "/32\n" + extra +
               "[route.edge]\nlisten = " + net_->hostAddress() + ":" + std::to_string(edgePort_) +
               "\nupstream = " + upstream_->endpoint() + "\n";
    }

    void startDaemon() {
        ControlPlaneOptions options;
        options.upstreams = {upstream_->endpoint()};
        options.workers = 1;
        options.configText = configText();
        options.extra = {"--xdp-interface", net_->hostInterface(), "--xdp-mode",
                         xdpAttachModeName(GetParam()), "--drain-timeout-ms", "2000"};
        daemon_ = std::make_unique<ControlPlaneDaemon>(options);
        ASSERT_TRUE(daemon_->start()) << daemon_->why();
        ASSERT_TRUE(waitListening(edgePort_, true, deadlineIn(milliseconds(5000))))
            << daemon_->why();
    }

    // Connects from `source`: the fd, or invalid with `error` (ETIMEDOUT: the SYN was dropped).
    UniqueFd connectFrom(const std::string& source, milliseconds timeout, int& error) {
        return net_->connect(source, net_->hostAddress(), edgePort_, timeout, error);
    }

    double denyDrops() {
        auto page = httpGet(daemon_->metricsPort(), "/metrics");
        EXPECT_EQ(page.status, 200) << "the metrics endpoint: " << page.error;
        auto drops = sampleValue(parseMetrics(page.body), "splicegate_xdp_packets_total",
                                 {{"action", "drop"}, {"reason", "deny"}});
        return drops ? *drops : -1;
    }

    std::unique_ptr<VethNamespace> net_;
    std::unique_ptr<EchoServer> upstream_;
    std::unique_ptr<ControlPlaneDaemon> daemon_;
    uint16_t edgePort_ = 0;
};

TEST_P(XdpUpgradeTest, TheFilterNeverGoesAwayAndTheNewProgramTakesTheLink) {
    ASSERT_NO_FATAL_FAILURE(startDaemon());
    const unsigned ifindex = net_->hostIndex();
    const unsigned programBefore = attachedProgram(ifindex);
    const unsigned linkBefore = xdpLinkOn(ifindex);
    ASSERT_NE(programBefore, 0u);
    ASSERT_NE(linkBefore, 0u);
    // A rule of the old process's admin, not in the config: it must outlive the upgrade.
    auto add = daemon_->ctl({"xdp", "add", net_->clientAddress6() + "/128"});
    ASSERT_TRUE(add.status && add.status->isExit(0)) << show(add);

    // The probe: a denied source, all through the upgrade.
    std::atomic<bool> stopProbe{false};
    std::atomic<unsigned> probes{0}, through{0};
    std::thread probe([&] {
        while (!stopProbe.load()) {
            int error = 0;
            UniqueFd fd = connectFrom(net_->clientAddress(), kProbeTimeout, error);
            probes.fetch_add(1);
            if (fd || error != ETIMEDOUT) through.fetch_add(1);
            std::this_thread::sleep_for(milliseconds(50));
        }
    });
    std::this_thread::sleep_for(milliseconds(700));
    auto upgraded = daemon_->ctl({"upgrade"}, milliseconds(70000));
    Successor successor(newPidOf(upgraded.out));
    ASSERT_TRUE(upgraded.status && upgraded.status->isExit(0)) << show(upgraded)
                                                               << daemon_->why();
    ASSERT_TRUE(daemon_->daemon().waitExit(milliseconds(10000))) << daemon_->why();
    std::this_thread::sleep_for(milliseconds(1000));
    stopProbe.store(true);
    probe.join();
    EXPECT_GE(probes.load(), 4u);
    EXPECT_EQ(through.load(), 0u) << "a denied SYN got through during the upgrade";

    const unsigned programAfter = attachedProgram(ifindex);
    EXPECT_NE(programAfter, 0u) << "no program after the old process exited";
    EXPECT_NE(programAfter, programBefore) << "the new process's program is not the one running";
    EXPECT_EQ(xdpLinkOn(ifindex), linkBefore) << "the link was replaced";
    // The metrics are the new process's: its counter starts at zero and counted the probe.
    EXPECT_GE(denyDrops(), 1.0);
    auto list = daemon_->ctl({"xdp", "list"});
    EXPECT_NE(list.out.find(net_->clientAddress6() + "/128"), std::string::npos)
        << "the admin's rule was not handed over:\n" << list.out;
    int error = 0;
    UniqueFd allowed = connectFrom(net_->otherClientAddress(), kAllowedTimeout, error);
    ASSERT_TRUE(allowed) << std::strerror(error);
    EXPECT_TRUE(echoes(allowed.get(), 1 << 20));
    allowed.reset();

    ASSERT_EQ(successor.terminate(milliseconds(10000)), std::optional<int>(0));
    EXPECT_EQ(attachedProgram(ifindex), 0u) << "the program outlived the last daemon";
    EXPECT_TRUE(auditVerifies(daemon_->auditDir()));
}

// The new process swaps its program in before it binds its listeners; one that fails after that
// (a new route's address is taken) leaves the old process's program back on the link.
TEST_P(XdpUpgradeTest, AFailedUpgradeLeavesTheOldProgramOnTheLink) {
    ASSERT_NO_FATAL_FAILURE(startDaemon());
    const unsigned ifindex = net_->hostIndex();
    const unsigned programBefore = attachedProgram(ifindex);
    const unsigned linkBefore = xdpLinkOn(ifindex);
    uint16_t takenPort = 0;
    UniqueFd taken = listenTcp(takenPort);
    ASSERT_TRUE(taken);
    daemon_->writeConfig(configText() + routeSection("taken", loopback(takenPort),
                                                     {upstream_->endpoint()}));
    auto upgraded = daemon_->ctl({"upgrade"}, milliseconds(70000));
    ASSERT_TRUE(upgraded.status);
    EXPECT_TRUE(upgraded.status->isExit(1)) << show(upgraded);
    EXPECT_NE(daemon_->daemon().waitLogLines("this process's program runs on it now", 1,
                                             milliseconds(2000)),
              0u)
        << "the new process did not get as far as the swap" << daemon_->why();
    EXPECT_EQ(attachedProgram(ifindex), programBefore) << "the failed process's program runs";
    EXPECT_EQ(xdpLinkOn(ifindex), linkBefore);
    const double dropsBefore = denyDrops();
    int error = 0;
    EXPECT_FALSE(connectFrom(net_->clientAddress(), kProbeTimeout, error));
    EXPECT_EQ(error, ETIMEDOUT) << std::strerror(error);
    EXPECT_GT(denyDrops(), dropsBefore) << "the old process's program does not count any more";
    UniqueFd allowed = connectFrom(net_->otherClientAddress(), kAllowedTimeout, error);
    ASSERT_TRUE(allowed) << std::strerror(error);
    EXPECT_TRUE(echoes(allowed.get(), 1 << 20));
}

INSTANTIATE_TEST_SUITE_P(Modes, XdpUpgradeTest,
                         ::testing::Values(XdpAttachMode::Native, XdpAttachMode::Generic),
                         [](const ::testing::TestParamInfo<XdpAttachMode>& mode) {
                             return std::string(xdpAttachModeName(mode.param));
                         });

}  // namespace
}  // namespace splicegate::test
