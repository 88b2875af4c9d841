#pragma once
// The upgrade hand-off (`splicegatectl upgrade`): the running daemon starts its binary again
// with one end of a SOCK_SEQPACKET socket pair, named by $SPLICEGATE_UPGRADE_FD. Over it the old
// process sends every listening socket it holds (the routes' listeners, the admin socket, the
// metrics listener), each as one Socket message with the fd attached (SCM_RIGHTS), then
// SocketsEnd (before it, with the audit log on, one Audit message with the directory's lock file
// attached: relay/AuditHandover.h; with an upstream in maintenance, one Maintenance message);
// the new process adopts what its configuration still uses
// instead of binding, and
// answers Ready once it serves, or Failed with the reason when its start fails
// (proto/splicegate/handoff.proto).
//
// HandoffChannel: one end of the pair (either process).
// InheritedSockets: the new process's side: the sockets received, taken by what adopts them;
// whatever nobody took is closed with it.
// Thread affinity: one thread each. Error contract: the channel returns -errno or a problem
// text; InheritedSockets::fromEnvironment throws std::runtime_error naming what failed.
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/SocketAddress.h"
#include "common/UniqueFd.h"
#include "splicegate/handoff.pb.h"

namespace splicegate {

inline constexpr const char* kUpgradeFdVariable = "SPLICEGATE_UPGRADE_FD";

class HandoffChannel {
  public:
    explicit HandoffChannel(UniqueFd fd) noexcept : fd_(std::move(fd)) {}

    // One message, with `attached` as its SCM_RIGHTS fd (-1: none). 0 or -errno.
    int send(const handoff::Message& message, int attached = -1);

    struct Received {
        handoff::Message message;
        UniqueFd attached;
    };
    // The next message within `timeout`; nullopt with `problem` set on a timeout, the peer's
    // close ("closed") or an error.
    std::optional<Received> receive(std::chrono::milliseconds timeout, std::string& problem);

    int fd() const noexcept { return fd_.get(); }

  private:
    UniqueFd fd_;
};

class InheritedSockets {
  public:
    // From $SPLICEGATE_UPGRADE_FD (removed from the environment, so nothing the daemon starts
    // sees it); null when this process was not started by an upgrade. Receives every socket.
    static std::unique_ptr<InheritedSockets> fromEnvironment();

    // The route listeners handed over for `address` (none: bind it).
    std::vector<UniqueFd> takeListeners(const SocketAddress& address);
    // The admin socket for `path`, the metrics listener for `address`; invalid when not handed
    // over (a changed path or address: bound anew).
    UniqueFd takeAdmin(const std::string& path);
    UniqueFd takeMetrics(const std::string& address);

    // The running daemon's audit directory hand-off (none: its audit log is off).
    struct Audit {
        handoff::Audit described;
        UniqueFd lock;  // its lock file, the lock held
    };
    std::optional<Audit> takeAudit() { return std::exchange(audit_, std::nullopt); }
    // The running daemon's edge filter link (none: no --xdp-interface).
    struct Xdp {
        handoff::Xdp described;
        UniqueFd link;
    };
    std::optional<Xdp> takeXdp() { return std::exchange(xdp_, std::nullopt); }
    // The upstreams the running daemon had in maintenance (none: empty).
    handoff::Maintenance takeMaintenance() { return std::exchange(maintenance_, {}); }

    // Tells the old process it may stop accepting and drain.
    void ready();
    // Tells it why this start failed (it keeps serving); once, the first reason wins.
    void failed(const std::string& reason);

  private:
    explicit InheritedSockets(UniqueFd fd) : channel_(std::move(fd)) {}
    UniqueFd take(handoff::SocketKind kind, const std::string& address);

    HandoffChannel channel_;
    std::multimap<std::pair<int, std::string>, UniqueFd> sockets_;
    std::optional<Audit> audit_;
    std::optional<Xdp> xdp_;
    handoff::Maintenance maintenance_;
    bool answered_ = false;
};

}  // namespace splicegate
