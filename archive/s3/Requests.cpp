#include "archive/s3/Requests.h"

#include <openssl/evp.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>

#include "archive/s3/Xml.h"

namespace splicegate::s3 {
namespace {

constexpr std::string_view kXmlns = "http://s3.amazonaws.com/doc/2006-03-01/";

Operation bucketOp(std::string method, const std::string& bucket, const std::string& key = {}) {
    Operation op;
    op.method = std::move(method);
    op.bucket = bucket;
    op.key = key;
    op.payloadHash = std::string(kEmptySha256);
    return op;
}

// S3 wants Content-MD5 on the lock configuration calls (AWS rejects them without one).
void setXmlBody(Operation& op, std::string body) {
    op.headers.emplace_back("Content-MD5", base64(md5(body)));
    op.headers.emplace_back("Content-Type", "application/xml");
    op.payloadHash = sha256Hex(body);
    op.ownedBody = std::move(body);
    op.ownsBody = true;
}

std::uint64_t toU64(std::string_view s) {
    std::uint64_t v = 0;
    std::from_chars(s.data(), s.data() + s.size(), v);
    return v;
}

std::string stripQuotes(std::string s) {
    if (s.size() >= 2 && s.front() == '"' && s.back() == '"') return s.substr(1, s.size() - 2);
    return s;
}

std::string field(std::string_view doc, std::string_view tag) {
    return xml::text(doc, tag).value_or("");
}

std::string statusName(long status) {
    switch (status) {
    case 301: return "PermanentRedirect";
    case 400: return "BadRequest";
    case 403: return "Forbidden";
    case 404: return "NotFound";
    case 405: return "MethodNotAllowed";
    case 409: return "Conflict";
    case 412: return "PreconditionFailed";
    case 416: return "InvalidRange";
    case 429: return "TooManyRequests";
    case 500: return "InternalError";
    case 503: return "ServiceUnavailable";
    default: return "HTTP" + std::to_string(status);
    }
}

std::string describe(const Operation& op, const std::string& endpoint) {
    return op.method + " s3://" + op.target() + " at " + endpoint;
}

}  // namespace

Endpoint parseEndpoint(const std::string& endpoint) {
    Endpoint out;
    auto sep = endpoint.find("://");
    if (sep != std::string::npos) out.scheme = endpoint.substr(0, sep);
    if (out.scheme != "http" && out.scheme != "https")
        throw std::invalid_argument("S3 endpoint '" + endpoint + "' is not http:// or https://");
    out.authority = endpoint.substr(sep + 3);
    while (!out.authority.empty() && out.authority.back() == '/') out.authority.pop_back();
    if (out.authority.empty() || out.authority.find_first_of("/?#@ ") != std::string::npos)
        throw std::invalid_argument("S3 endpoint '" + endpoint +
                                    "' must be scheme://host[:port] with no path");
    return out;
}

Operation headOp(const std::string& bucket, const std::string& key, const std::string& versionId) {
    Operation op = bucketOp("HEAD", bucket, key);
    if (!versionId.empty()) op.query.emplace_back("versionId", versionId);
    // S3 returns an object's x-amz-checksum-* on HEAD only when asked: without it, verification
    // would read every object back to confirm its CRC-32C.
    op.headers.emplace_back("x-amz-checksum-mode", "ENABLED");
    return op;
}

namespace {

// The new object's lock and content headers: the same on a single PUT and on the
// CreateMultipartUpload that starts its parts.
void addObjectHeaders(Operation& op, const PutRequest& request) {
    if (!request.lockMode.empty()) op.headers.emplace_back("x-amz-object-lock-mode", request.lockMode);
    if (!request.retainUntil.empty())
        op.headers.emplace_back("x-amz-object-lock-retain-until-date", request.retainUntil);
    if (!request.contentType.empty()) op.headers.emplace_back("Content-Type", request.contentType);
    if (!request.contentEncoding.empty())
        op.headers.emplace_back("Content-Encoding", request.contentEncoding);
}

}  // namespace

Operation putOp(const PutRequest& request, std::string payloadHash) {
    Operation op = bucketOp("PUT", request.bucket, request.key);
    op.payloadHash = std::move(payloadHash);
    if (request.file) op.file = request.file;
    else op.borrowedBody = request.body;
    if (request.crc32c) op.headers.emplace_back("x-amz-checksum-crc32c", crc32cHeaderValue(*request.crc32c));
    addObjectHeaders(op, request);
    return op;
}

Operation createMultipartOp(const PutRequest& request) {
    Operation op = bucketOp("POST", request.bucket, request.key);
    op.query.emplace_back("uploads", "");
    // Each part then carries its own x-amz-checksum-crc32c (AWS refuses one of another kind).
    op.headers.emplace_back("x-amz-checksum-algorithm", "CRC32C");
    addObjectHeaders(op, request);
    return op;
}

Operation uploadPartOp(const std::string& bucket, const std::string& key,
                       const std::string& uploadId, unsigned partNumber, std::uint32_t crc32c,
                       std::string payloadHash) {
    Operation op = bucketOp("PUT", bucket, key);
    op.query.emplace_back("partNumber", std::to_string(partNumber));
    op.query.emplace_back("uploadId", uploadId);
    op.payloadHash = std::move(payloadHash);
    op.headers.emplace_back("x-amz-checksum-crc32c", crc32cHeaderValue(crc32c));
    return op;
}

std::string completeMultipartXml(const std::vector<CompletedPart>& parts) {
    std::string body = "<CompleteMultipartUpload xmlns=\"" + std::string(kXmlns) + "\">";
    for (const auto& part : parts)
        body += "<Part><PartNumber>" + std::to_string(part.number) + "</PartNumber><ETag>\"" +
                part.etag + "\"</ETag><ChecksumCRC32C>" + crc32cHeaderValue(part.crc32c) +
                "</ChecksumCRC32C></Part>";
    return body + "</CompleteMultipartUpload>";
}

Operation completeMultipartOp(const std::string& bucket, const std::string& key,
                              const std::string& uploadId, const std::vector<CompletedPart>& parts) {
    Operation op = bucketOp("POST", bucket, key);
    op.query.emplace_back("uploadId", uploadId);
    std::string body = completeMultipartXml(parts);
    op.headers.emplace_back("Content-Type", "application/xml");
    op.payloadHash = sha256Hex(body);
    op.ownedBody = std::move(body);
    op.ownsBody = true;
    return op;
}

Operation abortMultipartOp(const std::string& bucket, const std::string& key,
                           const std::string& uploadId) {
    Operation op = bucketOp("DELETE", bucket, key);
    op.query.emplace_back("uploadId", uploadId);
    return op;
}

Operation listMultipartUploadsOp(const std::string& bucket, const std::string& prefix,
                                 const std::string& keyMarker, const std::string& uploadIdMarker) {
    Operation op = bucketOp("GET", bucket);
    op.query.emplace_back("uploads", "");
    if (!prefix.empty()) op.query.emplace_back("prefix", prefix);
    if (!keyMarker.empty()) op.query.emplace_back("key-marker", keyMarker);
    if (!uploadIdMarker.empty()) op.query.emplace_back("upload-id-marker", uploadIdMarker);
    return op;
}

std::string parseUploadId(std::string_view body) { return field(body, "UploadId"); }

UploadPage parseListMultipartUploads(std::string_view body) {
    UploadPage page;
    for (auto upload : xml::elements(body, "Upload"))
        page.entries.push_back(
            {field(upload, "Key"), field(upload, "UploadId"), field(upload, "Initiated")});
    page.truncated = field(body, "IsTruncated") == "true";
    page.nextKeyMarker = field(body, "NextKeyMarker");
    page.nextUploadIdMarker = field(body, "NextUploadIdMarker");
    return page;
}

Operation getOp(const std::string& bucket, const std::string& key,
                std::optional<std::pair<std::uint64_t, std::uint64_t>> range,
                const std::string& versionId) {
    Operation op = bucketOp("GET", bucket, key);
    if (!versionId.empty()) op.query.emplace_back("versionId", versionId);
    if (range)
        op.headers.emplace_back("Range", "bytes=" + std::to_string(range->first) + '-' +
                                             std::to_string(range->second));
    return op;
}

Operation listOp(const std::string& bucket, const std::string& prefix, unsigned maxKeys,
                 const std::string& continuationToken) {
    Operation op = bucketOp("GET", bucket);
    op.query.emplace_back("list-type", "2");
    if (!prefix.empty()) op.query.emplace_back("prefix", prefix);
    if (maxKeys > 0) op.query.emplace_back("max-keys", std::to_string(maxKeys));
    if (!continuationToken.empty()) op.query.emplace_back("continuation-token", continuationToken);
    return op;
}

Operation listVersionsOp(const std::string& bucket, const std::string& prefix, unsigned maxKeys,
                         const std::string& keyMarker, const std::string& versionIdMarker) {
    Operation op = bucketOp("GET", bucket);
    op.query.emplace_back("versions", "");
    if (!prefix.empty()) op.query.emplace_back("prefix", prefix);
    if (maxKeys > 0) op.query.emplace_back("max-keys", std::to_string(maxKeys));
    if (!keyMarker.empty()) op.query.emplace_back("key-marker", keyMarker);
    if (!versionIdMarker.empty()) op.query.emplace_back("version-id-marker", versionIdMarker);
    return op;
}

Operation createBucketOp(const std::string& bucket, bool objectLock, const std::string& region) {
    Operation op = bucketOp("PUT", bucket);
    if (objectLock) op.headers.emplace_back("x-amz-bucket-object-lock-enabled", "true");
    // us-east-1 is S3's default location and must not be named; any other must be.
    if (!region.empty() && region != "us-east-1") {
        std::string body = "<CreateBucketConfiguration xmlns=\"" + std::string(kXmlns) +
                           "\"><LocationConstraint>" + region +
                           "</LocationConstraint></CreateBucketConfiguration>";
        op.payloadHash = sha256Hex(body);
        op.ownedBody = std::move(body);
        op.ownsBody = true;
    }
    return op;
}

Operation defaultRetentionOp(const std::string& bucket, const std::string& mode, unsigned days) {
    Operation op = bucketOp("PUT", bucket);
    op.query.emplace_back("object-lock", "");
    setXmlBody(op, "<ObjectLockConfiguration xmlns=\"" + std::string(kXmlns) +
                       "\"><ObjectLockEnabled>Enabled</ObjectLockEnabled><Rule><DefaultRetention>"
                       "<Mode>" + mode + "</Mode><Days>" + std::to_string(days) +
                       "</Days></DefaultRetention></Rule></ObjectLockConfiguration>");
    return op;
}

Operation putRetentionOp(const std::string& bucket, const std::string& key,
                         const std::string& versionId, const std::string& mode,
                         const std::string& retainUntil) {
    Operation op = bucketOp("PUT", bucket, key);
    op.query.emplace_back("retention", "");
    if (!versionId.empty()) op.query.emplace_back("versionId", versionId);
    setXmlBody(op, "<Retention xmlns=\"" + std::string(kXmlns) + "\"><Mode>" + mode +
                       "</Mode><RetainUntilDate>" + retainUntil + "</RetainUntilDate></Retention>");
    return op;
}

Operation getRetentionOp(const std::string& bucket, const std::string& key,
                         const std::string& versionId) {
    Operation op = bucketOp("GET", bucket, key);
    op.query.emplace_back("retention", "");
    if (!versionId.empty()) op.query.emplace_back("versionId", versionId);
    return op;
}

Operation deleteOp(const std::string& bucket, const std::string& key, const std::string& versionId) {
    Operation op = bucketOp("DELETE", bucket, key);
    if (!versionId.empty()) op.query.emplace_back("versionId", versionId);
    return op;
}

Operation deleteBucketOp(const std::string& bucket) {
    return bucketOp("DELETE", bucket);
}

SignedRequest signOperation(const Operation& op, const Endpoint& endpoint, const std::string& region,
                            const Credentials& credentials, const std::string& date) {
    SigningInput input;
    input.method = op.method;
    input.path = "/" + op.bucket + (op.key.empty() ? "" : "/" + op.key);
    input.query = op.query;
    input.payloadHash = op.payloadHash;
    input.headers = {{"Host", endpoint.authority},
                     {"x-amz-date", date},
                     {"x-amz-content-sha256", op.payloadHash}};
    input.headers.insert(input.headers.end(), op.headers.begin(), op.headers.end());

    SignedRequest out;
    out.signature = sign(input, {date, region, "s3"}, credentials.accessKeyId,
                         credentials.secretAccessKey);
    // The wire carries exactly the encoding that was signed.
    out.url = endpoint.scheme + "://" + endpoint.authority + canonicalPath(input.path);
    std::string query = canonicalQuery(input.query);
    if (!query.empty()) out.url += '?' + query;
    out.headers = input.headers;
    out.headers.emplace_back("Authorization", out.signature.authorization);
    return out;
}

std::string crc32cHeaderValue(std::uint32_t crc) {
    const char bytes[4] = {static_cast<char>(crc >> 24), static_cast<char>(crc >> 16),
                           static_cast<char>(crc >> 8), static_cast<char>(crc)};
    return base64(std::string_view(bytes, 4));
}

std::optional<std::uint32_t> parseCrc32cHeaderValue(std::string_view value) {
    if (value.size() != 8) return std::nullopt;
    unsigned char out[6] = {};
    if (::EVP_DecodeBlock(out, reinterpret_cast<const unsigned char*>(value.data()), 8) != 6)
        return std::nullopt;
    return (std::uint32_t{out[0]} << 24) | (std::uint32_t{out[1]} << 16) |
           (std::uint32_t{out[2]} << 8) | std::uint32_t{out[3]};
}

ObjectInfo objectInfoFromHeaders(const std::map<std::string, std::string>& headers) {
    auto get = [&](const char* name) {
        auto it = headers.find(name);
        return it == headers.end() ? std::string() : it->second;
    };
    ObjectInfo info;
    info.size = toU64(get("content-length"));
    info.versionId = get("x-amz-version-id");
    info.etag = stripQuotes(get("etag"));
    info.checksumCrc32c = get("x-amz-checksum-crc32c");
    if (!info.checksumCrc32c.empty()) info.crc32c = parseCrc32cHeaderValue(info.checksumCrc32c);
    info.lockMode = get("x-amz-object-lock-mode");
    info.retainUntil = get("x-amz-object-lock-retain-until-date");
    info.lastModified = get("last-modified");
    return info;
}

ObjectInfo parseRetention(std::string_view body) {
    ObjectInfo info;
    info.lockMode = field(body, "Mode");
    info.retainUntil = field(body, "RetainUntilDate");
    return info;
}

ListPage parseListObjects(std::string_view body) {
    ListPage page;
    for (auto contents : xml::elements(body, "Contents"))
        page.entries.push_back({field(contents, "Key"), toU64(field(contents, "Size")),
                                stripQuotes(field(contents, "ETag"))});
    page.truncated = field(body, "IsTruncated") == "true";
    page.nextContinuationToken = field(body, "NextContinuationToken");
    return page;
}

VersionPage parseListVersions(std::string_view body) {
    VersionPage page;
    // <Version> and <DeleteMarker> interleave in key order; walk both in document order.
    auto versions = xml::elements(body, "Version");
    auto markers = xml::elements(body, "DeleteMarker");
    std::vector<std::pair<std::string_view, bool>> all;
    for (auto v : versions) all.emplace_back(v, false);
    for (auto m : markers) all.emplace_back(m, true);
    std::sort(all.begin(), all.end(),
              [](const auto& a, const auto& b) { return a.first.data() < b.first.data(); });
    for (const auto& [element, marker] : all)
        page.entries.push_back({field(element, "Key"), field(element, "VersionId"),
                                toU64(field(element, "Size")), field(element, "IsLatest") == "true",
                                marker});
    page.truncated = field(body, "IsTruncated") == "true";
    page.nextKeyMarker = field(body, "NextKeyMarker");
    page.nextVersionIdMarker = field(body, "NextVersionIdMarker");
    return page;
}

Error httpError(const Operation& op, const std::string& endpoint, const Response& response) {
    Error e;
    e.httpStatus = response.status;
    e.code = field(response.body, "Code");
    e.serverMessage = field(response.body, "Message");
    if (e.code.empty()) e.code = statusName(response.status);
    e.message = describe(op, endpoint) + ": HTTP " + std::to_string(response.status) + ' ' + e.code;
    if (!e.serverMessage.empty()) e.message += ": " + e.serverMessage;
    return e;
}

Error transportError(const Operation& op, const std::string& endpoint, const std::string& what) {
    Error e;
    e.code = "transport";
    e.serverMessage = what;
    e.message = describe(op, endpoint) + ": " + what;
    return e;
}

bool retryable(const Error& error) {
    if (error.code == "transport") return true;
    return error.httpStatus >= 500 || error.httpStatus == 429 || error.code == "SlowDown";
}

long backoffMs(unsigned attempt, long baseMs, long maxMs, double random01) {
    double ceiling = std::min(static_cast<double>(maxMs),
                              static_cast<double>(baseMs) * std::ldexp(1.0, static_cast<int>(std::min(attempt, 30u))));
    return static_cast<long>(ceiling * std::clamp(random01, 0.0, 1.0));
}

}  // namespace splicegate::s3
