// The S3 client's pure half (archive/s3/Requests.h, Xml.h, RateLimiter.h): the canonical request
// each call signs (what radosgw or S3 recompute), the wire URL matching it, the checksum header,
// listing, version and error XML with entities and pagination, retry classification, backoff and
// the token bucket's pacing.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "archive/s3/RateLimiter.h"
#include "archive/s3/Requests.h"
#include "archive/s3/Xml.h"

namespace splicegate::s3 {
namespace {

const Endpoint kEndpoint{"http", "127.0.0.1:7480"};
const Credentials kCredentials{"AKID", "SECRET"};
constexpr const char* kDate = "20240102T030405Z";
const std::string kEmpty(kEmptySha256);

SignedRequest signedOf(const Operation& op) {
    return signOperation(op, kEndpoint, "us-east-1", kCredentials, kDate);
}

std::string headersBlock(const std::string& extra, const std::string& hash = kEmpty) {
    return extra + "host:127.0.0.1:7480\nx-amz-content-sha256:" + hash + "\nx-amz-date:" + kDate + "\n";
}

TEST(S3RequestsTest, HeadWithVersion) {
    SignedRequest r = signedOf(headOp("b", "dir/a b", "v 1"));
    EXPECT_EQ(r.signature.canonicalRequest,
              "HEAD\n/b/dir/a%20b\nversionId=v%201\nhost:127.0.0.1:7480\nx-amz-checksum-mode:ENABLED\n"
              "x-amz-content-sha256:" + kEmpty + "\nx-amz-date:" + kDate + "\n" +
                  "\nhost;x-amz-checksum-mode;x-amz-content-sha256;x-amz-date\n" + kEmpty);
    EXPECT_EQ(r.url, "http://127.0.0.1:7480/b/dir/a%20b?versionId=v%201");
}

TEST(S3RequestsTest, PutSignsLockChecksumAndPayloadHash) {
    PutRequest put;
    put.bucket = "b";
    put.key = "k";
    put.body = "hello";
    put.crc32c = 0x9A71BB4C;
    put.lockMode = "COMPLIANCE";
    put.retainUntil = "2030-01-01T00:00:00Z";
    put.contentType = "application/octet-stream";
    std::string hash = sha256Hex("hello");
    SignedRequest r = signedOf(putOp(put, hash));
    EXPECT_EQ(r.signature.canonicalRequest,
              "PUT\n/b/k\n\ncontent-type:application/octet-stream\n"
              "host:127.0.0.1:7480\n"
                  "x-amz-checksum-crc32c:mnG7TA==\nx-amz-content-sha256:" + hash + "\n"
                  "x-amz-date:" + kDate + "\nx-amz-object-lock-mode:COMPLIANCE\n"
                  "x-amz-object-lock-retain-until-date:2030-01-01T00:00:00Z\n\n"
                  "content-type;host;x-amz-checksum-crc32c;x-amz-content-sha256;x-amz-date;"
                  "x-amz-object-lock-mode;x-amz-object-lock-retain-until-date\n" + hash);
    // Every signed header goes on the wire, and the Authorization last.
    ASSERT_FALSE(r.headers.empty());
    EXPECT_EQ(r.headers.back().first, "Authorization");
    EXPECT_EQ(r.headers.size(), 8u);
}

TEST(S3RequestsTest, UnsignedPayloadIsSignedAsSuch) {
    PutRequest put;
    put.bucket = "b";
    put.key = "k";
    SignedRequest r = signedOf(putOp(put, std::string(kUnsignedPayload)));
    EXPECT_TRUE(r.signature.canonicalRequest.ends_with("\nUNSIGNED-PAYLOAD"));
    EXPECT_NE(r.signature.canonicalRequest.find("x-amz-content-sha256:UNSIGNED-PAYLOAD\n"), std::string::npos);
}

TEST(S3RequestsTest, RangedGet) {
    SignedRequest r = signedOf(getOp("b", "k", std::pair<std::uint64_t, std::uint64_t>{10, 19}));
    EXPECT_EQ(r.signature.canonicalRequest,
              "GET\n/b/k\n\n"
              "host:127.0.0.1:7480\nrange:bytes=10-19\nx-amz-content-sha256:" + kEmpty +
                  "\nx-amz-date:" + kDate + "\n\nhost;range;x-amz-content-sha256;x-amz-date\n" + kEmpty);
}

TEST(S3RequestsTest, AVersionedGetNamesTheVersion) {
    SignedRequest r = signedOf(getOp("b", "k", std::nullopt, "v1/x"));
    EXPECT_EQ(r.url, "http://127.0.0.1:7480/b/k?versionId=v1%2Fx");
    EXPECT_EQ(signedOf(getOp("b", "k", std::nullopt)).url, "http://127.0.0.1:7480/b/k");
}

TEST(S3RequestsTest, ListQueriesAreSortedAndEncoded) {
    SignedRequest r = signedOf(listOp("b", "seg/", 2, "tok/en=="));
    EXPECT_EQ(r.signature.canonicalRequest,
              "GET\n/b\ncontinuation-token=tok%2Fen%3D%3D&list-type=2&max-keys=2&prefix=seg%2F\n" +
                  headersBlock("") + "\nhost;x-amz-content-sha256;x-amz-date\n" + kEmpty);
    EXPECT_EQ(r.url, "http://127.0.0.1:7480/b?continuation-token=tok%2Fen%3D%3D&list-type=2&max-keys=2&prefix=seg%2F");
    SignedRequest v = signedOf(listVersionsOp("b", "", 0, "k1", "v1"));
    EXPECT_EQ(v.url, "http://127.0.0.1:7480/b?key-marker=k1&version-id-marker=v1&versions=");
}

TEST(S3RequestsTest, BucketAndRetentionCalls) {
    SignedRequest create = signedOf(createBucketOp("b", true, "us-east-1"));
    EXPECT_EQ(create.signature.canonicalRequest,
              "PUT\n/b\n\n"
              "host:127.0.0.1:7480\n"
              "x-amz-bucket-object-lock-enabled:true\nx-amz-content-sha256:" + kEmpty +
                  "\nx-amz-date:" + kDate +
                  "\n\nhost;x-amz-bucket-object-lock-enabled;x-amz-content-sha256;x-amz-date\n" + kEmpty);
    Operation elsewhere = createBucketOp("b", false, "eu-west-1");
    EXPECT_NE(elsewhere.body().find("<LocationConstraint>eu-west-1</LocationConstraint>"), std::string::npos);

    Operation lock = defaultRetentionOp("b", "COMPLIANCE", 7);
    EXPECT_EQ(std::string(lock.body()),
              "<ObjectLockConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><ObjectLockEnabled>"
              "Enabled</ObjectLockEnabled><Rule><DefaultRetention><Mode>COMPLIANCE</Mode><Days>7</Days>"
              "</DefaultRetention></Rule></ObjectLockConfiguration>");
    EXPECT_EQ(lock.payloadHash, sha256Hex(lock.body()));
    SignedRequest l = signedOf(lock);
    EXPECT_TRUE(l.signature.canonicalRequest.starts_with("PUT\n/b\nobject-lock=\ncontent-md5:" +
                                                         base64(md5(lock.body())) + "\ncontent-type:application/xml\n"));
    EXPECT_EQ(l.url, "http://127.0.0.1:7480/b?object-lock=");

    SignedRequest put = signedOf(putRetentionOp("b", "k", "v1", "GOVERNANCE", "2030-01-01T00:00:00Z"));
    EXPECT_TRUE(put.signature.canonicalRequest.starts_with("PUT\n/b/k\nretention=&versionId=v1\n"));
    SignedRequest get = signedOf(getRetentionOp("b", "k", ""));
    EXPECT_TRUE(get.signature.canonicalRequest.starts_with("GET\n/b/k\nretention=\n"));
    SignedRequest del = signedOf(deleteOp("b", "k", "v1"));
    EXPECT_TRUE(del.signature.canonicalRequest.starts_with("DELETE\n/b/k\nversionId=v1\n"));
}

TEST(S3RequestsTest, CreateMultipartCarriesTheLockAndContentHeadersOfAPut) {
    PutRequest put;
    put.bucket = "b";
    put.key = "seg/k.data";
    put.crc32c = 0x9A71BB4C;  // the whole object's: not sent, each part carries its own
    put.lockMode = "COMPLIANCE";
    put.retainUntil = "2030-01-01T00:00:00Z";
    put.contentType = "application/x-ndjson";
    put.contentEncoding = "gzip";
    SignedRequest r = signedOf(createMultipartOp(put));
    EXPECT_EQ(r.signature.canonicalRequest,
              "POST\n/b/seg/k.data\nuploads=\ncontent-encoding:gzip\n"
              "content-type:application/x-ndjson\nhost:127.0.0.1:7480\n"
              "x-amz-checksum-algorithm:CRC32C\nx-amz-content-sha256:" + kEmpty + "\n"
              "x-amz-date:" + kDate + "\nx-amz-object-lock-mode:COMPLIANCE\n"
              "x-amz-object-lock-retain-until-date:2030-01-01T00:00:00Z\n\n"
              "content-encoding;content-type;host;x-amz-checksum-algorithm;x-amz-content-sha256;"
              "x-amz-date;x-amz-object-lock-mode;x-amz-object-lock-retain-until-date\n" + kEmpty);
    EXPECT_EQ(r.url, "http://127.0.0.1:7480/b/seg/k.data?uploads=");
}

TEST(S3RequestsTest, UploadPartIsNumberedAndCarriesItsOwnChecksum) {
    SignedRequest r = signedOf(uploadPartOp("b", "k", "2~a/b+c", 3, 0x9A71BB4C,
                                            std::string(kUnsignedPayload)));
    EXPECT_EQ(r.signature.canonicalRequest,
              "PUT\n/b/k\npartNumber=3&uploadId=2~a%2Fb%2Bc\nhost:127.0.0.1:7480\n"
              "x-amz-checksum-crc32c:mnG7TA==\nx-amz-content-sha256:UNSIGNED-PAYLOAD\n"
              "x-amz-date:" + std::string(kDate) + "\n\n"
              "host;x-amz-checksum-crc32c;x-amz-content-sha256;x-amz-date\nUNSIGNED-PAYLOAD");
    EXPECT_EQ(r.url, "http://127.0.0.1:7480/b/k?partNumber=3&uploadId=2~a%2Fb%2Bc");
}

TEST(S3RequestsTest, CompleteMultipartListsThePartsInOrderWithETagsAndChecksums) {
    std::vector<CompletedPart> parts = {{1, "0123abcd", 0x9A71BB4C}, {2, "ffff-2", 0}};
    EXPECT_EQ(completeMultipartXml(parts),
              "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
              "<Part><PartNumber>1</PartNumber><ETag>\"0123abcd\"</ETag>"
              "<ChecksumCRC32C>mnG7TA==</ChecksumCRC32C></Part>"
              "<Part><PartNumber>2</PartNumber><ETag>\"ffff-2\"</ETag>"
              "<ChecksumCRC32C>AAAAAA==</ChecksumCRC32C></Part></CompleteMultipartUpload>");
    Operation complete = completeMultipartOp("b", "k", "u1", parts);
    EXPECT_EQ(std::string(complete.body()), completeMultipartXml(parts));
    EXPECT_EQ(complete.payloadHash, sha256Hex(complete.body()));
    SignedRequest c = signedOf(complete);
    EXPECT_TRUE(c.signature.canonicalRequest.starts_with(
        "POST\n/b/k\nuploadId=u1\ncontent-type:application/xml\n"))
        << c.signature.canonicalRequest;
    SignedRequest abort = signedOf(abortMultipartOp("b", "k", "u1"));
    EXPECT_TRUE(abort.signature.canonicalRequest.starts_with("DELETE\n/b/k\nuploadId=u1\n"));
    SignedRequest list = signedOf(listMultipartUploadsOp("b", "gw1/", "gw1/k", "u1"));
    EXPECT_EQ(list.url,
              "http://127.0.0.1:7480/b?key-marker=gw1%2Fk&prefix=gw1%2F&upload-id-marker=u1&uploads=");
}

TEST(S3RequestsTest, MultipartReplies) {
    EXPECT_EQ(parseUploadId("<?xml version=\"1.0\"?><InitiateMultipartUploadResult><Bucket>b</Bucket>"
                            "<Key>k</Key><UploadId>2~xY&amp;z</UploadId></InitiateMultipartUploadResult>"),
              "2~xY&z");
    EXPECT_EQ(parseUploadId("<Error><Code>x</Code></Error>"), "");
    UploadPage page = parseListMultipartUploads(
        "<ListMultipartUploadsResult><Bucket>b</Bucket><KeyMarker></KeyMarker>"
        "<NextKeyMarker>gw1/b</NextKeyMarker><NextUploadIdMarker>u2</NextUploadIdMarker>"
        "<IsTruncated>true</IsTruncated>"
        "<Upload><Key>gw1/a</Key><UploadId>u1</UploadId><Initiator><ID>x</ID></Initiator>"
        "<Initiated>2026-12-07T10:00:00.000Z</Initiated></Upload>"
        "<Upload><Key>gw1/b</Key><UploadId>u2</UploadId></Upload></ListMultipartUploadsResult>");
    ASSERT_EQ(page.entries.size(), 2u);
    EXPECT_EQ(page.entries[0].key, "gw1/a");
    EXPECT_EQ(page.entries[0].uploadId, "u1");
    EXPECT_EQ(page.entries[0].initiated, "2026-12-07T10:00:00.000Z");
    EXPECT_EQ(page.entries[1].uploadId, "u2");
    EXPECT_TRUE(page.truncated);
    EXPECT_EQ(page.nextKeyMarker, "gw1/b");
    EXPECT_EQ(page.nextUploadIdMarker, "u2");
    // A multipart object's checksum is composite: kept as given, not read as a whole CRC.
    auto info = objectInfoFromHeaders({{"x-amz-checksum-crc32c", "mnG7TA==-3"}});
    EXPECT_EQ(info.checksumCrc32c, "mnG7TA==-3");
    EXPECT_FALSE(info.crc32c);
    EXPECT_EQ(objectInfoFromHeaders({{"x-amz-checksum-crc32c", "mnG7TA=="}}).crc32c, 0x9A71BB4Cu);
}

TEST(S3RequestsTest, Crc32cHeaderIsBase64OfBigEndianBytes) {
    EXPECT_EQ(crc32cHeaderValue(0xE3069283), "4waSgw==");   // crc32c("123456789")
    EXPECT_EQ(crc32cHeaderValue(0), "AAAAAA==");
    EXPECT_EQ(crc32cHeaderValue(0x01020304), "AQIDBA==");
    EXPECT_EQ(parseCrc32cHeaderValue("4waSgw=="), 0xE3069283u);
    EXPECT_FALSE(parseCrc32cHeaderValue("4waSgw"));
}

TEST(S3RequestsTest, EndpointMustBeSchemeAndAuthority) {
    EXPECT_EQ(parseEndpoint("https://s3.example.net:8443/").authority, "s3.example.net:8443");
    EXPECT_EQ(parseEndpoint("http://127.0.0.1:7480").scheme, "http");
    EXPECT_THROW(parseEndpoint("ftp://x"), std::invalid_argument);
    EXPECT_THROW(parseEndpoint("127.0.0.1:7480"), std::invalid_argument);
    EXPECT_THROW(parseEndpoint("http://host/base"), std::invalid_argument);
}

TEST(S3RequestsTest, XmlElementsAndEntities) {
    std::string doc = "<A><Key>k&amp;1</Key><KeyMarker>m</KeyMarker><Key attr=\"x\">k&lt;2&gt;</Key><Key/>"
                      "<Q>&quot;&apos;&#65;&#x42;&#x1234;&bogus;</Q></A>";
    auto keys = xml::elements(doc, "Key");
    ASSERT_EQ(keys.size(), 3u);
    EXPECT_EQ(xml::decodeEntities(keys[0]), "k&1");
    EXPECT_EQ(xml::decodeEntities(keys[1]), "k<2>");
    EXPECT_EQ(keys[2], "");
    EXPECT_EQ(xml::text(doc, "KeyMarker"), "m");
    EXPECT_EQ(xml::text(doc, "Q"), "\"'AB\xE1\x88\xB4&bogus;");
    EXPECT_FALSE(xml::text(doc, "Missing"));
}

TEST(S3RequestsTest, ListObjectsPage) {
    ListPage page = parseListObjects(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        "<Name>b</Name><Prefix>p/</Prefix><KeyCount>2</KeyCount><MaxKeys>2</MaxKeys><IsTruncated>true</IsTruncated>"
        "<NextContinuationToken>t&amp;2</NextContinuationToken>"
        "<Contents><Key>p/a&amp;b</Key><LastModified>2024-01-01T00:00:00.000Z</LastModified>"
        "<ETag>&quot;0cc175b9c0f1b6a831c399e269772661&quot;</ETag><Size>1</Size></Contents>"
        "<Contents><Key>p/c</Key><ETag>\"e1\"</ETag><Size>12345678901</Size></Contents></ListBucketResult>");
    ASSERT_EQ(page.entries.size(), 2u);
    EXPECT_EQ(page.entries[0].key, "p/a&b");
    EXPECT_EQ(page.entries[0].etag, "0cc175b9c0f1b6a831c399e269772661");
    EXPECT_EQ(page.entries[0].size, 1u);
    EXPECT_EQ(page.entries[1].size, 12345678901u);
    EXPECT_EQ(page.entries[1].etag, "e1");
    EXPECT_TRUE(page.truncated);
    EXPECT_EQ(page.nextContinuationToken, "t&2");
    EXPECT_FALSE(parseListObjects("<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>").truncated);
}

TEST(S3RequestsTest, ListVersionsPageKeepsDocumentOrder) {
    VersionPage page = parseListVersions(
        "<ListVersionsResult><IsTruncated>true</IsTruncated><NextKeyMarker>b</NextKeyMarker>"
        "<NextVersionIdMarker>v3</NextVersionIdMarker>"
        "<Version><Key>a</Key><VersionId>v1</VersionId><IsLatest>true</IsLatest><Size>3</Size></Version>"
        "<DeleteMarker><Key>b</Key><VersionId>v2</VersionId><IsLatest>true</IsLatest></DeleteMarker>"
        "<Version><Key>b</Key><VersionId>v3</VersionId><IsLatest>false</IsLatest><Size>4</Size></Version>"
        "</ListVersionsResult>");
    ASSERT_EQ(page.entries.size(), 3u);
    EXPECT_EQ(page.entries[0].versionId, "v1");
    EXPECT_TRUE(page.entries[0].isLatest);
    EXPECT_FALSE(page.entries[0].deleteMarker);
    EXPECT_EQ(page.entries[1].key, "b");
    EXPECT_TRUE(page.entries[1].deleteMarker);
    EXPECT_EQ(page.entries[2].size, 4u);
    EXPECT_FALSE(page.entries[2].isLatest);
    EXPECT_TRUE(page.truncated);
    EXPECT_EQ(page.nextKeyMarker, "b");
    EXPECT_EQ(page.nextVersionIdMarker, "v3");
}

TEST(S3RequestsTest, ErrorsNameTheCallAndTheServersWords) {
    Operation op = putOp(PutRequest{"bkt", "seg/1", {}, {}, {}, {}, {}, {}, {}, {}, false}, kEmpty);
    Response reply{403, {}, "<?xml version=\"1.0\"?><Error><Code>SignatureDoesNotMatch</Code>"
                            "<Message>bad &amp; wrong</Message><RequestId>x</RequestId></Error>"};
    Error e = httpError(op, "http://127.0.0.1:7480", reply);
    EXPECT_EQ(e.httpStatus, 403);
    EXPECT_EQ(e.code, "SignatureDoesNotMatch");
    EXPECT_EQ(e.serverMessage, "bad & wrong");
    EXPECT_EQ(e.message, "PUT s3://bkt/seg/1 at http://127.0.0.1:7480: HTTP 403 SignatureDoesNotMatch: bad & wrong");
    Error bodiless = httpError(headOp("bkt", "k", ""), "http://h", Response{404, {}, ""});
    EXPECT_EQ(bodiless.code, "NotFound");
    Error t = transportError(headOp("bkt", "", ""), "http://h", "Connection refused");
    EXPECT_EQ(t.code, "transport");
    EXPECT_EQ(t.message, "HEAD s3://bkt at http://h: Connection refused");
}

TEST(S3RequestsTest, OnlyServerSideAndTransportErrorsAreRetried) {
    auto error = [](long status, std::string code) {
        Error e;
        e.httpStatus = status;
        e.code = std::move(code);
        return e;
    };
    EXPECT_TRUE(retryable(error(0, "transport")));
    EXPECT_TRUE(retryable(error(500, "InternalError")));
    EXPECT_TRUE(retryable(error(503, "SlowDown")));
    EXPECT_TRUE(retryable(error(429, "TooManyRequests")));
    EXPECT_TRUE(retryable(error(400, "SlowDown")));
    EXPECT_FALSE(retryable(error(0, "tls")));  // a refused certificate fails the same way again
    EXPECT_FALSE(retryable(error(403, "AccessDenied")));
    EXPECT_FALSE(retryable(error(404, "NoSuchKey")));
    EXPECT_FALSE(retryable(error(409, "BucketNotEmpty")));
    EXPECT_FALSE(retryable(error(400, "InvalidRequest")));
}

TEST(S3RequestsTest, BackoffDoublesUpToTheCeilingWithFullJitter) {
    EXPECT_EQ(backoffMs(0, 100, 10000, 0.999999), 99);
    EXPECT_EQ(backoffMs(3, 100, 10000, 0.5), 400);
    EXPECT_EQ(backoffMs(20, 100, 10000, 0.5), 5000);
    EXPECT_EQ(backoffMs(200, 100, 10000, 1.0), 10000);
    EXPECT_EQ(backoffMs(5, 100, 10000, 0.0), 0);
}

TEST(S3RequestsTest, ObjectInfoFromHeaders) {
    ObjectInfo info = objectInfoFromHeaders({{"content-length", "42"}, {"etag", "\"abc\""},
                                             {"x-amz-version-id", "v9"}, {"x-amz-checksum-crc32c", "4waSgw=="},
                                             {"x-amz-object-lock-mode", "COMPLIANCE"},
                                             {"x-amz-object-lock-retain-until-date", "2030-01-01T00:00:00.000Z"},
                                             {"last-modified", "Tue, 02 Jan 2024 03:04:05 GMT"}});
    EXPECT_EQ(info.size, 42u);
    EXPECT_EQ(info.etag, "abc");
    EXPECT_EQ(info.versionId, "v9");
    EXPECT_EQ(info.crc32c, 0xE3069283u);
    EXPECT_EQ(info.lockMode, "COMPLIANCE");
    EXPECT_EQ(info.retainUntil, "2030-01-01T00:00:00.000Z");
    EXPECT_EQ(info.lastModified, "Tue, 02 Jan 2024 03:04:05 GMT");
    ObjectInfo retention = parseRetention(
        "<Retention><Mode>GOVERNANCE</Mode><RetainUntilDate>2031-02-03T04:05:06Z</RetainUntilDate></Retention>");
    EXPECT_EQ(retention.lockMode, "GOVERNANCE");
    EXPECT_EQ(retention.retainUntil, "2031-02-03T04:05:06Z");
}

TEST(S3RequestsTest, RateLimiterChargesDebtAtTheConfiguredRate) {
    RateLimiter limiter(1000.0, 100.0);   // 1000 B/s, 100 B burst
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(limiter.charge(100, t0).count(), 0);                      // the burst
    EXPECT_EQ(limiter.charge(500, t0), std::chrono::milliseconds(500));  // 500 B of debt
    // One second later 1000 B were paid back: 500 B of credit, capped at the 100 B burst.
    EXPECT_EQ(limiter.charge(100, t0 + std::chrono::seconds(1)).count(), 0);
    EXPECT_EQ(limiter.charge(50, t0 + std::chrono::seconds(1)), std::chrono::milliseconds(50));
    RateLimiter unlimited(0, 0);
    EXPECT_EQ(unlimited.charge(1 << 30, t0).count(), 0);
}

}  // namespace
}  // namespace splicegate::s3
