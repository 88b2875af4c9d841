#include "relay/Worker.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include "common/Error.h"
#include "common/Log.h"
#include "common/ThreadName.h"
#include "datapath/DirectAuditLog.h"
#include "datapath/Failpoints.h"
#include "datapath/SegmentAuditLog.h"
#include "relay/AccessLog.h"
#include "relay/SocketOptions.h"

namespace splicegate {
namespace {
constexpr unsigned kRingEntries = 4096;
constexpr unsigned kMaxBoundIoWorkers = 2;
// Chain engine only: splices run in io-wq (docs/kernel-notes.md §1). They are non-blocking, so
// a few threads per ring keep up; the cap keeps a flood of connections from becoming a flood of
// threads.
constexpr unsigned kMaxUnboundIoWorkers = 4;
constexpr std::size_t kMaxIdlePipes = 16;
// A worker keeps a new connection while it owns fewer than this many more than the least busy
// worker: 64 connections over 2 workers end up at most 33/31, and only about one accept in
// several is handed over (each hand-off costs the other worker a wake-up).
constexpr long kHandOffSlack = 2;
// The buffer ring's window halves at most once per interval: a burst's buffers are released
// within a few intervals of its end, and a steady load never sees its window shrink under it.
constexpr auto kBufferTrimInterval = std::chrono::seconds(5);

std::uint64_t timerPeriodMs(const WorkerSettings& settings) {
    std::uint64_t period = 1000;
    if (!settings.audit.dir.empty() && settings.audit.durability != AuditDurability::Strict)
        period = std::max<std::uint64_t>(1, settings.audit.fsyncIntervalMs);
    for (std::uint64_t timeout : {settings.relay.idleTimeoutMs, settings.relay.halfClosedTimeoutMs})
        if (timeout > 0 && timeout / 4 < period) period = std::max<std::uint64_t>(timeout / 4, 10);
    return period;
}

// The sender of direction `d` has sent its FIN (read by the flow, or still queued behind bytes
// the flow could not take: its socket, in `sourceState`, is in CLOSE_WAIT), and bytes of `d` are
// still undelivered (in the flow, or in the sink's send queue). Only the receiver can end it.
bool senderGoneUndelivered(const ConnectionIo& io, Direction d, int sourceState) noexcept {
    const FlowIo& flow = io.flows[static_cast<int>(d)];
    if (!flow.sourceEnded() && sourceState != TCP_CLOSE_WAIT) return false;
    return !flow.finished() || bytesUnsent(io.sinkFd(d)) > 0;
}

__kernel_timespec toTimespec(std::uint64_t ms) noexcept {
    __kernel_timespec spec{};
    spec.tv_sec = static_cast<long long>(ms / 1000);
    spec.tv_nsec = static_cast<long long>(ms % 1000) * 1000000;
    return spec;
}

// The one place the audit writer is chosen (--audit-writer).
std::unique_ptr<AuditLog> makeAuditLog(const WorkerSettings& settings,
                                       std::unique_ptr<audit::AuditWriter> writer, Ring& ring) {
    // Index records are written after their chunk went on: their space is taken first, so a
    // full disk refuses the chunk instead of tearing the index (both writers).
    bool direct = settings.audit.writer == AuditWriterKind::Direct;
    if (!writer->reserveSpaceAhead(direct))
        logWarn("audit: ", settings.audit.dir, " cannot allocate ahead (no fallocate)",
                direct ? ": under fail-closed every audited chunk waits for its data to be durable"
                       : "");
    if (!direct) return std::make_unique<SegmentAuditLog>(std::move(writer), ring);
    audit::DirectLogOptions options;
    options.bufferBytes = settings.audit.bufferBytes;
    options.writeDelay = std::chrono::milliseconds(failpointAuditWriteDelayMs());
    options.label = "audit " + settings.audit.dir;
    return std::make_unique<DirectAuditLog>(std::move(writer), ring, options);
}

AuditPolicy auditPolicy(const WorkerSettings& settings, const AuditLog& log) noexcept {
    AuditPolicy policy;
    policy.failClosed = settings.audit.onError == AuditOnError::FailClosed;
    // Fail-closed never forwards a byte the log then loses to a full disk. A writer that takes
    // its disk space before accepting a chunk (the splice writer's splice, the direct writer's
    // space taken ahead) fails at once; one that cannot must hold each chunk until durable,
    // whatever the durability mode.
    bool holdUntilDurable = policy.failClosed && log.mayLoseAcceptedBytesToFullDisk();
    policy.strict = settings.audit.durability == AuditDurability::Strict || holdUntilDurable;
    policy.groupCommit = settings.audit.durability != AuditDurability::None || holdUntilDurable;
    return policy;
}

}  // namespace

Worker::Worker(unsigned index, RelayContext& context)
    : index_(index),
      context_(context),
      pipePool_(context.pipeBudget, context.settings.datapath.pipeSize, kMaxIdlePipes) {
    controlFd_.reset(checkSys(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), "eventfd"));
}

Worker::~Worker() {
    requestStop();
    join();
}

void Worker::join() {
    if (thread_.joinable()) thread_.join();
}

std::future<void> Worker::start() {
    auto started = std::make_shared<std::promise<void>>();
    auto future = started->get_future();
    thread_ = std::thread([this, started] {
        nameThisThread("sg-worker-" + std::to_string(index_));
        run(*started);
    });
    return future;
}

void Worker::signal(std::uint32_t request) noexcept {
    requests_.fetch_or(request, std::memory_order_release);
    std::uint64_t one = 1;
    [[maybe_unused]] auto written = ::write(controlFd_.get(), &one, sizeof one);
}

void Worker::run(std::promise<void>& started) {
    try {
        setUp();
        started.set_value();
    } catch (...) {
        started.set_exception(std::current_exception());
        finished_.store(true, std::memory_order_release);
        return;
    }
    loop();
    // Pipes and fds are released by the destructors; the ring goes last.
    if (audit_) audit_->shutdown();  // the tail made durable before exiting
    connections_.clear();
    listeners_.clear();
    driver_.reset();
    lanes_.reset();  // unregisters its buffer ring: before the ring goes
    audit_.reset();
    mover_.reset();
    ring_.reset();
    finished_.store(true, std::memory_order_release);
}

void Worker::setUp() {
    // The ring belongs to this thread: SINGLE_ISSUER binds it to its creator, and io-wq limits
    // are per submitting thread.
    const auto& settings = context_.settings;
    RingOptions ringOptions;
    ringOptions.sqpoll = settings.datapath.sqpoll;
    ring_ =
        std::make_unique<Ring>(kRingEntries, kMaxBoundIoWorkers, kMaxUnboundIoWorkers, ringOptions);
    if (!settings.audit.dir.empty()) {
        auto first = index_ < context_.auditStart.firstSegment.size()
                         ? context_.auditStart.firstSegment[index_]
                         : 1;
        auto writer = std::make_unique<audit::AuditWriter>(
            settings.audit.dir, index_, first, settings.audit.segmentBytes,
            &context_.nextConnectionId, context_.auditStart.chainKey, &context_.sealHeads);
        auto log = makeAuditLog(settings, std::move(writer), *ring_);
        auto policy = auditPolicy(settings, *log);
        audit_ = std::make_unique<AuditTap>(std::move(log), policy, *stats_);
    }
    mover_ = makeMover(settings.datapath.engine(), *ring_);
    if (settings.datapath.lane != Lane::Splice)
        lanes_ = std::make_unique<BufferLaneDriver>(
            *ring_->raw(), settings.datapath.bufferRingEntries, settings.datapath.bufferSize,
            settings.datapath.lane == Lane::Auto, audit_.get(), *stats_,
            static_cast<unsigned>(
                std::min<std::uint64_t>(settings.relay.maxConnections, UINT32_MAX)));
    driver_ = std::make_unique<FlowDriver>(*mover_, pipePool_, audit_.get(), *stats_, lanes_.get());
    connectTimeout_ = toTimespec(settings.relay.connectTimeoutMs);
    now_ = std::chrono::steady_clock::now();
    applyRoutes(true);
    armControl();
    armTimer();
}

void Worker::loop() {
    while (!(stopping_ && liveConnections_ == 0) && !(draining_ && liveConnections_ == 0)) {
        accessLines_.flush();
        // One submission per turn: everything prepared while handling the last batch goes in
        // here (connects, polls, re-armed accepts, cancels).
        // A non-blocking enter first (it submits and runs the deferred task work): under load
        // completions are nearly always there by then, and going straight to a blocking wait
        // measured 8 % fewer rr requests/s (more sleeps and wake-ups). Only an idle ring waits.
        int rc = ring_->submitAndPeek();
        // Nor while a connect waits for its client watch (watchSlowConnects): that is a turn.
        if (deferred_.empty() && watchDue_.empty() && !ring_->completionsReady())
            rc = ring_->submitAndWait(1000);
        if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EBUSY)
            logError("worker ", index_, ": io_uring_submit_and_wait: ", errnoText(rc));
        now_ = std::chrono::steady_clock::now();
        driver_->setNow(now_);
        ring_->drainCompletions([this](const io_uring_cqe& cqe) { handleCompletion(cqe); });
        runDeferred();
        watchSlowConnects();
        if (lanes_)
            lanes_->rearmParked([this](CompletionTag tag) -> ConnectionIo* {
                Connection* c = lookup(tag.slot, tag.generation);
                return c != nullptr ? &c->io : nullptr;
            });
        if (audit_) {
            if (auto outcome = audit_->afterTurn()) applySync(*outcome);
        }
    }
    accessLines_.flush();
}

void Worker::handleCompletion(const io_uring_cqe& cqe) {
    auto tag = CompletionTag::decode(cqe.user_data);
    if (AuditTap::isAuditOp(tag.op)) {
        if (auto outcome = audit_->complete(tag, cqe.res)) applySync(*outcome);
        return;
    }
    if (isMoverOp(tag.op)) {
        Connection* c = lookup(tag.slot, tag.generation);
        if (c == nullptr) {
            driver_->dropCompletion(tag, MoveCompletion{cqe.res, cqe.flags});
            return;
        }
        act(*c, static_cast<Direction>(tag.direction),
            driver_->complete(c->io, tag, MoveCompletion{cqe.res, cqe.flags}));
        if (c->state == ConnectionState::Closing && c->operationsInFlight() == 0)
            releaseConnection(*c);
        return;
    }
    switch (tag.opAs<Op>()) {
        case Op::Ignore:
            return;
        case Op::Control:
            handleControl();
            return;
        case Op::Timer:
            onTimer();
            return;
        case Op::Accept:
            if (tag.slot < listeners_.size() && listeners_[tag.slot].generation == tag.generation)
                onAccept(tag.slot, tag.direction, cqe);
            return;
        case Op::Connect:
        case Op::ConnectTimeout:
        case Op::ClientWatch: {
            Connection* c = lookup(tag.slot, tag.generation);
            if (c == nullptr) return;
            if (tag.opAs<Op>() == Op::ClientWatch)
                onClientWatch(*c, cqe.res);
            else
                --c->connectOps;
            if (tag.opAs<Op>() == Op::Connect) onConnect(*c, cqe.res);
            if (c->state == ConnectionState::Closing && c->operationsInFlight() == 0)
                releaseConnection(*c);
            return;
        }
    }
}

// ---- control and timers ---------------------------------------------------------------------

void Worker::armControl() {
    auto* sqe = ring_->sqe();
    io_uring_prep_read(sqe, controlFd_.get(), &controlValue_, sizeof controlValue_, 0);
    io_uring_sqe_set_data64(sqe, CompletionTag::make(Op::Control).encode());
}

void Worker::handleControl() {
    auto requests = requests_.exchange(0, std::memory_order_acquire);
    if (requests & kTasks) runTasks();
    if (requests & kStop) {
        stopping_ = true;
        for (std::uint32_t i = 0; i < listeners_.size(); ++i) closeListener(i);
        for (auto& c : connections_)
            if (c && c->state != ConnectionState::Closing && c->id() != 0)
                closeConnection(*c, CloseReason::Shutdown, false);
    } else if (requests & kDrain) {
        draining_ = true;
        for (std::uint32_t i = 0; i < listeners_.size(); ++i) closeListener(i);
    } else if (requests & kReload) {
        if (!draining_) applyRoutes(false);
    }
    armControl();
}

void Worker::armTimer() {
    timerInterval_ = toTimespec(timerPeriodMs(context_.settings));
    auto* sqe = ring_->sqe();
    io_uring_prep_timeout(sqe, &timerInterval_, 0, 0);
    io_uring_sqe_set_data64(sqe, CompletionTag::make(Op::Timer).encode());
}

void Worker::onTimer() {
    if (audit_) {
        if (auto outcome = audit_->tick()) applySync(*outcome);
    }
    closeTimedOut();
    if (lanes_ && now_ - lastBufferTrim_ >= kBufferTrimInterval) {
        lanes_->trim();
        lastBufferTrim_ = now_;
    }
    // A listener whose multishot accept ended on an error (EMFILE...) is re-armed here, not in a
    // tight loop.
    for (std::uint32_t i = 0; i < listeners_.size(); ++i)
        if (listeners_[i].fd && !draining_ && !stopping_) armAccepts(i);
    armTimer();
}

// No byte either way for the idle timeout; or, sooner, a direction whose sender has gone while
// its receiver takes nothing (it would hold its pipe and slot until the idle timeout).
void Worker::closeTimedOut() {
    using std::chrono::milliseconds;
    const auto idle = milliseconds(context_.settings.relay.idleTimeoutMs);
    const auto halfClosed = milliseconds(context_.settings.relay.halfClosedTimeoutMs);
    for (auto& c : connections_) {
        if (!c || c->id() == 0 || c->state != ConnectionState::Relaying) continue;
        const auto quiet = now_ - c->io.lastActivity;
        if (idle.count() > 0 && quiet >= idle) {
            closeConnection(*c, CloseReason::IdleTimeout, false);
            continue;
        }
        // The checks cost system calls: a quiet connection is looked at once per half-closed
        // timeout, not on every tick (the audit's tick may come every few ms).
        if (halfClosed.count() == 0 || quiet < halfClosed || now_ < c->stallCheckAfter) continue;
        c->stallCheckAfter = now_ + halfClosed;
        const int clientState = tcpStateOf(c->io.client.get());
        const int upstreamState = tcpStateOf(c->io.upstream.get());
        // A peer that reset while its flows waited on the other side: nothing polls its socket
        // then, and only the idle timeout would notice. One that closed in order may still have
        // bytes to deliver: its flow reads them and the EOF.
        if (closedByReset(c->io.client.get(), clientState)) {
            closeConnection(*c, CloseReason::ClientReset, true);
        } else if (closedByReset(c->io.upstream.get(), upstreamState)) {
            closeConnection(*c, CloseReason::UpstreamReset, true);
        } else if (senderGoneUndelivered(c->io, Direction::ClientToUpstream, clientState) ||
                   senderGoneUndelivered(c->io, Direction::UpstreamToClient, upstreamState)) {
            logDebug("connection ", c->id(),
                     ": one side sent its FIN and the other has taken nothing for ",
                     halfClosed.count(), " ms (--half-closed-timeout-ms)");
            closeConnection(*c, CloseReason::IdleTimeout, false);
        }
    }
}

// ---- listeners ------------------------------------------------------------------------------

void Worker::applyRoutes(bool failOnError) {
    auto table = context_.routes();
    if (table == appliedRoutes_) return;
    // Closed first, so a listen address moved to another route can be bound again.
    for (std::uint32_t i = 0; i < listeners_.size(); ++i) {
        auto& listener = listeners_[i];
        if (!listener.fd) continue;
        const Route* replacement = nullptr;
        for (const auto& route : *table)
            if (route->config.name == listener.route->config.name) replacement = route.get();
        if (replacement == nullptr ||
            !(replacement->config.listen == listener.route->config.listen))
            closeListener(i);
    }
    for (const auto& route : *table) {
        bool found = false;
        for (auto& listener : listeners_) {
            if (listener.fd && listener.route->config.name == route->config.name) {
                listener.route = route;  // new upstreams apply to new connections only
                found = true;
            }
        }
        if (found) continue;
        try {
            openListener(route);
        } catch (const std::exception& error) {
            if (failOnError) throw;
            logError("route ", route->config.name, ": ", error.what());
        }
    }
    appliedRoutes_ = table;
}

void Worker::openListener(const std::shared_ptr<const Route>& route) {
    const auto& address = route->config.listen;
    // Bound by the relay (ListenerSockets), so a reload fails before any listener changes.
    UniqueFd fd = context_.listenerSockets()->duplicateFor(index_, address);
    std::uint32_t index = 0;
    while (index < listeners_.size() && listeners_[index].fd) ++index;
    if (index == listeners_.size()) listeners_.emplace_back();
    auto& listener = listeners_[index];
    listener.route = route;
    listener.fd = std::move(fd);
    ++listener.generation;
    armAccepts(index);
    if (index_ == 0) logInfo("route ", route->config.name, ": listening on ", address);
}

void Worker::closeListener(std::uint32_t index) {
    auto& listener = listeners_[index];
    if (!listener.fd) return;
    auto* sqe = ring_->sqe();
    io_uring_prep_cancel_fd(sqe, listener.fd.get(), IORING_ASYNC_CANCEL_ALL);
    io_uring_sqe_set_data64(sqe, CompletionTag::make(Op::Ignore).encode());
    ring_->submit();        // before the fd number can be reused
    ++listener.generation;  // late accept completions of the old socket are ignored
    listener.fd.reset();
    for (std::uint8_t which = 0; which < kAcceptsPerListener; ++which)
        listener.accepts[which].armed = false;
    if (index_ == 0)
        logInfo("route ", listener.route->config.name, ": stopped listening on ",
                listener.route->config.listen);
}

void Worker::armAccepts(std::uint32_t index) {
    for (std::uint8_t which = 0; which < kAcceptsPerListener; ++which)
        if (!listeners_[index].accepts[which].armed) armAccept(index, which);
}

void Worker::armAccept(std::uint32_t index, std::uint8_t which) {
    auto& listener = listeners_[index];
    auto& slot = listener.accepts[which];
    slot.length = sizeof slot.address;
    auto* sqe = ring_->sqe();
    io_uring_prep_accept(sqe, listener.fd.get(), reinterpret_cast<sockaddr*>(&slot.address),
                         &slot.length, SOCK_NONBLOCK | SOCK_CLOEXEC);
    io_uring_sqe_set_data64(
        sqe, CompletionTag::make(Op::Accept, index, listener.generation, which).encode());
    slot.armed = true;
}

void Worker::onAccept(std::uint32_t index, std::uint8_t which, const io_uring_cqe& cqe) {
    auto& listener = listeners_[index];
    auto& slot = listener.accepts[which];
    slot.armed = false;
    if (cqe.res < 0) {  // EMFILE...: re-armed by the timer, not in a tight loop
        if (cqe.res != -ECANCELED)
            logWarn("route ", listener.route->config.name, ": accept: ", errnoText(cqe.res));
        return;
    }
    UniqueFd client(cqe.res);
    if (draining_ || stopping_) return;
    auto peer =
        SocketAddress::fromSockaddr(reinterpret_cast<const sockaddr*>(&slot.address), slot.length);
    armAccept(index, which);
    auto active = context_.activeConnections.fetch_add(1, std::memory_order_relaxed);
    if (active >= context_.settings.relay.maxConnections) {
        context_.activeConnections.fetch_sub(1, std::memory_order_relaxed);
        stats_->routes[listener.route->statsIndex]
            .refused[static_cast<std::size_t>(RefuseReason::MaxConnections)]
            .add(1);
        if (now_ - lastRefusalLog_ > std::chrono::seconds(1)) {
            logWarn("route ", listener.route->config.name,
                    ": refusing connections: ", context_.settings.relay.maxConnections,
                    " connections open (--max-connections)");
            lastRefusalLog_ = now_;
        }
        return;  // closing the accepted socket is the refusal
    }
    // Released in releaseConnection().
    if (!context_.sourceLimiter.tryAcquire(peer)) {
        context_.activeConnections.fetch_sub(1, std::memory_order_relaxed);
        stats_->routes[listener.route->statsIndex]
            .refused[static_cast<std::size_t>(RefuseReason::MaxConnectionsPerSource)]
            .add(1);
        logWarnLimited("per-source refusals", "route ", listener.route->config.name, ": refusing ",
                       peer, ": ", context_.sourceLimiter.limit(),
                       " connections open from it (--max-connections-per-source)");
        return;  // closing the accepted socket is the refusal
    }
    if (handOff(listener.route, client, peer)) return;
    context_.workerLoads->add(index_, 1);  // until releaseConnection()
    startAccepted(listener.route, std::move(client), peer);
}

// Reuseport spreads new connections at random (relay/WorkerLoads.h): a worker that owns
// kHandOffSlack connections more than the least busy one passes a new connection to it. The
// admission (--max-connections, per-source limit) was done here and stays booked; the other
// worker relays it as if it had accepted it.
bool Worker::handOff(const std::shared_ptr<const Route>& route, UniqueFd& client,
                     const SocketAddress& peer) {
    auto target = context_.workerLoads->lighterThan(index_, kHandOffSlack);
    if (!target) return false;
    Worker* to = context_.workers[*target];
    context_.workerLoads->add(*target, 1);  // booked now: a burst spreads, not piles up there
    // Shared, so that a task dropped by a worker that stopped still closes the socket.
    auto socket = std::make_shared<UniqueFd>(std::move(client));
    if (to->post([to, route, socket, peer] { to->adopt(route, std::move(*socket), peer); }))
        return true;
    context_.workerLoads->add(*target, -1);
    client = std::move(*socket);
    return false;
}

void Worker::adopt(const std::shared_ptr<const Route>& route, UniqueFd client,
                   const SocketAddress& peer) {
    if (draining_ || stopping_) {  // closing the socket is the refusal
        releaseAdmission(peer);
        return;
    }
    startAccepted(route, std::move(client), peer);
}

void Worker::startAccepted(const std::shared_ptr<const Route>& route, UniqueFd client,
                           const SocketAddress& peer) {
    Connection* c = allocateConnection();
    c->io.id = context_.nextConnectionId.fetch_add(1, std::memory_order_relaxed);
    if (auto* lease = context_.auditStart.idLease) lease->cover(c->io.id);
    c->route = route;
    c->io.counters = &routeStats(*c);
    routeStats(*c).accepted.add(1);
    routeStats(*c).active.add(1);
    c->io.client = std::move(client);  // TCP_NODELAY inherited from the listener
    c->clientAddress = peer;
    c->opened = c->io.lastActivity = now_;
    startConnect(*c);
    if (c->state == ConnectionState::Connecting)
        watchSoon_.push_back(CompletionTag::make(Op::ClientWatch, c->io.slot, c->io.generation));
}

// ---- connections ----------------------------------------------------------------------------

Connection* Worker::allocateConnection() {
    std::uint32_t slot;
    if (!freeSlots_.empty()) {
        slot = freeSlots_.back();
        freeSlots_.pop_back();
    } else {
        slot = static_cast<std::uint32_t>(connections_.size());
        connections_.push_back(nullptr);
    }
    auto previousGeneration = connections_[slot] ? connections_[slot]->io.generation : 0;
    connections_[slot] = std::make_unique<Connection>();
    auto* c = connections_[slot].get();
    c->io.slot = slot;
    c->io.generation = static_cast<std::uint16_t>(previousGeneration + 1);
    ++liveConnections_;
    return c;
}

Connection* Worker::lookup(std::uint32_t slot, std::uint16_t generation) noexcept {
    if (slot >= connections_.size()) return nullptr;
    auto* c = connections_[slot].get();
    if (c == nullptr || c->id() == 0 || c->io.generation != generation) return nullptr;
    return c;
}

void Worker::startConnect(Connection& c) {
    // The route's pool picks: round robin over healthy upstreams, probes of down ones.
    auto pick = c.route->pool->pick();
    if (!pick) {
        logWarnLimited("no upstream address on route " + c.route->config.name, "route ",
                       c.route->config.name, ": no upstream has an address yet (connection ",
                       c.id(), " closed)");
        closeConnection(c, CloseReason::UpstreamUnreachable, false);
        return;
    }
    c.upstreamIndex = pick->upstream;
    c.upstreamAddress = pick->address;
    int fd = ::socket(c.upstreamAddress.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        logWarn("route ", c.route->config.name, ": socket for ", c.upstreamAddress, ": ",
                errnoText(errno));
        closeConnection(c, CloseReason::Error, false);
        return;
    }
    c.io.upstream.reset(fd);
    if (int rc = setNoDelay(fd); rc < 0)
        logDebug("connection ", c.id(), ": TCP_NODELAY: ", errnoText(-rc));
    // Checked at start (congestionControlProblems): a failure here is the kernel's, and the
    // connection can go on with the system's default.
    const auto& congestion = context_.settings.relay.upstreamCongestion;
    if (int rc = setCongestionControl(fd, congestion); rc < 0)
        logWarnLimited("upstream-tcp-congestion", "route ", c.route->config.name,
                       ": TCP_CONGESTION ", congestion, " for ", c.upstreamAddress, ": ",
                       errnoText(-rc), "; the system's default is used");
    // A client that has spoken already: its bytes go out as soon as the handshake is done, and
    // the handshake's last ACK can ride on them, one packet fewer. One that has not may be
    // waiting for a server that speaks first, whose accept must not wait for that ACK.
    c.upstreamDelaysAcks = context_.settings.relay.delayedAck &&
                           bytesWaiting(c.io.client.get()) > 0 && enterDelayedAckMode(fd) == 0;
    ++c.connectAttempts;
    auto* sqe = ring_->sqe();
    io_uring_prep_connect(sqe, fd, c.upstreamAddress.get(), c.upstreamAddress.length());
    io_uring_sqe_set_data64(sqe,
                            CompletionTag::make(Op::Connect, c.io.slot, c.io.generation).encode());
    sqe->flags |= IOSQE_IO_LINK;
    sqe = ring_->sqe();
    io_uring_prep_link_timeout(sqe, &connectTimeout_, 0);
    io_uring_sqe_set_data64(
        sqe, CompletionTag::make(Op::ConnectTimeout, c.io.slot, c.io.generation).encode());
    c.connectOps += 2;
}

void Worker::watchSlowConnects() {
    for (auto tag : watchDue_) {
        Connection* c = lookup(tag.slot, tag.generation);
        if (c != nullptr && c->state == ConnectionState::Connecting && !c->watchingClient)
            watchClient(*c);
    }
    watchDue_.swap(watchSoon_);
    watchSoon_.clear();
}

void Worker::watchClient(Connection& c) {
    auto* sqe = ring_->sqe();
    io_uring_prep_poll_add(sqe, c.io.client.get(), POLLERR | POLLHUP);
    io_uring_sqe_set_data64(sqe, clientWatchTag(c));
    c.watchingClient = true;
}

std::uint64_t Worker::clientWatchTag(const Connection& c) noexcept {
    return CompletionTag::make(Op::ClientWatch, c.io.slot, c.io.generation).encode();
}

// Whatever the watch saw after the connect ended is the data path's to find. io_uring also
// reports POLLRDHUP: a client that sent its FIN still wants its bytes relayed, so that ends the
// watch without a verdict (a re-armed poll would fire again at once).
void Worker::onClientWatch(Connection& c, int result) {
    c.watchingClient = false;
    if (c.state != ConnectionState::Connecting || result <= 0 ||
        (result & (POLLERR | POLLHUP)) == 0)
        return;
    logDebug("connection ", c.id(), ": client ", c.clientAddress,
             " left while its upstream connect ran: connect cancelled");
    closeConnection(c, CloseReason::ClientReset, false);
}

void Worker::onConnect(Connection& c, int result) {
    if (c.state != ConnectionState::Connecting) return;
    c.route->pool->report(c.upstreamIndex, result == 0);
    if (result == 0) {
        if (c.watchingClient) {
            auto* sqe = ring_->sqe();
            io_uring_prep_poll_remove(sqe, clientWatchTag(c));
            io_uring_sqe_set_data64(sqe, CompletionTag::make(Op::Ignore).encode());
        }
        // Unless startConnect did it already (the client had spoken), here, after the handshake:
        // in delayed-ACK mode while connecting, the socket would also hold back the handshake's
        // last ACK, and a server that speaks first would wait for it.
        if (context_.settings.relay.delayedAck && !c.upstreamDelaysAcks) {
            if (int rc = enterDelayedAckMode(c.io.upstream.get()); rc < 0)
                logDebug("connection ", c.id(), ": TCP_QUICKACK: ", errnoText(-rc));
        }
        startRelaying(c);
        return;
    }
    const char* why = result == -ECANCELED ? "timed out" : nullptr;
    logWarnLimited("connect failures on route " + c.route->config.name, "route ",
                   c.route->config.name, ": connect to upstream ", c.upstreamAddress, ": ",
                   why ? why : errnoText(result).c_str(), " (connection ", c.id(), ")");
    c.io.upstream.reset();  // the linked timeout's completion may still come; it names no fd
    routeStats(c).connectFailures.add(1);
    if (c.connectAttempts < c.route->pool->addressCount()) {
        startConnect(c);
        return;
    }
    logWarnLimited("unreachable on route " + c.route->config.name, "route ", c.route->config.name,
                   ": no upstream reachable for connection ", c.id(), " from ", c.clientAddress);
    closeConnection(c, CloseReason::UpstreamUnreachable, false);
}

void Worker::startRelaying(Connection& c) {
    c.state = ConnectionState::Relaying;
    c.io.relaying = true;
    if (audit_ && c.route->config.audit) {
        auto action = audit_->open(c.io, c.route->config.name, c.clientAddress.toString(),
                                   c.upstreamAddress.toString());
        if (action == AuditAction::Close) {
            closeConnection(c, CloseReason::AuditError, true);
            return;
        }
    }
    logDebug("connection ", c.id(), ": ", c.clientAddress, " -> ", c.upstreamAddress, " (route ",
             c.route->config.name, ")");
    if (!driver_->start(c.io)) closeConnection(c, CloseReason::Error, true);  // out of memory
}

// Acts on the data path's verdict for one flow of `c`.
void Worker::act(Connection& c, Direction d, const Verdict& verdict) {
    switch (verdict.action) {
        case Verdict::Action::Wait:
            return;
        case Verdict::Action::Yield:
            deferred_.push_back(c.io.tag(d));
            return;
        case Verdict::Action::Close:
            closeConnection(c, verdict.reason, verdict.resetPeers);
            return;
    }
}

void Worker::closeConnection(Connection& c, CloseReason reason, bool resetPeers) {
    if (c.state == ConnectionState::Closing) return;
    c.state = ConnectionState::Closing;
    c.io.relaying = false;
    c.closeReason = reason;
    bool pending = c.operationsInFlight() > 0;
    for (auto* fd : {&c.io.client, &c.io.upstream}) {
        if (!*fd || !pending) continue;
        auto* sqe = ring_->sqe();
        io_uring_prep_cancel_fd(sqe, fd->get(), IORING_ASYNC_CANCEL_ALL);
        io_uring_sqe_set_data64(sqe, CompletionTag::make(Op::Ignore).encode());
    }
    // The cancels go in with the loop's next submission: the fds stay open until every
    // operation naming them has completed (a queued linked SQE resolves its fd only when it is
    // issued, and must never meet a reused number), so no fd number can be reused before.
    for (auto* fd : {&c.io.client, &c.io.upstream}) {
        if (!*fd) continue;
        if (resetPeers) {
            // RST goes out when the fd is closed; without the option, a FIN does.
            if (int rc = armReset(fd->get()); rc < 0)
                logDebug("connection ", c.id(), ": SO_LINGER: ", errnoText(-rc));
        } else if (pending) {
            ::shutdown(fd->get(), SHUT_RDWR);  // FIN now, not when the last operation ends
        }
    }
    if (!pending) releaseConnection(c);  // closed now: FIN (or RST) goes out with the close
}

void Worker::releaseConnection(Connection& c) {
    if (c.id() == 0) return;  // already released
    if (audit_) audit_->close(c.io, toString(c.closeReason));
    c.io.client.reset();
    c.io.upstream.reset();
    driver_->release(c.io);
    auto lifetime = std::chrono::duration_cast<std::chrono::milliseconds>(now_ - c.opened);
    logDebug("connection ", c.id(), " closed (", toString(c.closeReason), ") after ",
             lifetime.count(), " ms: c2u ", c.io.at(Direction::ClientToUpstream).bytesForwarded(),
             " B, u2c ", c.io.at(Direction::UpstreamToClient).bytesForwarded(), " B");
    if (context_.settings.relay.accessLog)
        accessLines_.add(
            LogLevel::Info,
            formatAccessLine({c.route->config.name, c.id(), c.clientAddress, c.upstreamAddress,
                              c.io.at(Direction::ClientToUpstream).bytesForwarded(),
                              c.io.at(Direction::UpstreamToClient).bytesForwarded(),
                              static_cast<std::uint64_t>(lifetime.count()), c.closeReason}));
    releaseAdmission(c.clientAddress);
    routeStats(c).closed[static_cast<std::size_t>(c.closeReason)].add(1);
    routeStats(c).active.sub(1);
    c.io.id = 0;
    c.route.reset();
    freeSlots_.push_back(c.io.slot);
    --liveConnections_;
}

// What onAccept() booked for a connection this worker owns: its place under --max-connections
// and the per-source limit, and its count in the spread over the workers.
void Worker::releaseAdmission(const SocketAddress& peer) {
    context_.workerLoads->add(index_, -1);
    context_.sourceLimiter.release(peer);
    context_.activeConnections.fetch_sub(1, std::memory_order_relaxed);
}

// A group commit ended (or could not start): its decisions applied to the connections.
void Worker::applySync(const SyncOutcome& outcome) {
    if (outcome.closeUndurable) {
        for (auto& c : connections_)
            if (c && c->id() != 0 && audit_->lostBySyncFailure(c->io))
                closeConnection(
                    *c, outcome.writeFailed ? CloseReason::AuditError : CloseReason::AuditSyncError,
                    true);
    }
    for (const auto& flow : outcome.roomFreed) {
        Connection* c = lookup(flow.slot, flow.generation);
        if (c == nullptr || c->state != ConnectionState::Relaying) continue;
        auto d = static_cast<Direction>(flow.direction);
        act(*c, d, driver_->drive(c->io, d));
    }
    for (const auto& flow : outcome.resume) {
        Connection* c = lookup(flow.slot, flow.generation);
        if (c == nullptr || c->state != ConnectionState::Relaying) continue;
        auto d = static_cast<Direction>(flow.direction);
        act(*c, d, driver_->durable(c->io, d));
    }
}

void Worker::runDeferred() {
    if (deferred_.empty()) return;
    auto batch = std::move(deferred_);
    deferred_.clear();
    for (const auto& flow : batch) {
        Connection* c = lookup(flow.slot, flow.generation);
        if (c == nullptr || c->state != ConnectionState::Relaying) continue;
        auto d = static_cast<Direction>(flow.direction);
        act(*c, d, driver_->drive(c->io, d));
    }
}

bool Worker::post(std::function<void()> task) {
    if (finished()) return false;
    {
        std::lock_guard lock(tasksMutex_);
        tasks_.push_back(std::move(task));
    }
    signal(kTasks);
    return true;
}

void Worker::runTasks() {
    std::vector<std::function<void()>> tasks;
    {
        std::lock_guard lock(tasksMutex_);
        tasks.swap(tasks_);
    }
    for (auto& task : tasks) task();
}

void Worker::listConnections(std::vector<ConnectionView>& out) const {
    for (const auto& c : connections_) {
        if (!c || c->id() == 0) continue;
        ConnectionView view;
        view.id = c->id();
        view.worker = index_;
        view.route = c->route->config.name;
        view.client = c->clientAddress.toString();
        view.upstream = c->upstreamAddress.toString();
        view.ageMs = static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::milliseconds>(now_ - c->opened).count());
        view.bytesC2u = c->io.flows[0].bytesForwarded();
        view.bytesU2c = c->io.flows[1].bytesForwarded();
        view.state = c->state == ConnectionState::Connecting ? "connecting"
                     : c->state == ConnectionState::Relaying ? "relaying"
                                                             : "closing";
        out.push_back(std::move(view));
    }
}

bool Worker::killConnection(std::uint64_t id) {
    for (auto& c : connections_) {
        if (c && c->id() == id && c->state != ConnectionState::Closing) {
            logInfo("connection ", id, ": killed by the admin");
            closeConnection(*c, CloseReason::Killed, true);
            return true;
        }
    }
    return false;
}

int Worker::rotateAudit() noexcept {
    if (!audit_) return -ENOTSUP;
    return audit_->rotate();
}

}  // namespace splicegate
