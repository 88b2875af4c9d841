#pragma once
// RAII attachment of an XDP program to a network interface (netlink XDP, not a bpf_link, so a
// program left behind by a crashed daemon stays attached and keeps filtering until we replace it).
//
// Attaching: a program of ours (recognised by its kernel name, SG_XDP_PROG_NAME) already on the
// interface is replaced atomically (XDP_FLAGS_REPLACE with its fd) when it sits in the mode we
// attach in; in the other mode it is detached first, since the kernel does not allow native and
// generic programs at once. A foreign program is never touched: attaching fails instead.
// Auto mode tries native, then generic. Detaching (destructor) removes the program only if it is
// still ours (XDP_FLAGS_REPLACE with our fd), so a program someone attached since stays.
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
};

}  // namespace splicegate
