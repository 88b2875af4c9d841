#include "audit/LogBuffer.h"

#include <sys/mman.h>
#include <sys/uio.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/Error.h"

namespace splicegate::audit {

LogBuffer::LogBuffer(std::size_t limitBytes, std::size_t maxBufferBytes) {
    std::size_t perBuffer = std::min(maxBufferBytes, limitBytes / kMinBuffers);
    perBuffer -= perBuffer % kAlignment;
    if (perBuffer < kAlignment)
        throw std::invalid_argument("audit buffer of " + std::to_string(limitBytes) +
                                    " bytes is too small: at least " +
                                    std::to_string(kMinBuffers * kAlignment) + " bytes");
    bufferBytes_ = perBuffer;
    count_ = static_cast<unsigned>(limitBytes / perBuffer);
    // Anonymous pages are page aligned, which satisfies kAlignment; they are faulted in as the
    // log first fills them (or pinned at once by registration).
    void* mapping =
        ::mmap(nullptr, totalBytes(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapping == MAP_FAILED)
        throwErrno(errno, "mmap of the audit buffer (" + std::to_string(totalBytes()) + " bytes)");
    base_ = static_cast<std::byte*>(mapping);
    // Huge pages: the copy out of the audit pipe writes the whole buffer round after round, and
    // with 4 KiB pages it pays a TLB miss every page (docs/kernel-notes.md §15). A hint only: a
    // kernel without transparent huge pages refuses it, and the buffer works the same.
    (void)::madvise(mapping, totalBytes(), MADV_HUGEPAGE);
}

LogBuffer::LogBuffer(LogBuffer&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)),
      bufferBytes_(other.bufferBytes_),
      count_(std::exchange(other.count_, 0)),
      ring_(std::exchange(other.ring_, nullptr)) {}

LogBuffer::~LogBuffer() {
    if (ring_ != nullptr) ring_->unregisterBuffers();
    if (base_ != nullptr) ::munmap(base_, totalBytes());
}

int LogBuffer::registerWith(RingRegistration& ring) noexcept {
    if (ring_ != nullptr) return -EALREADY;
    std::vector<iovec> vectors;
    try {
        vectors.resize(count_);
    } catch (const std::bad_alloc&) {
        return -ENOMEM;
    }
    for (unsigned i = 0; i < count_; ++i) vectors[i] = {buffer(i), bufferBytes_};
    int rc = ring.registerBuffers(vectors.data(), count_);
    if (rc < 0) return rc;
    ring_ = &ring;
    return 0;
}

}  // namespace splicegate::audit
