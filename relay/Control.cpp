#include "relay/Control.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <memory>

#include "admin/AdminFraming.h"
#include "common/Error.h"
#include "common/Log.h"
#include "proto/ProtocolVersion.h"

namespace splicegate {
namespace {
constexpr auto kWorkerAnswerTimeout = std::chrono::seconds(2);

// The daemon's responses stay within the frame limit the client enforces, with room for the
// rest of the Response.
constexpr std::size_t kMaxListBytes = admin::kMaxFrameBytes - 4096;

// RFC 3339 in UTC with milliseconds, as splicegate-audit prints `opened`.
std::string rfc3339(std::chrono::system_clock::time_point when) {
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(when.time_since_epoch()).count();
    const auto seconds = static_cast<time_t>(ms / 1000);
    tm parts{};
    if (::gmtime_r(&seconds, &parts) == nullptr) return {};
    char text[64];  // room for any int the format could meet (-Wformat-truncation)
    std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", parts.tm_year + 1900,
                  parts.tm_mon + 1, parts.tm_mday, parts.tm_hour, parts.tm_min, parts.tm_sec,
                  static_cast<int>(ms % 1000));
    return text;
}

// The audit log's vocabulary: a relaying connection is "open".
std::string stateName(const std::string& workerState) {
    return workerState == "relaying" ? "open" : workerState;
}

void fail(admin::Response& response, admin::ErrorCode code, const std::string& message) {
    response.mutable_error()->set_code(code);
    response.mutable_error()->set_message(message);
}

const char* durabilityName(AuditDurability durability) {
    return toString(durability);
}
}  // namespace

DaemonControl::DaemonControl(Relay& relay, Reloader& reloader, EdgeControl& edge,
                             const Config& config, Upgrader* upgrader)
    : relay_(relay), reloader_(reloader), edge_(edge), config_(config), upgrader_(upgrader) {}

// Blocks the admin thread while the new process starts (bounded by the upgrader's timeout):
// other admin peers wait, the relay does not.
void DaemonControl::upgrade(admin::Response& response) {
    if (upgrader_ == nullptr) {
        fail(response, admin::ERROR_NOT_ENABLED, "this daemon cannot start a successor");
        return;
    }
    if (relay_.draining() && !upgrader_->handedOver()) {
        fail(response, admin::ERROR_FAILED, "draining: no upgrade any more");
        return;
    }
    auto outcome = upgrader_->upgrade();
    if (!outcome.ready) {
        fail(response, admin::ERROR_FAILED, outcome.problem);
        return;
    }
    auto& answer = *response.mutable_upgrade();
    answer.set_new_pid(static_cast<std::uint32_t>(outcome.pid));
    answer.set_old_pid(static_cast<std::uint32_t>(::getpid()));
    answer.set_drain_timeout_ms(config_.relay.drainTimeoutMs);
    // The main thread owns the drain sequence (it sees handedOver(): no STOPPING=1, the service
    // goes on in the new process).
    ::kill(::getpid(), SIGTERM);
}

admin::Response DaemonControl::handle(const admin::Request& request) {
    admin::Response response;
    response.set_protocol_version(admin::kProtocolVersion);
    response.mutable_error()->set_code(admin::ERROR_NONE);
    using R = admin::Request;
    switch (request.command_case()) {
        case R::kStatus:
            status(*response.mutable_status());
            break;
        case R::kListConnections:
            listConnections(*response.mutable_list_connections(), response);
            break;
        case R::kKillConnection:
            kill(request.kill_connection().id(), response);
            response.mutable_kill_connection()->set_id(request.kill_connection().id());
            break;
        case R::kDrain:
            response.mutable_drain();
            // The main thread owns the drain sequence; the admin asks it the same way an
            // operator's SIGTERM does.
            ::kill(::getpid(), SIGTERM);
            break;
        case R::kReload:
            try {
                // Reloader logs the outcome.
                auto result = reloader_.reload("admin");
                auto& answer = *response.mutable_reload();
                answer.set_routes(static_cast<std::uint32_t>(result.config.routes.size()));
                for (const auto& name : result.restartNeeded) answer.add_restart_required(name);
            } catch (const std::exception& error) {
                fail(response, admin::ERROR_FAILED, std::string("reload failed: ") + error.what());
            }
            break;
        case R::kRotateAudit: {
            if (config_.audit.dir.empty()) {
                fail(response, admin::ERROR_NOT_ENABLED, "audit is off (--audit-dir is empty)");
                break;
            }
            auto failures = std::make_shared<std::atomic<int>>(0);
            bool answered = relay_.onEveryWorker(
                [failures](Worker& worker) {
                    if (worker.rotateAudit() < 0) failures->fetch_add(1);
                },
                kWorkerAnswerTimeout);
            if (!answered || failures->load() > 0)
                fail(response, admin::ERROR_FAILED, "audit rotation failed (see the daemon log)");
            else
                response.mutable_rotate_audit();
            break;
        }
        case R::kXdpList:
        case R::kXdpAdd:
        case R::kXdpDelete:
            xdp(request, response);
            break;
        case R::kUpgrade:
            upgrade(response);
            break;
        case R::kListUpstreams:
            listUpstreams(*response.mutable_list_upstreams());
            break;
        case R::kSetUpstream:
            setUpstream(request.set_upstream(), response);
            break;
        case R::kVersion:
            response.mutable_version()->set_version(SPLICEGATE_VERSION);
            response.mutable_version()->set_protocol_version(admin::kProtocolVersion);
            break;
        case R::COMMAND_NOT_SET:
        default:
            fail(response, admin::ERROR_UNKNOWN_COMMAND,
                 "unknown or missing command (daemon " SPLICEGATE_VERSION ", protocol " +
                     std::to_string(admin::kProtocolVersion) + ")");
            break;
    }
    return response;
}

void DaemonControl::status(admin::StatusResponse& out) {
    auto snapshot = relay_.snapshot();
    out.set_version(SPLICEGATE_VERSION);
    out.set_uptime_seconds(
        static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                       std::chrono::steady_clock::now() - started_)
                                       .count()));
    out.set_workers(relay_.workerCount());
    out.set_splice_engine(toString(relay_.context().settings.datapath.engine()));
    out.set_draining(relay_.draining());
    auto routes = relay_.context().routes();
    std::uint64_t active = 0, accepted = 0, c2u = 0, u2c = 0;
    for (const auto& counters : snapshot.routes) {
        active += counters.active;
        accepted += counters.accepted;
        c2u += counters.bytesC2u;
        u2c += counters.bytesU2c;
        const Route* configured = nullptr;
        for (const auto& route : *routes)
            if (route->config.name == counters.name) configured = route.get();
        if (configured == nullptr && counters.active == 0) continue;  // removed and idle
        auto* route = out.add_routes();
        route->set_name(counters.name);
        if (configured != nullptr) {
            route->set_listen(configured->config.listen.toString());
            for (const auto& upstream : configured->config.upstreams)
                route->add_upstreams(upstream.text);
            route->set_audit(configured->config.audit && !config_.audit.dir.empty());
        }
        route->set_connections_active(counters.active);
        route->set_connections_accepted(counters.accepted);
        route->set_c2u_bytes(counters.bytesC2u);
        route->set_u2c_bytes(counters.bytesU2c);
    }
    out.set_connections_active(active);
    out.set_connections_accepted(accepted);
    out.set_c2u_bytes(c2u);
    out.set_u2c_bytes(u2c);
    auto* pipes = out.mutable_pipes();
    pipes->set_in_use(snapshot.pipesInUse);
    pipes->set_idle(snapshot.pipesIdle);
    pipes->set_budget_bytes(snapshot.pipeBudgetBytes);
    pipes->set_budget_used_bytes(snapshot.pipeBudgetUsedBytes);
    pipes->set_overflow_in_use(snapshot.pipesOverflowInUse);
    auto* audit = out.mutable_audit();
    audit->set_enabled(!config_.audit.dir.empty());
    audit->set_directory(config_.audit.dir);
    audit->set_durability(durabilityName(config_.audit.durability));
    audit->set_on_error(config_.audit.onError == AuditOnError::FailClosed ? "fail-closed"
                                                                          : "fail-open");
    audit->set_bytes(snapshot.auditBytes);
    std::uint64_t errors = 0;
    for (const auto& [kind, count] : snapshot.auditErrors) errors += count;
    audit->set_errors(errors);
    audit->set_lost_bytes(snapshot.auditLostBytes);
    for (const auto& head : relay_.auditHeads()) {
        auto* entry = audit->add_heads();
        entry->set_worker(head.worker);
        entry->set_index_file(head.indexFile);
        entry->set_digest(audit::digestHex(head.digest));
    }
    out.set_xdp_enabled(edge_.enabled());
}

void DaemonControl::listConnections(admin::ListConnectionsResponse& out,
                                    admin::Response& response) {
    struct Shared {
        std::mutex mutex;
        std::vector<ConnectionView> views;
    };
    auto shared = std::make_shared<Shared>();
    bool answered = relay_.onEveryWorker(
        [shared](Worker& worker) {
            std::vector<ConnectionView> mine;
            worker.listConnections(mine);
            std::lock_guard lock(shared->mutex);
            shared->views.insert(shared->views.end(), mine.begin(), mine.end());
        },
        kWorkerAnswerTimeout);
    if (!answered) {
        fail(response, admin::ERROR_FAILED, "a worker did not answer in time");
        return;
    }
    std::lock_guard lock(shared->mutex);
    std::sort(shared->views.begin(), shared->views.end(),
              [](const ConnectionView& a, const ConnectionView& b) { return a.id < b.id; });
    const auto now = std::chrono::system_clock::now();
    std::size_t bytes = 0;
    for (const auto& view : shared->views) {
        admin::ConnectionInfo info;
        info.set_id(view.id);
        info.set_route(view.route);
        info.set_client(view.client);
        info.set_upstream(view.upstream);
        info.set_opened(rfc3339(now - std::chrono::milliseconds(view.ageMs)));
        info.set_c2u_bytes(view.bytesC2u);
        info.set_u2c_bytes(view.bytesU2c);
        info.set_state(stateName(view.state));
        info.set_worker(view.worker);
        info.set_age_ms(view.ageMs);
        info.set_sni(view.serverName);
        info.set_via(view.via);
        // Each entry costs its size plus a tag and a length varint in the list.
        bytes += info.ByteSizeLong() + 1 + admin::kMaxVarintBytes;
        if (bytes > kMaxListBytes) {
            out.set_not_listed(out.not_listed() + 1);
            continue;
        }
        *out.add_connections() = std::move(info);
    }
}

void DaemonControl::xdp(const admin::Request& request, admin::Response& response) {
    if (!edge_.enabled()) {
        fail(response, admin::ERROR_NOT_ENABLED,
             "XDP not enabled: this daemon runs without --xdp-interface");
        return;
    }
    try {
        if (request.has_xdp_list()) {
            auto* list = response.mutable_xdp_list();
            for (const auto& [cidr, kind] : edge_.rules()) {
                auto* rule = list->add_rules();
                rule->set_cidr(cidr);
                rule->set_kind(kind);
            }
        } else if (request.has_xdp_add()) {
            edge_.addDeny(request.xdp_add().cidr());
            response.mutable_xdp_add();
        } else {
            std::string normalized;
            if (!edge_.remove(request.xdp_delete().cidr(), normalized))
                fail(response, admin::ERROR_NOT_FOUND, "no XDP rule for " + normalized);
            else
                response.mutable_xdp_delete();
        }
    } catch (const UsageError& error) {
        fail(response, admin::ERROR_INVALID_ARGUMENT, error.what());
    }
}

namespace {
void describeUpstream(const UpstreamSnapshot& state, admin::UpstreamInfo& out) {
    out.set_route(state.route);
    out.set_upstream(state.upstream);
    out.set_state(state.state());
    out.set_weight(state.weight);
    out.set_backup(state.backup);
    out.set_active(state.active);
    out.set_connect_failures(state.connectFailures);
    out.set_health_check_failures(state.healthCheckFailures);
}
}  // namespace

void DaemonControl::listUpstreams(admin::ListUpstreamsResponse& out) const {
    auto routes = relay_.context().routes();
    for (const auto& route : *routes)
        for (const auto& state : route->pool->snapshot()) describeUpstream(state, *out.add_upstreams());
}

void DaemonControl::setUpstream(const admin::SetUpstreamRequest& request,
                                admin::Response& response) {
    // A SIGHUP reload may swap the table in between, its new pool copying the state before the
    // change: the change is made again on the table in force until that table stays.
    for (int round = 0; round < 4; ++round) {
        auto routes = relay_.context().routes();
        const Route* route = nullptr;
        for (const auto& candidate : *routes)
            if (candidate->config.name == request.route()) route = candidate.get();
        if (route == nullptr) {
            fail(response, admin::ERROR_NOT_FOUND, "no route named '" + request.route() + "'");
            return;
        }
        if (!route->pool->setDisabled(request.upstream(), request.disabled())) {
            std::string known;
            for (const auto& upstream : route->config.upstreams)
                known += (known.empty() ? "" : ", ") + upstream.text;
            fail(response, admin::ERROR_NOT_FOUND,
                 "route '" + request.route() + "' has no upstream '" + request.upstream() +
                     "' (its upstreams: " + known + ")");
            return;
        }
        if (relay_.context().routes() != routes) continue;
        for (const auto& state : route->pool->snapshot())
            if (state.upstream == request.upstream())
                describeUpstream(state, *response.mutable_set_upstream()->mutable_upstream());
        return;
    }
    fail(response, admin::ERROR_FAILED, "the routes kept changing (reloads); try again");
}

void DaemonControl::kill(std::uint64_t id, admin::Response& response) {
    auto found = std::make_shared<std::atomic<bool>>(false);
    bool answered = relay_.onEveryWorker(
        [found, id](Worker& worker) {
            if (worker.killConnection(id)) found->store(true);
        },
        kWorkerAnswerTimeout);
    if (!answered)
        fail(response, admin::ERROR_FAILED, "a worker did not answer in time");
    else if (!found->load())
        fail(response, admin::ERROR_NOT_FOUND, "no open connection with id " + std::to_string(id));
}

}  // namespace splicegate
