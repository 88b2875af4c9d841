#include "tests/support/Traffic.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <thread>
#include <vector>

#include "tests/support/PatternStream.h"

namespace splicegate::test {

TestServer::Handler duplexUpstream(std::shared_ptr<DuplexBoard> board, milliseconds timeout) {
    return [board, timeout](int fd, std::size_t) {
        Deadline deadline = deadlineIn(timeout);
        StreamHeader header;
        int error = 0;
        if (!recvHeader(fd, header, deadline, error)) return;
        DuplexResult result;
        std::thread sender(
            [&] { result.sent = sendPattern(fd, u2cSeed(header.id), header.size, deadline); });
        result.received = receiveAll(fd, deadline);
        sender.join();
        board->put(header.id, std::move(result));
    };
}

ClientRun duplexClient(uint16_t port, uint64_t id, uint64_t c2uSize, uint64_t u2cSize,
                       milliseconds timeout, bool ipv6) {
    ClientRun run;
    run.id = id;
    Deadline deadline = deadlineIn(timeout);
    UniqueFd fd = connectTcp(port, run.connectError, milliseconds(5000), ipv6);
    if (!fd) return run;
    if (!sendHeader(fd.get(), StreamHeader{id, u2cSize}, deadline, run.headerError)) return run;
    run.result = duplex(fd.get(), c2uSeed(id), c2uSize, deadline);
    return run;
}

std::vector<ClientRun> duplexClients(uint16_t port, std::size_t count, uint64_t firstId,
                                     uint64_t c2uSize, uint64_t u2cSize, milliseconds timeout) {
    std::vector<ClientRun> runs(count);
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < count; ++i) {
        threads.emplace_back(
            [&, i] { runs[i] = duplexClient(port, firstId + i, c2uSize, u2cSize, timeout); });
    }
    for (auto& thread : threads) thread.join();
    return runs;
}

::testing::AssertionResult duplexMatches(const std::vector<ClientRun>& clients,
                                         const DuplexBoard& board, uint64_t c2uSize,
                                         uint64_t u2cSize, milliseconds wait) {
    board.waitUntil(
        [&](const std::vector<std::pair<uint64_t, DuplexResult>>& values) {
            for (const auto& run : clients) {
                if (run.connectError != 0 || run.headerError != 0) continue;
                bool found = false;
                for (const auto& value : values) found = found || value.first == run.id;
                if (!found) return false;
            }
            return true;
        },
        deadlineIn(wait));
    std::map<uint64_t, DuplexResult> upstream;
    for (auto& [id, result] : board.snapshot()) upstream[id] = result;
    // Expected digests, computed independently of both ends (cached per size/seed pair).
    std::ostringstream problems;
    int bad = 0;
    for (const auto& run : clients) {
        std::ostringstream p;
        const std::string expectC2u = patternSha256(c2uSeed(run.id), c2uSize);
        const std::string expectU2c = patternSha256(u2cSeed(run.id), u2cSize);
        if (run.connectError != 0) {
            p << "connect failed: " << std::strerror(run.connectError) << "; ";
        } else if (run.headerError != 0) {
            p << "sending the header failed (" << run.headerError << "); ";
        } else {
            auto it = upstream.find(run.id);
            const DuplexResult& c = run.result;
            if (!c.sent.ok() || c.sent.bytes != c2uSize) {
                p << "client send stopped: " << c.sent.describe() << " of " << c2uSize << "; ";
            }
            if (!c.received.ok() || !c.received.eof || c.received.bytes != u2cSize ||
                c.received.sha256 != expectU2c) {
                p << "u2c at client: " << c.received.describe() << ", expected " << u2cSize
                  << " bytes sha256 " << expectU2c.substr(0, 16) << "... then EOF"
                  << (c.received.sha256 != expectU2c ? " [DIGEST MISMATCH]" : "") << "; ";
            }
            if (it == upstream.end()) {
                p << "upstream never recorded this connection (no header or still running); ";
            } else {
                const DuplexResult& u = it->second;
                if (!u.sent.ok() || u.sent.bytes != u2cSize) {
                    p << "upstream send stopped: " << u.sent.describe() << " of " << u2cSize
                      << "; ";
                }
                if (!u.received.ok() || !u.received.eof || u.received.bytes != c2uSize ||
                    u.received.sha256 != expectC2u) {
                    p << "c2u at upstream: " << u.received.describe() << ", expected " << c2uSize
                      << " bytes sha256 " << expectC2u.substr(0, 16) << "... then EOF"
                      << (u.received.sha256 != expectC2u ? " [DIGEST MISMATCH]" : "") << "; ";
                }
                if (u.sent.sha256 != c.received.sha256 && u.sent.bytes == c.received.bytes) {
                    p << "u2c digests differ end to end with equal counts (corruption); ";
                }
                if (c.sent.sha256 != u.received.sha256 && c.sent.bytes == u.received.bytes) {
                    p << "c2u digests differ end to end with equal counts (corruption); ";
                }
            }
        }
        if (!p.str().empty()) {
            ++bad;
            problems << "\n  connection id " << run.id << ": " << p.str();
        }
    }
    if (bad == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << bad << " of " << clients.size() << " connections not byte-exact (c2u " << c2uSize
           << " B, u2c " << u2cSize << " B each):" << problems.str();
}

TestServer::Handler echoUpstream(milliseconds timeout) {
    return [timeout](int fd, std::size_t) {
        Deadline deadline = deadlineIn(timeout);
        std::vector<uint8_t> buffer(256 * 1024);
        for (;;) {
            ssize_t got = ::recv(fd, buffer.data(), buffer.size(), 0);
            if (got == 0) break;
            if (got < 0) {
                if ((errno == EAGAIN || errno == EINTR) && Clock::now() < deadline) continue;
                return;
            }
            int error = 0;
            if (!sendAll(fd, buffer.data(), static_cast<std::size_t>(got), deadline, error)) return;
        }
        ::shutdown(fd, SHUT_WR);
        // Linger until the peer closes too, so a close never races ahead of our FIN.
        waitPeerClose(fd, deadline);
    };
}

::testing::AssertionResult echoRoundTrip(int fd, uint64_t seed, uint64_t size,
                                         milliseconds timeout) {
    Deadline deadline = deadlineIn(timeout);
    StreamResult sent;
    SendOptions options;
    options.shutdownWrite = false;
    std::thread sender([&] { sent = sendPattern(fd, seed, size, deadline, options); });
    StreamResult received = receiveAll(fd, deadline, size);
    sender.join();
    std::string expected = patternSha256(seed, size);
    if (sent.ok() && sent.bytes == size && received.ok() && received.bytes == size &&
        received.sha256 == expected) {
        return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure()
           << "echo round trip of " << size << " bytes (seed " << seed << "): sent "
           << sent.describe() << "; received back " << received.describe() << "; expected sha256 "
           << expected.substr(0, 16) << "...";
}

TestServer::Handler sinkUpstream(std::shared_ptr<SinkBoard> board, milliseconds timeout) {
    return [board, timeout](int fd, std::size_t index) {
        board->put(index, receiveAll(fd, deadlineIn(timeout)));
    };
}

}  // namespace splicegate::test
