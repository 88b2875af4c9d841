// HttpConnections (archive/s3/Http.h) against an in-process HTTP/1.1 server that counts the TCP
// connections it accepts: requests in a row share one connection, a body streamed from a file goes
// out whole over a kept connection, a request that failed (a timeout) leaves its connection
// behind so the next one connects afresh, and a server that closes after each reply gets a new
// connection per request, counted as such. The same against radosgw, over TLS too:
// tests/s3/S3ClientRadosgwTest.cpp.
#include "archive/s3/Http.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "tests/support/TestServer.h"

namespace splicegate::s3 {
namespace {

using namespace std::chrono_literals;

// One request's head and body, read with a bound; false when the peer closed or went quiet.
bool readRequest(int fd, std::string& head, std::string& body) {
    std::string data;
    auto deadline = test::deadlineIn(5000ms);
    auto receive = [&]() {
        if (test::Clock::now() >= deadline) return false;
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 100) <= 0) return true;
        char buffer[65536];
        ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
        if (n <= 0) return false;
        data.append(buffer, static_cast<std::size_t>(n));
        return true;
    };
    std::size_t end;
    while ((end = data.find("\r\n\r\n")) == std::string::npos)
        if (!receive()) return false;
    head = data.substr(0, end);
    std::size_t length = 0;
    if (auto at = head.find("Content-Length: "); at != std::string::npos)
        length = std::stoul(head.substr(at + 16));
    while (data.size() < end + 4 + length)
        if (!receive()) return false;
    body = data.substr(end + 4, length);
    return true;
}

// Paths: /slow answers after 1 s (past the client's timeout), /close answers and closes, /big
// answers 3 MiB of 'b', /missing a 404 with an error document; any other answers with its
// body's size and keeps the connection.
void serve(int fd, std::size_t) {
    std::string head, body;
    while (readRequest(fd, head, body)) {
        std::string path = head.substr(head.find(' ') + 1);
        path = path.substr(0, path.find(' '));
        if (path == "/slow") std::this_thread::sleep_for(1s);
        bool close = path == "/close";
        std::string reply = std::to_string(body.size());
        std::string status = "200 OK";
        if (path == "/big") reply.assign(3u << 20, 'b');
        if (path == "/missing") {
            status = "404 Not Found";
            reply = "<Error><Code>NoSuchKey</Code></Error>";
        }
        std::string response = "HTTP/1.1 " + status + "\r\nContent-Length: " + std::to_string(reply.size()) +
                               (close ? "\r\nConnection: close" : "") + "\r\n\r\n" + reply;
        int error = 0;
        if (!test::sendAll(fd, response.data(), response.size(), test::deadlineIn(5000ms), error)) return;
        if (close) return;
    }
}

HttpRequest request(const test::TestServer& server, const std::string& method, const std::string& path) {
    HttpRequest r;
    r.method = method;
    r.url = "http://" + server.address() + path;
    r.timeoutMs = 300;
    return r;
}

// Counts what a streamed body gave, and how often it started over.
struct CountingSink final : BodySink {
    std::size_t bytes = 0, restarts = 0;
    bool allB = true;
    void restart() override {
        ++restarts;
        bytes = 0;
    }
    void take(std::string_view data) override {
        bytes += data.size();
        allB = allB && data.find_first_not_of('b') == std::string_view::npos;
    }
};

TEST(S3HttpConnectionsTest, ASinkTakesASuccessfulBodyAndNotAnErrorDocument) {
    test::TestServer server(&serve);
    HttpConnections http;
    CountingSink sink;
    auto big = request(server, "GET", "/big");
    big.sink = &sink;
    auto got = http.perform(big);
    ASSERT_EQ(got.transportError, "");
    EXPECT_EQ(got.response.status, 200);
    EXPECT_EQ(sink.bytes, 3u << 20);
    EXPECT_TRUE(sink.allB);
    EXPECT_EQ(got.response.body, "");   // not kept as well

    auto missing = request(server, "GET", "/missing");
    missing.sink = &sink;
    auto refused = http.perform(missing);
    ASSERT_EQ(refused.transportError, "");
    EXPECT_EQ(refused.response.status, 404);
    EXPECT_EQ(sink.restarts, 2u);
    EXPECT_EQ(sink.bytes, 0u);   // started over, and the error went to the body
    EXPECT_EQ(refused.response.body, "<Error><Code>NoSuchKey</Code></Error>");
}

TEST(S3HttpConnectionsTest, RequestsInARowShareOneConnection) {
    test::TestServer server(&serve);
    HttpConnections http;
    std::string body(3u << 20, 'x');  // more than curl's 2 MiB upload buffer
    for (int i = 0; i < 5; ++i) {
        auto get = http.perform(request(server, "GET", "/object"));
        ASSERT_EQ(get.transportError, "");
        EXPECT_EQ(get.response.status, 200);
        auto head = http.perform(request(server, "HEAD", "/object"));
        ASSERT_EQ(head.transportError, "");
        auto put = request(server, "PUT", "/object");
        put.body = body;
        auto stored = http.perform(put);
        ASSERT_EQ(stored.transportError, "");
        EXPECT_EQ(stored.response.body, std::to_string(body.size()));
    }
    EXPECT_EQ(server.acceptedCount(), 1u);
    EXPECT_EQ(http.connectionsOpened(), 1u);
    EXPECT_EQ(http.requests(), 15u);
}

TEST(S3HttpConnectionsTest, AFileBodyGoesOutWholeOverAKeptConnection) {
    test::TestServer server(&serve);
    HttpConnections http;
    char path[] = "/var/tmp/splicegate-http-XXXXXX";
    int fd = ::mkstemp(path);
    ASSERT_GE(fd, 0);
    ::unlink(path);
    std::string content((5u << 20) + 777, 'y');
    ASSERT_EQ(::write(fd, content.data(), content.size()), static_cast<ssize_t>(content.size()));
    for (std::uint64_t offset : {std::uint64_t{0}, std::uint64_t{4096}, std::uint64_t{5}}) {
        auto put = request(server, "PUT", "/file");
        put.file = FileRange{fd, offset, content.size() - offset};
        put.timeoutMs = 5000;
        auto stored = http.perform(put);
        ASSERT_EQ(stored.transportError, "");
        EXPECT_EQ(stored.response.body, std::to_string(content.size() - offset));
    }
    ::close(fd);
    EXPECT_EQ(server.acceptedCount(), 1u);
}

TEST(S3HttpConnectionsTest, AFailedRequestsConnectionIsNotReused) {
    test::TestServer server(&serve);
    HttpConnections http;
    ASSERT_EQ(http.perform(request(server, "GET", "/first")).transportError, "");
    auto slow = http.perform(request(server, "GET", "/slow"));
    EXPECT_NE(slow.transportError, "");   // timed out on the kept connection
    auto after = http.perform(request(server, "GET", "/after"));
    ASSERT_EQ(after.transportError, "");
    EXPECT_EQ(after.response.status, 200);
    EXPECT_EQ(server.acceptedCount(), 2u);
    EXPECT_EQ(http.connectionsOpened(), 2u);
}

TEST(S3HttpConnectionsTest, AServerThatClosesGetsANewConnectionEachTime) {
    test::TestServer server(&serve);
    HttpConnections http;
    for (int i = 0; i < 3; ++i) ASSERT_EQ(http.perform(request(server, "GET", "/close")).transportError, "");
    EXPECT_EQ(server.acceptedCount(), 3u);
    EXPECT_EQ(http.connectionsOpened(), 3u);
}

TEST(S3HttpConnectionsTest, ThreadsAtOnceEachKeepAConnection) {
    test::TestServer server(&serve);
    HttpConnections http;
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t)
        threads.emplace_back([&] {
            for (int i = 0; i < 10; ++i) EXPECT_EQ(http.perform(request(server, "GET", "/object")).transportError, "");
        });
    for (auto& t : threads) t.join();
    EXPECT_LE(server.acceptedCount(), 2u);
    EXPECT_EQ(http.connectionsOpened(), server.acceptedCount());
    EXPECT_EQ(http.requests(), 20u);
}

}  // namespace
}  // namespace splicegate::s3
