#pragma once
// A worker: one thread, one io_uring, its own SO_REUSEPORT listener per route, and the
// connections it accepted. Other threads talk to it only through requestReload(),
// requestDrain(), requestStop() and post() (relay/WorkerControl.h), which wake it through an
// eventfd.
//
// The worker owns the thread, the ring, the loop and the parts, made on its thread: the data
// path (mover, audit tap, the lanes and their LaneSwitch), the acceptor (listeners, admission,
// hand-off: relay/Acceptor.h), the upstream connector (relay/UpstreamConnector.h) and the
// connection table with its deadlines (relay/ConnectionTable.h). The loop hands every completion
// to the dispatcher (relay/Dispatcher.h), which routes it to its part and acts on the part's
// decision. Which engine moves the bytes is decided once, where the mover is made
// (RelayContext.h). Sockets are not registered (fixed) files: the inline engine splices them
// with direct system calls, which need real fds, and registering each accepted socket would
// cost an io_uring_register call per connection to save an fd lookup on its one or two polls
// per message.
#include <atomic>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "common/Ring.h"
#include "datapath/AuditTap.h"
#include "datapath/LaneSwitch.h"
#include "datapath/Mover.h"
#include "pipes/PipePool.h"
#include "relay/Acceptor.h"
#include "relay/ConnectionTable.h"
#include "relay/Dispatcher.h"
#include "relay/RelayContext.h"
#include "relay/UpstreamConnector.h"
#include "relay/WorkerControl.h"

namespace splicegate {

class Worker {
  public:
    Worker(unsigned index, RelayContext& context);
    ~Worker();
    Worker(const Worker&) = delete;
    Worker& operator=(const Worker&) = delete;

    // Starts the thread; the future reports set-up failure (ring, listeners) as an exception.
    std::future<void> start();
    void requestReload() noexcept { control_.requestReload(); }
    void requestDrain() noexcept { control_.requestDrain(); }
    void requestStop() noexcept { control_.requestStop(); }
    // Runs `task` on the worker's thread at its next wake-up. False when the worker has finished
    // (the task is dropped). Used by the control plane; tasks must be short.
    bool post(std::function<void()> task) { return control_.post(std::move(task)); }

    // Worker-thread only (call them from posted tasks).
    void listConnections(std::vector<ConnectionView>& out) const;
    bool killConnection(std::uint64_t id);
    int rotateAudit() noexcept;
    unsigned index() const noexcept { return index_; }
    // The worker number of its audit segment files (AuditStart::chains).
    unsigned auditChain() const noexcept {
        const auto& chains = context_.auditStart.chains;
        return index_ < chains.size() ? chains[index_] : index_;
    }

    // Any thread: counters written by this worker only.
    const WorkerStats& stats() const noexcept { return *stats_; }
    bool finished() const noexcept { return finished_.load(std::memory_order_acquire); }
    void join();

  private:
    void run(std::promise<void>& started);
    void setUp();
    void makeDataPath();
    void loop();
    void tearDown() noexcept;
    // Gives `admitted` to the worker it names; false when that one has finished.
    bool handOff(Admitted& admitted);

    const unsigned index_;
    RelayContext& context_;
    std::unique_ptr<WorkerStats> stats_ = std::make_unique<WorkerStats>();
    WorkerControl control_;
    std::atomic<bool> finished_{false};
    PipePool pipePool_;
    ConnectionTable connections_;
    // Made on the worker's thread (setUp), in this order; gone in the reverse one.
    std::unique_ptr<Ring> ring_;
    std::unique_ptr<AuditTap> audit_;
    std::unique_ptr<Mover> mover_;
    std::unique_ptr<LaneSwitch> lanes_;
    std::unique_ptr<Acceptor> acceptor_;
    std::unique_ptr<UpstreamConnector> connector_;
    std::unique_ptr<Dispatcher> dispatcher_;
    std::thread thread_;
};

}  // namespace splicegate
