#include "datapath/LaneSwitch.h"

#include "common/Log.h"

namespace splicegate {

void LaneSwitch::own(LaneKind kind, std::unique_ptr<Lane> lane) noexcept {
    (kind == LaneKind::Buffer ? buffer_ : splice_) = std::move(lane);
}

void LaneSwitch::setNow(std::chrono::steady_clock::time_point now) noexcept {
    if (splice_) splice_->setNow(now);
    if (buffer_) buffer_->setNow(now);
}

bool LaneSwitch::start(ConnectionIo& io) noexcept {
    // A route's own lane; one whose lane this worker does not have (the buffer lane under
    // --lane splice, refused by the config check) keeps the worker's.
    auto mode = io.laneOverride.value_or(mode_);
    if (mode != LaneKind::Splice && !buffer_) mode = mode_;
    auto first = mode == LaneKind::Splice ? LaneKind::Splice : LaneKind::Buffer;
    for (auto& fio : io.flows) {
        fio.lanePolicy = LanePolicy(mode == LaneKind::Auto);
        fio.lane = first;
    }
    return laneOf(first)->start(io);
}

StepResult LaneSwitch::enter(ConnectionIo& io, Direction d) noexcept {
    return settle(io, d, laneOf(io, d).enter(io, d));
}

StepResult LaneSwitch::drive(ConnectionIo& io, Direction d) noexcept {
    return settle(io, d, laneOf(io, d).drive(io, d));
}

Lane* LaneSwitch::laneOwning(RingOwner owner) const noexcept {
    if (buffer_ && buffer_->owns(owner)) return buffer_.get();
    if (splice_ && splice_->owns(owner)) return splice_.get();
    return nullptr;
}

StepResult LaneSwitch::complete(ConnectionIo& io, CompletionTag tag,
                                MoveCompletion completion) noexcept {
    Lane* owner = laneOwning(tag.owner);
    if (owner == nullptr) return {Next::Wait};
    auto d = static_cast<Direction>(tag.direction);
    auto result = owner->complete(io, tag, completion);
    // A late completion of the lane a direction left (its recv's cancel) drives nothing.
    if (result.next == Next::Continue && owner != &laneOf(io, d)) return {Next::Wait};
    return settle(io, d, result);
}

StepResult LaneSwitch::durable(ConnectionIo& io, Direction d) noexcept {
    return settle(io, d, laneOf(io, d).durable(io, d));
}

StepResult LaneSwitch::settle(ConnectionIo& io, Direction d, StepResult result) noexcept {
    // Ends: a lane's drive never returns Continue, and the buffer lane always takes a direction.
    for (;;) {
        switch (result.next) {
            case Next::Continue:
                result = laneOf(io, d).drive(io, d);
                break;
            case Next::Switch:
                result = moveOver(io, d);
                break;
            case Next::Wait:
            case Next::Close:
                return result;
        }
    }
}

// The direction left its lane with nothing in flight: the other one takes it, its run of reads
// counted afresh.
StepResult LaneSwitch::moveOver(ConnectionIo& io, Direction d) noexcept {
    auto& fio = io.at(d);
    auto to = other(fio.lane);
    fio.lanePolicy.recordSwitched();
    fio.lane = to;
    if (io.counters != nullptr) io.counters->laneSwitches[static_cast<int>(to)].add(1);
    logDebug("connection ", io.id, ": ", toString(d), " moves to the ", toString(to), " lane");
    return laneOf(to)->enter(io, d);
}

void LaneSwitch::release(ConnectionIo& io) noexcept {
    if (splice_) splice_->release(io);
    if (buffer_) buffer_->release(io);
}

void LaneSwitch::dropCompletion(CompletionTag tag, MoveCompletion completion) noexcept {
    if (Lane* owner = laneOwning(tag.owner)) owner->dropCompletion(tag, completion);
}

void LaneSwitch::afterTurn(const ConnectionFinder& find) noexcept {
    if (buffer_) buffer_->afterTurn(find);
}

void LaneSwitch::trim() noexcept {
    if (buffer_) buffer_->trim();
}

bool LaneSwitch::recordRead(ConnectionIo& io, Direction d, std::size_t bytes) noexcept {
    auto& fio = io.at(d);
    if (fio.lane == LaneKind::Buffer) return fio.lanePolicy.recordBufferRead(bytes, bufferSize_);
    return fio.lanePolicy.recordSpliceRead(bytes, bufferSize_);
}

bool LaneSwitch::leaveNow(const ConnectionIo& io, Direction d) const noexcept {
    return io.flows[static_cast<int>(d)].lanePolicy.wantsSwitch() && canLeave(io, d);
}

bool LaneSwitch::canLeave(const ConnectionIo& io, Direction d) const noexcept {
    return laneOf(other(io.flows[static_cast<int>(d)].lane)) != nullptr;
}

}  // namespace splicegate
