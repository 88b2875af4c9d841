// The worker's connection lifecycle through its dispatcher (relay/Dispatcher.h) over
// tests/support/FakeRing.h, with the real acceptor, upstream connector and connection table and
// fake lanes: accept -> connect (retry on the next upstream) -> relaying -> close -> release, with
// what each step leaves behind (the SQEs prepared, the counters, the lanes' calls, the load
// booked), completions delivered by the test in the order it chooses, stale ones included.
// Sockets are real (a loopback listener, socket pairs); no connection is made.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "common/Error.h"
#include "datapath/LaneSwitch.h"
#include "relay/Dispatcher.h"
#include "relay/WorkerOps.h"
#include "tests/support/FakeRing.h"
#include "tests/support/Sockets.h"

namespace splicegate {
namespace {

using test::FakeRing;
using test::lonelySocket;
using test::numericAddress;
using test::PreparedOp;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr std::size_t kBufferSize = 16384;

// A lane that records what it is asked and answers each completion with the next scripted result
// (Wait when none is left). It holds nothing in flight: the dispatcher's cancels and releases are
// what is under test, not the lane's moves.
class RecordingLane final : public Lane {
  public:
    explicit RecordingLane(RingOwner owner) : owner_(owner) {}

    void setNow(Clock::time_point) noexcept override {}
    bool start(ConnectionIo&) noexcept override {
        ++starts;
        return true;
    }
    StepResult enter(ConnectionIo&, Direction) noexcept override { return {Next::Wait}; }
    StepResult drive(ConnectionIo&, Direction d) noexcept override {
        driven.push_back(d);
        return {Next::Wait};
    }
    bool owns(RingOwner owner) const noexcept override { return owner == owner_; }
    StepResult complete(ConnectionIo&, CompletionTag tag, MoveCompletion) noexcept override {
        completed.push_back(tag);
        if (results.empty()) return {Next::Wait};
        auto result = results.front();
        results.pop_front();
        return result;
    }
    StepResult durable(ConnectionIo&, Direction) noexcept override { return {Next::Wait}; }
    void release(ConnectionIo&) noexcept override { ++releases; }
    void dropCompletion(CompletionTag tag, MoveCompletion) noexcept override {
        dropped.push_back(tag);
    }
    void afterTurn(const ConnectionFinder&) noexcept override { ++turns; }
    void trim() noexcept override {}

    int starts = 0, releases = 0, turns = 0;
    std::vector<Direction> driven;
    std::vector<CompletionTag> completed, dropped;
    std::deque<StepResult> results;

  private:
    RingOwner owner_;
};

UpstreamConfig upstream(const char* text) {
    return UpstreamConfig{text, {numericAddress(text)}, {}, 1, false};
}

class DispatcherTest : public ::testing::Test {
  protected:
    void make(std::vector<UpstreamConfig> upstreams, std::uint32_t idleTimeoutMs = 0,
              unsigned workers = 1) {
        WorkerSettings settings;
        settings.relay.maxConnections = 100;
        settings.relay.connectTimeoutMs = 1500;
        settings.relay.delayedAck = false;
        settings.relay.idleTimeoutMs = idleTimeoutMs;
        settings.relay.accessLog = false;
        settings.datapath.lane = LaneKind::Auto;
        context = std::make_unique<RelayContext>(settings, 0);
        context->workerLoads = std::make_unique<WorkerLoads>(workers);
        RouteConfig config;
        config.name = "web";
        config.listen = numericAddress("127.0.0.1:0");
        config.upstreams = std::move(upstreams);
        auto table = std::make_shared<RouteTable>(RouteTable{std::make_shared<Route>(config, 0, nullptr, settings.relay)});
        context->setListenerSockets(ListenerSockets::bind(*table, 1, nullptr, {}));
        context->setRoutes(table);

        now = Clock::now();
        connections = std::make_unique<ConnectionTable>(workerTickPeriod(settings), now);
        lanes = std::make_unique<LaneSwitch>(LaneKind::Auto, kBufferSize);
        auto ownedSplice = std::make_unique<RecordingLane>(RingOwner::Mover);
        auto ownedBuffer = std::make_unique<RecordingLane>(RingOwner::BufferLane);
        splice = ownedSplice.get();
        buffer = ownedBuffer.get();
        lanes->own(LaneKind::Splice, std::move(ownedSplice));
        lanes->own(LaneKind::Buffer, std::move(ownedBuffer));
        acceptor = std::make_unique<Acceptor>(0, *context, ring, *stats);
        connector = std::make_unique<UpstreamConnector>(*context, ring, *connections);
        dispatcher = std::make_unique<Dispatcher>(
            0, *context, *stats,
            DispatcherParts{ring, *connections, *acceptor, *connector, *lanes, nullptr, control,
                            [this](Admitted& admitted) {
                                handedTo.push_back(*admitted.handOffTo);
                                if (!takeHandOff) return false;
                                handed.push_back(std::move(admitted));
                                return true;
                            }});
        dispatcher->start(now);
    }

    // One loop turn: the completions queued so far handled, then the turn's end.
    void turn(milliseconds later = milliseconds(0)) {
        now += later;
        dispatcher->beginTurn(now);
        ring.drainCompletions([&](const io_uring_cqe& cqe) { dispatcher->handle(cqe); });
        dispatcher->endTurn();
    }
    std::vector<PreparedOp> pendingOf(RingOp kind) const {
        std::vector<PreparedOp> found;
        for (const auto& op : ring.pending())
            if (op.op == kind) found.push_back(op);
        return found;
    }
    // The kernel's part of an accept: a new socket from `peer` written where the accept said.
    void acceptFrom(const char* peer) {
        auto accepts = pendingOf(RingOp::Accept);
        ASSERT_FALSE(accepts.empty());
        const auto& op = accepts.front();
        auto address = numericAddress(peer);
        std::memcpy(op.peerAddress, address.get(), address.length());
        *op.peerLength = address.length();
        ASSERT_TRUE(ring.complete(op.tag, lonelySocket().release()));
        turn();
    }
    // The kernel's answer to the drain's cancel: every accept still armed ends -ECANCELED.
    void cancelAccepts() {
        for (const auto& op : pendingOf(RingOp::Accept)) ASSERT_TRUE(ring.complete(op.tag, -ECANCELED));
        turn();
    }
    // The connect in flight (and its linked timeout) completed with `result`.
    void completeConnect(int result) {
        auto connects = pendingOf(RingOp::Connect);
        ASSERT_EQ(connects.size(), 1u);
        auto timeouts = pendingOf(RingOp::LinkTimeout);
        ASSERT_EQ(timeouts.size(), 1u);
        ASSERT_TRUE(ring.complete(connects[0].tag, result));
        ASSERT_TRUE(ring.complete(timeouts[0].tag, -ECANCELED));  // the kernel's, either way
        turn();
    }
    Connection* only() {
        Connection* found = nullptr;
        connections->forEach([&](Connection& c) { found = &c; });
        return found;
    }
    std::uint64_t closed(CloseReason reason) const {
        return stats->routes[0].closed[static_cast<std::size_t>(reason)].get();
    }

    FakeRing ring;
    WorkerControl control;
    Clock::time_point now;
    std::unique_ptr<WorkerStats> stats = std::make_unique<WorkerStats>();
    std::unique_ptr<RelayContext> context;
    std::unique_ptr<ConnectionTable> connections;
    std::unique_ptr<LaneSwitch> lanes;
    RecordingLane* splice = nullptr;
    RecordingLane* buffer = nullptr;
    std::unique_ptr<Acceptor> acceptor;
    std::unique_ptr<UpstreamConnector> connector;
    std::unique_ptr<Dispatcher> dispatcher;
    bool takeHandOff = true;
    std::vector<unsigned> handedTo;
    std::vector<Admitted> handed;
};

TEST_F(DispatcherTest, StartArmsTheListenersAcceptsAndTheTimer) {
    make({upstream("127.0.0.1:1")});
    EXPECT_FALSE(pendingOf(RingOp::Accept).empty());
    auto timers = pendingOf(RingOp::Timeout);
    ASSERT_EQ(timers.size(), 1u);
    EXPECT_EQ(timers[0].tag, CompletionTag::make(WorkerOp::Timer));
    EXPECT_FALSE(dispatcher->finished());
}

TEST_F(DispatcherTest, AControlCompletionRunsTheTasksThenActsOnTheRequestAndReadsAgain) {
    make({upstream("127.0.0.1:1")});
    auto controlTag = CompletionTag::make(WorkerOp::Control);
    ASSERT_NE(ring.findPending(controlTag), nullptr) << "start arms the control's read";
    bool ran = false;
    ASSERT_TRUE(control.post([&] { ran = true; }));
    control.requestDrain();
    ring.clearRecord();
    ASSERT_TRUE(ring.complete(controlTag, sizeof(std::uint64_t)));
    turn();
    EXPECT_TRUE(ran);
    bool listenerCancelled = false;
    for (const auto& op : ring.preparedSinceClear()) listenerCancelled |= op.op == RingOp::CancelFd;
    EXPECT_TRUE(listenerCancelled) << "the drain closed the listener";
    EXPECT_FALSE(dispatcher->finished()) << "a cancelled accept may still bring a connection";
    EXPECT_NE(ring.findPending(controlTag), nullptr) << "the read is armed again";
    cancelAccepts();
    EXPECT_TRUE(dispatcher->finished()) << "draining with no connection and no accept";
}

TEST_F(DispatcherTest, AnAcceptedConnectionConnectsRelaysAndClosesOnTheLanesVerdict) {
    make({upstream("127.0.0.1:1")});
    acceptFrom("127.0.0.2:4000");
    Connection* c = only();
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->state, ConnectionState::Connecting);
    EXPECT_EQ(c->clientAddress, numericAddress("127.0.0.2:4000"));
    EXPECT_EQ(stats->routes[0].accepted.get(), 1u);
    EXPECT_EQ(stats->routes[0].active.get(), 1);
    auto connects = pendingOf(RingOp::Connect);
    ASSERT_EQ(connects.size(), 1u);
    EXPECT_EQ(connects[0].tag,
              CompletionTag::make(WorkerOp::Connect, c->io.slot, c->io.generation));

    completeConnect(0);
    ASSERT_EQ(c->state, ConnectionState::Relaying);
    EXPECT_EQ(buffer->starts, 1) << "--lane auto starts both directions in the buffer lane";
    EXPECT_EQ(splice->starts, 0);

    // The buffer lane's completion for the client's direction says the client reset.
    buffer->results.push_back({Next::Close, Verdict::close(CloseReason::ClientReset, true)});
    auto laneTag = c->io.tag(Direction::ClientToUpstream, RingOwner::BufferLane);
    ring.deliverRaw(laneTag, -ECONNRESET);
    turn();
    ASSERT_EQ(buffer->completed.size(), 1u);
    EXPECT_EQ(buffer->completed[0], laneTag);
    EXPECT_EQ(only(), nullptr) << "nothing in flight: released at once";
    EXPECT_EQ(buffer->releases, 1);
    EXPECT_EQ(closed(CloseReason::ClientReset), 1u);
    EXPECT_EQ(stats->routes[0].active.get(), 0);
    EXPECT_EQ(context->activeConnections.load(), 0u) << "admission's booking released";
    EXPECT_EQ(context->workerLoads->load(0), 0);

    // A late completion of the released connection reaches the lane's drop, not a connection.
    ring.deliverRaw(laneTag, 0);
    turn();
    ASSERT_EQ(buffer->dropped.size(), 1u);
    EXPECT_EQ(buffer->completed.size(), 1u);
}

TEST_F(DispatcherTest, ARefusedConnectTriesTheNextUpstreamThenClosesAsUnreachable) {
    make({upstream("127.0.0.1:1"), upstream("127.0.0.1:2")});
    acceptFrom("127.0.0.2:4001");
    Connection* c = only();
    ASSERT_NE(c, nullptr);
    auto first = c->upstreamAddress;
    completeConnect(-ECONNREFUSED);
    ASSERT_EQ(only(), c);
    EXPECT_EQ(c->state, ConnectionState::Connecting);
    EXPECT_NE(c->upstreamAddress, first) << "the retry goes to the other upstream";
    // A connect still running a turn later has its client watched; the connection waits for
    // that poll's cancellation before its fds go.
    auto watches = pendingOf(RingOp::PollAdd);
    ASSERT_EQ(watches.size(), 1u);
    EXPECT_EQ(watches[0].fd, c->io.client.get());
    completeConnect(-ECONNREFUSED);
    ASSERT_EQ(only(), c);
    EXPECT_EQ(c->state, ConnectionState::Closing);
    ASSERT_TRUE(ring.complete(watches[0].tag, -ECANCELED));
    turn();
    EXPECT_EQ(only(), nullptr);
    EXPECT_EQ(closed(CloseReason::UpstreamUnreachable), 1u);
    EXPECT_EQ(buffer->starts, 0) << "never relayed";
    EXPECT_EQ(context->activeConnections.load(), 0u);
}

TEST_F(DispatcherTest, StopDuringAConnectCancelsItAndReleasesWhenItsCompletionsAreIn) {
    make({upstream("127.0.0.1:1")});
    acceptFrom("127.0.0.2:4002");
    Connection* c = only();
    ASSERT_NE(c, nullptr);
    int clientFd = c->io.client.get();
    ring.clearRecord();
    dispatcher->stop();
    EXPECT_FALSE(dispatcher->finished()) << "its connect is still in flight";
    std::vector<int> cancelled;
    for (const auto& op : ring.preparedSinceClear())
        if (op.op == RingOp::CancelFd) cancelled.push_back(op.fd);
    EXPECT_NE(std::find(cancelled.begin(), cancelled.end(), clientFd), cancelled.end())
        << "the client's operations are cancelled before its fd can go";
    EXPECT_EQ(only(), c) << "its fds stay open until the connect's completions are in";
    completeConnect(-ECANCELED);
    EXPECT_EQ(only(), nullptr);
    EXPECT_EQ(closed(CloseReason::Shutdown), 1u);
    EXPECT_TRUE(dispatcher->finished());
}

TEST_F(DispatcherTest, TheTimerClosesAnIdleConnectionAndArmsItselfAgain) {
    make({upstream("127.0.0.1:1")}, 200);
    acceptFrom("127.0.0.2:4003");
    completeConnect(0);
    Connection* c = only();
    ASSERT_NE(c, nullptr);
    ASSERT_EQ(c->state, ConnectionState::Relaying);
    auto timer = CompletionTag::make(WorkerOp::Timer);
    ASSERT_TRUE(ring.complete(timer, -ETIME));
    turn(milliseconds(100));
    EXPECT_EQ(only(), c) << "100 ms quiet: not idle yet";
    ASSERT_NE(ring.findPending(timer), nullptr) << "the timer is armed again";
    ASSERT_TRUE(ring.complete(timer, -ETIME));
    turn(milliseconds(400));
    EXPECT_EQ(only(), nullptr);
    EXPECT_EQ(closed(CloseReason::IdleTimeout), 1u);
    EXPECT_NE(ring.findPending(timer), nullptr);
}

TEST_F(DispatcherTest, DrainClosesTheListenersAndFinishesWithTheLastConnection) {
    make({upstream("127.0.0.1:1")});
    acceptFrom("127.0.0.2:4004");
    completeConnect(0);
    ring.clearRecord();
    dispatcher->drain();
    bool listenerCancelled = false;
    for (const auto& op : ring.preparedSinceClear()) listenerCancelled |= op.op == RingOp::CancelFd;
    EXPECT_TRUE(listenerCancelled) << "the listener's accepts are cancelled";
    EXPECT_FALSE(dispatcher->finished()) << "a connection still relays";
    buffer->results.push_back({Next::Close, Verdict::close(CloseReason::Closed, false)});
    ring.deliverRaw(only()->io.tag(Direction::UpstreamToClient, RingOwner::BufferLane), 0);
    turn();
    EXPECT_EQ(closed(CloseReason::Closed), 1u);
    EXPECT_FALSE(dispatcher->finished()) << "its cancelled accepts are still out";
    cancelAccepts();
    EXPECT_TRUE(dispatcher->finished());
}

TEST_F(DispatcherTest, AnAcceptTheKernelCompletedBeforeTheDrainsCancelIsServed) {
    make({upstream("127.0.0.1:1")});
    std::uint16_t port = 0;
    UniqueFd listener = test::listenTcp(port);
    int error = 0;
    UniqueFd client = test::connectTcp(port, error);
    ASSERT_TRUE(client) << error;
    UniqueFd server(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    ASSERT_TRUE(server);
    auto accepts = pendingOf(RingOp::Accept);
    ASSERT_FALSE(accepts.empty());
    dispatcher->drain();
    // An upgrade or a drain must not reset a connection the kernel had already handed over.
    ASSERT_TRUE(ring.complete(accepts.front().tag, server.release()));
    turn();
    ASSERT_NE(only(), nullptr) << "served, not dropped";
    EXPECT_EQ(only()->clientAddress.port(), test::localPort(client.get()));
    EXPECT_EQ(pendingOf(RingOp::Connect).size(), 1u);
    EXPECT_FALSE(dispatcher->finished());
}

TEST_F(DispatcherTest, ACompletionOfNoRoutedOwnerIsDroppedAndTheRestGoOn) {
    make({upstream("127.0.0.1:1")});
    ring.deliverRaw(CompletionTag::of(RingOwner::AuditLog, std::uint8_t{1}), 0);
    turn();  // audit off: nothing routed for its owner, nothing crashes
    acceptFrom("127.0.0.2:4005");
    EXPECT_NE(only(), nullptr);
}

TEST_F(DispatcherTest, ABusierWorkerHandsTheConnectionOverAndKeepsItWhenRefused) {
    make({upstream("127.0.0.1:1")}, 0, 2);
    context->workerLoads->add(0, 2);  // two more than worker 1: the next one goes there
    acceptFrom("127.0.0.2:4006");
    ASSERT_EQ(handedTo, std::vector<unsigned>{1});
    ASSERT_EQ(handed.size(), 1u);
    EXPECT_EQ(only(), nullptr) << "the other worker relays it";
    EXPECT_EQ(context->workerLoads->load(1), 1) << "booked on the worker it went to";
    EXPECT_TRUE(pendingOf(RingOp::Connect).empty());

    takeHandOff = false;              // that worker has stopped: the post was dropped
    context->workerLoads->add(0, 1);  // two more than worker 1 again
    acceptFrom("127.0.0.2:4007");
    ASSERT_EQ(handedTo.size(), 2u);
    ASSERT_NE(only(), nullptr) << "it stays here";
    EXPECT_EQ(context->workerLoads->load(1), 1) << "the booking moved back";
    EXPECT_EQ(context->workerLoads->load(0), 4);
    EXPECT_EQ(pendingOf(RingOp::Connect).size(), 1u);
}

TEST_F(DispatcherTest, AConnectionHandedInIsRelayedUnlessTheWorkerStops) {
    make({upstream("127.0.0.1:1")});
    Admitted admitted{context->routes()->front(), lonelySocket(), numericAddress("127.0.0.2:4008"),
                      std::nullopt, nullptr, true};
    context->workerLoads->add(0, 1);  // what the admitting worker booked for this one
    dispatcher->adopt(std::move(admitted));
    ASSERT_NE(only(), nullptr);
    EXPECT_EQ(pendingOf(RingOp::Connect).size(), 1u);

    // Accepted before the drain by a worker that handed it over: still relayed.
    dispatcher->drain();
    Admitted drained{context->routes()->front(), lonelySocket(),
                     numericAddress("127.0.0.2:4010"), std::nullopt, nullptr, true};
    context->workerLoads->add(0, 1);
    dispatcher->adopt(std::move(drained));
    EXPECT_EQ(pendingOf(RingOp::Connect).size(), 2u) << "relayed while draining";

    dispatcher->stop();
    Admitted late{context->routes()->front(), lonelySocket(), numericAddress("127.0.0.2:4009"),
                  std::nullopt, nullptr, true};
    context->workerLoads->add(0, 1);
    const auto booked = context->workerLoads->load(0);
    dispatcher->adopt(std::move(late));
    EXPECT_EQ(context->workerLoads->load(0), booked - 1) << "refused: its booking released";
}

}  // namespace
}  // namespace splicegate
