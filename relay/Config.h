#pragma once
// The daemon's configuration: docs/configuration.md, from the command line and the INI file
// named by --config (command line wins), plus [route.NAME] sections.
// Error contract: every bad input throws UsageError with one line that names the option, key,
// file or value at fault. Thread affinity: none (plain values).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/Log.h"
#include "common/SocketAddress.h"

namespace splicegate {

enum class AuditDurability { Strict, Batch, None };
enum class AuditOnError { FailClosed, FailOpen };
// How audited bytes reach the disk: direct = O_DIRECT from registered buffers; splice = into the
// page cache.
enum class AuditWriterKind { Direct, Splice };
enum class SpliceEngine { Chain, Inline };
enum class XdpMode { Native, Generic, Auto };
// How flows move bytes: auto starts in the buffer lane and moves to splice while reads stay large.
enum class Lane { Auto, Splice, Buffer };

struct UpstreamConfig {
    std::string text;                      // as configured, e.g. "backend.local:443"
    std::vector<SocketAddress> addresses;  // resolved when the config is loaded
    // Set when the name did not resolve at load: not a configuration error (DNS may answer
    // later); the upstream counts as down and the name is retried (UpstreamPool).
    std::string resolveError;
};

struct RouteConfig {
    std::string name;  // "default" for --listen/--upstream
    SocketAddress listen;
    std::vector<UpstreamConfig> upstreams;  // round robin; next one on connect failure
    bool audit = true;
    uint32_t healthCheckIntervalMs = 0;  // active TCP checks of the upstreams; 0 = off

    friend bool operator==(const RouteConfig& a, const RouteConfig& b) noexcept;
};

struct Config {
    std::string configFile;  // empty: none
    std::vector<RouteConfig> routes;
    unsigned workers = 0;  // 0 = one per CPU (resolved by the caller)
    std::string adminSocket = "/run/splicegate/admin.sock";
    std::string adminGroup = "splicegate";
    std::string metricsListen = "127.0.0.1:9464";
    std::string auditDir = "/var/lib/splicegate/audit";
    AuditDurability auditDurability = AuditDurability::Batch;
    uint32_t auditFsyncIntervalMs = 50;
    AuditOnError auditOnError = AuditOnError::FailClosed;
    uint64_t auditRetentionBytes = 0;
    uint64_t auditRetentionHours = 0;
    // Splice until the direct writer keeps fail-closed on a full disk (its index records are
    // booked after the data is durable and can still be lost: issue 12, audit/FORMAT.md).
    AuditWriterKind auditWriter = AuditWriterKind::Direct;
    uint64_t auditBufferBytes = 67108864;  // per worker
    std::string auditGroup;                // empty: the daemon's group
    std::string auditHmacKeyFile;          // empty: hash chain without a key
    std::string adminReadonlyGroup;        // empty: none
    bool accessLog = true;
    std::optional<SpliceEngine> spliceEngine;  // unset: the default chosen by measurement
    uint64_t pipeSize = 1048576;
    uint64_t pipeBudgetBytes = 0;  // extension: cap on all pipes' capacity; 0 = system's limit
    uint64_t maxConnections = 65536;
    uint32_t connectTimeoutMs = 5000;
    // A direction whose sender has gone (EOF) while its receiver takes nothing: closed after this
    // long without progress, whatever the idle timeout says.
    uint32_t halfClosedTimeoutMs = 60000;
    uint32_t idleTimeoutMs = 3600000;  // 1 h, as Envoy's TCP proxy: half-open peers do not pile up
    uint32_t drainTimeoutMs = 30000;
    uint64_t maxConnectionsPerSource = 0;  // per client address; 0 = no limit
    Lane lane = Lane::Auto;
    uint32_t bufferRingEntries = 4096;  // power of two (io_uring buffer rings require it)
    uint32_t bufferSize = 16384;
    bool sqpoll = false;
    // Sockets start in the kernel's delayed-ACK ("pingpong") mode: the ACK of a request rides on
    // the reply instead of costing a packet of its own (docs/kernel-notes.md).
    bool delayedAck = true;
    // TCP_CONGESTION of the client and upstream sockets; empty: the system's default. A
    // congestion control that paces (bbr) arms a timer per burst (docs/kernel-notes.md §20).
    std::string clientCongestion;
    std::string upstreamCongestion;
    std::string xdpInterface;
    XdpMode xdpMode = XdpMode::Auto;
    std::vector<std::string> xdpDeny;   // validated CIDR text
    std::vector<std::string> xdpAllow;  // validated CIDR text
    uint32_t xdpSynRate = 0;
    uint32_t xdpSynBurst = 0;
    uint32_t xdpSynPrefixV4 = 24;         // sources in one /N share a SYN bucket
    uint32_t xdpSynPrefixV6 = 64;         // likewise
    uint32_t xdpSynNewSourceRate = 1000;  // SYNs/s of prefixes without a bucket; 0 = no bound
    uint32_t xdpSynNewSourceBurst = 0;    // 0 = xdpSynNewSourceRate
    LogLevel logLevel = LogLevel::Info;
};

struct CommandLine {
    // CheckConfig: --check-config, check `config` and exit without binding anything.
    enum class Action { Run, Help, Version, CheckConfig };
    Action action = Action::Run;
    std::string helpText;  // filled for Action::Help
    Config config;
};

// Parses argv (argv[0] is the program name) and the --config file it names.
// Throws UsageError (exit code 2 for the caller) on any bad input.
CommandLine parseCommandLine(int argc, const char* const* argv);

// Same, for SIGHUP: re-reads the config file named in `args` (argv without argv[0]).
Config loadConfig(const std::vector<std::string>& args);

// The options whose value differs between the running and the reloaded configuration but that
// take effect only at the next start (everything except the routes, log-level and the XDP
// rules and SYN limit, which a reload applies), by option name.
std::vector<std::string> settingsNeedingRestart(const Config& running, const Config& next);

// The worker threads the daemon runs: --workers, or one per CPU for 0.
unsigned workerThreads(const Config& config) noexcept;

const char* toString(SpliceEngine engine) noexcept;
const char* toString(AuditDurability durability) noexcept;
const char* toString(Lane lane) noexcept;
const char* toString(AuditWriterKind writer) noexcept;

}  // namespace splicegate
