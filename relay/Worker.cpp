#include "relay/Worker.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include "audit/AuditLogFactory.h"
#include "audit/SegmentStore.h"
#include "common/Error.h"
#include "common/Log.h"
#include "common/ThreadName.h"
#include "datapath/BufferLaneDriver.h"
#include "datapath/Failpoints.h"
#include "datapath/FlowDriver.h"
#include "relay/CpuPlacement.h"
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
}  // namespace

Worker::Worker(unsigned index, RelayContext& context)
    : index_(index),
      context_(context),
      pipePool_(context.pipeBudget, context.settings.datapath.pipeSize, kMaxIdlePipes),
      connections_(workerTickPeriod(context.settings), std::chrono::steady_clock::now()) {}

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

void Worker::run(std::promise<void>& started) {
    try {
        setUp();
        started.set_value();
    } catch (...) {
        started.set_exception(std::current_exception());
        tearDown();
        return;
    }
    loop();
    tearDown();
}

void Worker::setUp() {
    // The ring belongs to this thread: SINGLE_ISSUER binds it to its creator, and io-wq limits
    // are per submitting thread.
    RingOptions ringOptions;
    ringOptions.sqpoll = context_.settings.datapath.sqpoll;
    ring_ =
        std::make_unique<Ring>(kRingEntries, kMaxBoundIoWorkers, kMaxUnboundIoWorkers, ringOptions);
    makeDataPath();
    acceptor_ = std::make_unique<Acceptor>(index_, context_, *ring_, *stats_);
    connector_ = std::make_unique<UpstreamConnector>(context_, *ring_, connections_);
    dispatcher_ = std::make_unique<Dispatcher>(
        index_, context_, *stats_,
        DispatcherParts{*ring_, connections_, *acceptor_, *connector_, *lanes_, audit_.get(),
                        control_, [this](Admitted& admitted) { return handOff(admitted); }});
    dispatcher_->start(std::chrono::steady_clock::now());
}

// The mover (the engine), the audit tap, and the lanes (splice over the mover, buffer unless
// --lane splice) with their switching rule.
void Worker::makeDataPath() {
    const auto& settings = context_.settings;
    if (!settings.audit.dir.empty()) {
        auto first = index_ < context_.auditStart.firstSegment.size()
                         ? context_.auditStart.firstSegment[index_]
                         : 1;
        auto writer = std::make_unique<audit::SegmentStore>(
            settings.audit.dir, auditChain(), first, settings.audit.segmentBytes,
            &context_.nextConnectionId, context_.auditStart.chainKey, &context_.sealHeads);
        auto chosen =
            makeAuditLog(settings.audit, std::move(writer), *ring_, ring_->registration());
        audit_ = std::make_unique<AuditTap>(std::move(chosen.log), chosen.policy, *stats_);
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
                    std::make_unique<BufferLaneDriver>(
                        *ring_, ring_->registration(), datapath.bufferRingEntries,
                        datapath.bufferSize, audit_.get(), *stats_, slots, *lanes_));
}

// Pipes and fds are released by the destructors, the parts before the ring they use.
void Worker::tearDown() noexcept {
    control_.close();
    // Hand-offs posted while the loop ended: refused now (the dispatcher drains or stops), so
    // that their sockets close and what admission booked for them is given back.
    if (dispatcher_ && dispatcher_->finished()) {
        try {
            control_.take();
        } catch (const std::exception& e) {
            logError("worker ", index_, ": a last task failed: ", e.what());
        }
    }
    if (audit_) audit_->shutdown();  // the tail made durable before exiting
    connections_.clear();
    dispatcher_.reset();
    connector_.reset();
    acceptor_.reset();
    lanes_.reset();  // unregisters the buffer lane's ring: before the ring goes
    audit_.reset();
    mover_.reset();
    ring_.reset();
    finished_.store(true, std::memory_order_release);
}

void Worker::loop() {
    while (!dispatcher_->finished()) {
        // One submission per turn: everything prepared while handling the last batch goes in
        // here (connects, polls, re-armed accepts, cancels).
        // A non-blocking enter first (it submits and runs the deferred task work): under load
        // completions are nearly always there by then, and going straight to a blocking wait
        // measured 8 % fewer rr requests/s (more sleeps and wake-ups). Only an idle ring waits.
        int rc = ring_->submitAndPeek();
        if (!dispatcher_->busy() && !ring_->completionsReady()) rc = ring_->submitAndWait(1000);
        if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EBUSY)
            logError("worker ", index_, ": io_uring_submit_and_wait: ", errnoText(rc));
        dispatcher_->beginTurn(std::chrono::steady_clock::now());
        ring_->drainCompletions([this](const io_uring_cqe& cqe) { dispatcher_->handle(cqe); });
        dispatcher_->endTurn();
    }
}

// The other worker relays it as if it had accepted it.
bool Worker::handOff(Admitted& admitted) {
    Worker* to = context_.workers[*admitted.handOffTo];
    // Shared, so that a task dropped by a worker that stopped still closes the socket.
    auto handed = std::make_shared<Admitted>(std::move(admitted));
    if (to->post([to, handed] { to->dispatcher_->adopt(std::move(*handed)); })) return true;
    admitted = std::move(*handed);
    return false;
}

void Worker::listConnections(std::vector<ConnectionView>& out) const {
    dispatcher_->listConnections(out);
}

bool Worker::killConnection(std::uint64_t id) {
    return dispatcher_->killConnection(id);
}

int Worker::rotateAudit() noexcept {
    return dispatcher_->rotateAudit();
}

}  // namespace splicegate
