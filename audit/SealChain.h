#pragma once
// The audit log's hash chain (audit/FORMAT.md "Hash chain"): every SegmentSealed record carries
// a digest over its segment's index bytes and its predecessor's digest, so a removed, inserted,
// altered or reordered record or segment breaks the chain. With a key (--audit-hmac-key-file)
// the digest is HMAC-SHA256, which someone with write access but without the key cannot forge;
// without one it is plain SHA-256 (finds edits by anyone who does not recompute the chain).
// Thread affinity: ChainKey is immutable and shared between threads; a ChainHasher belongs to
// one thread. Error contract: ChainKey::fromFile throws std::system_error/runtime_error naming
// the file; ChainHasher throws std::bad_alloc when OpenSSL cannot allocate its context.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

typedef struct evp_mac_ctx_st EVP_MAC_CTX;
typedef struct evp_md_ctx_st EVP_MD_CTX;

namespace splicegate::audit {

using Digest = std::array<std::uint8_t, 32>;
using KeyId = std::array<std::uint8_t, 8>;

constexpr std::uint8_t kChainSha256 = 0;
constexpr std::uint8_t kChainHmacSha256 = 1;

// Who loads a key file, which decides the rules it must meet and the option its errors name.
enum class KeyFileUse {
    Daemon,    // --audit-hmac-key-file: owned by root or the daemon's user, mode 0600 or 0400
    Verifier,  // splicegate-audit --key-file: an auditor's own copy, not accessible by others
};

class ChainKey {
  public:
    // The whole file is the key (32 to 4096 bytes); a regular file, never a symlink, meeting
    // `use`'s rules. Throws naming the option and the file.
    static std::shared_ptr<const ChainKey> fromFile(const std::string& path,
                                                    KeyFileUse use = KeyFileUse::Daemon);
    static std::shared_ptr<const ChainKey> fromBytes(std::string bytes);

    const std::string& bytes() const noexcept { return bytes_; }
    // First 8 bytes of HMAC(key, "splicegate audit key id"): names the key in each seal so that
    // verify can tell a wrong key from an altered log without revealing the key.
    const KeyId& id() const noexcept { return id_; }

  private:
    explicit ChainKey(std::string bytes);
    std::string bytes_;
    KeyId id_{};
};

// HMAC-SHA256 under `key`, or SHA-256 when `key` is null. Move-only.
class ChainHasher {
  public:
    explicit ChainHasher(const ChainKey* key);
    ~ChainHasher();
    ChainHasher(ChainHasher&& other) noexcept;
    ChainHasher& operator=(ChainHasher&& other) noexcept;
    ChainHasher(const ChainHasher&) = delete;
    ChainHasher& operator=(const ChainHasher&) = delete;

    void update(const void* data, std::size_t size) noexcept;
    // The digest of everything updated so far; the hasher is spent afterwards.
    Digest finish() noexcept;

  private:
    EVP_MAC_CTX* mac_ = nullptr;
    EVP_MD_CTX* md_ = nullptr;
};

std::string hexText(const std::uint8_t* bytes, std::size_t size);

}  // namespace splicegate::audit
