#pragma once
// A worker: one thread, one io_uring, its own SO_REUSEPORT listener per route, and the
// connections it accepted. Other threads talk to it only through requestReload(),
// requestDrain() and requestStop(), which set a flag and wake it through an eventfd.
//
// The worker owns the thread, the ring, the listeners and the connection table, and routes each
// completion to its owner by op: its own (accept, connect, control, timer), the audit tap's
// (group commit) or the mover's (data path, through the FlowDriver, whose Verdict it acts on).
// Which engine moves the bytes is decided once, where the mover is made (RelayContext.h).
// Sockets are not registered (fixed) files: the inline engine splices them with direct system
// calls, which need real fds, and registering each accepted socket would cost an
// io_uring_register call per connection to save an fd lookup on its one or two polls per
// message.
#include <sys/socket.h>

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
#include "datapath/FlowDriver.h"
#include "datapath/Mover.h"
#include "pipes/PipePool.h"
#include "relay/Connection.h"
#include "relay/RelayContext.h"

namespace splicegate {

// What the control plane shows of a connection.
struct ConnectionView {
    std::uint64_t id = 0;
    unsigned worker = 0;
    std::string route;
    std::string client;
    std::string upstream;
    std::uint64_t ageMs = 0;
    std::uint64_t bytesC2u = 0;
    std::uint64_t bytesU2c = 0;
    const char* state = "";
};

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
    // The worker's own io_uring ops (below 0x20: the audit tap's and the movers' ops are theirs,
    // datapath/AuditTap.h, datapath/Mover.h).
    enum class Op : std::uint8_t {
        Ignore,
        Control,
        Timer,
        Accept,
        Connect,
        ConnectTimeout,
        ClientWatch,  // the client's socket while its upstream connect runs
    };
    // An accept armed on a listener, with where the kernel writes the peer's address: single
    // shot, so each connection's address comes with it (no getpeername per connection).
    struct AcceptSlot {
        sockaddr_storage address{};
        socklen_t length = 0;
        bool armed = false;
    };
    static constexpr std::uint8_t kAcceptsPerListener = 16;
    struct Listener {
        std::shared_ptr<const Route> route;
        UniqueFd fd;
        std::uint16_t generation = 0;
        // Heap-held: the kernel writes into them while the listener vector may grow.
        std::unique_ptr<AcceptSlot[]> accepts = std::make_unique<AcceptSlot[]>(kAcceptsPerListener);
    };

    void signal(std::uint32_t request) noexcept;
    bool handOff(const std::shared_ptr<const Route>& route, UniqueFd& client,
                 const SocketAddress& peer);
    // A connection another worker accepted and handed over (its admission is booked).
    void adopt(const std::shared_ptr<const Route>& route, UniqueFd client,
               const SocketAddress& peer);
    void startAccepted(const std::shared_ptr<const Route>& route, UniqueFd client,
                       const SocketAddress& peer);
    void releaseAdmission(const SocketAddress& peer);
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

    // Listeners
    void applyRoutes(bool failOnError);
    void openListener(const std::shared_ptr<const Route>& route);
    void closeListener(std::uint32_t index);
    void armAccepts(std::uint32_t index);
    void armAccept(std::uint32_t index, std::uint8_t which);
    void onAccept(std::uint32_t index, std::uint8_t which, const io_uring_cqe& cqe);

    // Connections
    Connection* allocateConnection();
    Connection* lookup(std::uint32_t slot, std::uint16_t generation) noexcept;
    void startConnect(Connection& c);
    void onConnect(Connection& c, int result);
    void watchClient(Connection& c);
    void watchSlowConnects();
    void onClientWatch(Connection& c, int result);
    static std::uint64_t clientWatchTag(const Connection& c) noexcept;
    void closeTimedOut();
    void startRelaying(Connection& c);
    void closeConnection(Connection& c, CloseReason reason, bool resetPeers);
    void releaseConnection(Connection& c);
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
    __kernel_timespec connectTimeout_{};
    std::chrono::steady_clock::time_point now_;
    // Access lines of the connections closed in this turn: one write at the next turn's start.
    LogBatch accessLines_;
    std::shared_ptr<const RouteTable> appliedRoutes_;
    std::vector<Listener> listeners_;
    std::vector<std::unique_ptr<Connection>> connections_;
    std::vector<std::uint32_t> freeSlots_;
    std::size_t liveConnections_ = 0;
    std::vector<CompletionTag> deferred_;  // flows that yielded: driven again next turn
    // Clients whose upstream connect started this turn (watchSoon_) and last turn (watchDue_).
    // A connect still running a turn later gets its client watched (watchClient); most (on
    // loopback) are done by then, and the watch's two SQEs and two completions are saved.
    std::vector<CompletionTag> watchSoon_;
    std::vector<CompletionTag> watchDue_;
    // The data path, made once in setUp(): mover (the engine), audit tap, buffer lane, flow driver.
    std::unique_ptr<Mover> mover_;
    std::unique_ptr<AuditTap> audit_;
    std::unique_ptr<BufferLaneDriver> lanes_;  // null with --lane splice
    std::unique_ptr<FlowDriver> driver_;
    std::chrono::steady_clock::time_point lastRefusalLog_{};
    std::chrono::steady_clock::time_point lastBufferTrim_{};
    std::thread thread_;
};

}  // namespace splicegate
