#pragma once
// The data path's options (docs/configuration.md, "Relay"): how bytes move (splice engine,
// lane, the buffer lane's provided buffers, pipes) and how the workers' rings are driven.
// Their settings are declared once with their defaults, next to the option group that describes
// them and how they are read and checked.
#include <boost/program_options/options_description.hpp>
#include <cstdint>
#include <optional>

#include "common/OptionValues.h"
#include "datapath/LaneKind.h"

namespace splicegate {

enum class SpliceEngine { Chain, Inline };

struct DatapathSettings {
    std::optional<SpliceEngine> spliceEngine;  // unset: the default chosen by measurement
    std::uint64_t pipeSize = 1048576;          // lowered at start to what the system allows
    std::uint64_t pipeBudgetBytes = 0;  // extension: cap on all pipes' capacity; 0 = system's limit
    // How flows move bytes: auto starts in the buffer lane and moves to splice while reads stay
    // large.
    LaneKind lane = LaneKind::Auto;
    std::uint32_t bufferRingEntries = 4096;  // power of two (io_uring buffer rings require it)
    std::uint32_t bufferSize = 16384;
    // Each worker's ring polled by a kernel thread (IORING_SETUP_SQPOLL): no submit system call
    // while traffic flows, one more busy thread per worker.
    bool sqpoll = false;

    // The engine the workers move bytes with.
    SpliceEngine engine() const noexcept { return spliceEngine.value_or(SpliceEngine::Inline); }
};

// The data path's options, their defaults from DatapathSettings{}.
boost::program_options::options_description datapathOptions();
DatapathSettings readDatapathSettings(const OptionValues& values);
// Every data path option takes effect at the next start only.
void listChanged(const DatapathSettings& running, const DatapathSettings& next,
                 ChangedOptions& changed);

const char* toString(SpliceEngine engine) noexcept;

}  // namespace splicegate
