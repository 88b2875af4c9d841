// Integration tests of splicegatectl (tools/splicegatectl) against an in-process AdminServer
// with a fake handler: every command in human and --json form, exit codes (0 ok, 1 the daemon
// answered with an error, 2 usage, 3 unreachable), help, and an unprivileged peer run through
// `setpriv` (refused by file mode, then by SO_PEERCRED) while a good client keeps being served.
// AdminCtlDaemonTest: the read-only group through the real daemon in the packaged layout.
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/AdminTestSupport.h"
#include "tests/support/ControlPlaneDaemon.h"

namespace splicegate::test {
namespace {

using namespace std::chrono_literals;

const char* const kSetpriv = "/usr/bin/setpriv";

template <typename Message>
bool parsesAs(const std::string& json, Message& message) {
    google::protobuf::util::JsonParseOptions options;
    return google::protobuf::util::JsonStringToMessage(json, &message, options).ok();
}

class AdminCtlTest : public ::testing::Test {
  protected:
    void SetUp() override {
        ::chmod(dir_.path().c_str(), 0755);  // an unprivileged peer must reach the socket
        AdminServerOptions options;
        options.socketPath = path();
        options.group = "root";
        options.stallTimeoutMs = 2000;
        server_ = std::make_unique<AdminServer>(options, handler_);
        server_->start();
    }

    std::string path() const { return dir_.path() + "/admin.sock"; }

    ProcessResult ctl(std::vector<std::string> args) { return runCtl(path(), std::move(args)); }

    static void expectExit(const ProcessResult& result, int code, const std::string& what) {
        ASSERT_TRUE(result.status.has_value()) << what << ": did not finish";
        EXPECT_TRUE(result.status->isExit(code))
            << what << ": " << result.status->describe() << "\nstdout: " << result.out
            << "\nstderr: " << result.err;
    }

    // An error: exit `code`, nothing on stdout, exactly one line on stderr containing `needle`.
    static void expectOneLineError(const ProcessResult& result, int code, const std::string& needle,
                                   const std::string& what) {
        expectExit(result, code, what);
        EXPECT_EQ(result.out, "") << what;
        EXPECT_EQ(textLines(result.err).size(), 1u) << what << ": " << result.err;
        EXPECT_NE(result.err.find(needle), std::string::npos) << what << ": " << result.err;
        EXPECT_EQ(result.err.rfind("splicegatectl: ", 0), 0u) << what << ": " << result.err;
    }

    std::uint64_t countOf(const std::string& command, const std::string& result) const {
        auto counts = server_->requestCounts();
        auto it = counts.find({command, result});
        return it == counts.end() ? 0 : it->second;
    }

    TempDir dir_;
    FakeAdminHandler handler_;
    std::unique_ptr<AdminServer> server_;
};

TEST_F(AdminCtlTest, StatusTable) {
    auto result = ctl({"status"});
    expectExit(result, 0, "status");
    EXPECT_EQ(result.err, "");
    EXPECT_NE(result.out.find("9.9.9-test"), std::string::npos) << result.out;
    EXPECT_NE(result.out.find("1h02m05s"), std::string::npos) << result.out;
    EXPECT_NE(result.out.find("192.0.2.10:443,192.0.2.11:443"), std::string::npos) << result.out;
    // The route table's columns line up: each header starts where its values start.
    auto all = textLines(result.out);
    std::size_t header = 0;
    while (header < all.size() && all[header].rfind("ROUTE", 0) != 0) ++header;
    ASSERT_LT(header + 1, all.size()) << result.out;
    const std::string& row = all[header + 1];
    EXPECT_EQ(all[header].find("LISTEN"), row.find("127.0.0.1:8443")) << result.out;
    EXPECT_EQ(all[header].find("C2U_BYTES"), row.find("123456789012")) << result.out;
}

TEST_F(AdminCtlTest, StatusJson) {
    auto result = ctl({"--json", "status"});
    expectExit(result, 0, "--json status");
    admin::StatusResponse status;
    ASSERT_TRUE(parsesAs(result.out, status)) << result.out;
    EXPECT_EQ(status.version(), "9.9.9-test");
    EXPECT_EQ(status.c2u_bytes(), 123456789012ULL);
    EXPECT_EQ(status.routes_size(), 1);
    // 64-bit counters are JSON numbers (jq can compare them), field names as in the .proto.
    EXPECT_NE(result.out.find("\"c2u_bytes\": 123456789012,"), std::string::npos) << result.out;
    EXPECT_NE(result.out.find("\"budget_used_bytes\": 8388608"), std::string::npos) << result.out;
    EXPECT_EQ(result.out.front(), '{');
    EXPECT_EQ(result.out.back(), '\n');
    // Options may follow the command too.
    auto after = ctl({"status", "--json"});
    expectExit(after, 0, "status --json");
    EXPECT_EQ(after.out, result.out);
}

TEST_F(AdminCtlTest, ConnectionsAndKill) {
    auto list = ctl({"connections"});
    expectExit(list, 0, "connections");
    auto rows = textLines(list.out);
    ASSERT_EQ(rows.size(), 3u) << list.out;
    EXPECT_EQ(rows[0].rfind("ID", 0), 0u);
    EXPECT_EQ(rows[1].rfind("41 ", 0), 0u) << list.out;
    EXPECT_EQ(rows[2].rfind("42 ", 0), 0u) << list.out;
    EXPECT_EQ(rows[0].find("CLIENT"), rows[1].find("198.51.100.7:541")) << list.out;

    auto json = ctl({"--json", "connections"});
    expectExit(json, 0, "--json connections");
    admin::ListConnectionsResponse parsed;
    ASSERT_TRUE(parsesAs(json.out, parsed)) << json.out;
    ASSERT_EQ(parsed.connections_size(), 2);
    EXPECT_EQ(parsed.connections(1).id(), 42u);
    // The field names, in order, of `splicegate-audit list --json`, then the live-only ones.
    std::size_t at = 0;
    for (const char* key :
         {"\"id\"", "\"route\"", "\"client\"", "\"upstream\"", "\"opened\"", "\"c2u_bytes\"",
          "\"u2c_bytes\"", "\"state\"", "\"worker\"", "\"age_ms\""}) {
        const auto found = json.out.find(key, at);
        ASSERT_NE(found, std::string::npos) << key << " missing or out of order in\n" << json.out;
        at = found;
    }
    EXPECT_NE(json.out.find("\"state\": \"open\""), std::string::npos) << json.out;
    EXPECT_NE(json.out.find("\"opened\": \"2026-01-31T12:00:41.000Z\""), std::string::npos)
        << json.out;

    auto kill = ctl({"kill", "42"});
    expectExit(kill, 0, "kill 42");
    EXPECT_EQ(kill.out, "connection 42 closed\n");
    auto killJson = ctl({"--json", "kill", "42"});
    expectExit(killJson, 0, "--json kill 42");
    admin::KillConnectionResponse killed;
    ASSERT_TRUE(parsesAs(killJson.out, killed)) << killJson.out;
    EXPECT_EQ(killed.id(), 42u);

    expectOneLineError(ctl({"kill", "7"}), 1, "no open connection 7", "kill 7");
    expectOneLineError(ctl({"--json", "kill", "7"}), 1, "no open connection 7", "--json kill 7");
}

TEST_F(AdminCtlTest, OtherCommands) {
    auto drain = ctl({"drain"});
    expectExit(drain, 0, "drain");
    EXPECT_NE(drain.out.find("draining"), std::string::npos);
    auto reload = ctl({"reload"});
    expectExit(reload, 0, "reload");
    EXPECT_NE(reload.out.find("3 routes"), std::string::npos) << reload.out;
    auto rotate = ctl({"audit-rotate"});
    expectExit(rotate, 0, "audit-rotate");
    auto version = ctl({"version"});
    expectExit(version, 0, "version");
    EXPECT_NE(version.out.find(std::string("splicegatectl  ") + SPLICEGATE_VERSION),
              std::string::npos)
        << version.out;
    EXPECT_NE(version.out.find("splicegate     9.9.9-test"), std::string::npos) << version.out;

    for (const auto& args : std::vector<std::vector<std::string>>{{"--json", "drain"},
                                                                  {"--json", "reload"},
                                                                  {"--json", "audit-rotate"},
                                                                  {"--json", "version"}}) {
        auto result = ctl(args);
        expectExit(result, 0, args[1]);
        google::protobuf::Value value;  // any JSON document
        EXPECT_TRUE(parsesAs(result.out, value)) << args[1] << ": " << result.out;
    }
    auto json = ctl({"--json", "version"});
    admin::VersionResponse parsed;
    ASSERT_TRUE(parsesAs(json.out, parsed)) << json.out;
    EXPECT_EQ(parsed.version(), "9.9.9-test");
    EXPECT_EQ(parsed.protocol_version(), admin::kProtocolVersion);

    for (const auto& args : std::vector<std::vector<std::string>>{{"xdp", "list"},
                                                                  {"xdp", "add", "192.0.2.0/24"},
                                                                  {"xdp", "del", "2001:db8::/32"},
                                                                  {"--json", "xdp", "list"}}) {
        expectOneLineError(ctl(args), 1, "XDP not enabled", args[0] + " " + args[1]);
    }
    EXPECT_EQ(countOf("drain", "ok"), 2u);
    EXPECT_EQ(countOf("xdp_add", "not_enabled"), 1u);
    EXPECT_EQ(countOf("xdp_delete", "not_enabled"), 1u);
}

TEST_F(AdminCtlTest, UsageErrorsExit2) {
    const std::vector<std::vector<std::string>> cases = {
        {},
        {"frobnicate"},
        {"kill"},
        {"kill", "abc"},
        {"kill", "-1"},
        {"kill", "1", "2"},
        {"kill", "99999999999999999999999"},
        {"status", "extra"},
        {"xdp"},
        {"xdp", "flush"},
        {"xdp", "add"},
        {"xdp", "add", "not-a-cidr"},
        {"xdp", "add", "10.0.0.0/33"},
        {"xdp", "list", "extra"},
        {"--nope", "status"},
        {"--timeout", "0", "status"},
        {"--timeout", "soon", "status"},
    };
    const auto before = handler_.calls.load();
    for (const auto& args : cases) {
        std::string what = "splicegatectl";
        for (const auto& arg : args) what += " " + arg;
        expectOneLineError(ctl(args), 2, "", what);
    }
    auto missingValue = runProcess({ctlBinary(), "status", "--socket"});
    expectOneLineError(missingValue, 2, "socket", "--socket without a value");
    EXPECT_EQ(handler_.calls.load(), before) << "a usage error reached the daemon";
}

TEST_F(AdminCtlTest, HelpAndVersion) {
    auto help = runProcess({ctlBinary(), "--help"});
    expectExit(help, 0, "--help");
    for (const char* word : {"usage:", "status", "connections", "kill ID", "drain", "reload",
                             "audit-rotate", "xdp list", "version", "--socket", "--json"}) {
        EXPECT_NE(help.out.find(word), std::string::npos) << word;
    }
    for (const auto& args : std::vector<std::vector<std::string>>{
             {"kill", "--help"}, {"help", "kill"}, {"--help", "kill"}}) {
        std::vector<std::string> argv = {ctlBinary()};
        argv.insert(argv.end(), args.begin(), args.end());
        auto result = runProcess(argv);
        expectExit(result, 0, args[0] + " " + args[1]);
        EXPECT_NE(result.out.find("usage: splicegatectl [--socket PATH] [--json] kill ID"),
                  std::string::npos)
            << result.out;
    }
    auto xdpHelp = runProcess({ctlBinary(), "xdp", "--help"});
    expectExit(xdpHelp, 0, "xdp --help");
    EXPECT_NE(xdpHelp.out.find("xdp add CIDR"), std::string::npos) << xdpHelp.out;
    auto version = runProcess({ctlBinary(), "--version"});
    expectExit(version, 0, "--version");
    EXPECT_EQ(version.out, std::string("splicegatectl ") + SPLICEGATE_VERSION +
                               " (admin protocol " + std::to_string(admin::kProtocolVersion) +
                               ")\n");
}

TEST_F(AdminCtlTest, UnreachableExit3) {
    const std::string missing = dir_.path() + "/missing.sock";
    auto noFile = runCtl(missing, {"status"});
    expectOneLineError(noFile, 3, missing, "missing socket");
    EXPECT_NE(noFile.err.find("No such file"), std::string::npos) << noFile.err;

    // A socket file nobody listens on.
    const std::string stale = dir_.path() + "/stale.sock";
    {
        UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
        sockaddr_un address{};
        address.sun_family = AF_UNIX;
        std::strncpy(address.sun_path, stale.c_str(), sizeof(address.sun_path) - 1);
        ASSERT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    }
    expectOneLineError(runCtl(stale, {"status"}), 3, "Connection refused", "stale socket");

    // A listener that never answers: the timeout.
    const std::string silent = dir_.path() + "/silent.sock";
    UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, silent.c_str(), sizeof(address.sun_path) - 1);
    ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    ASSERT_EQ(::listen(listener.get(), 16), 0);
    const auto started = Clock::now();
    auto timeout = runCtl(silent, {"--timeout", "1", "status"});
    expectOneLineError(timeout, 3, "no answer within 1000 ms", "silent daemon");
    EXPECT_LT(Clock::now() - started, 4s);
    // The default timeout is 5 s.
    const auto startedDefault = Clock::now();
    auto defaultTimeout = runCtl(silent, {"version"});
    expectOneLineError(defaultTimeout, 3, "no answer within 5000 ms", "silent daemon, default");
    EXPECT_GE(Clock::now() - startedDefault, 4500ms);
}

TEST_F(AdminCtlTest, UnprivilegedPeerIsRefused) {
    const std::vector<std::string> asNobody = {
        kSetpriv,    "--reuid=65534", "--regid=65534", "--clear-groups",
        ctlBinary(), "--socket",      path()};
    auto run = [&](const std::vector<std::string>& extra) {
        std::vector<std::string> argv = asNobody;
        argv.insert(argv.end(), extra.begin(), extra.end());
        return runProcess(argv, 15000ms);
    };
    // The socket's mode (0660 root:root) keeps nobody out at connect().
    auto byMode = run({"status"});
    expectOneLineError(byMode, 3, "Permission denied", "nobody, mode 0660");

    // With the file mode opened up, SO_PEERCRED still refuses: an answer naming the rule, the
    // refusal counted, and a good client is served meanwhile.
    ASSERT_EQ(::chmod(path().c_str(), 0666), 0);
    std::thread hostile([&] {
        for (int i = 0; i < 20; ++i) run({"status"});
    });
    for (int i = 0; i < 20; ++i) {
        AdminPeer good(path());
        auto response = good.call(statusRequest(), 2000ms);
        ASSERT_TRUE(response.has_value()) << i;
        EXPECT_EQ(response->error().code(), admin::ERROR_NONE);
    }
    hostile.join();
    auto byCredentials = run({"status"});
    expectOneLineError(byCredentials, 1, "permission denied: uid 65534", "nobody, mode 0666");
    EXPECT_NE(byCredentials.err.find("group 'root'"), std::string::npos) << byCredentials.err;
    EXPECT_GE(countOf("connect", "refused"), 21u);
    EXPECT_EQ(countOf("status", "ok"), 20u) << "a refused peer's request reached the handler";
}

TEST_F(AdminCtlTest, GroupMemberIsAccepted) {
    server_.reset();
    AdminServerOptions options;
    options.socketPath = path();
    options.group = "nogroup";  // gid 65534
    server_ = std::make_unique<AdminServer>(options, handler_);
    server_->start();
    auto result = runProcess({kSetpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
                              ctlBinary(), "--socket", path(), "status"},
                             15000ms);
    expectExit(result, 0, "nobody in group nogroup");
    EXPECT_NE(result.out.find("9.9.9-test"), std::string::npos) << result.out << result.err;
}

// --admin-readonly-group: status, connections, version and xdp list; every action is refused with
// a permission error (and never reaches the handler); others are kept out altogether.
TEST_F(AdminCtlTest, ReadonlyGroupPerCommand) {
    TemporaryAccount viewer("sgtro");
    TemporaryAccount outsider("sgtno");
    server_.reset();
    AdminServerOptions options;
    options.socketPath = path();
    options.group = "root";
    options.readonlyGroup = viewer.name();
    server_ = std::make_unique<AdminServer>(options, handler_);
    server_->start();
    auto asViewer = [&](std::vector<std::string> args) {
        std::vector<std::string> argv = {ctlBinary(), "--socket", path()};
        argv.insert(argv.end(), args.begin(), args.end());
        return runProcess(viewer.as(argv), 15000ms);
    };
    for (const auto& args : std::vector<std::vector<std::string>>{
             {"status"}, {"connections"}, {"version"}, {"--json", "status"}}) {
        expectExit(asViewer(args), 0, "read-only " + args.back());
    }
    // xdp list is allowed: the fake daemon's own answer comes back, not a permission error.
    expectOneLineError(asViewer({"xdp", "list"}), 1, "XDP not enabled", "read-only xdp list");
    const unsigned callsBefore = handler_.calls.load();
    for (const auto& args : std::vector<std::vector<std::string>>{{"kill", "42"},
                                                                  {"drain"},
                                                                  {"reload"},
                                                                  {"audit-rotate"},
                                                                  {"xdp", "add", "192.0.2.0/24"},
                                                                  {"xdp", "del", "192.0.2.0/24"}}) {
        std::string what = "read-only";
        for (const auto& arg : args) what += " " + arg;
        auto result = asViewer(args);
        expectOneLineError(result, 1, "permission denied", what);
        EXPECT_NE(result.err.find("read-only access"), std::string::npos) << what << result.err;
    }
    EXPECT_EQ(handler_.calls.load(), callsBefore) << "a denied action reached the handler";
    EXPECT_EQ(countOf("kill_connection", "permission_denied"), 1u);
    EXPECT_EQ(countOf("drain", "permission_denied"), 1u);

    // Neither group: the socket's mode and ACL keep the outsider out at connect().
    std::vector<std::string> argv = {ctlBinary(), "--socket", path(), "status"};
    auto outside = runProcess(outsider.as(argv), 15000ms);
    expectOneLineError(outside, 3, "Permission denied", "outsider");
    // Root keeps full access.
    expectExit(ctl({"kill", "42"}), 0, "root kill 42");
}

// The packaged unit's runtime directory is 0750 with the daemon's group: the read-only group is
// let through the directory (search only, by an ACL), a real user in it runs status; a user in
// neither group is still kept out, and the directory lists nothing for the read-only group.
TEST_F(AdminCtlTest, ReadonlyGroupReachesTheSocketInAPrivateRuntimeDirectory) {
    TemporaryAccount viewer("sgtrd");
    TemporaryAccount outsider("sgtnd");
    const std::string runtimeDir = dir_.path() + "/run";
    ASSERT_EQ(::mkdir(runtimeDir.c_str(), 0750), 0);
    const std::string socketPath = runtimeDir + "/admin.sock";
    server_.reset();
    AdminServerOptions options;
    options.socketPath = socketPath;
    options.group = "root";
    options.readonlyGroup = viewer.name();
    server_ = std::make_unique<AdminServer>(options, handler_);
    server_->start();
    std::vector<std::string> status = {ctlBinary(), "--socket", socketPath, "status"};
    expectExit(runProcess(viewer.as(status), 15000ms), 0, "read-only status through 0750 dir");
    auto listing = runProcess(viewer.as({"/bin/ls", runtimeDir}), 15000ms);
    EXPECT_FALSE(listing.status && listing.status->isExit(0)) << "the directory became readable";
    expectOneLineError(runProcess(outsider.as(status), 15000ms), 3, "Permission denied",
                       "outsider");
    struct stat st {};
    ASSERT_EQ(::stat(runtimeDir.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07, 0u) << "others gained access to the directory";
}

// The same through the real daemon, laid out as the packaged unit has it: the admin socket in a
// 0750 runtime directory of the admin group (RuntimeDirectoryMode=0750, Group=splicegate). The
// read-only group's member gets status and is refused drain and upgrade (which would restart
// the daemon); someone in neither group cannot connect (exit 3); the daemon serves on.
TEST(AdminCtlDaemonTest, ReadonlyGroupReachesTheDaemonsSocketInThePackagedRuntimeDirectory) {
    TemporaryAccount admins("sgtag");
    TemporaryAccount viewer("sgtrv");
    TemporaryAccount outsider("sgtno");
    TempDir dir;
    ::chmod(dir.path().c_str(), 0755);  // as /run is
    const std::string runtimeDir = dir.path() + "/splicegate";
    ASSERT_EQ(::mkdir(runtimeDir.c_str(), 0750), 0);
    ASSERT_EQ(::chown(runtimeDir.c_str(), 0, admins.gid()), 0) << std::strerror(errno);
    const std::string socketPath = runtimeDir + "/admin.sock";
    uint16_t port = pickFreePort();
    Daemon daemon({"--listen", loopback(port), "--upstream", "127.0.0.1:9", "--admin-socket",
                   socketPath, "--admin-group", admins.name(), "--admin-readonly-group",
                   viewer.name()});
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    const std::vector<std::string> ctl = {ctlBinary(), "--socket", socketPath};
    auto with = [&](std::vector<std::string> args) {
        auto argv = ctl;
        argv.insert(argv.end(), args.begin(), args.end());
        return argv;
    };
    auto status = runProcess(viewer.as(with({"status"})), milliseconds(15000));
    ASSERT_TRUE(status.status && status.status->isExit(0)) << status.err;
    EXPECT_NE(status.out.find("workers"), std::string::npos) << status.out;
    for (const char* action : {"drain", "upgrade"}) {
        auto denied = runProcess(viewer.as(with({action})), milliseconds(15000));
        ASSERT_TRUE(denied.status && denied.status->isExit(1)) << action << ": " << denied.err;
        EXPECT_NE(denied.err.find("permission denied"), std::string::npos) << denied.err;
    }
    auto admin = runProcess(admins.as(with({"status"})), milliseconds(15000));
    EXPECT_TRUE(admin.status && admin.status->isExit(0)) << admin.err;
    auto refused = runProcess(outsider.as(with({"status"})), milliseconds(15000));
    ASSERT_TRUE(refused.status && refused.status->isExit(3)) << refused.err;
    EXPECT_NE(refused.err.find("Permission denied"), std::string::npos) << refused.err;
    auto listing = runProcess(viewer.as({"/bin/ls", runtimeDir}), milliseconds(15000));
    EXPECT_FALSE(listing.status && listing.status->isExit(0)) << "the directory became readable";
    EXPECT_TRUE(daemon.running()) << daemon.why();
    EXPECT_TRUE(isListening(port));
}

// A hostile "daemon" announcing and streaming a 200 MiB response: splicegatectl refuses it from
// the length prefix, with one line and exit 1, and never holds more than a small buffer of it.
TEST_F(AdminCtlTest, HostileHugeResponseIsRefusedWithBoundedMemory) {
    const std::string hostilePath = dir_.path() + "/hostile.sock";
    UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    ASSERT_TRUE(listener.valid());
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, hostilePath.c_str(), sizeof(address.sun_path) - 1);
    ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    ASSERT_EQ(::listen(listener.get(), 1), 0);
    constexpr std::uint64_t kAnnounced = std::uint64_t{200} << 20;
    std::atomic<std::uint64_t> streamed{0};
    std::thread fake([&] {
        UniqueFd peer(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
        if (!peer) return;
        setIoTimeout(peer.get(), 5000ms);
        char request[256];
        if (::recv(peer.get(), request, sizeof request, 0) <= 0) return;
        const std::string prefix = varint64(kAnnounced);
        if (::send(peer.get(), prefix.data(), prefix.size(), MSG_NOSIGNAL) <= 0) return;
        const std::string chunk(256 * 1024, 'x');
        while (streamed.load() < kAnnounced) {  // bounded: until the client hangs up or 200 MiB
            ssize_t n = ::send(peer.get(), chunk.data(), chunk.size(), MSG_NOSIGNAL);
            if (n <= 0) break;
            streamed += static_cast<std::uint64_t>(n);
        }
    });
    auto result = runCtl(hostilePath, {"status"});
    fake.join();
    expectOneLineError(result, 1, "exceeds the limit of 1048576 bytes", "200 MiB response");
    EXPECT_NE(result.err.find(std::to_string(kAnnounced)), std::string::npos) << result.err;
    rusage usage{};
    ASSERT_EQ(::getrusage(RUSAGE_CHILDREN, &usage), 0);
    EXPECT_LT(usage.ru_maxrss, 64 * 1024) << "splicegatectl's peak RSS in KiB";
    EXPECT_LT(streamed.load(), kAnnounced) << "the client read the whole hostile response";
}

TEST_F(AdminCtlTest, BashCompletion) {
    // __FILE__ is relative to the build directory when ccache's base_dir rewrote it.
    std::filesystem::path source(__FILE__);
    if (source.is_relative()) {
        source = std::filesystem::path(SPLICEGATE_BIN_DIR).parent_path() / source;
    }
    const std::string completion =
        (source.parent_path().parent_path().parent_path() / "packaging/bash-completion/splicegatectl")
            .lexically_normal()
            .string();
    ASSERT_TRUE(std::filesystem::exists(completion)) << completion;
    // bash-completion's helpers, reduced to what the function uses.
    const std::string script =
        "_init_completion() { words=(\"${COMP_WORDS[@]}\"); cword=$COMP_CWORD;"
        " cur=${COMP_WORDS[COMP_CWORD]}; prev=${COMP_WORDS[COMP_CWORD-1]}; }\n"
        "_filedir() { COMPREPLY=(FILES); }\n"
        "source '" +
        completion +
        "' || exit 9\n"
        "PATH='" SPLICEGATE_BIN_DIR
        "':$PATH\n"
        "try() { COMP_WORDS=(\"$@\"); COMP_CWORD=$((${#COMP_WORDS[@]}-1)); COMPREPLY=();"
        " _splicegatectl; echo \"${COMPREPLY[*]}\"; }\n"
        "try splicegatectl ''\n"
        "try splicegatectl au\n"
        "try splicegatectl --js\n"
        "try splicegatectl --socket ''\n"
        "try splicegatectl --json xdp ''\n"
        "try splicegatectl --socket '" +
        path() + "' kill ''\n";
    auto result = runProcess({"/bin/bash", "-c", script});
    expectExit(result, 0, "completion script");
    const auto got = textLines(result.out);
    ASSERT_EQ(got.size(), 6u) << result.out << result.err;
    EXPECT_EQ(got[0],
              "status connections kill drain reload audit-rotate xdp upstreams upstream upgrade "
              "version help");
    EXPECT_EQ(got[1], "audit-rotate");
    EXPECT_EQ(got[2], "--json");
    EXPECT_EQ(got[3], "FILES");
    EXPECT_EQ(got[4], "list add del");
    EXPECT_EQ(got[5], "41 42");  // asked from the daemon
}

}  // namespace
}  // namespace splicegate::test
