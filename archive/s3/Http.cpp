#include "archive/s3/Http.h"

#include <curl/curl.h>
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "archive/s3/FileRangeReader.h"
#include "archive/s3/RateLimiter.h"

namespace splicegate::s3 {
namespace {

struct EasyDeleter {
    void operator()(CURL* h) const { ::curl_easy_cleanup(h); }
};
struct ListDeleter {
    void operator()(curl_slist* l) const { ::curl_slist_free_all(l); }
};
using Easy = std::unique_ptr<CURL, EasyDeleter>;
using HeaderList = std::unique_ptr<curl_slist, ListDeleter>;

// curl_slist_append returns the new head, or null leaving the old list alone.
bool append(HeaderList& list, const std::string& line) {
    curl_slist* head = ::curl_slist_append(list.get(), line.c_str());
    if (head == nullptr) return false;
    (void)list.release();
    list.reset(head);
    return true;
}

struct Upload {
    std::string_view memory;
    std::optional<FileRangeReader> file;
    std::uint64_t size = 0;
    std::uint64_t pos = 0;
    RateLimiter* limiter = nullptr;
    int readErrno = 0;
};

std::size_t readBody(char* buffer, std::size_t size, std::size_t count, void* user) {
    auto* up = static_cast<Upload*>(user);
    std::size_t room = size * count;
    std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(room, up->size - up->pos));
    if (want == 0) return 0;
    if (up->limiter != nullptr) up->limiter->acquire(want);
    if (!up->file) {
        std::memcpy(buffer, up->memory.data() + up->pos, want);
        up->pos += want;
        return want;
    }
    // All of curl's room: an O_DIRECT read straight into it reads whole blocks, past the range's
    // end at the last one; the reader returns only the range's bytes.
    ssize_t n = up->file->read(buffer, room);
    // A file that ends early would make the body shorter than the Content-Length sent: abort.
    if (n <= 0) {
        up->readErrno = n < 0 ? static_cast<int>(-n) : ENODATA;
        return CURL_READFUNC_ABORT;
    }
    up->pos += static_cast<std::uint64_t>(n);
    return static_cast<std::size_t>(n);
}

// curl rewinds the body when it must send it again on the same attempt (a reused connection that
// turned out closed).
int seekBody(void* user, curl_off_t offset, int origin) {
    auto* up = static_cast<Upload*>(user);
    if (origin != SEEK_SET || offset < 0 || static_cast<std::uint64_t>(offset) > up->size)
        return CURL_SEEKFUNC_CANTSEEK;
    up->pos = static_cast<std::uint64_t>(offset);
    if (up->file) up->file->seek(up->pos);
    return CURL_SEEKFUNC_OK;
}

struct Download {
    std::string* body;
    BodySink* sink;   // null: everything into body
    CURL* handle;
    std::optional<bool> toSink;   // decided at the first bytes, when the status is known
};

std::size_t writeBody(char* data, std::size_t size, std::size_t count, void* user) {
    auto* down = static_cast<Download*>(user);
    if (down->sink != nullptr && !down->toSink) {
        long status = 0;
        ::curl_easy_getinfo(down->handle, CURLINFO_RESPONSE_CODE, &status);
        down->toSink = status >= 200 && status < 300;   // an error's XML stays in the body
    }
    if (down->toSink.value_or(false))
        down->sink->take(std::string_view(data, size * count));
    else
        down->body->append(data, size * count);
    return size * count;
}

std::string trim(std::string_view s) {
    auto first = s.find_first_not_of(" \t\r\n");
    if (first == std::string_view::npos) return {};
    auto last = s.find_last_not_of(" \t\r\n");
    return std::string(s.substr(first, last - first + 1));
}

std::size_t readHeader(char* data, std::size_t size, std::size_t count, void* user) {
    auto* headers = static_cast<std::map<std::string, std::string>*>(user);
    std::string_view line(data, size * count);
    // A new status line (after "100 Continue") starts the headers over.
    if (line.starts_with("HTTP/")) {
        headers->clear();
    } else if (auto colon = line.find(':'); colon != std::string_view::npos) {
        std::string name = trim(line.substr(0, colon));
        std::transform(name.begin(), name.end(), name.begin(),
                       [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        (*headers)[name] = trim(line.substr(colon + 1));
    }
    return size * count;
}

// Options every request has; false if curl refused one (then the message names it).
bool setCommon(CURL* h, const HttpRequest& request, char* errorBuffer, std::string& failure) {
    auto check = [&](CURLcode code, const char* what) {
        if (code != CURLE_OK && failure.empty()) failure = std::string(what) + ": " + ::curl_easy_strerror(code);
    };
    check(::curl_easy_setopt(h, CURLOPT_URL, request.url.c_str()), "URL");
    check(::curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errorBuffer), "ERRORBUFFER");
    check(::curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L), "NOSIGNAL");   // threads: no SIGALRM
    check(::curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https"), "PROTOCOLS_STR");
    check(::curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L), "SSL_VERIFYPEER");
    check(::curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L), "SSL_VERIFYHOST");
    if (!request.caFile.empty()) check(::curl_easy_setopt(h, CURLOPT_CAINFO, request.caFile.c_str()), "CAINFO");
    check(::curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, request.timeoutMs), "TIMEOUT_MS");
    check(::curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, request.connectTimeoutMs), "CONNECTTIMEOUT_MS");
    // The path was encoded as it was signed; curl must not squash "/./" or "/../" in a key.
    check(::curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L), "PATH_AS_IS");
    check(::curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L), "FOLLOWLOCATION");
    return failure.empty();
}

// A PUT's and a POST's body comes from readBody (memory or file); seekBody rewinds it when
// curl must send it again.
CURLcode setBodyReader(CURL* h, Upload& upload) {
    CURLcode code = ::curl_easy_setopt(h, CURLOPT_READFUNCTION, &readBody);
    if (code == CURLE_OK) code = ::curl_easy_setopt(h, CURLOPT_READDATA, &upload);
    if (code == CURLE_OK) code = ::curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, &seekBody);
    if (code == CURLE_OK) code = ::curl_easy_setopt(h, CURLOPT_SEEKDATA, &upload);
    return code;
}

bool setMethod(CURL* h, const HttpRequest& request, Upload& upload, std::string& failure) {
    CURLcode code = CURLE_OK;
    if (request.method == "HEAD") {
        code = ::curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (request.method == "GET") {
        code = ::curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    } else if (request.method == "PUT") {
        code = ::curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        if (code == CURLE_OK) code = ::curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(upload.size));
        // curl's largest upload buffer: a segment goes out in 2 MiB reads and sends, not 64 KiB.
        if (code == CURLE_OK) code = ::curl_easy_setopt(h, CURLOPT_UPLOAD_BUFFERSIZE, 2L << 20);
        if (code == CURLE_OK) code = setBodyReader(h, upload);
    } else if (request.method == "POST") {
        // The multipart calls: the body (the completion's XML, or none) through the same reader,
        // with its Content-Length; the signed Content-Type replaces curl's form default.
        code = ::curl_easy_setopt(h, CURLOPT_POST, 1L);
        if (code == CURLE_OK) code = ::curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(upload.size));
        if (code == CURLE_OK) code = setBodyReader(h, upload);
    } else {
        code = ::curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, request.method.c_str());
    }
    if (code != CURLE_OK) failure = "method " + request.method + ": " + ::curl_easy_strerror(code);
    return code == CURLE_OK;
}

// curl's 2 MiB upload buffer on a 2 MiB boundary (one transparent huge page where the kernel has
// one): FileRangeReader reads a segment into it with O_DIRECT, which needs aligned memory, instead
// of into its own buffer and then copying (22 % of the archiver's CPU). realloc may move a block
// off the boundary; the reader then copies, as it would anyway.
// curl frees its upload buffer after every request (setting CURLOPT_UPLOAD_BUFFERSIZE does), and
// a fresh one costs a huge page's fault and zeroing inside the first O_DIRECT read (4 %): a few
// freed large blocks are kept for the next request.
constexpr std::size_t kAlignedFrom = 1u << 20;
constexpr std::size_t kHugePage = 2u << 20;
constexpr std::size_t kKeptBlocks = 8;

struct LargeBlocks {
    std::mutex mutex;
    std::vector<void*> kept;   // freed by curl, each kHugePage-aligned, usable size >= kAlignedFrom
};
LargeBlocks& largeBlocks() {
    static auto* blocks = new LargeBlocks;   // never destroyed: curl may free after exit handlers
    return *blocks;
}

bool isLargeBlock(void* block) {
    return block != nullptr && reinterpret_cast<std::uintptr_t>(block) % kHugePage == 0 &&
           ::malloc_usable_size(block) >= kAlignedFrom;
}

void* curlMalloc(std::size_t size) {
    if (size < kAlignedFrom) return std::malloc(size);
    {
        auto& blocks = largeBlocks();
        std::lock_guard lock(blocks.mutex);
        auto fits = std::find_if(blocks.kept.begin(), blocks.kept.end(),
                                 [size](void* b) { return ::malloc_usable_size(b) >= size; });
        if (fits != blocks.kept.end()) {
            void* block = *fits;
            blocks.kept.erase(fits);
            return block;
        }
    }
    std::size_t rounded = (size + kHugePage - 1) & ~(kHugePage - 1);
    void* block = std::aligned_alloc(kHugePage, rounded);
    if (block != nullptr) ::madvise(block, rounded, MADV_HUGEPAGE);
    return block;
}
void curlFree(void* block) {
    if (isLargeBlock(block)) {
        auto& blocks = largeBlocks();
        std::lock_guard lock(blocks.mutex);
        if (blocks.kept.size() < kKeptBlocks) {
            blocks.kept.push_back(block);
            return;
        }
    }
    std::free(block);
}
void* curlRealloc(void* block, std::size_t size) { return std::realloc(block, size); }
char* curlStrdup(const char* text) { return ::strdup(text); }
void* curlCalloc(std::size_t count, std::size_t size) { return std::calloc(count, size); }

// At most this many idle handles (and their connections) are kept: more than --parallel needs.
constexpr std::size_t kMaxIdle = 8;

}  // namespace

void initCurlOnce() {
    static std::once_flag once;
    std::call_once(once, [] {
        ::curl_global_init_mem(CURL_GLOBAL_DEFAULT, &curlMalloc, &curlFree, &curlRealloc, &curlStrdup,
                               &curlCalloc);
    });
}

struct HttpConnections::Handle {
    Easy easy;
};

// TLS sessions and the DNS cache, shared by the handles so that a handle's first connection
// resumes a session another one made; curl locks each kind of data through these callbacks.
struct HttpConnections::Share {
    CURLSH* share = nullptr;
    std::array<std::mutex, CURL_LOCK_DATA_LAST> locks;

    Share() {
        share = ::curl_share_init();
        if (share == nullptr) throw std::runtime_error("curl_share_init failed");
        auto check = [this](CURLSHcode code, const char* what) {
            if (code != CURLSHE_OK)
                throw std::runtime_error(std::string("curl share option ") + what + ": " +
                                         ::curl_share_strerror(code));
        };
        check(::curl_share_setopt(share, CURLSHOPT_LOCKFUNC, &lock), "LOCKFUNC");
        check(::curl_share_setopt(share, CURLSHOPT_UNLOCKFUNC, &unlock), "UNLOCKFUNC");
        check(::curl_share_setopt(share, CURLSHOPT_USERDATA, this), "USERDATA");
        check(::curl_share_setopt(share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION), "SSL_SESSION");
        check(::curl_share_setopt(share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS), "DNS");
    }
    ~Share() { ::curl_share_cleanup(share); }
    Share(const Share&) = delete;
    Share& operator=(const Share&) = delete;

    static void lock(CURL*, curl_lock_data data, curl_lock_access, void* user) {
        static_cast<Share*>(user)->locks[static_cast<std::size_t>(data)].lock();
    }
    static void unlock(CURL*, curl_lock_data data, void* user) {
        static_cast<Share*>(user)->locks[static_cast<std::size_t>(data)].unlock();
    }
};

HttpConnections::HttpConnections() {
    initCurlOnce();
    share_ = std::make_unique<Share>();
}

HttpConnections::~HttpConnections() {
    idle_.clear();   // every handle leaves the share before it is cleaned up
    share_.reset();
}

std::unique_ptr<HttpConnections::Handle> HttpConnections::take() {
    {
        std::lock_guard lock(idleMutex_);
        if (!idle_.empty()) {
            auto handle = std::move(idle_.back());
            idle_.pop_back();
            return handle;
        }
    }
    auto handle = std::make_unique<Handle>();
    handle->easy.reset(::curl_easy_init());
    if (!handle->easy) return nullptr;
    return handle;
}

void HttpConnections::giveBack(std::unique_ptr<Handle> handle) {
    // The options pointed into the finished call (its header list, error buffer, body); the
    // connection, the share and curl's buffers stay.
    ::curl_easy_reset(handle->easy.get());
    std::lock_guard lock(idleMutex_);
    if (idle_.size() < kMaxIdle) idle_.push_back(std::move(handle));
}

HttpOutcome HttpConnections::perform(const HttpRequest& request) {
    HttpOutcome out;
    auto handle = take();
    if (!handle) {
        out.transportError = "curl_easy_init failed";
        return out;
    }
    CURL* h = handle->easy.get();
    HeaderList headers;
    bool listOk = true;
    for (const auto& [name, value] : request.headers) listOk = listOk && append(headers, name + ": " + value);
    // No "Expect: 100-continue": one round trip less, and a 1 s stall on servers that ignore it.
    listOk = listOk && append(headers, "Expect:");
    if (!listOk) {
        out.transportError = "out of memory building the header list";
        return out;
    }

    Upload upload{request.body, std::nullopt, request.file ? request.file->length : request.body.size(),
                  0, request.limiter, 0};
    if (request.file) upload.file.emplace(*request.file);
    char errorBuffer[CURL_ERROR_SIZE] = {};
    std::string failure;
    if (!setCommon(h, request, errorBuffer, failure) || !setMethod(h, request, upload, failure)) {
        out.transportError = "curl option " + failure;
        return out;
    }
    if (CURLcode code = ::curl_easy_setopt(h, CURLOPT_SHARE, share_->share); code != CURLE_OK) {
        out.transportError = std::string("curl option SHARE: ") + ::curl_easy_strerror(code);
        return out;
    }
    ::curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers.get());
    ::curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, &readHeader);
    ::curl_easy_setopt(h, CURLOPT_HEADERDATA, &out.response.headers);
    Download download{&out.response.body, request.sink, h, std::nullopt};
    if (request.sink != nullptr) {
        request.sink->restart();
        // A streamed body arrives in 1 MiB reads, not curl's default 16 KiB.
        ::curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 1L << 20);
    }
    ::curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &writeBody);
    ::curl_easy_setopt(h, CURLOPT_WRITEDATA, &download);

    CURLcode code = ::curl_easy_perform(h);
    long connects = 0;
    ::curl_easy_getinfo(h, CURLINFO_NUM_CONNECTS, &connects);
    connectionsOpened_ += static_cast<std::uint64_t>(connects);
    ++requests_;
    if (code != CURLE_OK) {
        // The handle goes with its connection (curl_easy_cleanup closes it): whatever failed, a
        // timeout, a reset, a refused certificate, an aborted body, the retry connects afresh.
        out.transportError = errorBuffer[0] != '\0' ? errorBuffer : ::curl_easy_strerror(code);
        out.tlsRefused = code == CURLE_PEER_FAILED_VERIFICATION || code == CURLE_SSL_CACERT_BADFILE ||
                         code == CURLE_SSL_CERTPROBLEM;
        if (upload.readErrno != 0)
            out.transportError += std::string(" (reading the body: ") + std::strerror(upload.readErrno) + ")";
        return out;
    }
    ::curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &out.response.status);
    giveBack(std::move(handle));
    return out;
}

}  // namespace splicegate::s3
