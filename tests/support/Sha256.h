#pragma once
// SHA-256 of a byte stream through OpenSSL's EVP interface (libcrypto), so both ends of a relayed
// transfer can be compared by digest (docs/kernel-notes.md §10: counts alone miss corruption).
// Thread affinity: one object per thread. Error contract: OpenSSL failures throw
// std::runtime_error.
#include <openssl/evp.h>

#include <cstddef>
#include <string>

namespace splicegate::test {

class Sha256 {
  public:
    Sha256();
    Sha256(const Sha256&) = delete;
    Sha256& operator=(const Sha256&) = delete;
    ~Sha256();

    void update(const void* data, std::size_t size);
    // Lower-case hex digest of everything passed to update(); the object starts over afterwards.
    std::string finishHex();

  private:
    EVP_MD_CTX* ctx_;
};

}  // namespace splicegate::test
