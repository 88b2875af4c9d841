// The worker's acceptor (relay/Acceptor.h) and upstream connector (relay/UpstreamConnector.h)
// over tests/support/FakeRing.h, no kernel ring: the SQEs they prepare (owner Worker, the
// connection's or listener's slot and generation, the connect linked to its timeout) and what
// they return for the completions the test delivers, playing the kernel (an accept's peer address
// is written where the accept said). Sockets are real (a loopback listener, socket pairs), no
// connection is made.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "common/Error.h"
#include "relay/Acceptor.h"
#include "relay/ConnectionTable.h"
#include "relay/UpstreamConnector.h"
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

constexpr std::uint32_t kConnectTimeoutMs = 1500;

UpstreamConfig upstream(const char* text) {
    return UpstreamConfig{text, {numericAddress(text)}, {}, 1, false};
}

WorkerSettings settings(std::uint64_t maxConnections = 100) {
    WorkerSettings s;
    s.relay.maxConnections = maxConnections;
    s.relay.connectTimeoutMs = kConnectTimeoutMs;
    s.relay.delayedAck = false;
    return s;
}

std::shared_ptr<const Route> makeRoute(std::vector<UpstreamConfig> upstreams) {
    RouteConfig config;
    config.name = "web";
    config.listen = numericAddress("127.0.0.1:0");
    config.upstreams = std::move(upstreams);
    return std::make_shared<Route>(config, 0, nullptr, settings().relay);
}

std::vector<PreparedOp> pendingOf(const FakeRing& ring, RingOp kind) {
    std::vector<PreparedOp> found;
    for (const auto& op : ring.pending())
        if (op.op == kind) found.push_back(op);
    return found;
}

// ---- the acceptor -----------------------------------------------------------------------------

class AcceptorTest : public ::testing::Test {
  protected:
    void make(std::uint64_t maxConnections = 100) {
        context = std::make_unique<RelayContext>(settings(maxConnections), 0);
        context->workerLoads = std::make_unique<WorkerLoads>(1);
        auto table = std::make_shared<RouteTable>(RouteTable{makeRoute({upstream("127.0.0.1:1")})});
        context->setListenerSockets(ListenerSockets::bind(*table, 1, nullptr, {}));
        context->setRoutes(table);
        acceptor = std::make_unique<Acceptor>(0, *context, ring, *stats);
        acceptor->applyRoutes(true);
    }
    // Completes the armed accept `op` with a new socket from `peer`, as the kernel would.
    std::optional<Admitted> accept(const PreparedOp& op, const char* peer) {
        auto address = numericAddress(peer);
        EXPECT_NE(op.peerAddress, nullptr);
        EXPECT_NE(op.peerLength, nullptr);
        std::memcpy(op.peerAddress, address.get(), address.length());
        *op.peerLength = address.length();
        return complete(op.tag, lonelySocket().release());
    }
    std::optional<Admitted> complete(CompletionTag tag, int result) {
        EXPECT_TRUE(ring.complete(tag, result));
        std::optional<Admitted> admitted;
        ring.drainCompletions([&](const io_uring_cqe& cqe) {
            auto completed = CompletionTag::decode(cqe.user_data);
            EXPECT_EQ(completed.owner, RingOwner::Worker);
            EXPECT_EQ(completed.opAs<WorkerOp>(), WorkerOp::Accept);
            admitted = acceptor->onAccept(completed, cqe.res, Clock::now());
        });
        return admitted;
    }

    FakeRing ring;
    std::unique_ptr<WorkerStats> stats = std::make_unique<WorkerStats>();
    std::unique_ptr<RelayContext> context;
    std::unique_ptr<Acceptor> acceptor;
};

TEST_F(AcceptorTest, ArmsItsAcceptsOnTheListenerTaggedForTheWorker) {
    make();
    auto accepts = pendingOf(ring, RingOp::Accept);
    ASSERT_EQ(accepts.size(), 16u);
    int listener = accepts[0].fd;
    EXPECT_GE(listener, 0);
    for (std::uint8_t which = 0; which < accepts.size(); ++which) {
        const auto& op = accepts[which];
        EXPECT_EQ(op.fd, listener);
        EXPECT_EQ(op.opFlags, SOCK_NONBLOCK | SOCK_CLOEXEC);
        EXPECT_EQ(op.tag, CompletionTag::make(WorkerOp::Accept, 0, 1, which))
            << "listener 0, its generation, the accept's place as direction";
        EXPECT_EQ(op.tag.owner, RingOwner::Worker);
    }
}

TEST_F(AcceptorTest, AnAcceptCompletionIsAdmittedAndTheAcceptArmedAgain) {
    make();
    auto first = pendingOf(ring, RingOp::Accept)[5];
    ring.clearRecord();
    auto admitted = accept(first, "127.0.0.2:4321");
    ASSERT_TRUE(admitted);
    EXPECT_TRUE(admitted->client);
    EXPECT_EQ(admitted->peer, numericAddress("127.0.0.2:4321"));
    EXPECT_EQ(admitted->route->config.name, "web");
    EXPECT_FALSE(admitted->handOffTo) << "one worker: nobody to hand it to";
    EXPECT_EQ(context->activeConnections.load(), 1u);
    EXPECT_EQ(context->workerLoads->load(0), 1);

    auto rearmed = ring.preparedSinceClear();
    ASSERT_EQ(rearmed.size(), 1u);
    EXPECT_EQ(rearmed[0].op, RingOp::Accept);
    EXPECT_EQ(rearmed[0].tag, first.tag);

    acceptor->release(admitted->route.get(), admitted->peer, admitted->sourceBooked);
    EXPECT_EQ(context->activeConnections.load(), 0u);
    EXPECT_EQ(context->workerLoads->load(0), 0);
}

TEST_F(AcceptorTest, PastMaxConnectionsTheSocketIsRefusedAndCounted) {
    make(1);
    auto accepts = pendingOf(ring, RingOp::Accept);
    ASSERT_TRUE(accept(accepts[0], "127.0.0.2:1000"));
    EXPECT_FALSE(accept(accepts[1], "127.0.0.2:1001"));
    EXPECT_EQ(
        stats->routes[0].refused[static_cast<std::size_t>(RefuseReason::MaxConnections)].get(), 1u);
    EXPECT_EQ(context->activeConnections.load(), 1u);
}

TEST_F(AcceptorTest, AFailedAcceptWaitsForTheTimerToBeArmedAgain) {
    make();
    auto op = pendingOf(ring, RingOp::Accept)[2];
    ring.clearRecord();
    EXPECT_FALSE(complete(op.tag, -EMFILE));
    EXPECT_TRUE(ring.preparedSinceClear().empty()) << "not re-armed in a tight loop";
    acceptor->rearm();
    auto rearmed = ring.preparedSinceClear();
    ASSERT_EQ(rearmed.size(), 1u);
    EXPECT_EQ(rearmed[0].tag, op.tag);
}

TEST_F(AcceptorTest, ClosingCancelsTheListenersAcceptsBeforeItsFdGoes) {
    make();
    auto op = pendingOf(ring, RingOp::Accept)[0];
    ring.clearRecord();
    acceptor->closeAll();
    auto cancels = ring.preparedSinceClear();
    ASSERT_EQ(cancels.size(), 1u);
    EXPECT_EQ(cancels[0].op, RingOp::CancelFd);
    EXPECT_EQ(cancels[0].fd, op.fd);
    EXPECT_EQ(cancels[0].opFlags, static_cast<int>(IORING_ASYNC_CANCEL_ALL));
    EXPECT_EQ(cancels[0].tag, CompletionTag::make(WorkerOp::Ignore));
    EXPECT_EQ(ring.submits(), 1u) << "submitted while the fd number is still the listener's";
    EXPECT_EQ(ring.preparedAtLastSubmit(), ring.ops().size());
    // The cancelled accepts complete for a listener whose generation moved on.
    EXPECT_FALSE(complete(op.tag, -ECANCELED));
}

// ---- the upstream connector -------------------------------------------------------------------

class UpstreamConnectorTest : public ::testing::Test {
  protected:
    void make(std::vector<UpstreamConfig> upstreams) {
        context = std::make_unique<RelayContext>(settings(), 0);
        connector = std::make_unique<UpstreamConnector>(*context, ring, connections);
        // Slot 1 in its second generation: the tags must name both.
        connections.allocate(7);
        connections.release(connections.allocate(8));
        auto& c = connections.allocate(9);
        ASSERT_EQ(c.io.slot, 1u);
        ASSERT_EQ(c.io.generation, 2u);
        c.route = makeRoute(std::move(upstreams));
        c.io.client = lonelySocket();
        c.io.counters = &counters;
        c.clientAddress = numericAddress("127.0.0.2:5000");
        connection = &c;
    }
    Connection& c() { return *connection; }
    CompletionTag tagOf(WorkerOp op) const {
        return CompletionTag::make(op, connection->io.slot, connection->io.generation);
    }
    // Delivers the completion of the pending operation tagged `tag` through the worker's
    // routing for these ops.
    ConnectStep deliver(CompletionTag tag, int result) {
        EXPECT_TRUE(ring.complete(tag, result));
        ConnectStep step;
        ring.drainCompletions([&](const io_uring_cqe& cqe) {
            auto completed = CompletionTag::decode(cqe.user_data);
            EXPECT_EQ(completed.owner, RingOwner::Worker);
            Connection* found = connections.find(completed);
            ASSERT_EQ(found, connection);
            switch (completed.opAs<WorkerOp>()) {
                case WorkerOp::Connect:
                    step = connector->onConnect(*found, cqe.res);
                    break;
                case WorkerOp::ConnectTimeout:
                    connector->onConnectTimeout(*found);
                    break;
                case WorkerOp::ClientWatch:
                    step = connector->onClientWatch(*found, cqe.res);
                    break;
                default:
                    ADD_FAILURE() << "op " << int{completed.op};
            }
        });
        return step;
    }
    // The connect's own completion and its linked timeout's, as the kernel posts them.
    ConnectStep connectEnds(int connectResult, int timeoutResult) {
        auto step = deliver(tagOf(WorkerOp::Connect), connectResult);
        deliver(tagOf(WorkerOp::ConnectTimeout), timeoutResult);
        return step;
    }

    FakeRing ring;
    ConnectionTable connections{std::chrono::milliseconds(100), Clock::now()};
    RouteCounters counters;
    std::unique_ptr<RelayContext> context;
    std::unique_ptr<UpstreamConnector> connector;
    Connection* connection = nullptr;
};

TEST_F(UpstreamConnectorTest, StartPreparesTheConnectLinkedToItsTimeout) {
    make({upstream("127.0.0.1:1")});
    auto step = connector->start(c());
    EXPECT_EQ(step.action, ConnectStep::Action::Wait);
    ASSERT_TRUE(c().io.upstream);

    const auto& ops = ring.ops();
    ASSERT_EQ(ops.size(), 2u);
    EXPECT_EQ(ring.roomRequests(), std::vector<unsigned>{2}) << "the pair in one submission";
    EXPECT_EQ(ops[0].op, RingOp::Connect);
    EXPECT_EQ(ops[0].fd, c().io.upstream.get());
    EXPECT_TRUE(ops[0].flags.has(SqeFlag::Link));
    EXPECT_EQ(ops[0].tag, tagOf(WorkerOp::Connect));
    EXPECT_EQ(ops[0].tag.owner, RingOwner::Worker);
    EXPECT_EQ(ops[0].tag.slot, 1u);
    EXPECT_EQ(ops[0].tag.generation, 2u);
    EXPECT_EQ(SocketAddress::fromSockaddr(static_cast<const sockaddr*>(ops[0].address),
                                          static_cast<socklen_t>(ops[0].length)),
              numericAddress("127.0.0.1:1"));
    EXPECT_EQ(ops[1].op, RingOp::LinkTimeout);
    EXPECT_EQ(ops[1].tag, tagOf(WorkerOp::ConnectTimeout));
    EXPECT_EQ(ops[1].timeout.tv_sec, 1);
    EXPECT_EQ(ops[1].timeout.tv_nsec, 500'000'000);
    EXPECT_EQ(c().connectOps, 2u);
    EXPECT_EQ(c().operationsInFlight(), 2u);
}

TEST_F(UpstreamConnectorTest, ARefusedConnectRetriesTheNextUpstreamThenFails) {
    make({upstream("127.0.0.1:1"), upstream("127.0.0.1:2")});
    connector->start(c());
    // The connect failed on its own: the kernel cancels the linked timeout.
    auto step = connectEnds(-ECONNREFUSED, -ECANCELED);
    EXPECT_EQ(step.action, ConnectStep::Action::Retry);
    EXPECT_EQ(c().connectOps, 0u);
    EXPECT_FALSE(c().io.upstream) << "the failed socket is closed";
    EXPECT_EQ(counters.connectFailures.get(), 1u);

    ring.clearRecord();
    EXPECT_EQ(connector->start(c()).action, ConnectStep::Action::Wait);
    auto retry = ring.preparedSinceClear();
    ASSERT_EQ(retry.size(), 2u);
    EXPECT_EQ(c().upstreamIndex, 1u);
    EXPECT_EQ(SocketAddress::fromSockaddr(static_cast<const sockaddr*>(retry[0].address),
                                          static_cast<socklen_t>(retry[0].length)),
              numericAddress("127.0.0.1:2"));
    EXPECT_EQ(retry[0].tag, tagOf(WorkerOp::Connect)) << "the same connection";

    step = connectEnds(-ECONNREFUSED, -ECANCELED);
    EXPECT_EQ(step.action, ConnectStep::Action::Fail) << "every address had its turn";
    EXPECT_EQ(step.reason, CloseReason::UpstreamUnreachable);
    EXPECT_EQ(counters.connectFailures.get(), 2u);
}

TEST_F(UpstreamConnectorTest, AConnectCutShortByItsTimeoutFailsAsUnreachable) {
    make({upstream("127.0.0.1:1")});
    connector->start(c());
    // The timeout fired (-ETIME) and cancelled the connect: the timeout's completion may come
    // first.
    deliver(tagOf(WorkerOp::ConnectTimeout), -ETIME);
    EXPECT_EQ(c().connectOps, 1u);
    auto step = deliver(tagOf(WorkerOp::Connect), -ECANCELED);
    EXPECT_EQ(step.action, ConnectStep::Action::Fail);
    EXPECT_EQ(step.reason, CloseReason::UpstreamUnreachable);
    EXPECT_EQ(c().operationsInFlight(), 0u);
}

TEST_F(UpstreamConnectorTest, ASuccessfulConnectIsConnected) {
    make({upstream("127.0.0.1:1")});
    connector->start(c());
    auto step = connectEnds(0, -ECANCELED);
    EXPECT_EQ(step.action, ConnectStep::Action::Connected);
    EXPECT_EQ(c().connectOps, 0u);
    EXPECT_TRUE(c().io.upstream);
    EXPECT_EQ(counters.connectFailures.get(), 0u);
    EXPECT_TRUE(ring.pending().empty());
}

TEST_F(UpstreamConnectorTest, ASlowConnectWatchesItsClientAndAClientThatLeavesFailsIt) {
    make({upstream("127.0.0.1:1")});
    connector->start(c());
    connector->watchSlowConnects();  // the turn it started in: not yet
    EXPECT_TRUE(pendingOf(ring, RingOp::PollAdd).empty());
    EXPECT_TRUE(connector->watchesDue());
    connector->watchSlowConnects();  // a turn later, still connecting
    auto watches = pendingOf(ring, RingOp::PollAdd);
    ASSERT_EQ(watches.size(), 1u);
    EXPECT_EQ(watches[0].fd, c().io.client.get());
    EXPECT_EQ(watches[0].opFlags, POLLERR | POLLHUP);
    EXPECT_EQ(watches[0].tag, tagOf(WorkerOp::ClientWatch));
    EXPECT_TRUE(c().watchingClient);
    EXPECT_EQ(c().operationsInFlight(), 3u);

    auto step = deliver(tagOf(WorkerOp::ClientWatch), POLLHUP);
    EXPECT_EQ(step.action, ConnectStep::Action::Fail);
    EXPECT_EQ(step.reason, CloseReason::ClientReset);
    EXPECT_FALSE(c().watchingClient);
}

TEST_F(UpstreamConnectorTest, AClientThatOnlySentItsFinLetsTheConnectGoOn) {
    make({upstream("127.0.0.1:1")});
    connector->start(c());
    connector->watchSlowConnects();
    connector->watchSlowConnects();
    auto step = deliver(tagOf(WorkerOp::ClientWatch), POLLRDHUP);
    EXPECT_EQ(step.action, ConnectStep::Action::Wait);
    EXPECT_EQ(connectEnds(0, -ECANCELED).action, ConnectStep::Action::Connected);
}

TEST_F(UpstreamConnectorTest, AConnectDoneWhileTheClientIsWatchedRemovesTheWatch) {
    make({upstream("127.0.0.1:1")});
    connector->start(c());
    connector->watchSlowConnects();
    connector->watchSlowConnects();
    ring.clearRecord();
    EXPECT_EQ(connectEnds(0, -ECANCELED).action, ConnectStep::Action::Connected);
    auto removes = ring.preparedSinceClear();
    ASSERT_EQ(removes.size(), 1u);
    EXPECT_EQ(removes[0].op, RingOp::PollRemove);
    EXPECT_EQ(removes[0].target, tagOf(WorkerOp::ClientWatch));
    EXPECT_EQ(removes[0].tag, CompletionTag::make(WorkerOp::Ignore));
    // The watch ends with -ECANCELED: no verdict on a connection that is relaying by then.
    auto step = deliver(tagOf(WorkerOp::ClientWatch), -ECANCELED);
    EXPECT_EQ(step.action, ConnectStep::Action::Wait);
    EXPECT_FALSE(c().watchingClient);
}

}  // namespace
}  // namespace splicegate
