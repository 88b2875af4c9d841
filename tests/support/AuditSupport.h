#pragma once
// Helpers for the audit integration tests (tests/integration/Audit*Test.cpp):
// - the `splicegate-audit` binary driven as a process (list --json parsed, extract to a file,
//   verify) through runTool(), so the tests exercise the shipped tool and not only the
//   in-process reader;
// - "expected streams": what one direction of a test connection must carry (an optional 16-byte
//   StreamHeader followed by PatternStream(seed)), with a prefix check for files (an extracted
//   audit stream) and a checking receiver that records when each byte arrived (a timeline), so
//   crash tests can bound what an audit may miss;
// - "checked duplex" connections (client and upstream handler) built on those;
// - the `splicegate-failpoints` daemon (env SPLICEGATE_FAILPOINTS) through ScopedEnv, a small
//   tmpfs mount that is always unmounted, and a /dev/shm scratch directory for extracts.
// Thread affinity: none, except ScopedEnv and TmpfsMount (test main thread, while no other thread
// reads the environment or could be forked). Error contract: process spawn failures throw
// std::system_error; everything else reports in its result.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/Daemon.h"
#include "tests/support/Sockets.h"
#include "tests/support/TestServer.h"

namespace splicegate::test {

// Like runProcess() (tests/support/Daemon.h) but with posix_spawn (no page-table copy of a big
// test process, which makes fork cost ~20 ms here) and output captured in memfds; for the many
// short `splicegate-audit` runs. Killed after `timeout` (then status is empty).
ProcessResult runTool(const std::vector<std::string>& argv, milliseconds timeout = milliseconds(30000));

std::string auditToolBinary();   // SPLICEGATE_BIN_DIR "/splicegate-audit"
std::string failpointsBinary();  // SPLICEGATE_BIN_DIR "/splicegate-failpoints"

// One row of `splicegate-audit list DIR --json`.
struct AuditRow {
    uint64_t id = 0;
    std::string route;
    std::string client;
    std::string upstream;
    std::string via;  // empty when null
    std::string sni;  // empty when null
    bool closed = false;  // "closed" is not null
    uint64_t c2u = 0;
    uint64_t u2c = 0;
    std::string state;   // open | closed | truncated
    std::string reason;  // empty when null
    bool headDeleted = false;  // "opened" is null: retention deleted its first segments
};

struct AuditListing {
    ProcessResult process;
    std::vector<AuditRow> rows;
    std::string parseError;  // empty when every row parsed
    bool ok() const { return process.status && process.status->isExit(0) && parseError.empty(); }
    const AuditRow* find(uint64_t id) const;
    std::string describe() const;  // exit status, stderr, parse error
};
AuditListing auditList(const std::string& dir);

// `splicegate-audit verify DIR`.
ProcessResult auditVerify(const std::string& dir, milliseconds timeout = milliseconds(30000));
std::string describeProcess(const ProcessResult& result, std::size_t maxChars = 4000);
// Whether `splicegate-audit verify DIR` exits 0; the failure shows its output.
::testing::AssertionResult auditVerifies(const std::string& dir);

// SIGTERM, then whether the daemon drained and exited 0 within `timeout`; the failure says why.
::testing::AssertionResult terminatesCleanly(Daemon& daemon,
                                             milliseconds timeout = milliseconds(10000));

// `splicegate-audit extract DIR --connection ID --direction c2u|u2c -o outPath`.
struct Extracted {
    ProcessResult process;
    std::string path;
    uint64_t size = 0;  // of the output file (0 if missing)
    bool ok() const { return process.status && process.status->isExit(0); }
};
Extracted auditExtract(const std::string& dir, uint64_t id, const std::string& direction,
                       const std::string& outPath);

// SHA-256 (hex) of a file from byte `skip` on; empty string if it cannot be read.
std::string fileSha256(const std::string& path, uint64_t skip = 0);

// The port of "127.0.0.1:PORT" / "[::1]:PORT" (0 when it does not parse).
uint16_t portOf(const std::string& address);

// What one direction of a test connection must carry: `header` (if any) then PatternStream(seed).
struct ExpectedStream {
    std::optional<StreamHeader> header;
    uint64_t seed = 0;
};
// The first `size` bytes of the expected stream.
std::string expectedBytes(const ExpectedStream& stream, uint64_t size);
// Whether the whole file equals the first fileSize bytes of `stream` (a prefix of it). The
// failure names the first differing offset.
::testing::AssertionResult fileIsPrefixOf(const std::string& path, const ExpectedStream& stream);

// Arrival times of a received stream: after each recv, (time, bytes so far).
struct Timeline {
    std::vector<std::pair<Clock::time_point, uint64_t>> points;
    // When byte number `index` (0-based) arrived; nullopt if it never did.
    std::optional<Clock::time_point> arrivalOf(uint64_t index) const;
};

// A receiver that checks every byte against an expected stream while it reads.
struct CheckedReceive {
    uint64_t bytes = 0;
    bool matches = true;            // every received byte equals the expected stream
    uint64_t firstMismatch = 0;     // valid when !matches
    bool eof = false;
    int error = 0;
    bool timedOut = false;
    Timeline timeline;
    std::string describe() const;
};
// Receives until EOF, an error, the deadline or `limit` bytes, checking each byte against
// `expected`.
CheckedReceive receiveChecked(int fd, const ExpectedStream& expected, Deadline deadline,
                              uint64_t limit = UINT64_MAX);

// A "checked duplex" connection (the duplex protocol of tests/support/Traffic.h, both ends
// checking every byte and recording arrival times). The client connects, sends StreamHeader
// {id, u2cSize}, then streams c2uSize bytes of PatternStream(c2uSeed(id)) (SHUT_WR at the end
// unless the options say otherwise) while receiving u2c; the upstream reads the header and
// streams u2cSize bytes of PatternStream(u2cSeed(id)) while receiving c2u.
struct CheckedUpstreamSide {
    StreamHeader header;
    Clock::time_point headerAt;
    CheckedReceive c2u;  // after the header
    StreamResult u2cSent;
    // Bytes of the c2u stream (header included) received, and when byte i of it arrived.
    uint64_t c2uStreamBytes() const { return 16 + c2u.bytes; }
    std::optional<Clock::time_point> c2uArrival(uint64_t i) const {
        return i < 16 ? std::optional<Clock::time_point>(headerAt) : c2u.timeline.arrivalOf(i - 16);
    }
};
using CheckedBoard = ResultBoard<uint64_t, CheckedUpstreamSide>;
// What the upstream saw so far, by client id (a snapshot of the board).
std::map<uint64_t, CheckedUpstreamSide> upstreamResults(const CheckedBoard& board);
// The upstream stops receiving after `c2uLimit` payload bytes (a runaway relay cannot make a
// test read forever).
TestServer::Handler checkedUpstream(std::shared_ptr<CheckedBoard> board, milliseconds timeout,
                                    SendOptions u2cOptions = {}, uint64_t c2uLimit = 1ULL << 30);

// A test client whose stream opens with StreamHeader {id, u2cSize}, and what its opening saw.
struct HeaderedClient {
    uint64_t id = 0;
    uint64_t c2uSize = 0;
    uint64_t u2cSize = 0;
    uint16_t port = 0;  // local port, as the audit log's client address shows it
    int connectError = 0;
    int headerError = 0;
};
// Connects to the relay and sends the client's header; an invalid fd when either failed (the
// client then holds the error).
UniqueFd connectAndSendHeader(uint16_t relayPort, HeaderedClient& client, Deadline deadline);

struct CheckedClient : HeaderedClient {
    StreamResult c2uSent;  // header not included
    CheckedReceive u2c;
    // Sent and received everything, byte-exact, EOF seen.
    bool complete() const {
        return connectError == 0 && headerError == 0 && c2uSent.ok() && c2uSent.bytes == c2uSize &&
               u2c.matches && u2c.eof && u2c.error == 0 && u2c.bytes == u2cSize;
    }
    std::string describe() const;
};
CheckedClient makeCheckedClient(uint64_t id, uint64_t c2uSize, uint64_t u2cSize);
// The client stops receiving 1 MiB past u2cSize (more than expected is already a failure).
void runCheckedClient(uint16_t relayPort, CheckedClient& client, milliseconds timeout,
                      SendOptions c2uOptions = {});
// Runs every client on its own thread and waits for all.
void runCheckedClients(uint16_t relayPort, std::vector<CheckedClient>& clients, milliseconds timeout,
                       SendOptions c2uOptions = {});
// Waits (bounded) until every connection the server accepted has finished its handler.
bool waitHandlersDone(const TestServer& server, milliseconds timeout);

// The c2u stream a checked client sends (header then pattern), and the u2c stream it receives.
ExpectedStream c2uStreamOf(const CheckedClient& client);
ExpectedStream u2cStreamOf(const CheckedClient& client);

// A private directory in /dev/shm (tmpfs; /tmp when that is missing), removed with its content:
// where extracted streams go, so that hundreds of MiB of extracts do not add dirty pages (and
// writeback throttling) to the disk that holds the audit log under test.
class ScratchDir {
public:
    ScratchDir();
    ScratchDir(const ScratchDir&) = delete;
    ScratchDir& operator=(const ScratchDir&) = delete;
    ~ScratchDir();
    const std::string& path() const noexcept { return path_; }

private:
    std::string path_;
};

// Sets an environment variable for the life of the object (restoring the old value).
class ScopedEnv {
public:
    ScopedEnv(std::string name, const std::string& value);
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;
    ~ScopedEnv();

private:
    std::string name_;
    std::optional<std::string> old_;
};

// A tmpfs of `bytes` mounted at `path` (created if missing); unmounted (lazily if busy) by the
// destructor. The first one in a process first moves the process into a private mount
// namespace when it can (unshare(CLONE_NEWNS) needs a single-threaded process), so a crashed
// test leaves no mount behind. ok() is false (and error() says why) when the mount failed.
class TmpfsMount {
public:
    TmpfsMount(std::string path, uint64_t bytes);
    TmpfsMount(const TmpfsMount&) = delete;
    TmpfsMount& operator=(const TmpfsMount&) = delete;
    ~TmpfsMount();
    bool ok() const noexcept { return mounted_; }
    const std::string& error() const noexcept { return error_; }
    const std::string& path() const noexcept { return path_; }
    // Free bytes (statvfs).
    uint64_t freeBytes() const;

private:
    std::string path_;
    bool mounted_ = false;
    std::string error_;
};

// Writes `bytes` of a file at `path` (real blocks, not a hole); returns bytes written (less when
// the filesystem filled up).
uint64_t writeFiller(const std::string& path, uint64_t bytes);

}  // namespace splicegate::test
