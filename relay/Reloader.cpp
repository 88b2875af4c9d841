#include "relay/Reloader.h"

#include "common/Error.h"
#include "common/Log.h"
#include "relay/ConfigCheck.h"

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
        // A route's own congestion control must exist here before anything changes.
        if (auto problems = congestionControlProblems(result.config); !problems.empty())
            throw UsageError(joinNames(problems));
        edge_.checkConfig(result.config);  // the filter's maps must hold the new rules
        relay_.reload(result.config);      // binds first; throws with nothing changed
        edge_.applyConfig(result.config);
        setLogLevel(result.config.logLevel);
        // running_ keeps the start's values: the settings compared here never change until a
        // restart, and what a reload does apply is not compared.
        result.restartNeeded = settingsNeedingRestart(running_, result.config);
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
