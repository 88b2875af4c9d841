#include "tools/splicegate-audit/PcapExport.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <map>
#include <functional>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "common/Error.h"
#include "common/UniqueFd.h"
#include "tools/splicegate-audit/ArchiveExtract.h"
#include "tools/splicegate-audit/ArchiveSource.h"
#include "tools/splicegate-audit/Endpoint.h"
#include "tools/splicegate-audit/ListCommand.h"
#include "tools/splicegate-audit/PcapWriter.h"
#include "tools/splicegate-audit/Progress.h"
#include "tools/splicegate-audit/TcpPacket.h"
#include "tools/splicegate-audit/WorkerRecords.h"

namespace po = boost::program_options;

namespace splicegate::audittool {

using audit::Record;
using audit::RecordType;

const char* const kExportUsage =
    "usage: splicegate-audit export DIR|s3://BUCKET/PREFIX --pcap FILE [--since TIME]\n"
    "                               [--until TIME] [--route NAME] [--client ADDR]\n"
    "                               [--connection ID] [--s3-endpoint URL ...]";
const char* const kExportAbout =
    "Writes the connections (or one) as a pcap capture of synthesized TCP/IP packets, readable\n"
    "by tcpdump and Wireshark: handshake at open, the audited bytes of both directions in log\n"
    "order (up to 65,000 bytes a packet, sequence numbers continuous), FIN at close. Addresses\n"
    "and ports are the log's client and upstream. Progress on stderr when it is a terminal.\n"
    "The filters are list's (all given must match); a filter that matches nothing is an error\n"
    "(exit 1, no file written).";

void addExportOptions(po::options_description& options) {
    // clang-format off
    options.add_options()
        ("pcap", po::value<std::string>()->value_name("FILE"),
         "write the capture to FILE ('-' = stdout) (required)");
    // clang-format on
    ConnectionFilter::addOptions(options);
    addArchiveOptions(options);
}

namespace {

// One worker's records with the data file of the segment being read.
class WorkerStream {
  public:
    // A segment retention deletes before it is read is reported: its flows would have gaps.
    WorkerStream(const std::string& dir, std::vector<audit::SegmentFiles> segments,
                 const ProblemSink& onProblem)
        : records_(dir, std::move(segments), onProblem) {
        advance();
    }

    bool done() const { return !pending_; }
    const Record& record() const { return *pending_; }
    const audit::SegmentFiles& segment() const { return records_.segment(); }
    void advance() {
        Record next;
        if (records_.next(next))
            pending_ = std::move(next);
        else
            pending_.reset();
    }

    // The data file of the current record's segment (opened once per segment), or -1 with
    // `error` set.
    int dataFd(std::string& error) {
        const auto& files = records_.segment();
        if (dataPath_ != files.dataPath) {
            dataPath_ = files.dataPath;
            data_.reset(::open(files.dataPath.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
            dataErrno_ = data_ ? 0 : errno;
        }
        if (!data_) error = dataPath_ + ": " + std::strerror(dataErrno_);
        return data_ ? data_.get() : -1;
    }

  private:
    WorkerRecords records_;
    std::optional<Record> pending_;
    std::string dataPath_;
    UniqueFd data_;
    int dataErrno_ = 0;
};

// Both ends of one connection and where each direction's sequence numbers are.
struct Flow {
    Endpoint client;
    Endpoint upstream;
    std::uint32_t clientSeq = 0;    // next sequence number client -> upstream
    std::uint32_t upstreamSeq = 0;  // next sequence number upstream -> client
};

Endpoint mappedToV6(const Endpoint& endpoint) {
    if (endpoint.family == AF_INET6) return endpoint;
    Endpoint mapped = endpoint;
    mapped.family = AF_INET6;
    mapped.address = {};
    mapped.address[10] = 0xff;
    mapped.address[11] = 0xff;
    std::copy_n(endpoint.address.begin(), 4, mapped.address.begin() + 12);
    return mapped;
}

// Deterministic initial sequence numbers, different per connection, so two exports of one log
// are identical and flows do not look alike.
std::uint32_t initialSequence(std::uint64_t id, std::uint32_t salt) {
    std::uint64_t x = (id + salt) * 0x9e3779b97f4a7c15ULL;
    return static_cast<std::uint32_t>(x >> 32);
}

class Exporter {
  public:
    // `selected`: whether the connection with that id goes into the capture.
    Exporter(PcapWriter& pcap, std::function<bool(std::uint64_t)> selected, Progress& progress,
             std::vector<std::string>& problems)
        : pcap_(pcap), selected_(std::move(selected)), progress_(progress), problems_(problems) {}

    bool found() const { return found_; }

    void onRecord(WorkerStream& stream) {
        const Record& record = stream.record();
        const Key key{stream.segment().worker, record.id};
        switch (record.type) {
            case RecordType::Open:
                if (selected_(record.id)) open(key, record);
                break;
            case RecordType::Chunk:
                if (auto it = flows_.find(key); it != flows_.end()) chunk(it->second, stream);
                break;
            case RecordType::Close:
                if (auto it = flows_.find(key); it != flows_.end()) {
                    close(it->second, record.timeNs);
                    flows_.erase(it);
                }
                break;
            case RecordType::Truncated:
                flows_.erase(key);
                break;
            case RecordType::SegmentStart:
            case RecordType::SegmentSealed:
            case RecordType::SegmentsDeleted:
                break;
        }
    }

  private:
    using Key = std::pair<unsigned, std::uint64_t>;  // worker, connection id

    void send(const Flow& flow, bool fromClient, std::int64_t timeNs, std::uint8_t flags,
              const std::uint8_t* payload = nullptr, std::size_t length = 0) {
        TcpSegment segment;
        segment.seq = fromClient ? flow.clientSeq : flow.upstreamSeq;
        segment.ack = fromClient ? flow.upstreamSeq : flow.clientSeq;
        segment.flags = flags;
        segment.payload = payload;
        segment.length = length;
        buildTcpPacket(fromClient ? flow.client : flow.upstream,
                       fromClient ? flow.upstream : flow.client, segment, packet_);
        pcap_.packet(timeNs, packet_.data(), packet_.size());
    }

    void open(const Key& key, const Record& record) {
        if (flows_.count(key)) return;  // a repeated Open: the first one counts, as in extract
        found_ = true;
        auto client = Endpoint::parse(record.client);
        auto upstream = Endpoint::parse(record.upstream);
        if (!client || !client->port || !upstream || !upstream->port) {
            problems_.push_back("connection " + std::to_string(record.id) +
                                ": not exported, its addresses are not numeric ADDR:PORT ('" +
                                record.client + "', '" + record.upstream + "')");
            return;
        }
        Flow flow;
        flow.client = *client;
        flow.upstream = *upstream;
        if (client->family != upstream->family) {
            flow.client = mappedToV6(flow.client);
            flow.upstream = mappedToV6(flow.upstream);
        }
        flow.clientSeq = initialSequence(record.id, 0);
        flow.upstreamSeq = initialSequence(record.id, 1);
        using namespace tcpflag;
        send(flow, true, record.timeNs, kSyn);
        ++flow.clientSeq;
        send(flow, false, record.timeNs, kSyn | kAck);
        ++flow.upstreamSeq;
        send(flow, true, record.timeNs, kAck);
        flows_.emplace(key, flow);
    }

    void chunk(Flow& flow, WorkerStream& stream) {
        const Record& record = stream.record();
        const bool fromClient = record.direction == audit::kDirectionC2U;
        std::uint32_t& seq = fromClient ? flow.clientSeq : flow.upstreamSeq;
        std::string error;
        const int fd = stream.dataFd(error);
        std::uint64_t offset = record.offset;
        std::uint64_t left = record.length;
        while (left > 0) {
            const std::size_t want = left < kMaxTcpPayload ? left : kMaxTcpPayload;
            payload_.resize(want);
            ssize_t got = -1;
            if (fd >= 0) {
                got = ::pread(fd, payload_.data(), want, static_cast<off_t>(offset));
                if (got < 0)
                    error = stream.segment().dataPath + ": " + std::strerror(errno);
                else if (static_cast<std::size_t>(got) < want)
                    error = stream.segment().dataPath + ": chunk at offset " +
                            std::to_string(record.offset) + " runs past the end of the file";
            }
            if (got <= 0 || static_cast<std::size_t>(got) < want) {
                // The bytes are gone: leave a gap in the sequence space, as a lossy capture does.
                problems_.push_back("connection " + std::to_string(record.id) + ": " +
                                    std::to_string(left) + " bytes of " +
                                    audit::directionName(record.direction) + " missing (" + error +
                                    ")");
                seq += static_cast<std::uint32_t>(left);
                return;
            }
            const std::uint8_t flags =
                tcpflag::kAck | (left == want ? tcpflag::kPsh : std::uint8_t{0});
            send(flow, fromClient, record.timeNs, flags, payload_.data(), want);
            seq += static_cast<std::uint32_t>(want);
            offset += want;
            left -= want;
            progress_.advance(want);
        }
    }

    void close(Flow& flow, std::int64_t timeNs) {
        using namespace tcpflag;
        send(flow, true, timeNs, kFin | kAck);
        ++flow.clientSeq;
        send(flow, false, timeNs, kFin | kAck);
        ++flow.upstreamSeq;
        send(flow, true, timeNs, kAck);
    }

    PcapWriter& pcap_;
    std::function<bool(std::uint64_t)> selected_;
    Progress& progress_;
    std::vector<std::string>& problems_;
    std::map<Key, Flow> flows_;  // the connections open at this point of the log
    std::vector<std::uint8_t> packet_;
    std::vector<std::uint8_t> payload_;
    bool found_ = false;
};

std::uint64_t dataBytes(const std::vector<std::vector<audit::SegmentFiles>>& workers) {
    std::uint64_t total = 0;
    for (const auto& segments : workers)
        for (const auto& files : segments) {
            struct stat st {};
            if (files.hasData && ::stat(files.dataPath.c_str(), &st) == 0)
                total += static_cast<std::uint64_t>(st.st_size);
        }
    return total;
}

}  // namespace

CaptureResult writeCapture(const std::string& dir, const std::string& path,
                           const std::function<bool(std::uint64_t)>& selected, bool requireFound) {
    CaptureResult result;
    auto onProblem = [&](const std::string& problem) { result.problems.push_back(problem); };
    auto workers = segmentsByWorker(dir);
    if (workers.empty()) throw std::runtime_error(dir + ": no audit log here (no segment index file)");
    Progress progress("export", ::isatty(STDERR_FILENO) ? dataBytes(workers) : 0, true);
    std::vector<WorkerStream> streams;
    streams.reserve(workers.size());
    for (auto& segments : workers) streams.emplace_back(dir, std::move(segments), onProblem);

    PcapWriter pcap(path);
    Exporter exporter(pcap, selected, progress, result.problems);
    // Merge the workers' logs by record time: each is in time order already.
    for (;;) {
        WorkerStream* earliest = nullptr;
        for (auto& stream : streams)
            if (!stream.done() && (!earliest || stream.record().timeNs < earliest->record().timeNs))
                earliest = &stream;
        if (!earliest) break;
        exporter.onRecord(*earliest);
        earliest->advance();
    }
    progress.clear();
    result.found = exporter.found();
    if (requireFound && !result.found) return result;  // PcapWriter removes the file it created
    pcap.finish();
    return result;
}

int reportCapture(const CaptureResult& result, const ConnectionFilter& filter, bool byMetadata,
                  const std::string& source,
                  const std::function<std::string(const std::string&)>& describe) {
    if ((filter.id || byMetadata) && !result.found) {
        std::cerr << "splicegate-audit: no connection "
                  << (filter.id ? std::to_string(*filter.id) + " " : std::string())
                  << (byMetadata ? "matching the filters " : "") << "in " << source << "\n";
        return 1;
    }
    for (const auto& problem : result.problems)
        std::cerr << "splicegate-audit: " << describe(problem) << "\n";
    return result.problems.empty() ? 0 : 1;
}

int runExport(const std::string& dir, const po::variables_map& values) {
    const std::string hint = " (see 'splicegate-audit export --help')";
    if (!values.count("pcap")) throw UsageError("missing --pcap FILE" + hint);
    const auto path = values["pcap"].as<std::string>();
    if (path.empty()) throw UsageError("--pcap: empty file name" + hint);
    if (auto archive = ArchiveLocation::parse(dir)) return exportArchive(*archive, path, values);
    const ConnectionFilter filter = ConnectionFilter::fromOptions(values);
    const bool byMetadata = filter.sinceNs || filter.untilNs || filter.route || filter.client;
    // The time, route and client filters need a connection's close record, which follows its
    // payload: a first pass over the metadata picks the connections, the second writes them.
    std::set<std::uint64_t> picked;
    if (byMetadata)
        forEachConnection(
            dir,
            [&](const audit::ConnectionSummary& c) {
                if (filter.matches(c)) picked.insert(c.id);
            },
            [](const std::string&) {});  // the second pass reports damage
    auto selected = [&](std::uint64_t id) {
        if (filter.id && id != *filter.id) return false;
        return !byMetadata || picked.count(id) != 0;
    };
    auto result = writeCapture(dir, path, selected, filter.id || byMetadata);
    return reportCapture(result, filter, byMetadata, dir,
                         [](const std::string& problem) { return problem; });
}

}  // namespace splicegate::audittool
