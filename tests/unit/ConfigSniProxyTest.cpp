// The route keys sni, proxy-protocol-in, proxy-trusted, proxy-protocol-out and the option
// --sni-peek-timeout-ms (docs/configuration.md): values, the listen address routes may share,
// and one error line naming file, route and key for each bad value; and how a ListenGroup
// (relay/ListenGroup.h) chooses among the routes of one address; and the gateway example of the
// docs, the manual page and the packaged config parses as what it says.
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "common/Error.h"
#include "relay/Config.h"
#include "relay/ListenGroup.h"
#include "tests/support/Daemon.h"

namespace splicegate {
namespace {

Config parseFile(const std::string& text) {
    test::TempDir dir;
    auto path = dir.write("splicegate.conf", text);
    std::vector<std::string> args{"splicegate", "--config", path};
    std::vector<const char*> argv;
    for (const auto& arg : args) argv.push_back(arg.c_str());
    return parseCommandLine(static_cast<int>(argv.size()), argv.data()).config;
}

std::string errorOf(const std::string& text) {
    try {
        parseFile(text);
    } catch (const UsageError& error) {
        return error.what();
    }
    return "(no error)";
}

const std::string kGateway = R"([route.web]
listen = 127.0.0.1:8443
upstream = 127.0.0.1:9001
sni = www.example.com, Example.com.
proxy-protocol-in = any
proxy-trusted = 10.0.0.0/8, 2001:db8::/32
[route.api]
listen = 127.0.0.1:8443
upstream = 127.0.0.1:9002
sni = *.api.example.com
proxy-protocol-in = any
proxy-trusted = 10.0.0.0/8,2001:db8::/32
proxy-protocol-out = v2
[route.other]
listen = 127.0.0.1:8443
upstream = 127.0.0.1:9003
proxy-protocol-in = any
proxy-trusted = 10.0.0.0/8, 2001:db8::/32
proxy-protocol-out = v1
)";

TEST(ConfigSniProxyTest, RoutesShareAnAddressByServerName) {
    auto config = parseFile(kGateway);
    ASSERT_EQ(config.routes.size(), 3u);
    EXPECT_EQ(config.routes[0].sni, (std::vector<std::string>{"www.example.com", "example.com"}));
    EXPECT_EQ(config.routes[1].sni, (std::vector<std::string>{"*.api.example.com"}));
    EXPECT_TRUE(config.routes[2].sni.empty());
    EXPECT_EQ(config.routes[0].proxyIn, ProxyProtocolMode::Any);
    ASSERT_EQ(config.routes[0].proxyTrusted.size(), 2u);
    EXPECT_EQ(config.routes[0].proxyTrusted[1].text(), "2001:db8::/32");
    EXPECT_EQ(config.routes[0].proxyOut, ProxyProtocolMode::Off);
    EXPECT_EQ(config.routes[1].proxyOut, ProxyProtocolMode::V2);
    EXPECT_EQ(config.routes[2].proxyOut, ProxyProtocolMode::V1);
    EXPECT_EQ(config.relay.sniPeekTimeoutMs, 5000u);
}

// The gateway the docs show (docs/configuration.md, splicegate.conf(5), the packaged example
// config, where it is commented out): it parses, and is one port with three routes by server
// name, two of them with names and one for the rest, all behind a PROXY-speaking balancer, one
// telling its upstream the client in turn.
std::string between(const std::string& text, const std::string& from, const std::string& to) {
    auto start = text.find(from);
    if (start == std::string::npos) return {};
    auto end = text.find(to, start);
    return end == std::string::npos ? std::string() : text.substr(start, end - start);
}

// `text` from the first `marker` on ("" without one).
std::string from(const std::string& text, const std::string& marker) {
    auto start = text.find(marker);
    return start == std::string::npos ? std::string() : text.substr(start);
}

std::string readSource(const std::string& relative) {
    return test::readFile(std::string(SPLICEGATE_SOURCE_DIR) + "/" + relative);
}

TEST(ConfigSniProxyTest, TheDocumentedGatewayParsesAsOnePortWithThreeRoutes) {
    auto markdown = from(between(readSource("docs/configuration.md"), "A gateway on one port",
                                 "```\n"),
                         "[route.www]");
    auto manual = std::regex_replace(from(between(readSource("packaging/man/splicegate.conf.5"),
                                                  "# One port, three services", "\n.fi"),
                                          "[route.www]") +
                                         "\n",
                                     std::regex("\\\\-"), "-");
    auto commented = between(readSource("packaging/splicegate.conf"), "#[route.www]", "\n#\n");
    commented = std::regex_replace(commented + "\n", std::regex("(^|\n)#"), "$1");
    for (const auto& [where, text] : {std::pair{"docs/configuration.md", markdown},
                                      std::pair{"splicegate.conf(5)", manual},
                                      std::pair{"packaging/splicegate.conf", commented}}) {
        SCOPED_TRACE(where);
        ASSERT_NE(text.find("[route.www]"), std::string::npos) << "no gateway example found";
        Config config;
        try {
            config = parseFile(text);
        } catch (const UsageError& error) {
            FAIL() << error.what() << "\n" << text;
        }
        ASSERT_EQ(config.routes.size(), 3u) << text;
        std::size_t named = 0, proxiedOut = 0;
        for (const auto& route : config.routes) {
            EXPECT_EQ(route.listen, config.routes[0].listen) << route.name;
            EXPECT_NE(route.proxyIn, ProxyProtocolMode::Off) << route.name;
            EXPECT_FALSE(route.proxyTrusted.empty()) << route.name;
            named += route.sni.empty() ? 0 : 1;
            proxiedOut += route.proxyOut == ProxyProtocolMode::Off ? 0 : 1;
        }
        EXPECT_EQ(named, 2u);
        EXPECT_EQ(proxiedOut, 1u);
    }
}

TEST(ConfigSniProxyTest, BadValuesNameTheRouteAndKey) {
    std::string base = "[route.web]\nlisten = 127.0.0.1:8443\nupstream = 127.0.0.1:9001\n";
    struct Case {
        std::string extra;
        std::string expected;
    };
    std::vector<Case> cases = {
        {"sni = a..b\n", "route 'web': sni: 'a..b' is no server name"},
        {"sni = www.example.com,\n", "route 'web': sni: '' is no server name"},
        {"sni = *.\n", "route 'web': sni: '*.' is no server name"},
        {"sni = bad name\n", "route 'web': sni: 'bad name'"},
        {"proxy-protocol-in = v3\nproxy-trusted = 10.0.0.0/8\n",
         "route 'web': proxy-protocol-in"},
        {"proxy-protocol-in = v1\n", "route 'web': proxy-protocol-in needs proxy-trusted"},
        {"proxy-trusted = 10.0.0.0/8\n",
         "route 'web': proxy-trusted given without proxy-protocol-in"},
        {"proxy-protocol-in = v1\nproxy-trusted = 10.0.0.0/33\n",
         "route 'web': proxy-trusted: '10.0.0.0/33' is no IPv4 or IPv6 prefix"},
        {"proxy-protocol-out = any\n", "route 'web': proxy-protocol-out"},
        {"sni = a.example.com\nsni = b.example.com\n", "route 'web': sni given twice"},
    };
    for (const auto& c : cases) {
        auto error = errorOf(base + c.extra);
        EXPECT_NE(error.find("splicegate.conf:"), std::string::npos) << error;
        EXPECT_NE(error.find(c.expected), std::string::npos) << c.extra << " -> " << error;
        EXPECT_EQ(error.find('\n'), std::string::npos) << error;
    }
}

TEST(ConfigSniProxyTest, SharedAddressesNeedDistinctNamesAndOneProxySetting) {
    auto route = [](const std::string& name, const std::string& extra) {
        return "[route." + name + "]\nlisten = 127.0.0.1:8443\nupstream = 127.0.0.1:9001\n" +
               extra;
    };
    EXPECT_NE(errorOf(route("a", "") + route("b", "")).find(
                  "is used by both route 'a' and route 'b' (routes sharing an address need sni)"),
              std::string::npos);
    EXPECT_NE(errorOf(route("a", "sni = x.example.com\n") + route("b", "sni = X.example.com\n"))
                  .find("with sni 'x.example.com'"),
              std::string::npos);
    EXPECT_NE(errorOf(route("a", "sni = x.example.com\n") +
                      route("b", "proxy-protocol-in = v1\nproxy-trusted = 10.0.0.0/8\n"))
                  .find("different proxy-protocol-in"),
              std::string::npos);
    EXPECT_EQ(parseFile(route("a", "sni = x.example.com\n") + route("b", "")).routes.size(), 2u);
}

TEST(ConfigSniProxyTest, PeekTimeoutOption) {
    test::TempDir dir;
    auto path = dir.write("c.conf", "sni-peek-timeout-ms = 250\n[route.a]\nlisten = "
                                    "127.0.0.1:8443\nupstream = 127.0.0.1:9001\n");
    const char* argv[] = {"splicegate", "--config", path.c_str()};
    EXPECT_EQ(parseCommandLine(3, argv).config.relay.sniPeekTimeoutMs, 250u);
    const char* zero[] = {"splicegate", "--listen", "127.0.0.1:1", "--upstream", "127.0.0.1:2",
                          "--sni-peek-timeout-ms", "0"};
    EXPECT_THROW(parseCommandLine(7, zero), UsageError);
}

TEST(ConfigSniProxyTest, ListenGroupChoosesExactThenLongestWildcardThenTheDefault) {
    auto config = parseFile(kGateway + R"([route.deep]
listen = 127.0.0.1:8443
upstream = 127.0.0.1:9004
sni = *.v2.api.example.com
proxy-protocol-in = any
proxy-trusted = 10.0.0.0/8, 2001:db8::/32
[route.exact]
listen = 127.0.0.1:8443
upstream = 127.0.0.1:9005
sni = x.api.example.com
proxy-protocol-in = any
proxy-trusted = 10.0.0.0/8, 2001:db8::/32
)");
    RouteTable table;
    for (std::size_t i = 0; i < config.routes.size(); ++i)
        table.push_back(std::make_shared<Route>(config.routes[i], i));
    auto groups = groupByListenAddress(table);
    ASSERT_EQ(groups.size(), 1u);
    const auto& group = *groups.front();
    EXPECT_TRUE(group.routesByServerName());
    auto chosen = [&](const char* name) {
        auto route = group.choose(name);
        return route ? route->config.name : std::string("(none)");
    };
    EXPECT_EQ(chosen("www.example.com"), "web");
    EXPECT_EQ(chosen("example.com"), "web");
    EXPECT_EQ(chosen("a.api.example.com"), "api");
    EXPECT_EQ(chosen("x.api.example.com"), "exact");
    EXPECT_EQ(chosen("a.v2.api.example.com"), "deep");
    EXPECT_EQ(chosen("api.example.com"), "other");    // a wildcard needs one more label
    EXPECT_EQ(chosen("a.b.api.example.com"), "other");  // and only one
    EXPECT_EQ(chosen(""), "other");
    EXPECT_TRUE(group.acceptsProxyHeader());
    EXPECT_TRUE(group.trusts(*SocketAddress::parseNumeric("10.1.2.3:5")));
    EXPECT_TRUE(group.trusts(*SocketAddress::parseNumeric("[::ffff:10.1.2.3]:5")));
    EXPECT_TRUE(group.trusts(*SocketAddress::parseNumeric("[2001:db8::9]:5")));
    EXPECT_FALSE(group.trusts(*SocketAddress::parseNumeric("11.1.2.3:5")));
    EXPECT_FALSE(group.trusts(*SocketAddress::parseNumeric("[2001:db9::9]:5")));
    // Without a route lacking sni, an unmatched name has no route.
    RouteTable sniOnly{table[0], table[1]};
    EXPECT_EQ(groupByListenAddress(sniOnly).front()->choose("nope.example.org"), nullptr);
}

}  // namespace
}  // namespace splicegate
