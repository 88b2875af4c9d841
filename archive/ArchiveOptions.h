#pragma once
// splicegate-archive's options (Boost.Program_options), from the command line and from the
// configuration file (`--config`, default /etc/splicegate/archive.conf when it exists; the
// command line wins). See docs/archive.md.
// Error contract: parseArchiveOptions throws UsageError with one line naming the option.
#include <string>
#include <vector>

#include "archive/Archiver.h"
#include "archive/s3/S3Client.h"

namespace splicegate::archive {

struct ArchiveOptions {
    std::string auditDir;
    std::string stateDir = "/var/lib/splicegate-archive";
    std::string bucket;
    std::string credentialsFile;
    s3::ClientOptions client;
    ArchiveSettings archive;
    unsigned parallel = 2;
    unsigned partMb = 64;  // --s3-part-mb
    bool once = false;
    unsigned scanIntervalMs = 5000;
    std::string payloadHash = "crc32c";  // --s3-payload-hash: crc32c or sha256
    std::string metricsListen;
    std::string logLevel = "info";
    bool help = false;
    bool version = false;
    std::string helpText;
};

// `defaultPrefix`: the host name. Reads `configPath` when no --config is given and it exists.
ArchiveOptions parseArchiveOptions(const std::vector<std::string>& args,
                                   const std::string& defaultPrefix,
                                   const std::string& configPath = "/etc/splicegate/archive.conf");

}  // namespace splicegate::archive
