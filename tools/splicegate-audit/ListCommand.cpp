#include "tools/splicegate-audit/ListCommand.h"

#include <algorithm>
#include <iostream>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "archive/s3/S3Client.h"
#include "tools/splicegate-audit/ArchiveSource.h"
#include "tools/splicegate-audit/ArchiveVerify.h"

#include "common/Error.h"
#include "tools/splicegate-audit/Progress.h"
#include "audit/TextFormat.h"

namespace po = boost::program_options;

namespace splicegate::audittool {

using audit::ConnectionState;
using audit::ConnectionSummary;
using audit::Record;
using audit::RecordType;

const char* const kListUsage =
    "usage: splicegate-audit list DIR|s3://BUCKET/PREFIX [--json | --jsonl] [--since TIME]\n"
    "                             [--until TIME] [--route NAME] [--client ADDR] [--connection ID]\n"
    "                             [--s3-endpoint URL --s3-credentials-file FILE ...]\n"
    "       splicegate-audit list s3://BUCKET --all-boxes [OPTIONS]";
const char* const kListAbout =
    "One row per connection: id, route, client, upstream, opened, closed (ISO-8601 UTC),\n"
    "c2u_bytes, u2c_bytes, state (open, closed or truncated), reason. Byte counts are the\n"
    "Close record's, or the bytes recorded so far. A connection whose first segments retention\n"
    "deleted shows opened (deleted) (JSON: null), no route or addresses, and the bytes the log\n"
    "still holds. JSON adds via (the load balancer whose PROXY header named the client) and\n"
    "sni (the TLS server name that chose the route), null when none. The table is sorted by id; --json and --jsonl stream in log order: a\n"
    "connection when it closes (worker by worker), those still open at the end of their\n"
    "worker's log after it. Filters combine (all must match);\n"
    "--since/--until keep the connections that overlap the interval. A --route, --client or\n"
    "--connection that names nothing in the log is an error (exit 1), and so is a directory\n"
    "that holds no audit log. --all-boxes with s3://BUCKET: every box prefix in the bucket,\n"
    "box by box, each row (BOX column, JSON \"box\") naming its box's prefix.";

void addListOptions(po::options_description& options) {
    options.add_options()("json", "print a JSON array of objects (streamed) instead of a table")(
        "jsonl", "print one JSON object per line (streamed)")(
        "all-boxes", "with s3://BUCKET: every box prefix in the bucket, each row naming its box");
    ConnectionFilter::addOptions(options);
    addArchiveOptions(options);
}

void ConnectionFilter::addTimeOptions(po::options_description& options) {
    // clang-format off
    options.add_options()
        ("since", po::value<std::string>()->value_name("TIME"),
         "connections open at or after TIME (RFC 3339, e.g. 2024-05-01T12:00:00Z)")
        ("until", po::value<std::string>()->value_name("TIME"),
         "connections opened at or before TIME (RFC 3339)");
    // clang-format on
}

void ConnectionFilter::addOptions(po::options_description& options) {
    addTimeOptions(options);
    // clang-format off
    options.add_options()
        ("route", po::value<std::string>()->value_name("NAME"), "connections of route NAME")
        ("client", po::value<std::string>()->value_name("ADDR"),
         "connections from ADDR: an IPv4 or IPv6 address, with a port to match it too "
         "(198.51.100.1, 198.51.100.1:4000, [2001:db8::7]:5000)")
        ("connection", po::value<std::string>()->value_name("ID"), "the connection with id ID");
    // clang-format on
}

std::uint64_t parseConnectionId(const std::string& text) {
    std::uint64_t value = 0;
    bool ok = !text.empty() && text.size() <= 20;
    for (char c : text) {
        if (!ok) break;
        if (c < '0' || c > '9') {
            ok = false;
            break;
        }
        auto digit = static_cast<std::uint64_t>(c - '0');
        if (value > (UINT64_MAX - digit) / 10) ok = false;
        value = value * 10 + digit;
    }
    if (!ok)
        throw UsageError("--connection: invalid id '" + text + "' (expected a decimal number)");
    return value;
}

namespace {

std::int64_t timeOption(const po::variables_map& values, const char* name) {
    const auto& text = values[name].as<std::string>();
    bool outOfRange = false;
    auto ns = parseRfc3339(text, outOfRange);
    if (!ns && outOfRange)
        throw UsageError(std::string("--") + name + ": time '" + text +
                         "' out of range (the log's times lie between 1677-09-21 and "
                         "2262-04-11)");
    if (!ns)
        throw UsageError(std::string("--") + name + ": invalid time '" + text +
                         "' (expected RFC 3339, e.g. 2024-05-01T12:00:00Z or "
                         "2024-05-01T14:00:00.5+02:00)");
    return *ns;
}

bool validRouteName(const std::string& name) {
    return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_' || c == '-';
    });
}

}  // namespace

ConnectionFilter ConnectionFilter::fromOptions(const po::variables_map& values) {
    ConnectionFilter filter;
    if (values.count("since")) filter.sinceNs = timeOption(values, "since");
    if (values.count("until")) filter.untilNs = timeOption(values, "until");
    if (filter.sinceNs && filter.untilNs && *filter.sinceNs > *filter.untilNs)
        throw UsageError("--since " + values["since"].as<std::string>() + " is after --until " +
                         values["until"].as<std::string>());
    if (values.count("route")) {
        const auto& name = values["route"].as<std::string>();
        if (!validRouteName(name))
            throw UsageError("--route: invalid route name '" + name +
                             "' (letters, digits, '_' and '-')");
        filter.route = name;
    }
    if (values.count("client")) {
        const auto& text = values["client"].as<std::string>();
        filter.client = Endpoint::parse(text);
        if (!filter.client)
            throw UsageError("--client: invalid address '" + text +
                             "' (expected an IPv4 or IPv6 address, optionally with :PORT)");
    }
    if (values.count("connection"))
        filter.id = parseConnectionId(values["connection"].as<std::string>());
    return filter;
}

bool ConnectionFilter::matches(const ConnectionSummary& c) const {
    if (id && c.id != *id) return false;
    if (route && c.route != *route) return false;
    if (untilNs && c.openedNs > *untilNs) return false;
    if (sinceNs && c.closedNs && *c.closedNs < *sinceNs) return false;
    if (client) {
        auto endpoint = Endpoint::parse(c.client);
        if (!endpoint || !endpoint->matches(*client)) return false;
    }
    return true;
}

void forEachConnection(const std::string& dir,
                       const std::function<void(const ConnectionSummary&)>& emit,
                       const ProblemSink& onProblem) {
    auto workers = segmentsByWorker(dir);
    if (workers.empty()) throw std::runtime_error(dir + ": no audit log here (no segment index file)");
    Progress progress(
        "list: segments read",
        [&] {
            std::uint64_t total = 0;
            for (const auto& segments : workers) total += segments.size();
            return total;
        }(),
        false);
    Record record;
    std::string logProblem;
    auto heads = audit::DeletedHeads::fromDirectory(dir, logProblem);
    if (!logProblem.empty()) onProblem(logProblem);
    for (auto& segments : workers) {
        // The connections of this worker not yet closed or truncated.
        std::map<std::uint64_t, ConnectionSummary> live;
        std::set<std::uint64_t> continued;  // ids whose head was deleted, seen so far
        WorkerRecords records(dir, std::move(segments), onProblem,
                              [&](const audit::SegmentFiles& files,
                                  const std::vector<audit::RetentionLogEntry>& entries) {
                                  heads.restartWorker(files.worker, entries);
                              });
        while (records.next(record)) {
            const auto& segment = records.segment();
            if (record.type == RecordType::SegmentStart)
                heads.segmentStart(segment.worker, segment.segment, record.idFloor);
            if (audit::followsOpen(record.type) && heads.continues(segment.worker, record.id) &&
                !live.count(record.id) && continued.insert(record.id).second)
                live.emplace(record.id, ConnectionSummary::withHeadDeleted(
                                            record.id, segment.worker, segment.segment));
            switch (record.type) {
                case RecordType::Open: {
                    ConnectionSummary summary;
                    summary.id = record.id;
                    summary.worker = records.segment().worker;
                    summary.segment = records.segment().segment;
                    summary.route = record.route;
                    summary.client = record.client;
                    summary.upstream = record.upstream;
                    summary.via = record.via;
                    summary.sni = record.sni;
                    summary.openedNs = record.timeNs;
                    // A repeated Open of a live id is ignored, as `extract` follows the first.
                    live.emplace(record.id, std::move(summary));
                    break;
                }
                case RecordType::Chunk: {
                    auto it = live.find(record.id);
                    if (it == live.end()) break;
                    auto& bytes = record.direction == audit::kDirectionC2U ? it->second.c2uBytes
                                                                           : it->second.u2cBytes;
                    bytes = bytes + record.length < bytes ? UINT64_MAX : bytes + record.length;
                    break;
                }
                case RecordType::Close: {
                    auto it = live.find(record.id);
                    if (it == live.end()) break;
                    it->second.state = ConnectionState::Closed;
                    it->second.closedNs = record.timeNs;
                    it->second.reason = record.reason;
                    if (!it->second.headDeleted) {  // else its counts include deleted bytes
                        it->second.c2uBytes = record.c2uBytes;
                        it->second.u2cBytes = record.u2cBytes;
                    }
                    emit(it->second);
                    live.erase(it);
                    break;
                }
                case RecordType::Truncated: {
                    auto it = live.find(record.id);
                    if (it == live.end()) break;
                    it->second.state = ConnectionState::Truncated;
                    emit(it->second);
                    live.erase(it);
                    break;
                }
                case RecordType::SegmentStart:
                    progress.advance(1);
                    break;
                case RecordType::SegmentSealed:
                case RecordType::SegmentsDeleted:
                    break;
            }
        }
        for (const auto& [id, summary] : live) emit(summary);
    }
}

namespace {

// A connection and, with --all-boxes, the box prefix it was archived under.
struct Row {
    std::string box;
    ConnectionSummary connection;
};

void printTable(std::vector<Row> connections, bool withBox) {
    std::stable_sort(connections.begin(), connections.end(), [](const auto& a, const auto& b) {
        return std::tie(a.box, a.connection.id) < std::tie(b.box, b.connection.id);
    });
    std::vector<std::string> headers = {"ID",     "ROUTE",  "CLIENT",    "UPSTREAM",
                                        "OPENED", "CLOSED", "C2U_BYTES", "U2C_BYTES",
                                        "STATE",  "REASON"};
    std::vector<bool> rightAligned = {true,  false, false, false, false,
                                      false, true,  true,  false, false};
    if (withBox) {
        headers.insert(headers.begin(), "BOX");
        rightAligned.insert(rightAligned.begin(), false);
    }
    std::vector<std::vector<std::string>> rows;
    rows.reserve(connections.size());
    for (const auto& [box, c] : connections) {
        rows.push_back({std::to_string(c.id), cell(c.route), cell(c.client), cell(c.upstream),
                        c.headDeleted ? "(deleted)" : isoTime(c.openedNs),
                        c.closedNs ? isoTime(*c.closedNs) : "-", std::to_string(c.c2uBytes),
                        std::to_string(c.u2cBytes), connectionStateName(c.state), cell(c.reason)});
        if (withBox) rows.back().insert(rows.back().begin(), box);
    }
    std::vector<std::size_t> widths;
    for (const auto& header : headers) widths.push_back(header.size());
    for (const auto& row : rows)
        for (std::size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], width(row[i]));
    auto print = [&](const std::vector<std::string>& row) {
        std::string line;
        for (std::size_t i = 0; i < row.size(); ++i) {
            std::string pad(widths[i] - width(row[i]), ' ');
            bool lastColumn = i + 1 == row.size();
            if (rightAligned[i]) {
                line += pad + row[i];
            } else {
                line += row[i];
                if (!lastColumn) line += pad;
            }
            if (!lastColumn) line += "  ";
        }
        line += '\n';
        std::cout << line;
    };
    print(headers);
    for (const auto& row : rows) print(row);
}

// `box`: with --all-boxes, the box prefix, the object's first key.
std::string jsonObject(const ConnectionSummary& c, const std::string* box) {
    return std::string(box ? "{\"box\": " + jsonString(*box) + ", " : "{") +
           "\"id\": " + std::to_string(c.id) + ", \"route\": " + jsonString(c.route) +
           ", \"client\": " + jsonString(c.client) +
           ", \"via\": " + (c.via.empty() ? "null" : jsonString(c.via)) +
           ", \"sni\": " + (c.sni.empty() ? "null" : jsonString(c.sni)) +
           ", \"upstream\": " + jsonString(c.upstream) +
           ", \"opened\": " + (c.headDeleted ? "null" : jsonString(isoTime(c.openedNs))) +
           ", \"closed\": " + (c.closedNs ? jsonString(isoTime(*c.closedNs)) : "null") +
           ", \"c2u_bytes\": " + std::to_string(c.c2uBytes) +
           ", \"u2c_bytes\": " + std::to_string(c.u2cBytes) +
           ", \"state\": " + jsonString(audit::connectionStateName(c.state)) +
           ", \"reason\": " + (c.closedNs ? jsonString(c.reason) : "null") + "}";
}

}  // namespace

int runList(const std::string& dir, const po::variables_map& values) {
    const bool json = values.count("json") != 0;
    const bool jsonLines = values.count("jsonl") != 0;
    if (json && jsonLines) throw UsageError("--json and --jsonl exclude each other");
    const ConnectionFilter filter = ConnectionFilter::fromOptions(values);

    std::vector<std::string> problems;
    std::vector<Row> rows;  // the table's
    bool routeSeen = false, idSeen = false, clientSeen = false;
    std::uint64_t printed = 0;
    if (json) std::cout << "[";
    const auto archive = ArchiveLocation::parse(dir);
    const bool allBoxes = values.count("all-boxes") != 0;
    if (allBoxes && (!archive || !archive->prefix.empty()))
        throw UsageError("--all-boxes takes s3://BUCKET, without a prefix "
                         "(see 'splicegate-audit list --help')");
    std::string box;  // with --all-boxes, the one being listed
    auto source = [&](const std::function<void(const ConnectionSummary&)>& emit,
                      const ProblemSink& onProblem) {
        if (allBoxes) {
            auto boxes = listBoxes(*openArchive(values), archive->bucket);
            if (boxes.empty())
                throw std::runtime_error(dir + ": no archive there (no PREFIX/segments/ or "
                                               "PREFIX/manifests/ objects)");
            for (const auto& each : boxes) {
                box = each;
                forEachArchivedConnection({archive->bucket, each}, values, emit, onProblem);
            }
        } else if (archive) {
            forEachArchivedConnection(*archive, values, emit, onProblem);
        } else {
            forEachConnection(dir, emit, onProblem);
        }
    };
    source(
        [&](const ConnectionSummary& c) {
            routeSeen = routeSeen || (filter.route && c.route == *filter.route);
            idSeen = idSeen || (filter.id && c.id == *filter.id);
            if (filter.client && !clientSeen) {
                auto endpoint = Endpoint::parse(c.client);
                clientSeen = endpoint && endpoint->matches(*filter.client);
            }
            if (!filter.matches(c)) return;
            const std::string* label = allBoxes ? &box : nullptr;
            if (json)
                std::cout << (printed == 0 ? "\n  " : ",\n  ") << jsonObject(c, label);
            else if (jsonLines)
                std::cout << jsonObject(c, label) << "\n";
            else
                rows.push_back({box, c});
            ++printed;
        },
        [&](const std::string& problem) { problems.push_back(problem); });
    if (json) std::cout << (printed == 0 ? "]\n" : "\n]\n");
    if (!json && !jsonLines) printTable(std::move(rows), allBoxes);
    std::cout.flush();
    if (filter.route && !routeSeen)
        problems.push_back("no connection of route '" + *filter.route + "' in " + dir);
    if (filter.id && !idSeen)
        problems.push_back("no connection " + std::to_string(*filter.id) + " in " + dir);
    if (filter.client && !clientSeen)
        problems.push_back("no connection from client " + values["client"].as<std::string>() +
                           " in " + dir);
    for (const auto& problem : problems) std::cerr << "splicegate-audit: " << problem << "\n";
    return problems.empty() ? 0 : 1;
}

}  // namespace splicegate::audittool
