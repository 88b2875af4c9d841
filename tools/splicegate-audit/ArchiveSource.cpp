#include "tools/splicegate-audit/ArchiveSource.h"

#include <google/protobuf/util/json_util.h>

#include <stdexcept>
#include <string_view>
#include <utility>

#include "archive/Gzip.h"
#include "archive/s3/S3Client.h"
#include "common/Error.h"
#include "tools/splicegate-audit/ArchiveCatalog.h"
#include "tools/splicegate-audit/ListCommand.h"
#include "splicegate/archive_index.pb.h"

namespace splicegate::audittool {
namespace po = boost::program_options;
namespace {

constexpr std::string_view kScheme = "s3://";
// A connections object holds a few hundred bytes per connection; far past any segment's.
constexpr std::size_t kMaxConnectionsText = std::size_t{1} << 30;

std::string text(const po::variables_map& values, const char* name) {
    return values.count(name) ? values[name].as<std::string>() : std::string();
}

}  // namespace

std::string gunzipObject(const std::string& bytes, const std::string& origin) {
    return archive::gunzip(bytes, origin, kMaxConnectionsText);
}

namespace {

audit::ConnectionState stateFromName(const std::string& name, bool& known) {
    known = true;
    if (name == "open") return audit::ConnectionState::Open;
    if (name == "closed") return audit::ConnectionState::Closed;
    if (name == "truncated") return audit::ConnectionState::Truncated;
    known = false;
    return audit::ConnectionState::Open;
}

}  // namespace

void mergeConnectionLine(const archive::ArchivedConnection& line,
                         std::map<std::uint64_t, audit::ConnectionSummary>& connections) {
    bool known = false;
    const auto state = stateFromName(line.state(), known);
    auto [it, first] = connections.try_emplace(line.id());
    auto& c = it->second;
    if (first) {
        c.id = line.id();
        c.worker = line.worker();
        c.segment = line.segment();
        c.route = line.route();
        c.client = line.client();
        c.upstream = line.upstream();
        c.via = line.via();
        c.sni = line.sni();
        c.openedNs = line.opened_ns();
        // No Open in the oldest archived segment: its head is not in the bucket.
        c.headDeleted = !line.has_opened_ns();
    }
    c.c2uBytes += line.c2u_bytes();
    c.u2cBytes += line.u2c_bytes();
    c.state = state;
    if (line.has_closed_ns()) c.closedNs = line.closed_ns();
    if (line.has_reason()) c.reason = line.reason();
}

std::optional<ArchiveLocation> ArchiveLocation::parse(const std::string& text) {
    if (!text.starts_with(kScheme)) return std::nullopt;
    std::string_view rest = std::string_view(text).substr(kScheme.size());
    auto slash = rest.find('/');
    ArchiveLocation location;
    location.bucket = std::string(rest.substr(0, slash));
    if (slash != std::string_view::npos) location.prefix = std::string(rest.substr(slash + 1));
    while (!location.prefix.empty() && location.prefix.back() == '/') location.prefix.pop_back();
    if (location.bucket.empty())
        throw UsageError(text + ": no bucket (expected s3://BUCKET/PREFIX)");
    return location;
}

void addArchiveOptions(po::options_description& options) {
    // clang-format off
    options.add_options()
        ("s3-endpoint", po::value<std::string>()->value_name("URL"),
         "with s3://BUCKET/PREFIX: the S3 endpoint (http:// or https://, path-style requests)")
        ("s3-region", po::value<std::string>()->value_name("R")->default_value("us-east-1"),
         "with s3://: the region requests are signed for")
        ("s3-credentials-file", po::value<std::string>()->value_name("FILE"),
         "with s3://: AWS shared-credentials file ([default] profile, mode 0600 or 0400); "
         "default: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
        ("s3-ca-file", po::value<std::string>()->value_name("FILE"),
         "with s3:// over https: PEM bundle to verify the server with; default: the system's");
    // clang-format on
}

std::vector<archive::ArchivedConnection> parseConnectionLines(const std::string& text,
                                                              const std::string& origin,
                                                              const ProblemSink& onProblem) {
    google::protobuf::util::JsonParseOptions options;
    options.ignore_unknown_fields = true;  // a newer archiver's extra fields
    std::vector<archive::ArchivedConnection> lines;
    std::size_t lineNumber = 0;
    std::string_view rest = text;
    while (!rest.empty()) {
        auto end = rest.find('\n');
        auto line = rest.substr(0, end);
        rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
        ++lineNumber;
        if (line.empty()) continue;
        archive::ArchivedConnection parsed;
        auto status = google::protobuf::util::JsonStringToMessage(
            google::protobuf::StringPiece(line.data(), line.size()), &parsed, options);
        bool known = false;
        stateFromName(parsed.state(), known);
        if (!status.ok() || !known) {
            onProblem(origin + ":" + std::to_string(lineNumber) + ": " +
                      (status.ok() ? "unknown state '" + parsed.state() + "'"
                                   : std::string(status.message())));
            continue;
        }
        lines.push_back(std::move(parsed));
    }
    return lines;
}

void mergeConnectionLines(const std::string& text, const std::string& origin,
                          std::map<std::uint64_t, audit::ConnectionSummary>& connections,
                          const ProblemSink& onProblem) {
    for (const auto& line : parseConnectionLines(text, origin, onProblem))
        mergeConnectionLine(line, connections);
}

std::unique_ptr<s3::S3Client> openArchive(const po::variables_map& values) {
    s3::ClientOptions client;
    client.endpoint = text(values, "s3-endpoint");
    if (client.endpoint.empty()) throw UsageError("s3://: --s3-endpoint is required");
    client.region = text(values, "s3-region");
    client.caFile = text(values, "s3-ca-file");
    client.retries = 2;  // someone is waiting at the terminal
    s3::Credentials credentials;
    try {
        credentials = s3::loadCredentials(text(values, "s3-credentials-file"));
    } catch (const std::exception& error) {
        throw UsageError(error.what());
    }
    try {
        return std::make_unique<s3::S3Client>(client, credentials);
    } catch (const std::invalid_argument& error) {
        throw UsageError(std::string("--s3-endpoint: ") + error.what());
    }
}

void forEachArchivedConnection(const ArchiveLocation& location, const po::variables_map& values,
                               const std::function<void(const audit::ConnectionSummary&)>& emit,
                               const ProblemSink& onProblem) {
    const auto filter = ConnectionFilter::fromOptions(values);
    auto s3 = openArchive(values);
    ArchiveCatalog catalog(*s3, location);
    auto lines = readArchivedLines(catalog, filter.sinceNs, filter.untilNs, onProblem);
    for (const auto& [id, connection] : mergeArchivedLines(lines)) emit(connection);
}

}  // namespace splicegate::audittool
