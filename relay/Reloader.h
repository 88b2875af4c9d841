#pragma once
// Configuration reloads from SIGHUP (main thread) and the admin "reload" command, serialised.
// A reload is all or nothing: the file is parsed and checked, every new listener is bound, and
// only then do routes, XDP rules and the log level change; any failure keeps the running
// configuration. Options that take effect only at restart are named. Both outcomes are logged
// and told to the metrics (splicegate_config_last_reload_*).
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "metrics/MetricsExposer.h"
#include "relay/Config.h"
#include "relay/EdgeControl.h"
#include "relay/Relay.h"

namespace splicegate {

struct ReloadResult {
    Config config;
    std::vector<std::string> restartNeeded;  // option names whose change waits for a restart
};

class Reloader {
  public:
    // `args`: the daemon's argv without argv[0]; `running`: the configuration it started with;
    // `metrics` (may be null) is told every outcome.
    Reloader(Relay& relay, EdgeControl& edge, std::vector<std::string> args, Config running,
             MetricsExposer* metrics = nullptr)
        : relay_(relay),
          edge_(edge),
          args_(std::move(args)),
          running_(std::move(running)),
          metrics_(metrics) {}
    // Re-reads the configuration and applies it. `requester` names who asked ("SIGHUP",
    // "admin uid=0 pid=42") in the log line. Throws (UsageError for a bad file, system_error
    // for a listener that cannot be bound) after logging; the running configuration stays.
    ReloadResult reload(std::string_view requester);

  private:
    std::mutex mutex_;
    Relay& relay_;
    EdgeControl& edge_;
    const std::vector<std::string> args_;
    const Config running_;  // as started: settingsNeedingRestart compares against it
    MetricsExposer* metrics_;
};

// "a, b and c" for a log line or an answer.
std::string joinNames(const std::vector<std::string>& names);

}  // namespace splicegate
