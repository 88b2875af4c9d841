#pragma once
// AWS Signature Version 4 (header-based, AWS4-HMAC-SHA256) as S3 checks it: the canonical request,
// the string to sign, the signing key and the Authorization header. The project signs its own
// requests because curl 7.88's CURLOPT_AWS_SIGV4 leaves out x-amz-content-sha256, drops the '='
// of empty query values and does not sort the query, so S3 servers reject what it signs.
// S3's rules, which differ from the other AWS services: each path segment is URI-encoded once
// (the path is neither normalised nor encoded twice), so a key "a b/c" is "/bucket/a%20b/c".
// Thread affinity: none (pure functions). Error contract: throws std::bad_alloc or
// std::runtime_error only when OpenSSL itself fails (it does not on valid input).
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace splicegate::s3 {

using Pairs = std::vector<std::pair<std::string, std::string>>;

// What is signed. Path and query are raw (not encoded): the signer encodes them, and the client
// sends the same encoding on the wire (canonicalPath, canonicalQuery), so the two cannot differ.
struct SigningInput {
    std::string method;        // "GET", "PUT", ...
    std::string path;          // "/bucket/key", raw bytes (UTF-8)
    Pairs query;               // raw names and values; a sub-resource like "retention" has ""
    Pairs headers;             // every header to sign, any case; must include host and x-amz-date
    std::string payloadHash;   // hex SHA-256 of the body, or "UNSIGNED-PAYLOAD"
};

struct SigningScope {
    std::string amzDate;   // "20150830T123600Z"
    std::string region;    // "us-east-1"
    std::string service;   // "s3"
};

struct Signature {
    std::string canonicalRequest;
    std::string stringToSign;
    std::string signature;       // hex
    std::string signedHeaders;   // "host;x-amz-content-sha256;x-amz-date"
    std::string authorization;   // the Authorization header's value
};

// RFC 3986 unreserved characters stay, every other byte is %XX (upper-case hex); '/' stays only
// when keepSlash (path), not in query names and values.
std::string uriEncode(std::string_view raw, bool keepSlash);
std::string canonicalPath(std::string_view rawPath);
// Sorted by encoded name, then encoded value; empty values as "name=".
std::string canonicalQuery(const Pairs& rawQuery);
// Lower-cased names, values trimmed with inner runs of spaces folded to one, sorted by name;
// repeated names joined with ','. Returns {canonical headers block, signed header list}.
std::pair<std::string, std::string> canonicalHeaders(const Pairs& headers);

std::string canonicalRequest(const SigningInput& input);
std::string credentialScope(const SigningScope& scope);
std::string stringToSign(const SigningScope& scope, std::string_view canonicalRequest);
// HMAC chain "AWS4"+secret -> date -> region -> service -> "aws4_request" (raw 32 bytes).
std::string signingKey(std::string_view secretAccessKey, const SigningScope& scope);
Signature sign(const SigningInput& input, const SigningScope& scope, std::string_view accessKeyId,
               std::string_view secretAccessKey);

// Building blocks, also used for payload hashes and Content-MD5.
std::string sha256(std::string_view data);   // raw 32 bytes
std::string sha256Hex(std::string_view data);
std::string hmacSha256(std::string_view key, std::string_view data);   // raw 32 bytes
std::string md5(std::string_view data);      // raw 16 bytes
std::string hex(std::string_view bytes);
std::string base64(std::string_view bytes);
// "20150830T123600Z" for a time in seconds since the epoch (UTC).
std::string amzDate(std::int64_t unixSeconds);

inline constexpr std::string_view kEmptySha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
inline constexpr std::string_view kUnsignedPayload = "UNSIGNED-PAYLOAD";

}  // namespace splicegate::s3
