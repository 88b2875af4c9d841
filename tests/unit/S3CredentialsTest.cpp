// loadCredentials (archive/s3/S3Client.h): the AWS shared-credentials format's [default]
// profile, the file's mode (0600 or 0400 only), a missing key, and the environment fallback.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "archive/s3/S3Client.h"

namespace splicegate::s3 {
namespace {

class S3CredentialsTest : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = std::filesystem::temp_directory_path() / ("sg-s3-cred-" + std::to_string(::getpid()));
        std::filesystem::create_directories(dir_);
    }
    void TearDown() override { std::filesystem::remove_all(dir_); }

    std::string write(const std::string& text, mode_t mode) {
        std::string path = (dir_ / "credentials").string();
        std::ofstream(path, std::ios::trunc) << text;
        ::chmod(path.c_str(), mode);
        return path;
    }

    std::string errorOf(const std::string& path) {
        try {
            loadCredentials(path);
        } catch (const std::runtime_error& e) {
            return e.what();
        }
        return "no error";
    }

    std::filesystem::path dir_;
};

constexpr const char* kFile =
    "# comment\n[other]\naws_access_key_id = WRONG\naws_secret_access_key = WRONG\n\n"
    "[default]\r\n  aws_access_key_id=AKID  \r\naws_secret_access_key = se=cret/+x\n; trailing\n";

TEST_F(S3CredentialsTest, ReadsTheDefaultProfile) {
    for (mode_t mode : {0600, 0400}) {
        Credentials c = loadCredentials(write(kFile, mode));
        EXPECT_EQ(c.accessKeyId, "AKID");
        EXPECT_EQ(c.secretAccessKey, "se=cret/+x");
    }
}

TEST_F(S3CredentialsTest, RefusesAFileOthersCanRead) {
    std::string path = write(kFile, 0644);
    std::string error = errorOf(path);
    EXPECT_NE(error.find(path), std::string::npos) << error;
    EXPECT_NE(error.find("0644"), std::string::npos) << error;
    EXPECT_NE(errorOf(write(kFile, 0640)).find("must be 0600 or 0400"), std::string::npos);
}

TEST_F(S3CredentialsTest, RefusesMissingKeysAndOddFiles) {
    std::string path = write("[default]\naws_access_key_id = AKID\n", 0600);
    EXPECT_NE(errorOf(path).find("aws_secret_access_key"), std::string::npos);
    EXPECT_NE(errorOf(write("[other]\naws_access_key_id=a\naws_secret_access_key=b\n", 0600)).find("[default]"),
              std::string::npos);
    EXPECT_NE(errorOf(dir_.string()).find("not a regular file"), std::string::npos);
    std::string missing = (dir_ / "nope").string();
    EXPECT_NE(errorOf(missing).find(missing), std::string::npos);
}

TEST_F(S3CredentialsTest, EmptyPathReadsTheEnvironment) {
    ::setenv("AWS_ACCESS_KEY_ID", "ENVID", 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", "ENVSECRET", 1);
    Credentials c = loadCredentials("");
    EXPECT_EQ(c.accessKeyId, "ENVID");
    EXPECT_EQ(c.secretAccessKey, "ENVSECRET");
    ::unsetenv("AWS_SECRET_ACCESS_KEY");
    EXPECT_NE(errorOf("").find("AWS_SECRET_ACCESS_KEY"), std::string::npos);
    ::unsetenv("AWS_ACCESS_KEY_ID");
}

}  // namespace
}  // namespace splicegate::s3
