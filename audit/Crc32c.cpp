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
              kTables[5][(low >> 16) & 0xff] ^ kTables[4][low >> 24] ^
              kTables[3][high & 0xff] ^ kTables[2][(high >> 8) & 0xff] ^
              kTables[1][(high >> 16) & 0xff] ^ kTables[0][high >> 24];
        p += 8;
        size -= 8;
    }
    while (size-- > 0) crc = (crc >> 8) ^ kTables[0][(crc ^ *p++) & 0xff];
    return ~crc;
}

#if defined(__x86_64__)
// One dependent crc32 chain: about 8 bytes per 3 cycles, several GB/s, well above the disk. The
// three-stream interleave (and its CRC combine step) would triple that but is not needed here.
__attribute__((target("sse4.2"))) std::uint32_t crc32cHardware(std::uint32_t crc,
                                                               const void* data,
                                                               std::size_t size) noexcept {
    auto* p = static_cast<const std::uint8_t*>(data);
    std::uint64_t state = ~crc;
    while (size > 0 && (reinterpret_cast<std::uintptr_t>(p) & 7) != 0) {
        state = _mm_crc32_u8(static_cast<std::uint32_t>(state), *p++);
        --size;
    }
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
