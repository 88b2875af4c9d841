// The Debian package (packaging/, issue 6), tested on this machine itself.
//
// Why here and not in a chroot: the maintainer scripts need a real system (adduser, dpkg's
// conffile handling, deb-systemd-helper, sysctl), a debootstrap chroot costs minutes and the
// mirror, and CI runs on a throwaway machine. So the test installs the package here and puts
// the machine back as it found it: it refuses to run (skip) when splicegate is already
// installed, snapshots the file tree first and compares after the purge, and a guard undoes
// everything (purge, user, sysctl, stray processes) even when an assertion fails.
// packaging/README.md has the longer justification.
//
// - PackageTest.LintianCleanAndHardenedUnit: builds the .deb with packaging/build-deb.sh from
//   the binaries CTest just built (--prebuilt: dpkg-buildpackage and every debhelper step run,
//   only the compiler does not), lintian has no errors, the package holds exactly the expected
//   files, and the unit's `systemd-analyze security --offline=true` exposure is at most 2.5.
// - PackageTest.InstallRunUpgradeRemovePurge: dpkg -i; every file, the conffile, the user and
//   group, the state directory, `systemd-analyze verify`, the sysctl drop-in applied; the
//   installed daemon relays bytes (hash-compared) with the installed config as the splicegate
//   user, under an emulation of the unit (systemd is not PID 1 here): the unit's capabilities
//   and NoNewPrivileges through setpriv, ProtectSystem/PrivateTmp/ProtectHome/
//   ProtectKernelTunables as read-only and private mounts, RuntimeDirectory, UMask, and its
//   SystemCallFilter checked against every system call the daemon made (strace); admin socket,
//   splicegatectl as a group member, /metrics, the audit log; reload and drain; once more with
//   the XDP edge filter on a veth (CAP_NET_ADMIN, CAP_BPF, CAP_PERFMON). Then an upgrade
//   to a bumped version keeps a modified conffile without a prompt, remove keeps the conffile,
//   purge leaves nothing but the splicegate user and group (Debian policy).
//   When systemd is PID 1 the real service is checked instead of the emulation.
#include <gtest/gtest.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/Daemon.h"
#include "tests/support/Sockets.h"

namespace splicegate::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr const char* kConf = "/etc/splicegate/splicegate.conf";
constexpr const char* kUnit = "/lib/systemd/system/splicegate.service";
constexpr const char* kSysctlDropIn = "/usr/lib/sysctl.d/50-splicegate.conf";
constexpr const char* kPipeKnob = "/proc/sys/fs/pipe-user-pages-soft";
constexpr const char* kStateDir = "/var/lib/splicegate";
constexpr const char* kAuditDir = "/var/lib/splicegate/audit";
constexpr const char* kRunDir = "/run/splicegate";
constexpr const char* kAdminSocket = "/run/splicegate/admin.sock";
// The installed config's example route and metrics endpoint (packaging/splicegate.conf).
constexpr uint16_t kRelayPort = 8443;
constexpr uint16_t kUpstreamPort = 8080;
constexpr uint16_t kMetricsPort = 9464;

// ---- Paths of this checkout and build tree.

std::string sourceDir() {
    // From CMake, not __FILE__: a compiler cache may rewrite __FILE__ to a relative path.
    return SPLICEGATE_SOURCE_DIR;
}

std::string buildDir() {
    return fs::path(SPLICEGATE_BIN_DIR).parent_path().string();
}

std::string projectVersion() {
    std::ifstream in(sourceDir() + "/CMakeLists.txt");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::smatch match;
    static const std::regex pattern(R"(project\(splicegate\s+VERSION\s+([0-9][0-9.]*))");
    if (std::regex_search(text, match, pattern)) return match[1];
    return {};
}

// ---- Running commands.

std::string describe(const std::vector<std::string>& argv, const ProcessResult& result) {
    std::string command;
    for (const auto& arg : argv) command += (command.empty() ? "" : " ") + arg;
    std::string status = result.status ? result.status->describe() : "timed out (killed)";
    return "`" + command + "`: " + status + "\n--- stdout:\n" + result.out + "\n--- stderr:\n" +
           result.err;
}

struct Cmd {
    std::vector<std::string> argv;
    ProcessResult result;
    bool ok() const { return result.status && result.status->isExit(0); }
    std::string why() const { return describe(argv, result); }
};

Cmd run(std::vector<std::string> argv, milliseconds timeout = milliseconds(120000)) {
    Cmd r{std::move(argv), {}};
    r.result = runProcess(r.argv, timeout);
    return r;
}

Cmd shell(const std::string& script, milliseconds timeout = milliseconds(120000)) {
    return run({"/bin/sh", "-c", script}, timeout);
}

// dpkg, retried while another dpkg or apt holds the lock (a developer machine may be busy).
Cmd dpkg(std::vector<std::string> args) {
    std::vector<std::string> argv{"/usr/bin/dpkg"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto deadline = deadlineIn(milliseconds(120000));
    for (;;) {
        Cmd r = run(argv);
        bool locked = !r.ok() && r.result.err.find("lock") != std::string::npos;
        if (!locked || Clock::now() > deadline) return r;
        std::this_thread::sleep_for(2s);
    }
}

bool exists(const std::string& path) {
    std::error_code ec;
    return fs::exists(fs::symlink_status(path, ec));
}

std::string trim(std::string text) {
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
    std::size_t start = 0;
    while (start < text.size() && std::isspace(static_cast<unsigned char>(text[start]))) ++start;
    return text.substr(start);
}

std::vector<std::string> splitLines(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
}

std::vector<std::string> splitWords(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string word; in >> word;) out.push_back(word);
    return out;
}

std::string dpkgStatus() {
    Cmd r = run({"/usr/bin/dpkg-query", "-W", "-f=${Status}", "splicegate"});
    return r.ok() ? trim(r.result.out) : std::string();
}

std::optional<std::string> readKnob(const char* path) {
    std::ifstream in(path);
    std::string value;
    if (!(in >> value)) return std::nullopt;
    return value;
}

bool writeKnob(const char* path, const std::string& value) {
    std::ofstream out(path);
    out << value << "\n";
    return static_cast<bool>(out.flush());
}

bool userExists(const std::string& name) {
    return run({"/usr/bin/getent", "passwd", name}).ok();
}
bool groupExists(const std::string& name) {
    return run({"/usr/bin/getent", "group", name}).ok();
}

// Processes whose real uid is `uid` (the daemon and anything it left).
std::vector<pid_t> processesOf(uid_t uid) {
    std::vector<pid_t> pids;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator("/proc", ec)) {
        const std::string name = entry.path().filename().string();
        if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
        struct stat st {};
        if (::stat(entry.path().c_str(), &st) == 0 && st.st_uid == uid)
            pids.push_back(static_cast<pid_t>(std::stol(name)));
    }
    return pids;
}

// "Name:\tvalue..." fields of /proc/PID/status.
std::map<std::string, std::string> procStatus(pid_t pid) {
    std::map<std::string, std::string> fields;
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    for (std::string line; std::getline(in, line);) {
        auto colon = line.find(':');
        if (colon != std::string::npos) fields[line.substr(0, colon)] = trim(line.substr(colon + 1));
    }
    return fields;
}

// ---- The file tree, before and after.

// Paths that change without the package being involved: dpkg's and apt's own bookkeeping,
// logs, caches and temporary files; /run/mount is libmount's lock directory, made by the first
// mount(8) on a fresh machine (the emulated unit's bind mounts).
const std::vector<std::string> kSnapshotSkips = {
    "/var/lib/dpkg", "/var/lib/apt", "/var/log",  "/var/cache", "/var/backups",
    "/var/tmp",      "/run/netns",   "/run/lock", "/run/user",  "/run/mount"};
const std::vector<std::string> kSnapshotRoots = {"/etc", "/usr", "/var", "/run", "/opt", "/srv",
                                                 "/home"};

void walk(const fs::path& dir, std::set<std::string>& out) {
    std::error_code ec;
    fs::directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec);
    if (ec) return;
    for (; it != fs::directory_iterator(); it.increment(ec)) {
        if (ec) return;
        const std::string path = it->path().string();
        if (std::find(kSnapshotSkips.begin(), kSnapshotSkips.end(), path) != kSnapshotSkips.end())
            continue;
        out.insert(path);
        std::error_code typeError;
        if (it->is_directory(typeError) && !it->is_symlink(typeError)) walk(it->path(), out);
    }
}

std::set<std::string> snapshot() {
    std::set<std::string> paths;
    for (const auto& root : kSnapshotRoots) walk(root, paths);
    return paths;
}

// Paths in `after` but not `before` (or the reverse) that no other package owns: what the
// package (or the test) left behind or took away.
std::vector<std::string> strays(const std::set<std::string>& before,
                                const std::set<std::string>& after) {
    std::vector<std::string> changed;
    for (const auto& path : after)
        if (!before.count(path)) changed.push_back("left behind: " + path);
    for (const auto& path : before)
        if (!after.count(path)) changed.push_back("removed: " + path);
    std::vector<std::string> out;
    for (const auto& entry : changed) {
        std::string path = entry.substr(entry.find(": ") + 2);
        // Installed or removed meanwhile by someone else's apt or dpkg: not ours.
        Cmd owner = run({"/usr/bin/dpkg-query", "-S", path});
        if (owner.ok() && owner.result.out.rfind("splicegate:", 0) != 0) continue;
        out.push_back(entry);
    }
    return out;
}

// ---- The unit file, read the way systemd would for the settings the emulation uses.

struct Unit {
    std::map<std::string, std::vector<std::string>> settings;  // key -> every assignment
    std::string last(const std::string& key) const {
        auto it = settings.find(key);
        return it == settings.end() || it->second.empty() ? std::string() : it->second.back();
    }
};

Unit readUnit(const std::string& path) {
    Unit unit;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
        line = trim(line);
        if (line.empty() || line[0] == '#' || line[0] == ';' || line[0] == '[') continue;
        auto eq = line.find('=');
        if (eq == std::string::npos) continue;
        unit.settings[trim(line.substr(0, eq))].push_back(trim(line.substr(eq + 1)));
    }
    return unit;
}

const std::map<std::string, unsigned> kCapabilityBits = {
    {"CAP_CHOWN", 0},          {"CAP_DAC_OVERRIDE", 1}, {"CAP_NET_BIND_SERVICE", 10},
    {"CAP_NET_BROADCAST", 11}, {"CAP_NET_ADMIN", 12},   {"CAP_NET_RAW", 13},
    {"CAP_IPC_LOCK", 14},      {"CAP_SYS_ADMIN", 21},   {"CAP_SYS_RESOURCE", 24},
    {"CAP_PERFMON", 38},       {"CAP_BPF", 39}};

// setpriv's spelling: "net_bind_service,net_admin,bpf".
std::string setprivCaps(const std::vector<std::string>& caps, const char* sign) {
    std::string out;
    for (auto cap : caps) {
        std::transform(cap.begin(), cap.end(), cap.begin(), ::tolower);
        out += std::string(out.empty() ? "" : ",") + sign + cap.substr(4);
    }
    return out;
}

uint64_t capMask(const std::vector<std::string>& caps) {
    uint64_t mask = 0;
    for (const auto& cap : caps) {
        auto it = kCapabilityBits.find(cap);
        if (it == kCapabilityBits.end()) {
            ADD_FAILURE() << "the test does not know " << cap << "; add it to kCapabilityBits";
            continue;
        }
        mask |= uint64_t{1} << it->second;
    }
    return mask;
}

// `systemd-analyze syscall-filter` groups, expanded, and the unit's SystemCallFilter= lines
// applied in order (the first decides allow- or deny-list; later ones add or remove).
class SyscallFilter {
  public:
    bool load(const Unit& unit, std::string& error) {
        Cmd listing = run({"/usr/bin/systemd-analyze", "syscall-filter"});
        if (listing.result.out.empty()) {
            error = listing.why();
            return false;
        }
        std::string group;
        for (const auto& raw : splitLines(listing.result.out)) {
            if (!raw.empty() && raw[0] == '@') {
                group = trim(raw);
                continue;
            }
            std::string item = trim(raw);
            if (group.empty() || item.empty() || item[0] == '#') continue;
            groups_[group].push_back(item);
        }
        auto lines = unit.settings.count("SystemCallFilter") ? unit.settings.at("SystemCallFilter")
                                                             : std::vector<std::string>{};
        if (lines.empty()) {
            allowList_ = false;
            return true;
        }
        bool first = true;
        for (auto line : lines) {
            bool deny = !line.empty() && line[0] == '~';
            if (deny) line = line.substr(1);
            std::set<std::string> names;
            for (const auto& word : splitWords(line)) expand(word, names);
            if (first) allowList_ = !deny;
            first = false;
            // In an allow-list, "~" lines remove; in a deny-list, plain lines remove.
            bool add = allowList_ ? !deny : deny;
            for (const auto& name : names) {
                if (add) {
                    set_.insert(name);
                } else {
                    set_.erase(name);
                }
            }
        }
        return true;
    }
    bool allowed(const std::string& syscall) const {
        return allowList_ ? set_.count(syscall) != 0 : set_.count(syscall) == 0;
    }

  private:
    void expand(const std::string& word, std::set<std::string>& out) const {
        if (word.empty() || word[0] != '@') {
            out.insert(word);
            return;
        }
        auto it = groups_.find(word);
        if (it == groups_.end()) return;
        for (const auto& item : it->second) expand(item, out);
    }
    std::map<std::string, std::vector<std::string>> groups_;
    std::set<std::string> set_;
    bool allowList_ = false;
};

// System calls made by the process after it exec'd `binary`, from `strace -f -o` output.
std::set<std::string> syscallsAfterExec(const std::string& trace, const std::string& binary) {
    std::set<std::string> names;
    static const std::regex call(R"(^\d+\s+([a-z0-9_]+)\()");
    static const std::regex resumed(R"(^\d+\s+<\.\.\. ([a-z0-9_]+) resumed>)");
    bool started = false;
    for (const auto& line : splitLines(trace)) {
        if (!started) {
            started = line.find("execve(\"" + binary + "\"") != std::string::npos &&
                      line.find(" = 0") != std::string::npos;
            continue;
        }
        std::smatch match;
        if (std::regex_search(line, match, call) || std::regex_search(line, match, resumed))
            names.insert(match[1]);
    }
    return names;
}

// Every system call in `traceFile` after the daemon's exec that the unit's filter would refuse
// (empty: none); `used` gets them all.
std::string refusedSyscalls(const Unit& unit, const std::string& traceFile,
                            std::set<std::string>& used) {
    SyscallFilter filter;
    std::string error;
    if (!filter.load(unit, error)) return "(cannot expand the filter: " + error + ")";
    used = syscallsAfterExec(readFile(traceFile), "/usr/sbin/splicegate");
    if (used.size() < 20) return "(strace saw only " + std::to_string(used.size()) + " calls)";
    std::string refused;
    for (const auto& name : used)
        if (!filter.allowed(name)) refused += " " + name;
    return refused;
}

// ---- Network helpers: a private network namespace, an echo upstream, an HTTP GET.

bool enterPrivateNetwork(std::string& error) {
    if (::unshare(CLONE_NEWNET) != 0) {
        error = std::string("unshare(CLONE_NEWNET): ") + std::strerror(errno);
        return false;
    }
    UniqueFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    ifreq request{};
    std::snprintf(request.ifr_name, sizeof request.ifr_name, "lo");
    if (!fd || ::ioctl(fd.get(), SIOCGIFFLAGS, &request) != 0) {
        error = std::string("SIOCGIFFLAGS lo: ") + std::strerror(errno);
        return false;
    }
    request.ifr_flags = static_cast<short>(request.ifr_flags | IFF_UP);
    if (::ioctl(fd.get(), SIOCSIFFLAGS, &request) != 0) {
        error = std::string("SIOCSIFFLAGS lo up: ") + std::strerror(errno);
        return false;
    }
    return true;
}

// Echoes every connection on 127.0.0.1:port until EOF, then closes its side.
class EchoServer {
  public:
    explicit EchoServer(uint16_t port) {
        listener_.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
        int one = 1;
        ::setsockopt(listener_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        sockaddr_in address{};
        address.sin_family = AF_INET;
        address.sin_port = htons(port);
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (::bind(listener_.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
            ::listen(listener_.get(), 16) != 0)
            throw std::system_error(errno, std::generic_category(),
                                    "echo upstream on 127.0.0.1:" + std::to_string(port));
        setIoTimeout(listener_.get(), milliseconds(100));
        thread_ = std::thread([this] { serve(); });
    }
    EchoServer(const EchoServer&) = delete;
    EchoServer& operator=(const EchoServer&) = delete;
    ~EchoServer() {
        stop_ = true;
        thread_.join();
    }

  private:
    void serve() {
        while (!stop_) {
            UniqueFd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
            if (!fd) continue;
            setIoTimeout(fd.get(), milliseconds(100));
            std::vector<char> buffer(64 * 1024);
            auto deadline = deadlineIn(milliseconds(30000));
            while (!stop_ && Clock::now() < deadline) {
                ssize_t n = ::recv(fd.get(), buffer.data(), buffer.size(), 0);
                if (n == 0) break;
                if (n < 0) {
                    if (errno == EAGAIN || errno == EINTR) continue;
                    break;
                }
                int error = 0;
                if (!sendAll(fd.get(), buffer.data(), static_cast<std::size_t>(n), deadline, error))
                    break;
            }
            ::shutdown(fd.get(), SHUT_WR);
        }
    }
    UniqueFd listener_;
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

std::string httpGet(uint16_t port, const std::string& path) {
    int error = 0;
    UniqueFd fd = connectTcp(port, error, milliseconds(3000));
    if (!fd) return "connect failed: " + std::string(std::strerror(error));
    auto deadline = deadlineIn(milliseconds(5000));
    std::string request = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (!sendAll(fd.get(), request.data(), request.size(), deadline, error)) return "send failed";
    std::string response;
    char buffer[8192];
    while (Clock::now() < deadline) {
        ssize_t n = ::recv(fd.get(), buffer, sizeof buffer, 0);
        if (n == 0) break;
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR) continue;
            break;
        }
        response.append(buffer, static_cast<std::size_t>(n));
    }
    return response;
}

// The daemon binds its listeners first and sets up XDP, the admin socket and metrics after:
// "ready" for these tests is the admin socket's log line.
bool waitForLog(Daemon& daemon, const std::string& needle, milliseconds timeout) {
    for (auto deadline = deadlineIn(timeout); Clock::now() < deadline;) {
        if (!grepLines(daemon.log(), needle).empty()) return true;
        if (!daemon.running()) return false;
        std::this_thread::sleep_for(20ms);
    }
    return false;
}

// ---- Tools the tests need.

std::string missingTools() {
    std::string missing;
    const std::vector<std::pair<std::string, std::string>> tools = {
        {"/usr/bin/dpkg-buildpackage", "dpkg-dev"}, {"/usr/bin/dh", "debhelper"},
        {"/usr/bin/lintian", "lintian"},            {"/usr/bin/systemd-analyze", "systemd"},
        {"/usr/bin/setpriv", "util-linux"},         {"/usr/bin/unshare", "util-linux"},
        {"/usr/bin/strace", "strace"},              {"/usr/sbin/adduser", "adduser"},
        {"/usr/bin/cmake", "cmake"}};
    for (const auto& [path, package] : tools)
        if (::access(path.c_str(), X_OK) != 0) missing += " " + package + " (" + path + ")";
    return missing;
}

// Builds splicegate_<version>_<arch>.deb from this build tree into `outDir`.
std::string buildPackage(const std::string& outDir, const std::string& version, Cmd& build) {
    std::vector<std::string> argv{"/bin/sh",  sourceDir() + "/packaging/build-deb.sh",
                                  "--prebuilt", buildDir(), "--out", outDir};
    if (!version.empty()) {
        argv.emplace_back("--version");
        argv.push_back(version);
    }
    build = run(argv, milliseconds(300000));
    static const std::regex built(R"(build-deb\.sh: built (\S+\.deb))");
    std::smatch match;
    if (build.ok() && std::regex_search(build.result.out, match, built)) return match[1];
    return {};
}

class PackageTest : public ::testing::Test {
  protected:
    void SetUp() override {
        if (::geteuid() != 0) GTEST_SKIP() << "needs root: installs the package with dpkg";
        // dpkg needs sbin in PATH (ldconfig, start-stop-daemon); CTest may not give it.
        ::setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", 1);
        ::setenv("DEBIAN_FRONTEND", "noninteractive", 1);
        std::string missing = missingTools();
        ASSERT_TRUE(missing.empty())
            << "missing tools (apt-get install them; tools/install-deps.sh should):" << missing;
        version_ = projectVersion();
        ASSERT_FALSE(version_.empty()) << "no project(splicegate VERSION ...) in CMakeLists.txt";
    }

    TempDir work_;
    std::string version_;
};

TEST_F(PackageTest, LintianCleanAndHardenedUnit) {
    Cmd build;
    std::string deb = buildPackage(work_.path() + "/deb", "", build);
    ASSERT_FALSE(deb.empty()) << build.why();
    EXPECT_EQ(fs::path(deb).filename().string(), "splicegate_" + version_ + "_amd64.deb");

    // lintian: no errors. Warnings and info tags are printed for the record.
    Cmd lintian = run({"/usr/bin/lintian", "--info", "--fail-on", "error", deb}, milliseconds(180000));
    std::string tags = lintian.result.out + lintian.result.err;
    std::cout << "lintian (" << (lintian.ok() ? "passed" : "failed") << "):\n"
              << (tags.empty() ? "(no tags)\n" : tags);
    EXPECT_TRUE(lintian.ok()) << lintian.why();
    for (const auto& line : splitLines(tags)) EXPECT_NE(line.rfind("E: ", 0), 0u) << line;

    // Exactly these files, owned by root, with sane modes.
    Cmd contents = run({"/usr/bin/dpkg-deb", "--contents", deb});
    ASSERT_TRUE(contents.ok()) << contents.why();
    std::set<std::string> files;
    for (const auto& line : splitLines(contents.result.out)) {
        auto words = splitWords(line);
        if (words.size() < 6 || words[0][0] == 'd') continue;
        EXPECT_EQ(words[1], "root/root") << line;
        EXPECT_EQ(words[0].find('w', 3), std::string::npos) << "group/world-writable: " << line;
        std::string path = words[5].substr(1);  // "./usr/..." -> "/usr/..."
        if (path.rfind("/usr/share/doc/", 0) == 0 && path.size() > 3 &&
            path.compare(path.size() - 3, 3, ".gz") == 0)
            path.resize(path.size() - 3);  // dh_compress decides by size (the .md stay as they are)
        files.insert(path);
        if (path.find("/bin/") != std::string::npos || path.find("/sbin/") != std::string::npos) {
            EXPECT_EQ(words[0], "-rwxr-xr-x") << line;
        }
    }
    const std::set<std::string> expected = {
        "/etc/splicegate/splicegate.conf",
        "/lib/systemd/system/splicegate.service",
        "/lib/systemd/system/splicegate-archive.service",
        "/usr/bin/splicegate-archive",
        "/usr/bin/splicegate-audit",
        "/usr/bin/splicegatectl",
        "/usr/lib/sysctl.d/50-splicegate.conf",
        "/usr/sbin/splicegate",
        "/usr/share/bash-completion/completions/splicegatectl",
        "/usr/share/doc/splicegate/FORMAT.md",
        "/usr/share/doc/splicegate/README.md",
        "/usr/share/doc/splicegate/archive.md",
        "/usr/share/doc/splicegate/changelog",
        "/usr/share/doc/splicegate/configuration.md",
        "/usr/share/doc/splicegate/copyright",
        "/usr/share/doc/splicegate/examples/60-splicegate-congestion.conf",
        "/usr/share/doc/splicegate/examples/archive.conf",
        "/usr/share/doc/splicegate/kernel-notes.md",
        "/usr/share/doc/splicegate/metrics.md",
        "/usr/share/doc/splicegate/operations.md",
        "/usr/share/lintian/overrides/splicegate",
        "/usr/share/splicegate/splicegate-dashboard.json",
        "/usr/share/splicegate/splicegate.rules.test.yml",
        "/usr/share/splicegate/splicegate.rules.yml",
        "/usr/share/man/man1/splicegate-audit.1.gz",
        "/usr/share/man/man1/splicegatectl.1.gz",
        "/usr/share/man/man5/splicegate.conf.5.gz",
        "/usr/share/man/man8/splicegate-archive.8.gz",
        "/usr/share/man/man8/splicegate.8.gz"};
    EXPECT_EQ(files, expected) << contents.result.out;

    Cmd conffiles = shell("dpkg-deb --info '" + deb + "' conffiles");
    EXPECT_EQ(trim(conffiles.result.out), kConf) << conffiles.why();

    // The unit as packaged: exposure at most 2.5 (issue 6).
    std::string root = work_.path() + "/root";
    Cmd extract = run({"/usr/bin/dpkg-deb", "-x", deb, root});
    ASSERT_TRUE(extract.ok()) << extract.why();
    Cmd security = run({"/usr/bin/systemd-analyze", "security", "--offline=true",
                        root + "/lib/systemd/system/splicegate.service"});
    std::smatch match;
    static const std::regex overall(R"(Overall exposure level for splicegate\.service: ([0-9.]+))");
    std::string report = security.result.out + security.result.err;
    ASSERT_TRUE(std::regex_search(report, match, overall)) << security.why();
    double exposure = std::stod(match[1]);
    std::cout << "systemd-analyze security --offline=true: exposure " << exposure << "\n";
    EXPECT_LE(exposure, 2.5) << report;
}

// Undoes what the lifecycle test did to the machine, whatever happened.
class MachineGuard {
  public:
    MachineGuard() {
        userExisted_ = userExists("splicegate");
        archiveUserExisted_ = userExists("splicegate-archive");
        groupExisted_ = groupExists("splicegate");
        runDirExisted_ = exists(kRunDir);
        pipeAllowance_ = readKnob(kPipeKnob);
    }
    MachineGuard(const MachineGuard&) = delete;
    MachineGuard& operator=(const MachineGuard&) = delete;
    ~MachineGuard() { restore(); }

    void restore() {
        if (restored_) return;
        restored_ = true;
        killServiceProcesses();
        if (!dpkgStatus().empty() && dpkgStatus() != "unknown ok not-installed") {
            Cmd purge = dpkg({"--purge", "splicegate"});
            if (!purge.ok()) ADD_FAILURE() << "cleanup: " << purge.why();
        }
        if (!runDirExisted_) fs::remove_all(kRunDir);
        // The archiver's user first: its primary group is splicegate.
        for (auto [name, existed] : {std::pair{"splicegate-archive", archiveUserExisted_},
                                     std::pair{"splicegate", userExisted_}}) {
            if (existed || !userExists(name)) continue;
            Cmd r = run({"/usr/sbin/userdel", name});
            if (!r.ok()) ADD_FAILURE() << "cleanup: " << r.why();
        }
        if (!groupExisted_ && groupExists("splicegate")) {
            Cmd r = run({"/usr/sbin/groupdel", "splicegate"});
            if (!r.ok()) ADD_FAILURE() << "cleanup: " << r.why();
        }
        if (pipeAllowance_ && readKnob(kPipeKnob) != pipeAllowance_) writeKnob(kPipeKnob, *pipeAllowance_);
    }

    bool userExisted() const { return userExisted_; }
    const std::optional<std::string>& pipeAllowance() const { return pipeAllowance_; }

  private:
    static void killServiceProcesses() {
        Cmd id = run({"/usr/bin/id", "-u", "splicegate"});
        if (!id.ok()) return;
        auto uid = static_cast<uid_t>(std::stoul(trim(id.result.out)));
        for (pid_t pid : processesOf(uid)) ::kill(pid, SIGKILL);
        for (int i = 0; i < 100 && !processesOf(uid).empty(); ++i) std::this_thread::sleep_for(20ms);
    }

    bool userExisted_ = false;
    bool archiveUserExisted_ = false;
    bool groupExisted_ = false;
    bool runDirExisted_ = false;
    bool restored_ = false;
    std::optional<std::string> pipeAllowance_;
};

// The installed daemon as the service would run it, emulated: see the file comment.
class EmulatedService {
  public:
    EmulatedService(const Unit& unit, const std::string& traceFile,
                    const std::string& extraArguments = "") {
        auto ambient = splitWords(unit.last("AmbientCapabilities"));
        auto bounding = splitWords(unit.last("CapabilityBoundingSet"));
        std::string user = unit.last("User");
        std::string group = unit.last("Group");
        std::string umask = unit.last("UMask");
        std::string nofile = unit.last("LimitNOFILE");
        std::string exec = unit.last("ExecStart") + extraArguments;
        std::string script =
            "set -eu\n"
            // RuntimeDirectory= (mode RuntimeDirectoryMode=, owned by User/Group).
            "install -d -o " + user + " -g " + group + " -m " + unit.last("RuntimeDirectoryMode") +
            " " + kRunDir + "\n"
            // ProtectSystem=strict: every mount read-only but /proc, /sys, /dev; then the
            // writable paths (ReadWritePaths, StateDirectory, RuntimeDirectory) bound back.
            "for m in $(awk '{print $5}' /proc/self/mountinfo | sort -u); do\n"
            "  case \"$m\" in /proc|/proc/*|/sys|/sys/*|/dev|/dev/*) continue ;; esac\n"
            "  mount -o remount,bind,ro \"$m\" 2>/dev/null || true\n"
            "done\n"
            "for d in " + std::string(kStateDir) + " " + kRunDir + "; do\n"
            "  mount --bind \"$d\" \"$d\"; mount -o remount,bind,rw \"$d\"\n"
            "done\n"
            // ProtectKernelTunables=yes.
            "mount --bind /proc/sys /proc/sys; mount -o remount,bind,ro /proc/sys\n"
            // PrivateTmp=yes, ProtectHome=yes.
            "mount -t tmpfs -o mode=1777 tmpfs /tmp; mount -t tmpfs -o mode=1777 tmpfs /var/tmp\n"
            "for d in /home /root; do [ -d \"$d\" ] && mount -t tmpfs -o ro,mode=0755 tmpfs \"$d\"; done\n"
            "if touch /etc/.splicegate-protect-probe 2>/dev/null; then\n"
            "  rm -f /etc/.splicegate-protect-probe; echo 'ProtectSystem emulation failed' >&2; exit 97\n"
            "fi\n"
            "umask " + umask + "\n"
            // LimitNOFILE=: raising the hard limit needs CAP_SYS_RESOURCE, which root lacks in
            // some sandboxes (systemd as PID 1 has it).
            "ulimit -n " + nofile + " 2>/dev/null || echo \"emulation: LimitNOFILE=" + nofile +
            " not settable here (no CAP_SYS_RESOURCE), using $(ulimit -n)\" >&2\n"
            "exec setpriv --reuid=" + user + " --regid=" + group + " --init-groups"
            " --bounding-set=-all," + setprivCaps(bounding, "+") +
            " --inh-caps=-all," + setprivCaps(ambient, "+") +
            " --ambient-caps=-all," + setprivCaps(ambient, "+") +
            (unit.last("NoNewPrivileges") == "yes" ? " --no-new-privs" : "") + " -- " + exec + "\n";
        ::setenv("SPLICEGATE_BIN", "/usr/bin/strace", 1);
        daemon_.emplace(std::vector<std::string>{"-f", "-qq", "-o", traceFile, "/usr/bin/unshare",
                                                 "--mount", "--propagation", "private", "/bin/sh",
                                                 "-c", script},
                        false);
        ::unsetenv("SPLICEGATE_BIN");
    }

    Daemon& process() { return *daemon_; }

    // The traced daemon: strace's child (unshare, sh and setpriv exec into it, same pid).
    pid_t daemonPid() const {
        std::ifstream in("/proc/" + std::to_string(daemon_->pid()) + "/task/" +
                         std::to_string(daemon_->pid()) + "/children");
        long pid = 0;
        in >> pid;
        return static_cast<pid_t>(pid);
    }

  private:
    std::optional<Daemon> daemon_;
};

TEST_F(PackageTest, InstallRunUpgradeRemovePurge) {
    std::string status = dpkgStatus();
    if (!status.empty() && status != "unknown ok not-installed")
        GTEST_SKIP() << "splicegate is installed on this machine (" << status
                     << "); the test would replace and purge it";
    const bool systemdRunning = exists("/run/systemd/system");

    Cmd build;
    std::string deb = buildPackage(work_.path() + "/deb", "", build);
    ASSERT_FALSE(deb.empty()) << build.why();
    const std::string nextVersion = version_ + "+pkgtest1";
    std::string nextDeb = buildPackage(work_.path() + "/deb-next", nextVersion, build);
    ASSERT_FALSE(nextDeb.empty()) << build.why();

    const std::set<std::string> before = snapshot();
    MachineGuard guard;

    // ---- Install.
    Cmd install = dpkg({"--install", deb});
    ASSERT_TRUE(install.ok()) << install.why();
    EXPECT_TRUE(grepLines(install.result.out + install.result.err, "warning").empty()) << install.why();
    EXPECT_TRUE(grepLines(install.result.out + install.result.err, "error").empty()) << install.why();
    EXPECT_EQ(dpkgStatus(), "install ok installed");

    // Every file of the package, and nothing else.
    Cmd listed = dpkg({"--listfiles", "splicegate"});
    ASSERT_TRUE(listed.ok()) << listed.why();
    std::set<std::string> installedFiles;
    for (const auto& path : splitLines(listed.result.out))
        if (fs::is_regular_file(path)) installedFiles.insert(path);
    for (const char* path : {"/usr/sbin/splicegate", "/usr/bin/splicegatectl",
                             "/usr/bin/splicegate-audit", kConf, kUnit, kSysctlDropIn,
                             "/usr/share/bash-completion/completions/splicegatectl",
                             "/usr/share/man/man8/splicegate.8.gz",
                             "/usr/share/man/man5/splicegate.conf.5.gz",
                             "/usr/share/man/man1/splicegatectl.1.gz",
                             "/usr/share/man/man1/splicegate-audit.1.gz",
                             "/usr/share/doc/splicegate/copyright"}) {
        EXPECT_TRUE(installedFiles.count(path)) << path << " not installed:\n" << listed.result.out;
    }
    EXPECT_EQ(installedFiles.size(), 29u) << listed.result.out;

    // The binaries run.
    for (const auto& [binary, name] : std::vector<std::pair<std::string, std::string>>{
             {"/usr/sbin/splicegate", "splicegate"},
             {"/usr/bin/splicegatectl", "splicegatectl"},
             {"/usr/bin/splicegate-audit", "splicegate-audit"},
             {"/usr/bin/splicegate-archive", "splicegate-archive"}}) {
        Cmd version = run({binary, "--version"});
        EXPECT_TRUE(version.ok()) << version.why();
        EXPECT_EQ(version.result.out.rfind(name + " " + version_, 0), 0u) << version.why();
        Cmd help = run({binary, "--help"});
        EXPECT_TRUE(help.ok()) << help.why();
    }
    if (::access("/usr/bin/man", X_OK) == 0) {
        Cmd manPage = run({"/usr/bin/man", "-w", "8", "splicegate"});
        EXPECT_EQ(trim(manPage.result.out), "/usr/share/man/man8/splicegate.8.gz") << manPage.why();
    }

    // The conffile.
    Cmd conffiles = run({"/usr/bin/dpkg-query", "-W", "-f=${Conffiles}", "splicegate"});
    EXPECT_NE(conffiles.result.out.find(kConf), std::string::npos) << conffiles.why();

    // User and group: a system account without a login shell, home the state directory.
    Cmd passwd = run({"/usr/bin/getent", "passwd", "splicegate"});
    ASSERT_TRUE(passwd.ok()) << passwd.why();
    std::vector<std::string> account;
    {
        std::stringstream fields(trim(passwd.result.out));
        for (std::string field; std::getline(fields, field, ':');) account.push_back(field);
    }
    ASSERT_EQ(account.size(), 7u) << passwd.result.out;
    const auto uid = static_cast<uid_t>(std::stoul(account[2]));
    const auto gid = static_cast<gid_t>(std::stoul(account[3]));
    EXPECT_LT(uid, 1000u) << "not a system user: " << passwd.result.out;
    EXPECT_EQ(account[5], kStateDir);
    EXPECT_EQ(account[6], "/usr/sbin/nologin");
    Cmd group = run({"/usr/bin/getent", "group", "splicegate"});
    ASSERT_TRUE(group.ok()) << group.why();
    EXPECT_NE(group.result.out.find(":" + std::to_string(gid) + ":"), std::string::npos)
        << "the user's primary group is not splicegate: " << group.result.out;

    // State directories owned by the user, 0750.
    for (const char* dir : {kStateDir, kAuditDir}) {
        struct stat st {};
        ASSERT_EQ(::stat(dir, &st), 0) << dir << ": " << std::strerror(errno);
        EXPECT_TRUE(S_ISDIR(st.st_mode)) << dir;
        EXPECT_EQ(st.st_uid, uid) << dir;
        EXPECT_EQ(st.st_gid, gid) << dir;
        EXPECT_EQ(st.st_mode & 07777, 0750u) << dir;
    }

    // The unit: verify is clean now that its binary and man pages are installed, and it is
    // enabled (deb-systemd-helper works without a running systemd).
    for (const char* installed : {kUnit, "/lib/systemd/system/splicegate-archive.service"}) {
        Cmd verify = run({"/usr/bin/systemd-analyze", "verify", installed});
        EXPECT_TRUE(verify.ok()) << installed << ": " << verify.why();
        EXPECT_EQ(trim(verify.result.out + verify.result.err), "")
            << installed << ": " << verify.why();
    }
    EXPECT_TRUE(exists("/etc/systemd/system/multi-user.target.wants/splicegate.service"));

    // The pipe allowance drop-in was applied at once.
    EXPECT_EQ(readKnob(kPipeKnob).value_or("?"), "524288");

    // ---- Cmd the installed daemon with the installed config and relay bytes through it.
    const Unit unit = readUnit(kUnit);
    if (systemdRunning) {
        Cmd active = run({"/usr/bin/systemctl", "is-active", "splicegate"});
        EXPECT_EQ(trim(active.result.out), "active") << active.why();
        EchoServer upstream(kUpstreamPort);
        ASSERT_TRUE(waitListening(kRelayPort, true, deadlineIn(milliseconds(10000))));
        int error = 0;
        UniqueFd client = connectTcp(kRelayPort, error);
        ASSERT_TRUE(client) << std::strerror(error);
        DuplexResult transfer = duplex(client.get(), 7, 1 << 20, deadlineIn(milliseconds(30000)));
        EXPECT_TRUE(transfer.sent.ok() && transfer.received.ok());
        EXPECT_EQ(transfer.received.sha256, transfer.sent.sha256);
        Cmd reload = run({"/usr/bin/systemctl", "reload", "splicegate"});
        EXPECT_TRUE(reload.ok()) << reload.why();
        Cmd stop = run({"/usr/bin/systemctl", "stop", "splicegate"});
        EXPECT_TRUE(stop.ok()) << stop.why();
    } else {
        std::string netError;
        ASSERT_TRUE(enterPrivateNetwork(netError)) << netError;
        EchoServer upstream(kUpstreamPort);
        std::string traceFile = work_.path() + "/strace.log";
        EmulatedService service(unit, traceFile);
        Daemon& daemon = service.process();
        ASSERT_TRUE(daemon.waitReady(kRelayPort)) << daemon.why();
        ASSERT_TRUE(waitForLog(daemon, "admin socket ", milliseconds(10000))) << daemon.why();
        ASSERT_TRUE(waitListening(kMetricsPort, true, deadlineIn(milliseconds(5000))))
            << daemon.why();
        pid_t pid = service.daemonPid();
        ASSERT_GT(pid, 0);

        // Identity and privileges as the unit gives them.
        auto proc = procStatus(pid);
        EXPECT_EQ(splitWords(proc["Uid"]).at(0), std::to_string(uid)) << proc["Uid"];
        EXPECT_EQ(proc["NoNewPrivs"], "1");
        // The default configuration has no XDP: the daemon drops what only the edge filter
        // needs (CAP_NET_ADMIN, CAP_BPF, CAP_PERFMON) once it has started.
        uint64_t wanted = capMask(splitWords(unit.last("AmbientCapabilities"))) &
                          ~capMask({"CAP_NET_ADMIN", "CAP_BPF", "CAP_PERFMON"});
        EXPECT_EQ(std::stoull(proc["CapEff"], nullptr, 16), wanted) << proc["CapEff"];
        EXPECT_EQ(std::stoull(proc["CapAmb"], nullptr, 16), wanted) << proc["CapAmb"];
        EXPECT_EQ(std::stoull(proc["CapBnd"], nullptr, 16),
                  capMask(splitWords(unit.last("CapabilityBoundingSet"))))
            << proc["CapBnd"];

        // Bytes both ways through the example route, compared by hash.
        {
            int error = 0;
            UniqueFd client = connectTcp(kRelayPort, error);
            ASSERT_TRUE(client) << std::strerror(error) << "\n" << daemon.why();
            DuplexResult transfer =
                duplex(client.get(), 7, 1 << 20, deadlineIn(milliseconds(30000)));
            EXPECT_TRUE(transfer.sent.ok()) << transfer.sent.describe();
            EXPECT_TRUE(transfer.received.ok()) << transfer.received.describe();
            EXPECT_EQ(transfer.received.bytes, uint64_t{1} << 20);
            EXPECT_EQ(transfer.received.sha256, transfer.sent.sha256);
        }

        // The admin socket: 0660, group splicegate; usable by root and by a group member.
        struct stat st {};
        ASSERT_EQ(::stat(kAdminSocket, &st), 0) << daemon.why();
        EXPECT_TRUE(S_ISSOCK(st.st_mode));
        EXPECT_EQ(st.st_mode & 0777, 0660u);
        EXPECT_EQ(st.st_gid, gid);
        Cmd ctl = run({"/usr/bin/splicegatectl", "status"});
        EXPECT_TRUE(ctl.ok()) << ctl.why();
        Cmd ctlMember = run({"/usr/bin/setpriv", "--reuid=splicegate", "--regid=splicegate",
                             "--init-groups", "--", "/usr/bin/splicegatectl", "--json", "version"});
        EXPECT_TRUE(ctlMember.ok()) << ctlMember.why();

        // Prometheus.
        std::string metrics = httpGet(kMetricsPort, "/metrics");
        EXPECT_NE(metrics.find("splicegate_build_info"), std::string::npos) << metrics.substr(0, 500);

        // The audit log of that connection, in the state directory, readable by the tool.
        std::string listing;
        static const std::regex closed(R"("c2u_bytes"\s*:\s*1048576[^}]*"state"\s*:\s*"closed")");
        for (auto deadline = deadlineIn(milliseconds(10000)); Clock::now() < deadline;) {
            listing = run({"/usr/bin/splicegate-audit", "list", kAuditDir, "--json"}).result.out;
            if (std::regex_search(listing, closed)) break;
            std::this_thread::sleep_for(100ms);
        }
        EXPECT_TRUE(std::regex_search(listing, closed)) << listing;

        // SIGHUP (splicegatectl reload; the unit's ExecReload= is an upgrade) keeps it running. (Signals go to the daemon's pid: the Daemon
        // object's pid is strace's.)
        // (The reload is awaited by its log line: under strace and a loaded machine it can take
        // longer than any fixed pause.)
        ASSERT_EQ(::kill(pid, SIGHUP), 0);
        EXPECT_TRUE(waitForLog(daemon, "configuration reloaded", milliseconds(10000)))
            << daemon.why();
        EXPECT_TRUE(daemon.running()) << daemon.why();

        // KillSignal=SIGTERM drains and exits 0 within TimeoutStopSec.
        ASSERT_EQ(::kill(pid, SIGTERM), 0);
        auto exit = daemon.waitExit(milliseconds(60000));
        ASSERT_TRUE(exit.has_value()) << daemon.why();
        EXPECT_TRUE(exit->isExit(0)) << exit->describe() << "\n" << daemon.why();
        std::cout << "warnings of the daemon under the emulated unit:\n";
        for (const auto& line : grepLines(daemon.log(), " warn ")) std::cout << "  " << line << "\n";
        for (const auto& line : grepLines(daemon.log(), "emulation:")) std::cout << "  " << line << "\n";

        // Everything the daemon wrote is the service user's, not world-accessible (UMask).
        Cmd verifyAudit = run({"/usr/bin/splicegate-audit", "verify", kAuditDir});
        EXPECT_TRUE(verifyAudit.ok()) << verifyAudit.why();
        for (const auto& entry : fs::recursive_directory_iterator(kStateDir)) {
            struct stat fileStat {};
            ASSERT_EQ(::lstat(entry.path().c_str(), &fileStat), 0);
            EXPECT_EQ(fileStat.st_uid, uid) << entry.path();
            EXPECT_EQ(fileStat.st_mode & 0007, 0u) << entry.path() << " is world-accessible";
        }

        // SystemCallFilter=: every system call the daemon made is one the unit allows.
        std::set<std::string> used;
        std::string refused = refusedSyscalls(unit, traceFile, used);
        EXPECT_TRUE(refused.empty()) << "the unit's SystemCallFilter would refuse:" << refused;
        std::string all;
        for (const auto& name : used) all += " " + name;
        std::cout << used.size() << " system calls used by the daemon:" << all << "\n";
        fs::remove_all(kRunDir);  // systemd removes RuntimeDirectory= when the service stops

        // The XDP edge filter under the unit's capabilities and filter, on a veth pair of this
        // private network namespace (the shipped config has no interface: it is added on the
        // command line, which the unit's ExecStart= would take from a drop-in).
        Cmd veth = shell("ip link add sg-pkg0 type veth peer name sg-pkg1 && "
                         "ip link set sg-pkg0 up && ip link set sg-pkg1 up");
        ASSERT_TRUE(veth.ok()) << veth.why();
        std::string xdpTrace = work_.path() + "/strace-xdp.log";
        EmulatedService xdpService(unit, xdpTrace,
                                   " --xdp-interface sg-pkg0 --xdp-mode generic --metrics-listen ''");
        Daemon& xdpDaemon = xdpService.process();
        ASSERT_TRUE(xdpDaemon.waitReady(kRelayPort)) << xdpDaemon.why();
        ASSERT_TRUE(waitForLog(xdpDaemon, "admin socket ", milliseconds(10000))) << xdpDaemon.why();
        pid_t xdpPid = xdpService.daemonPid();
        ASSERT_GT(xdpPid, 0);
        EXPECT_FALSE(grepLines(xdpDaemon.log(), "edge filter attached").empty())
            << xdpDaemon.why();
        Cmd add = run({"/usr/bin/splicegatectl", "xdp", "add", "198.51.100.0/24"});
        EXPECT_TRUE(add.ok()) << add.why();
        Cmd list = run({"/usr/bin/splicegatectl", "xdp", "list"});
        EXPECT_NE(list.result.out.find("198.51.100.0/24"), std::string::npos) << list.why();

        // kill -9, then the restart Restart=on-failure makes: the kernel dropped the daemon's
        // bpf_link with it, so the restart (without CAP_SYS_ADMIN it could not even open a
        // program left behind) finds the interface clear and attaches.
        ASSERT_EQ(::kill(xdpPid, SIGKILL), 0);
        ASSERT_TRUE(xdpDaemon.waitExit(milliseconds(10000)).has_value()) << xdpDaemon.why();
        Cmd cleared = run({"/usr/sbin/ip", "link", "show", "dev", "sg-pkg0"});
        EXPECT_EQ(cleared.result.out.find("xdp"), std::string::npos)
            << "a killed daemon left its program on the interface:\n" << cleared.result.out;
        EmulatedService restarted(unit, work_.path() + "/strace-xdp-restart.log",
                                  " --xdp-interface sg-pkg0 --xdp-mode generic --metrics-listen ''");
        Daemon& restartedDaemon = restarted.process();
        ASSERT_TRUE(restartedDaemon.waitReady(kRelayPort)) << restartedDaemon.why();
        ASSERT_TRUE(waitForLog(restartedDaemon, "admin socket ", milliseconds(10000)))
            << restartedDaemon.why();
        EXPECT_FALSE(grepLines(restartedDaemon.log(), "edge filter attached").empty())
            << restartedDaemon.why();
        Cmd attached = run({"/usr/sbin/ip", "link", "show", "dev", "sg-pkg0"});
        EXPECT_NE(attached.result.out.find("xdpgeneric"), std::string::npos) << attached.result.out;
        pid_t restartedPid = restarted.daemonPid();
        ASSERT_GT(restartedPid, 0);
        ASSERT_EQ(::kill(restartedPid, SIGTERM), 0);
        auto xdpExit = restartedDaemon.waitExit(milliseconds(60000));
        ASSERT_TRUE(xdpExit.has_value()) << restartedDaemon.why();
        EXPECT_TRUE(xdpExit->isExit(0)) << xdpExit->describe() << "\n" << restartedDaemon.why();
        std::set<std::string> xdpUsed;
        std::string xdpRefused = refusedSyscalls(unit, xdpTrace, xdpUsed);
        EXPECT_TRUE(xdpRefused.empty())
            << "with XDP, the unit's SystemCallFilter would refuse:" << xdpRefused;
        std::string extra;
        for (const auto& name : xdpUsed)
            if (!used.count(name)) extra += " " + name;
        std::cout << "with XDP, " << xdpUsed.size() << " system calls; beyond the run above:" << extra
                  << "\n";
        fs::remove_all(kRunDir);
    }

    // ---- Upgrade to a newer version, with a locally modified conffile.
    {
        std::ofstream conf(kConf, std::ios::app);
        conf << "# local change kept across upgrades (PackageTest)\n";
    }
    Cmd upgrade = dpkg({"--install", nextDeb});
    ASSERT_TRUE(upgrade.ok()) << upgrade.why();
    EXPECT_TRUE(grepLines(upgrade.result.out + upgrade.result.err, "warning").empty())
        << upgrade.why();
    Cmd version = run({"/usr/bin/dpkg-query", "-W", "-f=${Version}", "splicegate"});
    EXPECT_EQ(trim(version.result.out), nextVersion);
    EXPECT_NE(readFile(kConf).find("local change kept across upgrades"), std::string::npos);
    for (const char* suffix : {".dpkg-new", ".dpkg-dist", ".dpkg-old"})
        EXPECT_FALSE(exists(std::string(kConf) + suffix)) << suffix;
    EXPECT_EQ(run({"/usr/bin/id", "-u", "splicegate"}).result.out, std::to_string(uid) + "\n");
    EXPECT_TRUE(exists(kAuditDir)) << "an upgrade must keep the audit logs";

    // ---- Remove: the program goes, configuration and state stay.
    Cmd remove = dpkg({"--remove", "splicegate"});
    ASSERT_TRUE(remove.ok()) << remove.why();
    EXPECT_EQ(dpkgStatus(), "deinstall ok config-files");
    EXPECT_FALSE(exists("/usr/sbin/splicegate"));
    EXPECT_FALSE(exists(kUnit));
    EXPECT_TRUE(exists(kConf));
    EXPECT_TRUE(exists(kStateDir));
    if (guard.pipeAllowance() == std::string("16384")) {
        EXPECT_EQ(readKnob(kPipeKnob).value_or("?"), "16384") << "postrm did not reset the allowance";
    }

    // ---- Purge: nothing left but the user and group (Debian policy: never delete accounts).
    Cmd purge = dpkg({"--purge", "splicegate"});
    ASSERT_TRUE(purge.ok()) << purge.why();
    EXPECT_TRUE(grepLines(purge.result.out + purge.result.err, "warning").empty()) << purge.why();
    EXPECT_EQ(dpkgStatus(), "");
    for (const char* path : {"/etc/splicegate", kStateDir, kRunDir,
                             "/etc/systemd/system/multi-user.target.wants/splicegate.service"})
        EXPECT_FALSE(exists(path)) << path << " left after purge";
    EXPECT_TRUE(userExists("splicegate")) << "purge must keep the system user (Debian policy)";
    EXPECT_TRUE(userExists("splicegate-archive")) << "purge must keep the archiver's user";

    // The machine as before: the guard removes the account the package made and restores the
    // sysctl; then the whole file tree is compared with the snapshot.
    guard.restore();
    auto left = strays(before, snapshot());
    std::string report;
    for (const auto& entry : left) report += "\n  " + entry;
    EXPECT_TRUE(left.empty()) << "the file tree differs from before the install:" << report;
}

}  // namespace
}  // namespace splicegate::test
