// SNI routing with passthrough and the PROXY protocol, end to end through the real daemon:
// - TLS 1.2 and 1.3 ClientHellos of real clients (openssl s_client, curl, python's ssl) reach
//   the openssl s_server upstream their server name chooses (told apart by the certificate each
//   upstream presents) and complete the handshake of the version they asked for; a name of no
//   route reaches the address's route without sni, and with no such route the connection is
//   refused (no-route), named in the access line and the metrics; python's ClientHello with a
//   long ALPN list is routed at 10 KiB and refused at 18 KiB (bad-client-hello);
// - a ClientHello cut into tiny segments is routed and reaches the upstream byte for byte (and
//   the audit has it as the client's first bytes); one of 16 KiB is routed, one over it, or no
//   TLS at all, is refused (bad-client-hello), and a client that sends nothing within
//   --sni-peek-timeout-ms is closed (peek-timeout), as is a balancer whose PROXY header is not
//   complete in that time;
// - PROXY v1 and v2 headers from a trusted balancer give the client's address to the access
//   line, the audit and the per-source limit, with the balancer's as via; the header is neither
//   relayed nor audited; a missing header, or one from an untrusted source, is refused
//   (proxy-protocol), as are a v2 TLV that runs past the header and a version the route does
//   not take; TCP4 and TCP6 in v1 and v2, TLVs skipped; LOCAL keeps the real address;
// - a reload moves names and turns the header on all at once, or changes nothing;
// - proxy-protocol-out v1 and v2 put a header naming the client (IPv4 or IPv6) before its first
//   byte.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "archive/SealedSegment.h"
#include "audit/Records.h"
#include "relay/ProxyProtocol.h"
#include "tests/support/AuditSupport.h"
#include "tests/support/ChildProcess.h"
#include "tests/support/Daemon.h"
#include "tests/support/HttpFetch.h"
#include "tests/support/Sockets.h"
#include "tests/support/TestServer.h"
#include "tests/support/TlsRecords.h"

namespace splicegate::test {
namespace {

constexpr const char* kOpenssl = "/usr/bin/openssl";
constexpr const char* kCurl = "/usr/bin/curl";
constexpr const char* kPython = "/usr/bin/python3";

// ---- TLS upstreams: openssl s_server, each with a certificate of its own name.

class TlsUpstream {
  public:
    TlsUpstream(const TempDir& dir, const std::string& name) : name_(name) {
        auto key = dir.file(name + ".key"), cert = dir.file(name + ".pem");
        auto made = runProcess({kOpenssl, "req", "-x509", "-newkey", "ec", "-pkeyopt",
                                "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out",
                                cert, "-subj", "/CN=" + name, "-days", "2"},
                               milliseconds(20000));
        if (!made.status || !made.status->isExit(0))
            throw std::runtime_error("openssl req: " + made.err);
        port_ = pickFreePort();
        server_ = std::make_unique<ChildProcess>(
            std::vector<std::string>{kOpenssl, "s_server", "-accept", loopback(port_), "-cert",
                                     cert, "-key", key, "-www"},
            dir.file(name + ".log"));
        if (!waitListening(port_, true, deadlineIn(milliseconds(10000))))
            throw std::runtime_error("s_server " + name + " does not listen");
    }
    const std::string& name() const noexcept { return name_; }
    std::string address() const { return loopback(port_); }

  private:
    std::string name_;
    uint16_t port_ = 0;
    std::unique_ptr<ChildProcess> server_;
};

// "New, TLSv1.3," for "-tls1_3", "TLSv1_3" or true: the line both openssl ends write of the
// session they negotiated.
std::string negotiated(const std::string& version) {
    return std::string("New, TLSv1.") + (version.ends_with('3') ? "3" : "2") + ",";
}

// Which upstream's certificate a real client saw ("" when the handshake failed or negotiated
// another version than asked for). curl and python also send a request and read s_server's
// -www page, which the server writes only after its side of the handshake completed: it names
// the session it negotiated.
std::string viaOpensslClient(uint16_t port, const std::string& name, const char* version) {
    std::vector<std::string> argv{kOpenssl, "s_client", "-connect", loopback(port), version};
    if (!name.empty()) argv.insert(argv.end(), {"-servername", name});
    else argv.push_back("-noservername");
    auto result = runProcess(argv, milliseconds(15000));
    std::smatch match;
    static const std::regex subject("subject=CN ?= ?([a-z-]+)");
    if (result.out.find(negotiated(version)) == std::string::npos) return "";
    return std::regex_search(result.out, match, subject) ? match[1].str() : "";
}

std::string viaCurl(uint16_t port, const std::string& name, bool tls13) {
    std::string hostPort = name + ":" + std::to_string(port);
    std::vector<std::string> argv{kCurl, "-sk", "-v", "--max-time", "10", "--resolve",
                                  hostPort + ":127.0.0.1"};
    if (tls13) argv.insert(argv.end(), {"--tlsv1.3"});
    else argv.insert(argv.end(), {"--tlsv1.2", "--tls-max", "1.2"});
    argv.push_back("https://" + hostPort + "/");
    auto result = runProcess(argv, milliseconds(15000));
    std::smatch match;
    static const std::regex subject("subject: CN=([a-z-]+)");
    if (!result.status || !result.status->isExit(0) ||
        result.out.find(negotiated(tls13 ? "3" : "2")) == std::string::npos)
        return "";
    return std::regex_search(result.err, match, subject) ? match[1].str() : "";
}

// Python's ssl module; the upstream is known by its name in the DER certificate. `alpnNames`
// ALPN protocols of 9 bytes each make its ClientHello about 10 bytes per name larger.
std::string viaPython(uint16_t port, const std::string& name, const char* version,
                      const std::vector<std::string>& candidates, int alpnNames = 0) {
    std::string script =
        "import socket, ssl, sys\n"
        "ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)\n"
        "ctx.check_hostname = False\n"
        "ctx.verify_mode = ssl.CERT_NONE\n"
        "ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion." +
        std::string(version) +
        "\n"
        "name = sys.argv[2] or None\n"
        "if " + std::to_string(alpnNames) + ":\n"
        "    ctx.set_alpn_protocols(['p%08d' % i for i in range(" + std::to_string(alpnNames) +
        ")])\n"
        "with socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=10) as s:\n"
        "    with ctx.wrap_socket(s, server_hostname=name) as t:\n"
        "        der = t.getpeercert(binary_form=True)\n"
        "        t.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n')\n"
        "        page = b''\n"
        "        try:\n"
        "            while chunk := t.recv(65536): page += chunk\n"
        "        except (ssl.SSLError, OSError): pass  # s_server closes without close_notify\n"
        "        print(page.decode(errors='replace'))\n"
        "        for c in sys.argv[3:]:\n"
        "            if c.encode() in der: print('CN=' + c, t.version())\n";
    std::vector<std::string> argv{kPython, "-c", script, std::to_string(port), name};
    argv.insert(argv.end(), candidates.begin(), candidates.end());
    auto result = runProcess(argv, milliseconds(15000));
    std::smatch match;
    static const std::regex subject("\nCN=([a-z-]+)");
    if (result.out.find(negotiated(version)) == std::string::npos) return "";
    return std::regex_search(result.out, match, subject) ? match[1].str() : "";
}

// ---- Plain upstreams that record what they receive, by accept order.

struct Received {
    std::mutex mutex;
    std::map<std::size_t, std::string> bytes;
};

TestServer::Handler recorder(std::shared_ptr<Received> board) {
    return [board](int fd, std::size_t index) {
        std::string all;
        receiveChunks(fd, deadlineIn(milliseconds(15000)), UINT64_MAX,
                      [&](const uint8_t* data, std::size_t size, uint64_t) {
                          all.append(reinterpret_cast<const char*>(data), size);
                      });
        std::lock_guard lock(board->mutex);
        board->bytes[index] = all;
    };
}

std::string receivedBy(const std::shared_ptr<Received>& board, std::size_t index,
                       const TestServer& server) {
    server.waitFinished(index + 1, deadlineIn(milliseconds(10000)));
    std::lock_guard lock(board->mutex);
    auto found = board->bytes.find(index);
    return found == board->bytes.end() ? "(nothing)" : found->second;
}

// A connection to 127.0.0.1:port from `source` (127.0.0.x), blocking with short I/O timeouts,
// without Nagle: the tests' small pieces leave as they are written.
UniqueFd clientFrom(const char* source, uint16_t port) {
    int error = 0;
    UniqueFd fd = connectFrom(source, port, error);
    if (!fd) return fd;
    int one = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

// Sends `bytes` (in pieces of `piece` bytes, a pause between them), then SHUT_WR; returns how
// the relay ended the connection.
PeerClose sendAndFinish(int fd, const std::string& bytes, std::size_t piece = 0) {
    int error = 0;
    if (piece == 0) piece = bytes.size();
    for (std::size_t at = 0; at < bytes.size(); at += piece) {
        std::size_t n = std::min(piece, bytes.size() - at);
        if (!sendAll(fd, bytes.data() + at, n, deadlineIn(milliseconds(5000)), error))
            return PeerClose::Reset;
        if (piece < bytes.size()) std::this_thread::sleep_for(milliseconds(2));
    }
    ::shutdown(fd, SHUT_WR);
    return waitPeerClose(fd, deadlineIn(milliseconds(10000)));
}

std::string asText(const std::vector<std::uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

std::string clientHello(const std::string& name, std::size_t padding = 0) {
    return asText(inRecords(clientHelloMessage({name, padding, true})));
}

// The value of splicegate_connections_refused_total for this route and reason (0: no line).
long refused(uint16_t metricsPort, const std::string& route, const std::string& reason) {
    auto reply = httpGet(metricsPort, "/metrics");
    std::regex line("splicegate_connections_refused_total\\{reason=\"" + reason + "\",route=\"" +
                    route + "\"\\} ([0-9]+)");
    std::smatch match;
    return std::regex_search(reply.body, match, line) ? std::stol(match[1].str()) : 0;
}

std::string configFile(const TempDir& dir, const std::string& text) {
    return dir.write("splicegate.conf", text);
}

std::string section(const std::string& name, uint16_t port, const std::string& upstream,
                    const std::string& extra) {
    return "[route." + name + "]\nlisten = " + loopback(port) + "\nupstream = " + upstream +
           "\n" + extra;
}

// A PROXY protocol v2 header from a source to a destination ("HOST:PORT" each).
std::string v2Header(const char* source, const char* destination) {
    return encodeProxyHeader(ProxyVersion::V2, numericAddress(source), numericAddress(destination));
}

// ---- SNI with real TLS clients and servers ---------------------------------------------------

TEST(SniProxyTest, RealTlsClientsReachTheUpstreamTheirServerNameChooses) {
    TempDir dir;
    TlsUpstream web(dir, "upstream-web"), api(dir, "upstream-api"), other(dir, "upstream-other");
    uint16_t port = pickFreePort();
    auto config = configFile(dir, section("web", port, web.address(), "sni = www.example.com\n") +
                                      section("api", port, api.address(), "sni = *.api.example.com\n") +
                                      section("other", port, other.address(), ""));
    Daemon daemon({"--config", config, "--workers", "2"});
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    std::vector<std::string> names{"upstream-web", "upstream-api", "upstream-other"};
    struct Case {
        std::string serverName;
        std::string expected;
    };
    for (const Case& c : {Case{"www.example.com", "upstream-web"},
                          Case{"v1.api.example.com", "upstream-api"},
                          Case{"unknown.example.org", "upstream-other"}}) {
        for (const char* version : {"-tls1_2", "-tls1_3"})
            EXPECT_EQ(viaOpensslClient(port, c.serverName, version), c.expected)
                << "s_client " << version << " " << c.serverName << "\n" << daemon.logTail();
        for (bool tls13 : {false, true})
            EXPECT_EQ(viaCurl(port, c.serverName, tls13), c.expected)
                << "curl " << tls13 << " " << c.serverName;
        for (const char* version : {"TLSv1_2", "TLSv1_3"})
            EXPECT_EQ(viaPython(port, c.serverName, version, names), c.expected)
                << "python " << version << " " << c.serverName;
    }
    // No server name at all: the route without sni.
    EXPECT_EQ(viaOpensslClient(port, "", "-tls1_3"), "upstream-other");
    EXPECT_EQ(viaPython(port, "", "TLSv1_2", names), "upstream-other");
    // A real client's ClientHello of about 10 KiB (a long ALPN list) is routed and completes;
    // one of about 18 KiB (over the 16 KiB limit, so in two records) is refused.
    EXPECT_EQ(viaPython(port, "www.example.com", "TLSv1_3", names, 1000), "upstream-web");
    EXPECT_EQ(viaPython(port, "www.example.com", "TLSv1_3", names, 1800), "");
    EXPECT_EQ(daemon.waitLogLines("reason=bad-client-hello", 1, milliseconds(5000)), 1u)
        << daemon.logTail();
    // The name is in the access line of the route it chose.
    EXPECT_GE(daemon.waitLogLines("route=web", 7, milliseconds(5000)), 7u) << daemon.logTail();
    auto lines = grepLines(daemon.log(), "access route=api");
    ASSERT_FALSE(lines.empty());
    EXPECT_NE(lines.front().find(" sni=v1.api.example.com"), std::string::npos) << lines.front();
    EXPECT_TRUE(terminatesCleanly(daemon));
}

TEST(SniProxyTest, ANameOfNoRouteIsRefusedWithoutADefaultRoute) {
    TempDir dir;
    TlsUpstream web(dir, "upstream-web");
    uint16_t port = pickFreePort(), metricsPort = pickFreePort();
    auto config = configFile(dir, section("web", port, web.address(), "sni = www.example.com\n"));
    Daemon daemon({"--config", config, "--workers", "2", "--metrics-listen", loopback(metricsPort)});
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    EXPECT_EQ(viaOpensslClient(port, "www.example.com", "-tls1_3"), "upstream-web");
    EXPECT_EQ(viaOpensslClient(port, "other.example.com", "-tls1_3"), "");
    EXPECT_EQ(viaOpensslClient(port, "", "-tls1_2"), "");
    ASSERT_EQ(daemon.waitLogLines("reason=no-route", 2, milliseconds(5000)), 2u)
        << daemon.logTail();
    auto lines = grepLines(daemon.log(), " sni=other.example.com");
    ASSERT_EQ(lines.size(), 1u) << daemon.logTail();
    EXPECT_NE(lines.front().find("access route=- "), std::string::npos) << lines.front();
    EXPECT_NE(lines.front().find(" reason=no-route "), std::string::npos) << lines.front();
    EXPECT_EQ(refused(metricsPort, "web", "no-route"), 2);
    EXPECT_TRUE(terminatesCleanly(daemon));
}

// ---- The ClientHello's edges, with upstreams that record what they get ----------------------

TEST(SniProxyTest, ClientHelloInTinySegmentsReachesTheUpstreamUnchangedAndAudited) {
    TempDir dir;
    auto boardA = std::make_shared<Received>(), boardB = std::make_shared<Received>();
    TestServer a(recorder(boardA)), b(recorder(boardB));
    uint16_t port = pickFreePort(), metricsPort = pickFreePort();
    auto config = configFile(dir, section("a", port, a.address(), "sni = a.example.com\n") +
                                      section("b", port, b.address(), "sni = b.example.com\n"));
    std::string auditDir = dir.path() + "/audit";
    Daemon daemon({"--config", config, "--workers", "2", "--audit-dir", auditDir,
                   "--metrics-listen", loopback(metricsPort)});
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();

    std::string hello = clientHello("b.example.com", 1200) + "and then the payload";
    UniqueFd split = clientFrom("127.0.0.1", port);
    ASSERT_TRUE(split);
    EXPECT_EQ(sendAndFinish(split.get(), hello, 7), PeerClose::Eof);
    EXPECT_EQ(receivedBy(boardB, 0, b), hello);
    EXPECT_EQ(a.acceptedCount(), 0u);

    // 16 KiB of ClientHello: routed. One byte of handshake more: refused, as is no TLS at all.
    auto fits = clientHelloMessage({"a.example.com", 0, true});
    fits = clientHelloMessage({"a.example.com", 16384 - fits.size() - 4, true});
    std::string big = asText(inRecords(fits, 4000));
    UniqueFd large = clientFrom("127.0.0.1", port);
    EXPECT_EQ(sendAndFinish(large.get(), big, 1000), PeerClose::Eof);
    EXPECT_EQ(receivedBy(boardA, 0, a), big);
    for (const std::string& refusedHello :
         {asText(inRecords(clientHelloMessage({"a.example.com", 16400, true}))),
          std::string("GET / HTTP/1.1\r\nHost: a.example.com\r\n\r\n")}) {
        UniqueFd fd = clientFrom("127.0.0.1", port);
        sendAndFinish(fd.get(), refusedHello);
    }
    ASSERT_EQ(daemon.waitLogLines("reason=bad-client-hello", 2, milliseconds(5000)), 2u)
        << daemon.logTail();
    EXPECT_EQ(refused(metricsPort, "a", "bad-client-hello"), 2);
    EXPECT_EQ(a.acceptedCount() + b.acceptedCount(), 2u);

    ASSERT_TRUE(terminatesCleanly(daemon));
    auto listing = auditList(auditDir);
    ASSERT_TRUE(listing.ok()) << listing.describe();
    ASSERT_EQ(listing.rows.size(), 2u);
    for (const auto& row : listing.rows) {
        auto extracted = auditExtract(auditDir, row.id, "c2u", dir.file("c2u"));
        ASSERT_TRUE(extracted.ok());
        EXPECT_EQ(readFile(extracted.path), row.route == "b" ? hello : big) << row.route;
    }
    EXPECT_TRUE(auditVerify(auditDir).status->isExit(0));
}

TEST(SniProxyTest, AClientThatSendsNothingIsClosedAtThePeekTimeout) {
    TempDir dir;
    auto board = std::make_shared<Received>();
    TestServer a(recorder(board));
    uint16_t port = pickFreePort(), metricsPort = pickFreePort();
    // A route without sni behind a balancer: its PROXY header has the same time.
    uint16_t proxiedPort = pickFreePort();
    auto config = configFile(dir, section("a", port, a.address(), "sni = a.example.com\n") +
                                      section("lb", proxiedPort, a.address(),
                                              "proxy-protocol-in = any\n"
                                              "proxy-trusted = 127.0.0.1/32\n"));
    Daemon daemon({"--config", config, "--workers", "1", "--sni-peek-timeout-ms", "300",
                   "--metrics-listen", loopback(metricsPort)});
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    ASSERT_TRUE(daemon.waitReady(proxiedPort)) << daemon.why();
    UniqueFd silent = clientFrom("127.0.0.1", port);
    UniqueFd half = clientFrom("127.0.0.1", port);
    UniqueFd halfHeader = clientFrom("127.0.0.1", proxiedPort);
    std::string hello = clientHello("a.example.com");
    std::string header = v2Header("192.0.2.7:40000", "198.51.100.1:443");
    int error = 0;
    ASSERT_TRUE(sendAll(half.get(), hello.data(), 20, deadlineIn(milliseconds(1000)), error));
    ASSERT_TRUE(sendAll(halfHeader.get(), header.data(), 20, deadlineIn(milliseconds(1000)),
                        error));
    auto start = Clock::now();
    EXPECT_EQ(waitPeerClose(silent.get(), deadlineIn(milliseconds(5000))), PeerClose::Eof);
    EXPECT_EQ(waitPeerClose(half.get(), deadlineIn(milliseconds(5000))), PeerClose::Eof);
    EXPECT_EQ(waitPeerClose(halfHeader.get(), deadlineIn(milliseconds(5000))), PeerClose::Eof);
    EXPECT_LT(Clock::now() - start, milliseconds(2000));
    ASSERT_EQ(daemon.waitLogLines("reason=peek-timeout", 3, milliseconds(3000)), 3u)
        << daemon.logTail();
    EXPECT_EQ(refused(metricsPort, "a", "peek-timeout"), 2);
    EXPECT_EQ(refused(metricsPort, "lb", "peek-timeout"), 1);
    EXPECT_EQ(a.acceptedCount(), 0u);
    EXPECT_TRUE(terminatesCleanly(daemon));
}

// ---- PROXY protocol in ----------------------------------------------------------------------

// A v2 header as balancers send it, with TLVs after the addresses (ALPN, an authority, a NOOP
// of padding, a vendor type): the relay skips them; the header's length field covers them.
std::string v2HeaderWithTlvs(const char* source, const char* destination) {
    std::string header = v2Header(source, destination);
    auto tlv = [](unsigned char type, const std::string& value) {
        return std::string(1, static_cast<char>(type)) +
               static_cast<char>((value.size() >> 8) & 0xff) +
               static_cast<char>(value.size() & 0xff) + value;
    };
    std::string tlvs = tlv(0x01, "h2") + tlv(0x02, "www.example.com") +
                       tlv(0x04, std::string(300, '\0')) + tlv(0xE0, "vendor");
    std::size_t length = header.size() - 16 + tlvs.size();
    header[14] = static_cast<char>((length >> 8) & 0xff);
    header[15] = static_cast<char>(length & 0xff);
    return header + tlvs;
}

TEST(SniProxyTest, ProxyHeadersFromTheTrustedBalancerNameTheClient) {
    TempDir dir;
    auto board = std::make_shared<Received>();
    TestServer upstream(recorder(board));
    uint16_t port = pickFreePort(), metricsPort = pickFreePort();
    auto config = configFile(dir, section("lb", port, upstream.address(),
                                          "proxy-protocol-in = any\n"
                                          "proxy-trusted = 127.0.0.1/32, 10.0.0.0/8\n"));
    std::string auditDir = dir.path() + "/audit";
    Daemon daemon({"--config", config, "--workers", "2", "--audit-dir", auditDir,
                   "--max-connections-per-source", "1", "--metrics-listen",
                   loopback(metricsPort)});
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    std::size_t upstreamIndex = 0;
    auto relayed = [&](const char* from, const std::string& header, const std::string& payload) {
        UniqueFd fd = clientFrom(from, port);
        EXPECT_EQ(sendAndFinish(fd.get(), header + payload, header.empty() ? 0 : 5),
                  PeerClose::Eof);
        return receivedBy(board, upstreamIndex++, upstream);
    };
    EXPECT_EQ(relayed("127.0.0.1", "PROXY TCP4 192.0.2.7 198.51.100.1 40000 443\r\n", "one"),
              "one");
    EXPECT_EQ(relayed("127.0.0.1", v2Header("192.0.2.8:40001", "198.51.100.1:443"), "two"),
              "two");
    EXPECT_EQ(relayed("127.0.0.1", v2Header("[2001:db8::9]:5000", "[2001:db8::1]:443"), "six"),
              "six");
    EXPECT_EQ(relayed("127.0.0.1", "PROXY TCP6 2001:db8::10 2001:db8::1 5001 443\r\n", "v1six"),
              "v1six");
    EXPECT_EQ(relayed("127.0.0.1", v2HeaderWithTlvs("192.0.2.11:40011", "198.51.100.1:443"),
                      "tlvs"),
              "tlvs");
    std::string local = encodeProxyHeader(ProxyVersion::V2, {}, {});
    EXPECT_EQ(relayed("127.0.0.1", local, "local"), "local");
    // Outside proxy-trusted and without a header: relayed as it is.
    EXPECT_EQ(relayed("127.0.0.3", "", "direct"), "direct");
    ASSERT_EQ(daemon.waitLogLines("access route=lb", 7, milliseconds(5000)), 7u)
        << daemon.logTail();
    auto log = daemon.log();
    EXPECT_EQ(grepLines(log, "client=192.0.2.7:40000 ").size(), 1u) << log;
    EXPECT_EQ(grepLines(log, "client=[2001:db8::9]:5000 ").size(), 1u) << log;
    EXPECT_EQ(grepLines(log, "client=[2001:db8::10]:5001 ").size(), 1u) << log;
    EXPECT_EQ(grepLines(log, "client=192.0.2.11:40011 ").size(), 1u) << log;
    EXPECT_EQ(grepLines(log, " via=127.0.0.1:").size(), 5u) << log;
    EXPECT_EQ(grepLines(log, "client=127.0.0.3:").size(), 1u) << log;

    // Refused: the trusted balancer without a header or with a TLV that runs past the header's
    // end, an untrusted source with one.
    std::string badTlv = v2Header("192.0.2.12:1", "198.51.100.1:443") + std::string("\x01\x00\x10" "ab", 5);
    badTlv[15] = static_cast<char>(badTlv[15] + 5);
    for (auto [from, bytes] : {std::pair{"127.0.0.1", std::string("GET / HTTP/1.0\r\n\r\n")},
                               std::pair{"127.0.0.1", badTlv},
                               std::pair{"127.0.0.3", v2Header("192.0.2.1:1", "192.0.2.2:2")},
                               std::pair{"127.0.0.3", std::string("PROXY TCP4 192.0.2.1 "
                                                                  "192.0.2.2 1 2\r\n")}}) {
        UniqueFd fd = clientFrom(from, port);
        sendAndFinish(fd.get(), bytes + "payload");
    }
    ASSERT_EQ(daemon.waitLogLines("reason=proxy-protocol", 4, milliseconds(5000)), 4u)
        << daemon.logTail();
    EXPECT_EQ(refused(metricsPort, "lb", "proxy-protocol"), 4);

    // The per-source limit (1) counts the client the header names, not the balancer.
    UniqueFd first = clientFrom("127.0.0.1", port);
    int error = 0;
    std::string held = v2Header("192.0.2.50:1000", "198.51.100.1:443") + "held";
    ASSERT_TRUE(sendAll(first.get(), held.data(), held.size(), deadlineIn(milliseconds(2000)),
                        error));
    ASSERT_TRUE(upstream.waitAccepted(upstreamIndex + 1, deadlineIn(milliseconds(5000))));
    std::size_t heldIndex = upstreamIndex++;
    EXPECT_EQ(relayed("127.0.0.1", v2Header("192.0.2.51:1000", "198.51.100.1:443"), "other"),
              "other");
    UniqueFd same = clientFrom("127.0.0.1", port);
    sendAndFinish(same.get(), v2Header("192.0.2.50:1001", "198.51.100.1:443") + "same");
    EXPECT_EQ(daemon.waitLogLines("reason=max-connections-per-source", 1, milliseconds(5000)), 1u)
        << daemon.logTail();
    ::shutdown(first.get(), SHUT_WR);
    EXPECT_EQ(waitPeerClose(first.get(), deadlineIn(milliseconds(5000))), PeerClose::Eof);
    EXPECT_EQ(receivedBy(board, heldIndex, upstream), "held");

    ASSERT_TRUE(terminatesCleanly(daemon));
    // The audit has the header's client and the payload only.
    auto listing = auditList(auditDir);
    ASSERT_TRUE(listing.ok()) << listing.describe();
    bool found = false;
    for (const auto& row : listing.rows) {
        if (row.client != "192.0.2.7:40000") continue;
        found = true;
        auto extracted = auditExtract(auditDir, row.id, "c2u", dir.file("c2u"));
        ASSERT_TRUE(extracted.ok());
        EXPECT_EQ(readFile(extracted.path), "one");
    }
    EXPECT_TRUE(found) << listing.describe();
    // Only the LOCAL one (a balancer's health check) keeps the balancer's address.
    std::size_t balancerRows = 0;
    for (const auto& row : listing.rows) balancerRows += row.client.starts_with("127.0.0.1:");
    EXPECT_EQ(balancerRows, 1u) << listing.describe();
    EXPECT_TRUE(auditVerify(auditDir).status->isExit(0));
}

TEST(SniProxyTest, AProxyHeaderThenAClientHelloIsRoutedByName) {
    TempDir dir;
    auto boardA = std::make_shared<Received>(), boardB = std::make_shared<Received>();
    TestServer a(recorder(boardA)), b(recorder(boardB));
    uint16_t port = pickFreePort();
    std::string proxy = "proxy-protocol-in = v1\nproxy-trusted = 127.0.0.1\n";
    auto config = configFile(dir, section("a", port, a.address(), "sni = a.example.com\n" + proxy) +
                                      section("b", port, b.address(), proxy));
    std::string adminSocket = dir.file("admin.sock");
    Daemon daemon({"--config", config, "--workers", "2", "--admin-socket", adminSocket,
                   "--admin-group", "root"});
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    std::string hello = clientHello("a.example.com");
    UniqueFd fd = clientFrom("127.0.0.1", port);
    std::string bytes = "PROXY TCP4 192.0.2.7 198.51.100.1 40000 443\r\n" + hello;
    int error = 0;
    ASSERT_TRUE(sendAll(fd.get(), bytes.data(), bytes.size(), deadlineIn(milliseconds(2000)), error));
    ASSERT_TRUE(a.waitAccepted(1, deadlineIn(milliseconds(5000))));
    // splicegatectl connections names the client, the balancer and the server name.
    auto listed = runProcess({std::string(SPLICEGATE_BIN_DIR) + "/splicegatectl", "--socket",
                              adminSocket, "--json", "connections"});
    EXPECT_NE(listed.out.find("\"client\": \"192.0.2.7:40000\""), std::string::npos) << listed.out;
    EXPECT_NE(listed.out.find("\"sni\": \"a.example.com\""), std::string::npos) << listed.out;
    EXPECT_NE(listed.out.find("\"via\": \"127.0.0.1:"), std::string::npos) << listed.out;
    auto table = runProcess({std::string(SPLICEGATE_BIN_DIR) + "/splicegatectl", "--socket",
                             adminSocket, "connections"});
    EXPECT_NE(table.out.find("a.example.com"), std::string::npos) << table.out;
    EXPECT_EQ(sendAndFinish(fd.get(), ""), PeerClose::Eof);
    EXPECT_EQ(receivedBy(boardA, 0, a), hello);
    ASSERT_EQ(daemon.waitLogLines("access route=a ", 1, milliseconds(5000)), 1u);
    auto line = grepLines(daemon.log(), "access route=a ").front();
    EXPECT_NE(line.find("client=192.0.2.7:40000 "), std::string::npos) << line;
    EXPECT_NE(line.find(" sni=a.example.com via=127.0.0.1:"), std::string::npos) << line;
    // proxy-protocol-in = v1: a v2 header from the trusted balancer is refused.
    UniqueFd v2 = clientFrom("127.0.0.1", port);
    sendAndFinish(v2.get(), v2Header("192.0.2.8:40001", "198.51.100.1:443") + hello);
    EXPECT_EQ(daemon.waitLogLines("reason=proxy-protocol", 1, milliseconds(5000)), 1u)
        << daemon.logTail();
    EXPECT_EQ(a.acceptedCount(), 1u);
    EXPECT_TRUE(terminatesCleanly(daemon));
}

// A reload moves server names between the routes of an address and turns the PROXY header on
// for them, all at once; one whose routes of an address disagree on proxy-protocol-in changes
// neither the names nor the header.
TEST(SniProxyTest, AReloadChangesNamesAndTheProxyHeaderAllOrNothing) {
    TempDir dir;
    auto boardA = std::make_shared<Received>(), boardB = std::make_shared<Received>();
    TestServer a(recorder(boardA)), b(recorder(boardB));
    uint16_t port = pickFreePort();
    std::string proxy = "proxy-protocol-in = v1\nproxy-trusted = 127.0.0.1\n";
    auto config = configFile(dir, section("a", port, a.address(), "sni = a.example.com\n") +
                                      section("b", port, b.address(), ""));
    std::string adminSocket = dir.file("admin.sock");
    Daemon daemon({"--config", config, "--workers", "2", "--admin-socket", adminSocket,
                   "--admin-group", "root"});
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    auto reload = [&](const std::string& text) {
        configFile(dir, text);
        return runProcess({std::string(SPLICEGATE_BIN_DIR) + "/splicegatectl", "--socket",
                           adminSocket, "reload"});
    };
    const std::string header = "PROXY TCP4 192.0.2.7 198.51.100.1 40000 443\r\n";
    auto send = [&](const std::string& name, const std::string& prefix) {
        UniqueFd fd = clientFrom("127.0.0.1", port);
        return sendAndFinish(fd.get(), prefix + clientHello(name));
    };
    EXPECT_EQ(send("a.example.com", ""), PeerClose::Eof);
    EXPECT_EQ(receivedBy(boardA, 0, a), clientHello("a.example.com"));

    auto good = reload(section("a", port, a.address(), "sni = x.example.com\n" + proxy) +
                       section("b", port, b.address(), proxy));
    ASSERT_TRUE(good.status && good.status->isExit(0)) << good.out << good.err;
    EXPECT_EQ(send("a.example.com", header), PeerClose::Eof);
    EXPECT_EQ(receivedBy(boardB, 0, b), clientHello("a.example.com")) << "name a moved to b";
    EXPECT_EQ(send("x.example.com", header), PeerClose::Eof);
    EXPECT_EQ(receivedBy(boardA, 1, a), clientHello("x.example.com")) << "name x is a's";

    auto bad = reload(section("a", port, a.address(), "sni = a.example.com\n" + proxy) +
                      section("b", port, b.address(), ""));
    ASSERT_TRUE(bad.status);
    EXPECT_TRUE(bad.status->isExit(1)) << bad.out << bad.err;
    EXPECT_NE(bad.err.find("proxy-protocol-in"), std::string::npos) << bad.err;
    EXPECT_EQ(send("x.example.com", header), PeerClose::Eof);
    EXPECT_EQ(receivedBy(boardA, 2, a), clientHello("x.example.com")) << "x is still a's";
    EXPECT_EQ(send("a.example.com", header), PeerClose::Eof);
    EXPECT_EQ(receivedBy(boardB, 1, b), clientHello("a.example.com")) << "a is still b's";
    ASSERT_EQ(daemon.waitLogLines("client=192.0.2.7:40000 ", 4, milliseconds(5000)), 4u)
        << daemon.logTail();
    EXPECT_TRUE(terminatesCleanly(daemon));
}

// The audit's Open record keeps the balancer (via) and the server name (sni): in
// `splicegate-audit list --json` and in the connections object the archiver writes for a sealed
// segment, read here from the daemon's own log. The PROXY header is in neither payload.
TEST(SniProxyTest, TheAuditAndTheArchiveIndexNameTheBalancerAndTheServerName) {
    TempDir dir;
    auto boardA = std::make_shared<Received>(), boardB = std::make_shared<Received>();
    TestServer a(recorder(boardA)), b(recorder(boardB));
    uint16_t port = pickFreePort();
    std::string proxy = "proxy-protocol-in = v2\nproxy-trusted = 127.0.0.1/32\n";
    auto config = configFile(dir, section("a", port, a.address(), "sni = a.example.com\n" + proxy) +
                                      section("b", port, b.address(), proxy));
    std::string auditDir = dir.path() + "/audit";
    Daemon daemon({"--config", config, "--workers", "2", "--audit-dir", auditDir});
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    std::string helloA = clientHello("a.example.com"), helloB = clientHello("other.example.org");
    UniqueFd balanced = clientFrom("127.0.0.1", port);
    std::string via = "127.0.0.1:" + std::to_string(localPort(balanced.get()));
    EXPECT_EQ(sendAndFinish(balanced.get(),
                            v2Header("192.0.2.7:40000", "198.51.100.1:443") + helloA + "payload"),
              PeerClose::Eof);
    EXPECT_EQ(receivedBy(boardA, 0, a), helloA + "payload");
    UniqueFd direct = clientFrom("127.0.0.3", port);  // outside proxy-trusted: no header
    EXPECT_EQ(sendAndFinish(direct.get(), helloB), PeerClose::Eof);
    EXPECT_EQ(receivedBy(boardB, 0, b), helloB);
    ASSERT_TRUE(terminatesCleanly(daemon));

    auto listing = auditList(auditDir);
    ASSERT_TRUE(listing.ok()) << listing.describe();
    ASSERT_EQ(listing.rows.size(), 2u) << listing.describe();
    for (const auto& row : listing.rows) {
        auto extracted = auditExtract(auditDir, row.id, "c2u", dir.file("c2u"));
        ASSERT_TRUE(extracted.ok());
        if (row.route == "a") {
            EXPECT_EQ(row.client, "192.0.2.7:40000");
            EXPECT_EQ(row.via, via);
            EXPECT_EQ(row.sni, "a.example.com");
            EXPECT_EQ(readFile(extracted.path), helloA + "payload");  // no PROXY header
        } else {
            EXPECT_EQ(row.route, "b");
            EXPECT_TRUE(row.client.starts_with("127.0.0.3:")) << row.client;
            EXPECT_EQ(row.via, "");  // null
            EXPECT_EQ(row.sni, "other.example.org");
            EXPECT_EQ(readFile(extracted.path), helloB);
        }
    }
    EXPECT_TRUE(auditVerifies(auditDir));

    // The archive's connections objects of the sealed segments, as the archiver makes them.
    std::string objects;
    for (const auto& files : audit::listSegments(auditDir)) {
        if (!files.hasIndex) continue;
        auto segment = archive::readSealedSegment(files);
        if (segment) objects += archive::connectionsJsonLines(*segment);
    }
    EXPECT_EQ(grepLines(objects, "\"client\":\"192.0.2.7:40000\",\"via\":\"" + via +
                                     "\",\"sni\":\"a.example.com\",")
                  .size(),
              1u)
        << objects;
    EXPECT_EQ(grepLines(objects, "\"via\":null,\"sni\":\"other.example.org\",").size(), 1u)
        << objects;
}

// A listener whose routes SNI chooses admits each connection under the limits of the route its
// ClientHello chose, not its first route's: a max-connections and a per-source limit of one
// route refuse its connections only (reason max-connections / max-connections-per-source,
// counted and logged on that route), and a refusal releases what it booked.
TEST(SniProxyTest, EachSniRouteAdmitsUnderItsOwnLimits) {
    TempDir dir;
    auto boardA = std::make_shared<Received>(), boardB = std::make_shared<Received>(),
         boardC = std::make_shared<Received>();
    TestServer a(recorder(boardA)), b(recorder(boardB)), c(recorder(boardC));
    uint16_t port = pickFreePort(), metricsPort = pickFreePort();
    auto config = configFile(
        dir, section("a", port, a.address(), "sni = a.example.com\nmax-connections = 1\n") +
                 section("b", port, b.address(), "max-connections = 2\n") +
                 section("c", port, c.address(),
                         "sni = c.example.com\nmax-connections-per-source = 1\n"));
    Daemon daemon(
        {"--config", config, "--workers", "2", "--metrics-listen", loopback(metricsPort)});
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    int error = 0;
    auto hold = [&](const char* from, const std::string& name) {
        UniqueFd fd = clientFrom(from, port);
        std::string hello = clientHello(name);
        EXPECT_TRUE(
            sendAll(fd.get(), hello.data(), hello.size(), deadlineIn(milliseconds(2000)), error));
        return fd;
    };
    auto refusedNow = [&](const char* from, const std::string& name) {
        UniqueFd fd = hold(from, name);
        EXPECT_NE(waitPeerClose(fd.get(), deadlineIn(milliseconds(5000))), PeerClose::Timeout);
    };
    UniqueFd a1 = hold("127.0.0.1", "a.example.com");
    ASSERT_TRUE(a.waitAccepted(1, deadlineIn(milliseconds(5000))));
    // Route a (the listener's first) is full; b has its own limit, two.
    UniqueFd b1 = hold("127.0.0.1", "b.example.com"), b2 = hold("127.0.0.1", "b.example.com");
    ASSERT_TRUE(b.waitAccepted(2, deadlineIn(milliseconds(5000)))) << daemon.logTail();
    // c's per-source limit (one) counts 127.0.0.1 on c alone: its two b connections do not.
    UniqueFd c1 = hold("127.0.0.1", "c.example.com");
    ASSERT_TRUE(c.waitAccepted(1, deadlineIn(milliseconds(5000)))) << daemon.logTail();
    refusedNow("127.0.0.1", "b.example.com");
    refusedNow("127.0.0.1", "a.example.com");
    refusedNow("127.0.0.1", "c.example.com");
    UniqueFd c2 = hold("127.0.0.2", "c.example.com");  // another source
    ASSERT_TRUE(c.waitAccepted(2, deadlineIn(milliseconds(5000)))) << daemon.logTail();
    ASSERT_EQ(daemon.waitLogLines("reason=max-connections", 3, milliseconds(5000)), 3u)
        << daemon.logTail();
    auto log = daemon.log();
    EXPECT_EQ(grepLines(log, "access route=b ").size(), 1u) << log;
    EXPECT_NE(grepLines(log, "access route=b ").front().find("reason=max-connections "),
              std::string::npos)
        << log;
    EXPECT_EQ(grepLines(log, "access route=a ").size(), 1u) << log;
    EXPECT_EQ(grepLines(log, "access route=c ").size(), 1u) << log;
    EXPECT_NE(grepLines(log, "access route=c ").front().find("reason=max-connections-per-source"),
              std::string::npos)
        << log;
    EXPECT_EQ(
        grepLines(log, "route b: refusing connections: 2 connections open on the route").size(), 1u)
        << log;
    EXPECT_EQ(refused(metricsPort, "b", "max-connections"), 1);
    EXPECT_EQ(refused(metricsPort, "a", "max-connections"), 1);
    EXPECT_EQ(refused(metricsPort, "c", "max-connections-per-source"), 1);
    EXPECT_EQ(refused(metricsPort, "a", "max-connections-per-source"), 0);

    // What the connections booked is given back when they close: a and b take new ones.
    for (UniqueFd* held : {&a1, &b1}) {
        ::shutdown(held->get(), SHUT_WR);
        EXPECT_EQ(waitPeerClose(held->get(), deadlineIn(milliseconds(5000))), PeerClose::Eof);
    }
    ASSERT_TRUE(a.waitFinished(1, deadlineIn(milliseconds(5000))));
    ASSERT_TRUE(b.waitFinished(1, deadlineIn(milliseconds(5000))));
    ASSERT_EQ(daemon.waitLogLines("reason=closed", 2, milliseconds(5000)), 2u) << daemon.logTail();
    UniqueFd a2 = hold("127.0.0.1", "a.example.com"), b3 = hold("127.0.0.1", "b.example.com");
    EXPECT_TRUE(a.waitAccepted(2, deadlineIn(milliseconds(5000)))) << daemon.logTail();
    EXPECT_TRUE(b.waitAccepted(3, deadlineIn(milliseconds(5000)))) << daemon.logTail();
    for (UniqueFd* held : {&a2, &b2, &b3, &c1, &c2}) ::shutdown(held->get(), SHUT_WR);
    EXPECT_TRUE(terminatesCleanly(daemon));
}

// ---- PROXY protocol out ---------------------------------------------------------------------

TEST(SniProxyTest, ProxyProtocolOutPutsTheClientBeforeItsFirstByte) {
    TempDir dir;
    auto board1 = std::make_shared<Received>(), board2 = std::make_shared<Received>(),
         board3 = std::make_shared<Received>();
    auto board4 = std::make_shared<Received>();
    TestServer v1(recorder(board1)), v2(recorder(board2)), six(recorder(board3)),
        quiet(recorder(board4));
    uint16_t port1 = pickFreePort(), port2 = pickFreePort(), port3 = pickFreePort(),
             port4 = pickFreePort();
    auto config = configFile(
        dir, section("one", port1, v1.address(), "proxy-protocol-out = v1\n") +
                 section("two", port2, v2.address(),
                         "proxy-protocol-out = v2\nproxy-protocol-in = v2\n"
                         "proxy-trusted = 127.0.0.1/32\n") +
                 section("three", port3, six.address(),
                         "proxy-protocol-out = v1\nproxy-protocol-in = any\n"
                         "proxy-trusted = 127.0.0.1/32\n") +
                 section("quiet", port4, quiet.address(), "audit = false\n"));
    std::string auditDir = dir.path() + "/audit";
    Daemon daemon({"--config", config, "--workers", "2", "--audit-dir", auditDir});
    ASSERT_TRUE(daemon.waitReady(port1)) << daemon.why();
    UniqueFd plain = clientFrom("127.0.0.3", port1);
    uint16_t clientPort = localPort(plain.get());
    EXPECT_EQ(sendAndFinish(plain.get(), "payload one"), PeerClose::Eof);
    EXPECT_EQ(receivedBy(board1, 0, v1), "PROXY TCP4 127.0.0.3 127.0.0.1 " +
                                             std::to_string(clientPort) + " " +
                                             std::to_string(port1) + "\r\npayload one");
    // A header in, a header out: the upstream hears of the client the balancer named.
    UniqueFd proxied = clientFrom("127.0.0.1", port2);
    EXPECT_EQ(sendAndFinish(proxied.get(),
                            v2Header("192.0.2.7:40000", "198.51.100.1:443") + "payload two"),
              PeerClose::Eof);
    auto got = receivedBy(board2, 0, v2);
    EXPECT_EQ(got, v2Header("192.0.2.7:40000", "198.51.100.1:443") + "payload two");
    // An IPv6 client: TCP6 in v2 and in v1, whichever the header in was.
    UniqueFd sixIn = clientFrom("127.0.0.1", port2);
    EXPECT_EQ(sendAndFinish(sixIn.get(),
                            v2Header("[2001:db8::9]:5000", "[2001:db8::1]:443") + "payload six"),
              PeerClose::Eof);
    EXPECT_EQ(receivedBy(board2, 1, v2),
              v2Header("[2001:db8::9]:5000", "[2001:db8::1]:443") + "payload six");
    ASSERT_TRUE(daemon.waitReady(port3)) << daemon.why();
    UniqueFd sixOut = clientFrom("127.0.0.1", port3);
    EXPECT_EQ(sendAndFinish(sixOut.get(),
                            v2Header("[2001:db8::9]:5000", "[2001:db8::1]:443") + "payload v1"),
              PeerClose::Eof);
    EXPECT_EQ(receivedBy(board3, 0, six),
              "PROXY TCP6 2001:db8::9 2001:db8::1 5000 443\r\npayload v1");
    // A route with audit = false relays and is not in the audit.
    ASSERT_TRUE(daemon.waitReady(port4)) << daemon.why();
    UniqueFd unaudited = clientFrom("127.0.0.3", port4);
    EXPECT_EQ(sendAndFinish(unaudited.get(), "payload quiet"), PeerClose::Eof);
    EXPECT_EQ(receivedBy(board4, 0, quiet), "payload quiet");
    ASSERT_TRUE(terminatesCleanly(daemon));
    auto listing = auditList(auditDir);
    ASSERT_TRUE(listing.ok()) << listing.describe();
    ASSERT_EQ(listing.rows.size(), 4u) << listing.describe();  // none of route quiet
    for (const auto& row : listing.rows) {
        auto extracted = auditExtract(auditDir, row.id, "c2u", dir.file("c2u"));
        ASSERT_TRUE(extracted.ok());
        auto payload = readFile(extracted.path);
        if (row.route == "one") EXPECT_EQ(payload, "payload one");
        else if (row.route == "three") EXPECT_EQ(payload, "payload v1");
        else EXPECT_TRUE(payload == "payload two" || payload == "payload six") << payload;
    }
}

}  // namespace
}  // namespace splicegate::test
