// Integration tests of the admin socket server (admin/AdminServer.h) in-process with a fake
// handler: socket file set-up, request/response, and hostile peers (garbage, oversized and
// 64-bit length prefixes, malformed varints, truncated frames left open, peers that never read,
// hundreds of peers at once, a buffer ring that runs dry) while a good client keeps getting
// answers. Needs io_uring with provided buffer rings (Linux 6.1) and root (chown).
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "common/Error.h"
#include "common/Log.h"
#include "tests/support/AdminTestSupport.h"

namespace splicegate::test {
namespace {

using namespace std::chrono_literals;

class AdminServerTest : public ::testing::Test {
  protected:
    void SetUp() override {
        raiseFdLimit();
        ::chmod(dir_.path().c_str(), 0755);
    }

    std::string path() const { return dir_.path() + "/admin.sock"; }

    AdminServerOptions options(unsigned stallMs = 300) const {
        AdminServerOptions o;
        o.socketPath = path();
        o.group = "root";
        o.stallTimeoutMs = stallMs;
        return o;
    }

    AdminServer& start(AdminServerOptions o) {
        server_ = std::make_unique<AdminServer>(std::move(o), handler_);
        server_->start();
        return *server_;
    }
    AdminServer& start() { return start(options()); }

    std::uint64_t countOf(const std::string& command, const std::string& result) const {
        auto counts = server_->requestCounts();
        auto it = counts.find({command, result});
        return it == counts.end() ? 0 : it->second;
    }

    bool waitCount(const std::string& command, const std::string& result, std::uint64_t atLeast,
                   milliseconds timeout = 5000ms) const {
        const Deadline deadline = deadlineIn(timeout);
        while (Clock::now() < deadline) {
            if (countOf(command, result) >= atLeast) return true;
            std::this_thread::sleep_for(5ms);
        }
        return countOf(command, result) >= atLeast;
    }

    // A well-behaved client gets a status answer, quickly.
    void expectStatusAnswers(milliseconds within = 1000ms) {
        AdminPeer good(path());
        ASSERT_TRUE(good.connected()) << errnoText(good.connectError());
        const auto started = Clock::now();
        auto response = good.call(statusRequest(), 5000ms);
        ASSERT_TRUE(response.has_value());
        EXPECT_EQ(response->error().code(), admin::ERROR_NONE);
        EXPECT_EQ(response->status().version(), "9.9.9-test");
        EXPECT_LT(Clock::now() - started, within);
    }

    // Sends `bytes` as a hostile peer and expects one ERROR_BAD_FRAME containing `needle`, then
    // the close.
    void expectBadFrame(const std::string& bytes, const std::string& needle,
                        milliseconds within = 2000ms) {
        AdminPeer peer(path());
        ASSERT_TRUE(peer.connected());
        const auto started = Clock::now();
        ASSERT_TRUE(peer.sendBytes(bytes));
        auto response = peer.receive(5000ms);
        ASSERT_TRUE(response.has_value()) << "no error response for " << needle;
        EXPECT_EQ(response->error().code(), admin::ERROR_BAD_FRAME);
        EXPECT_NE(response->error().message().find(needle), std::string::npos)
            << response->error().message();
        EXPECT_EQ(response->protocol_version(), admin::kProtocolVersion);
        EXPECT_TRUE(peer.waitClosed(3000ms)) << "the server did not close the bad peer";
        EXPECT_LT(Clock::now() - started, within) << needle;
    }

    TempDir dir_;
    FakeAdminHandler handler_;
    std::unique_ptr<AdminServer> server_;
};

TEST_F(AdminServerTest, StatusRoundTrip) {
    start();
    AdminPeer peer(path());
    ASSERT_TRUE(peer.connected());
    auto response = peer.call(statusRequest());
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->error().code(), admin::ERROR_NONE);
    EXPECT_EQ(response->protocol_version(), admin::kProtocolVersion);
    EXPECT_EQ(response->status().version(), "9.9.9-test");
    ASSERT_EQ(response->status().routes_size(), 1);
    EXPECT_EQ(response->status().routes(0).name(), "default");
    // The connection stays open for more requests.
    auto again = peer.call(killRequest(42));
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ(again->kill_connection().id(), 42u);
    auto missing = peer.call(killRequest(7));
    ASSERT_TRUE(missing.has_value());
    EXPECT_EQ(missing->error().code(), admin::ERROR_NOT_FOUND);
    EXPECT_EQ(countOf("status", "ok"), 1u);
    EXPECT_EQ(countOf("kill_connection", "ok"), 1u);
    EXPECT_EQ(countOf("kill_connection", "not_found"), 1u);
}

TEST_F(AdminServerTest, SocketFileModeOwnerAndRemoval) {
    AdminServerOptions o = options();
    o.group = "nogroup";
    start(o);
    struct stat st {};
    ASSERT_EQ(::lstat(path().c_str(), &st), 0);
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0660u);
    EXPECT_EQ(st.st_uid, 0u);
    EXPECT_EQ(st.st_gid, 65534u);
    server_.reset();
    EXPECT_NE(::lstat(path().c_str(), &st), 0) << "socket file left behind";
}

// The socket must never be reachable at its path with another mode or group than its final ones
// (it used to be bound with the umask's mode, then chmod/chown'ed by path).
TEST_F(AdminServerTest, SocketNeverAppearsWithWrongModeOrGroup) {
    AdminServerOptions o = options();
    o.group = "nogroup";
    std::atomic<bool> done{false};
    std::atomic<unsigned> seen{0};
    std::atomic<unsigned> wrong{0};
    std::string firstWrong;
    std::thread watcher([&] {
        while (!done.load()) {
            struct stat st {};
            if (::lstat(path().c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
            ++seen;
            if ((st.st_mode & 07777) != 0660 || st.st_uid != 0 || st.st_gid != 65534) {
                if (wrong++ == 0) {
                    firstWrong = concat("mode ", std::oct, st.st_mode & 07777, std::dec, " uid ",
                                        st.st_uid, " gid ", st.st_gid);
                }
            }
        }
    });
    for (int round = 0; round < 200; ++round) {
        AdminServer server(o, handler_);
        struct stat st {};
        ASSERT_EQ(::lstat(path().c_str(), &st), 0);
        EXPECT_EQ(st.st_mode & 07777, 0660u);
    }
    done = true;
    watcher.join();
    EXPECT_GT(seen.load(), 0u) << "the watcher never saw the socket";
    EXPECT_EQ(wrong.load(), 0u) << "seen with " << firstWrong;
    // No private directory is left behind.
    EXPECT_EQ(runProcess({"/bin/sh", "-c", "ls -A " + dir_.path()}).out, "");
}

TEST_F(AdminServerTest, SymlinkAtThePathIsNotFollowed) {
    const std::string target = dir_.path() + "/root-only";
    { std::ofstream(target) << "secret"; }
    ASSERT_EQ(::chmod(target.c_str(), 0600), 0);
    ASSERT_EQ(::symlink(target.c_str(), path().c_str()), 0);
    AdminServerOptions o = options();
    o.group = "nogroup";
    EXPECT_THROW(AdminServer(o, handler_), UsageError);
    struct stat st {};
    ASSERT_EQ(::stat(target.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u);
    EXPECT_EQ(st.st_gid, 0u);
    EXPECT_EQ(readFile(target), "secret");
}

// A racer swapping a symlink in at the path while servers start must never get the socket's
// mode or group onto the symlink's target.
TEST_F(AdminServerTest, SymlinkSwappedInDuringSetUpIsNotFollowed) {
    const std::string target = dir_.path() + "/root-only";
    { std::ofstream(target) << "secret"; }
    ASSERT_EQ(::chmod(target.c_str(), 0600), 0);
    AdminServerOptions o = options();
    o.group = "nogroup";
    std::atomic<bool> done{false};
    std::atomic<unsigned> swaps{0};
    std::thread racer([&] {
        const std::string staging = dir_.path() + "/staging-link";
        // As soon as a socket shows up at the path, swap the symlink in over it; after a moment
        // clear the path so that the next set-up can begin.
        while (!done.load()) {
            struct stat st {};
            if (::lstat(staging.c_str(), &st) != 0 &&
                ::symlink(target.c_str(), staging.c_str()) != 0) {
                continue;
            }
            if (::lstat(path().c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
            if (::rename(staging.c_str(), path().c_str()) == 0) ++swaps;
            std::this_thread::sleep_for(200us);
            ::unlink(path().c_str());
        }
    });
    unsigned started = 0;
    for (int round = 0; round < 300; ++round) {
        try {
            AdminServer server(o, handler_);
            ++started;
        } catch (const std::exception&) {
            // "not a socket" or "a file appeared at the path": refusing is right.
        }
    }
    done = true;
    racer.join();
    struct stat st {};
    ASSERT_EQ(::stat(target.c_str(), &st), 0);
    EXPECT_GT(swaps.load(), 0u) << "the racer never got to swap";
    EXPECT_EQ(st.st_mode & 07777, 0600u) << "after " << started << " servers started";
    EXPECT_EQ(st.st_gid, 0u);
    EXPECT_EQ(readFile(target), "secret");
}

TEST_F(AdminServerTest, StaleSocketFileIsReplaced) {
    {
        UniqueFd stale(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
        sockaddr_un address{};
        address.sun_family = AF_UNIX;
        std::strncpy(address.sun_path, path().c_str(), sizeof(address.sun_path) - 1);
        ASSERT_EQ(::bind(stale.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    }  // closed without unlinking: a dead daemon's leftover
    start();
    expectStatusAnswers();
}

TEST_F(AdminServerTest, LiveSocketIsNotTakenOver) {
    start();
    try {
        AdminServer second(options(), handler_);
        FAIL() << "a second server took over a live socket";
    } catch (const std::system_error& error) {
        EXPECT_NE(std::string(error.what()).find(path()), std::string::npos) << error.what();
        EXPECT_NE(std::string(error.what()).find("listening"), std::string::npos) << error.what();
    }
    expectStatusAnswers();
}

TEST_F(AdminServerTest, NonSocketFileIsLeftAlone) {
    { std::ofstream(path()) << "precious"; }
    try {
        AdminServer server(options(), handler_);
        FAIL() << "replaced a regular file";
    } catch (const UsageError& error) {
        EXPECT_NE(std::string(error.what()).find(path()), std::string::npos) << error.what();
    }
    EXPECT_EQ(readFile(path()), "precious");
}

TEST_F(AdminServerTest, MissingGroupIsAClearError) {
    AdminServerOptions o = options();
    o.group = "no-such-group-splicegate-test";
    try {
        AdminServer server(o, handler_);
        FAIL() << "started with a missing group";
    } catch (const UsageError& error) {
        const std::string what = error.what();
        EXPECT_NE(what.find("--admin-group"), std::string::npos) << what;
        EXPECT_NE(what.find("no-such-group-splicegate-test"), std::string::npos) << what;
    }
    struct stat st {};
    EXPECT_NE(::lstat(path().c_str(), &st), 0);
}

TEST_F(AdminServerTest, PipelinedRequestsAreAnsweredInOrder) {
    start();
    AdminPeer peer(path());
    ASSERT_TRUE(peer.connected());
    std::string bytes;
    for (std::uint64_t id = 0; id < 300; ++id) bytes += admin::encodeFrame(killRequest(id));
    ASSERT_TRUE(peer.sendBytes(bytes));
    for (std::uint64_t id = 0; id < 300; ++id) {
        auto response = peer.receive();
        ASSERT_TRUE(response.has_value()) << id;
        if (id == 42) {
            EXPECT_EQ(response->kill_connection().id(), 42u);
        } else {
            EXPECT_EQ(response->error().message(), "no open connection " + std::to_string(id));
        }
    }
}

TEST_F(AdminServerTest, DribbledRequestIsReassembled) {
    start(options(2000));
    AdminPeer peer(path());
    ASSERT_TRUE(peer.connected());
    admin::Request request;
    request.mutable_xdp_add()->set_cidr(std::string(200, '1'));  // two-byte prefix
    const std::string bytes = admin::encodeFrame(request) + admin::encodeFrame(statusRequest());
    for (char byte : bytes) {
        ASSERT_TRUE(peer.sendBytes(std::string(1, byte)));
        std::this_thread::sleep_for(1ms);
    }
    auto first = peer.receive();
    ASSERT_TRUE(first.has_value());
    EXPECT_EQ(first->error().code(), admin::ERROR_NOT_ENABLED);
    auto second = peer.receive();
    ASSERT_TRUE(second.has_value());
    EXPECT_EQ(second->status().version(), "9.9.9-test");
}

TEST_F(AdminServerTest, GarbageGetsBadFrameAndClose) {
    start();
    expectBadFrame(std::string("\x03\xff\xff\xff", 4), "does not parse");
    expectBadFrame(admin::encodeFrame(statusRequest()).substr(0, 1) + "\x52\x05\x08\x01",
                   "does not parse");
    EXPECT_EQ(countOf("frame", "bad_frame"), 2u);
    expectStatusAnswers();
}

TEST_F(AdminServerTest, GoodFramesBeforeGarbageAreAnsweredFirst) {
    start();
    AdminPeer peer(path());
    ASSERT_TRUE(peer.connected());
    ASSERT_TRUE(peer.sendBytes(admin::encodeFrame(statusRequest()) + varint64(5u << 20) + "xx"));
    auto first = peer.receive();
    ASSERT_TRUE(first.has_value());
    EXPECT_EQ(first->error().code(), admin::ERROR_NONE);
    auto second = peer.receive();
    ASSERT_TRUE(second.has_value());
    EXPECT_EQ(second->error().code(), admin::ERROR_BAD_FRAME);
    EXPECT_TRUE(peer.waitClosed());
}

TEST_F(AdminServerTest, OversizedAndBogusPrefixesFailAtOnce) {
    // A long stall timeout: these must fail when the prefix is read, not by timing out.
    start(options(10000));
    expectBadFrame(varint64((1u << 20) + 1), "exceeds the limit", 1000ms);
    expectBadFrame(varint64(std::uint64_t{1} << 32), "4294967296 bytes", 1000ms);
    // 4 GiB + 5 padded to 10 bytes (a 32-bit decoder reads 5), then 5 bytes of "body".
    expectBadFrame(std::string("\x85\x80\x80\x80\x90\x80\x80\x80\x80\x00", 10) + "hello",
                   "exceeds the limit", 1000ms);
    expectBadFrame(std::string("\x80\x80\x80\x80\x80\x80\x80\x80\x80\x02", 10), "64 bits", 1000ms);
    expectBadFrame(std::string(11, '\xff'), "malformed", 1000ms);
    EXPECT_EQ(countOf("frame", "bad_frame"), 5u);
    expectStatusAnswers();
}

TEST_F(AdminServerTest, TruncatedFrameLeftOpenTimesOut) {
    start(options(1500));
    AdminPeer stalled(path());
    AdminPeer stalledInPrefix(path());
    ASSERT_TRUE(stalled.connected());
    ASSERT_TRUE(stalledInPrefix.connected());
    const std::string frame = admin::encodeFrame(statusRequest());
    ASSERT_TRUE(stalled.sendBytes(varint64(100) + "0123456789"));
    ASSERT_TRUE(stalledInPrefix.sendBytes("\x80"));
    // Others are served while the two stall.
    // (each answer well within the stall timeout: the stalled peers block nobody).
    for (int i = 0; i < 5; ++i) expectStatusAnswers(1000ms);

    for (AdminPeer* peer : {&stalled, &stalledInPrefix}) {
        auto response = peer->receive(5000ms);
        ASSERT_TRUE(response.has_value());
        EXPECT_EQ(response->error().code(), admin::ERROR_BAD_FRAME);
        EXPECT_NE(response->error().message().find("incomplete after 1500 ms"), std::string::npos)
            << response->error().message();
        EXPECT_TRUE(peer->waitClosed());
    }
    EXPECT_EQ(countOf("frame", "stalled"), 2u);
    expectStatusAnswers();
}

TEST_F(AdminServerTest, SlowButSteadyFrameIsNotCutShort) {
    // The stall timeout bounds one frame from its first byte; each new frame restarts it.
    start(options(400));
    AdminPeer peer(path());
    ASSERT_TRUE(peer.connected());
    for (int i = 0; i < 6; ++i) {
        const std::string frame = admin::encodeFrame(killRequest(42));
        ASSERT_TRUE(peer.sendBytes(frame.substr(0, 2)));
        std::this_thread::sleep_for(100ms);
        ASSERT_TRUE(peer.sendBytes(frame.substr(2)));
        auto response = peer.receive();
        ASSERT_TRUE(response.has_value()) << i;
        EXPECT_EQ(response->kill_connection().id(), 42u);
    }
}

TEST_F(AdminServerTest, EndOfStreamMidFrame) {
    start(options(10000));
    AdminPeer peer(path());
    ASSERT_TRUE(peer.connected());
    ASSERT_TRUE(peer.sendBytes(varint64(50) + "abc"));
    peer.shutdownWrite();
    auto response = peer.receive();
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->error().code(), admin::ERROR_BAD_FRAME);
    EXPECT_NE(response->error().message().find("got 3 of 50 bytes"), std::string::npos)
        << response->error().message();
    EXPECT_TRUE(peer.waitClosed());
}

TEST_F(AdminServerTest, RequestThenShutdownStillAnswered) {
    start();
    AdminPeer peer(path());
    ASSERT_TRUE(peer.connected());
    ASSERT_TRUE(peer.send(statusRequest()));
    peer.shutdownWrite();
    auto response = peer.receive();
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->error().code(), admin::ERROR_NONE);
    EXPECT_TRUE(peer.waitClosed());
}

TEST_F(AdminServerTest, UnknownCommandAndHandlerFailureKeepTheConnection) {
    start();
    AdminPeer peer(path());
    ASSERT_TRUE(peer.connected());
    admin::Request empty;
    empty.set_protocol_version(admin::kProtocolVersion + 1);
    auto unknown = peer.call(empty);
    ASSERT_TRUE(unknown.has_value());
    EXPECT_EQ(unknown->error().code(), admin::ERROR_UNKNOWN_COMMAND);
    EXPECT_NE(
        unknown->error().message().find("version " + std::to_string(admin::kProtocolVersion + 1)),
        std::string::npos)
        << unknown->error().message();

    handler_.throwOnDrain = true;
    admin::Request drain;
    drain.mutable_drain();
    auto failed = peer.call(drain);
    ASSERT_TRUE(failed.has_value());
    EXPECT_EQ(failed->error().code(), admin::ERROR_FAILED);
    EXPECT_NE(failed->error().message().find("drain exploded"), std::string::npos);

    auto ok = peer.call(statusRequest());
    ASSERT_TRUE(ok.has_value());
    EXPECT_EQ(ok->error().code(), admin::ERROR_NONE);
    EXPECT_EQ(countOf("unknown", "unknown_command"), 1u);
    EXPECT_EQ(countOf("drain", "failed"), 1u);
}

TEST_F(AdminServerTest, FiveHundredPeersAtOnce) {
    start(options(5000));
    constexpr int kPeers = 500;
    std::vector<std::unique_ptr<AdminPeer>> peers;
    for (int i = 0; i < kPeers; ++i) {
        peers.push_back(std::make_unique<AdminPeer>(path()));
        ASSERT_TRUE(peers.back()->connected())
            << i << ": " << errnoText(peers.back()->connectError());
    }
    // Every fifth peer is hostile: garbage or an oversized prefix.
    const std::string good = admin::encodeFrame(statusRequest());
    for (int i = 0; i < kPeers; ++i) {
        const std::string bytes = i % 10 == 0   ? std::string("\x03\xff\xff\xff", 4)
                                  : i % 10 == 5 ? varint64(std::uint64_t{1} << 32)
                                                : good;
        ASSERT_TRUE(peers[i]->sendBytes(bytes)) << i;
    }
    expectStatusAnswers(1000ms);
    int answered = 0;
    int refusedFrames = 0;
    for (int i = 0; i < kPeers; ++i) {
        auto response = peers[i]->receive(10000ms);
        ASSERT_TRUE(response.has_value()) << "peer " << i << " got no answer";
        if (i % 5 == 0) {
            EXPECT_EQ(response->error().code(), admin::ERROR_BAD_FRAME) << i;
            ++refusedFrames;
        } else {
            EXPECT_EQ(response->status().version(), "9.9.9-test") << i;
            ++answered;
        }
    }
    EXPECT_EQ(answered, kPeers * 4 / 5);
    EXPECT_EQ(refusedFrames, kPeers / 5);
    // The good ones may ask again.
    for (int i = 1; i < kPeers; i += 5) {
        auto response = peers[i]->call(killRequest(42));
        ASSERT_TRUE(response.has_value()) << i;
        EXPECT_EQ(response->kill_connection().id(), 42u);
    }
}

TEST_F(AdminServerTest, AtTheLimitTheLongestWaitingPeerMakesRoom) {
    AdminServerOptions o = options();
    o.maxPeers = 8;
    start(o);
    std::vector<std::unique_ptr<AdminPeer>> peers;
    for (int i = 0; i < 8; ++i) {
        peers.push_back(std::make_unique<AdminPeer>(path()));
        ASSERT_TRUE(peers.back()->connected());
        ASSERT_TRUE(peers.back()->call(statusRequest()).has_value()) << i;
    }
    expectStatusAnswers();  // the ninth: the first peer, waiting longest, made room
    auto notice = peers.front()->receive();
    ASSERT_TRUE(notice.has_value());
    EXPECT_NE(notice->error().message().find("make room"), std::string::npos)
        << notice->error().message();
    EXPECT_TRUE(peers.front()->waitClosed());
    EXPECT_EQ(countOf("connect", "evicted"), 1u);
    for (std::size_t i = 1; i < peers.size(); ++i) {
        auto response = peers[i]->call(killRequest(42));
        ASSERT_TRUE(response.has_value()) << i;
        EXPECT_EQ(response->kill_connection().id(), 42u) << i;
    }
}

TEST_F(AdminServerTest, BusyPeersAtTheLimitAreNotEvicted) {
    AdminServerOptions o = options(10000);
    o.maxPeers = 2;
    start(o);
    // Two peers that ask for megabytes of answers and never read: the server owes them output.
    std::string bytes;
    for (int i = 0; i < 20000; ++i) bytes += admin::encodeFrame(statusRequest());
    std::vector<std::unique_ptr<AdminPeer>> busy;
    for (int i = 0; i < 2; ++i) {
        busy.push_back(std::make_unique<AdminPeer>(path()));
        ASSERT_TRUE(busy.back()->connected());
        busy.back()->sendBytes(bytes, 1000ms);  // the server stops reading once it owes 1 MiB
    }
    ASSERT_TRUE(waitCount("status", "ok", 2 * 1000));
    // Until the server stopped answering (it owes both peers all it may): before that, a busy
    // peer whose answers all fitted in its socket, with more requests still unread, owes
    // nothing for a moment and may rightly be evicted (a loaded machine got there).
    const Deadline settleBy = deadlineIn(10000ms);
    for (auto last = countOf("status", "ok"), stable = std::uint64_t{0};
         stable < 60 && Clock::now() < settleBy; ++stable) {
        std::this_thread::sleep_for(5ms);
        auto now = countOf("status", "ok");
        if (now != last) stable = 0;
        last = now;
    }
    AdminPeer extra(path());
    ASSERT_TRUE(extra.connected());
    auto refusal = extra.receive();
    ASSERT_TRUE(refusal.has_value());
    EXPECT_NE(refusal->error().message().find("too many admin connections"), std::string::npos)
        << refusal->error().message();
    EXPECT_TRUE(extra.waitClosed());
    EXPECT_EQ(countOf("connect", "too_many_peers"), 1u);
    EXPECT_EQ(countOf("connect", "evicted"), 0u);
}

// At most 1024 peers, and idle ones must not lock out root.
TEST_F(AdminServerTest, ElevenHundredIdlePeersDoNotLockOutRoot) {
    start(options(5000));
    constexpr int kPeers = 1100;
    std::vector<std::unique_ptr<AdminPeer>> peers;
    for (int i = 0; i < kPeers; ++i) {
        peers.push_back(std::make_unique<AdminPeer>(path()));
        ASSERT_TRUE(peers.back()->connected())
            << i << ": " << errnoText(peers.back()->connectError());
    }
    ASSERT_TRUE(waitCount("connect", "evicted", kPeers - 1024));
    expectStatusAnswers();
    // The newest 1024 - 1 idle peers are still connected and served.
    auto response = peers.back()->call(statusRequest());
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->error().code(), admin::ERROR_NONE);
    EXPECT_EQ(countOf("connect", "too_many_peers"), 0u);
}

// A peer that sends no complete request for 10 s is closed, authorized or not.
TEST_F(AdminServerTest, IdlePeersAreClosedAfterTenSeconds) {
    start(options(5000));  // the default idle timeout
    AdminPeer silent(path());
    ASSERT_TRUE(silent.connected());
    const auto silentSince = Clock::now();
    AdminPeer asked(path());
    ASSERT_TRUE(asked.connected());
    ASSERT_TRUE(asked.call(statusRequest()).has_value());
    const auto askedSince = Clock::now();
    for (AdminPeer* peer : {&silent, &asked}) {
        auto notice = peer->receive(20000ms);
        ASSERT_TRUE(notice.has_value()) << "no idle notice";
        EXPECT_NE(notice->error().message().find("no complete request for 10000 ms"),
                  std::string::npos)
            << notice->error().message();
        EXPECT_TRUE(peer->waitClosed(5000ms));
    }
    // The server cannot have closed them early (a lower bound, not a speed check).
    EXPECT_GE(Clock::now() - silentSince, 10000ms);
    EXPECT_GE(Clock::now() - askedSince, 10000ms);
    EXPECT_EQ(countOf("connect", "idle"), 2u);
    expectStatusAnswers();
}

std::uint64_t residentBytes() {
    std::ifstream statm("/proc/self/statm");
    std::uint64_t size = 0, resident = 0;
    statm >> size >> resident;
    return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

// Zero-length frames used to escape the input bound (RSS 9 -> 183 MB from 20 peers).
TEST_F(AdminServerTest, ZeroLengthFramesFromTwentyPeersStayBounded) {
    start(options(5000));
    constexpr int kPeers = 20;
    constexpr std::size_t kBytesPerPeer = 4u << 20;  // 4 Mi zero-length frames each
    const std::uint64_t before = residentBytes();
    std::vector<std::unique_ptr<AdminPeer>> peers;
    for (int i = 0; i < kPeers; ++i) {
        peers.push_back(std::make_unique<AdminPeer>(path()));
        ASSERT_TRUE(peers.back()->connected());
    }
    const std::string chunk(64 * 1024, '\0');
    std::vector<std::size_t> sent(kPeers, 0);
    // Round-robin, each peer until its bytes are out or the server stopped taking them (it
    // closed the peer, or stopped reading it); bounded in count and time.
    const Deadline deadline = deadlineIn(20000ms);
    bool progress = true;
    while (progress && Clock::now() < deadline) {
        progress = false;
        for (int i = 0; i < kPeers; ++i) {
            if (sent[i] >= kBytesPerPeer) continue;
            ssize_t n =
                ::send(peers[i]->fd(), chunk.data(), chunk.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
            if (n > 0) {
                sent[i] += static_cast<std::size_t>(n);
                progress = true;
            }
        }
        if (!progress) {
            std::this_thread::sleep_for(50ms);  // one more chance for a paused reader
            for (int i = 0; i < kPeers && !progress; ++i) {
                progress = sent[i]<kBytesPerPeer&& ::send(peers[i]->fd(), chunk.data(), 1,
                                                          MSG_DONTWAIT | MSG_NOSIGNAL)> 0;
            }
        }
    }
    // Let the server take in what the kernel holds for it: until its answers stop growing.
    std::uint64_t answered = countOf("unknown", "unknown_command");
    for (int settle = 0; settle < 40; ++settle) {
        std::this_thread::sleep_for(250ms);
        const std::uint64_t now = countOf("unknown", "unknown_command");
        if (now == answered) break;
        answered = now;
    }
    EXPECT_GT(answered, 0u);
    const std::uint64_t after = residentBytes();
    // Per peer: ~1 MiB of output and up to ~2 MiB of queued frames until it is refused; with
    // zero-length frames uncounted it grew by hundreds of MB.
    EXPECT_LT(after, before + (std::uint64_t{kPeers} * 4 << 20))
        << "RSS grew from " << before << " to " << after << " bytes";
    expectStatusAnswers();
}

TEST_F(AdminServerTest, BufferRingRunningDryIsReplenishedAndRearmed) {
    AdminServerOptions o = options(5000);
    o.recvBuffers = 1;  // one 4 KiB buffer for everybody: -ENOBUFS all the time
    start(o);
    constexpr int kPeers = 64;
    for (int round = 0; round < 5 && server_->recvBufferExhaustions() == 0; ++round) {
        std::vector<std::unique_ptr<AdminPeer>> peers;
        for (int i = 0; i < kPeers; ++i) {
            peers.push_back(std::make_unique<AdminPeer>(path()));
            ASSERT_TRUE(peers.back()->connected());
        }
        std::string bytes;
        for (int k = 0; k < 50; ++k) bytes += admin::encodeFrame(killRequest(42));
        for (auto& peer : peers) ASSERT_TRUE(peer->sendBytes(bytes));
        for (int i = 0; i < kPeers; ++i) {
            for (int k = 0; k < 50; ++k) {
                auto response = peers[i]->receive(10000ms);
                ASSERT_TRUE(response.has_value()) << "peer " << i << " response " << k;
                EXPECT_EQ(response->kill_connection().id(), 42u);
            }
        }
    }
    EXPECT_GT(server_->recvBufferExhaustions(), 0u);
    expectStatusAnswers();
}

TEST_F(AdminServerTest, SlowReaderIsPausedNotDropped) {
    start(options(3000));
    AdminPeer peer(path());
    ASSERT_TRUE(peer.connected());
    // ~6 MB of responses requested at once; the server must hold back, not buffer them all.
    constexpr int kRequests = 20000;
    std::string bytes;
    for (int i = 0; i < kRequests; ++i) bytes += admin::encodeFrame(statusRequest());
    std::thread sender([&] { EXPECT_TRUE(peer.sendBytes(bytes, 20000ms)); });
    std::this_thread::sleep_for(200ms);
    expectStatusAnswers();
    for (int i = 0; i < kRequests; ++i) {
        auto response = peer.receive(5000ms);
        ASSERT_TRUE(response.has_value()) << i;
        ASSERT_EQ(response->error().code(), admin::ERROR_NONE) << i;
        if (i % 1000 == 0) std::this_thread::sleep_for(20ms);  // reads slowly
    }
    sender.join();
    EXPECT_EQ(countOf("send", "stalled"), 0u);
}

TEST_F(AdminServerTest, PeerThatNeverReadsIsClosed) {
    start(options(300));
    AdminPeer peer(path());
    ASSERT_TRUE(peer.connected());
    std::string bytes;
    for (int i = 0; i < 20000; ++i) bytes += admin::encodeFrame(statusRequest());
    peer.sendBytes(bytes, 3000ms);  // may not all fit: the server stops reading
    ASSERT_TRUE(waitCount("send", "stalled", 1, 5000ms));
    expectStatusAnswers();
    EXPECT_TRUE(peer.waitClosed(5000ms));
}

}  // namespace
}  // namespace splicegate::test
