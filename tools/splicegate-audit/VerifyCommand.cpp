#include "tools/splicegate-audit/VerifyCommand.h"

#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <vector>

#include "archive/s3/S3Client.h"
#include "audit/AuditReader.h"
#include "audit/SealChain.h"
#include "common/Error.h"
#include "tools/splicegate-audit/ArchiveSource.h"
#include "tools/splicegate-audit/ArchiveVerify.h"

namespace splicegate::audittool {
namespace po = boost::program_options;
using namespace splicegate::audit;

const char* const kVerifyUsage =
    "usage: splicegate-audit verify DIR|s3://BUCKET/PREFIX [--key-file FILE]\n"
    "                               [--expect-head DIGEST]... [--archive s3://BUCKET/PREFIX]\n"
    "       splicegate-audit verify s3://BUCKET --all-boxes [--key-file FILE]\n"
    "                               [--s3-endpoint URL --s3-credentials-file FILE ...]";

const char* const kVerifyAbout =
    "Checks every record (magic, length, CRC), that every segment starts with\n"
    "SegmentStart, that chunks lie inside their data file without overlapping, follow\n"
    "their connection's Open, and add up to its Close byte counts; every payload\n"
    "against its CRC-32C; and the hash chain of the segments' seals (HMAC-SHA256 with\n"
    "--key-file, the daemon's --audit-hmac-key-file: then every segment must be sealed\n"
    "with that key). Exit 0 when all is consistent, printing each worker's newest seal\n"
    "(worker W head FILE digest=HEX), else 1 with one line per problem:\n"
    "FILE:OFFSET: what is wrong. A keyed log without --key-file is checked except for\n"
    "its seals' digests, and says so; segments of a running daemon not checked to their\n"
    "end are named, one line each.\n"
    "s3://BUCKET/PREFIX: the archive splicegate-archive wrote, fetched one segment at a\n"
    "time into a temporary directory ($TMPDIR, room for one segment) and checked the same\n"
    "way, and the bucket's own\n"
    "layout: every key with exactly one version (versions of the same size and ETag, an\n"
    "archiver's restart, are named, not a problem), no segment number missing between two\n"
    "present ones, one copy and one manifest per segment, and each manifest naming the\n"
    "versions, sizes, CRC-32C and seal of its segment's objects. --all-boxes with\n"
    "s3://BUCKET: every box prefix in the bucket, one chain per box and worker.\n"
    "--archive s3://BUCKET/PREFIX with DIR: the off-box anchor. Every segment the\n"
    "archive's manifests name must be in DIR with the same seal, or recorded as deleted\n"
    "in DIR's retention.log; a worker whose log ends before the archive's newest segment\n"
    "had its tail deleted, a segment with another seal was rewritten (exit 1, naming\n"
    "the worker and segment).";

void addVerifyOptions(po::options_description& options) {
    // clang-format off
    options.add_options()
        ("key-file", po::value<std::string>()->value_name("FILE"),
         "the key the log was sealed with (--audit-hmac-key-file)")
        ("expect-head", po::value<std::vector<std::string>>()->value_name("DIGEST"),
         "a seal digest (64 hex digits, as the daemon logs it: audit seal FILE digest=HEX)\n"
         "that some worker's chain must still contain; repeatable")
        ("archive", po::value<std::string>()->value_name("s3://BUCKET/PREFIX"),
         "with DIR: the box's archive; every segment it holds must be in DIR with the same\n"
         "seal, or deleted by retention there")
        ("all-boxes", "with s3://BUCKET: every box prefix in the bucket");
    // clang-format on
    addArchiveOptions(options);
}

namespace {

constexpr const char* kProgram = "splicegate-audit";

// A --expect-head DIGEST: the 64 hex digits of a seal's digest, either case.
Digest parseDigest(const std::string& text) {
    Digest digest{};
    auto nibble = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
    };
    bool ok = text.size() == 2 * digest.size();
    for (std::size_t i = 0; ok && i < digest.size(); ++i) {
        int high = nibble(text[2 * i]), low = nibble(text[2 * i + 1]);
        ok = high >= 0 && low >= 0;
        if (ok) digest[i] = static_cast<std::uint8_t>(high << 4 | low);
    }
    if (!ok)
        throw UsageError("--expect-head: '" + text +
                         "' is not a seal digest (64 hex digits, as in 'audit seal FILE "
                         "digest=HEX')");
    return digest;
}

void printLine(const std::string& line) { std::cout << line << "\n"; }

void printConsistent(const std::string& name, const VerifySummary& summary, bool keyed) {
    std::string seals = keyed ? " (HMAC-SHA256)"
                        : summary.uncheckedKeyedSeals > 0
                            ? " (" + std::to_string(summary.uncheckedKeyedSeals) +
                                  " keyed, digests not checked without --key-file)"
                            : std::string(" (SHA-256)");
    std::cout << name << ": consistent (" << summary.segments << " segments, "
              << summary.connections << " connections, " << summary.records << " records, "
              << summary.chunkBytes << " chunk bytes, " << summary.sealedSegments
              << " chained seals" << seals << ", " << summary.liveSegments
              << " live segments not checked to their end, " << summary.checkedPayloadBytes
              << " payload bytes checked, " << summary.uncheckedChunks
              << " chunks without payload CRC, " << summary.deletedByRetention
              << " segments deleted by retention, " << summary.headsDeleted
              << " connections continuing from them)\n";
}

// Printed only for a log that verified: a head worth keeping elsewhere for --expect-head.
void printHeads(const std::vector<WorkerHead>& heads, const std::string& what) {
    for (const auto& head : heads)
        std::cout << "worker " << head.worker << " " << what << " "
                  << head.indexPath.substr(head.indexPath.rfind('/') + 1)
                  << " digest=" << hexText(head.digest.data(), head.digest.size())
                  << (head.checked ? "" : " (keyed: not checked without --key-file)") << "\n";
}

int problemsFound(const std::string& name, std::uint64_t problems) {
    std::cout.flush();
    std::cerr << kProgram << ": " << name << ": " << problems
              << (problems == 1 ? " problem" : " problems") << " found\n";
    return 1;
}

// `verify DIR`, and with `archive` the anchor against it.
int verifyLocal(const std::string& dir, VerifyOptions options,
                const std::optional<ArchiveLocation>& archive, const po::variables_map& values) {
    std::unique_ptr<s3::S3Client> s3;
    if (archive) s3 = openArchive(values);  // bad options before the long part
    LocalSeals seals;
    options.onSeal = [&](const WorkerHead& head) { seals[{head.worker, head.segment}] = head; };
    auto summary = verifyDirectory(dir, printLine, options);
    std::uint64_t problems = summary.problems;
    std::optional<AnchorSummary> anchor;
    if (archive) {
        anchor = checkAgainstArchive(dir, seals, *s3, *archive, printLine, printLine);
        problems += anchor->problems;
    }
    if (problems > 0) return problemsFound(dir, problems);
    printConsistent(dir, summary, options.key != nullptr);
    printHeads(summary.heads, "head");
    if (anchor) {
        std::cout << dir << ": agrees with s3://" << archive->bucket << "/" << archive->prefix
                  << " (" << anchor->compared << " archived segments here with the same seal, "
                  << anchor->deletedLocally << " deleted by retention since)\n";
        printHeads(anchor->archiveHeads, "archive head");
    }
    return 0;
}

// `verify s3://BUCKET/PREFIX`: problems so far are added to `problems`.
void verifyBox(s3::S3Client& s3, const ArchiveLocation& location, const VerifyOptions& options,
               std::uint64_t& problems) {
    const std::string name = "s3://" + location.bucket + "/" + location.prefix;
    auto summary = verifyArchive(s3, location, options, printLine);
    problems += summary.problems;
    // The test suite's probe of the bound on the temporary directory (docs/archive.md).
    if (std::getenv("SPLICEGATE_AUDIT_STAGING_PROBE") != nullptr) {
        std::cout.flush();
        std::cerr << kProgram << ": " << name << ": staged at most " << summary.stagedPeakBytes
                  << " bytes at once, " << summary.bytesFetched << " bytes fetched\n";
    }
    if (summary.problems > 0) {
        std::cout.flush();
        std::cerr << kProgram << ": " << name << ": " << summary.problems
                  << (summary.problems == 1 ? " problem" : " problems") << " found\n";
        return;
    }
    printConsistent(name, summary.chain, options.key != nullptr);
    printHeads(summary.heads, "head");
}

}  // namespace

int runVerify(const std::string& dir, const po::variables_map& values) {
    const std::string hint = " (see 'splicegate-audit verify --help')";
    std::string keyFile = values.count("key-file") ? values["key-file"].as<std::string>() : "";
    if (values.count("key-file") && keyFile.empty())
        throw UsageError("--key-file: empty file name" + hint);
    VerifyOptions options;
    if (values.count("expect-head"))
        for (const auto& text : values["expect-head"].as<std::vector<std::string>>())
            options.expectedHeads.push_back(parseDigest(text));
    const auto source = ArchiveLocation::parse(dir);
    std::optional<ArchiveLocation> archive;
    if (values.count("archive")) {
        const auto& text = values["archive"].as<std::string>();
        archive = ArchiveLocation::parse(text);
        if (!archive) throw UsageError("--archive: '" + text + "' is not s3://BUCKET/PREFIX" + hint);
        if (archive->prefix.empty())
            throw UsageError("--archive: " + text + ": no prefix (the box's --s3-prefix)" + hint);
        if (source)
            throw UsageError("--archive compares a directory with the archive: " + dir +
                             " is not a directory" + hint);
    }
    const bool allBoxes = values.count("all-boxes") != 0;
    if (allBoxes && (!source || !source->prefix.empty()))
        throw UsageError("--all-boxes takes s3://BUCKET, without a prefix" + hint);
    if (allBoxes && !options.expectedHeads.empty())
        throw UsageError("--expect-head names one box's chain: not with --all-boxes" + hint);
    if (source && !allBoxes && source->prefix.empty())
        throw UsageError(dir + ": no prefix (s3://BUCKET/PREFIX, or --all-boxes)" + hint);

    std::shared_ptr<const ChainKey> key;
    if (!keyFile.empty()) key = ChainKey::fromFile(keyFile, KeyFileUse::Verifier);
    options.key = key.get();
    // Notes go with the problems, in order: both say what a reader must know of the log.
    options.onNote = printLine;
    if (!source) return verifyLocal(dir, options, archive, values);

    auto s3 = openArchive(values);
    std::uint64_t problems = 0;
    if (!allBoxes) {
        verifyBox(*s3, *source, options, problems);
        return problems > 0 ? 1 : 0;
    }
    auto boxes = listBoxes(*s3, source->bucket);
    if (boxes.empty())
        throw std::runtime_error(dir + ": no archive there (no PREFIX/segments/ or "
                                       "PREFIX/manifests/ objects)");
    for (const auto& box : boxes) {
        ArchiveLocation location{source->bucket, box};
        try {
            verifyBox(*s3, location, options, problems);
        } catch (const std::runtime_error& error) {
            // One box that cannot be read leaves the others to check.
            std::cout.flush();
            std::cerr << kProgram << ": " << error.what() << "\n";
            ++problems;
        }
    }
    std::cout.flush();
    if (problems > 0) {
        std::cerr << kProgram << ": " << dir << ": " << boxes.size() << " boxes, " << problems
                  << (problems == 1 ? " problem" : " problems") << " found\n";
        return 1;
    }
    return 0;
}

}  // namespace splicegate::audittool
