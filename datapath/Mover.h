#pragma once
// A Mover moves one flow's bytes: it starts a step and REPORTS what the step achieved. It never
// calls back into the worker, never touches SpliceFlow's bookkeeping and never closes anything: the
// flow driver (datapath/FlowDriver.h) applies the report to the SpliceFlow and decides what
// follows. One mover per worker, chosen once from the engine where it is made:
//   InlineMover  direct non-blocking splice()/tee() from the worker's thread; the step's results
//                are in the report at once (docs/kernel-notes.md §11);
//   ChainMover   IORING_OP_SPLICE/TEE SQEs, audit stages soft-linked tee -> write -> forward
//                (docs/kernel-notes.md §2); results come back through complete();
// The buffer lane (multishot recv into a provided buffer ring, then send) is not a mover: it has
// its own driver beside the flow driver (datapath/BufferLaneDriver.h) and its own owner
// (RingOwner::BufferLane).
//
// Contract
// - start() begins `plan` for one flow. The report either holds every stage's result
//   (pending == false), or says completions are due (pending == true). The worker then routes
//   each completion whose tag owner is RingOwner::Mover to complete(); the report of the
//   completion that ends the step holds all its results, in stage order; until then complete()
//   reports pending. A mover may also report results nobody asked for (a multishot recv).
// - Stage results: bytes moved (> 0); 0 = end of stream (Fill) or nothing taken; -EAGAIN would
//   block; -ECANCELED = not run because the linked stage before it moved less than its length
//   or failed (a soft link, real or emulated); any other -errno is the stage's error. Waits
//   (WaitReadable/WaitWritable) report >= 0 when ready.
// - Failpoints (datapath/Failpoints.h) are applied here, BEFORE the kernel acts: an injected
//   error is submitted as an operation that really fails, so the kernel cancels what is linked
//   behind it, and the injected errno is reported in its place.
// - All per-flow state between start() and the last completion lives in the caller's
//   MoveInFlight, so a mover holds no per-connection memory and a closed flow leaves nothing in
//   it. Thread affinity: the owning worker's thread. Everything is noexcept.
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <span>

#include "common/CompletionTag.h"
#include "datapath/SpliceFlow.h"

namespace splicegate {

enum class MoveStage : std::uint8_t {
    Fill,          // source socket -> pipe (or -> provided buffer, buffer lane)
    Tee,           // pipe front -> audit pipe (copy, no consumption)
    AuditWrite,    // audit pipe (or received memory) -> audit log destination
    Forward,       // pipe (or buffer) -> sink socket
    WaitReadable,  // readiness of the source
    WaitWritable,  // readiness of the sink
};
const char* toString(MoveStage stage) noexcept;

// A mover's completion tags carry RingOwner::Mover and, as their op code, the MoveStage the SQE
// runs: the flow's tag (MovePlan::flow: owner, direction, slot, generation) with that op.
static_assert(CompletionOp<MoveStage>);

// Where a chunk's audit copy goes: a file range, written by splice from the audit pipe; or memory
// in the log writer's buffer (an O_DIRECT writer), filled by read() from the audit pipe or by a
// copy from received memory.
struct AuditDestination {
    int fd = -1;
    std::uint64_t offset = 0;
    std::span<std::byte> memory;
    bool inMemory() const noexcept { return !memory.empty(); }
};

// The descriptors a flow's moves touch; the flow driver fills this in for every start().
struct MoveEnds {
    int source = -1;  // socket read from
    int sink = -1;    // socket written to
    int pipeRead = -1;
    int pipeWrite = -1;
    int auditPipeRead = -1;
    int auditPipeWrite = -1;
};

// One step. `first` runs with `length`; for an audit chain (first == Tee or AuditWrite), the
// stages behind it run only when the one before moved its whole length (soft link). A mover may
// stop earlier than the plan (the inline mover runs tee -> write and leaves the forward to the
// next step, after the write is booked); the driver takes each step from SpliceFlow::next() anyway.
struct MovePlan {
    MoveStage first = MoveStage::Fill;
    std::size_t length = 0;
    bool thenAuditWrite = false;  // Tee -> AuditWrite
    bool thenForward = false;     // ... -> Forward
    AuditDestination audit;       // for an AuditWrite stage
    CompletionTag flow;  // the flow's owner (RingOwner::Mover), slot, generation and direction
};

struct StageResult {
    MoveStage stage = MoveStage::Fill;
    int result = -ECANCELED;
};

struct MoveReport {
    static constexpr std::size_t kMaxStages = 3;
    bool pending = false;  // results still to come through complete()
    std::uint8_t count = 0;
    std::array<StageResult, kMaxStages> results{};
    // Buffer lane: the Fill's bytes, in user memory owned by the mover, valid until the next call
    // for this flow (the audit tap takes them from here, no tee).
    std::span<const std::byte> received;

    static MoveReport inFlight() noexcept {
        MoveReport report;
        report.pending = true;
        return report;
    }
    void add(MoveStage stage, int result) noexcept {
        if (count < kMaxStages) results[count++] = StageResult{stage, result};
    }
    std::span<const StageResult> stages() const noexcept { return {results.data(), count}; }
};

// A completion as a mover sees it (cqe res and flags: a buffer lane needs the buffer id and
// IORING_CQE_F_MORE).
struct MoveCompletion {
    int result = 0;
    std::uint32_t flags = 0;
};

// What a mover keeps per flow between start() and the step's last completion. Owned by the
// flow's data-path half (datapath/ConnectionIo.h); movers may add fields of their own here.
// Completions of linked requests are not promised in submission order: results are gathered by
// stage and reported in stage order once the last one is in.
struct MoveInFlight {
    std::uint8_t outstanding = 0;  // completions still due for the current step
    std::uint8_t stageCount = 0;   // stages in the current step
    std::array<StageResult, MoveReport::kMaxStages> gathered{};
    std::array<int, MoveReport::kMaxStages> injected{};  // failpoint errno per stage, 0 = none

    bool busy() const noexcept { return outstanding > 0; }
    // Starts a step (after the previous one was reported).
    void begin() noexcept { *this = MoveInFlight{}; }
    // A stage whose completion is due; `injectedErrno` replaces its result when non-zero.
    void expect(MoveStage stage, int injectedErrno = 0) noexcept {
        if (stageCount == MoveReport::kMaxStages) return;
        gathered[stageCount] = StageResult{stage, -ECANCELED};
        injected[stageCount] = injectedErrno;
        ++stageCount;
        ++outstanding;
    }
    // One completion; true when it was the step's last (report() then holds them all). A
    // completion of a stage this step does not expect (stale) is ignored.
    bool gather(MoveStage stage, int result) noexcept {
        for (std::uint8_t i = 0; i < stageCount; ++i) {
            if (gathered[i].stage != stage || !pendingAt(i)) continue;
            gathered[i].result = injected[i] != 0 ? -injected[i] : result;
            done_ = static_cast<std::uint8_t>(done_ | 1u << i);
            --outstanding;
            return outstanding == 0;
        }
        return false;
    }
    MoveReport report() const noexcept {
        MoveReport out;
        for (std::uint8_t i = 0; i < stageCount; ++i)
            out.add(gathered[i].stage, gathered[i].result);
        return out;
    }

  private:
    bool pendingAt(std::uint8_t i) const noexcept { return (done_ & (1u << i)) == 0; }
    std::uint8_t done_ = 0;
};

class Mover {
  public:
    virtual ~Mover() = default;
    virtual const char* name() const noexcept = 0;
    // A short fill below this many bytes means "the source is drained"
    // (SpliceFlow::setDrainedBelow).
    virtual std::size_t drainedBelow() const noexcept = 0;
    // Begins `plan`; see the contract above.
    virtual MoveReport start(const MoveEnds& ends, const MovePlan& plan,
                             MoveInFlight& state) noexcept = 0;
    // A completion of RingOwner::Mover (its op a MoveStage), for the flow whose `state` this is.
    virtual MoveReport complete(CompletionTag tag, MoveCompletion completion,
                                MoveInFlight& state) noexcept = 0;
};

}  // namespace splicegate
