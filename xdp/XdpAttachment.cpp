#include "xdp/XdpAttachment.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <linux/if_link.h>
#include <net/if.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "common/Error.h"
#include "common/Log.h"
#include "xdp/edge_filter_shared.h"

namespace splicegate {
namespace {

std::uint32_t modeFlag(XdpAttachMode mode) noexcept {
    return mode == XdpAttachMode::Native ? XDP_FLAGS_DRV_MODE : XDP_FLAGS_SKB_MODE;
}

// A program found on the interface in one mode.
struct Resident {
    unsigned id = 0;
    UniqueFd fd;
    std::string name;
    bool ours() const { return id != 0 && fd.valid() && name == SG_XDP_PROG_NAME; }
};

Resident inspect(unsigned id) {
    Resident resident;
    resident.id = id;
    if (id == 0) return resident;
    int fd = bpf_prog_get_fd_by_id(id);
    if (fd < 0) {
        resident.name = "unknown: " + errnoText(fd);
        return resident;
    }
    resident.fd.reset(fd);
    bpf_prog_info info{};
    __u32 length = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &length) == 0) resident.name = info.name;
    return resident;
}

std::string prefix(const std::string& interface) {
    return "xdp-interface " + interface;
}

}  // namespace

const char* xdpAttachModeName(XdpAttachMode mode) noexcept {
    switch (mode) {
        case XdpAttachMode::Native:
            return "native";
        case XdpAttachMode::Generic:
            return "generic";
        case XdpAttachMode::Auto:
            return "auto";
    }
    return "?";
}

std::optional<XdpAttachMode> parseXdpAttachMode(std::string_view text) noexcept {
    if (text == "native") return XdpAttachMode::Native;
    if (text == "generic") return XdpAttachMode::Generic;
    if (text == "auto") return XdpAttachMode::Auto;
    return std::nullopt;
}

unsigned XdpAttachment::interfaceIndex(const std::string& interface) {
    if (interface.empty() || interface.size() >= IFNAMSIZ)
        throw std::system_error(EINVAL, std::system_category(),
                                prefix(interface) + ": not a valid interface name");
    unsigned index = if_nametoindex(interface.c_str());
    if (index == 0)
        throw std::system_error(errno == 0 ? ENODEV : errno, std::system_category(),
                                prefix(interface) + ": no such interface");
    return index;
}

XdpAttachment::XdpAttachment(const std::string& interface, int programFd, XdpAttachMode mode)
    : interface_(interface) {
    const unsigned ifindex = interfaceIndex(interface);
    program_.reset(checkSys(fcntl(programFd, F_DUPFD_CLOEXEC, 3), "xdp: dup of the program fd"));

    bpf_xdp_query_opts query{};
    query.sz = sizeof(query);
    if (int err = bpf_xdp_query(static_cast<int>(ifindex), 0, &query); err < 0)
        throwErrno(-err, prefix(interface) + ": querying its XDP programs");
    Resident native = inspect(query.drv_prog_id);
    Resident generic = inspect(query.skb_prog_id);
    for (auto* resident : {&native, &generic}) {
        if (resident->id != 0 && !resident->ours())
            throw std::system_error(
                EBUSY, std::system_category(),
                concat(prefix(interface), ": another XDP program ('", resident->name, "', id ",
                       resident->id, ") is attached in ",
                       resident == &native ? "native" : "generic", " mode; not replacing it"));
    }

    std::vector<XdpAttachMode> candidates;
    if (mode == XdpAttachMode::Auto)
        candidates = {XdpAttachMode::Native, XdpAttachMode::Generic};
    else
        candidates = {mode};

    // A bpf_link cannot replace a program attached through netlink, and the kernel refuses
    // native and generic programs at once (EEXIST), so a stale program of ours left by an
    // earlier version (netlink-attached, it outlived its daemon) goes first: not atomic, but
    // this daemon's own programs never outlive it.
    for (auto* resident : {&native, &generic}) {
        if (!resident->ours()) continue;
        const XdpAttachMode residentMode =
            resident == &native ? XdpAttachMode::Native : XdpAttachMode::Generic;
        bpf_xdp_attach_opts detachOptions{};
        detachOptions.sz = sizeof(detachOptions);
        detachOptions.old_prog_fd = resident->fd.get();
        int err = bpf_xdp_detach(static_cast<int>(ifindex),
                                 modeFlag(residentMode) | XDP_FLAGS_REPLACE, &detachOptions);
        if (err == -EBUSY)
            throw std::system_error(
                EBUSY, std::system_category(),
                concat(prefix(interface), ": an edge filter (id ", resident->id,
                       ") held by a running process's bpf_link is attached in ",
                       xdpAttachModeName(residentMode), " mode; is another splicegate running?"));
        logWarn(prefix(interface), ": removed a stale edge filter (id ", resident->id, ") in ",
                xdpAttachModeName(residentMode), " mode",
                err < 0 ? concat(" (detach failed: ", errnoText(err), ")") : std::string());
    }

    int lastError = 0;
    std::string failures;
    for (XdpAttachMode candidate : candidates) {
        bpf_link_create_opts options{};
        options.sz = sizeof(options);
        options.flags = modeFlag(candidate);
        int fd = bpf_link_create(program_.get(), static_cast<int>(ifindex), BPF_XDP, &options);
        if (fd >= 0) {
            link_.reset(fd);
            ifindex_ = ifindex;
            mode_ = candidate;
            logInfo(prefix(interface), ": edge filter attached in ", xdpAttachModeName(candidate),
                    " mode");
            return;
        }
        lastError = -fd;
        if (!failures.empty()) failures += ", ";
        failures += concat(xdpAttachModeName(candidate), ": ", errnoText(fd));
        if (mode == XdpAttachMode::Auto && candidate == XdpAttachMode::Native)
            logInfo(prefix(interface), ": native XDP unavailable (", errnoText(fd),
                    "), trying generic mode");
    }
    if (mode == XdpAttachMode::Auto)
        throw std::system_error(
            lastError, std::system_category(),
            prefix(interface) + ": cannot attach in native or generic mode (" + failures + ")");
    throw std::system_error(
        lastError, std::system_category(),
        concat(prefix(interface), ": cannot attach in ", xdpAttachModeName(mode), " mode"));
}

XdpAttachment XdpAttachment::adopt(const std::string& interface, UniqueFd link, int programFd,
                                    XdpAttachMode mode) {
    const unsigned ifindex = interfaceIndex(interface);
    bpf_link_info info{};
    __u32 length = sizeof(info);
    if (int err = bpf_obj_get_info_by_fd(link.get(), &info, &length); err < 0)
        throwErrno(-err, prefix(interface) + ": the running daemon's link");
    if (info.type != BPF_LINK_TYPE_XDP || info.xdp.ifindex != ifindex)
        throw std::system_error(EINVAL, std::system_category(),
                                prefix(interface) + ": the running daemon's link is not an XDP "
                                                    "link on this interface");
    XdpAttachment attachment;
    attachment.program_.reset(
        checkSys(fcntl(programFd, F_DUPFD_CLOEXEC, 3), "xdp: dup of the program fd"));
    // Replaces whatever program the link runs (no BPF_F_REPLACE: the old process's program fd
    // is not ours to name); the swap is one pointer in the kernel.
    if (int err = bpf_link_update(link.get(), attachment.program_.get(), nullptr); err < 0)
        throwErrno(-err, prefix(interface) + ": replacing the running daemon's program on its link");
    attachment.interface_ = interface;
    attachment.ifindex_ = ifindex;
    attachment.mode_ = mode;
    attachment.link_ = std::move(link);
    attachment.adopted_ = true;
    logInfo(prefix(interface), ": took over the edge filter's link from the running daemon (",
            xdpAttachModeName(mode), " mode, link id ", info.id, "); this process's program runs "
            "on it now");
    return attachment;
}

int XdpAttachment::restoreProgram() noexcept {
    if (ifindex_ == 0) return -ENOLINK;
    return bpf_link_update(link_.get(), program_.get(), nullptr);
}

void XdpAttachment::release() noexcept {
    ifindex_ = 0;
    link_.reset();
    program_.reset();
}

XdpAttachment::XdpAttachment(XdpAttachment&& other) noexcept
    : interface_(std::move(other.interface_)),
      ifindex_(std::exchange(other.ifindex_, 0)),
      mode_(other.mode_),
      program_(std::move(other.program_)),
      link_(std::move(other.link_)),
      adopted_(other.adopted_) {}

XdpAttachment& XdpAttachment::operator=(XdpAttachment&& other) noexcept {
    if (this != &other) {
        detach();
        interface_ = std::move(other.interface_);
        ifindex_ = std::exchange(other.ifindex_, 0);
        mode_ = other.mode_;
        program_ = std::move(other.program_);
        link_ = std::move(other.link_);
        adopted_ = other.adopted_;
    }
    return *this;
}

XdpAttachment::~XdpAttachment() {
    detach();
}

void XdpAttachment::detach() noexcept {
    if (ifindex_ == 0) return;
    if (adopted_) {
        // Maybe still the running daemon's link (this start failed): only our reference goes.
        logInfo(prefix(interface_), ": closed the edge filter's link taken over at the upgrade "
                                    "(it detaches with its last holder)");
        release();
        return;
    }
    // Detaching the link (rather than only closing our fd) also covers a copy of the fd that a
    // child process might hold. ENOLINK: the interface went away and took the link with it.
    int err = bpf_link_detach(link_.get());
    if (err == 0)
        logInfo(prefix(interface_), ": edge filter detached");
    else if (err == -ENOLINK)
        logInfo(prefix(interface_), ": edge filter was already detached (interface gone)");
    else
        logWarn(prefix(interface_), ": detaching the edge filter failed: ", errnoText(err),
                "; it goes when the daemon exits");
    ifindex_ = 0;
    link_.reset();
    program_.reset();
}

}  // namespace splicegate
