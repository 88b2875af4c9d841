#pragma once
// Which lane one direction of a connection should use under `--lane auto`: small reads (request/
// response, interactive) are cheapest through the buffer lane, since a recv into a provided
// buffer costs no readiness round trip and no pipe; large reads (bulk) through splice, which
// copies nothing through user space. A direction starts in the buffer lane, moves to splice
// after kRun large reads in a row (at least half a buffer: a busy sender's recvs often end a
// little short of a full buffer), and back after kRun small reads in a row. The policy only
// decides; the worker switches at a point where nothing is in flight, so a switch never reorders,
// drops or duplicates a byte (datapath/LaneSwitch.h applies it). Pure logic, no state but two run
// counters. Thread affinity: the owning worker's thread.
#include <cstddef>
#include <cstdint>

#include "datapath/LaneKind.h"

namespace splicegate {

class LanePolicy {
  public:
    static constexpr std::uint8_t kRun = 4;

    // `adaptive`: --lane auto; otherwise the lane never changes.
    explicit LanePolicy(bool adaptive = true) noexcept : adaptive_(adaptive) {}

    // Buffer lane: a recv of `bytes` into a buffer of `bufferSize`. True when the direction
    // should move to splice.
    bool recordBufferRead(std::size_t bytes, std::size_t bufferSize) noexcept {
        run_ = large(bytes, bufferSize) ? counted() : 0;
        return adaptive_ && run_ >= kRun;
    }
    // Splice lane: a fill of `bytes` (> 0). True when the direction should return to the buffer
    // lane (at its next wait for readiness, when its pipes are empty).
    bool recordSpliceRead(std::size_t bytes, std::size_t bufferSize) noexcept {
        run_ = large(bytes, bufferSize) ? 0 : counted();
        return adaptive_ && run_ >= kRun;
    }
    bool wantsSwitch() const noexcept { return adaptive_ && run_ >= kRun; }
    // The switch happened: the run starts again in the new lane.
    void recordSwitched() noexcept { run_ = 0; }

  private:
    static bool large(std::size_t bytes, std::size_t bufferSize) noexcept {
        return bytes >= bufferSize / 2;
    }
    std::uint8_t counted() const noexcept { return run_ < kRun ? run_ + 1 : kRun; }

    bool adaptive_;
    std::uint8_t run_ = 0;
};

}  // namespace splicegate
