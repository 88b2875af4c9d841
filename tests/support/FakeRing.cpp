#include "tests/support/FakeRing.h"

#include <cerrno>
#include <cstring>

namespace splicegate::test {

const char* toString(RingOp op) noexcept {
    switch (op) {
        case RingOp::RecvMultishot:
            return "recvMultishot";
        case RingOp::Send:
            return "send";
        case RingOp::Splice:
            return "splice";
        case RingOp::Tee:
            return "tee";
        case RingOp::Read:
            return "read";
        case RingOp::Write:
            return "write";
        case RingOp::WriteFixed:
            return "writeFixed";
        case RingOp::Fsync:
            return "fsync";
        case RingOp::Accept:
            return "accept";
        case RingOp::AcceptMultishot:
            return "acceptMultishot";
        case RingOp::Connect:
            return "connect";
        case RingOp::LinkTimeout:
            return "linkTimeout";
        case RingOp::PollAdd:
            return "pollAdd";
        case RingOp::PollRemove:
            return "pollRemove";
        case RingOp::Timeout:
            return "timeout";
        case RingOp::Cancel:
            return "cancel";
        case RingOp::CancelFd:
            return "cancelFd";
        case RingOp::FilesUpdate:
            return "filesUpdate";
        case RingOp::Openat2:
            return "openat2";
        case RingOp::Renameat:
            return "renameat";
        case RingOp::Fallocate:
            return "fallocate";
        case RingOp::Nop:
            return "nop";
    }
    return "?";
}

PreparedOp& FakeRing::record(RingOp op, int fd, std::size_t length, CompletionTag tag,
                             SqeFlags flags) {
    PreparedOp& prepared = ops_.emplace_back();
    prepared.op = op;
    prepared.fd = fd;
    prepared.length = length;
    prepared.tag = tag;
    prepared.flags = flags;
    return prepared;
}

void FakeRing::recvMultishot(int fd, std::uint16_t bufferGroup, CompletionTag tag,
                             SqeFlags flags) noexcept {
    record(RingOp::RecvMultishot, fd, 0, tag, flags).bufferGroup = bufferGroup;
}

void FakeRing::send(int fd, std::span<const std::byte> data, int msgFlags, CompletionTag tag,
                    SqeFlags flags) noexcept {
    auto& op = record(RingOp::Send, fd, data.size(), tag, flags);
    op.opFlags = msgFlags;
    op.address = data.data();
}

void FakeRing::splice(int from, std::int64_t fromOffset, int to, std::int64_t toOffset,
                      unsigned length, unsigned spliceFlags, CompletionTag tag,
                      SqeFlags flags) noexcept {
    (void)fromOffset;
    auto& op = record(RingOp::Splice, from, length, tag, flags);
    op.offset = static_cast<std::uint64_t>(toOffset);
    op.opFlags = static_cast<int>(spliceFlags);
    op.toFd = to;
}

void FakeRing::tee(int from, int to, unsigned length, unsigned spliceFlags, CompletionTag tag,
                   SqeFlags flags) noexcept {
    auto& op = record(RingOp::Tee, from, length, tag, flags);
    op.opFlags = static_cast<int>(spliceFlags);
    op.toFd = to;
}

void FakeRing::read(int fd, std::span<std::byte> into, std::uint64_t offset, CompletionTag tag,
                    SqeFlags flags) noexcept {
    auto& op = record(RingOp::Read, fd, into.size(), tag, flags);
    op.offset = offset;
    op.address = into.data();
}

void FakeRing::write(int fd, std::span<const std::byte> data, std::uint64_t offset, int rwFlags,
                     CompletionTag tag, SqeFlags flags) noexcept {
    auto& op = record(RingOp::Write, fd, data.size(), tag, flags);
    op.offset = offset;
    op.opFlags = rwFlags;
    op.address = data.data();
}

void FakeRing::writeFixed(int fd, std::span<const std::byte> data, std::uint64_t offset,
                          int bufferIndex, int rwFlags, CompletionTag tag,
                          SqeFlags flags) noexcept {
    (void)bufferIndex;
    auto& op = record(RingOp::WriteFixed, fd, data.size(), tag, flags);
    op.offset = offset;
    op.opFlags = rwFlags;
    op.address = data.data();
}

void FakeRing::fsync(int fd, SyncMode mode, CompletionTag tag, SqeFlags flags) noexcept {
    record(RingOp::Fsync, fd, 0, tag, flags).opFlags = mode == SyncMode::DataOnly ? 1 : 0;
}

void FakeRing::accept(int fd, sockaddr* address, socklen_t* length, int acceptFlags,
                      CompletionTag tag, SqeFlags flags) noexcept {
    auto& op = record(RingOp::Accept, fd, 0, tag, flags);
    op.opFlags = acceptFlags;
    op.peerAddress = address;
    op.peerLength = length;
}

void FakeRing::acceptMultishot(int fd, int acceptFlags, CompletionTag tag,
                               SqeFlags flags) noexcept {
    record(RingOp::AcceptMultishot, fd, 0, tag, flags).opFlags = acceptFlags;
}

void FakeRing::connect(int fd, const sockaddr* address, socklen_t length,
                       __kernel_timespec* timeout, CompletionTag tag,
                       CompletionTag timeoutTag) noexcept {
    makeRoom(2);
    record(RingOp::Connect, fd, length, tag, SqeFlag::Link).address = address;
    auto& linked = record(RingOp::LinkTimeout, -1, 0, timeoutTag, {});
    if (timeout != nullptr) linked.timeout = *timeout;
}

void FakeRing::pollAdd(int fd, unsigned events, CompletionTag tag, SqeFlags flags) noexcept {
    record(RingOp::PollAdd, fd, 0, tag, flags).opFlags = static_cast<int>(events);
}

void FakeRing::pollRemove(CompletionTag target, CompletionTag tag) noexcept {
    record(RingOp::PollRemove, -1, 0, tag, {}).target = target;
}

void FakeRing::timeout(__kernel_timespec* timeout, unsigned count, unsigned timeoutFlags,
                       CompletionTag tag, SqeFlags flags) noexcept {
    auto& op = record(RingOp::Timeout, -1, count, tag, flags);
    op.opFlags = static_cast<int>(timeoutFlags);
    if (timeout != nullptr) op.timeout = *timeout;
}

void FakeRing::cancel(CompletionTag target, CompletionTag tag) noexcept {
    record(RingOp::Cancel, -1, 0, tag, {}).target = target;
}

void FakeRing::cancelFd(int fd, unsigned cancelFlags, CompletionTag tag) noexcept {
    record(RingOp::CancelFd, fd, 0, tag, {}).opFlags = static_cast<int>(cancelFlags);
}

void FakeRing::filesUpdate(const int*, unsigned count, int firstEntry, CompletionTag tag) noexcept {
    record(RingOp::FilesUpdate, -1, count, tag, {}).offset = static_cast<std::uint64_t>(firstEntry);
}

void FakeRing::openat2(int directoryFd, const char*, open_how* how, CompletionTag tag,
                       SqeFlags flags) noexcept {
    record(RingOp::Openat2, directoryFd, 0, tag, flags).opFlags =
        how != nullptr ? static_cast<int>(how->flags) : 0;
}

void FakeRing::renameat(int fromDirectory, const char*, int, const char*, unsigned renameFlags,
                        CompletionTag tag, SqeFlags flags) noexcept {
    record(RingOp::Renameat, fromDirectory, 0, tag, flags).opFlags = static_cast<int>(renameFlags);
}

void FakeRing::fallocate(int fd, int mode, std::uint64_t offset, std::uint64_t length,
                         CompletionTag tag, SqeFlags flags) noexcept {
    auto& op = record(RingOp::Fallocate, fd, length, tag, flags);
    op.offset = offset;
    op.opFlags = mode;
}

void FakeRing::nop(CompletionTag tag, SqeFlags flags) noexcept {
    record(RingOp::Nop, -1, 0, tag, flags);
}

void FakeRing::makeRoom(unsigned entries) noexcept {
    roomRequests_.push_back(entries);
}

int FakeRing::submit() noexcept {
    ++submits_;
    preparedAtLastSubmit_ = ops_.size();
    return 0;
}

int FakeRing::submitAndWait(unsigned) noexcept {
    ++waits_;
    submit();
    return queued_.empty() ? -ETIME : 0;
}

std::vector<PreparedOp> FakeRing::pending() const {
    std::vector<PreparedOp> open;
    for (const auto& op : ops_)
        if (!op.completed) open.push_back(op);
    return open;
}

std::vector<PreparedOp> FakeRing::preparedSinceClear() const {
    return {ops_.begin() + static_cast<std::ptrdiff_t>(firstUnread_), ops_.end()};
}

PreparedOp* FakeRing::pendingWith(CompletionTag tag) noexcept {
    for (auto& op : ops_)
        if (!op.completed && op.tag == tag) return &op;
    return nullptr;
}

const PreparedOp* FakeRing::findPending(CompletionTag tag) const noexcept {
    for (const auto& op : ops_)
        if (!op.completed && op.tag == tag) return &op;
    return nullptr;
}

bool FakeRing::complete(CompletionTag tag, int result, std::uint32_t cqeFlags) {
    PreparedOp* op = pendingWith(tag);
    if (op == nullptr) return false;
    if (!(cqeFlags & IORING_CQE_F_MORE)) op->completed = true;
    deliverRaw(tag, result, cqeFlags);
    return true;
}

void FakeRing::deliverRaw(CompletionTag tag, int result, std::uint32_t cqeFlags) {
    io_uring_cqe cqe{};
    cqe.user_data = tag.encode();
    cqe.res = result;
    cqe.flags = cqeFlags;
    queued_.push_back(cqe);
}

// ---- FakeRegistration ------------------------------------------------------------------------

int FakeRegistration::registerBufferRing(const io_uring_buf_reg& registration) noexcept {
    if (bufferRingError_ != 0) return bufferRingError_;
    if (hasBufferRing(registration.bgid)) return -EEXIST;
    Group group;
    group.id = registration.bgid;
    group.ring = reinterpret_cast<io_uring_buf_ring*>(registration.ring_addr);
    group.entries = registration.ring_entries;
    groups_.push_back(group);
    return 0;
}

int FakeRegistration::unregisterBufferRing(std::uint16_t group) noexcept {
    for (auto it = groups_.begin(); it != groups_.end(); ++it) {
        if (it->id != group) continue;
        groups_.erase(it);
        return 0;
    }
    return -EINVAL;
}

int FakeRegistration::registerSparseFiles(unsigned entries) noexcept {
    if (filesError_ != 0) return filesError_;
    if (fileEntries_ != 0) return -EBUSY;
    fileEntries_ = entries;
    return 0;
}

int FakeRegistration::unregisterFiles() noexcept {
    if (fileEntries_ == 0) return -ENXIO;
    fileEntries_ = 0;
    return 0;
}

int FakeRegistration::registerBuffers(const iovec*, unsigned count) noexcept {
    if (buffersError_ < 0) return buffersError_;
    if (registeredBuffers_ > 0) return -EBUSY;
    registeredBuffers_ = count;
    return 0;
}

int FakeRegistration::unregisterBuffers() noexcept {
    if (registeredBuffers_ == 0) return -ENXIO;
    registeredBuffers_ = 0;
    return 0;
}

const FakeRegistration::Group* FakeRegistration::groupOf(std::uint16_t group) const noexcept {
    for (const auto& registered : groups_)
        if (registered.id == group) return &registered;
    return nullptr;
}

bool FakeRegistration::hasBufferRing(std::uint16_t group) const noexcept {
    return groupOf(group) != nullptr;
}

unsigned FakeRegistration::available(std::uint16_t group) const noexcept {
    const Group* found = groupOf(group);
    if (found == nullptr) return 0;
    // The owner publishes with a release store of the tail (io_uring_buf_ring_advance).
    std::uint16_t tail = __atomic_load_n(&found->ring->tail, __ATOMIC_ACQUIRE);
    return static_cast<std::uint16_t>(tail - found->head);
}

std::optional<FakeRegistration::PickedBuffer> FakeRegistration::pick(std::uint16_t group) noexcept {
    if (available(group) == 0) return std::nullopt;
    auto* found = const_cast<Group*>(groupOf(group));
    const io_uring_buf& entry = found->ring->bufs[found->head & (found->entries - 1)];
    ++found->head;
    return PickedBuffer{entry.bid, {reinterpret_cast<std::byte*>(entry.addr), entry.len}};
}

std::optional<std::uint32_t> FakeRegistration::fill(std::uint16_t group,
                                                    std::span<const std::byte> bytes,
                                                    bool more) noexcept {
    const Group* found = groupOf(group);
    if (found == nullptr || available(group) == 0) return std::nullopt;
    const io_uring_buf& next = found->ring->bufs[found->head & (found->entries - 1)];
    if (next.len < bytes.size()) return std::nullopt;
    auto picked = pick(group);
    std::memcpy(picked->memory.data(), bytes.data(), bytes.size());
    return bufferFlags(picked->id, more);
}

}  // namespace splicegate::test
