#pragma once
// An S3 client for the archive service: path-style requests (http(s)://host:port/bucket/key)
// signed with the project's SigV4 (archive/s3/SigV4.h), sent with libcurl, TLS verified.
// Retries 5xx, 429, SlowDown and transport errors with exponential backoff and full jitter; a 4xx
// is the caller's to handle and comes back at once. One byte-rate cap (a token bucket) is shared
// by every upload of one client.
// Connections are kept open between requests (archive/s3/Http.h, HttpConnections).
// Thread affinity: one S3Client may be used from any number of threads at once; each call has a
// curl handle to itself for its time. Error contract: network and HTTP failures come back as Result's Error,
// never thrown; loadCredentials throws std::runtime_error (one line naming the file); the
// constructor throws std::invalid_argument for an endpoint that is not http:// or https://.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace splicegate::s3 {

struct Credentials {
    std::string accessKeyId;
    std::string secretAccessKey;
};

// AWS shared-credentials format, profile [default]: aws_access_key_id, aws_secret_access_key.
// The file must be a regular file of mode 0600 or 0400. An empty path reads the environment's
// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY instead.
Credentials loadCredentials(const std::string& path);
// The file's text parsed (no file access); `path` only names it in errors.
Credentials parseCredentials(std::string_view text, const std::string& path);

struct ClientOptions {
    std::string endpoint;               // "https://s3.example.net:443" or "http://127.0.0.1:7480"
    std::string region = "us-east-1";
    std::string caFile;                 // PEM bundle to verify the server with; "" = system store
    unsigned retries = 5;               // further attempts after the first, for retryable errors
    double maxRateMbps = 0;             // upload cap in megabits (10^6 bit) per second; 0 = none
    long timeoutMs = 60000;             // one attempt, start to end
    long connectTimeoutMs = 10000;
    long retryBaseMs = 200;             // first backoff ceiling; doubles per attempt
    long retryMaxMs = 20000;            // backoff ceiling
};

struct Error {
    long httpStatus = 0;        // 0 for a transport error
    std::string code;           // S3's <Code>, "transport", "tls" (certificate refused), or the status's name for a bodiless reply
    std::string serverMessage;  // S3's <Message>, or curl's words for a transport error
    std::string message;        // one line: method, bucket/key, endpoint, status, code, words
    unsigned attempts = 0;      // how many requests were sent
};

// C++20 has no std::expected; this is the small part of it the client needs.
template <class T>
struct Result {
    std::optional<T> value;
    Error error;

    static Result success(T v) { return Result{std::move(v), {}}; }
    static Result failure(Error e) { return Result{std::nullopt, std::move(e)}; }
    explicit operator bool() const { return value.has_value(); }
    T& operator*() { return *value; }
    const T& operator*() const { return *value; }
    T* operator->() { return &*value; }
    const T* operator->() const { return &*value; }
};

struct ObjectInfo {
    std::uint64_t size = 0;
    std::string versionId;
    std::string etag;                    // without the quotes
    std::optional<std::uint32_t> crc32c; // when the server returns a whole-object x-amz-checksum-crc32c
    // x-amz-checksum-crc32c as the server gave it: "BASE64" (a whole object's CRC) or, for an
    // object put in parts, "BASE64-N" (the CRC of the N part CRCs, compositeCrc32c); "" for none.
    std::string checksumCrc32c;
    std::string lockMode;                // "COMPLIANCE", "GOVERNANCE" or ""
    std::string retainUntil;             // RFC 3339 as the server gave it
    std::string lastModified;            // as the server gave it
};

// Bytes of an open file, streamed (pread) rather than loaded: a sealed segment. The fd stays the
// caller's and must stay open for the call.
struct FileRange {
    int fd = -1;
    std::uint64_t offset = 0;
    std::uint64_t length = 0;
};

struct PutRequest {
    std::string bucket;
    std::string key;
    std::string_view body;                 // used when file is empty
    std::optional<FileRange> file;
    std::optional<std::uint32_t> crc32c;   // sent as x-amz-checksum-crc32c
    std::string lockMode;                  // "COMPLIANCE", "GOVERNANCE" or "" (bucket default)
    std::string retainUntil;               // RFC 3339, with lockMode
    std::string contentType;
    std::string contentEncoding;
    // The body's SHA-256 in hex when the caller has it already (saves reading a file twice);
    // empty = computed here. unsignedPayload sends UNSIGNED-PAYLOAD instead (TLS carries integrity).
    std::string payloadSha256;
    bool unsignedPayload = false;
};

// One part of a multipart upload: a span of the request's body (of its file range, or of its
// bytes) and that span's CRC-32C, sent as the part's x-amz-checksum-crc32c.
struct PartRange {
    std::uint64_t offset = 0;
    std::uint64_t length = 0;
    std::uint32_t crc32c = 0;

    bool operator==(const PartRange&) const = default;
};

// S3's limits on a multipart upload: every part but the last at least 5 MiB, at most 5 GiB,
// at most 10000 parts.
inline constexpr std::uint64_t kMinPartBytes = 5ull << 20;
inline constexpr std::uint64_t kMaxPartBytes = 5ull << 30;
inline constexpr unsigned kMaxParts = 10000;

struct UploadEntry {  // a multipart upload begun and neither completed nor aborted
    std::string key;
    std::string uploadId;
    std::string initiated;
};

struct ListEntry {
    std::string key;
    std::uint64_t size = 0;
    std::string etag;   // without the quotes
};

struct VersionEntry {
    std::string key;
    std::string versionId;
    std::uint64_t size = 0;
    bool isLatest = false;
    bool deleteMarker = false;
};

class BodySink;
class HttpConnections;
class RateLimiter;
struct Operation;
struct Response;

class S3Client {
public:
    S3Client(ClientOptions options, Credentials credentials);
    ~S3Client();
    S3Client(const S3Client&) = delete;
    S3Client& operator=(const S3Client&) = delete;

    // 404 -> error.httpStatus == 404 (a HEAD reply has no body, so code is "NotFound").
    Result<ObjectInfo> head(const std::string& bucket, const std::string& key,
                            const std::string& versionId = {});
    // size, versionId and etag from the reply; crc32c, lockMode and retainUntil as requested.
    Result<ObjectInfo> put(const PutRequest& request);
    // CreateMultipartUpload (the request's lock, content headers and checksum algorithm CRC32C),
    // UploadPart for each of `parts` in order (numbered from 1, each with its CRC), then
    // CompleteMultipartUpload. Every request is paced and retried as put's is; a failure aborts
    // the upload (AbortMultipartUpload), so no parts are left behind, and comes back as the
    // failing request's error. size, versionId and etag as put's.
    Result<ObjectInfo> putMultipart(const PutRequest& request, const std::vector<PartRange>& parts);
    // ListMultipartUploads under `prefix`, following the key/upload-id markers.
    Result<std::vector<UploadEntry>> listMultipartUploads(const std::string& bucket,
                                                          const std::string& prefix);
    // A 404 (NoSuchUpload: completed or aborted meanwhile) counts as done.
    Result<bool> abortMultipartUpload(const std::string& bucket, const std::string& key,
                                      const std::string& uploadId);
    // range = {first, last} inclusive: "Range: bytes=first-last"; versionId "" = the newest.
    Result<std::string> get(const std::string& bucket, const std::string& key,
                            std::optional<std::pair<std::uint64_t, std::uint64_t>> range = {},
                            const std::string& versionId = {});
    // Bytes [first, last] of versionId ("" = the newest) into `sink` as they arrive; a server
    // that answers the range with the whole object (200) is an error here.
    Result<bool> getInto(const std::string& bucket, const std::string& key, std::uint64_t first,
                         std::uint64_t last, const std::string& versionId, BodySink& sink);
    // ListObjectsV2, following continuation tokens; maxKeys is the page size (0 = server's).
    Result<std::vector<ListEntry>> list(const std::string& bucket, const std::string& prefix,
                                        unsigned maxKeys = 0);
    // ListObjectVersions (versions and delete markers), following the key/version markers.
    Result<std::vector<VersionEntry>> listVersions(const std::string& bucket,
                                                   const std::string& prefix, unsigned maxKeys = 0);
    Result<bool> createBucket(const std::string& bucket, bool objectLock);
    Result<bool> putDefaultRetention(const std::string& bucket, const std::string& mode,
                                     unsigned days);
    Result<bool> putRetention(const std::string& bucket, const std::string& key,
                              const std::string& versionId, const std::string& mode,
                              const std::string& retainUntil);
    // Only lockMode and retainUntil are filled: the servers that do not echo lock headers on
    // HEAD (radosgw) answer this.
    Result<ObjectInfo> getRetention(const std::string& bucket, const std::string& key,
                                    const std::string& versionId = {});
    Result<bool> deleteObject(const std::string& bucket, const std::string& key,
                              const std::string& versionId = {});
    Result<bool> deleteBucket(const std::string& bucket);

    const ClientOptions& options() const { return options_; }
    // TCP connections opened so far, and requests sent (every attempt counts): fewer
    // connections than requests is the kept ones at work.
    std::uint64_t connectionsOpened() const;
    std::uint64_t requestsSent() const;

private:
    Result<Response> send(const Operation& op, BodySink* sink = nullptr);

    ClientOptions options_;
    Credentials credentials_;
    std::string scheme_;      // of the endpoint, checked by the constructor
    std::string authority_;   // host[:port], the Host header
    std::unique_ptr<RateLimiter> limiter_;
    std::unique_ptr<HttpConnections> http_;
};

}  // namespace splicegate::s3
