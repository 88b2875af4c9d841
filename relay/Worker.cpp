#include "relay/Worker.h"

#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include "common/Error.h"
#include "common/Log.h"
#include "common/ThreadName.h"
#include "datapath/BufferLaneDriver.h"
#include "datapath/DirectAuditLog.h"
#include "datapath/Failpoints.h"
#include "datapath/FlowDriver.h"
#include "datapath/SegmentAuditLog.h"
#include "relay/AccessLog.h"
#include "relay/CpuPlacement.h"
#include "relay/SocketOptions.h"
#include "relay/WorkerOps.h"

namespace splicegate {
namespace {
constexpr unsigned kRingEntries = 4096;
constexpr unsigned kMaxBoundIoWorkers = 2;
// Chain engine only: splices run in io-wq (docs/kernel-notes.md §1). They are non-blocking, so
// a few threads per ring keep up; the cap keeps a flood of connections from becoming a flood of
// threads.
constexpr unsigned kMaxUnboundIoWorkers = 4;
constexpr std::size_t kMaxIdlePipes = 16;
// The buffer ring's window halves at most once per interval: a burst's buffers are released
// within a few intervals of its end, and a steady load never sees its window shrink under it.
constexpr auto kBufferTrimInterval = std::chrono::seconds(5);

using Op = WorkerOp;

std::uint64_t timerPeriodMs(const WorkerSettings& settings) {
    std::uint64_t period = 1000;
    if (!settings.audit.dir.empty() && settings.audit.durability != AuditDurability::Strict)
        period = std::max<std::uint64_t>(1, settings.audit.fsyncIntervalMs);
    for (std::uint64_t timeout : {settings.relay.idleTimeoutMs, settings.relay.halfClosedTimeoutMs})
        if (timeout > 0 && timeout / 4 < period) period = std::max<std::uint64_t>(timeout / 4, 10);
    return period;
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
      pipePool_(context.pipeBudget, context.settings.datapath.pipeSize, kMaxIdlePipes),
      connections_(std::chrono::milliseconds(timerPeriodMs(context.settings)),
                   std::chrono::steady_clock::now()),
      timeouts_(context.settings.relay.idleTimeoutMs, context.settings.relay.halfClosedTimeoutMs) {
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
        if (int rc = placeThisWorker(index_); rc < 0)
            logWarn("worker ", index_, ": cannot pin to its CPU: ", errnoText(rc));
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
    connector_.reset();
    acceptor_.reset();
    lanes_.reset();  // unregisters the buffer lane's ring: before the ring goes
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
    const auto& datapath = settings.datapath;
    lanes_ = std::make_unique<LaneSwitch>(datapath.lane, datapath.bufferSize);
    lanes_->own(LaneKind::Splice,
                std::make_unique<FlowDriver>(*mover_, pipePool_, audit_.get(), *stats_, *lanes_));
    auto slots =
        static_cast<unsigned>(std::min<std::uint64_t>(settings.relay.maxConnections, UINT32_MAX));
    if (datapath.lane != LaneKind::Splice)
        lanes_->own(LaneKind::Buffer,
                    std::make_unique<BufferLaneDriver>(*ring_->raw(), datapath.bufferRingEntries,
                                                       datapath.bufferSize, audit_.get(), *stats_,
                                                       slots, *lanes_));
    acceptor_ = std::make_unique<Acceptor>(index_, context_, *ring_, *stats_);
    connector_ = std::make_unique<UpstreamConnector>(context_, *ring_, connections_);
    now_ = std::chrono::steady_clock::now();
    acceptor_->applyRoutes(true);
    armControl();
    armTimer();
}

void Worker::loop() {
    while (!((stopping_ || draining_) && connections_.live() == 0)) {
        accessLines_.flush();
        // One submission per turn: everything prepared while handling the last batch goes in
        // here (connects, polls, re-armed accepts, cancels).
        // A non-blocking enter first (it submits and runs the deferred task work): under load
        // completions are nearly always there by then, and going straight to a blocking wait
        // measured 8 % fewer rr requests/s (more sleeps and wake-ups). Only an idle ring waits.
        int rc = ring_->submitAndPeek();
        // Nor while a connect waits for its client watch (watchSlowConnects): that is a turn.
        if (deferred_.empty() && !connector_->watchesDue() && !ring_->completionsReady())
            rc = ring_->submitAndWait(1000);
        if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EBUSY)
            logError("worker ", index_, ": io_uring_submit_and_wait: ", errnoText(rc));
        now_ = std::chrono::steady_clock::now();
        lanes_->setNow(now_);
        ring_->drainCompletions([this](const io_uring_cqe& cqe) { handleCompletion(cqe); });
        runDeferred();
        connector_->watchSlowConnects();
        lanes_->afterTurn(FinderOf([this](CompletionTag tag) noexcept -> ConnectionIo* {
            Connection* c = connections_.find(tag);
            return c != nullptr ? &c->io : nullptr;
        }));
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
        Connection* c = connections_.find(tag);
        if (c == nullptr) {
            lanes_->dropCompletion(tag, MoveCompletion{cqe.res, cqe.flags});
            return;
        }
        act(*c, static_cast<Direction>(tag.direction),
            lanes_->complete(c->io, tag, MoveCompletion{cqe.res, cqe.flags}).verdict);
        releaseIfDone(*c);
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
            if (auto admitted = acceptor_->onAccept(tag, cqe.res, now_)) take(std::move(*admitted));
            return;
        case Op::Connect:
        case Op::ConnectTimeout:
        case Op::ClientWatch: {
            Connection* c = connections_.find(tag);
            if (c == nullptr) return;
            if (tag.opAs<Op>() == Op::Connect)
                actOnConnect(*c, connector_->onConnect(*c, cqe.res));
            else if (tag.opAs<Op>() == Op::ConnectTimeout)
                connector_->onConnectTimeout(*c);
            else
                actOnConnect(*c, connector_->onClientWatch(*c, cqe.res));
            releaseIfDone(*c);
            return;
        }
    }
}

void Worker::releaseIfDone(Connection& c) {
    if (c.state == ConnectionState::Closing && c.operationsInFlight() == 0) releaseConnection(c);
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
        acceptor_->closeAll();
        connections_.forEach([this](Connection& c) {
            if (c.state != ConnectionState::Closing)
                closeConnection(c, CloseReason::Shutdown, false);
        });
    } else if (requests & kDrain) {
        draining_ = true;
        acceptor_->closeAll();
    } else if (requests & kReload) {
        if (!draining_) acceptor_->applyRoutes(false);
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
    if (now_ - lastBufferTrim_ >= kBufferTrimInterval) {
        lanes_->trim();
        lastBufferTrim_ = now_;
    }
    // A listener whose multishot accept ended on an error (EMFILE...) is re-armed here, not in a
    // tight loop.
    acceptor_->rearm();
    armTimer();
}

// Only the connections whose deadline came are looked at (relay/ConnectionTimeouts.h).
void Worker::closeTimedOut() {
    for (Connection* c : connections_.due(now_)) {
        if (c->state != ConnectionState::Relaying) continue;
        auto verdict = timeouts_.check(*c, now_);
        if (verdict.close)
            closeConnection(*c, verdict.reason, verdict.resetPeers);
        else if (verdict.rearm)
            connections_.setDeadline(*c, verdict.next);
    }
}

// ---- connections ----------------------------------------------------------------------------

void Worker::take(Admitted admitted) {
    if (admitted.handOffTo && handOff(admitted)) return;
    startAccepted(std::move(admitted));
}

// The other worker relays it as if it had accepted it.
bool Worker::handOff(Admitted& admitted) {
    Worker* to = context_.workers[*admitted.handOffTo];
    // Shared, so that a task dropped by a worker that stopped still closes the socket.
    auto handed = std::make_shared<Admitted>(std::move(admitted));
    if (to->post([to, handed] { to->adopt(std::move(*handed)); })) return true;
    admitted = std::move(*handed);
    acceptor_->handOffFailed(admitted);
    return false;
}

void Worker::adopt(Admitted admitted) {
    if (draining_ || stopping_) {  // closing the socket is the refusal
        acceptor_->release(admitted.peer);
        return;
    }
    startAccepted(std::move(admitted));
}

void Worker::startAccepted(Admitted admitted) {
    auto& c =
        connections_.allocate(context_.nextConnectionId.fetch_add(1, std::memory_order_relaxed));
    if (auto* lease = context_.auditStart.idLease) lease->cover(c.io.id);
    c.route = std::move(admitted.route);
    c.io.counters = &routeStats(c);
    routeStats(c).accepted.add(1);
    routeStats(c).active.add(1);
    c.io.client = std::move(admitted.client);  // TCP_NODELAY inherited from the listener
    c.clientAddress = admitted.peer;
    c.opened = c.io.lastActivity = now_;
    beginConnect(c);
}

void Worker::beginConnect(Connection& c) {
    actOnConnect(c, connector_->start(c));
}

void Worker::actOnConnect(Connection& c, const ConnectStep& step) {
    switch (step.action) {
        case ConnectStep::Action::Wait:
            return;
        case ConnectStep::Action::Connected:
            startRelaying(c);
            return;
        case ConnectStep::Action::Retry:
            beginConnect(c);
            return;
        case ConnectStep::Action::Fail:
            closeConnection(c, step.reason, false);
            return;
    }
}

void Worker::startRelaying(Connection& c) {
    c.state = ConnectionState::Relaying;
    c.io.relaying = true;
    if (timeouts_.any()) connections_.setDeadline(c, timeouts_.nextDeadline(c));
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
    if (!lanes_->start(c.io)) closeConnection(c, CloseReason::Error, true);  // out of memory
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
    connections_.clearDeadline(c);
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
    lanes_->release(c.io);
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
    acceptor_->release(c.clientAddress);
    routeStats(c).closed[static_cast<std::size_t>(c.closeReason)].add(1);
    routeStats(c).active.sub(1);
    connections_.release(c);
}

// A group commit ended (or could not start): its decisions applied to the connections.
void Worker::applySync(const SyncOutcome& outcome) {
    if (outcome.closeUndurable) {
        auto reason = outcome.writeFailed ? CloseReason::AuditError : CloseReason::AuditSyncError;
        connections_.forEach([&](Connection& c) {
            if (audit_->lostBySyncFailure(c.io)) closeConnection(c, reason, true);
        });
    }
    for (const auto& flow : outcome.roomFreed) {
        Connection* c = connections_.find(flow);
        if (c == nullptr || c->state != ConnectionState::Relaying) continue;
        auto d = static_cast<Direction>(flow.direction);
        act(*c, d, lanes_->drive(c->io, d).verdict);
    }
    for (const auto& flow : outcome.resume) {
        Connection* c = connections_.find(flow);
        if (c == nullptr || c->state != ConnectionState::Relaying) continue;
        auto d = static_cast<Direction>(flow.direction);
        act(*c, d, lanes_->durable(c->io, d).verdict);
    }
}

void Worker::runDeferred() {
    if (deferred_.empty()) return;
    auto batch = std::move(deferred_);
    deferred_.clear();
    for (const auto& flow : batch) {
        Connection* c = connections_.find(flow);
        if (c == nullptr || c->state != ConnectionState::Relaying) continue;
        auto d = static_cast<Direction>(flow.direction);
        act(*c, d, lanes_->drive(c->io, d).verdict);
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
    connections_.appendViews(out, index_, now_);
}

bool Worker::killConnection(std::uint64_t id) {
    Connection* c = connections_.findById(id);
    if (c == nullptr || c->state == ConnectionState::Closing) return false;
    logInfo("connection ", id, ": killed by the admin");
    closeConnection(*c, CloseReason::Killed, true);
    return true;
}

int Worker::rotateAudit() noexcept {
    if (!audit_) return -ENOTSUP;
    return audit_->rotate();
}

}  // namespace splicegate
