#include "datapath/DatapathOptions.h"

#include <bit>

namespace splicegate {
namespace po = boost::program_options;
namespace {

constexpr std::uint64_t kMinPipeSize = 4096;
constexpr std::uint64_t kMaxPipeSize = std::uint64_t{1} << 30;
// io_uring_setup_buf_ring() takes at most 32768 entries (IORING_MAX_ENTRIES of a buffer ring).
constexpr std::uint64_t kMaxBufferRingEntries = 32768;
constexpr std::uint64_t kMinBufferSize = 512;
constexpr std::uint64_t kMaxBufferSize = std::uint64_t{1} << 24;

constexpr Named<SpliceEngine> kEngineNames[] = {{"chain", SpliceEngine::Chain},
                                                {"inline", SpliceEngine::Inline}};
constexpr Named<LaneKind> kLaneNames[] = {
    {"auto", LaneKind::Auto}, {"splice", LaneKind::Splice}, {"buffer", LaneKind::Buffer}};

}  // namespace

// One option per line reads better than the formatter's layout of a call chain.
// clang-format off
po::options_description datapathOptions() {
    const DatapathSettings d;
    po::options_description options;
    options.add_options()
        ("splice-engine", scalar("E"),
         "chain (linked io_uring splice/tee SQEs) or inline (direct non-blocking splice/tee); "
         "default: the fastest measured")
        ("lane", scalar("L", nameOf(kLaneNames, d.lane)),
         "auto: a flow starts in the buffer lane and moves to splice while its reads stay large; "
         "splice: always splice; buffer: always the buffer lane")
        ("buffer-ring-entries", scalar("N", std::to_string(d.bufferRingEntries)),
         "provided buffers per worker ring (a power of two, at most 32768)")
        ("buffer-size", scalar("BYTES", std::to_string(d.bufferSize)),
         "size of each provided buffer (512..16 MiB)")
        ("sqpoll", scalar("on|off")->implicit_value("on"),
         "kernel-side submission polling for the workers' rings (off by default)")
        ("pipe-size", scalar("BYTES", std::to_string(d.pipeSize)),
         "target pipe capacity (4096..1 GiB), clamped to what the system allows")
        ("pipe-budget", scalar("BYTES", std::to_string(d.pipeBudgetBytes)),
         "cap on the capacity of all full-size pipes together; 0 = three quarters of "
         "fs.pipe-user-pages-soft; past it, one-page pipes are lent");
    return options;
}
// clang-format on

DatapathSettings readDatapathSettings(const OptionValues& values) {
    DatapathSettings datapath;
    if (values.has("splice-engine"))
        datapath.spliceEngine = values.choice(kEngineNames, "splice-engine");
    datapath.pipeSize = values.number<std::uint64_t>("pipe-size", kMinPipeSize, kMaxPipeSize);
    datapath.pipeBudgetBytes = values.number<std::uint64_t>("pipe-budget");
    datapath.lane = values.choice(kLaneNames, "lane");
    datapath.bufferRingEntries =
        values.number<std::uint32_t>("buffer-ring-entries", 1, kMaxBufferRingEntries);
    if (!std::has_single_bit(datapath.bufferRingEntries))
        throw UsageError(values.label("buffer-ring-entries") + ": value '" +
                         values.text("buffer-ring-entries") + "' is not a power of two");
    datapath.bufferSize =
        values.number<std::uint32_t>("buffer-size", kMinBufferSize, kMaxBufferSize);
    if (values.has("sqpoll")) datapath.sqpoll = values.choice(kOnOffNames, "sqpoll");
    return datapath;
}

void listChanged(const DatapathSettings& running, const DatapathSettings& next,
                 ChangedOptions& changed) {
    changed.check("splice-engine", running.spliceEngine, next.spliceEngine);
    changed.check("lane", running.lane, next.lane);
    changed.check("buffer-ring-entries", running.bufferRingEntries, next.bufferRingEntries);
    changed.check("buffer-size", running.bufferSize, next.bufferSize);
    changed.check("sqpoll", running.sqpoll, next.sqpoll);
    changed.check("pipe-size", running.pipeSize, next.pipeSize);
    changed.check("pipe-budget", running.pipeBudgetBytes, next.pipeBudgetBytes);
}

const char* toString(SpliceEngine engine) noexcept {
    return nameOf(kEngineNames, engine);
}

}  // namespace splicegate
