#pragma once
// The daemon's hold on the XDP edge filter: attaches it when --xdp-interface is set, applies the
// configured rules (and their difference on reload) and the admin's xdp list/add/del.
// Thread-safe: the main thread (reload), the admin thread and metrics scrapes all call it.
#include <memory>
#include <optional>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "relay/Config.h"
#include "relay/EdgeRulePlan.h"
#include "splicegate/handoff.pb.h"
#include "xdp/EdgeFilter.h"
#include "xdp/edge_filter_shared.h"

namespace splicegate {

class EdgeControl {
public:
    // An upgrade's running daemon's filter (relay/Handoff.h): its link and the rules its admin
    // added.
    struct Handed {
        handoff::Xdp described;
        UniqueFd link;
    };
    // Attaches when config.xdpInterface is set; throws std::system_error naming the interface.
    // With `handed` on the same interface, the rules of the config and those the running
    // daemon's admin added are loaded, then this program replaces the running one on its link.
    explicit EdgeControl(const Config& config, std::optional<Handed> handed = std::nullopt);
    bool enabled() const noexcept { return filter_ != nullptr; }

    // Throws UsageError, with nothing changed, when applyConfig(config) could not complete:
    // a malformed prefix, or more rules of one kind than the filter's maps hold.
    void checkConfig(const Config& config) const;
    // SIGHUP / admin reload: rules the old config had and the new one lacks are removed, new
    // ones added (rules added through the admin stay); listen ports and SYN limits follow.
    void applyConfig(const Config& config);
    // Admin: `xdp add` denies a prefix, `xdp del` removes a deny (or allow) prefix. Throw
    // UsageError naming a malformed CIDR; `remove` returns false when no such rule exists.
    std::string addDeny(const std::string& cidrText);
    bool remove(const std::string& cidrText, std::string& normalized);
    std::vector<std::pair<std::string, std::string>> rules() const;  // {cidr, "deny"|"allow"}
    std::map<std::pair<std::string, std::string>, std::uint64_t> packetCounts() const;

    // The running side of an upgrade. The Xdp message (nullopt without a filter) and the link
    // to attach to it; after a failed upgrade, this program back on the link; after a
    // successful one, the link left to the new process (closed, not detached: the filter stays).
    std::optional<handoff::Message> handoffMessage() const;
    int linkFd() const;
    void upgradeFailed() noexcept;
    void handedOver() noexcept;

private:
    static constexpr std::size_t kRulesPerSet = SG_MAX_RULES_PER_TRIE;
    EdgeRulePlan planLocked(const Config& config) const;

    mutable std::mutex mutex_;
    std::unique_ptr<EdgeFilter> filter_;
    bool handedOver_ = false;
    std::set<std::string> configDeny_;
    std::set<std::string> configAllow_;
};

}  // namespace splicegate
