#pragma once
// RAII attachment of an XDP program to a network interface through a bpf_link: the kernel
// detaches the program when the last reference to the link goes, so a daemon that crashes or is
// killed with -9 never leaves its filter behind, and a restart under the packaged unit's
// capabilities (no CAP_SYS_ADMIN, so no opening other programs by id) finds a clear interface.
// The price: between a crash and the restart the interface is unfiltered (RestartSec=).
//
// Attaching: a program attached through netlink (an earlier splicegate version's, which outlived
// its daemon) is recognised by its kernel name, SG_XDP_PROG_NAME, and detached first, since a
// link cannot replace a netlink attachment. A foreign program is never touched: attaching fails
// instead, as it does while another process holds a link on the interface.
// Auto mode tries native, then generic.
//
// Thread affinity: none; not synchronised (owned by one EdgeFilter). Move-only.
// Error contract: the constructor throws std::system_error naming the interface and the mode;
// the destructor logs and never throws.
#include <optional>
#include <string>
#include <string_view>

#include "common/UniqueFd.h"

namespace splicegate {

enum class XdpAttachMode { Native, Generic, Auto };

const char* xdpAttachModeName(XdpAttachMode mode) noexcept;  // "native", "generic", "auto"
std::optional<XdpAttachMode> parseXdpAttachMode(std::string_view text) noexcept;

class XdpAttachment {
  public:
    XdpAttachment() noexcept = default;
    // `programFd` is duplicated; the caller keeps its own.
    XdpAttachment(const std::string& interface, int programFd, XdpAttachMode mode);
    XdpAttachment(XdpAttachment&& other) noexcept;
    XdpAttachment& operator=(XdpAttachment&& other) noexcept;
    XdpAttachment(const XdpAttachment&) = delete;
    XdpAttachment& operator=(const XdpAttachment&) = delete;
    ~XdpAttachment();

    // An upgrade (relay/Handoff.h): takes over the running daemon's link on `interface` (the fd
    // it handed over) and replaces the program on it with `programFd` at once
    // (bpf_link_update: the interface is never without a filter, nor with two). `mode`: the
    // mode the link was made in. Throws std::system_error naming the interface when `link` is
    // not an XDP link on it or the update fails (the old program then stays). An adopted link is
    // never detached, only closed: while the old process lives (this start failed) it is its
    // link, which it puts its own program back on; once the old one is gone this process holds
    // the last reference, whose close detaches it.
    static XdpAttachment adopt(const std::string& interface, UniqueFd link, int programFd,
                               XdpAttachMode mode);
    // The link, for an upgrade's hand-off.
    int linkFd() const noexcept { return link_.get(); }
    // Puts this attachment's own program back on its link (an upgrade's new process had
    // replaced it, then failed). 0 or -errno.
    int restoreProgram() noexcept;
    // The link is another process's now (an upgrade's new one): closed without being detached.
    void release() noexcept;

    // The interface's index; throws std::system_error "xdp-interface NAME: no such interface".
    static unsigned interfaceIndex(const std::string& interface);

    bool attached() const noexcept { return ifindex_ != 0; }
    const std::string& interface() const noexcept { return interface_; }
    unsigned ifindex() const noexcept { return ifindex_; }
    // Native or Generic once attached.
    XdpAttachMode mode() const noexcept { return mode_; }
    void detach() noexcept;

  private:
    std::string interface_;
    unsigned ifindex_ = 0;
    XdpAttachMode mode_ = XdpAttachMode::Auto;
    UniqueFd program_;
    UniqueFd link_;
    bool adopted_ = false;
};

}  // namespace splicegate
