#pragma once
// `splicegate-audit export DIR --pcap FILE [--connection ID]`: the audited connections as the
// capture `tcpdump -w` would have taken of a direct client-upstream conversation, synthesized
// from the log: per connection a three-way handshake at its Open time, its chunks in log order as
// data segments at their chunk times (c2u from the client's address and port to the upstream's,
// u2c back), and FIN/FIN/ACK at its Close time. A truncated connection just stops, as a capture
// would. Sequence numbers run on without gaps except where damage lost bytes (a "previous
// segment not captured" in Wireshark, and a problem line here).
// Choices: segments carry up to kMaxTcpPayload (65,000) bytes, not an MSS-like 1448: the capture
// a gateway with TSO/GRO records looks like that too, the file stays about the payload's size
// (56 or 76 bytes of headers per 65,000), and every IP length field stays valid. Workers' logs
// are merged by record time, so the capture is in time order. A connection whose client and
// upstream differ in family is written as IPv6, the IPv4 side mapped (::ffff:a.b.c.d).
// Thread affinity: none. Error contract: UsageError on bad options (exit 2); std::system_error
// on unreadable input or unwritable output (exit 1, no capture file left); damage is reported as
// problems (exit 1, the capture holds what could be read).
#include <boost/program_options.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tools/splicegate-audit/ListCommand.h"

namespace splicegate::audittool {

extern const char* const kExportUsage;
extern const char* const kExportAbout;
void addExportOptions(boost::program_options::options_description& options);
int runExport(const std::string& dir, const boost::program_options::variables_map& values);

struct CaptureResult {
    bool found = false;  // a selected connection's Open was read
    std::vector<std::string> problems;
};
// The capture of the connections `selected` picks from the audit directory `dir`, into `path`.
// With `requireFound`, no file is left when none was found.
CaptureResult writeCapture(const std::string& dir, const std::string& path,
                           const std::function<bool(std::uint64_t)>& selected, bool requireFound);
// Prints what writeCapture found wrong (each problem through `describe`), or that nothing
// matched the filters in `source`; returns the exit status.
int reportCapture(const CaptureResult& result, const ConnectionFilter& filter, bool byMetadata,
                  const std::string& source,
                  const std::function<std::string(const std::string&)>& describe);

}  // namespace splicegate::audittool
