#pragma once
// The lanes a direction's bytes can take, and --lane's choice among them: the buffer lane
// (provided buffers, recv/send) or the splice lane (pipes, splice/tee); `Auto` is only a setting
// (--lane auto: each direction moves between the two, datapath/LaneSwitch.h), never the lane a
// direction is in. Buffer and Splice index the per-lane counters (metrics/Stats.h).
#include <cstdint>

namespace splicegate {

enum class LaneKind : std::uint8_t { Buffer = 0, Splice = 1, Auto = 2 };

inline const char* toString(LaneKind lane) noexcept {
    switch (lane) {
        case LaneKind::Buffer:
            return "buffer";
        case LaneKind::Splice:
            return "splice";
        case LaneKind::Auto:
            return "auto";
    }
    return "auto";
}

}  // namespace splicegate
