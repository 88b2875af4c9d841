#include "archive/ArchiveOptions.h"

#include <sys/stat.h>

#include <boost/program_options.hpp>
#include <fstream>
#include <sstream>

#include "archive/ObjectKeys.h"
#include "common/Error.h"

namespace po = boost::program_options;

namespace splicegate::archive {
namespace {

po::options_description describe(ArchiveOptions& o, const std::string& defaultPrefix) {
    po::options_description all("splicegate-archive options");
    // clang-format off
    all.add_options()
        ("help,h", "print this help and exit")
        ("version", "print the version and exit")
        ("config", po::value<std::string>(), "configuration file (default /etc/splicegate/archive.conf when it exists)")
        ("audit-dir", po::value(&o.auditDir), "the relay's audit directory (--audit-dir of splicegate)")
        ("state-dir", po::value(&o.stateDir)->default_value(o.stateDir), "extension: where each segment's upload state is kept (not in the audit directory)")
        ("s3-endpoint", po::value(&o.client.endpoint), "the S3 endpoint, http(s)://HOST[:PORT] (path-style requests)")
        ("s3-region", po::value(&o.client.region)->default_value(o.client.region), "the region requests are signed for")
        ("s3-bucket", po::value(&o.bucket), "a versioned bucket with Object Lock")
        ("s3-prefix", po::value(&o.archive.prefix)->default_value(defaultPrefix), "key prefix of this box (default: the host name)")
        ("s3-credentials-file", po::value(&o.credentialsFile), "AWS shared-credentials file ([default] aws_access_key_id, aws_secret_access_key; mode 0600 or 0400); without it AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
        ("s3-ca-file", po::value(&o.client.caFile), "extension: PEM bundle the server's certificate is verified with (default: the system's)")
        ("s3-payload-hash", po::value(&o.payloadHash)->default_value(o.payloadHash), "extension: crc32c (UNSIGNED-PAYLOAD; the signed x-amz-checksum-crc32c header carries the body's integrity) or sha256 (each body's SHA-256 signed: a second read of every byte, for plain http across a network you do not trust)")
        ("s3-part-mb", po::value(&o.partMb)->default_value(o.partMb), "extension: objects larger than this many MiB go up as a multipart upload in parts of this size (5..5120, S3's part limits); 0 = always one PUT")
        ("lock-days", po::value(&o.archive.lockDays)->default_value(o.archive.lockDays), "COMPLIANCE retention of every object, in days (1..36500)")
        ("parallel", po::value(&o.parallel)->default_value(o.parallel), "segments shipped at once (1..64)")
        ("max-rate-mbps", po::value(&o.client.maxRateMbps)->default_value(0, "0"), "cap on the upload rate, megabits per second; 0 = none")
        ("once", po::bool_switch(&o.once), "ship what is sealed, then exit (1 if anything failed)")
        ("scan-interval-ms", po::value(&o.scanIntervalMs)->default_value(o.scanIntervalMs), "extension: pause between passes over the audit directory (100..3600000)")
        ("metrics-listen", po::value(&o.metricsListen), "ADDR:PORT of the Prometheus endpoint (/metrics); default none")
        ("log-level", po::value(&o.logLevel)->default_value(o.logLevel), "debug, info, warn or error");
    // clang-format on
    return all;
}

void require(bool ok, const std::string& message) {
    if (!ok) throw UsageError(message);
}

void check(const ArchiveOptions& o) {
    require(!o.auditDir.empty(), "--audit-dir is required");
    require(!o.client.endpoint.empty(), "--s3-endpoint is required");
    require(o.client.endpoint.starts_with("http://") || o.client.endpoint.starts_with("https://"),
            "--s3-endpoint '" + o.client.endpoint + "': must start with http:// or https://");
    require(!o.bucket.empty(), "--s3-bucket is required");
    require(o.bucket.find_first_of("/ ") == std::string::npos,
            "--s3-bucket '" + o.bucket + "': a bucket name has no '/' or space");
    auto problem = checkPrefix(o.archive.prefix);
    require(problem.empty(), "--s3-prefix '" + o.archive.prefix + "' " + problem);
    require(o.payloadHash == "crc32c" || o.payloadHash == "sha256",
            "--s3-payload-hash '" + o.payloadHash + "': must be crc32c or sha256");
    require(o.archive.lockDays >= 1 && o.archive.lockDays <= 36500,
            "--lock-days " + std::to_string(o.archive.lockDays) + ": must be 1..36500");
    require(o.partMb == 0 || (o.partMb >= 5 && o.partMb <= 5120),
            "--s3-part-mb " + std::to_string(o.partMb) +
                ": must be 0 (one PUT per object) or 5..5120 (S3's parts are 5 MiB to 5 GiB)");
    require(o.parallel >= 1 && o.parallel <= 64,
            "--parallel " + std::to_string(o.parallel) + ": must be 1..64");
    require(o.client.maxRateMbps >= 0, "--max-rate-mbps: must not be negative");
    require(o.scanIntervalMs >= 100 && o.scanIntervalMs <= 3600000,
            "--scan-interval-ms " + std::to_string(o.scanIntervalMs) + ": must be 100..3600000");
}

}  // namespace

ArchiveOptions parseArchiveOptions(const std::vector<std::string>& args,
                                   const std::string& defaultPrefix,
                                   const std::string& configPath) {
    ArchiveOptions o;
    auto all = describe(o, defaultPrefix);
    po::variables_map values;
    try {
        po::store(po::command_line_parser(args).options(all).run(), values);
        std::string config = configPath;
        bool explicitConfig = values.count("config") > 0;
        if (explicitConfig) config = values["config"].as<std::string>();
        struct stat status {};
        if (explicitConfig || ::stat(config.c_str(), &status) == 0) {
            std::ifstream in(config);
            require(in.good(), "--config " + config + ": cannot be read");
            po::store(po::parse_config_file(in, all), values);
        }
        po::notify(values);
    } catch (const po::error& e) {
        throw UsageError(e.what());
    }
    o.help = values.count("help") > 0;
    o.version = values.count("version") > 0;
    std::ostringstream text;
    text << "usage: splicegate-archive --audit-dir DIR --s3-endpoint URL --s3-bucket NAME "
            "[OPTIONS]\nShips sealed audit segments to an S3 bucket with Object Lock.\n\n"
         << all;
    o.helpText = text.str();
    if (!o.help && !o.version) check(o);
    o.archive.unsignedPayload = o.payloadHash == "crc32c";
    o.archive.partBytes = std::uint64_t{o.partMb} << 20;
    return o;
}

}  // namespace splicegate::archive
