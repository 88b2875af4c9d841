#pragma once
// `splicegate --check-config`: what can be known of a parsed configuration without starting:
// the audit directory is usable, the key file readable, the groups and the XDP interface exist,
// the admin socket can be created, the listen ports may be bound, the congestion controls may
// be set, the audit buffers can be mapped, upstream names resolve. Read-only: it binds nothing
// and creates or changes no file (a running daemon may hold the audit directory).
// A real start runs the same check, with the same capabilities (dropEdgeFilterCapabilities
// first in both), before its first side effect: whatever --check-config accepts, the daemon
// starts with, and each problem is exit 2 with one line in both.
#include <optional>
#include <string>
#include <vector>

#include "relay/Config.h"

namespace splicegate {

struct ConfigCheckReport {
    std::vector<std::string> problems;  // each one line; any makes the check fail (exit 2)
    std::vector<std::string> warnings;  // not fatal (e.g. a name DNS does not answer yet)
};

ConfigCheckReport checkConfiguration(const Config& config);

// --client-tcp-congestion and --upstream-tcp-congestion name algorithms this kernel has and lets
// this process set: one line per one that it does not. Checked at start too (a configuration
// error, exit 2), so that no listener is bound with a setting that every connection would miss.
std::vector<std::string> congestionControlProblems(const Config& config);

// A warning when the config file at `path` is writable by every user; nullopt otherwise.
std::optional<std::string> looseConfigFile(const std::string& path);

}  // namespace splicegate
