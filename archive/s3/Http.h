#pragma once
// HTTP exchanges over libcurl, for the S3 client: RAII for the easy handles and the header list,
// the body streamed from memory or a file range (through the rate limiter), the reply's status,
// headers and body collected. No retries and no signing here (S3Client does both).
// HttpConnections keeps its easy handles, and with them their open connections, between
// requests: a segment's HEAD, PUT, HEAD and retention requests go over one TCP (and TLS)
// connection instead of one each. A handle whose transfer failed is closed, not kept, so a retry
// always connects afresh. New connections resume TLS sessions through a share (CURLSH) that also
// holds the DNS cache.
// Thread affinity: perform() from any number of threads at once; each call has a handle of its
// own for the time of the call. Error contract: never throws for network trouble: a transport
// failure comes back in HttpOutcome::transportError; the constructor throws std::runtime_error
// when curl cannot make its share.
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "archive/s3/Requests.h"

namespace splicegate::s3 {

class RateLimiter;

// Takes a 2xx reply's body as it arrives, instead of the response keeping it (a read-back of a
// whole object would otherwise sit in memory, copied as it grows).
class BodySink {
  public:
    virtual ~BodySink() = default;
    virtual void restart() = 0;   // an attempt begins: forget what an earlier one gave
    virtual void take(std::string_view bytes) = 0;
};

struct HttpRequest {
    std::string method;   // HEAD, GET, PUT, DELETE
    std::string url;
    std::vector<std::pair<std::string, std::string>> headers;
    std::string_view body;
    std::optional<FileRange> file;
    RateLimiter* limiter = nullptr;   // paces the upload; null = no pacing
    BodySink* sink = nullptr;         // a 2xx body goes here, not into Response::body
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

// libcurl's global set-up, once per process (curl_global_init is not thread-safe). It gives curl
// an allocator that aligns large blocks, so the file reader can read a body straight into
// curl's upload buffer with O_DIRECT (FileRangeReader::read).
void initCurlOnce();

class HttpConnections {
  public:
    HttpConnections();
    ~HttpConnections();
    HttpConnections(const HttpConnections&) = delete;
    HttpConnections& operator=(const HttpConnections&) = delete;

    HttpOutcome perform(const HttpRequest& request);

    // Connections curl opened for the requests so far (CURLINFO_NUM_CONNECTS summed), and the
    // requests performed: their difference is how many went over a kept connection.
    std::uint64_t connectionsOpened() const { return connectionsOpened_.load(); }
    std::uint64_t requests() const { return requests_.load(); }

  private:
    struct Handle;
    struct Share;

    std::unique_ptr<Handle> take();
    void giveBack(std::unique_ptr<Handle> handle);

    std::unique_ptr<Share> share_;
    std::mutex idleMutex_;
    std::vector<std::unique_ptr<Handle>> idle_;   // most recently used last
    std::atomic<std::uint64_t> connectionsOpened_{0};
    std::atomic<std::uint64_t> requests_{0};
};

}  // namespace splicegate::s3
