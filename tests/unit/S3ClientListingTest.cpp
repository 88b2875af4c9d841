// S3Client's paginated listings (ListObjectsV2, ListObjectVersions, ListMultipartUploads) against
// an in-process server that serves three pages per listing: every page is followed by its
// markers and appended in order, and a truncated page whose markers are missing or do not move
// on is an error (BadListing) naming the listing, not an endless loop. The same listings against
// radosgw: tests/s3/S3ClientRadosgwTest.cpp.
#include "archive/s3/S3Client.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "tests/support/TestServer.h"

namespace splicegate::s3 {
namespace {

using namespace std::chrono_literals;

constexpr unsigned kPages = 3;

// `name`'s value in the request target's query, "" when absent.
std::string queryValue(const std::string& target, const std::string& name) {
    for (char before : {'?', '&'}) {
        auto at = target.find(before + name + "=");
        if (at == std::string::npos) continue;
        auto from = at + name.size() + 2;
        return target.substr(from, target.find('&', from) - from);
    }
    return {};
}

// Page N (asked for with the markers "kN"/"mN", none for page 0) holds key kN+1 in every
// listing's form and, before the last, names "kN+1"/"mN+1" as the next markers. Bucket "stuck"
// always names page 1's markers, bucket "unmarked" none.
std::string pageFor(const std::string& target) {
    auto bucket = target.substr(1, target.find('?') - 1);
    auto marker = queryValue(target, "continuation-token");
    if (marker.empty()) marker = queryValue(target, "key-marker");
    unsigned page = marker.empty() ? 0 : static_cast<unsigned>(std::stoul(marker.substr(1)));
    auto key = "k" + std::to_string(page + 1);
    auto next = bucket == "stuck" ? std::string("1") : std::to_string(page + 1);
    std::string body = "<Contents><Key>" + key + "</Key><Size>1</Size></Contents><Version><Key>" +
                       key + "</Key><VersionId>v</VersionId></Version><Upload><Key>" + key +
                       "</Key><UploadId>u</UploadId></Upload>";
    if (page + 1 == kPages && bucket != "stuck") return body + "<IsTruncated>false</IsTruncated>";
    body += "<IsTruncated>true</IsTruncated>";
    if (bucket == "unmarked") return body;
    return body + "<NextContinuationToken>k" + next + "</NextContinuationToken><NextKeyMarker>k" +
           next + "</NextKeyMarker><NextVersionIdMarker>m" + next +
           "</NextVersionIdMarker><NextUploadIdMarker>m" + next + "</NextUploadIdMarker>";
}

void serve(int fd, std::size_t) {
    for (;;) {
        std::string head;
        int error = 0;
        while (!head.ends_with("\r\n\r\n")) {
            char c = 0;
            if (!test::recvExact(fd, &c, 1, test::deadlineIn(5000ms), error)) return;
            head += c;
        }
        auto target = head.substr(head.find(' ') + 1);
        target = target.substr(0, target.find(' '));
        auto body = pageFor(target);
        auto reply = "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) +
                     "\r\n\r\n" + body;
        if (!test::sendAll(fd, reply.data(), reply.size(), test::deadlineIn(5000ms), error)) return;
    }
}

class S3ClientListingTest : public ::testing::Test {
  protected:
    S3Client client() const {
        ClientOptions options;
        options.endpoint = "http://" + server_.address();
        options.retries = 0;
        return S3Client(options, {"AKIDEXAMPLE", "secret"});
    }
    std::string endpoint() const { return "http://" + server_.address(); }

    test::TestServer server_{&serve};
};

template <class Entry>
std::vector<std::string> keysOf(const Result<std::vector<Entry>>& listed) {
    std::vector<std::string> keys;
    for (const auto& entry : *listed) keys.push_back(entry.key);
    return keys;
}

const std::vector<std::string> kAllKeys = {"k1", "k2", "k3"};

TEST_F(S3ClientListingTest, EveryPageIsFollowedAndAppendedInOrder) {
    auto c = client();
    auto objects = c.list("b", "p/");
    ASSERT_TRUE(objects) << objects.error.message;
    EXPECT_EQ(keysOf(objects), kAllKeys);
    auto versions = c.listVersions("b", "p/");
    ASSERT_TRUE(versions) << versions.error.message;
    EXPECT_EQ(keysOf(versions), kAllKeys);
    auto uploads = c.listMultipartUploads("b", "p/");
    ASSERT_TRUE(uploads) << uploads.error.message;
    EXPECT_EQ(keysOf(uploads), kAllKeys);
    EXPECT_EQ(c.requestsSent(), 3u * kPages);
}

TEST_F(S3ClientListingTest, ATruncatedPageThatDoesNotMoveOnIsAnError) {
    auto c = client();
    for (std::string bucket : {"stuck", "unmarked"}) {
        SCOPED_TRACE(bucket);
        auto at = " at " + endpoint() + ": truncated ";
        auto objects = c.list(bucket, "");
        ASSERT_FALSE(objects);
        EXPECT_EQ(objects.error.code, "BadListing");
        EXPECT_EQ(objects.error.message,
                  "GET s3://" + bucket + at + "listing without a new continuation token");
        auto versions = c.listVersions(bucket, "");
        ASSERT_FALSE(versions);
        EXPECT_EQ(versions.error.code, "BadListing");
        EXPECT_EQ(versions.error.message,
                  "GET s3://" + bucket + at + "version listing without new markers");
        auto uploads = c.listMultipartUploads(bucket, "");
        ASSERT_FALSE(uploads);
        EXPECT_EQ(uploads.error.code, "BadListing");
        EXPECT_EQ(uploads.error.message,
                  "GET s3://" + bucket + "?uploads" + at + "upload listing without new markers");
    }
}

}  // namespace
}  // namespace splicegate::s3
