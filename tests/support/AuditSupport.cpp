#include "tests/support/AuditSupport.h"

#include <arpa/inet.h>
#include <sched.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <sstream>
#include <system_error>
#include <thread>
#include <vector>

#include "tests/support/PatternStream.h"
#include "tests/support/Sha256.h"
#include "tests/support/Traffic.h"

namespace splicegate::test {
namespace {

void encodeHeader(const StreamHeader& header, uint8_t* bytes) {
    for (int i = 0; i < 8; ++i) {
        bytes[i] = static_cast<uint8_t>(header.id >> (8 * i));
        bytes[8 + i] = static_cast<uint8_t>(header.size >> (8 * i));
    }
}

// Produces the bytes of an ExpectedStream in order.
class ExpectedGenerator {
public:
    explicit ExpectedGenerator(const ExpectedStream& stream) : pattern_(stream.seed) {
        if (stream.header) {
            encodeHeader(*stream.header, header_);
            headerLeft_ = 16;
        }
    }
    void fill(uint8_t* out, std::size_t size) {
        while (size > 0 && headerLeft_ > 0) {
            *out++ = header_[16 - headerLeft_];
            --headerLeft_;
            --size;
        }
        if (size > 0) pattern_.fill(out, size);
    }

private:
    uint8_t header_[16]{};
    unsigned headerLeft_ = 0;
    PatternStream pattern_;
};

// Value text of "key": in one JSON object line; nullopt when absent. Strings are unescaped
// (\" \\ \/ \n \t \uXXXX below 0x80); `isNull` is set for null.
std::optional<std::string> jsonField(const std::string& line, const std::string& key, bool& isNull,
                                     bool& isString) {
    isNull = false;
    isString = false;
    std::string needle = "\"" + key + "\": ";
    auto at = line.find(needle);
    if (at == std::string::npos) return std::nullopt;
    std::size_t i = at + needle.size();
    if (line.compare(i, 4, "null") == 0) {
        isNull = true;
        return std::string();
    }
    if (i < line.size() && line[i] == '"') {
        isString = true;
        std::string value;
        for (++i; i < line.size() && line[i] != '"'; ++i) {
            if (line[i] != '\\') {
                value += line[i];
                continue;
            }
            if (++i >= line.size()) return std::nullopt;
            switch (line[i]) {
                case 'n': value += '\n'; break;
                case 't': value += '\t'; break;
                case 'r': value += '\r'; break;
                case 'u': {
                    if (i + 4 >= line.size()) return std::nullopt;
                    unsigned code = static_cast<unsigned>(std::stoul(line.substr(i + 1, 4), nullptr, 16));
                    value += code < 0x80 ? static_cast<char>(code) : '?';
                    i += 4;
                    break;
                }
                default: value += line[i]; break;
            }
        }
        if (i >= line.size()) return std::nullopt;
        return value;
    }
    std::size_t end = i;
    while (end < line.size() && line[end] != ',' && line[end] != '}') ++end;
    return line.substr(i, end - i);
}

}  // namespace

ProcessResult runTool(const std::vector<std::string>& argv, milliseconds timeout) {
    ProcessResult result;
    UniqueFd out(::memfd_create("tool-stdout", MFD_CLOEXEC));
    UniqueFd err(::memfd_create("tool-stderr", MFD_CLOEXEC));
    if (!out || !err) throw std::system_error(errno, std::generic_category(), "memfd_create");
    std::vector<char*> cargv;
    for (const auto& arg : argv) cargv.push_back(const_cast<char*>(arg.c_str()));
    cargv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, out.get(), 1);
    posix_spawn_file_actions_adddup2(&actions, err.get(), 2);
    posix_spawn_file_actions_addclosefrom_np(&actions, 3);
    posix_spawnattr_t attributes;
    posix_spawnattr_init(&attributes);
    sigset_t none;
    sigemptyset(&none);
    sigset_t defaults;
    sigemptyset(&defaults);
    for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGCHLD}) sigaddset(&defaults, sig);
    posix_spawnattr_setsigmask(&attributes, &none);
    posix_spawnattr_setsigdefault(&attributes, &defaults);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    pid_t pid = -1;
    int rc = ::posix_spawn(&pid, cargv[0], &actions, &attributes, cargv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
    if (rc != 0) throw std::system_error(rc, std::generic_category(), "posix_spawn " + argv[0]);
    // Bounded wait: poll a pidfd, kill on timeout.
    UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
    Deadline deadline = deadlineIn(timeout);
    bool finished = false;
    while (!finished) {
        int status = 0;
        pid_t r = ::waitpid(pid, &status, WNOHANG);
        if (r == pid) {
            ExitStatus exit;
            if (WIFEXITED(status)) {
                exit.exited = true;
                exit.code = WEXITSTATUS(status);
            } else if (WIFSIGNALED(status)) {
                exit.signal = WTERMSIG(status);
            }
            result.status = exit;
            break;
        }
        if (r < 0 && errno != EINTR) break;
        auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
        if (left <= 0) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, &status, 0);
            break;
        }
        if (pidfd) {
            pollfd p{pidfd.get(), POLLIN, 0};
            ::poll(&p, 1, static_cast<int>(std::min<long>(left, 1000)));
        } else {
            std::this_thread::sleep_for(milliseconds(1));
        }
    }
    auto slurp = [](int fd) {
        std::string text;
        char buffer[65536];
        off_t offset = 0;
        for (;;) {
            ssize_t n = ::pread(fd, buffer, sizeof buffer, offset);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            text.append(buffer, static_cast<std::size_t>(n));
            offset += n;
        }
        return text;
    };
    result.out = slurp(out.get());
    result.err = slurp(err.get());
    return result;
}

std::string auditToolBinary() { return std::string(SPLICEGATE_BIN_DIR) + "/splicegate-audit"; }
std::string failpointsBinary() { return std::string(SPLICEGATE_BIN_DIR) + "/splicegate-failpoints"; }

const AuditRow* AuditListing::find(uint64_t id) const {
    for (const auto& row : rows)
        if (row.id == id) return &row;
    return nullptr;
}

std::string describeProcess(const ProcessResult& result, std::size_t maxChars) {
    std::ostringstream out;
    out << (result.status ? result.status->describe() : std::string("did not finish in time"));
    auto cut = [&](const std::string& text) {
        return text.size() <= maxChars ? text : text.substr(0, maxChars) + "...[cut]";
    };
    if (!result.out.empty()) out << "\n  stdout: " << cut(result.out);
    if (!result.err.empty()) out << "\n  stderr: " << cut(result.err);
    return out.str();
}

std::string AuditListing::describe() const {
    std::string text = "splicegate-audit list: " + describeProcess(process, 2000);
    if (!parseError.empty()) text += "\n  parse error: " + parseError;
    return text;
}

AuditListing auditList(const std::string& dir) {
    AuditListing listing;
    listing.process = runTool({auditToolBinary(), "list", dir, "--json"}, milliseconds(30000));
    std::istringstream in(listing.process.out);
    std::string line;
    while (std::getline(in, line)) {
        auto brace = line.find('{');
        if (brace == std::string::npos) continue;
        AuditRow row;
        bool isNull = false;
        bool isString = false;
        try {
            auto number = [&](const char* key) -> uint64_t {
                auto value = jsonField(line, key, isNull, isString);
                if (!value || isNull || isString) throw std::runtime_error(std::string("no number ") + key);
                return std::stoull(*value);
            };
            auto text = [&](const char* key, bool nullable) -> std::string {
                auto value = jsonField(line, key, isNull, isString);
                if (!value || (isNull && !nullable) || (!isNull && !isString))
                    throw std::runtime_error(std::string("no string ") + key);
                return *value;
            };
            row.id = number("id");
            row.route = text("route", false);
            row.client = text("client", false);
            row.upstream = text("upstream", false);
            row.via = text("via", true);
            row.sni = text("sni", true);
            text("opened", true);
            row.headDeleted = isNull;
            text("closed", true);
            row.closed = !isNull;
            row.c2u = number("c2u_bytes");
            row.u2c = number("u2c_bytes");
            row.state = text("state", false);
            row.reason = text("reason", true);
        } catch (const std::exception& error) {
            if (listing.parseError.empty())
                listing.parseError = std::string(error.what()) + " in line: " + line;
            continue;
        }
        listing.rows.push_back(std::move(row));
    }
    return listing;
}

ProcessResult auditVerify(const std::string& dir, milliseconds timeout) {
    return runTool({auditToolBinary(), "verify", dir}, timeout);
}

::testing::AssertionResult auditVerifies(const std::string& dir) {
    auto verify = auditVerify(dir);
    if (verify.status && verify.status->isExit(0)) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "verify: " << describeProcess(verify);
}

::testing::AssertionResult terminatesCleanly(Daemon& daemon, milliseconds timeout) {
    auto status = daemon.terminate(timeout);
    if (status && status->isExit(0)) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << daemon.why();
}

Extracted auditExtract(const std::string& dir, uint64_t id, const std::string& direction,
                       const std::string& outPath) {
    Extracted result;
    result.path = outPath;
    ::unlink(outPath.c_str());
    result.process = runTool({auditToolBinary(), "extract", dir, "--connection",
                                 std::to_string(id), "--direction", direction, "-o", outPath},
                                milliseconds(30000));
    struct stat st {};
    if (::stat(outPath.c_str(), &st) == 0) result.size = static_cast<uint64_t>(st.st_size);
    return result;
}

std::string fileSha256(const std::string& path, uint64_t skip) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return {};
    Sha256 sha;
    std::vector<uint8_t> buffer(1 << 20);
    off_t offset = static_cast<off_t>(skip);
    for (;;) {
        ssize_t n = ::pread(fd.get(), buffer.data(), buffer.size(), offset);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return {};
        if (n == 0) break;
        sha.update(buffer.data(), static_cast<std::size_t>(n));
        offset += n;
    }
    return sha.finishHex();
}

uint16_t portOf(const std::string& address) {
    auto colon = address.rfind(':');
    if (colon == std::string::npos) return 0;
    try {
        unsigned long port = std::stoul(address.substr(colon + 1));
        return port <= 65535 ? static_cast<uint16_t>(port) : 0;
    } catch (...) {
        return 0;
    }
}

std::string expectedBytes(const ExpectedStream& stream, uint64_t size) {
    std::string bytes(size, '\0');
    ExpectedGenerator generator(stream);
    generator.fill(reinterpret_cast<uint8_t*>(bytes.data()), bytes.size());
    return bytes;
}

::testing::AssertionResult fileIsPrefixOf(const std::string& path, const ExpectedStream& stream) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return ::testing::AssertionFailure() << "cannot open " << path << ": " << std::strerror(errno);
    ExpectedGenerator generator(stream);
    std::vector<uint8_t> got(1 << 20);
    std::vector<uint8_t> want(1 << 20);
    uint64_t offset = 0;
    for (;;) {
        ssize_t n = ::pread(fd.get(), got.data(), got.size(), static_cast<off_t>(offset));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return ::testing::AssertionFailure() << "read " << path << ": " << std::strerror(errno);
        if (n == 0) break;
        auto size = static_cast<std::size_t>(n);
        generator.fill(want.data(), size);
        if (std::memcmp(got.data(), want.data(), size) != 0) {
            std::size_t i = 0;
            while (got[i] == want[i]) ++i;
            return ::testing::AssertionFailure()
                   << path << " differs from the expected stream at byte " << offset + i
                   << " (of at least " << offset + size << ")";
        }
        offset += size;
    }
    return ::testing::AssertionSuccess();
}

std::optional<Clock::time_point> Timeline::arrivalOf(uint64_t index) const {
    auto it = std::upper_bound(points.begin(), points.end(), index,
                               [](uint64_t value, const auto& point) { return value < point.second; });
    if (it == points.end()) return std::nullopt;
    return it->first;
}

std::string CheckedReceive::describe() const {
    std::ostringstream out;
    out << bytes << " B" << (eof ? " then EOF" : "");
    if (error != 0) out << ", error " << std::strerror(error);
    if (timedOut) out << ", timed out";
    if (!matches) out << ", MISMATCH at byte " << firstMismatch;
    return out.str();
}

CheckedReceive receiveChecked(int fd, const ExpectedStream& expected, Deadline deadline,
                              uint64_t limit) {
    ExpectedGenerator generator(expected);
    CheckedReceive result;
    std::vector<uint8_t> want;
    ReceiveEnd end = receiveChunks(
        fd, deadline, limit, [&](const uint8_t* data, std::size_t size, uint64_t offset) {
            if (result.matches) {
                want.resize(size);
                generator.fill(want.data(), size);
                if (std::memcmp(data, want.data(), size) != 0) {
                    std::size_t i = 0;
                    while (data[i] == want[i]) ++i;
                    result.matches = false;
                    result.firstMismatch = offset + i;
                }
            }
            result.timeline.points.emplace_back(Clock::now(), offset + size);
        });
    result.bytes = end.bytes;
    result.eof = end.eof;
    result.error = end.error;
    result.timedOut = end.timedOut;
    return result;
}

TestServer::Handler checkedUpstream(std::shared_ptr<CheckedBoard> board, milliseconds timeout,
                                    SendOptions u2cOptions, uint64_t c2uLimit) {
    return [board, timeout, u2cOptions, c2uLimit](int fd, std::size_t) {
        Deadline deadline = deadlineIn(timeout);
        CheckedUpstreamSide side;
        int error = 0;
        if (!recvHeader(fd, side.header, deadline, error)) return;
        side.headerAt = Clock::now();
        std::thread sender([&] {
            side.u2cSent = sendPattern(fd, u2cSeed(side.header.id), side.header.size, deadline,
                                       u2cOptions);
        });
        side.c2u = receiveChecked(fd, ExpectedStream{std::nullopt, c2uSeed(side.header.id)}, deadline,
                                  c2uLimit);
        sender.join();
        board->put(side.header.id, std::move(side));
    };
}

std::map<uint64_t, CheckedUpstreamSide> upstreamResults(const CheckedBoard& board) {
    std::map<uint64_t, CheckedUpstreamSide> results;
    for (auto& [id, side] : board.snapshot()) results[id] = side;
    return results;
}

std::string CheckedClient::describe() const {
    std::ostringstream out;
    out << "client " << id << " (port " << port << "): ";
    if (connectError != 0) return out.str() + "connect failed: " + std::strerror(connectError);
    if (headerError != 0) return out.str() + "header send failed (" + std::to_string(headerError) + ")";
    out << "c2u sent " << c2uSent.describe() << " of " << c2uSize << "; u2c received "
        << u2c.describe() << " of " << u2cSize;
    return out.str();
}

UniqueFd connectAndSendHeader(uint16_t relayPort, HeaderedClient& client, Deadline deadline) {
    UniqueFd fd = connectTcp(relayPort, client.connectError);
    if (!fd) return fd;
    client.port = localPort(fd.get());
    if (!sendHeader(fd.get(), StreamHeader{client.id, client.u2cSize}, deadline,
                    client.headerError))
        return {};
    return fd;
}

CheckedClient makeCheckedClient(uint64_t id, uint64_t c2uSize, uint64_t u2cSize) {
    CheckedClient client;
    client.id = id;
    client.c2uSize = c2uSize;
    client.u2cSize = u2cSize;
    return client;
}

void runCheckedClient(uint16_t relayPort, CheckedClient& client, milliseconds timeout,
                      SendOptions c2uOptions) {
    Deadline deadline = deadlineIn(timeout);
    UniqueFd fd = connectAndSendHeader(relayPort, client, deadline);
    if (!fd) return;
    std::thread sender([&] {
        client.c2uSent = sendPattern(fd.get(), c2uSeed(client.id), client.c2uSize, deadline, c2uOptions);
    });
    uint64_t limit = client.u2cSize > UINT64_MAX - (1 << 20) ? UINT64_MAX : client.u2cSize + (1 << 20);
    client.u2c = receiveChecked(fd.get(), u2cStreamOf(client), deadline, limit);
    sender.join();
}

void runCheckedClients(uint16_t relayPort, std::vector<CheckedClient>& clients, milliseconds timeout,
                       SendOptions c2uOptions) {
    std::vector<std::thread> threads;
    threads.reserve(clients.size());
    for (auto& client : clients)
        threads.emplace_back([&, c = &client] { runCheckedClient(relayPort, *c, timeout, c2uOptions); });
    for (auto& thread : threads) thread.join();
}

bool waitHandlersDone(const TestServer& server, milliseconds timeout) {
    Deadline deadline = deadlineIn(timeout);
    for (;;) {
        if (server.finishedCount() >= server.acceptedCount()) return true;
        if (Clock::now() >= deadline) return false;
        std::this_thread::sleep_for(milliseconds(2));
    }
}

ExpectedStream c2uStreamOf(const CheckedClient& client) {
    return ExpectedStream{StreamHeader{client.id, client.u2cSize}, c2uSeed(client.id)};
}
ExpectedStream u2cStreamOf(const CheckedClient& client) {
    return ExpectedStream{std::nullopt, u2cSeed(client.id)};
}

ScratchDir::ScratchDir() {
    struct stat st {};
    std::string base = ::stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
    std::string pattern = base + "/splicegate-audit-it-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr)
        throw std::system_error(errno, std::generic_category(), "mkdtemp " + pattern);
    path_ = pattern;
}

ScratchDir::~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
}

ScopedEnv::ScopedEnv(std::string name, const std::string& value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) old_ = old;
    ::setenv(name_.c_str(), value.c_str(), 1);
}

ScopedEnv::~ScopedEnv() {
    if (old_)
        ::setenv(name_.c_str(), old_->c_str(), 1);
    else
        ::unsetenv(name_.c_str());
}

TmpfsMount::TmpfsMount(std::string path, uint64_t bytes) : path_(std::move(path)) {
    if (::mkdir(path_.c_str(), 0750) != 0 && errno != EEXIST) {
        error_ = "mkdir " + path_ + ": " + std::strerror(errno);
        return;
    }
    // Once per process, when still single-threaded: a private mount namespace, so the tmpfs
    // vanishes with the test process even if it dies before the destructor runs (the daemon and
    // the audit tool, started from this process, inherit the namespace). Otherwise the mount is
    // made in the host namespace and only the destructor removes it.
    static const bool privateNamespace = [] {
        if (::unshare(CLONE_NEWNS) != 0) return false;
        return ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
    }();
    (void)privateNamespace;
    std::string options = "size=" + std::to_string(bytes) + ",mode=0750";
    if (::mount("tmpfs", path_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, options.c_str()) != 0) {
        error_ = "mount -t tmpfs -o " + options + " " + path_ + ": " + std::strerror(errno);
        return;
    }
    mounted_ = true;
}

TmpfsMount::~TmpfsMount() {
    if (!mounted_) return;
    if (::umount2(path_.c_str(), 0) != 0) ::umount2(path_.c_str(), MNT_DETACH);
}

uint64_t TmpfsMount::freeBytes() const {
    struct statvfs st {};
    if (::statvfs(path_.c_str(), &st) != 0) return 0;
    return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

uint64_t writeFiller(const std::string& path, uint64_t bytes) {
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640));
    if (!fd) return 0;
    std::vector<char> block(1 << 20, 'F');
    uint64_t done = 0;
    while (done < bytes) {
        std::size_t n = static_cast<std::size_t>(std::min<uint64_t>(block.size(), bytes - done));
        ssize_t w = ::write(fd.get(), block.data(), n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        done += static_cast<uint64_t>(w);
    }
    return done;
}

}  // namespace splicegate::test
