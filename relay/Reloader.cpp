#include "relay/Reloader.h"

#include "common/Log.h"

namespace splicegate {

std::string joinNames(const std::vector<std::string>& names) {
    std::string out;
    for (std::size_t i = 0; i < names.size(); ++i) {
        if (i > 0) out += i + 1 == names.size() ? " and " : ", ";
        out += names[i];
    }
    return out;
}

ReloadResult Reloader::reload(std::string_view requester) {
    std::lock_guard lock(mutex_);
    try {
        ReloadResult result{loadConfig(args_), {}};
        relay_.reload(result.config);  // binds first; throws with nothing changed
        edge_.applyConfig(result.config);
        setLogLevel(result.config.logLevel);
        result.restartNeeded = settingsNeedingRestart(running_, result.config);
        // What is not applied stays as it runs, so the next reload compares against that.
        auto routes = result.config.routes;
        auto logLevel = result.config.logLevel;
        auto deny = result.config.xdpDeny, allow = result.config.xdpAllow;
        auto synRate = result.config.xdpSynRate, synBurst = result.config.xdpSynBurst;
        running_.routes = std::move(routes);
        running_.logLevel = logLevel;
        running_.xdpDeny = std::move(deny);
        running_.xdpAllow = std::move(allow);
        running_.xdpSynRate = synRate;
        running_.xdpSynBurst = synBurst;
        if (metrics_) metrics_->recordReload(true);
        logInfo("configuration reloaded (", requester, ") from ", result.config.configFile, ": ",
                result.config.routes.size(), " routes",
                result.restartNeeded.empty()
                    ? std::string()
                    : "; takes effect at the next start: " + joinNames(result.restartNeeded));
        return result;
    } catch (const std::exception& error) {
        if (metrics_) metrics_->recordReload(false);
        logError("reload (", requester,
                 ") failed, keeping the running configuration: ", error.what());
        throw;
    }
}

}  // namespace splicegate
