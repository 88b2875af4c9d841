#pragma once
// A worker: one thread, one io_uring, its own SO_REUSEPORT listener per route, and the
// connections it accepted. Other threads talk to it only through requestReload(),
// requestDrain() and requestStop(), which set a flag and wake it through an eventfd.
//
// Data path (NOTES.md 1, 2, 11): io_uring waits for what can wait (accept, connect, readiness);
// the moves themselves are either direct non-blocking splice() calls made by this thread
// (SpliceEngine::Inline) or IORING_OP_SPLICE SQEs (SpliceEngine::Chain). Both engines drive the
// same Flow bookkeeping.
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

#include "audit/AuditWriter.h"
#include "common/UniqueFd.h"
#include "pipes/PipePool.h"
#include "relay/Connection.h"
#include "relay/RelayContext.h"
#include "common/Ring.h"

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

    // Any thread: counters written by this worker only.
    const WorkerStats& stats() const noexcept { return *stats_; }
    bool finished() const noexcept { return finished_.load(std::memory_order_acquire); }
    void join();

  private:
    enum Request : std::uint32_t { kReload = 1, kDrain = 2, kStop = 4, kTasks = 8 };
    enum class Op : std::uint8_t {
        Ignore,
        Control,
        Timer,
        Accept,
        Connect,
        ConnectTimeout,
        Poll,
        Fill,
        Tee,
        AuditWrite,
        Forward,
        SyncData,
        SyncIndex
    };
    struct Listener {
        std::shared_ptr<const Route> route;
        UniqueFd fd;
        std::uint16_t generation = 0;
        bool active = false;
    };
    struct FlowRef {
        std::uint32_t slot;
        std::uint16_t generation;
        Direction direction;
    };
    struct DurabilityWaiter {
        FlowRef flow;
        std::uint64_t syncSequence;
    };

    static std::uint64_t pack(Op op, Direction d, std::uint32_t slot, std::uint16_t gen) noexcept;

    void signal(std::uint32_t request) noexcept;
    void run(std::promise<void>& started);
    void loop();
    void handleCompletion(const io_uring_cqe& cqe);
    void handleControl();
    void armControl();
    void armTimer();
    void onTimer();

    // Listeners
    void applyRoutes(bool failOnError);
    void openListener(const std::shared_ptr<const Route>& route);
    void closeListener(std::uint32_t index);
    void armAccept(std::uint32_t index);
    void onAccept(std::uint32_t index, const io_uring_cqe& cqe);

    // Connections
    Connection* allocateConnection();
    Connection* lookup(std::uint32_t slot, std::uint16_t generation) noexcept;
    void startConnect(Connection& c);
    void onConnect(Connection& c, int result);
    void startRelaying(Connection& c);
    void closeConnection(Connection& c, CloseReason reason, bool resetPeers);
    void completeOperation(Connection& c);
    void releaseConnection(Connection& c);
    RouteCounters& routeStats(const Connection& c) noexcept {
        return stats_->routes[c.route->statsIndex];
    }
    void countForwarded(Connection& c, Direction d, int result) noexcept;
    void updatePipeGauges() noexcept;
    void runTasks();

    // Data path
    void pump(Connection& c, Direction d);
    bool pumpStep(Connection& c, Direction d);
    void submitMove(Connection& c, Direction d, Op op, int in, int out, std::size_t bytes,
                    std::int64_t outOffset = -1, bool linkNext = false);
    bool teeStep(Connection& c, Direction d);
    bool auditWriteStep(Connection& c, Direction d, std::size_t length, bool linkForward);
    void applyChain(Connection& c, Direction d);
    bool applyAuditWrite(Connection& c, Direction d, int result);
    void onAuditWrite(Connection& c, Direction d, int result);
    int bookAuditWrite(Connection& c, Direction d, int result);
    static int injectedRecordFailure() noexcept;
    void onAuditFailure(Connection& c, Direction d, int result);
    void waitDurable(Connection& c, Direction d);
    void startWantedSync();
    void startSync();
    void onSync(int result);
    void openAudit(Connection& c);
    void closeAudit(Connection& c);
    void armPoll(Connection& c, Direction d, int fd, unsigned events);
    void onPoll(Connection& c, Direction d, int result);
    void onMove(Connection& c, Direction d, Op op, int result);
    bool afterMove(Connection& c, Direction d, MoveOutcome outcome, int result);
    void returnPipes(Flow& flow) noexcept;
    void runDeferred();

    const unsigned index_;
    RelayContext& context_;
    std::unique_ptr<Ring> ring_;
    std::unique_ptr<WorkerStats> stats_ = std::make_unique<WorkerStats>();
    std::mutex tasksMutex_;
    std::vector<std::function<void()>> tasks_;
    std::chrono::steady_clock::time_point syncStarted_;
    PipePool pipePool_;
    UniqueFd controlFd_;
    std::uint64_t controlValue_ = 0;
    std::atomic<std::uint32_t> requests_{0};
    std::atomic<bool> finished_{false};
    bool draining_ = false;
    bool stopping_ = false;
    __kernel_timespec timerInterval_{};
    std::chrono::steady_clock::time_point now_;
    std::shared_ptr<const RouteTable> appliedRoutes_;
    std::vector<Listener> listeners_;
    std::vector<std::unique_ptr<Connection>> connections_;
    std::vector<std::uint32_t> freeSlots_;
    std::size_t liveConnections_ = 0;
    std::vector<FlowRef> deferred_;
    std::unique_ptr<audit::AuditWriter> audit_;
    std::shared_ptr<audit::Segment> syncingSegment_;
    int syncDataResult_ = 0;
    bool syncWanted_ = false;  // strict mode: a chunk waits for a group commit (startWantedSync)
    std::vector<DurabilityWaiter> durabilityWaiters_;
    std::chrono::steady_clock::time_point lastRefusalLog_{};
    std::thread thread_;
};

}  // namespace splicegate
