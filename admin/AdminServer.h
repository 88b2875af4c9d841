#pragma once
// The admin socket (proto/splicegate/admin.proto): a Unix stream socket, mode 0660, owned by
// root:--admin-group (admin/AdminSocket.h creates it without a path-based race), served by one
// thread with its own io_uring: multishot accept, multishot recv into a provided buffer ring
// (docs/kernel-notes.md §6), io_uring send for responses.
//
// Per peer: SO_PEERCRED must show uid 0 or a member of the group (full access), or a member of
// --admin-readonly-group (status, connections, version, xdp list; actions get
// ERROR_PERMISSION_DENIED), else it gets ERROR_PERMISSION_DENIED, is counted (command "connect",
// result "refused"), logged and closed. Every action (kill, drain, reload, audit-rotate, xdp
// add/del) is logged in one line naming the peer's uid and pid and the outcome.
// Frames are reassembled with bounded memory (admin/AdminFraming.h; zero-length frames count). A
// frame over 1 MiB, a malformed prefix or a body that does not parse gets ERROR_BAD_FRAME naming
// the problem, then the peer is closed; so does a frame left incomplete for stallTimeoutMs. A
// peer without a complete request for idleTimeoutMs (10 s) is closed; at maxPeers (1024) the peer
// waiting longest for its next request makes room for a new one. A peer that does not read its
// responses is paused (its receive is cancelled: the kernel's socket buffer pushes back on it)
// and closed once no byte of its output moves for stallTimeoutMs. Other peers never wait on one.
//
// Thread affinity: construct, start() and destroy from one thread; requestCounts() from any
// thread; AdminHandler::handle() runs on the admin thread.
// Error contract: the constructor (which creates the socket) throws UsageError (bad group, bad
// path) or std::system_error (a failed call), naming the socket path; start() throws
// std::system_error when the thread, its io_uring (common/Ring, made on the admin thread, its
// single issuer) or the provided buffer ring cannot be set up. The admin thread never throws: a
// peer's error closes that peer; a failure of the ring itself is logged and stops the admin
// server (never the daemon).
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "common/UniqueFd.h"
#include "splicegate/admin.pb.h"

namespace splicegate {

class AdminHandler {
  public:
    virtual ~AdminHandler() = default;
    // Called on the admin thread, one request at a time, only for a request that names a command
    // this build knows and that the peer's access level allows; must not block for long. Returns the response: on failure, error.code
    // set (not ERROR_NONE) and error.message one line for the operator. protocol_version is set
    // by the server. An exception becomes ERROR_FAILED with its what().
    virtual splicegate::admin::Response handle(const splicegate::admin::Request& request) = 0;
};

struct AdminServerOptions {
    std::string socketPath;
    std::string group;          // --admin-group; empty: root only (socket group root)
    std::string readonlyGroup;  // --admin-readonly-group; empty: none
    unsigned stallTimeoutMs = 5000;
    unsigned idleTimeoutMs = 10000;  // a peer without a complete request for this long is closed
    unsigned maxPeers = 1024;    // at the limit the longest-waiting peer makes room for a new one
    unsigned recvBuffers = 256;  // provided buffer ring entries of 4 KiB (rounded up to 2^n)
};

class AdminServer {
  public:
    // Creates the socket (admin/AdminSocket.h: a stale socket file is replaced only if nothing
    // listens on it; mode 0660, root:group, as non-root only the group). Throws UsageError for a
    // missing group (naming --admin-group or
    // --admin-readonly-group) or an unusable path, std::system_error for failed calls, both
    // naming the path.
    // `adopted`: an upgrade's listening socket for options.socketPath, taken over instead of
    // creating the socket (its mode, owner and ACL stay as the previous process set them).
    AdminServer(AdminServerOptions options, AdminHandler& handler, UniqueFd adopted = {});
    // Stops the thread, closes every peer and the socket, and removes the socket file if it is
    // still the one this server bound.
    ~AdminServer();
    AdminServer(const AdminServer&) = delete;
    AdminServer& operator=(const AdminServer&) = delete;

    // Starts the admin thread and waits until its io_uring and buffer ring are set up. Call once.
    void start();
    // Stops and joins the admin thread (idempotent; the destructor calls it).
    void stop();

    const std::string& socketPath() const noexcept;
    // The listening socket, for an upgrade's hand-off.
    int listenFd() const noexcept;
    // An upgrade handed the socket over: accept no more peers (the new process does), answer
    // the connected ones, and leave the socket file at exit. Any thread; idempotent.
    void stopAccepting() noexcept;
    // After stopAccepting(): waits until every connected peer has gone (the one that asked for
    // the upgrade has its answer then), at most `timeout`. Any thread.
    void waitForPeersToLeave(std::chrono::milliseconds timeout) const;

    // splicegate_admin_requests_total{command,result}: a snapshot. command is the request's
    // oneof field name ("status", "list_connections", "kill_connection", "drain", "reload",
    // "rotate_audit", "xdp_list", "xdp_add", "xdp_delete", "version", "unknown"), "connect" for
    // refused, surplus, evicted or idle peers, "frame" for bad or stalled frames, "send" for peers
    // that stopped reading. result is "ok", an error code's name ("bad_frame", "not_found",
    // "permission_denied", ...), "refused", "too_many_peers", "evicted", "idle" or "stalled".
    std::map<std::pair<std::string, std::string>, std::uint64_t> requestCounts() const;

    // How often a multishot recv ended with -ENOBUFS (the buffer ring ran dry) and was re-armed.
    std::uint64_t recvBufferExhaustions() const noexcept;

    struct Impl;

  private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace splicegate
