#pragma once
// `splicegate-audit list DIR [--json | --jsonl] [--since TIME] [--until TIME] [--route NAME]
// [--client ADDR] [--connection ID]`: one row, JSON array element or JSON line per connection.
// --json and --jsonl stream: a connection is printed when its Close or Truncated record is read,
// the connections still open at the end of a worker's log after it (by id), so memory holds only
// the connections open at one point of the log, never the whole list. The table sorts by id (it
// needs every row for its column widths).
// Thread affinity: none. Error contract: bad options throw UsageError (exit 2); unreadable
// directories throw std::system_error (exit 1); damage is printed as problems (exit 1).
#include <boost/program_options.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "audit/AuditReader.h"
#include "tools/splicegate-audit/Endpoint.h"
#include "tools/splicegate-audit/WorkerRecords.h"

namespace splicegate::audittool {

// A connection is kept when it matches every filter given. Time: it overlaps [since, until],
// i.e. it closed at or after `since` (or has not closed) and opened at or before `until`.
struct ConnectionFilter {
    std::optional<std::int64_t> sinceNs;
    std::optional<std::int64_t> untilNs;
    std::optional<std::string> route;
    std::optional<Endpoint> client;  // address, and port when given
    std::optional<std::uint64_t> id;

    bool matches(const audit::ConnectionSummary& connection) const;
    // Throws UsageError naming the option and the bad value.
    static ConnectionFilter fromOptions(const boost::program_options::variables_map& values);
    // The options fromOptions() reads (--since, --until, --route, --client, --connection), for
    // every command that filters connections.
    static void addOptions(boost::program_options::options_description& options);
    // --since and --until alone: extract's time hint on s3://.
    static void addTimeOptions(boost::program_options::options_description& options);
};

// Calls `emit` once per connection of `dir` in the order described above; damage goes to
// `onProblem` ("FILE:OFFSET: what"). Throws std::system_error when `dir` cannot be read.
void forEachConnection(const std::string& dir,
                       const std::function<void(const audit::ConnectionSummary&)>& emit,
                       const ProblemSink& onProblem);

extern const char* const kListUsage;
extern const char* const kListAbout;
void addListOptions(boost::program_options::options_description& options);
// The command after option parsing; returns the exit status.
int runList(const std::string& dir, const boost::program_options::variables_map& values);

// "--connection ID": a decimal connection id; throws UsageError otherwise.
std::uint64_t parseConnectionId(const std::string& text);

}  // namespace splicegate::audittool
