#include "audit/Crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace splicegate::audit {
namespace {

constexpr std::uint32_t kPolynomial = 0x82F63B78;  // reflected Castagnoli

// kTables[k][b]: the CRC of byte b followed by k zero bytes (slicing-by-8).
constexpr std::array<std::array<std::uint32_t, 256>, 8> makeTables() {
    std::array<std::array<std::uint32_t, 256>, 8> tables{};
    for (std::uint32_t b = 0; b < 256; ++b) {
        std::uint32_t crc = b;
        for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1) ? kPolynomial : 0);
        tables[0][b] = crc;
    }
    for (std::size_t k = 1; k < 8; ++k)
        for (std::uint32_t b = 0; b < 256; ++b)
            tables[k][b] = (tables[k - 1][b] >> 8) ^ tables[0][tables[k - 1][b] & 0xff];
    return tables;
}

constexpr auto kTables = makeTables();

#if defined(__x86_64__)
bool detectHardware() noexcept {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2");
}
#endif

}  // namespace

std::uint32_t crc32cPortable(std::uint32_t crc, const void* data, std::size_t size) noexcept {
    auto* p = static_cast<const std::uint8_t*>(data);
    crc = ~crc;
    while (size >= 8) {
        std::uint32_t low = 0, high = 0;
        std::memcpy(&low, p, 4);  // little-endian host (x86-64, arm64)
        std::memcpy(&high, p + 4, 4);
        low ^= crc;
        crc = kTables[7][low & 0xff] ^ kTables[6][(low >> 8) & 0xff] ^
              kTables[5][(low >> 16) & 0xff] ^ kTables[4][low >> 24] ^ kTables[3][high & 0xff] ^
              kTables[2][(high >> 8) & 0xff] ^ kTables[1][(high >> 16) & 0xff] ^
              kTables[0][high >> 24];
        p += 8;
        size -= 8;
    }
    while (size-- > 0) crc = (crc >> 8) ^ kTables[0][(crc ^ *p++) & 0xff];
    return ~crc;
}

#if defined(__x86_64__)
// The crc32 instruction has a latency of 3 cycles and a throughput of 1: three independent
// streams over three adjacent blocks keep it busy, and their results are joined by "shifting"
// the earlier block's CRC over the later block's length (appending that many zero bytes, a
// linear map on the 32-bit register, applied with four byte-indexed tables).

// A 32x32 matrix over GF(2): column i is the image of bit i.
using Gf2Matrix = std::array<std::uint32_t, 32>;

constexpr std::uint32_t apply(const Gf2Matrix& matrix, std::uint32_t vector) {
    std::uint32_t sum = 0;
    for (int i = 0; vector != 0; ++i, vector >>= 1)
        if (vector & 1) sum ^= matrix[static_cast<std::size_t>(i)];
    return sum;
}

constexpr Gf2Matrix squared(const Gf2Matrix& matrix) {
    Gf2Matrix result{};
    for (std::size_t i = 0; i < 32; ++i) result[i] = apply(matrix, matrix[i]);
    return result;
}

// The map "append `bytes` zero bytes" on the raw (not inverted) CRC register.
constexpr Gf2Matrix zeroBytesOperator(std::size_t bytes) {
    Gf2Matrix oneBit{};  // one zero bit: shift right, reduce by the polynomial
    oneBit[0] = kPolynomial;
    for (std::size_t i = 1; i < 32; ++i) oneBit[i] = 1u << (i - 1);
    Gf2Matrix op = squared(squared(squared(oneBit)));  // one zero byte
    Gf2Matrix result{};
    for (std::size_t i = 0; i < 32; ++i) result[i] = 1u << i;  // identity
    for (; bytes != 0; bytes >>= 1, op = squared(op))
        if (bytes & 1) {
            Gf2Matrix product{};
            for (std::size_t i = 0; i < 32; ++i) product[i] = apply(op, result[i]);
            result = product;
        }
    return result;
}

using ShiftTables = std::array<std::array<std::uint32_t, 256>, 4>;

constexpr ShiftTables makeShiftTables(std::size_t bytes) {
    Gf2Matrix op = zeroBytesOperator(bytes);
    ShiftTables tables{};
    for (std::uint32_t b = 0; b < 256; ++b)
        for (std::size_t k = 0; k < 4; ++k) tables[k][b] = apply(op, b << (8 * k));
    return tables;
}

constexpr std::size_t kLongBlock = 8192;  // per stream; three streams per round
constexpr std::size_t kShortBlock = 256;
const ShiftTables kShiftLong = makeShiftTables(kLongBlock);
const ShiftTables kShiftShort = makeShiftTables(kShortBlock);

std::uint32_t shift(const ShiftTables& tables, std::uint32_t crc) noexcept {
    return tables[0][crc & 0xff] ^ tables[1][(crc >> 8) & 0xff] ^ tables[2][(crc >> 16) & 0xff] ^
           tables[3][crc >> 24];
}

__attribute__((target("sse4.2"))) std::uint64_t threeStreams(std::uint64_t crc,
                                                             const std::uint8_t*& p,
                                                             std::size_t& size, std::size_t block,
                                                             const ShiftTables& tables) noexcept {
    while (size >= 3 * block) {
        std::uint64_t crc1 = 0, crc2 = 0;
        for (std::size_t i = 0; i < block; i += 8) {
            std::uint64_t a = 0, b = 0, c = 0;
            std::memcpy(&a, p + i, 8);
            std::memcpy(&b, p + block + i, 8);
            std::memcpy(&c, p + 2 * block + i, 8);
            crc = _mm_crc32_u64(crc, a);
            crc1 = _mm_crc32_u64(crc1, b);
            crc2 = _mm_crc32_u64(crc2, c);
        }
        crc = shift(tables, static_cast<std::uint32_t>(crc)) ^ crc1;
        crc = shift(tables, static_cast<std::uint32_t>(crc)) ^ crc2;
        p += 3 * block;
        size -= 3 * block;
    }
    return crc;
}

__attribute__((target("sse4.2"))) std::uint32_t crc32cHardware(std::uint32_t crc, const void* data,
                                                               std::size_t size) noexcept {
    auto* p = static_cast<const std::uint8_t*>(data);
    std::uint64_t state = ~crc;
    while (size > 0 && (reinterpret_cast<std::uintptr_t>(p) & 7) != 0) {
        state = _mm_crc32_u8(static_cast<std::uint32_t>(state), *p++);
        --size;
    }
    state = threeStreams(state, p, size, kLongBlock, kShiftLong);
    state = threeStreams(state, p, size, kShortBlock, kShiftShort);
    while (size >= 8) {
        std::uint64_t word = 0;
        std::memcpy(&word, p, 8);
        state = _mm_crc32_u64(state, word);
        p += 8;
        size -= 8;
    }
    while (size-- > 0) state = _mm_crc32_u8(static_cast<std::uint32_t>(state), *p++);
    return ~static_cast<std::uint32_t>(state);
}

bool crc32cHardwareAvailable() noexcept {
    static const bool available = detectHardware();
    return available;
}
#else
std::uint32_t crc32cHardware(std::uint32_t crc, const void* data, std::size_t size) noexcept {
    return crc32cPortable(crc, data, size);
}

bool crc32cHardwareAvailable() noexcept {
    return false;
}
#endif

std::uint32_t crc32c(std::uint32_t crc, const void* data, std::size_t size) noexcept {
    return crc32cHardwareAvailable() ? crc32cHardware(crc, data, size)
                                     : crc32cPortable(crc, data, size);
}

}  // namespace splicegate::audit
