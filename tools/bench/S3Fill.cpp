// splicegate-bench-s3-fill: fills a bucket with the archive of many simulated boxes, for
// tools/bench/archive-list.sh, from the objects splicegate-archive wrote for one real box:
// every segment under --from is put again under BOX01..BOXnn (--boxes) once per hour of one
// day (--hours, from --day 00:00 UTC), keyed as the archiver keys them (docs/archive.md), its
// segment number shifted by 1000 per hour. The data, index and manifest objects are copied as
// they are; in the connections object each line's id is shifted by 1,000,000 per hour and its
// times by the hour's offset from the source segment's own, so every copy holds connections of
// its own. --payload-boxes N: only the first N boxes get the data and index objects (a list
// reads neither).
//   splicegate-bench-s3-fill --endpoint URL --credentials FILE --bucket NAME --from PREFIX
//                            [--boxes 20] [--hours 24] [--day 2026-01-01] [--parallel 8]
//                            [--payload-boxes N]
// Exit status: 0 filled, 1 the server refused or an object did not parse, 2 usage error.
#include <google/protobuf/util/json_util.h>
#include <time.h>

#include <atomic>
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <limits>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "archive/Gzip.h"
#include "archive/ObjectKeys.h"
#include "archive/s3/S3Client.h"
#include "splicegate/archive_index.pb.h"

namespace po = boost::program_options;
using namespace splicegate;

namespace {

constexpr std::int64_t kNsPerSecond = 1'000'000'000;
constexpr std::int64_t kNsPerHour = 3600 * kNsPerSecond;

struct SourceSegment {
    archive::SegmentId id;
    std::string data, index, connectionsText;  // connectionsText gunzipped
    std::string manifest;
};

// The connections lines with ids and times moved as the header says.
std::string shiftedLines(const std::string& text, std::uint64_t idShift, std::int64_t timeShift,
                         std::uint64_t segment) {
    std::string out;
    google::protobuf::util::JsonPrintOptions options;
    options.preserve_proto_field_names = true;  // the archiver's key names
    std::size_t start = 0;
    while (start < text.size()) {
        auto end = text.find('\n', start);
        if (end == std::string::npos) end = text.size();
        archive::ArchivedConnection line;
        if (!google::protobuf::util::JsonStringToMessage(text.substr(start, end - start), &line).ok())
            throw std::runtime_error("a connections line does not parse");
        start = end + 1;
        line.set_id(line.id() + idShift);
        line.set_segment(segment);
        if (line.has_opened_ns()) line.set_opened_ns(line.opened_ns() + timeShift);
        if (line.has_closed_ns()) line.set_closed_ns(line.closed_ns() + timeShift);
        std::string json;
        if (!google::protobuf::util::MessageToJsonString(line, &json, options).ok())
            throw std::runtime_error("cannot print a connections line");
        out += json + "\n";
    }
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    std::string endpoint, credentials, bucket, from, day = "2026-01-01";
    unsigned boxes = 20, hours = 24, parallel = 8, payloadBoxes = 99;
    po::options_description options("options");
    options.add_options()("endpoint", po::value(&endpoint)->required(), "http(s)://HOST:PORT")(
        "credentials", po::value(&credentials)->required(), "AWS shared-credentials file")(
        "bucket", po::value(&bucket)->required(), "the bucket")(
        "from", po::value(&from)->required(), "prefix of the real box's archive")(
        "boxes", po::value(&boxes)->default_value(20), "simulated boxes: prefixes box01...")(
        "hours", po::value(&hours)->default_value(24), "hours of the day filled, 1 to 24")(
        "day", po::value(&day)->default_value(day), "the day, YYYY-MM-DD (UTC)")(
        "parallel", po::value(&parallel)->default_value(8), "PUTs at once")(
        "payload-boxes", po::value(&payloadBoxes)->default_value(99),
        "only the first N boxes get data and index objects (list reads neither; radosgw's "
        "memstore holds everything in RAM)");
    std::int64_t dayNs = 0;
    try {
        po::variables_map values;
        po::store(po::parse_command_line(argc, argv, options), values);
        po::notify(values);
        std::tm t{};
        if (::strptime(day.c_str(), "%Y-%m-%d", &t) == nullptr)
            throw po::error("--day: expected YYYY-MM-DD");
        dayNs = static_cast<std::int64_t>(::timegm(&t)) * kNsPerSecond;
        if (boxes < 1 || boxes > 99 || hours < 1 || hours > 24 || parallel < 1 || parallel > 64)
            throw po::error("--boxes 1..99, --hours 1..24, --parallel 1..64");
    } catch (const po::error& e) {
        std::cerr << "splicegate-bench-s3-fill: " << e.what() << "\n";
        return 2;
    }
    try {
        s3::ClientOptions client;
        client.endpoint = endpoint;
        s3::S3Client s3(client, s3::loadCredentials(credentials));
        auto listed = s3.list(bucket, from + "/segments/");
        if (!listed) throw std::runtime_error(listed.error.message);
        std::map<std::pair<unsigned, std::uint64_t>, SourceSegment> segments;
        auto fetch = [&](const std::string& key) {
            auto object = s3.get(bucket, key);
            if (!object) throw std::runtime_error(object.error.message);
            return std::move(*object);
        };
        for (const auto& entry : *listed) {
            auto parsed = archive::parseObjectKey(from, entry.key);
            if (!parsed) continue;
            auto& segment = segments[{parsed->id.worker, parsed->id.segment}];
            segment.id = parsed->id;
            if (parsed->kind == archive::ObjectKind::Data) segment.data = fetch(entry.key);
            if (parsed->kind == archive::ObjectKind::Index) segment.index = fetch(entry.key);
            if (parsed->kind == archive::ObjectKind::Connections)
                // The archiver's own objects: no size bound needed.
                segment.connectionsText =
                    archive::gunzip(fetch(entry.key), entry.key, std::numeric_limits<std::size_t>::max());
        }
        if (segments.empty()) throw std::runtime_error("no segment under " + from + "/segments/");
        for (auto& [name, segment] : segments)
            segment.manifest = fetch(archive::manifestKey(from, segment.id));

        // The data, index and manifest bodies point into `segments`; only the connections
        // objects are new, one per copy.
        std::vector<s3::PutRequest> puts;
        std::vector<std::unique_ptr<std::string>> connections;
        for (unsigned box = 1; box <= boxes; ++box) {
            char prefix[16];
            std::snprintf(prefix, sizeof prefix, "box%02u", box);
            for (unsigned hour = 0; hour < hours; ++hour)
                for (const auto& [name, segment] : segments) {
                    archive::SegmentId id = segment.id;
                    id.segment += 1000u * hour;
                    id.createdNs = dayNs + hour * kNsPerHour + segment.id.createdNs % kNsPerHour;
                    const std::int64_t shift = id.createdNs - segment.id.createdNs;
                    auto add = [&](std::string key, std::string_view body, const char* type,
                                   const char* encoding) {
                        s3::PutRequest put;
                        put.bucket = bucket;
                        put.key = std::move(key);
                        put.body = body;
                        put.contentType = type;
                        put.contentEncoding = encoding;
                        puts.push_back(std::move(put));
                    };
                    if (box <= payloadBoxes) {
                        add(archive::objectKey(prefix, id, archive::ObjectKind::Data),
                            segment.data, "application/octet-stream", "");
                        add(archive::objectKey(prefix, id, archive::ObjectKind::Index),
                            segment.index, "application/octet-stream", "");
                    }
                    connections.push_back(std::make_unique<std::string>(archive::gzip(shiftedLines(
                        segment.connectionsText, 1'000'000ull * hour, shift, id.segment))));
                    add(archive::objectKey(prefix, id, archive::ObjectKind::Connections),
                        *connections.back(), "application/x-ndjson", "gzip");
                    add(archive::manifestKey(prefix, id), segment.manifest, "application/json", "");
                }
        }
        std::atomic<std::size_t> next{0};
        std::mutex failure;
        std::string failed;
        std::vector<std::thread> threads;
        for (unsigned t = 0; t < parallel; ++t)
            threads.emplace_back([&] {
                for (auto i = next++; i < puts.size(); i = next++) {
                    auto done = s3.put(puts[i]);
                    if (!done) {
                        std::lock_guard lock(failure);
                        if (failed.empty()) failed = done.error.message;
                        next = puts.size();
                    }
                }
            });
        for (auto& thread : threads) thread.join();
        if (!failed.empty()) throw std::runtime_error(failed);
        std::cout << puts.size() << " objects put: " << boxes << " boxes x " << hours << " hours x "
                  << segments.size() << " segments\n";
    } catch (const std::exception& e) {
        std::cerr << "splicegate-bench-s3-fill: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
