// Daemon options (docs/configuration.md): defaults, command line, INI file, route sections and
// the one-line UsageError for every kind of bad input. Only loopback addresses and "localhost"
// are used, so nothing here needs a network beyond resolving localhost.
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/Error.h"
#include "relay/Config.h"
#include "relay/ListenerMatcher.h"
#include "tests/support/Sockets.h"

namespace splicegate {
namespace {

using Args = std::vector<std::string>;

CommandLine parseArgs(const Args& args) {
    std::vector<const char*> argv{"splicegate"};
    for (const auto& arg : args) argv.push_back(arg.c_str());
    return parseCommandLine(static_cast<int>(argv.size()), argv.data());
}

Config parseConfig(const Args& args) {
    auto result = parseArgs(args);
    EXPECT_EQ(result.action, CommandLine::Action::Run);
    return result.config;
}

// The smallest valid command line plus `extra`.
Args withDefaultRoute(Args extra = {}) {
    Args args{"--listen", "127.0.0.1:8443", "--upstream", "127.0.0.1:9000"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
}

using test::numericAddress;

std::vector<std::string> upstreamTexts(const RouteConfig& route) {
    std::vector<std::string> texts;
    for (const auto& upstream : route.upstreams) texts.push_back(upstream.text);
    return texts;
}

void replaceAll(std::string& text, const std::string& from, const std::string& to) {
    for (auto at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
        text.replace(at, from.size(), to);
}

// A private directory for config files, removed with everything in it at the end of the test.
class TempDir {
  public:
    TempDir() {
        std::string pattern = (std::filesystem::temp_directory_path() / "configtest.XXXXXX");
        if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
        path_ = pattern;
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    ~TempDir() {
        std::error_code ignored;  // a leftover temp dir must not turn into a test failure
        std::filesystem::remove_all(path_, ignored);
    }

    std::string write(const std::string& name, const std::string& content) const {
        auto file = path_ / name;
        std::ofstream(file) << content;
        return file.string();
    }
    std::string path() const { return path_.string(); }

  private:
    std::filesystem::path path_;
};

// ---- Command line -------------------------------------------------------------------------

TEST(ConfigTest, DefaultsMatchTheSpec) {
    auto config = parseConfig(withDefaultRoute());
    EXPECT_EQ(config.configFile, "");
    EXPECT_EQ(config.workers, 0u);
    EXPECT_EQ(config.admin.socket, "/run/splicegate/admin.sock");
    EXPECT_EQ(config.admin.group, "splicegate");
    EXPECT_EQ(config.metrics.listen, "127.0.0.1:9464");
    EXPECT_EQ(config.audit.dir, "/var/lib/splicegate/audit");
    EXPECT_EQ(config.audit.durability, AuditDurability::Batch);
    EXPECT_EQ(config.audit.fsyncIntervalMs, 50u);
    EXPECT_EQ(config.audit.onError, AuditOnError::FailClosed);
    EXPECT_EQ(config.audit.retentionBytes, 0u);
    EXPECT_EQ(config.audit.retentionHours, 0u);
    EXPECT_FALSE(config.datapath.spliceEngine.has_value());
    EXPECT_EQ(config.datapath.pipeSize, 1048576u);
    EXPECT_EQ(config.datapath.pipeBudgetBytes, 0u);
    EXPECT_EQ(config.relay.maxConnections, 65536u);
    EXPECT_EQ(config.relay.connectTimeoutMs, 5000u);
    EXPECT_EQ(config.relay.idleTimeoutMs, 3600000u);
    EXPECT_EQ(config.relay.halfClosedTimeoutMs, 60000u);
    EXPECT_EQ(config.relay.drainTimeoutMs, 30000u);
    EXPECT_EQ(config.relay.maxConnectionsPerSource, 0u);
    EXPECT_EQ(config.datapath.lane, LaneKind::Auto);
    EXPECT_EQ(config.datapath.bufferRingEntries, 4096u);
    EXPECT_EQ(config.datapath.bufferSize, 16384u);
    EXPECT_FALSE(config.datapath.sqpoll);
    EXPECT_TRUE(config.relay.delayedAck);
    EXPECT_EQ(config.relay.clientCongestion, "");  // the system's
    EXPECT_EQ(config.relay.upstreamCongestion, "");
    EXPECT_EQ(config.audit.writer, AuditWriterKind::Direct);
    EXPECT_EQ(config.audit.bufferBytes, 67108864u);
    EXPECT_EQ(config.audit.group, "");
    EXPECT_EQ(config.audit.hmacKeyFile, "");
    EXPECT_TRUE(config.relay.accessLog);
    EXPECT_EQ(config.admin.readonlyGroup, "");
    EXPECT_EQ(config.xdp.interface, "");
    EXPECT_EQ(config.xdp.mode, XdpMode::Auto);
    EXPECT_TRUE(config.xdp.deny.empty());
    EXPECT_TRUE(config.xdp.allow.empty());
    EXPECT_EQ(config.xdp.synRate, 0u);
    EXPECT_EQ(config.xdp.synBurst, 0u);
    EXPECT_EQ(config.logLevel, LogLevel::Info);
}

TEST(ConfigTest, ListenAndUpstreamMakeTheDefaultRoute) {
    auto config = parseConfig(withDefaultRoute());
    ASSERT_EQ(config.routes.size(), 1u);
    const auto& route = config.routes.front();
    EXPECT_EQ(route.name, "default");
    EXPECT_EQ(route.listen, numericAddress("127.0.0.1:8443"));
    ASSERT_EQ(route.upstreams.size(), 1u);
    EXPECT_EQ(route.upstreams[0].text, "127.0.0.1:9000");
    EXPECT_EQ(route.upstreams[0].addresses, std::vector{numericAddress("127.0.0.1:9000")});
    EXPECT_TRUE(route.audit);
}

TEST(ConfigTest, EveryOptionFromTheCommandLine) {
    // Both spellings: "--name value" and "--name=value".
    auto config = parseConfig(withDefaultRoute({"--workers",
                                                "4",
                                                "--admin-socket=/tmp/a.sock",
                                                "--admin-group",
                                                "wheel",
                                                "--metrics-listen=[::1]:9100",
                                                "--audit-dir",
                                                "/tmp/audit",
                                                "--audit-durability=strict",
                                                "--audit-fsync-interval-ms",
                                                "7",
                                                "--audit-on-error",
                                                "fail-open",
                                                "--audit-retention-bytes=1000000",
                                                "--audit-retention-hours",
                                                "48",
                                                "--splice-engine=inline",
                                                "--pipe-size",
                                                "65536",
                                                "--pipe-budget=8388608",
                                                "--max-connections",
                                                "10",
                                                "--connect-timeout-ms=250",
                                                "--idle-timeout-ms",
                                                "60000",
                                                "--half-closed-timeout-ms=1500",
                                                "--drain-timeout-ms=1",
                                                "--xdp-interface",
                                                "lo",
                                                "--xdp-mode=generic",
                                                "--xdp-deny",
                                                "10.0.0.0/8",
                                                "--xdp-allow=::1/128",
                                                "--xdp-syn-rate",
                                                "100",
                                                "--xdp-syn-burst=20",
                                                "--log-level",
                                                "debug",
                                                "--lane",
                                                "buffer",
                                                "--buffer-ring-entries=256",
                                                "--buffer-size",
                                                "4096",
                                                "--sqpoll",
                                                "--delayed-ack=off",
                                                "--audit-writer=splice",
                                                "--audit-buffer-bytes",
                                                "2097152",
                                                "--audit-group",
                                                "auditors",
                                                "--audit-hmac-key-file=/etc/key",
                                                "--access-log",
                                                "off",
                                                "--admin-readonly-group=viewers",
                                                "--max-connections-per-source",
                                                "3"}));
    EXPECT_EQ(config.workers, 4u);
    EXPECT_EQ(config.admin.socket, "/tmp/a.sock");
    EXPECT_EQ(config.admin.group, "wheel");
    EXPECT_EQ(config.metrics.listen, "[::1]:9100");
    EXPECT_EQ(config.audit.dir, "/tmp/audit");
    EXPECT_EQ(config.audit.durability, AuditDurability::Strict);
    EXPECT_EQ(config.audit.fsyncIntervalMs, 7u);
    EXPECT_EQ(config.audit.onError, AuditOnError::FailOpen);
    EXPECT_EQ(config.audit.retentionBytes, 1000000u);
    EXPECT_EQ(config.audit.retentionHours, 48u);
    EXPECT_EQ(config.datapath.spliceEngine, SpliceEngine::Inline);
    EXPECT_EQ(config.datapath.pipeSize, 65536u);
    EXPECT_EQ(config.datapath.pipeBudgetBytes, 8388608u);
    EXPECT_EQ(config.relay.maxConnections, 10u);
    EXPECT_EQ(config.relay.connectTimeoutMs, 250u);
    EXPECT_EQ(config.relay.idleTimeoutMs, 60000u);
    EXPECT_EQ(config.relay.halfClosedTimeoutMs, 1500u);
    EXPECT_EQ(config.relay.drainTimeoutMs, 1u);
    EXPECT_EQ(config.xdp.interface, "lo");
    EXPECT_EQ(config.xdp.mode, XdpMode::Generic);
    EXPECT_EQ(config.xdp.deny, std::vector<std::string>{"10.0.0.0/8"});
    EXPECT_EQ(config.xdp.allow, std::vector<std::string>{"::1/128"});
    EXPECT_EQ(config.xdp.synRate, 100u);
    EXPECT_EQ(config.xdp.synBurst, 20u);
    EXPECT_EQ(config.logLevel, LogLevel::Debug);
    EXPECT_EQ(config.datapath.lane, LaneKind::Buffer);
    EXPECT_EQ(config.datapath.bufferRingEntries, 256u);
    EXPECT_EQ(config.datapath.bufferSize, 4096u);
    EXPECT_TRUE(config.datapath.sqpoll);
    EXPECT_FALSE(config.relay.delayedAck);
    EXPECT_EQ(config.audit.writer, AuditWriterKind::Splice);
    EXPECT_EQ(config.audit.bufferBytes, 2097152u);
    EXPECT_EQ(config.audit.group, "auditors");
    EXPECT_EQ(config.audit.hmacKeyFile, "/etc/key");
    EXPECT_FALSE(config.relay.accessLog);
    EXPECT_EQ(config.admin.readonlyGroup, "viewers");
    EXPECT_EQ(config.relay.maxConnectionsPerSource, 3u);
}

TEST(ConfigTest, CheckConfigIsAnActionWithTheParsedConfig) {
    auto result = parseArgs(withDefaultRoute({"--check-config"}));
    EXPECT_EQ(result.action, CommandLine::Action::CheckConfig);
    EXPECT_EQ(result.config.routes.size(), 1u);
    EXPECT_EQ(parseArgs(withDefaultRoute()).action, CommandLine::Action::Run);
}

TEST(ConfigTest, SqpollTakesAnExplicitValue) {
    EXPECT_TRUE(parseConfig(withDefaultRoute({"--sqpoll=on"})).datapath.sqpoll);
    EXPECT_FALSE(parseConfig(withDefaultRoute({"--sqpoll=off"})).datapath.sqpoll);
}

TEST(ConfigTest, EveryEnumValueIsAccepted) {
    auto engine = [](const char* name) {
        return parseConfig(withDefaultRoute({"--splice-engine", name})).datapath.spliceEngine;
    };
    EXPECT_EQ(engine("chain"), SpliceEngine::Chain);
    EXPECT_EQ(engine("inline"), SpliceEngine::Inline);
    EXPECT_EQ(parseConfig(withDefaultRoute({"--audit-durability", "none"})).audit.durability,
              AuditDurability::None);
    EXPECT_EQ(parseConfig(withDefaultRoute({"--xdp-mode", "native"})).xdp.mode, XdpMode::Native);
    EXPECT_EQ(parseConfig(withDefaultRoute({"--log-level", "warn"})).logLevel, LogLevel::Warn);
    EXPECT_EQ(parseConfig(withDefaultRoute({"--log-level", "error"})).logLevel, LogLevel::Error);
    auto lane = [](const char* name) {
        return parseConfig(withDefaultRoute({"--lane", name})).datapath.lane;
    };
    EXPECT_EQ(lane("auto"), LaneKind::Auto);
    EXPECT_EQ(lane("splice"), LaneKind::Splice);
    EXPECT_EQ(lane("buffer"), LaneKind::Buffer);
    EXPECT_EQ(parseConfig(withDefaultRoute({"--audit-writer", "direct"})).audit.writer,
              AuditWriterKind::Direct);
    EXPECT_TRUE(parseConfig(withDefaultRoute({"--access-log", "on"})).relay.accessLog);
    EXPECT_TRUE(parseConfig(withDefaultRoute({"--delayed-ack", "on"})).relay.delayedAck);
    auto congestion = parseConfig(
        withDefaultRoute({"--client-tcp-congestion", "bbr", "--upstream-tcp-congestion", "cubic"}));
    EXPECT_EQ(congestion.relay.clientCongestion, "bbr");
    EXPECT_EQ(congestion.relay.upstreamCongestion, "cubic");
    EXPECT_STREQ(toString(LaneKind::Buffer), "buffer");
    EXPECT_STREQ(toString(AuditWriterKind::Splice), "splice");
}

TEST(ConfigTest, BufferRingEntriesAtTheirLimits) {
    EXPECT_EQ(parseConfig(withDefaultRoute({"--buffer-ring-entries", "1"})).datapath.bufferRingEntries, 1u);
    EXPECT_EQ(parseConfig(withDefaultRoute({"--buffer-ring-entries", "32768"})).datapath.bufferRingEntries,
              32768u);
}

TEST(ConfigTest, AnUnresolvableNameIsNotAConfigurationError) {
    // .invalid never resolves (RFC 6761): the daemon starts and retries the name.
    auto config = parseConfig({"--listen", "127.0.0.1:8443", "--upstream", "backend.invalid:80"});
    const auto& upstream = config.routes.at(0).upstreams.at(0);
    EXPECT_EQ(upstream.text, "backend.invalid:80");
    EXPECT_TRUE(upstream.addresses.empty());
    EXPECT_FALSE(upstream.resolveError.empty());
}

TEST(ConfigTest, SettingsNeedingRestartAreNamed) {
    auto running = parseConfig(withDefaultRoute());
    auto next = parseConfig(
        withDefaultRoute({"--workers", "3", "--idle-timeout-ms", "5", "--log-level", "debug",
                          "--xdp-deny", "10.0.0.0/8", "--audit-durability", "strict",
                          "--delayed-ack", "off", "--upstream-tcp-congestion", "reno"}));
    next.routes.at(0).audit = false;  // routes are applied by a reload
    EXPECT_EQ(settingsNeedingRestart(running, next),
              (std::vector<std::string>{"workers", "audit-durability", "delayed-ack",
                                        "upstream-tcp-congestion", "idle-timeout-ms"}));
    EXPECT_TRUE(settingsNeedingRestart(running, running).empty());
}

// ---- Upstreams that loop back into the daemon ------------------------------------------------

TEST(ListenerMatcherTest, ExactAndWildcardListenersAreReached) {
    ListenerMatcher matcher({numericAddress("192.0.2.5:0"), numericAddress("[2001:db8::5]:0")});
    EXPECT_TRUE(matcher.reaches(numericAddress("127.0.0.1:80"), numericAddress("127.0.0.1:80")));
    EXPECT_FALSE(matcher.reaches(numericAddress("127.0.0.1:81"), numericAddress("127.0.0.1:80")));
    EXPECT_TRUE(matcher.reaches(numericAddress("127.0.0.2:80"), numericAddress("0.0.0.0:80")));
    EXPECT_TRUE(matcher.reaches(numericAddress("192.0.2.5:80"), numericAddress("0.0.0.0:80")));
    EXPECT_FALSE(matcher.reaches(numericAddress("192.0.2.6:80"), numericAddress("0.0.0.0:80")));
    EXPECT_TRUE(matcher.reaches(numericAddress("0.0.0.0:80"), numericAddress("127.0.0.1:80")));
    EXPECT_TRUE(matcher.reaches(numericAddress("[::1]:80"), numericAddress("[::]:80")));
    EXPECT_TRUE(matcher.reaches(numericAddress("[2001:db8::5]:80"), numericAddress("[::]:80")));
    EXPECT_TRUE(matcher.reaches(numericAddress("[::ffff:127.0.0.1]:80"), numericAddress("0.0.0.0:80")));
    // IPv6 listeners are IPV6_V6ONLY: [::] does not take IPv4 connections.
    EXPECT_FALSE(matcher.reaches(numericAddress("127.0.0.1:80"), numericAddress("[::]:80")));
    // Another listener on the same port of a different specific address is another socket.
    EXPECT_FALSE(matcher.reaches(numericAddress("127.0.0.2:80"), numericAddress("127.0.0.1:80")));
}

TEST(ConfigTest, NumbersAtTheirLimitsAreAccepted) {
    auto config = parseConfig(withDefaultRoute(
        {"--pipe-size", "4096", "--workers", "1024", "--max-connections", "1",
         "--connect-timeout-ms", "4294967295", "--audit-retention-bytes", "18446744073709551615"}));
    EXPECT_EQ(config.datapath.pipeSize, 4096u);
    EXPECT_EQ(config.workers, 1024u);
    EXPECT_EQ(config.relay.maxConnections, 1u);
    EXPECT_EQ(config.relay.connectTimeoutMs, 4294967295u);
    EXPECT_EQ(config.audit.retentionBytes, 18446744073709551615u);
    EXPECT_EQ(parseConfig(withDefaultRoute({"--pipe-size", "1073741824"})).datapath.pipeSize, 1u << 30);
}

TEST(ConfigTest, XdpSynPrefixAndNewSourceOptions) {
    auto defaults = parseConfig(withDefaultRoute());
    EXPECT_EQ(defaults.xdp.synPrefixV4, 24u);
    EXPECT_EQ(defaults.xdp.synPrefixV6, 64u);
    EXPECT_EQ(defaults.xdp.synNewSourceRate, 1000u);
    EXPECT_EQ(defaults.xdp.synNewSourceBurst, 0u);
    auto config = parseConfig(
        withDefaultRoute({"--xdp-syn-prefix-v4", "32", "--xdp-syn-prefix-v6", "1",
                          "--xdp-syn-new-source-rate", "0", "--xdp-syn-new-source-burst", "5000"}));
    EXPECT_EQ(config.xdp.synPrefixV4, 32u);
    EXPECT_EQ(config.xdp.synPrefixV6, 1u);
    EXPECT_EQ(config.xdp.synNewSourceRate, 0u);
    EXPECT_EQ(config.xdp.synNewSourceBurst, 5000u);
    for (Args bad : {Args{"--xdp-syn-prefix-v4", "33"}, Args{"--xdp-syn-prefix-v4", "0"},
                     Args{"--xdp-syn-prefix-v6", "129"}, Args{"--xdp-syn-new-source-rate", "-1"}})
        EXPECT_THROW(parseConfig(withDefaultRoute(bad)), UsageError) << bad.front();
}

TEST(ConfigTest, ListenAcceptsBracketedIPv6) {
    auto config = parseConfig({"--listen", "[::1]:8443", "--upstream", "[::1]:9000"});
    ASSERT_EQ(config.routes.size(), 1u);
    EXPECT_EQ(config.routes[0].listen, numericAddress("[::1]:8443"));
    EXPECT_EQ(config.routes[0].listen.family(), AF_INET6);
}

TEST(ConfigTest, RepeatedUpstreamsKeepTheirOrder) {
    auto config = parseConfig({"--listen", "127.0.0.1:8443", "--upstream", "127.0.0.1:9002",
                               "--upstream=localhost:9001", "--upstream", "[::1]:9003"});
    EXPECT_EQ(upstreamTexts(config.routes.at(0)),
              (std::vector<std::string>{"127.0.0.1:9002", "localhost:9001", "[::1]:9003"}));
    const auto& resolved = config.routes[0].upstreams[1].addresses;
    ASSERT_FALSE(resolved.empty());
    for (const auto& address : resolved) EXPECT_EQ(address.port(), 9001u);
}

TEST(ConfigTest, CidrsAreNormalized) {
    auto config = parseConfig(
        withDefaultRoute({"--xdp-deny", "10.1.2.3/8", "--xdp-deny", "192.0.2.7", "--xdp-deny",
                          "2001:DB8::1/32", "--xdp-allow", "::1", "--xdp-allow", "0.0.0.0/0"}));
    EXPECT_EQ(config.xdp.deny,
              (std::vector<std::string>{"10.0.0.0/8", "192.0.2.7/32", "2001:db8::/32"}));
    EXPECT_EQ(config.xdp.allow, (std::vector<std::string>{"::1/128", "0.0.0.0/0"}));
}

TEST(ConfigTest, EmptyValuesTurnFeaturesOff) {
    auto config =
        parseConfig(withDefaultRoute({"--admin-socket=", "--audit-dir", "", "--metrics-listen="}));
    EXPECT_EQ(config.admin.socket, "");
    EXPECT_EQ(config.audit.dir, "");
    EXPECT_EQ(config.metrics.listen, "");
}

TEST(ConfigTest, HelpDescribesEveryOption) {
    for (const char* flag : {"--help", "-h"}) {
        auto result = parseArgs({flag});  // no route needed to ask for help
        EXPECT_EQ(result.action, CommandLine::Action::Help) << flag;
        EXPECT_EQ(result.helpText.rfind("Usage: splicegate [OPTIONS]", 0), 0u) << flag;
        for (const char* option : {"--config", "--listen", "--upstream", "--workers",
                                   "--pipe-budget", "--xdp-deny", "--log-level", "[route.NAME]"})
            EXPECT_NE(result.helpText.find(option), std::string::npos) << option;
    }
}

TEST(ConfigTest, VersionAction) {
    EXPECT_EQ(parseArgs({"--version"}).action, CommandLine::Action::Version);
}

TEST(ConfigTest, SpliceEngineNames) {
    EXPECT_STREQ(toString(SpliceEngine::Chain), "chain");
    EXPECT_STREQ(toString(SpliceEngine::Inline), "inline");
}

TEST(ConfigTest, RouteEqualityComparesEveryField) {
    auto route = parseConfig(withDefaultRoute()).routes.at(0);
    auto same = route;
    EXPECT_TRUE(route == same);
    auto otherName = route;
    otherName.name = "other";
    EXPECT_FALSE(route == otherName);
    auto noAudit = route;
    noAudit.audit = false;
    EXPECT_FALSE(route == noAudit);
    auto otherListen = route;
    otherListen.listen = numericAddress("127.0.0.1:1");
    EXPECT_FALSE(route == otherListen);
    auto otherUpstream = route;
    otherUpstream.upstreams[0].addresses = {numericAddress("127.0.0.1:1")};
    EXPECT_FALSE(route == otherUpstream);
}

// ---- Config file ---------------------------------------------------------------------------

class ConfigFileTest : public ::testing::Test {
  protected:
    TempDir dir_;
};

TEST_F(ConfigFileTest, EveryOptionFromTheFile) {
    auto file = dir_.write("all.conf", R"(# every option as a key
listen = 127.0.0.1:8443
upstream = 127.0.0.1:9000
workers=3
admin-socket = /tmp/admin.sock
admin-group = adm
metrics-listen = 127.0.0.1:9200
audit-dir = /tmp/audit
audit-durability = none
audit-fsync-interval-ms = 9
audit-on-error = fail-open
audit-retention-bytes = 5
audit-retention-hours = 6
splice-engine = chain
pipe-size = 8192
pipe-budget = 16384
max-connections = 11
connect-timeout-ms = 12
idle-timeout-ms = 13
drain-timeout-ms = 14
xdp-interface = lo
xdp-mode = native
xdp-deny = 10.0.0.0/8
xdp-deny = 172.16.0.0/12
xdp-allow = 10.1.0.0/16
xdp-syn-rate = 15
xdp-syn-burst = 16
log-level = warn
)");
    auto config = parseConfig({"--config", file});
    EXPECT_EQ(config.configFile, file);
    ASSERT_EQ(config.routes.size(), 1u);
    EXPECT_EQ(config.routes[0].name, "default");
    EXPECT_EQ(config.routes[0].listen, numericAddress("127.0.0.1:8443"));
    EXPECT_EQ(upstreamTexts(config.routes[0]), std::vector<std::string>{"127.0.0.1:9000"});
    EXPECT_EQ(config.workers, 3u);
    EXPECT_EQ(config.admin.socket, "/tmp/admin.sock");
    EXPECT_EQ(config.admin.group, "adm");
    EXPECT_EQ(config.metrics.listen, "127.0.0.1:9200");
    EXPECT_EQ(config.audit.dir, "/tmp/audit");
    EXPECT_EQ(config.audit.durability, AuditDurability::None);
    EXPECT_EQ(config.audit.fsyncIntervalMs, 9u);
    EXPECT_EQ(config.audit.onError, AuditOnError::FailOpen);
    EXPECT_EQ(config.audit.retentionBytes, 5u);
    EXPECT_EQ(config.audit.retentionHours, 6u);
    EXPECT_EQ(config.datapath.spliceEngine, SpliceEngine::Chain);
    EXPECT_EQ(config.datapath.pipeSize, 8192u);
    EXPECT_EQ(config.datapath.pipeBudgetBytes, 16384u);
    EXPECT_EQ(config.relay.maxConnections, 11u);
    EXPECT_EQ(config.relay.connectTimeoutMs, 12u);
    EXPECT_EQ(config.relay.idleTimeoutMs, 13u);
    EXPECT_EQ(config.relay.drainTimeoutMs, 14u);
    EXPECT_EQ(config.xdp.interface, "lo");
    EXPECT_EQ(config.xdp.mode, XdpMode::Native);
    EXPECT_EQ(config.xdp.deny, (std::vector<std::string>{"10.0.0.0/8", "172.16.0.0/12"}));
    EXPECT_EQ(config.xdp.allow, std::vector<std::string>{"10.1.0.0/16"});
    EXPECT_EQ(config.xdp.synRate, 15u);
    EXPECT_EQ(config.xdp.synBurst, 16u);
    EXPECT_EQ(config.logLevel, LogLevel::Warn);
}

TEST_F(ConfigFileTest, CommandLineBeatsTheFile) {
    auto file = dir_.write("base.conf",
                           "listen = 127.0.0.1:8443\n"
                           "upstream = 127.0.0.1:9001\nupstream = 127.0.0.1:9002\n"
                           "workers = 2\nlog-level = error\nxdp-deny = 10.0.0.0/8\n");
    auto config = parseConfig({"--config", file, "--workers", "5", "--upstream", "127.0.0.1:9009",
                               "--xdp-deny=192.0.2.0/24"});
    EXPECT_EQ(config.workers, 5u);
    EXPECT_EQ(config.logLevel, LogLevel::Error);  // only in the file: the file's value holds
    EXPECT_EQ(config.routes.at(0).listen, numericAddress("127.0.0.1:8443"));
    // A repeatable option on the command line replaces the file's values rather than adding.
    EXPECT_EQ(upstreamTexts(config.routes[0]), std::vector<std::string>{"127.0.0.1:9009"});
    EXPECT_EQ(config.xdp.deny, std::vector<std::string>{"192.0.2.0/24"});
}

TEST_F(ConfigFileTest, FileUpstreamsKeepTheirOrder) {
    auto file = dir_.write("order.conf",
                           "listen = 127.0.0.1:8443\nupstream = 127.0.0.1:9003\n"
                           "upstream = 127.0.0.1:9001\nupstream = 127.0.0.1:9002\n");
    EXPECT_EQ(upstreamTexts(parseConfig({"--config", file}).routes.at(0)),
              (std::vector<std::string>{"127.0.0.1:9003", "127.0.0.1:9001", "127.0.0.1:9002"}));
}

TEST_F(ConfigFileTest, RouteHealthCheckInterval) {
    auto file = dir_.write("health.conf",
                           "[route.web]\nlisten = 127.0.0.1:8080\nupstream = 127.0.0.1:80\n"
                           "health-check-interval-ms = 2000\n");
    auto config = parseConfig({"--config", file});
    EXPECT_EQ(config.routes.at(0).healthCheckIntervalMs, 2000u);
    EXPECT_EQ(parseConfig(withDefaultRoute()).routes.at(0).healthCheckIntervalMs, 0u);
}

TEST_F(ConfigFileTest, RouteSectionsFollowTheDefaultRouteInFileOrder) {
    auto file = dir_.write("routes.conf", R"(
[route.web]
listen = 127.0.0.1:8080
upstream = 127.0.0.1:80
upstream = localhost:81

[route.db-2]   # audit off for this one
listen = [::1]:5432
upstream = [::1]:15432
audit = false
)");
    auto config = parseConfig(withDefaultRoute({"--config", file}));
    ASSERT_EQ(config.routes.size(), 3u);
    EXPECT_EQ(config.routes[0].name, "default");
    EXPECT_EQ(config.routes[1].name, "web");
    EXPECT_EQ(config.routes[1].listen, numericAddress("127.0.0.1:8080"));
    EXPECT_EQ(upstreamTexts(config.routes[1]),
              (std::vector<std::string>{"127.0.0.1:80", "localhost:81"}));
    EXPECT_TRUE(config.routes[1].audit);
    EXPECT_EQ(config.routes[2].name, "db-2");
    EXPECT_EQ(config.routes[2].listen, numericAddress("[::1]:5432"));
    EXPECT_FALSE(config.routes[2].audit);
}

TEST_F(ConfigFileTest, RouteAuditAcceptsEveryBooleanSpelling) {
    for (auto [text, expected] : {std::pair{"true", true},
                                  {"yes", true},
                                  {"1", true},
                                  {"false", false},
                                  {"no", false},
                                  {"0", false}}) {
        auto file = dir_.write("bool.conf", std::string("[route.r]\nlisten = 127.0.0.1:8080\n"
                                                        "upstream = 127.0.0.1:80\naudit = ") +
                                                text + "\n");
        EXPECT_EQ(parseConfig({"--config", file}).routes.at(0).audit, expected) << text;
    }
}

TEST_F(ConfigFileTest, SectionRouteMayBeNamedDefaultWithoutListenOption) {
    auto file = dir_.write("default.conf",
                           "[route.default]\nlisten = 127.0.0.1:8080\nupstream = 127.0.0.1:80\n");
    auto config = parseConfig({"--config", file});
    ASSERT_EQ(config.routes.size(), 1u);
    EXPECT_EQ(config.routes[0].name, "default");
}

TEST_F(ConfigFileTest, LoadConfigRereadsTheFile) {
    auto file = dir_.write("reload.conf", "listen = 127.0.0.1:8443\nupstream = 127.0.0.1:9000\n");
    Args args{"--config", file, "--workers", "2"};
    EXPECT_EQ(loadConfig(args).routes.size(), 1u);
    dir_.write("reload.conf",
               "listen = 127.0.0.1:8443\nupstream = 127.0.0.1:9000\n"
               "[route.web]\nlisten = 127.0.0.1:8080\nupstream = 127.0.0.1:80\n");
    auto reloaded = loadConfig(args);
    ASSERT_EQ(reloaded.routes.size(), 2u);
    EXPECT_EQ(reloaded.routes[1].name, "web");
    EXPECT_EQ(reloaded.workers, 2u);
}

// ---- Every problem of a file at once, each naming file, line and key ------------------------

std::vector<std::string> problemsOf(const Args& args) {
    try {
        parseArgs(args);
    } catch (const ConfigErrors& errors) {
        return errors.problems();
    }
    ADD_FAILURE() << "no ConfigErrors";
    return {};
}

TEST_F(ConfigFileTest, EveryProblemOfTheFileIsReportedWithItsLine) {
    auto file = dir_.write("many.conf",
                           "workers = many\n"                    // 1: bad value
                           "colour = red\n"                      // 2: unknown key
                           "log-level = loud\n"                  // 3: bad choice
                           "not a key\n"                         // 4: malformed
                           "[route.web]\n"                       // 5
                           "listen = 127.0.0.1:8080\n"           // 6
                           "upstream = 127.0.0.1:80\n"           // 7
                           "shape = round\n"                     // 8: unknown route key
                           "[route.api]\n"                       // 9
                           "listen = 127.0.0.1:0\n"              // 10: bad listen
                           "upstream = 127.0.0.1:81\n"           // 11
                           "health-check-interval-ms = often\n"  // 12: bad number
                           "[route.web]\n"                       // 13: duplicate section
                           "listen = 127.0.0.1:8081\n"           // 14: not merged
                           "[global]\n"                          // 15: unknown section
                           "audit-durability = sometimes\n");    // 16: not a top-level key here
    auto problems = problemsOf({"--config", file});
    const std::vector<std::string> expected = {
        file + ":1: workers: invalid value 'many'",
        file + ":2: unknown key 'colour'",
        file + ":3: log-level: invalid value 'loud'",
        file + ":4: malformed line 'not a key'",
        file + ":8: route 'web': unknown key 'shape'",
        file + ":10: route 'api': listen: invalid address '127.0.0.1:0'",
        file + ":12: route 'api': health-check-interval-ms: invalid value 'often'",
        file + ":13: section [route.web] given twice (first at line 5)",
        file + ":15: unknown section '[global]'",
    };
    ASSERT_EQ(problems.size(), expected.size()) << ::testing::PrintToString(problems);
    for (std::size_t i = 0; i < expected.size(); ++i) {
        EXPECT_EQ(problems[i].rfind(expected[i], 0), 0u) << problems[i];
        EXPECT_EQ(problems[i].find('\n'), std::string::npos) << problems[i];
    }
}

TEST_F(ConfigFileTest, DuplicateSectionIsAnErrorNotAMerge) {
    auto file = dir_.write("dup.conf",
                           "[route.web]\nlisten = 127.0.0.1:8080\n"
                           "[route.web]\nupstream = 127.0.0.1:80\n");
    auto problems = problemsOf({"--config", file});
    // The second section's keys are not merged into the first: that one lacks its upstream.
    ASSERT_EQ(problems.size(), 2u) << ::testing::PrintToString(problems);
    EXPECT_EQ(problems[0], file + ":1: route 'web': missing upstream");
    EXPECT_EQ(problems[1], file + ":3: section [route.web] given twice (first at line 1); "
                                  "merge the two");
}

TEST_F(ConfigFileTest, KeyGivenTwiceNamesBothLines) {
    auto file = dir_.write("twice.conf",
                           "listen = 127.0.0.1:8443\nupstream = 127.0.0.1:9000\n"
                           "workers = 1\n\nworkers = 2\n"
                           "[route.web]\nlisten = 127.0.0.1:1\nupstream = 127.0.0.1:2\n"
                           "upstream = 127.0.0.1:3\nlisten = 127.0.0.1:4\n");
    auto problems = problemsOf({"--config", file});
    ASSERT_EQ(problems.size(), 2u) << ::testing::PrintToString(problems);
    EXPECT_EQ(problems[0], file + ":5: workers given twice (first at line 3)");
    EXPECT_EQ(problems[1], file + ":10: route 'web': listen given twice (first at line 7)");
}

TEST_F(ConfigFileTest, AValidFileStillParsesAfterTheRestructure) {
    auto file = dir_.write("ok.conf",
                           "# comment\nworkers = 2 # trailing comment\n\n"
                           "[route.web]\n  listen = 127.0.0.1:8080  \nupstream=127.0.0.1:80\n"
                           "upstream = 127.0.0.1:81\naudit = no\n");
    auto config = parseConfig({"--config", file});
    EXPECT_EQ(config.workers, 2u);
    ASSERT_EQ(config.routes.size(), 1u);
    EXPECT_EQ(upstreamTexts(config.routes[0]),
              (std::vector<std::string>{"127.0.0.1:80", "127.0.0.1:81"}));
    EXPECT_FALSE(config.routes[0].audit);
}

// ---- Bad input: one UsageError whose single line names the option/key and the value --------

struct BadInput {
    const char* name;                   // test name suffix
    Args args;                          // "@DIR@" is the temp dir
    const char* file;                   // nullptr: no --config; otherwise its content
    std::vector<std::string> expected;  // fragments of the message; "@FILE@" is the file path
};

void PrintTo(const BadInput& input, std::ostream* out) {
    *out << input.name;
}

class BadInputTest : public ::testing::TestWithParam<BadInput> {
  protected:
    TempDir dir_;
};

TEST_P(BadInputTest, IsAUsageErrorNamingTheCulprit) {
    const auto& input = GetParam();
    Args args = input.args;
    std::string file;
    if (input.file != nullptr) {
        file = dir_.write("bad.conf", input.file);
        args.insert(args.begin(), {"--config", file});
    }
    for (auto& arg : args) replaceAll(arg, "@DIR@", dir_.path());
    try {
        parseArgs(args);
        FAIL() << "no error for " << input.name;
    } catch (const UsageError& error) {
        std::string message = error.what();
        EXPECT_EQ(message.find('\n'), std::string::npos) << message;
        for (auto fragment : input.expected) {
            replaceAll(fragment, "@FILE@", file);
            EXPECT_NE(message.find(fragment), std::string::npos)
                << "'" << fragment << "' not in: " << message;
        }
    }
}

const Args kRoute{"--listen", "127.0.0.1:8443", "--upstream", "127.0.0.1:9000"};

Args routeAnd(Args extra) {
    extra.insert(extra.end(), kRoute.begin(), kRoute.end());
    return extra;
}

const BadInput kBadInputs[] = {
    // Unknown names.
    {"UnknownOption", routeAnd({"--colour", "red"}), nullptr, {"--colour"}},
    {"AbbreviatedOption", routeAnd({"--work", "2"}), nullptr, {"--work"}},
    {"StrayArgument", routeAnd({"stray"}), nullptr, {"stray"}},
    {"UnknownFileKey", kRoute, "foo = 1\n", {"@FILE@", "unknown key 'foo'"}},
    {"CommandLineOnlyKeyInFile", kRoute, "config = /etc/other.conf\n", {"@FILE@", "'config'"}},
    {"UnknownRouteKey",
     {},
     "[route.web]\nlisten = 127.0.0.1:8080\ncolour = red\n",
     {"@FILE@", "route 'web'", "colour"}},
    {"UnknownSection", kRoute, "[global]\nworkers = 1\n", {"@FILE@", "global"}},
    {"MalformedLine", kRoute, "workers 2\n", {"@FILE@", "workers 2"}},
    {"ScalarTwice", routeAnd({"--workers", "1", "--workers", "2"}), nullptr, {"workers"}},
    {"ScalarTwiceInFile", kRoute, "log-level = info\nlog-level = warn\n", {"@FILE@", "log-level"}},
    // Listen addresses.
    {"ListenWithoutPort",
     {"--listen", "127.0.0.1", "--upstream", "127.0.0.1:80"},
     nullptr,
     {"--listen", "'127.0.0.1'"}},
    {"ListenPortZero",
     {"--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:80"},
     nullptr,
     {"--listen", "127.0.0.1:0"}},
    {"ListenPortTooBig",
     {"--listen", "127.0.0.1:70000", "--upstream", "127.0.0.1:80"},
     nullptr,
     {"--listen", "127.0.0.1:70000"}},
    {"ListenHostname",
     {"--listen", "localhost:8443", "--upstream", "127.0.0.1:80"},
     nullptr,
     {"--listen", "localhost:8443"}},
    {"ListenBareIPv6",
     {"--listen", "::1:8443", "--upstream", "127.0.0.1:80"},
     nullptr,
     {"--listen", "::1:8443"}},
    {"RouteListenPortZero",
     {},
     "[route.web]\nlisten = 127.0.0.1:0\nupstream = 127.0.0.1:80\n",
     {"@FILE@", "route 'web'", "listen", "127.0.0.1:0"}},
    {"MetricsListenHostname",
     routeAnd({"--metrics-listen", "localhost:9464"}),
     nullptr,
     {"--metrics-listen", "localhost:9464"}},
    // Upstreams and route completeness.
    {"UpstreamWithoutPort",
     {"--listen", "127.0.0.1:8443", "--upstream", "localhost"},
     nullptr,
     {"--upstream", "localhost"}},
    {"UpstreamPortZero",
     {"--listen", "127.0.0.1:8443", "--upstream", "127.0.0.1:0"},
     nullptr,
     {"--upstream", "127.0.0.1:0"}},
    {"ListenWithoutUpstream", {"--listen", "127.0.0.1:8443"}, nullptr, {"--listen", "upstream"}},
    {"UpstreamWithoutListen", {"--upstream", "127.0.0.1:80"}, nullptr, {"--upstream", "listen"}},
    {"NoRoute", {}, nullptr, {"no route configured", "--listen", "[route.NAME]"}},
    {"NoRouteInFile", {}, "workers = 1\n", {"no route configured"}},
    {"DuplicateListen",
     kRoute,
     "[route.web]\nlisten = 127.0.0.1:8443\nupstream = 127.0.0.1:80\n",
     {"127.0.0.1:8443", "'default'", "'web'"}},
    {"DuplicateListenInSections",
     {},
     "[route.a]\nlisten = [::1]:8080\nupstream = [::1]:80\n"
     "[route.b]\nlisten = [::1]:8080\nupstream = [::1]:81\n",
     {"[::1]:8080", "'a'", "'b'"}},
    {"DefaultSectionWithListenOption",
     kRoute,
     "[route.default]\nlisten = 127.0.0.1:8080\nupstream = 127.0.0.1:80\n",
     {"@FILE@", "route 'default'", "--listen"}},
    {"BadRouteName",
     {},
     "[route.bad name]\nlisten = 127.0.0.1:8080\nupstream = 127.0.0.1:80\n",
     {"@FILE@", "'bad name'"}},
    {"EmptyRouteName", {}, "[route.]\nlisten = 127.0.0.1:8080\n", {"@FILE@", "route name ''"}},
    {"RouteNameTooLong",
     {},
     "[route.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa]\n"
     "listen = 127.0.0.1:8080\nupstream = 127.0.0.1:80\n",
     {"@FILE@", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}},
    {"EmptyRouteSection", kRoute, "[route.web]\n", {"@FILE@", "route 'web'", "empty"}},
    {"RouteWithoutUpstream",
     {},
     "[route.web]\nlisten = 127.0.0.1:8080\n",
     {"route 'web'", "upstream"}},
    {"RouteWithoutListen", {}, "[route.web]\nupstream = 127.0.0.1:80\n", {"route 'web'", "listen"}},
    {"RouteListenTwice",
     {},
     "[route.web]\nlisten = 127.0.0.1:1\nlisten = 127.0.0.1:2\n",
     {"route 'web'", "listen"}},
    // Enumerations.
    {"BadDurability",
     routeAnd({"--audit-durability", "sometimes"}),
     nullptr,
     {"--audit-durability", "'sometimes'", "strict, batch or none"}},
    {"BadOnError", routeAnd({"--audit-on-error=ignore"}), nullptr, {"--audit-on-error", "ignore"}},
    {"BadSpliceEngine",
     routeAnd({"--splice-engine", "turbo"}),
     nullptr,
     {"--splice-engine", "turbo"}},
    {"BadXdpMode", routeAnd({"--xdp-mode", "offload"}), nullptr, {"--xdp-mode", "offload"}},
    {"BadLogLevel", routeAnd({"--log-level", "verbose"}), nullptr, {"--log-level", "verbose"}},
    {"BadLogLevelInFile", kRoute, "log-level = loud\n", {"@FILE@", "log-level", "loud"}},
    {"BadRouteAudit",
     {},
     "[route.web]\nlisten = 127.0.0.1:8080\nupstream = 127.0.0.1:80\naudit = maybe\n",
     {"route 'web'", "audit", "maybe"}},
    // Numbers.
    {"NegativeWorkers", routeAnd({"--workers=-1"}), nullptr, {"--workers", "-1"}},
    {"NegativeAsSeparateToken", routeAnd({"--workers", "-1"}), nullptr, {"--workers"}},
    {"NegativeInFile", kRoute, "max-connections = -5\n", {"@FILE@", "max-connections", "-5"}},
    {"NonNumeric", routeAnd({"--pipe-size", "1MiB"}), nullptr, {"--pipe-size", "1MiB"}},
    {"TrailingGarbage",
     routeAnd({"--connect-timeout-ms", "12x"}),
     nullptr,
     {"--connect-timeout-ms", "12x"}},
    {"PlusSign", routeAnd({"--idle-timeout-ms", "+5"}), nullptr, {"--idle-timeout-ms", "+5"}},
    {"EmptyNumber", routeAnd({"--drain-timeout-ms="}), nullptr, {"--drain-timeout-ms"}},
    {"Overflow64",
     routeAnd({"--audit-retention-bytes", "99999999999999999999"}),
     nullptr,
     {"--audit-retention-bytes", "99999999999999999999"}},
    {"Overflow32",
     routeAnd({"--idle-timeout-ms", "4294967296"}),
     nullptr,
     {"--idle-timeout-ms", "4294967296"}},
    {"PipeSizeTooSmall", routeAnd({"--pipe-size", "4095"}), nullptr, {"--pipe-size", "4095"}},
    {"PipeSizeTooBig",
     routeAnd({"--pipe-size", "1073741825"}),
     nullptr,
     {"--pipe-size", "1073741825"}},
    {"ZeroMaxConnections",
     routeAnd({"--max-connections", "0"}),
     nullptr,
     {"--max-connections", "'0'"}},
    {"TooManyWorkers", routeAnd({"--workers", "1025"}), nullptr, {"--workers", "1025"}},
    {"ZeroFsyncInterval",
     routeAnd({"--audit-fsync-interval-ms", "0"}),
     nullptr,
     {"--audit-fsync-interval-ms", "'0'"}},
    // CIDRs.
    {"CidrLengthTooBig",
     routeAnd({"--xdp-deny", "10.0.0.0/33"}),
     nullptr,
     {"--xdp-deny", "10.0.0.0/33"}},
    {"CidrShortAddress", routeAnd({"--xdp-deny", "1.2.3/8"}), nullptr, {"--xdp-deny", "1.2.3/8"}},
    {"CidrV6LengthTooBig",
     routeAnd({"--xdp-allow", "::1/129"}),
     nullptr,
     {"--xdp-allow", "::1/129"}},
    {"CidrGarbage", routeAnd({"--xdp-deny", "garbage"}), nullptr, {"--xdp-deny", "garbage"}},
    {"CidrEmptyLength",
     routeAnd({"--xdp-deny", "10.0.0.0/"}),
     nullptr,
     {"--xdp-deny", "10.0.0.0/"}},
    {"CidrInFile", kRoute, "xdp-allow = 10.0.0.0/99\n", {"@FILE@", "xdp-allow", "10.0.0.0/99"}},
    // Strings and files.
    {"XdpInterfaceTooLong",
     routeAnd({"--xdp-interface", "a-very-long-interface"}),
     nullptr,
     {"--xdp-interface", "a-very-long-interface"}},
    {"MissingFile",
     routeAnd({"--config", "@DIR@/missing.conf"}),
     nullptr,
     {"missing.conf", "No such file or directory"}},
    {"FileIsADirectory", routeAnd({"--config", "@DIR@"}), nullptr, {"is not a regular file"}},
    // Operator options.
    {"BadLane",
     routeAnd({"--lane", "fast"}),
     nullptr,
     {"--lane", "'fast'", "auto, splice or buffer"}},
    {"RingEntriesNotPowerOfTwo",
     routeAnd({"--buffer-ring-entries", "1000"}),
     nullptr,
     {"--buffer-ring-entries", "'1000'", "power of two"}},
    {"RingEntriesZero",
     routeAnd({"--buffer-ring-entries", "0"}),
     nullptr,
     {"--buffer-ring-entries", "'0'"}},
    {"RingEntriesTooMany",
     routeAnd({"--buffer-ring-entries", "65536"}),
     nullptr,
     {"--buffer-ring-entries", "65536"}},
    {"BufferSizeTooSmall", routeAnd({"--buffer-size", "100"}), nullptr, {"--buffer-size", "100"}},
    {"BadSqpoll", routeAnd({"--sqpoll=maybe"}), nullptr, {"--sqpoll", "maybe"}},
    {"BadSqpollInFile", kRoute, "sqpoll = sometimes\n", {"@FILE@", "sqpoll", "sometimes"}},
    {"BadAuditWriter",
     routeAnd({"--audit-writer", "mmap"}),
     nullptr,
     {"--audit-writer", "'mmap'", "direct or splice"}},
    {"AuditBufferTooSmall",
     routeAnd({"--audit-buffer-bytes", "4096"}),
     nullptr,
     {"--audit-buffer-bytes", "4096"}},
    {"EmptyHmacKeyFile",
     routeAnd({"--audit-hmac-key-file="}),
     nullptr,
     {"--audit-hmac-key-file", "empty"}},
    {"BadAccessLog", routeAnd({"--access-log", "loud"}), nullptr, {"--access-log", "'loud'"}},
    {"BadDelayedAck",
     routeAnd({"--delayed-ack", "sometimes"}),
     nullptr,
     {"--delayed-ack", "'sometimes'"}},
    {"BadDelayedAckInFile", kRoute, "delayed-ack = 2\n", {"@FILE@", "delayed-ack", "2"}},
    {"CongestionNameWithSpace",
     routeAnd({"--client-tcp-congestion", "tcp cubic"}),
     nullptr,
     {"--client-tcp-congestion", "'tcp cubic'"}},
    {"CongestionNameTooLong",
     routeAnd({"--upstream-tcp-congestion", "abcdefghijklmnop"}),
     nullptr,
     {"--upstream-tcp-congestion", "at most 15"}},
    {"BadCongestionNameInFile",
     kRoute,
     "upstream-tcp-congestion = c/ubic\n",
     {"@FILE@", "upstream-tcp-congestion", "'c/ubic'"}},
    {"NegativePerSource",
     routeAnd({"--max-connections-per-source", "-1"}),
     nullptr,
     {"--max-connections-per-source"}},
    {"CheckConfigInFile", kRoute, "check-config = 1\n", {"@FILE@", "check-config"}},
    // An upstream that is the daemon's own listener.
    {"UpstreamIsOwnListener",
     {"--listen", "127.0.0.1:8443", "--upstream", "127.0.0.1:8443"},
     nullptr,
     {"--upstream", "127.0.0.1:8443", "own listener", "'default'"}},
    {"UpstreamIsWildcardListener",
     {"--listen", "0.0.0.0:8443", "--upstream", "127.0.0.1:8443"},
     nullptr,
     {"--upstream", "127.0.0.1:8443", "own listener"}},
    {"UpstreamIsV6WildcardListener",
     {"--listen", "[::]:8443", "--upstream", "[::1]:8443"},
     nullptr,
     {"--upstream", "[::1]:8443", "own listener"}},
    {"UpstreamIsAnotherRoutesListener",
     kRoute,
     "[route.web]\nlisten = 127.0.0.1:8080\nupstream = 127.0.0.1:8443\n",
     {"@FILE@", "route 'web'", "127.0.0.1:8443", "route 'default'"}},
    {"RouteHealthCheckNotANumber",
     {},
     "[route.web]\nlisten = 127.0.0.1:8080\nupstream = 127.0.0.1:80\nhealth-check-interval-ms = "
     "often\n",
     {"@FILE@", "route 'web'", "health-check-interval-ms", "often"}},
    {"UpstreamNameIsOwnListener",
     {"--listen", "127.0.0.1:8443", "--upstream", "localhost:8443"},
     nullptr,
     {"--upstream", "localhost:8443", "own listener"}},
};

INSTANTIATE_TEST_SUITE_P(ConfigTest, BadInputTest, ::testing::ValuesIn(kBadInputs),
                         [](const auto& param) { return std::string(param.param.name); });

}  // namespace
}  // namespace splicegate

namespace splicegate {
namespace {

// ---- Per-route settings and weighted upstreams ----------------------------------------------

TEST_F(ConfigFileTest, RouteOverridesAndWeightedUpstreams) {
    auto file = dir_.write("routes.conf", R"(idle-timeout-ms = 9000
[route.web]
listen = 127.0.0.1:8080
upstream = 127.0.0.1:80 weight=3
upstream = 127.0.0.1:81
upstream = 127.0.0.1:82 backup weight=2
idle-timeout-ms = 1500
half-closed-timeout-ms = 700
connect-timeout-ms = 250
max-connections = 10
max-connections-per-source = 0
upstream-tcp-congestion = reno
[route.plain]
listen = 127.0.0.1:8081
upstream = 127.0.0.1:90
)");
    auto config = parseConfig({"--config", file});
    ASSERT_EQ(config.routes.size(), 2u);
    const auto& web = config.routes[0];
    ASSERT_EQ(web.upstreams.size(), 3u);
    EXPECT_EQ(web.upstreams[0].text, "127.0.0.1:80");
    EXPECT_EQ(web.upstreams[0].weight, 3u);
    EXPECT_FALSE(web.upstreams[0].backup);
    EXPECT_EQ(web.upstreams[1].weight, 1u);
    EXPECT_TRUE(web.upstreams[2].backup);
    EXPECT_EQ(web.upstreams[2].weight, 2u);
    EXPECT_EQ(web.overrides.idleTimeoutMs, 1500u);
    EXPECT_EQ(web.overrides.halfClosedTimeoutMs, 700u);
    EXPECT_EQ(web.overrides.connectTimeoutMs, 250u);
    EXPECT_EQ(web.overrides.maxConnections, 10u);
    EXPECT_EQ(web.overrides.maxConnectionsPerSource, 0u);
    EXPECT_EQ(web.overrides.upstreamCongestion, "reno");
    auto settings = effectiveRouteSettings(web.overrides, config.relay);
    EXPECT_EQ(settings.idleTimeoutMs, 1500u);
    EXPECT_TRUE(settings.ownSourceLimit);
    EXPECT_EQ(settings.upstreamCongestion, "reno");
    // A route without its own values runs with the global ones.
    const auto& plain = config.routes[1];
    EXPECT_TRUE(plain.overrides == RouteOverrides{});
    auto global = effectiveRouteSettings(plain.overrides, config.relay);
    EXPECT_EQ(global.idleTimeoutMs, 9000u);
    EXPECT_EQ(global.connectTimeoutMs, config.relay.connectTimeoutMs);
    EXPECT_EQ(global.maxConnections, 0u);
    EXPECT_FALSE(global.ownSourceLimit);
    auto changed = web;
    changed.upstreams[1].weight = 2;
    EXPECT_FALSE(changed == web);
    changed = web;
    changed.overrides.idleTimeoutMs = 1;
    EXPECT_FALSE(changed == web);
}

TEST_F(ConfigFileTest, BadRouteOverridesAndUpstreamOptionsNameLineAndKey) {
    auto file = dir_.write("bad.conf", R"([route.web]
listen = 127.0.0.1:8080
upstream = 127.0.0.1:80 weight=0
upstream = 127.0.0.1:81 heavy
idle-timeout-ms = soon
max-connections = 0
upstream-tcp-congestion = no/such
)");
    auto problems = problemsOf({"--config", file});
    ASSERT_EQ(problems.size(), 5u) << ::testing::PrintToString(problems);
    EXPECT_NE(problems[0].find(file + ":3: route 'web': upstream '127.0.0.1:80 weight=0': weight"),
              std::string::npos)
        << problems[0];
    EXPECT_NE(problems[0].find("out of range 1..1000"), std::string::npos) << problems[0];
    EXPECT_NE(problems[1].find(file + ":4:"), std::string::npos) << problems[1];
    EXPECT_NE(problems[1].find("'heavy'"), std::string::npos) << problems[1];
    EXPECT_NE(problems[2].find(file + ":5: route 'web': idle-timeout-ms: invalid value 'soon'"),
              std::string::npos)
        << problems[2];
    EXPECT_NE(problems[3].find(file + ":6: route 'web': max-connections"), std::string::npos)
        << problems[3];
    EXPECT_NE(problems[4].find(file + ":7: route 'web': upstream-tcp-congestion"),
              std::string::npos)
        << problems[4];
}

TEST_F(ConfigFileTest, RouteLaneAndItsConflictWithLaneSplice) {
    auto file = dir_.write("lane.conf", "[route.web]\nlisten = 127.0.0.1:8080\n"
                                        "upstream = 127.0.0.1:80\nlane = buffer\n");
    EXPECT_EQ(parseConfig({"--config", file}).routes.at(0).overrides.lane, LaneKind::Buffer);
    auto problems = problemsOf({"--config", file, "--lane", "splice"});
    ASSERT_EQ(problems.size(), 1u) << ::testing::PrintToString(problems);
    EXPECT_NE(problems[0].find("route 'web': lane buffer needs the buffer lane"), std::string::npos)
        << problems[0];
    auto bad = dir_.write("badlane.conf", "[route.web]\nlisten = 127.0.0.1:8080\n"
                                          "upstream = 127.0.0.1:80\nlane = fast\n");
    problems = problemsOf({"--config", bad});
    ASSERT_EQ(problems.size(), 1u);
    EXPECT_NE(problems[0].find(bad + ":4: route 'web': lane: invalid value 'fast'"),
              std::string::npos)
        << problems[0];
}

TEST(ConfigTest, CommandLineUpstreamTakesWeightAndBackup) {
    auto config = parseConfig({"--listen", "127.0.0.1:8443", "--upstream", "127.0.0.1:9000 weight=4",
                               "--upstream", "127.0.0.1:9001 backup"});
    ASSERT_EQ(config.routes.at(0).upstreams.size(), 2u);
    EXPECT_EQ(config.routes[0].upstreams[0].weight, 4u);
    EXPECT_EQ(config.routes[0].upstreams[0].text, "127.0.0.1:9000");
    EXPECT_TRUE(config.routes[0].upstreams[1].backup);
}

}  // namespace
}  // namespace splicegate
