#include "tests/support/Sha256.h"

#include <stdexcept>

namespace splicegate::test {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
    if (ctx_ == nullptr || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) {
        EVP_MD_CTX_free(ctx_);
        throw std::runtime_error("EVP_DigestInit_ex(sha256) failed");
    }
}

Sha256::~Sha256() {
    EVP_MD_CTX_free(ctx_);
}

void Sha256::update(const void* data, std::size_t size) {
    if (size == 0) return;
    if (EVP_DigestUpdate(ctx_, data, size) != 1)
        throw std::runtime_error("EVP_DigestUpdate failed");
}

std::string Sha256::finishHex() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    if (EVP_DigestFinal_ex(ctx_, digest, &length) != 1) {
        throw std::runtime_error("EVP_DigestFinal_ex failed");
    }
    if (EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) {
        throw std::runtime_error("EVP_DigestInit_ex(sha256) failed");
    }
    static constexpr char kHex[] = "0123456789abcdef";
    std::string hex;
    hex.reserve(length * 2);
    for (unsigned int i = 0; i < length; ++i) {
        hex.push_back(kHex[digest[i] >> 4]);
        hex.push_back(kHex[digest[i] & 0xf]);
    }
    return hex;
}

}  // namespace splicegate::test
