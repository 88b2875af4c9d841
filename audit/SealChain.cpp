#include "audit/SealChain.h"

#include <fcntl.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <new>
#include <stdexcept>
#include <utility>

#include "common/Error.h"
#include "common/UniqueFd.h"

namespace splicegate::audit {
namespace {

constexpr std::size_t kMinKeyBytes = 32;  // HMAC-SHA256: a key as long as its output
constexpr std::size_t kMaxKeyBytes = 4096;

EVP_MAC_CTX* newHmac(const std::string& key) {
    EVP_MAC* mac = ::EVP_MAC_fetch(nullptr, "HMAC", nullptr);
    if (mac == nullptr) throw std::bad_alloc();
    EVP_MAC_CTX* ctx = ::EVP_MAC_CTX_new(mac);
    ::EVP_MAC_free(mac);  // the context keeps its own reference
    if (ctx == nullptr) throw std::bad_alloc();
    char digestName[] = "SHA256";
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digestName, 0),
                           OSSL_PARAM_construct_end()};
    if (::EVP_MAC_init(ctx, reinterpret_cast<const unsigned char*>(key.data()), key.size(),
                       params) != 1) {
        ::EVP_MAC_CTX_free(ctx);
        throw std::bad_alloc();
    }
    return ctx;
}

}  // namespace

ChainKey::ChainKey(std::string bytes) : bytes_(std::move(bytes)) {
    ChainHasher hasher(this);
    static constexpr char kLabel[] = "splicegate audit key id";
    hasher.update(kLabel, sizeof kLabel - 1);
    auto digest = hasher.finish();
    std::copy_n(digest.begin(), id_.size(), id_.begin());
}

std::shared_ptr<const ChainKey> ChainKey::fromBytes(std::string bytes) {
    return std::shared_ptr<const ChainKey>(new ChainKey(std::move(bytes)));
}

namespace {

std::string modeText(mode_t mode) {
    char text[8];
    std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
    return text;
}

// What a key file must be before its bytes are trusted (SealChain.h, ChainKey::fromFile).
void checkKeyFileStatus(const struct stat& st, const std::string& label, KeyFileUse use) {
    if (!S_ISREG(st.st_mode)) throw std::runtime_error(label + " is not a regular file");
    if (use == KeyFileUse::Daemon) {
        if (st.st_uid != 0 && st.st_uid != ::geteuid())
            throw std::runtime_error(label + " is owned by uid " + std::to_string(st.st_uid) +
                                     "; it must be owned by root or by the daemon's user (uid " +
                                     std::to_string(::geteuid()) + ")");
        mode_t mode = st.st_mode & 07777;
        if (mode != 0600 && mode != 0400)
            throw std::runtime_error(label + " has mode " + modeText(st.st_mode) +
                                     "; it must be 0600 or 0400");
    } else if ((st.st_mode & 0007) != 0) {
        throw std::runtime_error(label + " is accessible by others (mode " + modeText(st.st_mode) +
                                 "); make it 0600 or 0400");
    }
    if (st.st_size < static_cast<off_t>(kMinKeyBytes) ||
        st.st_size > static_cast<off_t>(kMaxKeyBytes))
        throw std::runtime_error(label + " holds " + std::to_string(st.st_size) +
                                 " bytes; a key has " + std::to_string(kMinKeyBytes) + " to " +
                                 std::to_string(kMaxKeyBytes));
}

}  // namespace

std::shared_ptr<const ChainKey> ChainKey::fromFile(const std::string& path, KeyFileUse use) {
    const std::string option = use == KeyFileUse::Daemon ? "--audit-hmac-key-file" : "--key-file";
    const std::string label = option + " " + path;
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
    if (!fd) throwErrno(errno, label + ": cannot open");
    struct stat st {};
    checkSys(::fstat(fd.get(), &st), label + ": fstat");
    checkKeyFileStatus(st, label, use);
    std::string bytes(static_cast<std::size_t>(st.st_size), '\0');
    std::size_t done = 0;
    while (done < bytes.size()) {
        ssize_t n = ::read(fd.get(), bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throwErrno(errno, label + ": read");
        if (n == 0) break;
        done += static_cast<std::size_t>(n);
    }
    bytes.resize(done);
    if (bytes.size() < kMinKeyBytes)
        throw std::runtime_error(label + " is shorter than " + std::to_string(kMinKeyBytes) +
                                 " bytes");
    return fromBytes(std::move(bytes));
}

ChainHasher::ChainHasher(const ChainKey* key) {
    if (key != nullptr) {
        mac_ = newHmac(key->bytes());
        return;
    }
    md_ = ::EVP_MD_CTX_new();
    if (md_ == nullptr || ::EVP_DigestInit_ex(md_, ::EVP_sha256(), nullptr) != 1) {
        ::EVP_MD_CTX_free(md_);
        throw std::bad_alloc();
    }
}

ChainHasher::~ChainHasher() {
    ::EVP_MAC_CTX_free(mac_);
    ::EVP_MD_CTX_free(md_);
}

ChainHasher::ChainHasher(ChainHasher&& other) noexcept
    : mac_(std::exchange(other.mac_, nullptr)), md_(std::exchange(other.md_, nullptr)) {}

ChainHasher& ChainHasher::operator=(ChainHasher&& other) noexcept {
    if (this != &other) {
        ::EVP_MAC_CTX_free(mac_);
        ::EVP_MD_CTX_free(md_);
        mac_ = std::exchange(other.mac_, nullptr);
        md_ = std::exchange(other.md_, nullptr);
    }
    return *this;
}

void ChainHasher::update(const void* data, std::size_t size) noexcept {
    if (size == 0) return;
    auto* bytes = static_cast<const unsigned char*>(data);
    if (mac_ != nullptr) ::EVP_MAC_update(mac_, bytes, size);
    if (md_ != nullptr) ::EVP_DigestUpdate(md_, bytes, size);
}

Digest ChainHasher::finish() noexcept {
    Digest digest{};
    if (mac_ != nullptr) {
        std::size_t length = 0;
        ::EVP_MAC_final(mac_, digest.data(), &length, digest.size());
    } else if (md_ != nullptr) {
        unsigned length = 0;
        ::EVP_DigestFinal_ex(md_, digest.data(), &length);
    }
    return digest;
}

std::string hexText(const std::uint8_t* bytes, std::size_t size) {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string text;
    text.reserve(2 * size);
    for (std::size_t i = 0; i < size; ++i) {
        text += kDigits[bytes[i] >> 4];
        text += kDigits[bytes[i] & 15];
    }
    return text;
}

}  // namespace splicegate::audit
