#include "archive/s3/Http.h"

#include <curl/curl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>

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
    std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(size * count, up->size - up->pos));
    if (want == 0) return 0;
    if (up->limiter != nullptr) up->limiter->acquire(want);
    if (!up->file) {
        std::memcpy(buffer, up->memory.data() + up->pos, want);
        up->pos += want;
        return want;
    }
    ssize_t n = up->file->read(buffer, want);
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

std::size_t writeBody(char* data, std::size_t size, std::size_t count, void* user) {
    static_cast<std::string*>(user)->append(data, size * count);
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
        if (code == CURLE_OK) code = ::curl_easy_setopt(h, CURLOPT_READFUNCTION, &readBody);
        if (code == CURLE_OK) code = ::curl_easy_setopt(h, CURLOPT_READDATA, &upload);
        if (code == CURLE_OK) code = ::curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, &seekBody);
        if (code == CURLE_OK) code = ::curl_easy_setopt(h, CURLOPT_SEEKDATA, &upload);
    } else if (request.method == "POST") {
        // The multipart calls: the body (the completion's XML, or none) through the same reader,
        // with its Content-Length; the signed Content-Type replaces curl's form default.
        code = ::curl_easy_setopt(h, CURLOPT_POST, 1L);
        if (code == CURLE_OK) code = ::curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(upload.size));
        if (code == CURLE_OK) code = ::curl_easy_setopt(h, CURLOPT_READFUNCTION, &readBody);
        if (code == CURLE_OK) code = ::curl_easy_setopt(h, CURLOPT_READDATA, &upload);
        if (code == CURLE_OK) code = ::curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, &seekBody);
        if (code == CURLE_OK) code = ::curl_easy_setopt(h, CURLOPT_SEEKDATA, &upload);
    } else {
        code = ::curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, request.method.c_str());
    }
    if (code != CURLE_OK) failure = "method " + request.method + ": " + ::curl_easy_strerror(code);
    return code == CURLE_OK;
}

}  // namespace

void initCurlOnce() {
    static std::once_flag once;
    std::call_once(once, [] { ::curl_global_init(CURL_GLOBAL_DEFAULT); });
}

HttpOutcome perform(const HttpRequest& request) {
    initCurlOnce();
    HttpOutcome out;
    Easy h(::curl_easy_init());
    if (!h) {
        out.transportError = "curl_easy_init failed";
        return out;
    }
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
    if (!setCommon(h.get(), request, errorBuffer, failure) || !setMethod(h.get(), request, upload, failure)) {
        out.transportError = "curl option " + failure;
        return out;
    }
    ::curl_easy_setopt(h.get(), CURLOPT_HTTPHEADER, headers.get());
    ::curl_easy_setopt(h.get(), CURLOPT_HEADERFUNCTION, &readHeader);
    ::curl_easy_setopt(h.get(), CURLOPT_HEADERDATA, &out.response.headers);
    ::curl_easy_setopt(h.get(), CURLOPT_WRITEFUNCTION, &writeBody);
    ::curl_easy_setopt(h.get(), CURLOPT_WRITEDATA, &out.response.body);

    CURLcode code = ::curl_easy_perform(h.get());
    if (code != CURLE_OK) {
        out.transportError = errorBuffer[0] != '\0' ? errorBuffer : ::curl_easy_strerror(code);
        out.tlsRefused = code == CURLE_PEER_FAILED_VERIFICATION || code == CURLE_SSL_CACERT_BADFILE ||
                         code == CURLE_SSL_CERTPROBLEM;
        if (upload.readErrno != 0)
            out.transportError += std::string(" (reading the body: ") + std::strerror(upload.readErrno) + ")";
        return out;
    }
    ::curl_easy_getinfo(h.get(), CURLINFO_RESPONSE_CODE, &out.response.status);
    return out;
}

}  // namespace splicegate::s3
