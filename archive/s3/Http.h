#pragma once
// One HTTP exchange over libcurl, for the S3 client: RAII for the easy handle and the header list,
// the body streamed from memory or a file range (through the rate limiter), the reply's status,
// headers and body collected. No retries and no signing here (S3Client does both).
// Thread affinity: any thread; each call has its own handle. Error contract: never throws for
// network trouble: a transport failure comes back in HttpOutcome::transportError.
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "archive/s3/Requests.h"

namespace splicegate::s3 {

class RateLimiter;

struct HttpRequest {
    std::string method;   // HEAD, GET, PUT, DELETE
    std::string url;
    std::vector<std::pair<std::string, std::string>> headers;
    std::string_view body;
    std::optional<FileRange> file;
    RateLimiter* limiter = nullptr;   // paces the upload; null = no pacing
    std::string caFile;
    long timeoutMs = 60000;
    long connectTimeoutMs = 10000;
};

struct HttpOutcome {
    Response response;
    std::string transportError;   // empty when a reply came
    // The server's certificate failed verification (or the CA file is unusable): a retry would
    // fail the same way.
    bool tlsRefused = false;
};

// libcurl's global set-up, once per process (curl_global_init is not thread-safe).
void initCurlOnce();
HttpOutcome perform(const HttpRequest& request);

}  // namespace splicegate::s3
