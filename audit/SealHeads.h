#pragma once
// Each worker's newest seal: the head of its chain, which a copy kept off the box (the journal's
// `audit seal` lines, `splicegatectl status`, the archive) compares with `splicegate-audit verify
// --expect-head` to find a log whose newest segments were deleted or rewritten.
// Thread affinity: written by each worker's SegmentStore, read by the admin thread; one mutex,
// touched once per sealed segment.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "audit/SealChain.h"

namespace splicegate::audit {

struct SealHead {
    std::uint32_t worker = 0;
    std::string indexFile;  // the sealed segment's index file name
    Digest digest{};
};

// Lowercase hex (hexText), as the log line, status and verify --expect-head spell a digest.
inline std::string digestHex(const Digest& digest) {
    return hexText(digest.data(), digest.size());
}

class SealHeads {
  public:
    void record(SealHead head) {
        std::lock_guard lock(mutex_);
        heads_[head.worker] = std::move(head);
    }
    std::vector<SealHead> heads() const {
        std::lock_guard lock(mutex_);
        std::vector<SealHead> out;
        for (const auto& [worker, head] : heads_) out.push_back(head);
        return out;
    }

  private:
    mutable std::mutex mutex_;
    std::map<std::uint32_t, SealHead> heads_;
};

}  // namespace splicegate::audit
