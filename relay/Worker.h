#pragma once
// A worker: one thread, one io_uring, its own SO_REUSEPORT listener per route, and the
// connections it accepted. Other threads talk to it only through requestReload(),
// requestDrain() and requestStop(), which set a flag and wake it through an eventfd.
//
// The worker owns the thread, the ring and the parts that return it decisions: the acceptor
// (listeners, admission, hand-off: relay/Acceptor.h), the upstream connector
// (relay/UpstreamConnector.h) and the connection table with its deadlines
// (relay/ConnectionTable.h, relay/ConnectionTimeouts.h). It routes each completion to its
// owner by op: its own (accept, connect, control, timer), the audit tap's
// (group commit) or the mover's (data path, through the LaneSwitch, whose Verdict it acts on).
// Which engine moves the bytes is decided once, where the mover is made (RelayContext.h).
// Sockets are not registered (fixed) files: the inline engine splices them with direct system
// calls, which need real fds, and registering each accepted socket would cost an
// io_uring_register call per connection to save an fd lookup on its one or two polls per
// message.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/CompletionTag.h"
#include "common/Log.h"
#include "common/Ring.h"
#include "common/UniqueFd.h"
#include "datapath/AuditTap.h"
#include "datapath/LaneSwitch.h"
#include "datapath/Mover.h"
#include "pipes/PipePool.h"
#include "relay/Acceptor.h"
#include "relay/Connection.h"
#include "relay/ConnectionTable.h"
#include "relay/ConnectionTimeouts.h"
#include "relay/RelayContext.h"
#include "relay/UpstreamConnector.h"

namespace splicegate {

class Worker {
  public:
    Worker(unsigned index, RelayContext& context);
    ~Worker();
    Worker(const Worker&) = delete;
    Worker& operator=(const Worker&) = delete;

    // Starts the thread; the future reports set-up failure (ring, listeners) as an exception.
    std::future<void> start();
    void requestReload() noexcept { signal(kReload); }
    void requestDrain() noexcept { signal(kDrain); }
    void requestStop() noexcept { signal(kStop); }
    // Runs `task` on the worker's thread at its next wake-up. False when the worker has finished
    // (the task is dropped). Used by the control plane; tasks must be short.
    bool post(std::function<void()> task);

    // Worker-thread only (call them from posted tasks).
    void listConnections(std::vector<ConnectionView>& out) const;
    bool killConnection(std::uint64_t id);
    int rotateAudit() noexcept;
    unsigned index() const noexcept { return index_; }

    // Any thread: counters written by this worker only.
    const WorkerStats& stats() const noexcept { return *stats_; }
    bool finished() const noexcept { return finished_.load(std::memory_order_acquire); }
    void join();

  private:
    enum Request : std::uint32_t { kReload = 1, kDrain = 2, kStop = 4, kTasks = 8 };
    void signal(std::uint32_t request) noexcept;
    // A connection this worker admitted, or another one admitted and handed over (its
    // admission is booked).
    void take(Admitted admitted);
    bool handOff(Admitted& admitted);
    void adopt(Admitted admitted);
    void startAccepted(Admitted admitted);
    void run(std::promise<void>& started);
    void setUp();
    void loop();
    void handleCompletion(const io_uring_cqe& cqe);
    void handleControl();
    void armControl();
    void armTimer();
    void onTimer();
    void runTasks();
    void runDeferred();

    // Connections
    void beginConnect(Connection& c);
    void actOnConnect(Connection& c, const ConnectStep& step);
    void closeTimedOut();
    void startRelaying(Connection& c);
    void closeConnection(Connection& c, CloseReason reason, bool resetPeers);
    void releaseConnection(Connection& c);
    void releaseIfDone(Connection& c);
    RouteCounters& routeStats(const Connection& c) noexcept {
        return stats_->routes[c.route->statsIndex];
    }

    // What the data path decided for a connection.
    void act(Connection& c, Direction d, const Verdict& verdict);
    void applySync(const SyncOutcome& outcome);

    const unsigned index_;
    RelayContext& context_;
    std::unique_ptr<Ring> ring_;
    std::unique_ptr<WorkerStats> stats_ = std::make_unique<WorkerStats>();
    std::mutex tasksMutex_;
    std::vector<std::function<void()>> tasks_;
    PipePool pipePool_;
    UniqueFd controlFd_;
    std::uint64_t controlValue_ = 0;
    std::atomic<std::uint32_t> requests_{0};
    std::atomic<bool> finished_{false};
    bool draining_ = false;
    bool stopping_ = false;
    __kernel_timespec timerInterval_{};
    std::chrono::steady_clock::time_point now_;
    // Access lines of the connections closed in this turn: one write at the next turn's start.
    LogBatch accessLines_;
    ConnectionTable connections_;
    ConnectionTimeouts timeouts_;
    std::unique_ptr<Acceptor> acceptor_;            // made with the ring, in setUp()
    std::unique_ptr<UpstreamConnector> connector_;  // made with the ring, in setUp()
    std::vector<CompletionTag> deferred_;           // flows that yielded: driven again next turn
    // The data path, made once in setUp(): mover (the engine), audit tap, and the lanes (splice
    // over the mover, buffer unless --lane splice) with their switching rule.
    std::unique_ptr<Mover> mover_;
    std::unique_ptr<AuditTap> audit_;
    std::unique_ptr<LaneSwitch> lanes_;
    std::chrono::steady_clock::time_point lastBufferTrim_{};
    std::thread thread_;
};

}  // namespace splicegate
