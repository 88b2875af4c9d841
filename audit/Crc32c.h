#pragma once
// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of audit payloads
// (audit/FORMAT.md "Records", Chunk). Debian ships no C library for it, so it lives here once:
// SSE4.2's crc32 instruction when the CPU has it (checked once at run time with cpuid; three
// interleaved streams joined by a table-driven shift, about 4x one stream), else a portable
// slicing-by-8 table. Both give the same value; tests compare them.
// Thread affinity: none (pure functions). Error contract: none (noexcept).
#include <cstddef>
#include <cstdint>

namespace splicegate::audit {

// Continues `crc` (0 to start) over data[0..size). Chained calls equal one call over the
// concatenation: crc32c(crc32c(0, a), b) == crc32c(0, a + b).
std::uint32_t crc32c(std::uint32_t crc, const void* data, std::size_t size) noexcept;

// The two implementations, for tests and benchmarks. crc32cHardware must only be called when
// crc32cHardwareAvailable() is true.
std::uint32_t crc32cPortable(std::uint32_t crc, const void* data, std::size_t size) noexcept;
std::uint32_t crc32cHardware(std::uint32_t crc, const void* data, std::size_t size) noexcept;
bool crc32cHardwareAvailable() noexcept;

}  // namespace splicegate::audit
