#pragma once
// The daemon's side of the admin protocol: turns each Request into an action on the relay.
// Called on the admin server's thread; talks to workers only through Relay::onEveryWorker and
// to the main thread through Reloader (a mutex) and signals.
#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "admin/AdminServer.h"
#include "relay/Config.h"
#include "relay/EdgeControl.h"
#include "relay/Relay.h"
#include "relay/Reloader.h"
#include "relay/Upgrader.h"

namespace splicegate {

class DaemonControl : public AdminHandler {
public:
    // `upgrader`: null when this process cannot start a successor.
    DaemonControl(Relay& relay, Reloader& reloader, EdgeControl& edge, const Config& config,
                  Upgrader* upgrader = nullptr);
    admin::Response handle(const admin::Request& request) override;

private:
    void status(admin::StatusResponse& out);
    void listConnections(admin::ListConnectionsResponse& out, admin::Response& response);
    void kill(std::uint64_t id, admin::Response& response);
    void listUpstreams(admin::ListUpstreamsResponse& out) const;
    void setUpstream(const admin::SetUpstreamRequest& request, admin::Response& response);
    void xdp(const admin::Request& request, admin::Response& response);
    void upgrade(admin::Response& response);

    Relay& relay_;
    Reloader& reloader_;
    EdgeControl& edge_;
    const Config config_;
    Upgrader* upgrader_;
    const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace splicegate
