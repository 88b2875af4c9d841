#include "archive/s3/S3Client.h"

#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <thread>

#include "archive/s3/FileRangeReader.h"
#include "archive/s3/Http.h"
#include "archive/s3/RateLimiter.h"
#include "archive/s3/Requests.h"
#include "archive/s3/Xml.h"

namespace splicegate::s3 {
namespace {

double random01() {
    thread_local std::mt19937_64 engine{std::random_device{}()};
    return std::uniform_real_distribution<double>(0.0, 1.0)(engine);
}

std::int64_t nowSeconds() {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

struct MdDeleter {
    void operator()(EVP_MD_CTX* c) const { ::EVP_MD_CTX_free(c); }
};

// The SHA-256 of a file range in hex, read in pieces (a segment is not loaded whole); or the
// error in words.
std::pair<std::string, std::string> hashFileRange(const FileRange& range) {
    std::unique_ptr<EVP_MD_CTX, MdDeleter> ctx(::EVP_MD_CTX_new());
    if (!ctx || ::EVP_DigestInit_ex(ctx.get(), ::EVP_sha256(), nullptr) != 1) return {{}, "OpenSSL SHA-256 failed"};
    std::string buffer(1 << 20, '\0');
    FileRangeReader reader(range);
    for (;;) {
        ssize_t n = reader.read(buffer.data(), buffer.size());
        if (n == 0) break;
        if (n == -ENODATA) return {{}, "reading the body to hash it: the file ends before the range does"};
        if (n < 0) return {{}, std::string("reading the body to hash it: ") + std::strerror(static_cast<int>(-n))};
        ::EVP_DigestUpdate(ctx.get(), buffer.data(), static_cast<std::size_t>(n));
    }
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int size = 0;
    ::EVP_DigestFinal_ex(ctx.get(), digest, &size);
    return {hex(std::string_view(reinterpret_cast<char*>(digest), size)), {}};
}

template <class T, class U>
Result<T> failed(const Result<U>& r) {
    return Result<T>::failure(r.error);
}

// Where a paginated listing resumes: ListObjectsV2's continuation token (and ""), or a key
// marker with its version-id or upload-id marker. Empty for the first page.
using Markers = std::pair<std::string, std::string>;

template <class Entry>
struct PageOf {
    std::vector<Entry> entries;
    bool truncated = false;
    Markers next;
};

// Every page of a listing, appended: `request(markers)` is a page's operation, `parse(body)` its
// PageOf. A truncated page whose markers are empty or do not move on would loop forever: that is
// a "BadListing" error, `METHOD target at endpoint: truncated what`.
template <class Entry, class Send, class Request, class Parse>
Result<std::vector<Entry>> listAllPages(Send&& send, Request&& request, Parse&& parse,
                                        const std::string& endpoint, const std::string& target,
                                        const std::string& what) {
    std::vector<Entry> all;
    Markers markers;
    for (;;) {
        Operation op = request(markers);
        Result<Response> r = send(op);
        if (!r) return failed<std::vector<Entry>>(r);
        PageOf<Entry> page = parse(r->body);
        all.insert(all.end(), page.entries.begin(), page.entries.end());
        if (!page.truncated) break;
        if (page.next.first.empty() || page.next == markers) {
            Error e = httpError(op, endpoint, *r);
            e.code = "BadListing";
            e.message = op.method + " " + target + " at " + endpoint + ": truncated " + what;
            return Result<std::vector<Entry>>::failure(std::move(e));
        }
        markers = std::move(page.next);
    }
    return Result<std::vector<Entry>>::success(std::move(all));
}

}  // namespace

S3Client::S3Client(ClientOptions options, Credentials credentials)
    : options_(std::move(options)), credentials_(std::move(credentials)) {
    Endpoint endpoint = parseEndpoint(options_.endpoint);
    scheme_ = endpoint.scheme;
    authority_ = endpoint.authority;
    // Megabits to bytes; a burst of 100 ms (at least one curl buffer) keeps the pace smooth.
    double rate = options_.maxRateMbps * 1e6 / 8;
    limiter_ = std::make_unique<RateLimiter>(rate, std::max(rate / 10, 65536.0));
    http_ = std::make_unique<HttpConnections>();
}

S3Client::~S3Client() = default;

std::uint64_t S3Client::connectionsOpened() const { return http_->connectionsOpened(); }
std::uint64_t S3Client::requestsSent() const { return http_->requests(); }

Result<Response> S3Client::send(const Operation& op, BodySink* sink) {
    const Endpoint endpoint{scheme_, authority_};
    for (unsigned attempt = 0;; ++attempt) {
        // Signed anew per attempt: x-amz-date must stay within the server's 15-minute window.
        SignedRequest signedRequest = signOperation(op, endpoint, options_.region, credentials_, amzDate(nowSeconds()));
        HttpRequest request;
        request.method = op.method;
        request.url = std::move(signedRequest.url);
        request.headers = std::move(signedRequest.headers);
        request.body = op.body();
        request.file = op.file;
        request.sink = sink;
        request.limiter = options_.maxRateMbps > 0 ? limiter_.get() : nullptr;
        request.caFile = options_.caFile;
        request.timeoutMs = options_.timeoutMs;
        request.connectTimeoutMs = std::min(options_.connectTimeoutMs, options_.timeoutMs);

        HttpOutcome outcome = http_->perform(request);
        Error error;
        if (outcome.transportError.empty()) {
            if (outcome.response.status >= 200 && outcome.response.status < 300)
                return Result<Response>::success(std::move(outcome.response));
            error = httpError(op, options_.endpoint, outcome.response);
        } else {
            error = transportError(op, options_.endpoint, outcome.transportError);
            if (outcome.tlsRefused) error.code = "tls";
        }
        error.attempts = attempt + 1;
        if (!retryable(error) || attempt >= options_.retries) {
            if (attempt > 0) error.message += " (after " + std::to_string(attempt + 1) + " attempts)";
            return Result<Response>::failure(std::move(error));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(
            backoffMs(attempt, options_.retryBaseMs, options_.retryMaxMs, random01())));
    }
}

Result<ObjectInfo> S3Client::head(const std::string& bucket, const std::string& key,
                                  const std::string& versionId) {
    auto r = send(headOp(bucket, key, versionId));
    if (!r) return failed<ObjectInfo>(r);
    return Result<ObjectInfo>::success(objectInfoFromHeaders(r->headers));
}

Result<ObjectInfo> S3Client::put(const PutRequest& request) {
    std::string hash;
    if (request.unsignedPayload) {
        hash = std::string(kUnsignedPayload);
    } else if (!request.payloadSha256.empty()) {
        hash = request.payloadSha256;
    } else if (request.file) {
        auto [digest, problem] = hashFileRange(*request.file);
        if (!problem.empty()) {
            Operation op = putOp(request, {});
            Error e = transportError(op, options_.endpoint, problem);
            e.code = "io";
            return Result<ObjectInfo>::failure(std::move(e));
        }
        hash = std::move(digest);
    } else {
        hash = sha256Hex(request.body);
    }
    Operation op = putOp(request, std::move(hash));
    auto r = send(op);
    if (!r) return failed<ObjectInfo>(r);
    ObjectInfo info = objectInfoFromHeaders(r->headers);
    info.size = op.bodySize();   // a PUT reply's Content-Length is its own (empty) body's
    if (!info.crc32c) info.crc32c = request.crc32c;
    if (info.lockMode.empty()) info.lockMode = request.lockMode;
    if (info.retainUntil.empty()) info.retainUntil = request.retainUntil;
    return Result<ObjectInfo>::success(std::move(info));
}

namespace {

// The payload hash of a body as put() takes it: UNSIGNED-PAYLOAD, or the SHA-256 of its bytes;
// the problem in words when the file could not be read.
std::pair<std::string, std::string> payloadHashOf(bool unsignedPayload,
                                                  const std::optional<FileRange>& file,
                                                  std::string_view body) {
    if (unsignedPayload) return {std::string(kUnsignedPayload), {}};
    if (file) return hashFileRange(*file);
    return {sha256Hex(body), {}};
}

}  // namespace

Result<ObjectInfo> S3Client::putMultipart(const PutRequest& request,
                                          const std::vector<PartRange>& parts) {
    auto created = send(createMultipartOp(request));
    if (!created) return failed<ObjectInfo>(created);
    std::string uploadId = parseUploadId(created->body);
    if (uploadId.empty()) {
        Error e = httpError(createMultipartOp(request), options_.endpoint, *created);
        e.code = "BadReply";
        e.message += ": no UploadId in the reply";
        return Result<ObjectInfo>::failure(std::move(e));
    }
    // Whatever fails after this point leaves no parts behind: the upload is aborted, and an
    // abort that fails too is named in the message (the next start lists and aborts it).
    auto abandon = [&](Error error) {
        auto aborted = abortMultipartUpload(request.bucket, request.key, uploadId);
        if (!aborted) error.message += "; then aborting upload " + uploadId + ": " + aborted.error.message;
        return Result<ObjectInfo>::failure(std::move(error));
    };
    std::vector<CompletedPart> done;
    std::uint64_t total = 0;
    for (const auto& part : parts) {
        std::optional<FileRange> file;
        std::string_view body;
        if (request.file) file = FileRange{request.file->fd, request.file->offset + part.offset, part.length};
        else body = request.body.substr(part.offset, part.length);
        auto number = static_cast<unsigned>(done.size() + 1);
        auto [hash, problem] = payloadHashOf(request.unsignedPayload, file, body);
        Operation op = uploadPartOp(request.bucket, request.key, uploadId, number, part.crc32c, hash);
        if (!problem.empty()) {
            Error e = transportError(op, options_.endpoint, problem);
            e.code = "io";
            return abandon(std::move(e));
        }
        op.file = file;
        op.borrowedBody = body;
        auto sent = send(op);
        if (!sent) return abandon(sent.error);
        done.push_back({number, objectInfoFromHeaders(sent->headers).etag, part.crc32c});
        total += part.length;
    }
    Operation complete = completeMultipartOp(request.bucket, request.key, uploadId, done);
    auto completed = send(complete);
    if (!completed) return abandon(completed.error);
    // S3 may answer 200 and put the failure in the body (the reply is sent before it is known).
    if (completed->body.find("<Error>") != std::string::npos) {
        Error e = httpError(complete, options_.endpoint, *completed);
        e.message = complete.method + " s3://" + complete.target() + " at " + options_.endpoint +
                    ": " + e.code + (e.serverMessage.empty() ? "" : ": " + e.serverMessage);
        return abandon(std::move(e));
    }
    ObjectInfo info = objectInfoFromHeaders(completed->headers);
    info.size = total;
    if (info.etag.empty()) {
        if (auto etag = xml::text(completed->body, "ETag")) info.etag = *etag;
        if (info.etag.size() >= 2 && info.etag.front() == '"') info.etag = info.etag.substr(1, info.etag.size() - 2);
    }
    if (info.lockMode.empty()) info.lockMode = request.lockMode;
    if (info.retainUntil.empty()) info.retainUntil = request.retainUntil;
    return Result<ObjectInfo>::success(std::move(info));
}

Result<std::vector<UploadEntry>> S3Client::listMultipartUploads(const std::string& bucket,
                                                                const std::string& prefix) {
    return listAllPages<UploadEntry>(
        [this](const Operation& op) { return send(op); },
        [&](const Markers& m) { return listMultipartUploadsOp(bucket, prefix, m.first, m.second); },
        [](std::string_view body) {
            UploadPage page = parseListMultipartUploads(body);
            return PageOf<UploadEntry>{std::move(page.entries), page.truncated,
                                       {page.nextKeyMarker, page.nextUploadIdMarker}};
        },
        options_.endpoint, "s3://" + bucket + "?uploads", "upload listing without new markers");
}

Result<bool> S3Client::abortMultipartUpload(const std::string& bucket, const std::string& key,
                                            const std::string& uploadId) {
    auto r = send(abortMultipartOp(bucket, key, uploadId));
    if (!r && r.error.httpStatus != 404) return Result<bool>::failure(r.error);
    return Result<bool>::success(true);
}

Result<std::string> S3Client::get(const std::string& bucket, const std::string& key,
                                  std::optional<std::pair<std::uint64_t, std::uint64_t>> range,
                                  const std::string& versionId) {
    auto r = send(getOp(bucket, key, range, versionId));
    if (!r) return failed<std::string>(r);
    // A server that ignores Range answers 200 with the whole object: cut the range out here.
    if (range && r->status == 200) {
        std::string& body = r->body;
        if (range->first >= body.size()) return Result<std::string>::success({});
        auto count = std::min<std::uint64_t>(range->second - range->first + 1, body.size() - range->first);
        return Result<std::string>::success(body.substr(range->first, count));
    }
    return Result<std::string>::success(std::move(r->body));
}

Result<bool> S3Client::getInto(const std::string& bucket, const std::string& key, std::uint64_t first,
                              std::uint64_t last, const std::string& versionId, BodySink& sink) {
    auto op = getOp(bucket, key, std::make_pair(first, last), versionId);
    auto r = send(op, &sink);
    if (!r) return failed<bool>(r);
    if (r->status != 206) {
        // The sink has taken the whole object, not the range: no slice can be cut out as get() does.
        Error error = httpError(op, options_.endpoint, *r);
        error.code = "IgnoredRange";
        error.message += " to a request for bytes " + std::to_string(first) + "-" +
                         std::to_string(last) + " (206 expected)";
        return Result<bool>::failure(std::move(error));
    }
    return Result<bool>::success(true);
}

Result<std::vector<ListEntry>> S3Client::list(const std::string& bucket, const std::string& prefix,
                                              unsigned maxKeys) {
    return listAllPages<ListEntry>(
        [this](const Operation& op) { return send(op); },
        [&](const Markers& m) { return listOp(bucket, prefix, maxKeys, m.first); },
        [](std::string_view body) {
            ListPage page = parseListObjects(body);
            return PageOf<ListEntry>{std::move(page.entries), page.truncated,
                                     {page.nextContinuationToken, {}}};
        },
        options_.endpoint, "s3://" + bucket, "listing without a new continuation token");
}

Result<std::vector<VersionEntry>> S3Client::listVersions(const std::string& bucket,
                                                         const std::string& prefix, unsigned maxKeys) {
    return listAllPages<VersionEntry>(
        [this](const Operation& op) { return send(op); },
        [&](const Markers& m) { return listVersionsOp(bucket, prefix, maxKeys, m.first, m.second); },
        [](std::string_view body) {
            VersionPage page = parseListVersions(body);
            return PageOf<VersionEntry>{std::move(page.entries), page.truncated,
                                        {page.nextKeyMarker, page.nextVersionIdMarker}};
        },
        options_.endpoint, "s3://" + bucket, "version listing without new markers");
}

namespace {
Result<bool> done(const Result<Response>& r) {
    if (!r) return Result<bool>::failure(r.error);
    return Result<bool>::success(true);
}
}  // namespace

Result<bool> S3Client::createBucket(const std::string& bucket, bool objectLock) {
    return done(send(createBucketOp(bucket, objectLock, options_.region)));
}

Result<bool> S3Client::putDefaultRetention(const std::string& bucket, const std::string& mode,
                                           unsigned days) {
    return done(send(defaultRetentionOp(bucket, mode, days)));
}

Result<bool> S3Client::putRetention(const std::string& bucket, const std::string& key,
                                    const std::string& versionId, const std::string& mode,
                                    const std::string& retainUntil) {
    return done(send(putRetentionOp(bucket, key, versionId, mode, retainUntil)));
}

Result<ObjectInfo> S3Client::getRetention(const std::string& bucket, const std::string& key,
                                          const std::string& versionId) {
    auto r = send(getRetentionOp(bucket, key, versionId));
    if (!r) return failed<ObjectInfo>(r);
    ObjectInfo info = parseRetention(r->body);
    info.versionId = versionId;
    return Result<ObjectInfo>::success(std::move(info));
}

Result<bool> S3Client::deleteObject(const std::string& bucket, const std::string& key,
                                    const std::string& versionId) {
    return done(send(deleteOp(bucket, key, versionId)));
}

Result<bool> S3Client::deleteBucket(const std::string& bucket) {
    return done(send(deleteBucketOp(bucket)));
}

}  // namespace splicegate::s3
