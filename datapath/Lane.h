#pragma once
// A lane moves one direction of a connection's bytes from its source to its sink: the splice
// lane (datapath/FlowDriver.h: pipes, splice/tee through a Mover) or the buffer lane
// (datapath/BufferLaneDriver.h: provided buffers, recv/send). A lane runs the directions it is
// given, tells the switching rule (LaneRule) of every read, and says where a direction leaves it
// (Next::Switch, only where nothing of it is in flight); which lane takes it is not its business.
// datapath/LaneSwitch.h holds both lanes and the rule, and is what the worker drives.
//
// Thread affinity: the owning worker. noexcept throughout.
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "common/CompletionTag.h"
#include "datapath/ConnectionIo.h"
#include "datapath/Mover.h"
#include "datapath/Verdict.h"

namespace splicegate {

// What a step, or an operation on a lane, came to.
enum class Next : std::uint8_t {
    Continue,  // the direction can go on: drive it
    Wait,      // it stops here for now; `verdict` is wait, or yield (its turn is used up)
    Close,     // the connection must close as `verdict` says
    Switch,    // it left this lane with nothing in flight: the other lane takes it from here
};
struct StepResult {
    Next next = Next::Continue;
    Verdict verdict{};
};

// The switching rule as a lane sees it (LaneSwitch implements it): told of each read, asked at
// the points where a direction could leave.
class LaneRule {
  public:
    // A read of `bytes` (> 0) in the direction's lane. True: the direction should leave it at its
    // next point where nothing is in flight.
    virtual bool recordRead(ConnectionIo& io, Direction d, std::size_t bytes) noexcept = 0;
    // At such a point: true when the direction should leave now.
    virtual bool leaveNow(const ConnectionIo& io, Direction d) const noexcept = 0;
    // The lane cannot go on with the direction (the splice lane found no pipe): true when another
    // lane can take it; otherwise the connection closes.
    virtual bool canLeave(const ConnectionIo& io, Direction d) const noexcept = 0;

  protected:
    ~LaneRule() = default;
};

// The worker's connection table as a lane sees it: the connection a completion tag names, or
// null when it is gone.
class ConnectionFinder {
  public:
    virtual ConnectionIo* find(CompletionTag tag) const noexcept = 0;

  protected:
    ~ConnectionFinder() = default;
};
template <typename Find>
class FinderOf final : public ConnectionFinder {
  public:
    explicit FinderOf(Find find) noexcept : find_(find) {}
    ConnectionIo* find(CompletionTag tag) const noexcept override { return find_(tag); }

  private:
    Find find_;
};

class Lane {
  public:
    virtual ~Lane() = default;

    virtual void setNow(std::chrono::steady_clock::time_point now) noexcept = 0;
    // The connection starts relaying with both directions in this lane, waiting for their
    // source. False: it cannot (no memory), the connection must close.
    [[nodiscard]] virtual bool start(ConnectionIo& io) noexcept = 0;
    // The direction comes from the other lane, nothing of it in flight in either.
    virtual StepResult enter(ConnectionIo& io, Direction d) noexcept = 0;
    // Takes the direction's next steps until it must wait, yields, leaves or must close.
    virtual StepResult drive(ConnectionIo& io, Direction d) noexcept = 0;
    // Whether completions of this owner (CompletionTag::owner) are this lane's.
    virtual bool owns(RingOwner owner) const noexcept = 0;
    // A completion of its owner for this connection (also after it stopped relaying: what
    // the audit must know is still booked, nothing else is applied). Continue: drive the
    // direction, if it is still in this lane.
    virtual StepResult complete(ConnectionIo& io, CompletionTag tag,
                                MoveCompletion completion) noexcept = 0;
    // Strict durability: the group commit covered the direction's chunks (or failed fail-open).
    virtual StepResult durable(ConnectionIo& io, Direction d) noexcept = 0;
    // The connection is released (nothing in flight): what the lane lent it goes back.
    virtual void release(ConnectionIo& io) noexcept = 0;
    // A completion of its owner whose connection is gone.
    virtual void dropCompletion(CompletionTag tag, MoveCompletion completion) noexcept = 0;
    // After each turn's completions.
    virtual void afterTurn(const ConnectionFinder& find) noexcept = 0;
    // Every few seconds: memory held for a past peak goes back.
    virtual void trim() noexcept = 0;
};

}  // namespace splicegate
