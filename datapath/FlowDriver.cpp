#include "datapath/FlowDriver.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <new>

#include "common/Error.h"
#include "common/Log.h"

namespace splicegate {

bool FlowDriver::start(ConnectionIo& io) noexcept {
    for (auto d : {Direction::ClientToUpstream, Direction::UpstreamToClient}) {
        if (!enterSplice(io, d)) return false;
        waitReadable(io, d);
    }
    return true;
}

// The direction's splice half, made on its first step in the splice lane and configured as the
// connection is (a direction that stays in the buffer lane never has one). False: out of memory.
bool FlowDriver::enterSplice(ConnectionIo& io, Direction d) noexcept {
    auto& fio = io.at(d);
    if (fio.splice) return true;
    fio.splice.reset(new (std::nothrow) SpliceHalf);
    if (!fio.splice) return false;
    fio.splice->flow.setDrainedBelow(mover_.drainedBelow());
    bool audited = io.audited && audit_ != nullptr;
    fio.splice->flow.configureAudit(audited, audited && audit_->strict());
    return true;
}

StepResult FlowDriver::waitReadable(ConnectionIo& io, Direction d) noexcept {
    MovePlan plan;
    plan.first = MoveStage::WaitReadable;
    return startMove(io, d, plan);
}

StepResult FlowDriver::enter(ConnectionIo& io, Direction d) noexcept {
    if (!enterSplice(io, d)) return {Next::Switch};  // no memory: the buffer lane goes on
    auto started = waitReadable(io, d);
    if (started.next != Next::Continue) return started;
    return drive(io, d);
}

StepResult FlowDriver::drive(ConnectionIo& io, Direction d) noexcept {
    if (!enterSplice(io, d)) return {Next::Close, Verdict::close(CloseReason::Error, true)};
    for (int steps = 0; steps < kStepBudget; ++steps) {
        if (!io.relaying || io.at(d).move().busy()) return {Next::Wait};
        auto result = step(io, d);
        if (result.next != Next::Continue) return result;
    }
    return {Next::Wait, Verdict::yield()};  // let other flows have a turn
}

StepResult FlowDriver::complete(ConnectionIo& io, CompletionTag tag,
                                MoveCompletion completion) noexcept {
    auto d = static_cast<Direction>(tag.direction);
    auto report = mover_.complete(tag, completion, io.at(d).move());
    if (report.pending) return {Next::Wait};
    if (!io.relaying) {
        bookOnly(io, d, report);
        return {Next::Wait};
    }
    return apply(io, d, report);
}

StepResult FlowDriver::durable(ConnectionIo& io, Direction d) noexcept {
    io.flow(d).recordDurable();
    return {Next::Continue};
}

// Takes the flow's next step.
StepResult FlowDriver::step(ConnectionIo& io, Direction d) noexcept {
    auto& flow = io.flow(d);
    MovePlan plan;
    switch (flow.next()) {
        case FlowStep::Fill:
            return startFill(io, d);
        case FlowStep::Tee:
            return startAudit(io, d, MoveStage::Tee);
        case FlowStep::AuditWrite:
            return startAudit(io, d, MoveStage::AuditWrite);
        case FlowStep::WaitDurable:
            audit_->waitDurable(io, d);
            return {Next::Wait};
        case FlowStep::Forward:
            plan.first = MoveStage::Forward;
            plan.length = flow.forwardRequest();
            return startMove(io, d, plan);
        case FlowStep::WaitReadable:
            returnPipes(flow);
            // Reads turned small (--lane auto): the buffer lane takes over from here.
            if (rule_.leaveNow(io, d)) return {Next::Switch};
            return waitReadable(io, d);
        case FlowStep::WaitWritable:
            plan.first = MoveStage::WaitWritable;
            return startMove(io, d, plan);
        case FlowStep::ShutdownSink:
            returnPipes(flow);
            ::shutdown(io.sinkFd(d), SHUT_WR);
            flow.recordSinkShutdown();
            if (io.finished()) return {Next::Close, Verdict::close(CloseReason::Closed, false)};
            return {Next::Wait};
        case FlowStep::Finished:
            return {Next::Wait};
    }
    return {Next::Wait};
}

StepResult FlowDriver::startFill(ConnectionIo& io, Direction d) noexcept {
    auto& flow = io.flow(d);
    // Both pipes are empty here: a good moment to trade one that no longer fits the budget's
    // fair share (a flow that never runs dry would otherwise keep it forever).
    if (flow.pipe.valid() && pipes_.wrongSize(flow.pipe)) returnPipes(flow);
    // An audited chunk needs its audit pipe too: taken now, while the flow could still go on
    // without pipes, rather than with bytes already in the data pipe.
    bool needsAuditPipe = io.audited && audit_ != nullptr && !flow.auditPipe.valid();
    int rc = flow.pipe.valid() ? 0 : pipes_.acquire(flow.pipe);
    if (rc == 0 && needsAuditPipe) rc = pipes_.acquire(flow.auditPipe);
    if (rc < 0) {
        returnPipes(flow);
        // --lane auto: the buffer lane needs no pipe (the pool's cap, or the fd limit, reached).
        if (rule_.canLeave(io, d)) return {Next::Switch};
        logError("connection ", io.id, ": no pipe: ", errnoText(rc));
        return {Next::Close, Verdict::close(CloseReason::PipeError, true)};
    }
    MovePlan plan;
    plan.first = MoveStage::Fill;
    plan.length = flow.fillRequest();
    return startMove(io, d, plan);
}

// Copies the pipe's unaudited front into the audit pipe and writes it to the log, then
// (unless strict) forwards it: one soft-linked chain, each stage sized as if the one before
// will be whole, so nothing unaudited is forwarded (docs/kernel-notes.md §2). `first` is
// AuditWrite when an earlier short tee left bytes in the audit pipe.
StepResult FlowDriver::startAudit(ConnectionIo& io, Direction d, MoveStage first) noexcept {
    auto& fio = io.at(d);
    auto& flow = fio.flow();
    if (!flow.auditPipe.valid()) {
        if (int rc = pipes_.acquire(flow.auditPipe); rc < 0) return auditFailed(io, d, rc);
    }
    MovePlan plan;
    plan.first = first;
    plan.length = first == MoveStage::Tee ? std::min(flow.teeRequest(), flow.auditPipe.capacity())
                                          : flow.auditWriteRequest();
    if (int rc = audit_->reserve(fio, plan.length); rc < 0) {
        if (rc != -ENOBUFS) return auditFailed(io, d, rc);
        audit_->waitRoom(io, d);  // the log's buffer is full: stop reading until it has room
        return {Next::Wait};
    }
    // A writer with a buffer of its own may give less than asked (the end of one of its buffers).
    plan.length = std::min<std::size_t>(plan.length, fio.auditSlot.length);
    plan.thenAuditWrite = first == MoveStage::Tee;
    plan.thenForward = !audit_->strict();
    plan.audit = fio.auditSlot.destination;
    return startMove(io, d, plan);
}

StepResult FlowDriver::startMove(ConnectionIo& io, Direction d, const MovePlan& plan) noexcept {
    auto& half = *io.at(d).splice;
    half.stepLength = plan.length;
    MovePlan tagged = plan;
    tagged.flow = io.tag(d, RingOwner::Mover);
    return apply(io, d, mover_.start(endsOf(io, d), tagged, half.move));
}

// Applies a step's results to the flow in stage order.
StepResult FlowDriver::apply(ConnectionIo& io, Direction d, const MoveReport& report) noexcept {
    if (report.pending) return {Next::Wait};
    auto& flow = io.flow(d);
    for (const auto& [stage, result] : report.stages()) {
        switch (stage) {
            case MoveStage::Fill: {
                if (result == -ECANCELED) break;
                auto outcome = flow.recordFill(result, io.at(d).splice->stepLength);
                if (outcome == MoveOutcome::Failed) return moveFailed(io, d, result);
                if (outcome == MoveOutcome::Moved) io.lastActivity = now_;
                if (result > 0) rule_.recordRead(io, d, static_cast<std::size_t>(result));
                break;
            }
            case MoveStage::Tee:
                if (!flow.recordTee(result) || result == 0) {
                    audit_->book(io, d, -ECANCELED);  // its write did not run: space back
                    // Fail-open goes on with the rest of the report (cancelled behind the tee).
                    auto failed = auditFailed(io, d, result == 0 ? -EIO : result);
                    if (failed.next != Next::Continue) return failed;
                }
                break;
            case MoveStage::AuditWrite: {
                int booked = audit_->book(io, d, result);
                if (!flow.recordAuditWrite(booked)) {
                    // Fail-open: a forward the chain ran behind the write still counts.
                    auto failed = auditFailed(io, d, booked == 0 ? -ENOSPC : booked);
                    if (failed.next != Next::Continue) return failed;
                }
                break;
            }
            case MoveStage::Forward: {
                if (result == -ECANCELED) break;  // a broken link: nothing moved
                if (result > 0)
                    io.countForwarded(d, LaneKind::Splice, static_cast<std::uint64_t>(result),
                                      stats_.auditLostBytes);
                auto outcome = flow.recordForward(result);
                if (outcome == MoveOutcome::Failed) return moveFailed(io, d, result);
                if (outcome == MoveOutcome::Moved) io.lastActivity = now_;
                break;
            }
            case MoveStage::WaitReadable:
            case MoveStage::WaitWritable:
                if (result == -ECANCELED) return {Next::Wait};
                if (result < 0) return {Next::Close, Verdict::close(CloseReason::Error, true)};
                io.lastActivity = now_;
                flow.recordSourceReadable();
                flow.recordSinkWritable();
                break;
        }
    }
    return {Next::Continue};
}

// The connection no longer relays: only what the log must know is booked.
void FlowDriver::bookOnly(ConnectionIo& io, Direction d, const MoveReport& report) noexcept {
    for (const auto& [stage, result] : report.stages())
        if (stage == MoveStage::AuditWrite) audit_->book(io, d, result);
}

StepResult FlowDriver::auditFailed(ConnectionIo& io, Direction d, int error) noexcept {
    if (audit_->failed(io, d, error) == AuditAction::Close)
        return {Next::Close, Verdict::close(CloseReason::AuditError, true)};
    auto& flow = io.flow(d);
    if (flow.auditPipe.valid()) pipes_.release(std::move(flow.auditPipe), 1);  // discard it
    return {Next::Continue};
}

StepResult FlowDriver::moveFailed(ConnectionIo& io, Direction d, int error) noexcept {
    // A failed fill is the source's error; a failed forward the sink's (EPIPE, ECONNRESET).
    bool sourceSide = io.flow(d).bytesInPipe() == 0 || error == -ECONNRESET;
    logDebug("connection ", io.id, ": ", toString(d), " move failed: ", errnoText(error));
    return {Next::Close,
            Verdict::close(sourceSide ? sourceResetReason(d) : sinkResetReason(d), true)};
}

MoveEnds FlowDriver::endsOf(const ConnectionIo& io, Direction d) const noexcept {
    const auto& flow = io.flow(d);
    return MoveEnds{io.sourceFd(d),          io.sinkFd(d),
                    flow.pipe.readFd(),      flow.pipe.writeFd(),
                    flow.auditPipe.readFd(), flow.auditPipe.writeFd()};
}

void FlowDriver::returnPipes(SpliceFlow& flow) noexcept {
    if (flow.pipe.valid() && flow.pipeReturnable()) pipes_.release(std::move(flow.pipe), 0);
    if (flow.auditPipe.valid() && flow.auditPipeReturnable())
        pipes_.release(std::move(flow.auditPipe), 0);
    updatePipeGauges();
}

void FlowDriver::release(ConnectionIo& io) noexcept {
    // A move that completed after the close decision was not booked (chain engine), so the
    // kernel's count decides: a pipe with any byte left in it is closed, never lent again.
    auto leftIn = [](const Pipe& pipe, std::size_t booked) -> std::size_t {
        return pipe.bufferedBytes() != 0 ? 1 : booked;
    };
    for (auto& fio : io.flows) {
        if (!fio.splice) continue;
        auto& flow = fio.flow();
        if (flow.pipe.valid()) {
            auto left = leftIn(flow.pipe, flow.bytesInPipe());
            pipes_.release(std::move(flow.pipe), left);
        }
        if (flow.auditPipe.valid()) {
            auto left = leftIn(flow.auditPipe, flow.bytesInAuditPipe());
            pipes_.release(std::move(flow.auditPipe), left);
        }
    }
    updatePipeGauges();
}

void FlowDriver::updatePipeGauges() noexcept {
    const auto& pool = pipes_.stats();
    stats_.pipesInUse.set(pool.inUse);
    stats_.pipesIdle.set(pool.idle);
    stats_.pipesOverflowInUse.set(pool.overflowInUse);
    stats_.pipeCapRefusals.set(pool.capRefusals);
}

}  // namespace splicegate
