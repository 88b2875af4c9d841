#pragma once
// The daemon's XDP edge filter: the BPF program (EdgeFilterProgram) attached to one interface
// (XdpAttachment) for the filter's lifetime. docs/configuration.md: --xdp-interface, --xdp-mode,
// --xdp-deny,
// --xdp-allow, --xdp-syn-rate, --xdp-syn-burst, --xdp-syn-prefix-v4, --xdp-syn-prefix-v6,
// --xdp-syn-new-source-rate, --xdp-syn-new-source-burst; counters feed
// splicegate_xdp_packets_total{action,reason}.
//
// Verdicts, in order (xdp/README.md has the table): broken Ethernet, VLAN or IP headers -> the
// malformed verdict; source in a deny prefix -> drop; broken TCP header -> the malformed verdict;
// SYN (without ACK) to a listen port over its source prefix's bucket -> drop (syn_rate), or from a
// prefix without a bucket while the shared new-source budget is spent -> drop (syn_new_source);
// an allow prefix overrides these drops (counted as reason "allow"); everything else passes.
// Non-IP frames pass.
// Reasons: no_match, not_ip, not_tcp, fragment, malformed, deny, syn_rate, syn_new_source, allow.
//
// Thread affinity: all members are thread-safe (the admin, reload and metrics paths may call
// concurrently). Move-only (a moved-from filter may only be destroyed or assigned to);
// destruction detaches the program from the interface.
// Error contract: the constructor throws std::system_error naming the interface and the mode
// ("xdp-interface eth9: no such interface", "xdp-interface lo: cannot attach in native mode");
// setters throw std::system_error and leave the previous state on failure.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "xdp/Cidr.h"
#include "xdp/EdgeFilterProgram.h"
#include "xdp/XdpAttachment.h"

namespace splicegate {

struct EdgeFilterOptions {
    std::string interface;
    XdpAttachMode mode = XdpAttachMode::Auto;
    std::vector<std::uint16_t> listenPorts;  // the relay's listeners: the SYN limit applies there
    SynLimit synLimit;                       // rate 0 (the default) = no SYN limit
    bool dropMalformed = true;               // verdict for truncated or inconsistent headers
    // Rules installed before the program is attached, so it never runs without them.
    std::vector<Cidr> deny;
    std::vector<Cidr> allow;
};

class EdgeFilter {
  public:
    // `handedLink`: an upgrade's running daemon's link on options.interface (made in
    // `handedMode`): this filter's program replaces the one on it instead of attaching anew
    // (XdpAttachment::adopt).
    explicit EdgeFilter(const EdgeFilterOptions& options, UniqueFd handedLink = {},
                        XdpAttachMode handedMode = XdpAttachMode::Auto);
    EdgeFilter(EdgeFilter&&) noexcept = default;
    EdgeFilter& operator=(EdgeFilter&&) noexcept = default;
    ~EdgeFilter();

    // Adds are idempotent; removes return false when the rule was not there.
    void addDeny(const Cidr& cidr) { program_->addDeny(cidr); }
    bool removeDeny(const Cidr& cidr) { return program_->removeDeny(cidr); }
    void addAllow(const Cidr& cidr) { program_->addAllow(cidr); }
    bool removeAllow(const Cidr& cidr) { return program_->removeAllow(cidr); }
    // Deny rules then allow rules, each sorted; second = true for allow.
    std::vector<std::pair<Cidr, bool>> rules() const { return program_->rules(); }

    // On reload.
    void setListenPorts(const std::vector<std::uint16_t>& ports) {
        program_->setListenPorts(ports);
    }
    void setSynLimit(const SynLimit& limit) { program_->setSynLimit(limit); }
    void setDropMalformed(bool drop) { program_->setDropMalformed(drop); }

    // {action, reason} -> packets since load, summed over CPUs; every possible pair is present.
    XdpPacketCounts packetCounts() const { return program_->packetCounts(); }

    const char* attachedMode() const noexcept { return xdpAttachModeName(attachment_.mode()); }
    const std::string& interface() const noexcept { return attachment_.interface(); }
    unsigned ifindex() const noexcept { return attachment_.ifindex(); }
    std::uint32_t programId() const { return program_->programId(); }

    // An upgrade's hand-off (XdpAttachment): the link, the program put back after a failed
    // one, the link given up after a successful one.
    int linkFd() const noexcept { return attachment_.linkFd(); }
    int restoreProgram() noexcept { return attachment_.restoreProgram(); }
    void releaseLink() noexcept { attachment_.release(); }

  private:
    // Declared first, destroyed last: the attachment goes before the program's maps.
    std::unique_ptr<EdgeFilterProgram> program_;
    XdpAttachment attachment_;
};

}  // namespace splicegate
