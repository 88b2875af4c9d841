#pragma once
// The data path the worker drives: both lanes (datapath/Lane.h) and the rule that moves a
// direction between them, in one place. --lane splice or buffer: every direction stays in that
// lane. --lane auto: a direction starts in the buffer lane and follows its LanePolicy (a run of
// large reads to splice, a run of small ones back); the splice lane also hands a direction back
// when no pipe is to be had. A lane leaves a direction only where nothing of it is in flight
// (Next::Switch), so a switch never reorders, drops or duplicates a byte. It routes completions
// to the lane whose owner they carry (RingOwner::Mover, RingOwner::BufferLane), and drives a
// direction in the lane it is in.
//
// Thread affinity: the owning worker. noexcept throughout but set-up.
#include <cstddef>
#include <memory>

#include "datapath/Lane.h"
#include "datapath/LaneKind.h"

namespace splicegate {

class LaneSwitch final : public Lane, public LaneRule {
  public:
    // `mode`: --lane. `bufferSize`: the buffer lane's (a read of half of it counts as large).
    LaneSwitch(LaneKind mode, std::size_t bufferSize) noexcept
        : mode_(mode), bufferSize_(bufferSize) {}

    // The lanes, made with this object as their rule: the one `mode` names, both for auto.
    void own(LaneKind kind, std::unique_ptr<Lane> lane) noexcept;

    void setNow(std::chrono::steady_clock::time_point now) noexcept override;
    [[nodiscard]] bool start(ConnectionIo& io) noexcept override;
    StepResult enter(ConnectionIo& io, Direction d) noexcept override;
    StepResult drive(ConnectionIo& io, Direction d) noexcept override;
    bool owns(RingOwner owner) const noexcept override { return laneOwning(owner) != nullptr; }
    StepResult complete(ConnectionIo& io, CompletionTag tag,
                        MoveCompletion completion) noexcept override;
    StepResult durable(ConnectionIo& io, Direction d) noexcept override;
    void release(ConnectionIo& io) noexcept override;
    void dropCompletion(CompletionTag tag, MoveCompletion completion) noexcept override;
    void afterTurn(const ConnectionFinder& find) noexcept override;
    void trim() noexcept override;

    // LaneRule.
    bool recordRead(ConnectionIo& io, Direction d, std::size_t bytes) noexcept override;
    bool leaveNow(const ConnectionIo& io, Direction d) const noexcept override;
    bool canLeave(const ConnectionIo& io, Direction d) const noexcept override;

  private:
    static LaneKind other(LaneKind kind) noexcept {
        return kind == LaneKind::Buffer ? LaneKind::Splice : LaneKind::Buffer;
    }
    Lane* laneOf(LaneKind kind) const noexcept {
        return kind == LaneKind::Buffer ? buffer_.get() : splice_.get();
    }
    Lane& laneOf(const ConnectionIo& io, Direction d) const noexcept {
        return *laneOf(io.flows[static_cast<int>(d)].lane);
    }
    Lane* laneOwning(RingOwner owner) const noexcept;
    // Carries a lane's result on: drives a direction that can go on, moves one that left.
    StepResult settle(ConnectionIo& io, Direction d, StepResult result) noexcept;
    StepResult moveOver(ConnectionIo& io, Direction d) noexcept;

    const LaneKind mode_;
    const std::size_t bufferSize_;
    std::unique_ptr<Lane> splice_;
    std::unique_ptr<Lane> buffer_;
};

}  // namespace splicegate
