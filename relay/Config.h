#pragma once
// The daemon's configuration: docs/configuration.md, from the command line and the INI file
// named by --config (command line wins), plus [route.NAME] sections.
// Error contract: every bad input throws UsageError with one line that names the option, key,
// file or value at fault. Thread affinity: none (plain values).
#include <cstdint>
#include <string>
#include <vector>

#include "admin/AdminOptions.h"
#include "common/Error.h"
#include "audit/AuditOptions.h"
#include "common/Log.h"
#include "common/SocketAddress.h"
#include "datapath/DatapathOptions.h"
#include "metrics/MetricsOptions.h"
#include "relay/RelayOptions.h"
#include "relay/RouteSettings.h"
#include "xdp/Cidr.h"
#include "xdp/XdpOptions.h"

namespace splicegate {

struct UpstreamConfig {
    std::string text;                      // the address as configured, e.g. "backend.local:443"
    std::vector<SocketAddress> addresses;  // resolved when the config is loaded
    // Set when the name did not resolve at load: not a configuration error (DNS may answer
    // later); the upstream counts as down and the name is retried (UpstreamPool).
    std::string resolveError;
    unsigned weight = 1;  // `weight=N`: its share of the route's connections
    bool backup = false;  // `backup`: used only while no other upstream is up
};

// A route's PROXY protocol setting: proxy-protocol-in accepts off, v1, v2 or any;
// proxy-protocol-out sends off, v1 or v2.
enum class ProxyProtocolMode : std::uint8_t { Off, V1, V2, Any };

struct RouteConfig {
    std::string name;  // "default" for --listen/--upstream
    SocketAddress listen;
    std::vector<UpstreamConfig> upstreams;  // weighted round robin; next one on connect failure
    bool audit = true;
    uint32_t healthCheckIntervalMs = 0;  // active TCP checks of the upstreams; 0 = off
    RouteOverrides overrides;            // the route's own values of global relay settings
    // Server names (lower case; exact, or "*.suffix" for one more label) that choose this route
    // among the routes sharing its listen address; empty: the address's route for any other
    // name and for ClientHellos without one.
    std::vector<std::string> sni;
    // Connections from `proxyTrusted` start with a PROXY header in these versions (Off: none).
    // Routes sharing a listen address agree on both (the header comes before the ClientHello).
    ProxyProtocolMode proxyIn = ProxyProtocolMode::Off;
    std::vector<Cidr> proxyTrusted;
    ProxyProtocolMode proxyOut = ProxyProtocolMode::Off;  // never Any

    friend bool operator==(const RouteConfig& a, const RouteConfig& b) noexcept;
};

// Each module declares its own options and settings (audit/AuditOptions.h,
// datapath/DatapathOptions.h, relay/RelayOptions.h, admin/AdminOptions.h,
// metrics/MetricsOptions.h, xdp/XdpOptions.h); the configuration composes them.
struct Config {
    std::string configFile;  // empty: none
    std::vector<RouteConfig> routes;
    unsigned workers = 0;  // 0 = one per CPU (resolved by the caller)
    LogLevel logLevel = LogLevel::Info;
    AdminSettings admin;
    MetricsSettings metrics;
    AuditSettings audit;
    DatapathSettings datapath;
    RelaySettings relay;
    XdpSettings xdp;
};

struct CommandLine {
    // CheckConfig: --check-config, check `config` and exit without binding anything.
    enum class Action { Run, Help, Version, CheckConfig };
    Action action = Action::Run;
    std::string helpText;  // filled for Action::Help
    Config config;
};

// Every problem of a configuration (one line each, those of the file naming file, line and key).
// what() joins them with "; " for a one-line answer (a reload's); the daemon prints one per line.
class ConfigErrors : public UsageError {
  public:
    explicit ConfigErrors(std::vector<std::string> problems);
    const std::vector<std::string>& problems() const noexcept { return problems_; }

  private:
    std::vector<std::string> problems_;
};

// Parses argv (argv[0] is the program name) and the --config file it names.
// Throws UsageError (exit code 2 for the caller) on bad command-line syntax, ConfigErrors for
// every problem of the values and the file.
CommandLine parseCommandLine(int argc, const char* const* argv);

// Same, for SIGHUP: re-reads the config file named in `args` (argv without argv[0]).
Config loadConfig(const std::vector<std::string>& args);

// The options whose value differs between the running and the reloaded configuration but that
// take effect only at the next start (everything except the routes, log-level and the XDP
// rules and SYN limit, which a reload applies), by option name.
std::vector<std::string> settingsNeedingRestart(const Config& running, const Config& next);

// The worker threads the daemon runs: --workers, or one per CPU for 0.
unsigned workerThreads(const Config& config) noexcept;

}  // namespace splicegate
