// Cidr parsing for --xdp-deny / --xdp-allow and `splicegatectl xdp add|del`.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <string>

#include "common/Error.h"
#include "xdp/Cidr.h"
#include "xdp/XdpAttachment.h"

namespace splicegate {
namespace {

TEST(XdpCidrTest, ParsesAndPrintsCanonically) {
    struct Case {
        const char* input;
        const char* text;
        int family;
        unsigned prefix;
    } cases[] = {
        {"10.0.0.0/8", "10.0.0.0/8", AF_INET, 8},
        {"10.1.2.3/8", "10.0.0.0/8", AF_INET, 8},  // host bits cleared
        {"198.18.0.1", "198.18.0.1/32", AF_INET, 32},
        {"0.0.0.0/0", "0.0.0.0/0", AF_INET, 0},
        {"203.0.113.255/25", "203.0.113.128/25", AF_INET, 25},
        {"2001:db8::/32", "2001:db8::/32", AF_INET6, 32},
        {"2001:DB8:1:2::ff/48", "2001:db8:1::/48", AF_INET6, 48},
        {"::1", "::1/128", AF_INET6, 128},
        {"::/0", "::/0", AF_INET6, 0},
        {"2001:db8::1/127", "2001:db8::/127", AF_INET6, 127},
        {"::ffff:10.0.0.1/128", "::ffff:10.0.0.1/128", AF_INET6, 128},
    };
    for (const Case& c : cases) {
        auto cidr = Cidr::parse(c.input);
        ASSERT_TRUE(cidr) << c.input;
        EXPECT_EQ(cidr->text(), c.text) << c.input;
        EXPECT_EQ(cidr->family, c.family) << c.input;
        EXPECT_EQ(cidr->prefixLength, c.prefix) << c.input;
        EXPECT_EQ(Cidr::parse(cidr->text()), cidr) << "round trip of " << c.input;
    }
}

TEST(XdpCidrTest, RejectsMalformedText) {
    for (const char* bad : {"",
                            "/",
                            "10.0.0.0/",
                            "10.0.0.0/33",
                            "2001:db8::/129",
                            "10.0.0/8",
                            "10.0.0.0.0/8",
                            "010.0.0.1",
                            "10.0.0.256",
                            "10.0.0.0/-1",
                            "10.0.0.0/+8",
                            "10.0.0.0/8/8",
                            "10.0.0.0/0008",
                            "10.0.0.0 /8",
                            " 10.0.0.0/8",
                            "10.0.0.0/8 ",
                            "example.com",
                            "2001:db8:::/32",
                            "[2001:db8::]/32",
                            "fe80::1%eth0",
                            "10.0.0.0/8x"}) {
        EXPECT_FALSE(Cidr::parse(bad)) << "'" << bad << "'";
    }
}

TEST(XdpCidrTest, ParseOrThrowNamesTheTextAndTheProblem) {
    try {
        Cidr::parseOrThrow("10.0.0.0/40");
        FAIL() << "no exception";
    } catch (const UsageError& error) {
        EXPECT_EQ(std::string(error.what()),
                  "invalid CIDR '10.0.0.0/40': the prefix length must be 0..32");
    }
    try {
        Cidr::parseOrThrow("bogus");
        FAIL() << "no exception";
    } catch (const UsageError& error) {
        EXPECT_EQ(std::string(error.what()), "invalid CIDR 'bogus': not an IPv4 or IPv6 address");
    }
}

TEST(XdpCidrTest, OrdersAndComparesByValue) {
    EXPECT_EQ(Cidr::parse("10.0.0.0/8"), Cidr::parse("10.255.0.0/8"));
    EXPECT_NE(Cidr::parse("10.0.0.0/8"), Cidr::parse("10.0.0.0/9"));
    EXPECT_LT(*Cidr::parse("10.0.0.0/8"), *Cidr::parse("2001:db8::/32"));  // AF_INET < AF_INET6
}

TEST(XdpCidrTest, AttachModeNames) {
    for (auto mode : {XdpAttachMode::Native, XdpAttachMode::Generic, XdpAttachMode::Auto})
        EXPECT_EQ(parseXdpAttachMode(xdpAttachModeName(mode)), mode);
    EXPECT_FALSE(parseXdpAttachMode("skb"));
    EXPECT_FALSE(parseXdpAttachMode("Native"));
}

}  // namespace
}  // namespace splicegate
