#include "common/BufferRing.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <string>
#include <utility>

#include "common/Error.h"

namespace splicegate {
namespace {

constexpr unsigned kInitialWindow = 128;

std::size_t pageSize() {
    static const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    return page;
}

std::size_t roundToPages(std::size_t bytes) {
    return (bytes + pageSize() - 1) / pageSize() * pageSize();
}

}  // namespace

BufferRing::Mapping::Mapping(std::size_t bytes, const char* what) : bytes_(roundToPages(bytes)) {
    // MAP_NORESERVE: a page costs memory only once a recv has written into it.
    void* address = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (address == MAP_FAILED)
        throwErrno(errno, std::string("mmap of ") + std::to_string(bytes_) + " bytes for " + what);
    data_ = static_cast<std::byte*>(address);
}

BufferRing::Mapping::~Mapping() {
    if (data_ != nullptr) ::munmap(data_, bytes_);
}

BufferRing::Mapping::Mapping(Mapping&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

unsigned BufferRing::checkedEntries(unsigned entries) {
    if (entries == 0 || entries > kMaxEntries || !std::has_single_bit(entries))
        throw UsageError("--buffer-ring-entries " + std::to_string(entries) +
                         ": must be a power of two from 1 to " + std::to_string(kMaxEntries));
    return entries;
}

std::size_t BufferRing::checkedSize(std::size_t bufferSize) {
    // A recv's result is an int and a provided buffer's length a 32-bit field.
    if (bufferSize == 0 || bufferSize > INT_MAX)
        throw UsageError("--buffer-size " + std::to_string(bufferSize) + ": must be from 1 to " +
                         std::to_string(INT_MAX) + " bytes");
    return bufferSize;
}

BufferRing::BufferRing(RingRegistration& registration, std::uint16_t groupId, unsigned entries,
                       std::size_t bufferSize)
    : registration_(&registration),
      groupId_(groupId),
      entries_(checkedEntries(entries)),
      bufferSize_(checkedSize(bufferSize)),
      ringMemory_(sizeof(io_uring_buf) * entries_, "the provided buffer ring"),
      buffers_(bufferSize_ * entries_,
               "the provided buffers (--buffer-ring-entries x --buffer-size)") {
    shared_ = reinterpret_cast<io_uring_buf_ring*>(ringMemory_.data());
    io_uring_buf_ring_init(shared_);
    io_uring_buf_reg request{};
    request.ring_addr = reinterpret_cast<std::uintptr_t>(shared_);
    request.ring_entries = entries;
    request.bgid = groupId;
    checkNeg(registration_->registerBufferRing(request),
             "io_uring_register_buf_ring (buffer group " + std::to_string(groupId) + ", " +
                 std::to_string(entries) + " entries; provided buffer rings need kernel 5.19)");
    registered_ = true;
    window_ = std::min(entries_, kInitialWindow);
    spare_.reserve(entries_);
    resident_.assign(entries_, false);
    for (unsigned id = entries_; id-- > 0;) spare_.push_back(static_cast<std::uint16_t>(id));
    topUp();
}

BufferRing::~BufferRing() {
    // The kernel stops picking from the group first; the mappings go after (members).
    if (registered_) registration_->unregisterBufferRing(groupId_);
}

BufferRing::BufferRing(BufferRing&& other) noexcept
    : registration_(other.registration_),
      groupId_(other.groupId_),
      entries_(other.entries_),
      bufferSize_(other.bufferSize_),
      ringMemory_(std::move(other.ringMemory_)),
      buffers_(std::move(other.buffers_)),
      shared_(std::exchange(other.shared_, nullptr)),
      spare_(std::move(other.spare_)),
      inRing_(std::exchange(other.inRing_, 0)),
      window_(std::exchange(other.window_, 0)),
      inUse_(std::exchange(other.inUse_, 0)),
      peakInUse_(std::exchange(other.peakInUse_, 0)),
      resident_(std::move(other.resident_)),
      registered_(std::exchange(other.registered_, false)) {}

std::optional<std::uint16_t> BufferRing::bufferOf(std::uint32_t cqeFlags) noexcept {
    if (!(cqeFlags & IORING_CQE_F_BUFFER)) return std::nullopt;
    return static_cast<std::uint16_t>(cqeFlags >> IORING_CQE_BUFFER_SHIFT);
}

std::span<std::byte> BufferRing::take(std::uint16_t id, std::size_t length) noexcept {
    peakInUse_ = std::max(peakInUse_, ++inUse_);
    --inRing_;  // every completion that names a buffer took it from the ring
    resident_[id] = true;
    topUp();
    return {bufferAt(id), length < bufferSize_ ? length : bufferSize_};
}

void BufferRing::giveBack(std::uint16_t id) noexcept {
    --inUse_;
    spare_.push_back(id);
    topUp();
}

void BufferRing::widen() noexcept {
    window_ = std::min(entries_, window_ * 2);
    topUp();
}

unsigned BufferRing::trim() noexcept {
    auto peak = std::exchange(peakInUse_, inUse_);
    if (peak <= window_ / 4) window_ = std::max(std::min(entries_, kInitialWindow), window_ / 2);
    // The stack's top feeds the ring next; below the recent peak's worth (or the window's) the
    // buffers are cold. Keeping the peak's worth spares a steady load page faults.
    std::size_t warm = std::min<std::size_t>(spare_.size(), std::max(window_, peak));
    unsigned released = 0;
    for (std::size_t i = 0; i + warm < spare_.size(); ++i) {
        if (resident_[spare_[i]] && releasePages(spare_[i])) ++released;
    }
    return released;
}

// Only the whole pages inside the buffer: a page it shares with a neighbour stays.
bool BufferRing::releasePages(std::uint16_t id) noexcept {
    const auto page = static_cast<std::uintptr_t>(pageSize());
    auto start = reinterpret_cast<std::uintptr_t>(bufferAt(id));
    auto first = (start + page - 1) / page * page;
    auto end = (start + bufferSize_) / page * page;
    // A refusal keeps the pages, and the buffer is tried again at the next trim().
    if (end > first && ::madvise(reinterpret_cast<void*>(first), end - first, MADV_DONTNEED) != 0)
        return false;
    resident_[id] = false;
    return true;
}

void BufferRing::topUp() noexcept {
    const auto mask = io_uring_buf_ring_mask(entries_);
    int added = 0;
    while (inRing_ < window_ && !spare_.empty()) {
        std::uint16_t id = spare_.back();
        spare_.pop_back();
        io_uring_buf_ring_add(shared_, bufferAt(id), static_cast<unsigned>(bufferSize_), id, mask,
                              added++);
        ++inRing_;
    }
    if (added > 0) io_uring_buf_ring_advance(shared_, added);
}

}  // namespace splicegate
