#pragma once
// The daemon's side of systemd's readiness protocol (sd_notify(3), for `Type=notify` units):
// one datagram per state change ("READY=1", "RELOADING=1", "STOPPING=1", "STATUS=...") to the
// AF_UNIX socket that $NOTIFY_SOCKET names: a path, or "@name" in the abstract namespace.
// systemd documents the protocol as stable for independent implementations, so a datagram
// socket does here what linking libsystemd would.
// Without $NOTIFY_SOCKET (started by hand, or by another supervisor) every call does nothing.
// Thread affinity: the main thread. Error contract: never throws; a $NOTIFY_SOCKET it cannot use
// or a failed send is logged as a warning naming the socket, and the daemon keeps serving.
#include <sys/socket.h>
#include <sys/un.h>

#include <string>
#include <string_view>

#include "common/UniqueFd.h"

namespace splicegate {

class ServiceNotifier {
  public:
    // From $NOTIFY_SOCKET.
    static ServiceNotifier fromEnvironment();
    // `socketName` as $NOTIFY_SOCKET would give it; empty: notify nobody.
    explicit ServiceNotifier(std::string_view socketName);

    bool active() const noexcept { return socket_.valid(); }
    // Start-up done (or a reload finished): listeners, admin socket and metrics are up.
    void ready(std::string_view status);
    // An upgrade's new process is ready: it becomes the service's main process (MAINPID=, which
    // systemd takes from a process other than the main one only with NotifyAccess=all), before
    // the old one is told to drain and exit.
    void readyAsMainProcess(std::string_view status);
    // A reload begins; ready() follows when it is over, applied or not.
    void reloading();
    // The drain begins; the service manager's stop timeout runs from here.
    void stopping();
    // Free text for `systemctl status`.
    void status(std::string_view text);

  private:
    void send(const std::string& message);

    std::string name_;
    UniqueFd socket_;
    sockaddr_un address_{};
    socklen_t addressLength_ = 0;
    bool sendFailureLogged_ = false;
};

}  // namespace splicegate
