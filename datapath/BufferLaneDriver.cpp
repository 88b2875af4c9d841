#include "datapath/BufferLaneDriver.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/Error.h"
#include "common/Log.h"
#include "datapath/Failpoints.h"

namespace splicegate {

BufferLaneDriver::BufferLaneDriver(RingOps& ring, RingRegistration& registration, unsigned entries,
                                   std::size_t bufferSize, AuditTap* audit, WorkerStats& stats,
                                   unsigned connectionSlots, LaneRule& rule)
    : ring_(ring),
      lane_(ring, registration, entries, bufferSize),
      sockets_(ring, registration, connectionSlots),
      audit_(audit),
      stats_(stats),
      rule_(rule) {}

bool BufferLaneDriver::start(ConnectionIo& io) noexcept {
    for (auto d : {Direction::ClientToUpstream, Direction::UpstreamToClient}) {
        io.at(d).laneFlow.configureAudit(io.audited,
                                         io.audited && audit_ != nullptr && audit_->strict());
        if (!io.inSocketTable) installSockets(io);
        armRecv(io, d);
    }
    return true;
}

StepResult BufferLaneDriver::enter(ConnectionIo& io, Direction d) noexcept {
    io.at(d).laneFlow.recordLaneSwitched();
    armRecv(io, d);
    return {Next::Wait};
}

// Before the connection's first ring operation on a socket, in the same submission: the kernel
// runs the update first, as SQEs are issued in order.
void BufferLaneDriver::installSockets(ConnectionIo& io) noexcept {
    io.tableFds[0] = io.fd(0);
    io.tableFds[1] = io.fd(1);
    io.inSocketTable = sockets_.install(io.slot, io.tableFds, socketTableTag(io));
}

StepResult BufferLaneDriver::drive(ConnectionIo& io, Direction d) noexcept {
    for (int steps = 0; steps < 32; ++steps) {
        if (!io.relaying) return {Next::Wait};
        auto result = step(io, d);
        if (result.next != Next::Continue) return result;
    }
    return {Next::Wait, Verdict::yield()};  // let other flows have a turn
}

// Takes the direction's next step.
StepResult BufferLaneDriver::step(ConnectionIo& io, Direction d) noexcept {
    auto& fio = io.at(d);
    auto& flow = fio.laneFlow;
    if (flow.recvCancelWanted()) {
        lane_.cancelRecv(flow, tag(io, d, BufferLaneOp::Recv), tag(io, d, BufferLaneOp::Cancel));
        ++fio.laneOps;
    }
    switch (flow.next()) {
        case LaneStep::AuditWrite:
            return startAuditWrite(io, d);
        case LaneStep::WaitAudit:
            return {Next::Wait};
        case LaneStep::WaitDurable:
            if (!flow.durableWaitAsked()) {
                flow.recordDurableWaitAsked();
                audit_->waitDurable(io, d);
            }
            return {Next::Wait};
        case LaneStep::Send:
            return send(io, d);
        case LaneStep::WaitSend:
            return {Next::Wait};
        case LaneStep::WaitWritable:
            if (!flow.writableWaitArmed()) armWritable(io, d);
            return {Next::Wait};
        case LaneStep::Receive:
            if (!flow.recvArmed() && !flow.starved()) armRecv(io, d);
            return {Next::Wait};
        case LaneStep::SwitchLane:
            flow.recordLaneSwitched();
            return {Next::Switch};
        case LaneStep::ShutdownSink:
            return shutdownSink(io, d);
        case LaneStep::Finished:
            return {Next::Wait};
    }
    return {Next::Wait};
}

void BufferLaneDriver::armRecv(ConnectionIo& io, Direction d) noexcept {
    lane_.armRecv(io.at(d).laneFlow, io.sourceRef(d), tag(io, d, BufferLaneOp::Recv));
    ++io.at(d).laneOps;  // until the multishot's final completion (no IORING_CQE_F_MORE)
}

void BufferLaneDriver::armWritable(ConnectionIo& io, Direction d) noexcept {
    auto& fio = io.at(d);
    fio.laneFlow.recordWritableWaitArmed();
    auto sink = io.sinkRef(d);
    ring_.pollAdd(sink.index, POLLOUT, tag(io, d, BufferLaneOp::Writable), sink.flags());
    ++fio.laneOps;
}

// Received bytes are in user memory: they go to the log from there (no tee). The send waits for
// the write (fail-closed; strict: for the group commit too).
StepResult BufferLaneDriver::startAuditWrite(ConnectionIo& io, Direction d) noexcept {
    auto& fio = io.at(d);
    auto slice = fio.laneFlow.auditSlice();
    auto length = failpointLength(FailSite::AuditWrite, slice.length);
    if (int rc = audit_->reserve(fio, length); rc < 0) {
        if (rc != -ENOBUFS) return auditFailed(io, d, rc);
        // The log's buffer is full: the chunk waits (its recv goes on only while buffers last)
        // until a completion frees room and the flow is driven again.
        audit_->waitRoom(io, d);
        return {Next::Wait};
    }
    // A writer with a buffer of its own may give less than asked (the end of one of its buffers).
    length = std::min<std::size_t>(length, fio.auditSlot.length);
    fio.laneFlow.recordAuditStarted(static_cast<std::uint32_t>(length));
    const auto& destination = fio.auditSlot.destination;
    if (destination.inMemory()) {  // a writer with its own log buffer: a copy, done now
        auto bytes = lane_.bytes(slice);
        std::memcpy(destination.memory.data(), bytes.data(), length);
        return auditWritten(io, d, failpointResult(FailSite::AuditWrite, static_cast<int>(length)));
    }
    lane_.submitWrite(destination.fd, destination.offset, slice, length,
                      tag(io, d, BufferLaneOp::AuditWrite));
    ++fio.laneOps;
    return {Next::Continue};
}

StepResult BufferLaneDriver::auditWritten(ConnectionIo& io, Direction d, int result) noexcept {
    int booked = audit_->book(io, d, result);
    bool written = io.at(d).laneFlow.recordAuditWrite(booked);
    if (!io.relaying) return {Next::Wait};
    if (!written) return auditFailed(io, d, booked == 0 ? -ENOSPC : booked);
    return {Next::Continue};
}

StepResult BufferLaneDriver::auditFailed(ConnectionIo& io, Direction d, int error) noexcept {
    // The tap judges (fail-closed or fail-open) and, fail-open, gives up this lane's audit stage.
    if (audit_->failed(io, d, error) == AuditAction::Close)
        return {Next::Close, Verdict::close(CloseReason::AuditError, true)};
    return {Next::Continue};
}

StepResult BufferLaneDriver::send(ConnectionIo& io, Direction d) noexcept {
    auto& fio = io.at(d);
    auto slice = fio.laneFlow.sendSlice();
    auto length = static_cast<std::uint32_t>(failpointLength(FailSite::Forward, slice.length));
    lane_.submitSend(io.sinkRef(d), slice, length, tag(io, d, BufferLaneOp::Send));
    fio.laneFlow.recordSendStarted(length);
    ++fio.laneOps;
    return {Next::Continue};
}

StepResult BufferLaneDriver::sent(ConnectionIo& io, Direction d, int result) noexcept {
    auto& flow = io.at(d).laneFlow;
    bool ok = flow.recordSend(result, flow.sendInFlight());
    lane_.giveBackSent(flow);
    updateGauge();
    if (!io.relaying) return {Next::Wait};
    if (!ok) {
        logDebug("connection ", io.id, ": ", toString(d), " send failed: ", errnoText(result));
        bool reset = result == -ECONNRESET || result == -EPIPE;
        return {Next::Close, Verdict::close(reset ? sinkResetReason(d) : CloseReason::Error, true)};
    }
    if (result > 0) {
        io.lastActivity = now_;
        io.countForwarded(d, LaneKind::Buffer, static_cast<std::uint64_t>(result),
                          stats_.auditLostBytes);
    }
    return {Next::Continue};
}

StepResult BufferLaneDriver::shutdownSink(ConnectionIo& io, Direction d) noexcept {
    ::shutdown(io.sinkFd(d), SHUT_WR);
    io.at(d).laneFlow.recordSinkShutdown();
    if (io.finished()) return {Next::Close, Verdict::close(CloseReason::Closed, false)};
    return {Next::Wait};
}

StepResult BufferLaneDriver::complete(ConnectionIo& io, CompletionTag tag,
                                      MoveCompletion completion) noexcept {
    auto op = tag.opAs<BufferLaneOp>();
    if (op == BufferLaneOp::SocketTable) {
        if (completion.result < 0)
            logWarn("connection ", io.id, ": io_uring fixed file table update failed (",
                    errnoText(completion.result), "): its ring operations will fail");
        return {Next::Wait};
    }
    auto d = static_cast<Direction>(tag.direction);
    auto& fio = io.at(d);
    // A multishot recv stays one operation in flight until its final completion.
    bool more = op == BufferLaneOp::Recv && (completion.flags & IORING_CQE_F_MORE);
    if (!more && fio.laneOps > 0) --fio.laneOps;
    StepResult result{Next::Continue};
    switch (op) {
        case BufferLaneOp::Recv:
            result = received(io, d, completion);
            break;
        case BufferLaneOp::Cancel:
            // It can miss (-ENOENT, -EALREADY) when the recv was completing at that moment;
            // while the recv is still armed the next step asks again.
            if (completion.result < 0 && fio.laneFlow.recvArmed())
                fio.laneFlow.recordCancelMissed();
            break;
        case BufferLaneOp::AuditWrite:
            result = auditWritten(io, d, failpointResult(FailSite::AuditWrite, completion.result));
            break;
        case BufferLaneOp::Send:
            result = sent(io, d, failpointResult(FailSite::Forward, completion.result));
            break;
        case BufferLaneOp::Writable:
            fio.laneFlow.recordSinkWritable();
            if (completion.result < 0 && completion.result != -ECANCELED && io.relaying)
                result = {Next::Close, Verdict::close(CloseReason::Error, true)};
            break;
        case BufferLaneOp::SocketTable:  // answered above
            break;
    }
    if (!io.relaying) return {Next::Wait};
    return result;
}

StepResult BufferLaneDriver::received(ConnectionIo& io, Direction d,
                                      MoveCompletion completion) noexcept {
    auto& fio = io.at(d);
    int result = completion.result;
    if (result > 0) result = failpointResult(FailSite::Fill, result);
    auto outcome = lane_.onRecv(fio.laneFlow, result, completion.flags);
    updateGauge();
    // Closing: nothing more is sent. Held buffers go back in release(), once no audit write can
    // still be reading one of them.
    if (!io.relaying) return {Next::Wait};
    switch (outcome) {
        case RecvOutcome::Data:
            io.lastActivity = now_;
            if (rule_.recordRead(io, d, static_cast<std::size_t>(result)))
                fio.laneFlow.requestLaneSwitch();
            break;
        case RecvOutcome::EndOfStream:
        case RecvOutcome::Cancelled:
            break;
        case RecvOutcome::NoBuffers:
            stats_.bufferRingDry.add(1);
            lane_.park(tag(io, d, BufferLaneOp::Recv));
            break;
        case RecvOutcome::Failed:
            logDebug("connection ", io.id, ": ", toString(d), " recv failed: ", errnoText(result));
            return {Next::Close, Verdict::close(sourceResetReason(d), true)};
    }
    return {Next::Continue};
}

StepResult BufferLaneDriver::durable(ConnectionIo& io, Direction d) noexcept {
    io.at(d).laneFlow.recordDurable();
    return {Next::Continue};
}

void BufferLaneDriver::dropCompletion(CompletionTag tag, MoveCompletion completion) noexcept {
    if (tag.opAs<BufferLaneOp>() == BufferLaneOp::SocketTable) {
        if (completion.result < 0)
            logDebug("io_uring fixed file table update of a closed connection: ",
                     errnoText(completion.result));
        return;
    }
    lane_.dropCompletion(completion.flags);
    updateGauge();
}

void BufferLaneDriver::release(ConnectionIo& io) noexcept {
    for (auto& fio : io.flows) lane_.release(fio.laneFlow);
    if (io.inSocketTable) {  // the table's references are what still keeps the sockets open
        sockets_.remove(io.slot, socketTableTag(io));
        io.inSocketTable = false;
    }
    updateGauge();
}

void BufferLaneDriver::afterTurn(const ConnectionFinder& find) noexcept {
    lane_.rearmParked([&](CompletionTag tag) {
        if (ConnectionIo* io = find.find(tag)) rearm(*io, static_cast<Direction>(tag.direction));
    });
}

void BufferLaneDriver::rearm(ConnectionIo& io, Direction d) noexcept {
    // A direction that left the lane since it was parked is no longer starved here.
    auto& fio = io.at(d);
    if (!io.relaying) return;
    if (fio.laneFlow.recvArmed() || !fio.laneFlow.starved()) return;
    armRecv(io, d);
}

}  // namespace splicegate
