// libFuzzer target fuzz_preamble_parsers: bytes from a hostile client go through what the relay
// reads before it chooses a route: the PROXY protocol header parser (relay/ProxyProtocol.h, with
// each set of accepted versions) and the ClientHello parser (relay/ClientHello.h). Invariants:
// - a header or ClientHello is complete only within the bytes given (and the limits), and a
//   parser asking for more asks for more than it was given;
// - what is complete on the whole input is "need more" on every shorter prefix of it, and the
//   same on the whole input with more bytes after it;
// - a complete header's addresses encode (v1, v2) and parse back the same;
// - a server name is lower-case host-name characters only.
// The same function is replayed over the seed corpus by ReplayMain.cpp (a CTest test).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <vector>

#include "relay/ClientHello.h"
#include "relay/ProxyProtocol.h"

namespace {

using namespace splicegate;

void check(bool condition, const char* what) {
    if (!condition) {
        std::fprintf(stderr, "fuzz_preamble_parsers: invariant violated: %s\n", what);
        std::abort();
    }
}

void fuzzProxy(std::span<const std::uint8_t> bytes, ProxyVersions accepted) {
    auto whole = parseProxyHeader(bytes, accepted);
    if (whole.status == ProxyParse::Status::NeedMore) {
        check(whole.needBytes > bytes.size(), "proxy: needs no more than it has");
        check(whole.needBytes <= kProxyMaxBytes, "proxy: needs more than its limit");
        return;
    }
    if (whole.status != ProxyParse::Status::Complete) return;
    const auto& header = whole.header;
    check(header.length > 0 && header.length <= bytes.size(), "proxy: length outside the input");
    check(header.length <= kProxyMaxBytes, "proxy: length over the limit");
    check(accepted.v1 || header.version != ProxyVersion::V1, "proxy: v1 not accepted");
    check(accepted.v2 || header.version != ProxyVersion::V2, "proxy: v2 not accepted");
    for (std::size_t cut : {header.length - 1, header.length / 2}) {
        if (cut == 0) continue;
        check(parseProxyHeader(bytes.first(cut), accepted).status == ProxyParse::Status::NeedMore,
              "proxy: a prefix of a complete header is not 'need more'");
    }
    auto exact = parseProxyHeader(bytes.first(header.length), accepted);
    check(exact.status == ProxyParse::Status::Complete && exact.header.length == header.length,
          "proxy: the header alone parses differently");
    if (!header.hasAddresses) return;
    check(header.source.family() == header.destination.family(), "proxy: families differ");
    for (auto version : {ProxyVersion::V1, ProxyVersion::V2}) {
        auto encoded = encodeProxyHeader(version, header.source, header.destination);
        std::span<const std::uint8_t> encodedBytes(
            reinterpret_cast<const std::uint8_t*>(encoded.data()), encoded.size());
        auto back = parseProxyHeader(encodedBytes, {});
        check(back.status == ProxyParse::Status::Complete && back.header.length == encoded.size(),
              "proxy: an encoded header does not parse");
        check(back.header.source == header.source && back.header.destination == header.destination,
              "proxy: addresses do not survive encoding");
    }
}

void fuzzClientHello(std::span<const std::uint8_t> bytes) {
    auto whole = parseClientHello(bytes);
    if (whole.status == ClientHelloParse::Status::NeedMore) {
        check(whole.needBytes > bytes.size(), "hello: needs no more than it has");
        return;
    }
    if (whole.status != ClientHelloParse::Status::Complete) return;
    for (char c : whole.serverName)
        check((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
                  c == '.',
              "hello: a server name character outside host names");
    check(whole.serverName.size() <= 255, "hello: server name over 255 bytes");
    if (bytes.size() > 1) {
        auto prefix = parseClientHello(bytes.first(bytes.size() / 2));
        check(prefix.status == ClientHelloParse::Status::NeedMore ||
                  (prefix.status == ClientHelloParse::Status::Complete &&
                   prefix.serverName == whole.serverName),
              "hello: a prefix of a complete ClientHello is refused");
    }
    std::vector<std::uint8_t> longer(bytes.begin(), bytes.end());
    longer.insert(longer.end(), {23, 3, 3, 0, 1, 0});
    auto more = parseClientHello(longer);
    check(more.status == ClientHelloParse::Status::Complete && more.serverName == whole.serverName,
          "hello: bytes after a complete ClientHello change it");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::span<const std::uint8_t> bytes(data, size);
    fuzzProxy(bytes, {true, true});
    fuzzProxy(bytes, {true, false});
    fuzzProxy(bytes, {false, true});
    fuzzClientHello(bytes);
    // A PROXY header followed by a ClientHello, as the relay reads them.
    auto header = parseProxyHeader(bytes, {});
    if (header.status == ProxyParse::Status::Complete)
        fuzzClientHello(bytes.subspan(header.header.length));
    return 0;
}
