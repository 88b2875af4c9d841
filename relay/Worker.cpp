#include "relay/Worker.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "common/CompletionTag.h"
#include "common/Error.h"
#include "common/Log.h"
#include "datapath/Failpoints.h"

namespace splicegate {
namespace {
constexpr unsigned kRingEntries = 4096;
constexpr unsigned kMaxBoundIoWorkers = 2;
// Chain engine only: splices run in io-wq (NOTES.md 1). They are non-blocking, so a few threads
// per ring keep up; the cap keeps a flood of connections from becoming a flood of threads.
constexpr unsigned kMaxUnboundIoWorkers = 4;
constexpr std::size_t kMaxIdlePipes = 16;
// Moves one flow may make before others get a turn (inline engine).
constexpr int kPumpBudget = 32;
constexpr unsigned kSpliceFlags = SPLICE_F_NONBLOCK | SPLICE_F_MOVE;
// Inline engine: a short fill under this size waits for readiness rather than retrying at once
// (Flow::setDrainedBelow); a request/response message is far below it, a bulk read far above.
constexpr std::size_t kSmallFillBytes = 16 * 1024;

std::uint64_t timerPeriodMs(const RelaySettings& settings) {
    std::uint64_t period = 1000;
    if (!settings.auditDir.empty() && settings.auditDurability != AuditDurability::Strict)
        period = std::max<std::uint64_t>(1, settings.auditFsyncIntervalMs);
    if (settings.idleTimeoutMs > 0 && settings.idleTimeoutMs / 4 < period)
        period = settings.idleTimeoutMs / 4 > 10 ? settings.idleTimeoutMs / 4 : 10;
    return period;
}

void setNoDelay(int fd) noexcept {
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// A close with SO_LINGER {1, 0} sends RST: how a reset on one side is passed to the other.
void armReset(int fd) noexcept {
    linger option{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &option, sizeof option);
}

CloseReason sourceResetReason(Direction d) noexcept {
    return d == Direction::ClientToUpstream ? CloseReason::ClientReset : CloseReason::UpstreamReset;
}
CloseReason sinkResetReason(Direction d) noexcept {
    return d == Direction::ClientToUpstream ? CloseReason::UpstreamReset : CloseReason::ClientReset;
}
}  // namespace

std::uint64_t Worker::pack(Op op, Direction d, std::uint32_t slot, std::uint16_t gen) noexcept {
    return CompletionTag::make(op, slot, gen, static_cast<std::uint8_t>(d)).encode();
}

Worker::Worker(unsigned index, RelayContext& context)
    : index_(index),
      context_(context),
      pipePool_(context.pipeBudget, context.settings.pipeSize, kMaxIdlePipes) {
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
    thread_ = std::thread([this, started] { run(*started); });
    return future;
}

void Worker::signal(std::uint32_t request) noexcept {
    requests_.fetch_or(request, std::memory_order_release);
    std::uint64_t one = 1;
    [[maybe_unused]] auto written = ::write(controlFd_.get(), &one, sizeof one);
}

void Worker::run(std::promise<void>& started) {
    try {
        // The ring belongs to this thread: SINGLE_ISSUER binds it to its creator, and io-wq
        // limits are per submitting thread.
        ring_ = std::make_unique<Ring>(kRingEntries, kMaxBoundIoWorkers, kMaxUnboundIoWorkers);
        const auto& settings = context_.settings;
        if (!settings.auditDir.empty()) {
            auto first = index_ < context_.auditStart.firstSegment.size()
                             ? context_.auditStart.firstSegment[index_]
                             : 1;
            audit_ = std::make_unique<audit::AuditWriter>(settings.auditDir, index_, first,
                                                          settings.auditSegmentBytes,
                                                          &context_.nextConnectionId);
        }
        now_ = std::chrono::steady_clock::now();
        applyRoutes(true);
        armControl();
        armTimer();
        started.set_value();
    } catch (...) {
        started.set_exception(std::current_exception());
        finished_.store(true, std::memory_order_release);
        return;
    }
    loop();
    // Pipes and fds are released by the destructors; the ring goes last.
    if (audit_) {
        if (auto segment = audit_->beginSync()) {  // make the tail durable before exiting
            int rc = ::fdatasync(segment->data.get());
            if (rc == 0) rc = ::fdatasync(segment->index.get());
            audit_->endSync(segment, rc < 0 ? -errno : 0);
        }
        audit_.reset();
    }
    connections_.clear();
    listeners_.clear();
    ring_.reset();
    finished_.store(true, std::memory_order_release);
}

void Worker::loop() {
    while (!(stopping_ && liveConnections_ == 0) && !(draining_ && liveConnections_ == 0)) {
        int rc = deferred_.empty() ? ring_->submitAndWait(1000) : ring_->submit();
        if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EBUSY)
            logError("worker ", index_, ": io_uring_submit_and_wait: ", errnoText(rc));
        now_ = std::chrono::steady_clock::now();
        ring_->drainCompletions([this](const io_uring_cqe& cqe) { handleCompletion(cqe); });
        runDeferred();
        startWantedSync();
    }
}

void Worker::handleCompletion(const io_uring_cqe& cqe) {
    auto tag = CompletionTag::decode(cqe.user_data);
    auto op = tag.opAs<Op>();
    auto direction = static_cast<Direction>(tag.direction);
    auto generation = tag.generation;
    auto slot = tag.slot;
    switch (op) {
        case Op::Ignore:
            return;
        case Op::Control:
            handleControl();
            return;
        case Op::Timer:
            onTimer();
            return;
        case Op::SyncData:
            syncDataResult_ = cqe.res;
            return;
        case Op::SyncIndex:
            onSync(failpointResult(FailSite::AuditSync,
                                   syncDataResult_ < 0 ? syncDataResult_ : cqe.res));
            return;
        case Op::Accept:
            if (slot < listeners_.size() && listeners_[slot].generation == generation)
                onAccept(slot, cqe);
            return;
        default:
            break;
    }
    Connection* c = lookup(slot, generation);
    if (c == nullptr) return;
    --c->operationsInFlight;
    switch (op) {
        case Op::Connect:
            onConnect(*c, cqe.res);
            break;
        case Op::ConnectTimeout:
            break;
        case Op::Poll:
            onPoll(*c, direction, cqe.res);
            break;
        case Op::Fill:
            onMove(*c, direction, op, failpointResult(FailSite::Fill, cqe.res));
            break;
        case Op::Tee:
            onMove(*c, direction, op, failpointResult(FailSite::Tee, cqe.res));
            break;
        case Op::Forward:
            onMove(*c, direction, op, failpointResult(FailSite::Forward, cqe.res));
            break;
        case Op::AuditWrite:
            onAuditWrite(*c, direction, failpointResult(FailSite::AuditWrite, cqe.res));
            break;
        default:
            break;
    }
    if (c->state == ConnectionState::Closing && c->operationsInFlight == 0) releaseConnection(*c);
}

// ---- control and timers ---------------------------------------------------------------------

void Worker::armControl() {
    auto* sqe = ring_->sqe();
    io_uring_prep_read(sqe, controlFd_.get(), &controlValue_, sizeof controlValue_, 0);
    io_uring_sqe_set_data64(sqe, pack(Op::Control, Direction::ClientToUpstream, 0, 0));
}

void Worker::handleControl() {
    auto requests = requests_.exchange(0, std::memory_order_acquire);
    if (requests & kTasks) runTasks();
    if (requests & kStop) {
        stopping_ = true;
        for (std::uint32_t i = 0; i < listeners_.size(); ++i) closeListener(i);
        for (auto& c : connections_)
            if (c && c->state != ConnectionState::Closing && c->id != 0)
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
    auto period = timerPeriodMs(context_.settings);
    timerInterval_.tv_sec = static_cast<long long>(period / 1000);
    timerInterval_.tv_nsec = static_cast<long long>(period % 1000) * 1000000;
    auto* sqe = ring_->sqe();
    io_uring_prep_timeout(sqe, &timerInterval_, 0, 0);
    io_uring_sqe_set_data64(sqe, pack(Op::Timer, Direction::ClientToUpstream, 0, 0));
}

void Worker::onTimer() {
    if (audit_) {
        // Index records reach the page cache every tick even while an fdatasync is still
        // running, so a crash of the daemon loses at most one interval of them.
        if (context_.settings.auditDurability == AuditDurability::None || audit_->syncInFlight())
            audit_->flush();
        else
            startSync();
    }
    auto idleLimit = context_.settings.idleTimeoutMs;
    if (idleLimit > 0) {
        auto limit = std::chrono::milliseconds(idleLimit);
        for (auto& c : connections_) {
            if (c && c->id != 0 && c->state == ConnectionState::Relaying &&
                now_ - c->lastActivity >= limit)
                closeConnection(*c, CloseReason::IdleTimeout, false);
        }
    }
    // A listener whose multishot accept ended on an error (EMFILE...) is re-armed here, not in a
    // tight loop.
    for (std::uint32_t i = 0; i < listeners_.size(); ++i)
        if (listeners_[i].fd && !listeners_[i].active && !draining_ && !stopping_) armAccept(i);
    armTimer();
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
    const auto where = "route " + route->config.name + ": listen on " + address.toString();
    UniqueFd fd(checkSys(::socket(address.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0),
                         where + ": socket"));
    int one = 1;
    checkSys(::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one),
             where + ": SO_REUSEADDR");
    // One listener per worker on the same address: the kernel spreads connections across them.
    checkSys(::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof one),
             where + ": SO_REUSEPORT");
    if (address.family() == AF_INET6)
        checkSys(::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one),
                 where + ": IPV6_V6ONLY");
    checkSys(::bind(fd.get(), address.get(), address.length()), where);
    checkSys(::listen(fd.get(), 4096), where + ": listen");
    std::uint32_t index = 0;
    while (index < listeners_.size() && listeners_[index].fd) ++index;
    if (index == listeners_.size()) listeners_.emplace_back();
    auto& listener = listeners_[index];
    listener.route = route;
    listener.fd = std::move(fd);
    ++listener.generation;
    listener.active = false;
    armAccept(index);
    if (index_ == 0) logInfo("route ", route->config.name, ": listening on ", address);
}

void Worker::closeListener(std::uint32_t index) {
    auto& listener = listeners_[index];
    if (!listener.fd) return;
    auto* sqe = ring_->sqe();
    io_uring_prep_cancel_fd(sqe, listener.fd.get(), IORING_ASYNC_CANCEL_ALL);
    io_uring_sqe_set_data64(sqe, pack(Op::Ignore, Direction::ClientToUpstream, 0, 0));
    ring_->submit();        // before the fd number can be reused
    ++listener.generation;  // late accept completions of the old socket are ignored
    listener.fd.reset();
    listener.active = false;
    if (index_ == 0)
        logInfo("route ", listener.route->config.name, ": stopped listening on ",
                listener.route->config.listen);
}

void Worker::armAccept(std::uint32_t index) {
    auto& listener = listeners_[index];
    auto* sqe = ring_->sqe();
    io_uring_prep_multishot_accept(sqe, listener.fd.get(), nullptr, nullptr,
                                   SOCK_NONBLOCK | SOCK_CLOEXEC);
    io_uring_sqe_set_data64(
        sqe, pack(Op::Accept, Direction::ClientToUpstream, index, listener.generation));
    listener.active = true;
}

void Worker::onAccept(std::uint32_t index, const io_uring_cqe& cqe) {
    auto& listener = listeners_[index];
    if (!(cqe.flags & IORING_CQE_F_MORE)) listener.active = false;  // re-armed by the timer
    if (cqe.res < 0) {
        if (cqe.res != -ECANCELED)
            logWarn("route ", listener.route->config.name, ": accept: ", errnoText(cqe.res));
        return;
    }
    UniqueFd client(cqe.res);
    if (draining_ || stopping_) return;
    auto active = context_.activeConnections.fetch_add(1, std::memory_order_relaxed);
    if (active >= context_.settings.maxConnections) {
        context_.activeConnections.fetch_sub(1, std::memory_order_relaxed);
        stats_->routes[listener.route->statsIndex]
            .refused[static_cast<std::size_t>(RefuseReason::MaxConnections)]
            .add(1);
        if (now_ - lastRefusalLog_ > std::chrono::seconds(1)) {
            logWarn("route ", listener.route->config.name,
                    ": refusing connections: ", context_.settings.maxConnections,
                    " connections open (--max-connections)");
            lastRefusalLog_ = now_;
        }
        return;  // closing the accepted socket is the refusal
    }
    Connection* c = allocateConnection();
    c->id = context_.nextConnectionId.fetch_add(1, std::memory_order_relaxed);
    c->route = listener.route;
    routeStats(*c).accepted.add(1);
    routeStats(*c).active.add(1);
    c->client = std::move(client);
    sockaddr_storage peer{};
    socklen_t peerLength = sizeof peer;
    if (::getpeername(c->client.get(), reinterpret_cast<sockaddr*>(&peer), &peerLength) == 0)
        c->clientAddress =
            SocketAddress::fromSockaddr(reinterpret_cast<sockaddr*>(&peer), peerLength);
    setNoDelay(c->client.get());
    c->opened = c->lastActivity = now_;
    c->upstreamIndex =
        static_cast<std::uint32_t>(c->route->nextUpstream.fetch_add(1, std::memory_order_relaxed) %
                                   c->route->upstreams.size());
    startConnect(*c);
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
    auto previousGeneration = connections_[slot] ? connections_[slot]->generation : 0;
    connections_[slot] = std::make_unique<Connection>();
    auto* c = connections_[slot].get();
    c->slot = slot;
    c->generation = static_cast<std::uint16_t>(previousGeneration + 1);
    ++liveConnections_;
    return c;
}

Connection* Worker::lookup(std::uint32_t slot, std::uint16_t generation) noexcept {
    if (slot >= connections_.size()) return nullptr;
    auto* c = connections_[slot].get();
    if (c == nullptr || c->id == 0 || c->generation != generation) return nullptr;
    return c;
}

void Worker::startConnect(Connection& c) {
    const auto& upstreams = c.route->upstreams;
    c.upstreamAddress = upstreams[c.upstreamIndex % upstreams.size()];
    int fd = ::socket(c.upstreamAddress.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        logWarn("route ", c.route->config.name, ": socket for ", c.upstreamAddress, ": ",
                errnoText(errno));
        closeConnection(c, CloseReason::Error, false);
        return;
    }
    c.upstream.reset(fd);
    setNoDelay(fd);
    ++c.connectAttempts;
    auto* sqe = ring_->sqe();
    io_uring_prep_connect(sqe, fd, c.upstreamAddress.get(), c.upstreamAddress.length());
    io_uring_sqe_set_data64(sqe,
                            pack(Op::Connect, Direction::ClientToUpstream, c.slot, c.generation));
    sqe->flags |= IOSQE_IO_LINK;
    static thread_local __kernel_timespec timeout{};
    timeout.tv_sec = context_.settings.connectTimeoutMs / 1000;
    timeout.tv_nsec = static_cast<long long>(context_.settings.connectTimeoutMs % 1000) * 1000000;
    sqe = ring_->sqe();
    io_uring_prep_link_timeout(sqe, &timeout, 0);
    io_uring_sqe_set_data64(
        sqe, pack(Op::ConnectTimeout, Direction::ClientToUpstream, c.slot, c.generation));
    // The linked timeout's timespec is read at submission: submit before the next connect reuses
    // it.
    ring_->submit();
    c.operationsInFlight += 2;
}

void Worker::onConnect(Connection& c, int result) {
    if (c.state != ConnectionState::Connecting) return;
    if (result == 0) {
        startRelaying(c);
        return;
    }
    const char* why = result == -ECANCELED ? "timed out" : nullptr;
    logWarn("route ", c.route->config.name, ": connect to upstream ", c.upstreamAddress, ": ",
            why ? why : errnoText(result).c_str(), " (connection ", c.id, ")");
    c.upstream.reset();  // the linked timeout's completion may still come; it names no fd
    routeStats(c).connectFailures.add(1);
    if (c.connectAttempts < c.route->upstreams.size()) {
        ++c.upstreamIndex;
        startConnect(c);
        return;
    }
    logWarn("route ", c.route->config.name, ": no upstream reachable for connection ", c.id,
            " from ", c.clientAddress);
    closeConnection(c, CloseReason::UpstreamUnreachable, false);
}

void Worker::startRelaying(Connection& c) {
    c.state = ConnectionState::Relaying;
    for (auto& flow : c.flows)
        flow.setDrainedBelow(context_.settings.engine == SpliceEngine::Chain ? SIZE_MAX
                                                                            : kSmallFillBytes);
    openAudit(c);
    if (c.state != ConnectionState::Relaying) return;  // its audit could not be opened
    logDebug("connection ", c.id, ": ", c.clientAddress, " -> ", c.upstreamAddress, " (route ",
             c.route->config.name, ")");
    for (auto d : {Direction::ClientToUpstream, Direction::UpstreamToClient})
        armPoll(c, d, c.sourceFd(d), POLLIN);
}

void Worker::closeConnection(Connection& c, CloseReason reason, bool resetPeers) {
    if (c.state == ConnectionState::Closing) return;
    c.state = ConnectionState::Closing;
    c.closeReason = reason;
    for (auto* fd : {&c.client, &c.upstream}) {
        if (!*fd) continue;
        if (c.operationsInFlight > 0) {
            auto* sqe = ring_->sqe();
            io_uring_prep_cancel_fd(sqe, fd->get(), IORING_ASYNC_CANCEL_ALL);
            io_uring_sqe_set_data64(sqe, pack(Op::Ignore, Direction::ClientToUpstream, 0, 0));
        }
    }
    if (c.operationsInFlight > 0) ring_->submit();  // cancel by fd before the fds are closed
    // The fds stay open until every operation naming them has completed: a queued linked SQE
    // resolves its fd only when it is issued, and must never meet a reused number.
    for (auto* fd : {&c.client, &c.upstream}) {
        if (!*fd) continue;
        if (resetPeers)
            armReset(fd->get());  // RST goes out when the fd is closed
        else
            ::shutdown(fd->get(), SHUT_RDWR);  // FIN now
    }
    if (c.operationsInFlight == 0) releaseConnection(c);
}

void Worker::releaseConnection(Connection& c) {
    if (c.id == 0) return;  // already released
    closeAudit(c);
    c.client.reset();
    c.upstream.reset();
    // A move that completed after the close decision was not booked (chain engine), so the
    // kernel's count decides: a pipe with any byte left in it is closed, never lent again.
    auto leftIn = [](const Pipe& pipe, std::size_t booked) -> std::size_t {
        auto buffered = pipe.bufferedBytes();
        return buffered != 0 ? 1 : booked;
    };
    for (auto& flow : c.flows) {
        if (flow.pipe.valid()) {
            auto left = leftIn(flow.pipe, flow.bytesInPipe());
            pipePool_.release(std::move(flow.pipe), left);
        }
        if (flow.auditPipe.valid()) {
            auto left = leftIn(flow.auditPipe, flow.bytesInAuditPipe());
            pipePool_.release(std::move(flow.auditPipe), left);
        }
    }
    auto lifetime = std::chrono::duration_cast<std::chrono::milliseconds>(now_ - c.opened);
    logDebug("connection ", c.id, " closed (", toString(c.closeReason), ") after ",
             lifetime.count(), " ms: c2u ", c.flow(Direction::ClientToUpstream).bytesForwarded(),
             " B, u2c ", c.flow(Direction::UpstreamToClient).bytesForwarded(), " B");
    routeStats(c).closed[static_cast<std::size_t>(c.closeReason)].add(1);
    routeStats(c).active.sub(1);
    updatePipeGauges();
    c.id = 0;
    c.route.reset();
    freeSlots_.push_back(c.slot);
    --liveConnections_;
    context_.activeConnections.fetch_sub(1, std::memory_order_relaxed);
}

// ---- data path ------------------------------------------------------------------------------

void Worker::armPoll(Connection& c, Direction d, int fd, unsigned events) {
    auto* sqe = ring_->sqe();
    io_uring_prep_poll_add(sqe, fd, events);
    io_uring_sqe_set_data64(sqe, pack(Op::Poll, d, c.slot, c.generation));
    ++c.busy(d);
    ++c.operationsInFlight;
}

void Worker::onPoll(Connection& c, Direction d, int result) {
    --c.busy(d);
    if (c.state != ConnectionState::Relaying) return;
    if (result < 0) {
        if (result != -ECANCELED) closeConnection(c, CloseReason::Error, true);
        return;
    }
    c.lastActivity = now_;
    auto& flow = c.flow(d);
    flow.recordSourceReadable();
    flow.recordSinkWritable();
    pump(c, d);
}

void Worker::pump(Connection& c, Direction d) {
    for (int step = 0; step < kPumpBudget; ++step) {
        if (c.state != ConnectionState::Relaying || c.busy(d) > 0) return;
        if (!pumpStep(c, d)) return;
    }
    deferred_.push_back({c.slot, c.generation, d});  // let other flows have a turn
}

// Takes the flow's next step. Returns true when it made progress and may continue at once.
bool Worker::pumpStep(Connection& c, Direction d) {
    auto& flow = c.flow(d);
    bool inlineMoves = context_.settings.engine == SpliceEngine::Inline;
    switch (flow.next()) {
        case FlowStep::Fill: {
            // Both pipes are empty here: a good moment to trade one that no longer fits the
            // budget's fair share (a flow that never runs dry would otherwise keep it forever).
            if (flow.pipe.valid() && pipePool_.wrongSize(flow.pipe)) returnPipes(flow);
            if (!flow.pipe.valid()) {
                int rc = pipePool_.acquire(flow.pipe);
                if (rc < 0) {
                    logError("connection ", c.id, ": no pipe: ", errnoText(rc));
                    closeConnection(c, CloseReason::PipeError, true);
                    return false;
                }
            }
            auto request = failpointLength(FailSite::Fill, flow.fillRequest());
            if (!inlineMoves) {
                submitMove(c, d, Op::Fill, c.sourceFd(d), flow.pipe.writeFd(), request);
                return false;
            }
            auto moved = ::splice(c.sourceFd(d), nullptr, flow.pipe.writeFd(), nullptr, request,
                                  kSpliceFlags);
            int result =
                failpointResult(FailSite::Fill, moved < 0 ? -errno : static_cast<int>(moved));
            return afterMove(c, d, flow.recordFill(result, request), result);
        }
        case FlowStep::Tee:
            return teeStep(c, d);
        case FlowStep::AuditWrite:
            return auditWriteStep(c, d, flow.auditWriteRequest(), false);
        case FlowStep::WaitDurable:
            waitDurable(c, d);
            return false;
        case FlowStep::Forward: {
            auto request = failpointLength(FailSite::Forward, flow.forwardRequest());
            if (!inlineMoves) {
                submitMove(c, d, Op::Forward, flow.pipe.readFd(), c.sinkFd(d), request);
                return false;
            }
            auto moved =
                ::splice(flow.pipe.readFd(), nullptr, c.sinkFd(d), nullptr, request, kSpliceFlags);
            int result =
                failpointResult(FailSite::Forward, moved < 0 ? -errno : static_cast<int>(moved));
            countForwarded(c, d, result);
            return afterMove(c, d, flow.recordForward(result), result);
        }
        case FlowStep::WaitReadable:
            returnPipes(flow);
            armPoll(c, d, c.sourceFd(d), POLLIN);
            return false;
        case FlowStep::WaitWritable:
            armPoll(c, d, c.sinkFd(d), POLLOUT);
            return false;
        case FlowStep::ShutdownSink:
            returnPipes(flow);
            ::shutdown(c.sinkFd(d), SHUT_WR);
            flow.recordSinkShutdown();
            if (c.flow(Direction::ClientToUpstream).finished() &&
                c.flow(Direction::UpstreamToClient).finished())
                closeConnection(c, CloseReason::Closed, false);
            return false;
        case FlowStep::Finished:
            return false;
    }
    return false;
}

// Copies the pipe's unaudited front into the audit pipe. The chain engine links the copy, its
// write into the log and (unless strict) the forward as one soft-linked chain: a short tee or
// write cancels the rest, so nothing unaudited is forwarded (NOTES.md 2).
bool Worker::teeStep(Connection& c, Direction d) {
    auto& flow = c.flow(d);
    if (!flow.auditPipe.valid()) {
        int rc = pipePool_.acquire(flow.auditPipe);
        if (rc < 0) {
            onAuditFailure(c, d, rc);
            return c.state == ConnectionState::Relaying;
        }
    }
    auto request =
        failpointLength(FailSite::Tee, std::min(flow.teeRequest(), flow.auditPipe.capacity()));
    if (context_.settings.engine == SpliceEngine::Chain) {
        auto* sqe = ring_->sqe();
        io_uring_prep_tee(sqe, flow.pipe.readFd(), flow.auditPipe.writeFd(),
                          static_cast<unsigned>(request), SPLICE_F_NONBLOCK);
        io_uring_sqe_set_data64(sqe, pack(Op::Tee, d, c.slot, c.generation));
        sqe->flags |= IOSQE_IO_LINK;
        ++c.busy(d);
        ++c.operationsInFlight;
        c.chain(d) = PendingChain{true};
        // The linked write and forward are sized as if the tee will be whole: a short tee or
        // write breaks the link and cancels what follows.
        bool linkForward = context_.settings.auditDurability != AuditDurability::Strict;
        auditWriteStep(c, d, request, linkForward);
        return false;
    }
    auto copied = ::tee(flow.pipe.readFd(), flow.auditPipe.writeFd(), request, SPLICE_F_NONBLOCK);
    int result = failpointResult(FailSite::Tee, copied < 0 ? -errno : static_cast<int>(copied));
    if (!flow.recordTee(result) || result == 0) {
        onAuditFailure(c, d, result == 0 ? -EIO : result);
        return c.state == ConnectionState::Relaying;
    }
    return result > 0;
}

// Moves the audit pipe's bytes into the log at a reserved offset. The chain engine links the
// write through io_uring. The inline engine splices from the worker itself: io-wq runs the
// splices into one file one after another anyway (NOTES.md 9) and every chunk waits for its
// write before it is forwarded, so the hand-off (NOTES.md 11) only adds latency to each chunk.
// The write copies into the page cache; when the disk falls behind, the kernel's dirty-page
// throttling slows this worker, which is the back-pressure fail-closed auditing needs.
bool Worker::auditWriteStep(Connection& c, Direction d, std::size_t request, bool linkForward) {
    auto& flow = c.flow(d);
    auto& slot = c.auditSlot(d);
    auto length = static_cast<std::uint32_t>(failpointLength(FailSite::AuditWrite, request));
    if (int rc = audit_->reserve(length, slot); rc < 0) {
        if (c.chain(d).active) return false;  // the tee is in flight: the chain's end decides
        onAuditFailure(c, d, rc);
        return c.state == ConnectionState::Relaying;  // fail-open: forward unaudited
    }
    if (context_.settings.engine == SpliceEngine::Inline) {
        loff_t offset = static_cast<loff_t>(slot.offset);
        auto moved = ::splice(flow.auditPipe.readFd(), nullptr, slot.segment->data.get(), &offset,
                              length, SPLICE_F_MOVE);
        int result = bookAuditWrite(
            c, d,
            failpointResult(FailSite::AuditWrite, moved < 0 ? -errno : static_cast<int>(moved)));
        return applyAuditWrite(c, d, result);
    }
    submitMove(c, d, Op::AuditWrite, flow.auditPipe.readFd(), slot.segment->data.get(), length,
               static_cast<std::int64_t>(slot.offset), linkForward);
    if (linkForward) {
        // Sized as if the write will be whole; if it is short the forward is cancelled.
        submitMove(c, d, Op::Forward, flow.pipe.readFd(), c.sinkFd(d), length);
    }
    return false;
}

void Worker::onAuditWrite(Connection& c, Direction d, int result) {
    --c.busy(d);
    result = bookAuditWrite(c, d, result);
    if (c.chain(d).active) {
        c.chain(d).write = result;
        if (c.busy(d) == 0) applyChain(c, d);
        return;
    }
    if (c.state != ConnectionState::Relaying) return;
    if (applyAuditWrite(c, d, result) && c.busy(d) == 0) pump(c, d);
}

// Test builds only: an allocation failure injected before an index record is buffered, so the
// record is really missing, as it would be. 0 otherwise.
int Worker::injectedRecordFailure() noexcept {
    return failpointResult(FailSite::AuditRecord, 0);
}

// Books a finished audit write in the log's index (or gives its reserved space up). Returns the
// write's result as the flow must see it: an error when the chunk could not be indexed.
int Worker::bookAuditWrite(Connection& c, Direction d, int result) {
    auto& slot = c.auditSlot(d);
    if (result <= 0 || !slot.segment) {
        audit_->abandon(slot);
        return result;
    }
    if (context_.settings.auditDurability == AuditDurability::Strict) {
        // Start the chunk's writeback now, so the group commit's fdatasync finds it under way or
        // done instead of writing every waiter's pages in one burst. Advisory: an error here
        // shows up in that fdatasync.
        ::sync_file_range(slot.segment->data.get(), static_cast<off64_t>(slot.offset), result,
                          SYNC_FILE_RANGE_WRITE);
    }
    int rc = injectedRecordFailure();
    if (rc < 0)
        audit_->abandon(slot);
    else
        rc = audit_->recordChunk(slot, c.id, static_cast<std::uint8_t>(d),
                                 static_cast<std::uint32_t>(result), audit::wallClockNs());
    if (rc < 0) return rc;
    // Counted whatever the connection's state: the bytes are in the log, and the Close record's
    // counts must match the chunks.
    stats_->auditBytes.add(static_cast<std::uint64_t>(result));
    c.auditedBytes[static_cast<int>(d)] += static_cast<std::uint64_t>(result);
    c.auditSyncTarget = audit_->nextSyncSequence();
    return result;
}

// Applies an audit write's result to the flow; false when the connection must not go on.
bool Worker::applyAuditWrite(Connection& c, Direction d, int result) {
    if (!c.flow(d).recordAuditWrite(result)) {
        onAuditFailure(c, d, result == 0 ? -ENOSPC : result);
        return c.state == ConnectionState::Relaying;
    }
    if (context_.settings.auditDurability == AuditDurability::Strict) syncWanted_ = true;
    return true;
}

// The last completion of a tee -> write [-> forward] chain is in: apply them in chain order.
void Worker::applyChain(Connection& c, Direction d) {
    auto results = c.chain(d);
    c.chain(d) = PendingChain{};
    if (c.state != ConnectionState::Relaying) return;
    auto& flow = c.flow(d);
    if (!flow.recordTee(results.tee) || results.tee == 0) {
        onAuditFailure(c, d, results.tee == 0 ? -EIO : results.tee);
        if (c.state == ConnectionState::Relaying) pump(c, d);
        return;
    }
    if (!applyAuditWrite(c, d, results.write)) return;
    if (results.forward != -ECANCELED) {
        countForwarded(c, d, results.forward);
        if (!afterMove(c, d, flow.recordForward(results.forward), results.forward)) return;
    }
    pump(c, d);
}

void Worker::onAuditFailure(Connection& c, Direction d, int result) {
    stats_->auditWriteErrors.add(1);
    if (context_.settings.auditOnError == AuditOnError::FailClosed) {
        logWarn("connection ", c.id, ": audit write failed (", errnoText(result),
                "): closing it, fail-closed");
        closeConnection(c, CloseReason::AuditError, true);
        return;
    }
    auto& flow = c.flow(d);
    auto lost = flow.abandonAudit();
    stats_->auditLostBytes.add(lost);
    if (flow.auditPipe.valid()) pipePool_.release(std::move(flow.auditPipe), 1);  // discard it
    logWarn("connection ", c.id, ": audit write failed (", errnoText(result), "): ", lost,
            " bytes forwarded unaudited, fail-open");
}

void Worker::waitDurable(Connection& c, Direction d) {
    durabilityWaiters_.push_back({{c.slot, c.generation, d}, c.auditSyncTarget});
    syncWanted_ = true;
}

// Group commit: a sync starts once the completions of a loop turn have been handled, so every
// chunk written in that turn shares it (one connection's write no longer starts a sync alone
// while the others of the same turn wait for the next). A sync in flight re-asks when it ends.
void Worker::startWantedSync() {
    if (!syncWanted_ || !audit_) return;
    syncWanted_ = false;
    if (!audit_->syncInFlight()) startSync();
}

void Worker::startSync() {
    auto failuresBefore = audit_->failedSyncs();
    auto segment = audit_->beginSync();
    if (!segment) {
        if (audit_->failedSyncs() != failuresBefore) onSync(-EIO);  // the index write failed
        return;
    }
    syncingSegment_ = segment;
    syncStarted_ = std::chrono::steady_clock::now();
    syncDataResult_ = 0;
    auto* sqe = ring_->sqe();
    io_uring_prep_fsync(sqe, segment->data.get(), IORING_FSYNC_DATASYNC);
    io_uring_sqe_set_data64(sqe, pack(Op::SyncData, Direction::ClientToUpstream, 0, 0));
    sqe->flags |= IOSQE_IO_LINK;  // data first, then the index that points into it
    sqe = ring_->sqe();
    io_uring_prep_fsync(sqe, segment->index.get(), IORING_FSYNC_DATASYNC);
    io_uring_sqe_set_data64(sqe, pack(Op::SyncIndex, Direction::ClientToUpstream, 0, 0));
}

void Worker::onSync(int result) {
    auto segment = std::move(syncingSegment_);
    if (segment) {
        audit_->endSync(segment, result);
        auto took = std::chrono::steady_clock::now() - syncStarted_;
        stats_->observeFsync(static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(took).count()));
    }
    bool failClosed = context_.settings.auditOnError == AuditOnError::FailClosed;
    if (result < 0) {
        stats_->auditSyncErrors.add(1);
        if (failClosed) {
            // Chunks written since the last good sync may be gone: their connections close.
            for (auto& c : connections_)
                if (c && c->id != 0 && c->audited && c->auditSyncTarget > audit_->durableSequence())
                    closeConnection(*c, CloseReason::AuditSyncError, true);
        }
    }
    auto waiters = std::move(durabilityWaiters_);
    durabilityWaiters_.clear();
    for (const auto& waiter : waiters) {
        Connection* c = lookup(waiter.flow.slot, waiter.flow.generation);
        if (c == nullptr || c->state != ConnectionState::Relaying) continue;
        if (result >= 0 && waiter.syncSequence > audit_->durableSequence()) {
            durabilityWaiters_.push_back(waiter);  // needs the next sync
            continue;
        }
        c->flow(waiter.flow.direction).recordDurable();
        pump(*c, waiter.flow.direction);
    }
    // After a failure the next sync waits for the timer: retrying at once on a full or broken
    // disk would spin through new segments.
    bool strict = context_.settings.auditDurability == AuditDurability::Strict;
    if (result >= 0 && (!durabilityWaiters_.empty() || (audit_->dirty() && strict)))
        syncWanted_ = true;
}

void Worker::openAudit(Connection& c) {
    c.audited = audit_ && c.route->config.audit;
    if (!c.audited) return;
    bool strict = context_.settings.auditDurability == AuditDurability::Strict;
    for (auto& flow : c.flows) flow.configureAudit(true, strict);
    int rc = injectedRecordFailure();
    if (rc == 0)
        rc = audit_->recordOpen(c.id, audit::wallClockNs(), c.route->config.name,
                                c.clientAddress.toString(), c.upstreamAddress.toString());
    if (rc == 0) return;
    // Chunks of a connection without its Open record could never be extracted, and a Close
    // record without it would be a problem for verify: the connection is not in the log at all.
    stats_->auditWriteErrors.add(1);
    c.audited = false;
    for (auto& flow : c.flows) flow.configureAudit(false, false);
    if (context_.settings.auditOnError == AuditOnError::FailClosed) {
        logWarn("connection ", c.id, ": its audit Open record failed (", errnoText(rc),
                "): closing it, fail-closed");
        closeConnection(c, CloseReason::AuditError, true);
        return;
    }
    c.auditLost = true;
    logWarn("connection ", c.id, ": its audit Open record failed (", errnoText(rc),
            "): relaying it unaudited, fail-open");
}

void Worker::closeAudit(Connection& c) {
    for (auto& slot : c.auditSlots)
        if (slot.segment) audit_->abandon(slot);
    if (!c.audited) return;
    int rc = injectedRecordFailure();
    if (rc == 0)
        rc = audit_->recordClose(c.id, audit::wallClockNs(), c.auditedBytes[0], c.auditedBytes[1],
                                 toString(c.closeReason));
    if (rc < 0) {
        stats_->auditWriteErrors.add(1);
        logWarn("connection ", c.id, ": its audit Close record was lost (", errnoText(rc),
                "): the log shows it open, and recovery will mark it truncated");
    }
}

// Handles what a move's outcome means for the connection; true when the flow may go on.
bool Worker::afterMove(Connection& c, Direction d, MoveOutcome outcome, int result) {
    if (outcome != MoveOutcome::Failed) {
        if (outcome == MoveOutcome::Moved) c.lastActivity = now_;
        return true;
    }
    // A failed fill is the source's error; a failed forward the sink's (EPIPE, ECONNRESET).
    bool sourceSide = c.flow(d).bytesInPipe() == 0 || result == -ECONNRESET;
    auto reason = sourceSide ? sourceResetReason(d) : sinkResetReason(d);
    logDebug("connection ", c.id, ": ", toString(d), " move failed: ", errnoText(result));
    closeConnection(c, reason, true);
    return false;
}

void Worker::submitMove(Connection& c, Direction d, Op op, int in, int out, std::size_t bytes,
                        std::int64_t outOffset, bool linkNext) {
    auto* sqe = ring_->sqe();
    io_uring_prep_splice(sqe, in, -1, out, outOffset, static_cast<unsigned>(bytes), kSpliceFlags);
    io_uring_sqe_set_data64(sqe, pack(op, d, c.slot, c.generation));
    if (linkNext) sqe->flags |= IOSQE_IO_LINK;
    ++c.busy(d);
    ++c.operationsInFlight;
}

void Worker::onMove(Connection& c, Direction d, Op op, int result) {
    --c.busy(d);
    if (c.chain(d).active) {  // Tee, or the chain's Forward
        (op == Op::Tee ? c.chain(d).tee : c.chain(d).forward) = result;
        if (c.busy(d) == 0) applyChain(c, d);
        return;
    }
    if (c.state != ConnectionState::Relaying) return;
    auto& flow = c.flow(d);
    if (result == -ECANCELED) {  // a broken link: the flow's bookkeeping is untouched
        if (c.busy(d) == 0) pump(c, d);
        return;
    }
    if (op == Op::Forward) countForwarded(c, d, result);
    auto outcome =
        op == Op::Fill ? flow.recordFill(result, flow.fillRequest()) : flow.recordForward(result);
    if (afterMove(c, d, outcome, result) && c.busy(d) == 0) pump(c, d);
}

void Worker::returnPipes(Flow& flow) noexcept {
    if (flow.pipe.valid() && flow.pipeReturnable()) pipePool_.release(std::move(flow.pipe), 0);
    if (flow.auditPipe.valid() && flow.auditPipeReturnable())
        pipePool_.release(std::move(flow.auditPipe), 0);
    updatePipeGauges();
}

void Worker::updatePipeGauges() noexcept {
    const auto& pool = pipePool_.stats();
    stats_->pipesInUse.set(pool.inUse);
    stats_->pipesIdle.set(pool.idle);
    stats_->pipesOverflowInUse.set(pool.overflowInUse);
}

void Worker::countForwarded(Connection& c, Direction d, int result) noexcept {
    if (result <= 0) return;
    if (c.auditLost) stats_->auditLostBytes.add(static_cast<std::uint64_t>(result));
    auto& route = routeStats(c);
    (d == Direction::ClientToUpstream ? route.bytesC2u : route.bytesU2c)
        .add(static_cast<std::uint64_t>(result));
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
        if (!c || c->id == 0) continue;
        ConnectionView view;
        view.id = c->id;
        view.worker = index_;
        view.route = c->route->config.name;
        view.client = c->clientAddress.toString();
        view.upstream = c->upstreamAddress.toString();
        view.ageMs = static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::milliseconds>(now_ - c->opened).count());
        view.bytesC2u = c->flows[0].bytesForwarded();
        view.bytesU2c = c->flows[1].bytesForwarded();
        view.state = c->state == ConnectionState::Connecting ? "connecting"
                     : c->state == ConnectionState::Relaying ? "relaying"
                                                             : "closing";
        out.push_back(std::move(view));
    }
}

bool Worker::killConnection(std::uint64_t id) {
    for (auto& c : connections_) {
        if (c && c->id == id && c->state != ConnectionState::Closing) {
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

void Worker::runDeferred() {
    if (deferred_.empty()) return;
    auto batch = std::move(deferred_);
    deferred_.clear();
    for (const auto& ref : batch) {
        if (Connection* c = lookup(ref.slot, ref.generation)) pump(*c, ref.direction);
    }
}

}  // namespace splicegate
