#include "relay/RouteSettings.h"

#include <limits>
#include <sstream>

#include "common/Error.h"
#include "common/OptionValues.h"

namespace splicegate {

void parseRouteOverride(std::optional<std::uint32_t>& slot, const std::string& value,
                        const std::string& label, std::uint64_t min) {
    slot = static_cast<std::uint32_t>(
        parseNumber(value, min, std::numeric_limits<std::uint32_t>::max(), label));
}

void parseRouteOverride(std::optional<std::uint64_t>& slot, const std::string& value,
                        const std::string& label, std::uint64_t min) {
    slot = parseNumber(value, min, std::numeric_limits<std::uint64_t>::max(), label);
}

void parseRouteOverride(std::optional<std::string>& slot, const std::string& value,
                        const std::string& label, std::uint64_t /*min*/) {
    slot = checkedCongestionName(value, label);
}

void parseRouteOverride(std::optional<LaneKind>& slot, const std::string& value,
                        const std::string& label, std::uint64_t /*min*/) {
    static constexpr Named<LaneKind> kLanes[] = {
        {"auto", LaneKind::Auto}, {"splice", LaneKind::Splice}, {"buffer", LaneKind::Buffer}};
    slot = parseChoice(kLanes, value, label);
}

RouteSettings effectiveRouteSettings(const RouteOverrides& overrides, const RelaySettings& global) {
    RouteSettings out;
    out.idleTimeoutMs = overrides.idleTimeoutMs.value_or(global.idleTimeoutMs);
    out.halfClosedTimeoutMs = overrides.halfClosedTimeoutMs.value_or(global.halfClosedTimeoutMs);
    out.connectTimeoutMs = overrides.connectTimeoutMs.value_or(global.connectTimeoutMs);
    out.maxConnections = overrides.maxConnections.value_or(0);
    out.ownSourceLimit = overrides.maxConnectionsPerSource.has_value();
    out.maxConnectionsPerSource = overrides.maxConnectionsPerSource.value_or(0);
    out.upstreamCongestion = overrides.upstreamCongestion.value_or(global.upstreamCongestion);
    return out;
}

UpstreamSpec parseUpstreamSpec(const std::string& text, const std::string& label) {
    std::istringstream words(text);
    UpstreamSpec spec;
    words >> spec.address;
    bool weighted = false;
    for (std::string word; words >> word;) {
        if (word == "backup" && !spec.backup) {
            spec.backup = true;
        } else if (word.starts_with("weight=") && !weighted) {
            spec.weight = static_cast<unsigned>(
                parseNumber(word.substr(7), 1, kMaxUpstreamWeight, label + " '" + text + "': weight"));
            weighted = true;
        } else {
            throw UsageError(label + " '" + text + "': unknown or repeated option '" + word +
                             "' (expected HOST:PORT [weight=N] [backup])");
        }
    }
    return spec;
}

}  // namespace splicegate
