#include "admin/AdminServer.h"

#include <grp.h>
#include <liburing.h>
#include <pwd.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <deque>
#include <exception>
#include <future>
#include <mutex>
#include <optional>
#include <span>
#include <system_error>
#include <thread>
#include <vector>

#include "admin/AdminFraming.h"
#include "admin/AdminSocket.h"
#include "common/BufferRing.h"
#include "common/CompletionTag.h"
#include "common/Error.h"
#include "common/Groups.h"
#include "common/Log.h"
#include "common/Ring.h"
#include "common/ThreadName.h"
#include "common/UniqueFd.h"
#include "proto/ProtocolVersion.h"

namespace splicegate {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Submission entries; common/Ring makes the completion queue four times larger, room for the
// multishot receives of 1024 peers.
constexpr unsigned kRingEntries = 1024;
// Admin traffic is pollable socket I/O: io-wq threads are never needed for it.
constexpr unsigned kMaxIoWorkers = 1;
// Provided buffer ring (docs/kernel-notes.md §6): admin messages are small, so a few hundred pages
// serve every peer; running dry only costs an -ENOBUFS and a re-arm.
constexpr unsigned kBufferSize = 4096;
constexpr std::uint16_t kBufferGroup = 0;
// Output bound per peer: past the high-water mark its requests are not processed and its
// receive is cancelled until the output is below the low-water mark. One response may exceed it.
constexpr std::size_t kOutputHighWater = std::size_t{1} << 20;
constexpr std::size_t kOutputLowWater = std::size_t{256} << 10;
// Input held per peer: complete frames waiting for a paused peer plus the partial one.
constexpr std::size_t kMaxBufferedInput = 2 * admin::kMaxFrameBytes + 64 * 1024;
constexpr std::uint32_t kMaxSlots = 1u << 20;
constexpr unsigned kHostileLogLinesPerSecond = 20;

// Completion tags (common/CompletionTag.h): RingOwner::AdminServer, op, slot and generation of
// the peer.
enum class Op : std::uint8_t { Accept = 1, Recv = 2, Send = 3, Cancel = 4, Wake = 5 };

constexpr CompletionTag tagOf(Op op, std::uint32_t slot = 0,
                              std::uint16_t generation = 0) noexcept {
    return CompletionTag::of(RingOwner::AdminServer, op, slot, generation);
}

// Resolves a group option (--admin-group, --admin-readonly-group) by name or numeric gid.
GroupEntry resolveGroup(const std::string& name, const std::string& option,
                        const std::string& path) {
    int rc = 0;
    auto found = findGroup(name, rc);
    if (!found)
        throw UsageError(option + " '" + name + "': no such group" +
                         (rc != 0 ? " (" + errnoText(rc) + ")" : std::string()) +
                         " (the admin socket " + path +
                         " is shared with that group; create it or choose another)");
    return *found;
}

// The groups of `uid` (SO_PEERCRED's primary gid `gid`, the passwd entry's gid and the group
// database's supplementary groups).
std::vector<gid_t> groupsOf(uid_t uid, gid_t gid) {
    std::vector<gid_t> groups{gid};
    std::vector<char> buffer(16384);
    passwd pw{};
    passwd* found = nullptr;
    while (getpwuid_r(uid, &pw, buffer.data(), buffer.size(), &found) == ERANGE) {
        buffer.resize(buffer.size() * 2);
    }
    if (found == nullptr) return groups;
    int count = 64;
    std::vector<gid_t> listed(static_cast<std::size_t>(count));
    for (int attempt = 0; attempt < 8; ++attempt) {
        int wanted = static_cast<int>(listed.size());
        if (getgrouplist(found->pw_name, found->pw_gid, listed.data(), &wanted) >= 0) {
            listed.resize(static_cast<std::size_t>(wanted));
            groups.insert(groups.end(), listed.begin(), listed.end());
            break;
        }
        listed.resize(static_cast<std::size_t>(std::max(wanted, count * 2)));
        count = static_cast<int>(listed.size());
    }
    groups.push_back(found->pw_gid);
    return groups;
}

struct Peer {
    UniqueFd fd;
    std::uint32_t slot = 0;
    std::uint16_t generation = 0;
    std::uint64_t id = 0;
    uid_t uid = 0;
    pid_t pid = 0;
    admin::Access access = admin::Access::ReadOnly;
    Clock::time_point lastRequest;  // accepted, or its last complete frame
    admin::FrameAssembler frames{admin::kMaxFrameBytes, kMaxBufferedInput};

    std::deque<std::string> output;  // encoded responses; the front one is being sent
    std::size_t outputOffset = 0;    // bytes of output.front() already sent
    std::size_t outputBytes = 0;     // unsent bytes in all of output

    bool recvArmed = false;  // a multishot recv is in the kernel
    bool sendInFlight = false;
    bool rearmQueued = false;  // on the re-arm list of this loop iteration
    bool paused = false;       // output over the high-water mark: not reading
    bool eof = false;          // the peer shut its side
    bool closeAfterFlush = false;
    bool closing = false;  // cancelled; freed once nothing is in flight
    bool cancelledRecv = false;
    bool cancelledSend = false;

    bool frameTimer = false;  // a frame has begun and is incomplete
    Clock::time_point frameStarted;
    std::uint64_t framesSeen = 0;  // frames.framesCompleted() at the last feed
    Clock::time_point lastSendProgress;

    bool wantsInput() const noexcept { return !closing && !closeAfterFlush && !eof && !paused; }
    // Waits for the peer and owes it nothing: may be closed for idling or to make room.
    bool waiting() const noexcept {
        return !closing && !closeAfterFlush && output.empty() && !frames.hasFrame();
    }
    bool idle() const noexcept { return !recvArmed && !sendInFlight; }
};

}  // namespace

struct AdminServer::Impl {
    Impl(AdminServerOptions opts, AdminHandler& h, UniqueFd adopted);

    void setUpRing();
    void run(std::promise<void>& ready) noexcept;
    void loop();
    void armAccept();
    void armWake();
    void armRecv(Peer& peer);
    void submitSend(Peer& peer);
    void cancelOp(Op op, const Peer& peer);

    void onAccept(const io_uring_cqe& cqe);
    void onRecv(Peer* peer, const io_uring_cqe& cqe);
    void onSend(Peer& peer, int result);
    void acceptPeer(int fd);
    std::optional<admin::Access> accessOf(const ucred& credentials) const;
    bool evictLongestWaiting();
    void closeWithNotice(Peer& peer, const std::string& result, const std::string& why);
    void logAction(const Peer& peer, const admin::Dispatch& dispatch);
    void refuseNow(int fd, admin::ErrorCode code, const std::string& message);

    void feed(Peer& peer, const char* data, std::size_t size);
    void processFrames(Peer& peer);
    void queueOutput(Peer& peer, std::string bytes);
    void failPeer(Peer& peer, const std::string& result, const std::string& problem);
    void stopReading(Peer& peer);
    void finishIfDone(Peer& peer);
    void beginClose(Peer& peer);
    void reap();
    Peer* peerFor(const CompletionTag& tag) noexcept;
    int checkTimers(Clock::time_point now);
    void dispatch(const io_uring_cqe& cqe);

    void count(const std::string& command, const std::string& result);
    bool allowHostileLog();
    void flushHostileLog(Clock::time_point now);

    AdminServerOptions options;
    AdminHandler& handler;
    admin::RequestHandlerFn handle;
    GroupEntry group;
    bool rootOnly = false;
    std::optional<GroupEntry> readonlyGroup;

    std::optional<AdminSocket> socket;
    std::optional<Ring> ring;  // made on the admin thread: the ring's single issuer
    // Every SQE the server prepares goes through this (the ring's), one indirect call each: a
    // few per request.
    RingOps* ops = nullptr;
    // Registered with the ring and unregistered on the admin thread (see run()).
    std::optional<BufferRing> buffers;
    UniqueFd wakeFd;
    std::uint64_t wakeValue = 0;

    std::vector<std::unique_ptr<Peer>> slots;
    std::vector<std::uint16_t> generations;
    std::vector<std::uint32_t> freeSlots;
    std::size_t peerCount = 0;  // closing ones included until reaped
    std::uint64_t nextPeerId = 1;
    std::vector<Peer*> rearm;
    std::vector<Peer*> closing;
    bool acceptArmed = false;
    bool acceptBackoff = false;
    Clock::time_point acceptRetryAt;

    std::atomic<bool> stopping{false};
    std::atomic<bool> stopAcceptingAsked{false};
    bool acceptStopped = false;  // admin thread
    std::atomic<std::size_t> peersNow{0};  // peerCount, for other threads
    std::atomic<std::uint64_t> noBuffers{0};
    std::thread thread;
    bool started = false;

    mutable std::mutex countsMutex;
    std::map<std::pair<std::string, std::string>, std::uint64_t> counts;

    Clock::time_point logWindow;
    unsigned logLinesInWindow = 0;
    std::uint64_t logSuppressed = 0;
};

AdminServer::Impl::Impl(AdminServerOptions opts, AdminHandler& h, UniqueFd adopted)
    : options(std::move(opts)), handler(h) {
    handle = [this](const admin::Request& request) { return handler.handle(request); };
    const std::string& path = options.socketPath;
    options.maxPeers = std::clamp(options.maxPeers, 1u, kMaxSlots);
    if (options.stallTimeoutMs == 0) options.stallTimeoutMs = 1;
    if (options.idleTimeoutMs == 0) options.idleTimeoutMs = 1;
    rootOnly = options.group.empty();
    group = rootOnly ? GroupEntry{0, "root"} : resolveGroup(options.group, "--admin-group", path);
    if (!options.readonlyGroup.empty()) {
        readonlyGroup = resolveGroup(options.readonlyGroup, "--admin-readonly-group", path);
    }
    AdminSocketAccess access;
    access.group = group.gid;
    access.groupName = group.name;
    if (readonlyGroup) {
        access.readonlyGroup = readonlyGroup->gid;
        access.readonlyGroupName = readonlyGroup->name;
    }
    if (adopted)
        socket.emplace(path, std::move(adopted));
    else
        socket.emplace(path, access, static_cast<int>(std::min(options.maxPeers, 4096u)));

    wakeFd.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    checkSys(wakeFd.get(), "admin socket " + path + ": eventfd");
}

// On the admin thread: with IORING_SETUP_SINGLE_ISSUER (common/Ring, 6.0) only the thread that
// made the ring may submit to it or register buffers with it.
void AdminServer::Impl::setUpRing() {
    const std::string& path = options.socketPath;
    ring.emplace(kRingEntries, kMaxIoWorkers, kMaxIoWorkers);
    ops = &*ring;

    unsigned count = 1;
    while (count < std::clamp(options.recvBuffers, 1u, BufferRing::kMaxEntries)) count *= 2;
    try {
        buffers.emplace(ring->registration(), kBufferGroup, count, kBufferSize);
    } catch (const std::system_error& error) {
        throw std::system_error(error.code(), "admin socket " + path + ": " + error.what());
    }
}

void AdminServer::Impl::count(const std::string& command, const std::string& result) {
    std::lock_guard lock(countsMutex);
    ++counts[{command, result}];
}

// Hostile peers must not be able to flood the log: at most a few lines a second, then a count.
bool AdminServer::Impl::allowHostileLog() {
    flushHostileLog(Clock::now());
    if (logLinesInWindow < kHostileLogLinesPerSecond) {
        ++logLinesInWindow;
        return true;
    }
    ++logSuppressed;
    return false;
}

// Starts a new one-second window once the last is over, reporting what it held back.
void AdminServer::Impl::flushHostileLog(Clock::time_point now) {
    if (now - logWindow < std::chrono::seconds(1)) return;
    if (logSuppressed > 0) {
        logWarn("admin socket ", options.socketPath, ": ", logSuppressed,
                " more refused or bad admin peers not logged");
    }
    logWindow = now;
    logLinesInWindow = 0;
    logSuppressed = 0;
}

void AdminServer::Impl::armAccept() {
    ops->acceptMultishot(socket->fd(), SOCK_CLOEXEC | SOCK_NONBLOCK, tagOf(Op::Accept));
    acceptArmed = true;
}

void AdminServer::Impl::armWake() {
    ops->read(wakeFd.get(), std::as_writable_bytes(std::span(&wakeValue, 1)), 0, tagOf(Op::Wake));
}

void AdminServer::Impl::armRecv(Peer& peer) {
    ops->recvMultishot(peer.fd.get(), kBufferGroup, tagOf(Op::Recv, peer.slot, peer.generation));
    peer.recvArmed = true;
    peer.cancelledRecv = false;
}

void AdminServer::Impl::submitSend(Peer& peer) {
    const std::string& front = peer.output.front();
    ops->send(peer.fd.get(), std::as_bytes(std::span(front)).subspan(peer.outputOffset),
              MSG_NOSIGNAL, tagOf(Op::Send, peer.slot, peer.generation));
    peer.sendInFlight = true;
    peer.cancelledSend = false;
}

void AdminServer::Impl::cancelOp(Op op, const Peer& peer) {
    ops->cancel(tagOf(op, peer.slot, peer.generation), tagOf(Op::Cancel));
}

// The live peer a completion belongs to; null when its slot was freed or reused since.
Peer* AdminServer::Impl::peerFor(const CompletionTag& tag) noexcept {
    if (tag.slot >= slots.size() || !slots[tag.slot] || generations[tag.slot] != tag.generation) {
        return nullptr;
    }
    return slots[tag.slot].get();
}

void AdminServer::Impl::refuseNow(int fd, admin::ErrorCode code, const std::string& message) {
    // A fresh socket's buffer takes a small response at once; never wait for it.
    const std::string bytes = admin::encodeFrame(admin::errorResponse(code, message));
    [[maybe_unused]] ssize_t sent =
        ::send(fd, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    ::close(fd);
}

void AdminServer::Impl::onAccept(const io_uring_cqe& cqe) {
    if ((cqe.flags & IORING_CQE_F_MORE) == 0) acceptArmed = false;
    if (cqe.res >= 0) {
        acceptPeer(cqe.res);
        return;
    }
    if (cqe.res == -ECANCELED && (stopping || acceptStopped)) return;
    // EMFILE, ENFILE, ENOMEM...: keep serving the peers we have, retry shortly.
    if (allowHostileLog()) {
        logWarn("admin socket ", options.socketPath, ": accept failed: ", errnoText(-cqe.res));
    }
    if (!acceptArmed) {
        acceptBackoff = true;
        acceptRetryAt = Clock::now() + milliseconds(100);
    }
}

void AdminServer::Impl::acceptPeer(int rawFd) {
    UniqueFd fd(rawFd);
    ucred credentials{};
    socklen_t length = sizeof(credentials);
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) {
        if (allowHostileLog()) {
            logWarn("admin socket ", options.socketPath,
                    ": SO_PEERCRED failed, closing the peer: ", errnoText(errno));
        }
        count("connect", "refused");
        return;
    }
    const std::optional<admin::Access> access = accessOf(credentials);
    if (!access) {
        count("connect", "refused");
        const std::string groups =
            (rootOnly ? std::string() : " and not a member of group '" + group.name + "'") +
            (readonlyGroup ? " or '" + readonlyGroup->name + "'" : std::string());
        if (allowHostileLog()) {
            logWarn("admin socket ", options.socketPath, ": refused peer uid ", credentials.uid,
                    " gid ", credentials.gid, " pid ", credentials.pid, ": not root", groups);
        }
        refuseNow(
            fd.release(), admin::ERROR_PERMISSION_DENIED,
            "permission denied: uid " + std::to_string(credentials.uid) + " is not root" + groups +
                (readonlyGroup ? " (--admin-group, --admin-readonly-group)" : " (--admin-group)"));
        return;
    }
    // Full: the peer that waited longest makes room (idle peers must not lock out root). Only when
    // every peer is owed a response is the newcomer refused.
    if (peerCount - closing.size() >= options.maxPeers && !evictLongestWaiting()) {
        count("connect", "too_many_peers");
        if (allowHostileLog()) {
            logWarn("admin socket ", options.socketPath, ": ", peerCount,
                    " admin peers connected and all of them busy; refused uid ", credentials.uid,
                    " pid ", credentials.pid);
        }
        refuseNow(fd.release(), admin::ERROR_FAILED,
                  "too many admin connections (" + std::to_string(options.maxPeers) +
                      "); try again later");
        return;
    }
    std::uint32_t slot;
    if (!freeSlots.empty()) {
        slot = freeSlots.back();
        freeSlots.pop_back();
    } else {
        slot = static_cast<std::uint32_t>(slots.size());
        slots.emplace_back();
        generations.push_back(0);
    }
    auto peer = std::make_unique<Peer>();
    peer->fd = std::move(fd);
    peer->slot = slot;
    peer->generation = ++generations[slot];
    peer->id = nextPeerId++;
    peer->uid = credentials.uid;
    peer->pid = credentials.pid;
    peer->access = *access;
    peer->lastRequest = Clock::now();
    Peer& ref = *peer;
    slots[slot] = std::move(peer);
    ++peerCount;
    logDebug("admin socket: peer ", ref.id, " uid ", ref.uid, " pid ", ref.pid, " connected");
    armRecv(ref);
}

// Full access for root and --admin-group, read-only for --admin-readonly-group, else none.
std::optional<admin::Access> AdminServer::Impl::accessOf(const ucred& credentials) const {
    if (credentials.uid == 0) return admin::Access::Full;
    if (rootOnly && !readonlyGroup) return std::nullopt;
    const std::vector<gid_t> groups = groupsOf(credentials.uid, credentials.gid);
    auto member = [&groups](gid_t gid) {
        return std::find(groups.begin(), groups.end(), gid) != groups.end();
    };
    if (!rootOnly && member(group.gid)) return admin::Access::Full;
    if (readonlyGroup && member(readonlyGroup->gid)) return admin::Access::ReadOnly;
    return std::nullopt;
}

// Closes the peer that has waited longest for its next request; false when every peer is
// owed a response (or is already closing).
bool AdminServer::Impl::evictLongestWaiting() {
    Peer* oldest = nullptr;
    for (auto& slot : slots) {
        if (slot && slot->waiting() &&
            (oldest == nullptr || slot->lastRequest < oldest->lastRequest)) {
            oldest = slot.get();
        }
    }
    if (oldest == nullptr) return false;
    closeWithNotice(*oldest, "evicted",
                    "closed to make room: the admin socket has " +
                        std::to_string(options.maxPeers) +
                        " peers and this one waited longest for a request");
    return true;
}

// Tells the peer why in one error response and closes it once that is sent (or its send
// stalls).
void AdminServer::Impl::closeWithNotice(Peer& peer, const std::string& result,
                                        const std::string& why) {
    if (peer.closing || peer.closeAfterFlush) return;
    count("connect", result);
    logDebug("admin socket: peer ", peer.id, " uid ", peer.uid, " pid ", peer.pid, ": ", why);
    peer.frameTimer = false;
    peer.frames.discardFrames();
    queueOutput(peer, admin::encodeFrame(admin::errorResponse(admin::ERROR_FAILED, why)));
    peer.closeAfterFlush = true;
    stopReading(peer);
    finishIfDone(peer);
}

// One line per action naming the peer (uid, pid from SO_PEERCRED), and per denied one.
void AdminServer::Impl::logAction(const Peer& peer, const admin::Dispatch& dispatch) {
    if (!dispatch.action) return;
    const std::string who = "admin: uid " + std::to_string(peer.uid) + " pid " +
                            std::to_string(peer.pid) + ": " + dispatch.description;
    const admin::Error& error = dispatch.response.error();
    if (dispatch.denied) {
        if (allowHostileLog()) logWarn(who, ": denied (read-only access)");
    } else if (error.code() == admin::ERROR_NONE) {
        logInfo(who, ": done");
    } else {
        logWarn(who, ": failed: ", error.message());
    }
}

void AdminServer::Impl::onRecv(Peer* peer, const io_uring_cqe& cqe) {
    const bool more = (cqe.flags & IORING_CQE_F_MORE) != 0;
    if (auto id = BufferRing::bufferOf(cqe.flags); id && *id < buffers->entries()) {
        auto bytes = buffers->take(*id, cqe.res > 0 ? static_cast<std::size_t>(cqe.res) : 0);
        if (peer != nullptr && !bytes.empty())
            feed(*peer, reinterpret_cast<const char*>(bytes.data()), bytes.size());
        buffers->giveBack(*id);
    }
    if (peer == nullptr) return;
    if (!more) peer->recvArmed = false;
    if (cqe.res == -ENOBUFS) {
        noBuffers.fetch_add(1, std::memory_order_relaxed);
        buffers->widen();
    }
    if (cqe.res == 0) {
        peer->eof = true;
        if (!peer->closing && !peer->closeAfterFlush && peer->frames.midFrame()) {
            failPeer(*peer, "bad_frame", peer->frames.truncation());
        }
    } else if (cqe.res < 0 && cqe.res != -ENOBUFS && cqe.res != -ECANCELED) {
        // ECONNRESET and the like: nobody to answer.
        logDebug("admin socket: peer ", peer->id, " receive failed: ", errnoText(-cqe.res));
        beginClose(*peer);
        return;
    }
    // Disarmed (ring ran dry, CQ overflow, or a data CQE without MORE): re-arm after this batch
    // of completions has returned its buffers.
    if (!peer->recvArmed && peer->wantsInput() && !peer->rearmQueued) {
        peer->rearmQueued = true;
        rearm.push_back(peer);
    }
    finishIfDone(*peer);
}

void AdminServer::Impl::feed(Peer& peer, const char* data, std::size_t size) {
    if (peer.closing || peer.closeAfterFlush) return;
    const bool ok = peer.frames.feed(data, size);
    // The stall timer covers one frame from its first byte to its last.
    const std::uint64_t completed = peer.frames.framesCompleted();
    if (peer.frames.midFrame()) {
        if (!peer.frameTimer || completed != peer.framesSeen) {
            peer.frameTimer = true;
            peer.frameStarted = Clock::now();
        }
    } else {
        peer.frameTimer = false;
    }
    peer.framesSeen = completed;
    if (!ok) {
        // Answer what came before, in order, as far as the output bound allows: a peer that
        // queued thousands of frames without reading gets no more than that (it is closed).
        processFrames(peer);
        failPeer(peer, "bad_frame", peer.frames.error());
        return;
    }
    processFrames(peer);
}

void AdminServer::Impl::processFrames(Peer& peer) {
    while (!peer.closing && !peer.closeAfterFlush && peer.frames.hasFrame() &&
           peer.outputBytes < kOutputHighWater) {
        const std::string frame = peer.frames.popFrame();
        peer.lastRequest = Clock::now();
        admin::Dispatch dispatch = admin::dispatchFrame(frame, handle, peer.access);
        peer.lastRequest = Clock::now();  // the handler may have taken a while
        count(dispatch.command, admin::resultLabel(dispatch.response.error().code()));
        logAction(peer, dispatch);
        if (dispatch.closeAfter && allowHostileLog()) {
            logWarn("admin socket: closing peer ", peer.id, " uid ", peer.uid, " pid ", peer.pid,
                    ": ", dispatch.response.error().message());
        }
        queueOutput(peer, admin::encodeFrame(dispatch.response));
        if (dispatch.closeAfter) {
            peer.closeAfterFlush = true;
            stopReading(peer);
        }
    }
    if (!peer.closing && !peer.closeAfterFlush && peer.frames.hasFrame() && !peer.paused) {
        // The peer sends faster than it reads: stop reading until its output drains.
        peer.paused = true;
        if (peer.recvArmed && !peer.cancelledRecv) {
            peer.cancelledRecv = true;
            cancelOp(Op::Recv, peer);
        }
    }
}

void AdminServer::Impl::queueOutput(Peer& peer, std::string bytes) {
    peer.outputBytes += bytes.size();
    peer.output.push_back(std::move(bytes));
    if (!peer.sendInFlight) {
        peer.lastSendProgress = Clock::now();
        submitSend(peer);
    }
}

// Sends an ERROR_BAD_FRAME naming `problem`, then closes the peer once it is sent.
void AdminServer::Impl::failPeer(Peer& peer, const std::string& result,
                                 const std::string& problem) {
    if (peer.closing || peer.closeAfterFlush) return;
    count("frame", result);
    if (allowHostileLog()) {
        logWarn("admin socket: closing peer ", peer.id, " uid ", peer.uid, " pid ", peer.pid, ": ",
                problem);
    }
    peer.frameTimer = false;
    peer.frames.discardFrames();
    queueOutput(peer, admin::encodeFrame(admin::errorResponse(admin::ERROR_BAD_FRAME, problem)));
    peer.closeAfterFlush = true;
    stopReading(peer);
}

void AdminServer::Impl::stopReading(Peer& peer) {
    if (peer.recvArmed && !peer.cancelledRecv) {
        peer.cancelledRecv = true;
        cancelOp(Op::Recv, peer);
    }
}

void AdminServer::Impl::onSend(Peer& peer, int result) {
    peer.sendInFlight = false;
    if (peer.closing) return;
    if (result <= 0) {
        logDebug("admin socket: peer ", peer.id,
                 " send failed: ", result == 0 ? std::string("nothing sent") : errnoText(-result));
        beginClose(peer);
        return;
    }
    peer.lastSendProgress = Clock::now();
    auto sent = static_cast<std::size_t>(result);
    peer.outputBytes -= sent;
    peer.outputOffset += sent;
    if (peer.outputOffset == peer.output.front().size()) {
        peer.output.pop_front();
        peer.outputOffset = 0;
    }
    if (!peer.output.empty()) {
        submitSend(peer);
    }
    if (peer.paused && peer.outputBytes < kOutputLowWater) {
        peer.paused = false;
        processFrames(peer);
        if (peer.wantsInput() && !peer.recvArmed && !peer.rearmQueued) {
            peer.rearmQueued = true;
            rearm.push_back(&peer);
        }
    }
    finishIfDone(peer);
}

void AdminServer::Impl::finishIfDone(Peer& peer) {
    if (peer.closing || !peer.output.empty()) return;
    if (peer.closeAfterFlush || (peer.eof && !peer.frames.hasFrame())) beginClose(peer);
}

void AdminServer::Impl::beginClose(Peer& peer) {
    if (peer.closing) return;
    peer.closing = true;
    peer.frameTimer = false;
    if (peer.recvArmed && !peer.cancelledRecv) {
        peer.cancelledRecv = true;
        cancelOp(Op::Recv, peer);
    }
    if (peer.sendInFlight && !peer.cancelledSend) {
        peer.cancelledSend = true;
        cancelOp(Op::Send, peer);
    }
    closing.push_back(&peer);
}

// Frees closed peers once the kernel holds no request of theirs (their buffers and fd).
void AdminServer::Impl::reap() {
    auto done = std::partition(closing.begin(), closing.end(),
                               [](const Peer* peer) { return !peer->idle(); });
    for (auto it = done; it != closing.end(); ++it) {
        Peer* peer = *it;
        logDebug("admin socket: peer ", peer->id, " closed");
        const std::uint32_t slot = peer->slot;
        ++generations[slot];
        slots[slot].reset();
        freeSlots.push_back(slot);
        --peerCount;
    }
    closing.erase(done, closing.end());
}

// Stalled frames, idle peers and peers that stopped reading; returns ms until the next deadline.
int AdminServer::Impl::checkTimers(Clock::time_point now) {
    const auto stall = milliseconds(options.stallTimeoutMs);
    const auto idle = milliseconds(options.idleTimeoutMs);
    auto next = now + milliseconds(1000);
    for (auto& slot : slots) {
        if (!slot || slot->closing) continue;
        Peer& peer = *slot;
        if (peer.waiting()) {
            if (now - peer.lastRequest >= idle) {
                closeWithNotice(peer, "idle",
                                "closed: no complete request for " +
                                    std::to_string(options.idleTimeoutMs) + " ms");
                continue;
            }
            next = std::min(next, peer.lastRequest + idle);
        }
        if (peer.frameTimer && !peer.closeAfterFlush) {
            if (now - peer.frameStarted >= stall) {
                failPeer(peer, "stalled",
                         "frame incomplete after " + std::to_string(options.stallTimeoutMs) +
                             " ms: " + peer.frames.partialFrame());
            } else {
                next = std::min(next, peer.frameStarted + stall);
            }
        }
        if (peer.sendInFlight && !peer.closing) {
            if (now - peer.lastSendProgress >= stall) {
                count("send", "stalled");
                if (allowHostileLog()) {
                    logWarn("admin socket: closing peer ", peer.id, " uid ", peer.uid, " pid ",
                            peer.pid, ": it has not read its response for ", options.stallTimeoutMs,
                            " ms");
                }
                beginClose(peer);
            } else {
                next = std::min(next, peer.lastSendProgress + stall);
            }
        }
    }
    if (acceptBackoff) next = std::min(next, acceptRetryAt);
    flushHostileLog(now);
    if (logSuppressed > 0) next = std::min(next, logWindow + std::chrono::seconds(1));
    const auto wait = std::chrono::duration_cast<milliseconds>(next - now).count();
    return static_cast<int>(std::clamp<long long>(wait + 1, 1, 1000));
}

void AdminServer::Impl::dispatch(const io_uring_cqe& cqe) {
    const CompletionTag tag = CompletionTag::decode(io_uring_cqe_get_data64(&cqe));
    switch (tag.opAs<Op>()) {
        case Op::Accept:
            onAccept(cqe);
            break;
        case Op::Recv:
            onRecv(peerFor(tag), cqe);
            break;
        case Op::Send:
            if (Peer* peer = peerFor(tag)) onSend(*peer, cqe.res);
            break;
        case Op::Wake:
            if (!stopping.load(std::memory_order_acquire)) armWake();
            break;
        case Op::Cancel:
            break;
        default:
            if (auto id = BufferRing::bufferOf(cqe.flags); id && *id < buffers->entries()) {
                buffers->take(*id, 0);
                buffers->giveBack(*id);
            }
            break;
    }
}

void AdminServer::Impl::loop() {
    armAccept();
    armWake();
    int waitMs = 1000;
    while (!stopping.load(std::memory_order_acquire)) {
        const int rc = ring->submitAndWait(static_cast<unsigned>(waitMs));
        if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EBUSY && rc != -EAGAIN) {
            checkNeg(rc, "io_uring_submit_and_wait_timeout");
        }
        ring->drainCompletions([this](const io_uring_cqe& cqe) { dispatch(cqe); });

        // Buffers are back in the ring now: re-arm receives that ran dry (-ENOBUFS) or ended.
        for (Peer* peer : rearm) {
            peer->rearmQueued = false;
            if (peer->wantsInput() && !peer->recvArmed) armRecv(*peer);
        }
        rearm.clear();
        if (stopAcceptingAsked.load(std::memory_order_acquire) && !acceptStopped) {
            acceptStopped = true;
            socket->keepFile();
            if (acceptArmed) ops->cancelFd(socket->fd(), 0, tagOf(Op::Cancel));
        }
        const auto now = Clock::now();
        if (!acceptArmed && !acceptStopped) {
            if (!acceptBackoff) {
                armAccept();
            } else if (now >= acceptRetryAt) {
                acceptBackoff = false;
                armAccept();
            }
        }
        waitMs = checkTimers(now);
        reap();
        peersNow.store(peerCount, std::memory_order_release);
    }
}

void AdminServer::Impl::run(std::promise<void>& ready) noexcept {
    nameThisThread("sg-admin");
    try {
        setUpRing();
    } catch (...) {
        ready.set_exception(std::current_exception());
        return;
    }
    ready.set_value();
    try {
        loop();
    } catch (const std::exception& error) {
        logError("admin socket ", options.socketPath, ": ", error.what(),
                 "; the admin server stopped (the relay goes on)");
    }
    // On this thread: with a single-issuer ring only its maker may unregister the group. A recv
    // still armed then finds no group (-ENOBUFS) and no memory of ours.
    buffers.reset();
}

AdminServer::AdminServer(AdminServerOptions options, AdminHandler& handler, UniqueFd adopted)
    : impl_(std::make_unique<Impl>(std::move(options), handler, std::move(adopted))) {}

AdminServer::~AdminServer() {
    stop();
}

void AdminServer::start() {
    if (impl_->started) return;
    impl_->started = true;
    std::promise<void> ready;
    std::future<void> setUp = ready.get_future();
    impl_->thread = std::thread([impl = impl_.get(), &ready] { impl->run(ready); });
    try {
        setUp.get();
    } catch (...) {
        impl_->thread.join();  // it returns right after reporting
        throw;
    }
}

void AdminServer::stop() {
    if (!impl_ || !impl_->thread.joinable()) return;
    impl_->stopping.store(true, std::memory_order_release);
    const std::uint64_t one = 1;
    [[maybe_unused]] ssize_t written = ::write(impl_->wakeFd.get(), &one, sizeof(one));
    impl_->thread.join();
}

int AdminServer::listenFd() const noexcept {
    return impl_->socket->fd();
}

void AdminServer::stopAccepting() noexcept {
    impl_->stopAcceptingAsked.store(true, std::memory_order_release);
    const std::uint64_t one = 1;
    [[maybe_unused]] ssize_t written = ::write(impl_->wakeFd.get(), &one, sizeof(one));
}

void AdminServer::waitForPeersToLeave(std::chrono::milliseconds timeout) const {
    const auto deadline = Clock::now() + timeout;
    while (impl_->thread.joinable() && impl_->peersNow.load(std::memory_order_acquire) > 0 &&
           Clock::now() < deadline)
        std::this_thread::sleep_for(milliseconds(10));
}

const std::string& AdminServer::socketPath() const noexcept {
    return impl_->options.socketPath;
}

std::uint64_t AdminServer::recvBufferExhaustions() const noexcept {
    return impl_->noBuffers.load(std::memory_order_relaxed);
}

std::map<std::pair<std::string, std::string>, std::uint64_t> AdminServer::requestCounts() const {
    std::lock_guard lock(impl_->countsMutex);
    return impl_->counts;
}

}  // namespace splicegate
