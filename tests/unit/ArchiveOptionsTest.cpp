#include "archive/ArchiveOptions.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "common/Error.h"

namespace splicegate::archive {
namespace {

const std::vector<std::string> kRequired = {"--audit-dir", "/var/lib/splicegate/audit",
                                            "--s3-endpoint", "http://127.0.0.1:7480",
                                            "--s3-bucket", "audit"};

ArchiveOptions parse(std::vector<std::string> args, const std::string& config = "/nonexistent") {
    return parseArchiveOptions(args, "gw1", config);
}

std::string usageError(std::vector<std::string> args) {
    try {
        parse(std::move(args));
    } catch (const UsageError& e) {
        return e.what();
    }
    return "no error";
}

std::vector<std::string> with(std::vector<std::string> extra) {
    auto args = kRequired;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
}

TEST(ArchiveOptions, TakesTheDefaultsOfTheContract) {
    auto o = parse(kRequired);
    EXPECT_EQ(o.archive.prefix, "gw1");  // the host name
    EXPECT_EQ(o.client.region, "us-east-1");
    EXPECT_EQ(o.archive.lockDays, 365u);
    EXPECT_EQ(o.archive.lockMode, "COMPLIANCE");
    EXPECT_FALSE(o.once);
    EXPECT_EQ(o.stateDir, "/var/lib/splicegate-archive");
    EXPECT_TRUE(o.archive.unsignedPayload);  // --s3-payload-hash crc32c
    EXPECT_FALSE(parse(with({"--s3-payload-hash", "sha256"})).archive.unsignedPayload);
    EXPECT_EQ(o.archive.partBytes, 64u << 20);  // --s3-part-mb 64
}

TEST(ArchiveOptions, PartSizeIsZeroOrWithinS3sPartLimits) {
    EXPECT_EQ(parse(with({"--s3-part-mb", "0"})).archive.partBytes, 0u);
    EXPECT_EQ(parse(with({"--s3-part-mb", "5"})).archive.partBytes, 5u << 20);
    EXPECT_EQ(parse(with({"--s3-part-mb", "5120"})).archive.partBytes, 5ull << 30);
    const std::string limits =
        ": must be 0 (one PUT per object) or 5..5120 (S3's parts are 5 MiB to 5 GiB)";
    EXPECT_EQ(usageError(with({"--s3-part-mb", "4"})), "--s3-part-mb 4" + limits);
    EXPECT_EQ(usageError(with({"--s3-part-mb", "1"})), "--s3-part-mb 1" + limits);
    EXPECT_EQ(usageError(with({"--s3-part-mb", "5121"})), "--s3-part-mb 5121" + limits);
    for (const char* bad : {"-1", "64MB", "", "lots"}) {
        auto error = usageError(with({"--s3-part-mb", bad}));
        EXPECT_NE(error.find("s3-part-mb"), std::string::npos) << bad << ": " << error;
        EXPECT_EQ(error.find('\n'), std::string::npos) << error;
    }
}

TEST(ArchiveOptions, EveryBadValueNamesItsOption) {
    EXPECT_EQ(usageError({}), "--audit-dir is required");
    EXPECT_EQ(usageError({"--audit-dir", "/a", "--s3-bucket", "b"}), "--s3-endpoint is required");
    EXPECT_EQ(usageError(with({"--lock-days", "0"})), "--lock-days 0: must be 1..36500");
    EXPECT_EQ(usageError(with({"--parallel", "65"})), "--parallel 65: must be 1..64");
    EXPECT_EQ(usageError(with({"--s3-prefix", "a b"})), "--s3-prefix 'a b' has the character ' '");
    EXPECT_EQ(usageError(with({"--scan-interval-ms", "5"})),
              "--scan-interval-ms 5: must be 100..3600000");
    EXPECT_NE(usageError(with({"--lock-days", "many"})).find("lock-days"), std::string::npos);
    EXPECT_EQ(usageError(with({"--s3-payload-hash", "md5"})),
              "--s3-payload-hash 'md5': must be crc32c or sha256");
    EXPECT_NE(usageError(with({"--colour", "red"})).find("colour"), std::string::npos);
    auto bucket = kRequired;
    bucket[5] = "a/b";
    EXPECT_EQ(usageError(bucket), "--s3-bucket 'a/b': a bucket name has no '/' or space");
}

TEST(ArchiveOptions, ReadsTheConfigFileAndTheCommandLineWins) {
    char path[] = "/tmp/splicegate-archive-conf.XXXXXX";
    int fd = ::mkstemp(path);
    ASSERT_GE(fd, 0);
    ::close(fd);
    std::ofstream(path) << "audit-dir = /srv/audit\ns3-endpoint = https://s3.example.net\n"
                           "s3-bucket = box-audit\nlock-days = 30\nparallel = 4\n";
    auto o = parse({"--parallel", "8"}, path);
    EXPECT_EQ(o.auditDir, "/srv/audit");
    EXPECT_EQ(o.client.endpoint, "https://s3.example.net");
    EXPECT_EQ(o.archive.lockDays, 30u);
    EXPECT_EQ(o.parallel, 8u);
    std::ofstream(path) << "colour = red\n";
    EXPECT_THROW(parse(kRequired, path), UsageError);
    ::unlink(path);
    // A --config that does not exist is an error; the default one may be missing.
    EXPECT_THROW(parse(with({"--config", "/nonexistent/archive.conf"})), UsageError);
}

}  // namespace
}  // namespace splicegate::archive
