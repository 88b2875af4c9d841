#include "relay/EdgeControl.h"

#include "common/Error.h"
#include "common/Log.h"

namespace splicegate {
namespace {
XdpAttachMode attachMode(XdpMode mode) {
    switch (mode) {
        case XdpMode::Native: return XdpAttachMode::Native;
        case XdpMode::Generic: return XdpAttachMode::Generic;
        case XdpMode::Auto: break;
    }
    return XdpAttachMode::Auto;
}

std::vector<std::uint16_t> listenPorts(const Config& config) {
    std::vector<std::uint16_t> ports;
    for (const auto& route : config.routes)
        ports.push_back(static_cast<std::uint16_t>(route.listen.port()));
    return ports;
}

SynLimit synLimit(const Config& config) {
    SynLimit limit;
    limit.rate = config.xdp.synRate;
    limit.burst = config.xdp.synBurst;
    limit.prefixV4 = config.xdp.synPrefixV4;
    limit.prefixV6 = config.xdp.synPrefixV6;
    limit.newSourceRate = config.xdp.synNewSourceRate;
    limit.newSourceBurst = config.xdp.synNewSourceBurst;
    return limit;
}

std::vector<Cidr> parseAll(const std::vector<std::string>& texts) {
    std::vector<Cidr> cidrs;
    for (const auto& text : texts) cidrs.push_back(Cidr::parseOrThrow(text));
    return cidrs;
}

}  // namespace

EdgeControl::EdgeControl(const Config& config, std::optional<Handed> handed) {
    if (config.xdp.interface.empty()) return;
    EdgeFilterOptions options;
    options.interface = config.xdp.interface;
    options.mode = attachMode(config.xdp.mode);
    options.listenPorts = listenPorts(config);
    options.synLimit = synLimit(config);
    options.deny = parseAll(config.xdp.deny);
    options.allow = parseAll(config.xdp.allow);
    UniqueFd link;
    XdpAttachMode handedMode = XdpAttachMode::Auto;
    if (handed && handed->described.interface() == config.xdp.interface) {
        link = std::move(handed->link);
        handedMode = parseXdpAttachMode(handed->described.mode()).value_or(XdpAttachMode::Auto);
        // What the running daemon's admin denied goes on being denied.
        for (const auto& text : handed->described.admin_deny())
            if (auto cidr = Cidr::parse(text)) options.deny.push_back(*cidr);
    }
    filter_ = std::make_unique<EdgeFilter>(options, std::move(link), handedMode);
    configDeny_.insert(config.xdp.deny.begin(), config.xdp.deny.end());
    configAllow_.insert(config.xdp.allow.begin(), config.xdp.allow.end());
    logInfo("xdp: edge filter attached to ", config.xdp.interface, " (", filter_->attachedMode(),
            " mode), ", configDeny_.size(), " deny and ", configAllow_.size(), " allow prefixes");
}

EdgeRulePlan EdgeControl::planLocked(const Config& config) const {
    std::set<std::string> deny(config.xdp.deny.begin(), config.xdp.deny.end());
    std::set<std::string> allow(config.xdp.allow.begin(), config.xdp.allow.end());
    auto plan = EdgeRulePlan::make(filter_->rules(), configDeny_, configAllow_, deny, allow);
    if (auto problem = plan.overflow(kRulesPerSet)) throw UsageError(*problem);
    return plan;
}

void EdgeControl::checkConfig(const Config& config) const {
    std::lock_guard lock(mutex_);
    if (filter_) planLocked(config);
}

void EdgeControl::applyConfig(const Config& config) {
    std::lock_guard lock(mutex_);
    if (!filter_) {
        if (!config.xdp.interface.empty())
            logWarn("xdp: --xdp-interface takes effect at the next start, not on reload");
        return;
    }
    auto plan = planLocked(config);
    for (const auto& cidr : plan.removeDeny) filter_->removeDeny(cidr);
    for (const auto& cidr : plan.addDeny) filter_->addDeny(cidr);
    for (const auto& cidr : plan.removeAllow) filter_->removeAllow(cidr);
    for (const auto& cidr : plan.addAllow) filter_->addAllow(cidr);
    configDeny_ = {config.xdp.deny.begin(), config.xdp.deny.end()};
    configAllow_ = {config.xdp.allow.begin(), config.xdp.allow.end()};
    filter_->setListenPorts(listenPorts(config));
    filter_->setSynLimit(synLimit(config));
}

std::string EdgeControl::addDeny(const std::string& cidrText) {
    auto cidr = Cidr::parseOrThrow(cidrText);
    std::lock_guard lock(mutex_);
    filter_->addDeny(cidr);
    logInfo("xdp: deny ", cidr.text(), " added by the admin");
    return cidr.text();
}

bool EdgeControl::remove(const std::string& cidrText, std::string& normalized) {
    auto cidr = Cidr::parseOrThrow(cidrText);
    normalized = cidr.text();
    std::lock_guard lock(mutex_);
    bool removed = filter_->removeDeny(cidr);
    removed = filter_->removeAllow(cidr) || removed;
    if (removed) logInfo("xdp: rule ", normalized, " deleted by the admin");
    return removed;
}

std::vector<std::pair<std::string, std::string>> EdgeControl::rules() const {
    std::lock_guard lock(mutex_);
    std::vector<std::pair<std::string, std::string>> out;
    if (!filter_) return out;
    for (const auto& [cidr, allow] : filter_->rules())
        out.emplace_back(cidr.text(), allow ? "allow" : "deny");
    return out;
}

std::optional<handoff::Message> EdgeControl::handoffMessage() const {
    std::lock_guard lock(mutex_);
    if (!filter_ || handedOver_) return std::nullopt;
    handoff::Message message;
    auto& xdp = *message.mutable_xdp();
    xdp.set_interface(filter_->interface());
    xdp.set_mode(filter_->attachedMode());
    xdp.set_program_id(filter_->programId());
    std::set<std::string> fromConfig;
    for (const auto& text : configDeny_)
        if (auto cidr = Cidr::parse(text)) fromConfig.insert(cidr->text());
    for (const auto& [cidr, allow] : filter_->rules())
        if (!allow && fromConfig.count(cidr.text()) == 0) xdp.add_admin_deny(cidr.text());
    return message;
}

int EdgeControl::linkFd() const {
    std::lock_guard lock(mutex_);
    return filter_ ? filter_->linkFd() : -1;
}

void EdgeControl::upgradeFailed() noexcept {
    std::lock_guard lock(mutex_);
    if (!filter_ || handedOver_) return;
    // The failed process may have put its program on the link before it failed; its maps go
    // with it, so this process's own program (and rules) must run again.
    if (int rc = filter_->restoreProgram(); rc < 0)
        logError("xdp: putting this process's program back on ", filter_->interface(),
                 "'s link after the failed upgrade: ", errnoText(rc));
}

void EdgeControl::handedOver() noexcept {
    std::lock_guard lock(mutex_);
    if (!filter_ || handedOver_) return;
    handedOver_ = true;
    filter_->releaseLink();
    logInfo("xdp: the edge filter's link on ", filter_->interface(),
            " is the new process's now; its program and counters are");
}

std::map<std::pair<std::string, std::string>, std::uint64_t> EdgeControl::packetCounts() const {
    std::lock_guard lock(mutex_);
    if (!filter_) return {};
    return filter_->packetCounts();
}

}  // namespace splicegate
