// The PROXY protocol header parser and encoders (relay/ProxyProtocol.h), against the examples
// and rules of HAProxy's specification: v1 text lines, v2 binary headers with LOCAL, TCP4, TCP6,
// UNSPEC and TLVs, every prefix of a header asking for more, and malformed headers refused.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "relay/ProxyProtocol.h"

namespace splicegate {
namespace {

using Status = ProxyParse::Status;

std::vector<std::uint8_t> bytesOf(const std::string& text) { return {text.begin(), text.end()}; }

ProxyParse parse(const std::vector<std::uint8_t>& bytes, ProxyVersions accepted = {}) {
    return parseProxyHeader(bytes, accepted);
}

SocketAddress address(const char* text) { return *SocketAddress::parseNumeric(text); }

const std::string kV2Signature("\r\n\r\n\0\r\nQUIT\n", 12);

std::vector<std::uint8_t> v2(std::uint8_t command, std::uint8_t family,
                             const std::vector<std::uint8_t>& body) {
    auto out = bytesOf(kV2Signature);
    out.push_back(static_cast<std::uint8_t>(0x20 | command));
    out.push_back(family);
    out.push_back(static_cast<std::uint8_t>(body.size() >> 8));
    out.push_back(static_cast<std::uint8_t>(body.size()));
    out.insert(out.end(), body.begin(), body.end());
    return out;
}

const std::vector<std::uint8_t> kInetBody = {192, 0, 2, 7, 198, 51, 100, 1, 0x9c, 0x40, 0x01, 0xbb};

TEST(ProxyProtocolTest, V1Tcp4GivesBothAddressesAndTheHeaderLength) {
    auto bytes = bytesOf("PROXY TCP4 192.0.2.7 198.51.100.1 40000 443\r\nGET / HTTP/1.1\r\n");
    auto result = parse(bytes);
    ASSERT_EQ(result.status, Status::Complete) << result.problem;
    EXPECT_EQ(result.header.version, ProxyVersion::V1);
    EXPECT_EQ(result.header.length, 45u);
    EXPECT_TRUE(result.header.hasAddresses);
    EXPECT_EQ(result.header.source.toString(), "192.0.2.7:40000");
    EXPECT_EQ(result.header.destination.toString(), "198.51.100.1:443");
}

TEST(ProxyProtocolTest, V1Tcp6AndUnknown) {
    auto six = parse(bytesOf("PROXY TCP6 2001:db8::1 2001:db8::2 1 65535\r\n"));
    ASSERT_EQ(six.status, Status::Complete) << six.problem;
    EXPECT_EQ(six.header.source.toString(), "[2001:db8::1]:1");
    EXPECT_EQ(six.header.destination.toString(), "[2001:db8::2]:65535");
    auto unknown = parse(bytesOf("PROXY UNKNOWN ffff:f...f:ffff 1 2\r\nx"));
    ASSERT_EQ(unknown.status, Status::Complete);
    EXPECT_FALSE(unknown.header.hasAddresses);
    EXPECT_EQ(unknown.header.length, 35u);
    EXPECT_EQ(parse(bytesOf("PROXY UNKNOWN\r\n")).header.length, 15u);
}

TEST(ProxyProtocolTest, EveryPrefixOfAHeaderNeedsMore) {
    std::vector<std::vector<std::uint8_t>> headers = {
        bytesOf("PROXY TCP4 192.0.2.7 198.51.100.1 40000 443\r\n"),
        v2(1, 0x11, kInetBody)};
    for (const auto& header : headers) {
        for (std::size_t n = 1; n < header.size(); ++n) {
            std::vector<std::uint8_t> prefix(header.begin(), header.begin() + n);
            auto result = parse(prefix);
            ASSERT_EQ(result.status, Status::NeedMore) << n;
            EXPECT_GT(result.needBytes, n);
            EXPECT_LE(result.needBytes, header.size());
        }
        EXPECT_EQ(parse(header).status, Status::Complete);
    }
}

TEST(ProxyProtocolTest, MalformedV1HeadersAreRefused) {
    for (const char* text :
         {"PROXY TCP4 192.0.2.7 198.51.100.1 40000\r\n", "PROXY TCP4 192.0.2.7 198.51.100.1 1 65536\r\n",
          "PROXY TCP4 2001:db8::1 198.51.100.1 1 2\r\n", "PROXY TCP5 192.0.2.7 198.51.100.1 1 2\r\n",
          "PROXY TCP4 192.0.2.7 198.51.100.1 01 2\r\n", "PROXY TCP4  192.0.2.7 198.51.100.1 1 2\r\n",
          "PROXY TCP4 192.0.2.7 198.51.100.1 1 2\n", "PROXY TCP4 192.0.2.7\x01 1 2\r\n",
          "GET / HTTP/1.1\r\n", "\x16\x03\x01\x02\x00"})
        EXPECT_EQ(parse(bytesOf(text)).status, Status::Invalid) << text;
    // No CRLF within 107 bytes.
    EXPECT_EQ(parse(bytesOf("PROXY TCP4 " + std::string(120, '1'))).status, Status::Invalid);
    auto longest = "PROXY UNKNOWN " + std::string(91, 'x') + "\r\n";  // 107 bytes: allowed
    ASSERT_EQ(longest.size(), 107u);
    EXPECT_EQ(parse(bytesOf(longest)).status, Status::Complete);
    EXPECT_EQ(parse(bytesOf("PROXY UNKNOWN " + std::string(92, 'x') + "\r\n")).status,
              Status::Invalid);
}

TEST(ProxyProtocolTest, V2ProxyInetAndInet6) {
    auto result = parse(v2(1, 0x11, kInetBody));
    ASSERT_EQ(result.status, Status::Complete) << result.problem;
    EXPECT_EQ(result.header.version, ProxyVersion::V2);
    EXPECT_EQ(result.header.length, 28u);
    EXPECT_EQ(result.header.source.toString(), "192.0.2.7:40000");
    EXPECT_EQ(result.header.destination.toString(), "198.51.100.1:443");
    std::vector<std::uint8_t> body6(36, 0);
    body6[0] = 0x20, body6[1] = 0x01, body6[2] = 0x0d, body6[3] = 0xb8, body6[15] = 1;
    body6[16] = 0x20, body6[17] = 0x01, body6[18] = 0x0d, body6[19] = 0xb8, body6[31] = 2;
    body6[32] = 0x13, body6[33] = 0x88, body6[34] = 0x00, body6[35] = 0x50;
    auto six = parse(v2(1, 0x21, body6));
    ASSERT_EQ(six.status, Status::Complete) << six.problem;
    EXPECT_EQ(six.header.source.toString(), "[2001:db8::1]:5000");
    EXPECT_EQ(six.header.destination.toString(), "[2001:db8::2]:80");
}

TEST(ProxyProtocolTest, V2LocalAndUnspecKeepTheRealEndpoints) {
    auto local = parse(v2(0, 0x00, {}));
    ASSERT_EQ(local.status, Status::Complete);
    EXPECT_FALSE(local.header.hasAddresses);
    EXPECT_EQ(local.header.length, 16u);
    // LOCAL with an address block: still the real endpoints, the block skipped.
    auto localWithBody = parse(v2(0, 0x11, kInetBody));
    ASSERT_EQ(localWithBody.status, Status::Complete);
    EXPECT_FALSE(localWithBody.header.hasAddresses);
    EXPECT_EQ(localWithBody.header.length, 28u);
    auto unspec = parse(v2(1, 0x00, {1, 2, 3}));
    EXPECT_EQ(unspec.status, Status::Invalid);  // 3 bytes are no TLV
    auto unspecEmpty = parse(v2(1, 0x00, {}));
    ASSERT_EQ(unspecEmpty.status, Status::Complete);
    EXPECT_FALSE(unspecEmpty.header.hasAddresses);
}

TEST(ProxyProtocolTest, V2TlvsAreSkippedAndMustFit) {
    auto body = kInetBody;
    // PP2_TYPE_ALPN "h2", PP2_TYPE_AUTHORITY "example.com", a NOOP of 0 bytes.
    body.insert(body.end(), {0x01, 0x00, 0x02, 'h', '2'});
    body.push_back(0x02);
    body.push_back(0x00);
    body.push_back(11);
    for (char c : std::string("example.com")) body.push_back(static_cast<std::uint8_t>(c));
    body.insert(body.end(), {0x04, 0x00, 0x00});
    auto result = parse(v2(1, 0x11, body));
    ASSERT_EQ(result.status, Status::Complete) << result.problem;
    EXPECT_EQ(result.header.length, 16 + body.size());
    EXPECT_EQ(result.header.source.toString(), "192.0.2.7:40000");
    auto overrun = kInetBody;
    overrun.insert(overrun.end(), {0x01, 0x00, 0x09, 'h'});
    EXPECT_EQ(parse(v2(1, 0x11, overrun)).status, Status::Invalid);
    auto cut = kInetBody;
    cut.insert(cut.end(), {0x01, 0x00});
    EXPECT_EQ(parse(v2(1, 0x11, cut)).status, Status::Invalid);
}

TEST(ProxyProtocolTest, MalformedV2HeadersAreRefused) {
    auto badVersion = v2(1, 0x11, kInetBody);
    badVersion[12] = 0x11;
    EXPECT_EQ(parse(badVersion).status, Status::Invalid);
    EXPECT_EQ(parse(v2(2, 0x11, kInetBody)).status, Status::Invalid);   // command 2
    EXPECT_EQ(parse(v2(1, 0x41, kInetBody)).status, Status::Invalid);   // family 4
    EXPECT_EQ(parse(v2(1, 0x12, kInetBody)).status, Status::Invalid);   // UDP
    EXPECT_EQ(parse(v2(1, 0x13, kInetBody)).status, Status::Invalid);   // protocol 3
    EXPECT_EQ(parse(v2(1, 0x21, kInetBody)).status, Status::Invalid);   // too short for INET6
    auto huge = v2(1, 0x11, kInetBody);
    huge[14] = 0x10;  // 4096 + 12 bytes announced
    EXPECT_EQ(parse(huge).status, Status::Invalid);
}

TEST(ProxyProtocolTest, OnlyTheAcceptedVersions) {
    auto one = bytesOf("PROXY UNKNOWN\r\n");
    auto two = v2(0, 0, {});
    EXPECT_EQ(parse(one, {true, false}).status, Status::Complete);
    EXPECT_EQ(parse(two, {true, false}).status, Status::Invalid);
    EXPECT_EQ(parse(one, {false, true}).status, Status::Invalid);
    EXPECT_EQ(parse(two, {false, true}).status, Status::Complete);
}

TEST(ProxyProtocolTest, EncodedHeadersParseBack) {
    for (auto version : {ProxyVersion::V1, ProxyVersion::V2}) {
        for (auto [source, destination] :
             {std::pair{"192.0.2.7:40000", "127.0.0.1:8443"},
              std::pair{"[2001:db8::1]:5000", "[::1]:443"}}) {
            auto header = encodeProxyHeader(version, address(source), address(destination));
            auto result = parse(bytesOf(header + "payload"));
            ASSERT_EQ(result.status, Status::Complete) << result.problem;
            EXPECT_EQ(result.header.version, version);
            EXPECT_EQ(result.header.length, header.size());
            EXPECT_EQ(result.header.source.toString(), source);
            EXPECT_EQ(result.header.destination.toString(), destination);
        }
    }
    EXPECT_EQ(encodeProxyHeader(ProxyVersion::V1, address("192.0.2.7:40000"),
                                address("127.0.0.1:8443")),
              "PROXY TCP4 192.0.2.7 127.0.0.1 40000 8443\r\n");
    EXPECT_EQ(encodeProxyHeader(ProxyVersion::V1, SocketAddress(), SocketAddress()),
              "PROXY UNKNOWN\r\n");
    auto local = encodeProxyHeader(ProxyVersion::V2, SocketAddress(), SocketAddress());
    auto parsed = parse(bytesOf(local));
    ASSERT_EQ(parsed.status, Status::Complete);
    EXPECT_FALSE(parsed.header.hasAddresses);
}

}  // namespace
}  // namespace splicegate
