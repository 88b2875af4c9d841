#include "tests/support/PatternStream.h"

#include <cstring>
#include <vector>

#include "tests/support/Sha256.h"

namespace splicegate::test {

PatternStream::PatternStream(uint64_t seed) noexcept {
    // splitmix64 of the seed: never leaves xorshift with the all-zero state.
    uint64_t z = seed + 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    state_ = z != 0 ? z : 0x2545f4914f6cdd1dULL;
}

uint64_t PatternStream::next() noexcept {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return state_ * 0x2545f4914f6cdd1dULL;
}

void PatternStream::fill(uint8_t* out, std::size_t size) noexcept {
    while (size > 0 && carryLeft_ > 0) {
        *out++ = static_cast<uint8_t>(carry_);
        carry_ >>= 8;
        --carryLeft_;
        --size;
    }
    while (size >= 8) {
        uint64_t word = next();
        // Byte order of the stream is "lowest byte first", matching the carry path above.
        for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(word >> (8 * i));
        out += 8;
        size -= 8;
    }
    if (size > 0) {
        carry_ = next();
        carryLeft_ = 8;
        while (size > 0) {
            *out++ = static_cast<uint8_t>(carry_);
            carry_ >>= 8;
            --carryLeft_;
            --size;
        }
    }
}

std::string patternSha256(uint64_t seed, uint64_t size) {
    PatternStream stream(seed);
    Sha256 sha;
    std::vector<uint8_t> buffer(1 << 16);
    while (size > 0) {
        std::size_t n = size < buffer.size() ? static_cast<std::size_t>(size) : buffer.size();
        stream.fill(buffer.data(), n);
        sha.update(buffer.data(), n);
        size -= n;
    }
    return sha.finishHex();
}

}  // namespace splicegate::test
