#pragma once
// `splicegate-audit verify`:
//   verify DIR [--key-file FILE] [--expect-head DIGEST]... [--archive s3://BUCKET/PREFIX]
//   verify s3://BUCKET/PREFIX [--key-file FILE] [--expect-head DIGEST]...
//   verify s3://BUCKET --all-boxes [--key-file FILE]
// A directory is checked by the local verifier (audit/AuditReader.h); an archive's segments are
// fetched and checked by the same verifier, with the bucket's own checks (ArchiveVerify.h);
// --archive also compares the directory's chains with the archive's manifests (the off-box
// anchor). Exit status: 0 consistent, 1 problems found or a runtime failure, 2 usage error.
// Thread affinity: none. Error contract: bad options throw UsageError; an unreadable directory
// or bucket throws std::system_error / std::runtime_error; problems are printed, one a line.
#include <boost/program_options.hpp>
#include <string>

namespace splicegate::audittool {

extern const char* const kVerifyUsage;
extern const char* const kVerifyAbout;
void addVerifyOptions(boost::program_options::options_description& options);
// The command after option parsing; returns the exit status.
int runVerify(const std::string& dir, const boost::program_options::variables_map& values);

}  // namespace splicegate::audittool
