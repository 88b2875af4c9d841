#pragma once
// Deterministic pseudo-random bytes (xorshift64*, seeded through splitmix64), fast enough to feed
// multi-GiB transfers. The same seed always yields the same stream, however it is chunked, so the
// sender and an independent checker can both compute it.
// Thread affinity: one object per thread. Error contract: none (no failure modes).
#include <cstddef>
#include <cstdint>
#include <string>

namespace splicegate::test {

class PatternStream {
  public:
    explicit PatternStream(uint64_t seed) noexcept;

    // Writes the next `size` bytes of the stream to `out`.
    void fill(uint8_t* out, std::size_t size) noexcept;

  private:
    uint64_t next() noexcept;

    uint64_t state_;
    uint64_t carry_ = 0;      // unused bytes of the last word, lowest first
    unsigned carryLeft_ = 0;  // how many
};

// SHA-256 (hex) of the first `size` bytes of PatternStream(seed).
std::string patternSha256(uint64_t seed, uint64_t size);

}  // namespace splicegate::test
