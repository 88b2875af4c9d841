// The ClientHello's server name (relay/ClientHello.h): found in one record, across many tiny
// records and in any prefix asking for more; a ClientHello over 16 KiB, anything that is not a
// handshake record, and malformed fields refused; none without the extension.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "relay/ClientHello.h"
#include "tests/support/TlsRecords.h"

namespace splicegate {
namespace {

using Status = ClientHelloParse::Status;
using test::clientHelloMessage;
using test::inRecords;

ClientHelloParse parse(const std::vector<std::uint8_t>& bytes) { return parseClientHello(bytes); }

TEST(ClientHelloTest, FindsTheServerNameLowerCased) {
    auto result = parse(inRecords(clientHelloMessage({"Web.Example.COM", 0, true})));
    ASSERT_EQ(result.status, Status::Complete) << result.problem;
    EXPECT_EQ(result.serverName, "web.example.com");
}

TEST(ClientHelloTest, NoExtensionOrNoNameGivesNoName) {
    auto bare = parse(inRecords(clientHelloMessage({"", 0, false})));
    ASSERT_EQ(bare.status, Status::Complete) << bare.problem;
    EXPECT_EQ(bare.serverName, "");
    auto nameless = parse(inRecords(clientHelloMessage({"", 64, true})));
    ASSERT_EQ(nameless.status, Status::Complete) << nameless.problem;
    EXPECT_EQ(nameless.serverName, "");
}

TEST(ClientHelloTest, SpreadOverTinyRecordsAndEveryPrefixNeedsMore) {
    auto records = inRecords(clientHelloMessage({"a.example.com", 300, true}), 7);
    for (std::size_t n = 0; n < records.size(); ++n) {
        std::vector<std::uint8_t> prefix(records.begin(), records.begin() + n);
        auto result = parse(prefix);
        ASSERT_EQ(result.status, Status::NeedMore) << n;
        EXPECT_GT(result.needBytes, n);
        EXPECT_LE(result.needBytes, records.size());
    }
    auto whole = parse(records);
    ASSERT_EQ(whole.status, Status::Complete) << whole.problem;
    EXPECT_EQ(whole.serverName, "a.example.com");
}

TEST(ClientHelloTest, PayloadAfterTheClientHelloIsIgnored) {
    auto bytes = inRecords(clientHelloMessage({"a.example.com", 0, true}));
    bytes.insert(bytes.end(), {23, 3, 3, 0, 1, 0});  // an application data record
    EXPECT_EQ(parse(bytes).serverName, "a.example.com");
}

TEST(ClientHelloTest, UpTo16KiBIsReadOver16KiBRefused) {
    auto fits = clientHelloMessage({"big.example.com", 0, true});
    fits = clientHelloMessage({"big.example.com", 16384 - fits.size() - 4, true});
    ASSERT_EQ(fits.size(), 16384u);
    auto result = parse(inRecords(fits, 16000));
    ASSERT_EQ(result.status, Status::Complete) << result.problem;
    EXPECT_EQ(result.serverName, "big.example.com");
    auto over = clientHelloMessage({"big.example.com", 17000, true});
    // Known as soon as the handshake header is in, without waiting for the rest.
    auto records = inRecords(over);
    std::vector<std::uint8_t> head(records.begin(), records.begin() + 9);
    EXPECT_EQ(parse(head).status, Status::TooLarge);
    EXPECT_EQ(parse(records).status, Status::TooLarge);
    // Tiny records whose headers push it beyond what is read.
    auto tiny = inRecords(clientHelloMessage({"a.example.com", 15000, true}), 4);
    EXPECT_EQ(parse(tiny).status, Status::TooLarge);
}

TEST(ClientHelloTest, NotTlsOrMalformedIsInvalid) {
    auto bad = [](std::vector<std::uint8_t> bytes) { return parse(bytes).status; };
    EXPECT_EQ(bad({'G', 'E', 'T', ' '}), Status::Invalid);
    EXPECT_EQ(bad({'G'}), Status::Invalid);
    EXPECT_EQ(bad({22, 2}), Status::Invalid);                  // SSL 2 record version
    EXPECT_EQ(bad({23, 3, 3, 0, 5, 1, 2, 3, 4, 5}), Status::Invalid);  // application data
    EXPECT_EQ(bad({22, 3, 1, 0, 0}), Status::Invalid);         // empty handshake record
    EXPECT_EQ(bad({22, 3, 1, 0x40, 0x01}), Status::Invalid);   // record over 2^14
    EXPECT_EQ(bad({22, 3, 1, 0, 4, 2, 0, 0, 0}), Status::Invalid);  // ServerHello first
    auto message = clientHelloMessage({"a.example.com", 0, true});
    auto shortened = message;
    shortened[3] = static_cast<std::uint8_t>(shortened[3] - 1);  // the extensions overrun
    EXPECT_EQ(parse(inRecords(shortened)).status, Status::Invalid);
    auto badName = clientHelloMessage({"a b.example.com", 0, true});
    EXPECT_EQ(parse(inRecords(badName)).status, Status::Invalid);
    // A record of another type in the middle of the handshake message.
    auto split = inRecords(message, 20);
    split[25] = 23;
    EXPECT_EQ(parse(split).status, Status::Invalid);
}

}  // namespace
}  // namespace splicegate
