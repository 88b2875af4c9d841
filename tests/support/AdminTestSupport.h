#pragma once
// Helpers for the admin-socket tests (header-only: only Admin* tests link the protobuf code).
// - FakeAdminHandler: canned answers for every command, so the server is tested without the
//   daemon's wiring: kill of id 42 succeeds, other ids are ERROR_NOT_FOUND; xdp commands answer
//   ERROR_NOT_ENABLED "XDP not enabled"; reload reports 3 routes; a request is counted per
//   command; throwOnDrain makes drain throw (to test the ERROR_FAILED path).
// - AdminPeer: a raw client connection to the admin socket with bounded I/O, to play hostile or
//   well-behaved peers.
// - ctlBinary() / runCtl(): the splicegatectl binary of this build.
// - TemporaryAccount: a throw-away user and group for access-level tests.
// - varint64(): a length prefix by protobuf's encoder, to forge prefixes (4 GiB, over the limit)
//   that the framing under test would refuse to write.
// Thread affinity: FakeAdminHandler is called on the admin thread; its counters are atomics.
// Error contract: set-up failures throw std::system_error; I/O helpers return false / nullopt.
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "admin/AdminFraming.h"
#include "admin/AdminServer.h"
#include "common/Error.h"
#include "common/UniqueFd.h"
#include "proto/ProtocolVersion.h"
#include "splicegate/admin.pb.h"
#include "tests/support/Daemon.h"
#include "tests/support/Sockets.h"

namespace splicegate::test {

inline std::string varint64(std::uint64_t value) {
    std::string out;
    {
        google::protobuf::io::StringOutputStream stream(&out);
        google::protobuf::io::CodedOutputStream coded(&stream);
        coded.WriteVarint64(value);
    }  // the coded stream flushes into `out` when it goes
    return out;
}

class FakeAdminHandler : public AdminHandler {
  public:
    std::atomic<unsigned> calls{0};
    std::atomic<bool> throwOnDrain{false};
    std::atomic<unsigned> delayMs{0};

    admin::Response handle(const admin::Request& request) override {
        ++calls;
        if (delayMs > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delayMs.load()));
        admin::Response response;
        switch (request.command_case()) {
            case admin::Request::kStatus: {
                auto* status = response.mutable_status();
                status->set_version("9.9.9-test");
                status->set_uptime_seconds(3725);
                status->set_workers(2);
                status->set_splice_engine("inline");
                status->set_connections_active(2);
                status->set_connections_accepted(17);
                status->set_c2u_bytes(123456789012ULL);
                status->set_u2c_bytes(42);
                auto* route = status->add_routes();
                route->set_name("default");
                route->set_listen("127.0.0.1:8443");
                route->add_upstreams("192.0.2.10:443");
                route->add_upstreams("192.0.2.11:443");
                route->set_audit(true);
                route->set_connections_active(2);
                route->set_connections_accepted(17);
                route->set_c2u_bytes(123456789012ULL);
                route->set_u2c_bytes(42);
                status->mutable_pipes()->set_in_use(1);
                status->mutable_pipes()->set_idle(7);
                status->mutable_pipes()->set_budget_bytes(64u << 20);
                status->mutable_pipes()->set_budget_used_bytes(8u << 20);
                status->mutable_audit()->set_enabled(true);
                status->mutable_audit()->set_directory("/var/lib/splicegate/audit");
                status->mutable_audit()->set_durability("batch");
                status->mutable_audit()->set_on_error("fail-closed");
                break;
            }
            case admin::Request::kListConnections:
                for (std::uint64_t id : {41u, 42u}) {
                    auto* c = response.mutable_list_connections()->add_connections();
                    c->set_id(id);
                    c->set_route("default");
                    c->set_client("198.51.100.7:5" + std::to_string(id));
                    c->set_upstream("192.0.2.10:443");
                    c->set_age_ms(id * 1000);
                    c->set_c2u_bytes(id * 10);
                    c->set_u2c_bytes(id * 20);
                    c->set_state("open");
                    c->set_opened("2026-01-31T12:00:" + std::to_string(id) + ".000Z");
                    c->set_worker(static_cast<std::uint32_t>(id % 2));
                }
                break;
            case admin::Request::kKillConnection:
                if (request.kill_connection().id() != 42) {
                    return admin::errorResponse(
                        admin::ERROR_NOT_FOUND,
                        "no open connection " + std::to_string(request.kill_connection().id()));
                }
                response.mutable_kill_connection()->set_id(42);
                break;
            case admin::Request::kDrain:
                if (throwOnDrain) throw std::runtime_error("drain exploded");
                response.mutable_drain();
                break;
            case admin::Request::kReload:
                response.mutable_reload()->set_routes(3);
                break;
            case admin::Request::kRotateAudit:
                response.mutable_rotate_audit();
                break;
            case admin::Request::kXdpList:
            case admin::Request::kXdpAdd:
            case admin::Request::kXdpDelete:
                return admin::errorResponse(
                    admin::ERROR_NOT_ENABLED,
                    "XDP not enabled (start splicegate with --xdp-interface)");
            case admin::Request::kUpgrade:
                response.mutable_upgrade()->set_new_pid(4242);
                response.mutable_upgrade()->set_old_pid(4141);
                response.mutable_upgrade()->set_drain_timeout_ms(30000);
                break;
            case admin::Request::kListUpstreams: {
                auto& upstream = *response.mutable_list_upstreams()->add_upstreams();
                upstream.set_route("default");
                upstream.set_upstream("127.0.0.1:9000");
                upstream.set_state("up");
                upstream.set_weight(1);
                break;
            }
            case admin::Request::kSetUpstream:
                if (request.set_upstream().route() != "default")
                    return admin::errorResponse(admin::ERROR_NOT_FOUND,
                                                "no route named '" + request.set_upstream().route() +
                                                    "'");
                response.mutable_set_upstream()->mutable_upstream()->set_route("default");
                response.mutable_set_upstream()->mutable_upstream()->set_upstream(
                    request.set_upstream().upstream());
                response.mutable_set_upstream()->mutable_upstream()->set_state(
                    request.set_upstream().disabled() ? "disabled" : "up");
                break;
            case admin::Request::kVersion:
                response.mutable_version()->set_version("9.9.9-test");
                response.mutable_version()->set_protocol_version(admin::kProtocolVersion);
                break;
            case admin::Request::COMMAND_NOT_SET:
                return admin::errorResponse(admin::ERROR_UNKNOWN_COMMAND, "handler saw no command");
        }
        return response;
    }
};

inline admin::Request statusRequest() {
    admin::Request request;
    request.set_protocol_version(admin::kProtocolVersion);
    request.mutable_status();
    return request;
}

inline admin::Request killRequest(std::uint64_t id) {
    admin::Request request;
    request.set_protocol_version(admin::kProtocolVersion);
    request.mutable_kill_connection()->set_id(id);
    return request;
}

// A raw connection to the admin socket.
class AdminPeer {
  public:
    explicit AdminPeer(const std::string& path) { error_ = connectTo(path); }

    bool connected() const noexcept { return fd_.valid(); }
    int connectError() const noexcept { return error_; }
    int fd() const noexcept { return fd_.get(); }
    void close() { fd_.reset(); }

    bool sendBytes(const std::string& bytes, milliseconds timeout = milliseconds(5000)) {
        int error = 0;
        return sendAll(fd_.get(), bytes.data(), bytes.size(), deadlineIn(timeout), error);
    }
    bool send(const admin::Request& request) { return sendBytes(admin::encodeFrame(request)); }
    void shutdownWrite() { ::shutdown(fd_.get(), SHUT_WR); }

    // The next response, or nullopt on EOF, error, a bad frame or the deadline.
    std::optional<admin::Response> receive(milliseconds timeout = milliseconds(5000)) {
        const Deadline deadline = deadlineIn(timeout);
        while (!frames_.hasFrame()) {
            const auto left =
                std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
            if (left <= 0) return std::nullopt;
            pollfd entry{fd_.get(), POLLIN, 0};
            if (::poll(&entry, 1, static_cast<int>(left)) <= 0) continue;
            char buffer[65536];
            ssize_t n = ::recv(fd_.get(), buffer, sizeof buffer, MSG_DONTWAIT);
            if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
            if (n <= 0) return std::nullopt;
            if (!frames_.feed(buffer, static_cast<std::size_t>(n))) return std::nullopt;
        }
        admin::Response response;
        if (!response.ParseFromString(frames_.popFrame())) return std::nullopt;
        return response;
    }

    std::optional<admin::Response> call(const admin::Request& request,
                                        milliseconds timeout = milliseconds(5000)) {
        if (!send(request)) return std::nullopt;
        return receive(timeout);
    }

    // True when the server closes the connection (EOF or reset) before the deadline; bytes it
    // sends meanwhile are discarded.
    bool waitClosed(milliseconds timeout = milliseconds(5000)) {
        PeerClose how = waitPeerClose(fd_.get(), deadlineIn(timeout));
        return how == PeerClose::Eof || how == PeerClose::Reset;
    }

  private:
    int connectTo(const std::string& path) {
        UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
        if (!fd) return errno;
        sockaddr_un address{};
        address.sun_family = AF_UNIX;
        std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
        if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
            return errno;
        }
        setIoTimeout(fd.get(), milliseconds(250));
        fd_ = std::move(fd);
        return 0;
    }

    UniqueFd fd_;
    int error_ = 0;
    admin::FrameAssembler frames_{admin::kMaxFrameBytes, admin::kMaxFrameBytes};
};

// A system group and a user whose primary group it is, for access tests; both named after this
// process (`prefix` + pid) and removed by name when this goes, whatever the test's outcome.
class TemporaryAccount {
  public:
    explicit TemporaryAccount(const std::string& prefix)
        : name_(prefix + std::to_string(::getpid())) {
        remove();  // a leftover of a killed run of this pid
        auto group = runProcess({"/usr/sbin/groupadd", "--system", name_});
        auto user = runProcess({"/usr/sbin/useradd", "--system", "--no-create-home", "--gid", name_,
                                "--shell", "/usr/sbin/nologin", name_});
        if (!group.status || !group.status->isExit(0) || !user.status || !user.status->isExit(0)) {
            remove();
            throw std::runtime_error("cannot create the test account " + name_ + ": " + group.err +
                                     user.err);
        }
        uid_ = static_cast<uid_t>(std::stoul(runProcess({"/usr/bin/id", "-u", name_}).out));
        gid_ = static_cast<gid_t>(std::stoul(runProcess({"/usr/bin/id", "-g", name_}).out));
    }
    ~TemporaryAccount() { remove(); }
    TemporaryAccount(const TemporaryAccount&) = delete;
    TemporaryAccount& operator=(const TemporaryAccount&) = delete;

    const std::string& name() const noexcept { return name_; }
    uid_t uid() const noexcept { return uid_; }
    gid_t gid() const noexcept { return gid_; }
    // argv run as this account (its uid, its group, its supplementary groups).
    std::vector<std::string> as(std::vector<std::string> argv) const {
        std::vector<std::string> full = {"/usr/bin/setpriv", "--reuid=" + std::to_string(uid_),
                                         "--regid=" + std::to_string(gid_), "--init-groups"};
        full.insert(full.end(), argv.begin(), argv.end());
        return full;
    }

  private:
    void remove() {
        runProcess({"/usr/sbin/userdel", name_});
        runProcess({"/usr/sbin/groupdel", name_});
    }

    std::string name_;
    uid_t uid_ = 0;
    gid_t gid_ = 0;
};

inline std::string ctlBinary() {
    return std::string(SPLICEGATE_BIN_DIR) + "/splicegatectl";
}

// splicegatectl --socket PATH ARGS...
inline ProcessResult runCtl(const std::string& socketPath, std::vector<std::string> args,
                            milliseconds timeout = milliseconds(15000)) {
    std::vector<std::string> argv = {ctlBinary(), "--socket", socketPath};
    argv.insert(argv.end(), args.begin(), args.end());
    return runProcess(argv, timeout);
}

}  // namespace splicegate::test
