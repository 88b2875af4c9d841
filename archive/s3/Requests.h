#pragma once
// The pure half of the S3 client: each call's request (method, path, query, headers, body) as an
// Operation, its signed form, and the parsing of replies (headers, error and listing XML). Kept
// apart from the curl half so every call's canonical request is unit-tested without a server.
// Thread affinity: none (pure functions). Error contract: none beyond std::bad_alloc.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "archive/s3/S3Client.h"
#include "archive/s3/SigV4.h"

namespace splicegate::s3 {

struct Operation {
    std::string method;
    std::string bucket;
    std::string key;        // "" for a bucket-level call
    Pairs query;            // raw
    Pairs headers;          // signed, besides host, x-amz-date and x-amz-content-sha256
    std::string ownedBody;  // XML bodies built here
    std::string_view borrowedBody;
    bool ownsBody = false;
    std::optional<FileRange> file;
    std::string payloadHash;  // hex SHA-256 or UNSIGNED-PAYLOAD

    std::string_view body() const { return ownsBody ? std::string_view(ownedBody) : borrowedBody; }
    std::uint64_t bodySize() const { return file ? file->length : body().size(); }
    // "bucket/key" or "bucket", for messages.
    std::string target() const { return key.empty() ? bucket : bucket + '/' + key; }
};

struct Response {
    long status = 0;
    std::map<std::string, std::string> headers;   // lower-cased names
    std::string body;
};

struct Endpoint {
    std::string scheme;     // "http" or "https"
    std::string authority;  // "host:port" as given: the Host header
};
// Throws std::invalid_argument for anything but http(s)://authority[/].
Endpoint parseEndpoint(const std::string& endpoint);

Operation headOp(const std::string& bucket, const std::string& key, const std::string& versionId);
Operation putOp(const PutRequest& request, std::string payloadHash);
// Multipart: the body of an UploadPart is set by the caller (a span of the object's).
Operation createMultipartOp(const PutRequest& request);
Operation uploadPartOp(const std::string& bucket, const std::string& key,
                       const std::string& uploadId, unsigned partNumber, std::uint32_t crc32c,
                       std::string payloadHash);
struct CompletedPart {
    unsigned number = 0;
    std::string etag;  // without the quotes
    std::uint32_t crc32c = 0;
};
std::string completeMultipartXml(const std::vector<CompletedPart>& parts);
Operation completeMultipartOp(const std::string& bucket, const std::string& key,
                              const std::string& uploadId, const std::vector<CompletedPart>& parts);
Operation abortMultipartOp(const std::string& bucket, const std::string& key,
                           const std::string& uploadId);
Operation listMultipartUploadsOp(const std::string& bucket, const std::string& prefix,
                                 const std::string& keyMarker, const std::string& uploadIdMarker);
// InitiateMultipartUploadResult's UploadId ("" when there is none).
std::string parseUploadId(std::string_view xmlBody);
struct UploadPage {
    std::vector<UploadEntry> entries;
    bool truncated = false;
    std::string nextKeyMarker;
    std::string nextUploadIdMarker;
};
UploadPage parseListMultipartUploads(std::string_view xmlBody);

Operation getOp(const std::string& bucket, const std::string& key,
                std::optional<std::pair<std::uint64_t, std::uint64_t>> range,
                const std::string& versionId = {});
Operation listOp(const std::string& bucket, const std::string& prefix, unsigned maxKeys,
                 const std::string& continuationToken);
Operation listVersionsOp(const std::string& bucket, const std::string& prefix, unsigned maxKeys,
                         const std::string& keyMarker, const std::string& versionIdMarker);
Operation createBucketOp(const std::string& bucket, bool objectLock, const std::string& region);
Operation defaultRetentionOp(const std::string& bucket, const std::string& mode, unsigned days);
Operation putRetentionOp(const std::string& bucket, const std::string& key,
                         const std::string& versionId, const std::string& mode,
                         const std::string& retainUntil);
Operation getRetentionOp(const std::string& bucket, const std::string& key,
                         const std::string& versionId);
Operation deleteOp(const std::string& bucket, const std::string& key, const std::string& versionId);
Operation deleteBucketOp(const std::string& bucket);

struct SignedRequest {
    std::string url;
    std::vector<std::pair<std::string, std::string>> headers;   // to send, Authorization included
    Signature signature;
};
// amzDate as from amzDate(): the time is the caller's so tests can fix it.
SignedRequest signOperation(const Operation& op, const Endpoint& endpoint, const std::string& region,
                            const Credentials& credentials, const std::string& amzDate);

// x-amz-checksum-crc32c: base64 of the CRC's four bytes, big-endian.
std::string crc32cHeaderValue(std::uint32_t crc);
std::optional<std::uint32_t> parseCrc32cHeaderValue(std::string_view value);

ObjectInfo objectInfoFromHeaders(const std::map<std::string, std::string>& headers);
ObjectInfo parseRetention(std::string_view xmlBody);

struct ListPage {
    std::vector<ListEntry> entries;
    bool truncated = false;
    std::string nextContinuationToken;
};
ListPage parseListObjects(std::string_view xmlBody);

struct VersionPage {
    std::vector<VersionEntry> entries;   // versions and delete markers, in the reply's order
    bool truncated = false;
    std::string nextKeyMarker;
    std::string nextVersionIdMarker;
};
VersionPage parseListVersions(std::string_view xmlBody);

// An HTTP error reply as an Error: S3's Code and Message from the body, or the status's name
// when there is none (HEAD), and the one-line message.
Error httpError(const Operation& op, const std::string& endpoint, const Response& response);
Error transportError(const Operation& op, const std::string& endpoint, const std::string& what);

// Worth another attempt: transport errors, 5xx, 429 and SlowDown. A 4xx is not.
bool retryable(const Error& error);
// Full jitter: a delay uniform in [0, min(maxMs, baseMs * 2^attempt)], random01 in [0, 1).
long backoffMs(unsigned attempt, long baseMs, long maxMs, double random01);

}  // namespace splicegate::s3
