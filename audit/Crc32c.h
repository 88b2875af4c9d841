#pragma once
// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of audit payloads
// (audit/FORMAT.md "Records", Chunk). Debian ships no C library for it, so it lives here once.
// The fastest path the CPU has, checked once at run time with cpuid:
// - folding with AVX-512 VPCLMULQDQ (carry-less multiplies on sixteen 128-bit lanes, 256 bytes
//   a round) for 256 bytes and more; the audit checksums every payload byte, and this is about
//   twice the crc32 instruction's speed where we measured (docs/kernel-notes.md §15);
// - SSE4.2's crc32 instruction: three interleaved streams joined by a table-driven shift, about
//   4x one stream;
// - a portable slicing-by-8 table.
// All give the same value; tests compare them.
// Thread affinity: none (pure functions). Error contract: none (noexcept).
#include <cstddef>
#include <cstdint>

namespace splicegate::audit {

// Continues `crc` (0 to start) over data[0..size). Chained calls equal one call over the
// concatenation: crc32c(crc32c(0, a), b) == crc32c(0, a + b).
std::uint32_t crc32c(std::uint32_t crc, const void* data, std::size_t size) noexcept;

// CRC-32C of A followed by B from crc(A), crc(B) and B's length, in about 40 carry-less
// multiplications modulo the polynomial whatever the length (the archive combines the index's
// chunk CRCs into the data file's instead of reading the bytes again).
std::uint32_t crc32cCombine(std::uint32_t crcA, std::uint32_t crcB, std::uint64_t lengthB) noexcept;

// The implementations, for tests and benchmarks. crc32cHardware (the crc32 instruction) must only
// be called when crc32cHardwareAvailable() is true, crc32cFolding (VPCLMULQDQ, the crc32
// instruction below 256 bytes and for the last bytes) only when crc32cFoldingAvailable() is.
std::uint32_t crc32cPortable(std::uint32_t crc, const void* data, std::size_t size) noexcept;
std::uint32_t crc32cHardware(std::uint32_t crc, const void* data, std::size_t size) noexcept;
std::uint32_t crc32cFolding(std::uint32_t crc, const void* data, std::size_t size) noexcept;
bool crc32cHardwareAvailable() noexcept;
bool crc32cFoldingAvailable() noexcept;

// The path crc32c() takes on this CPU, in words, for the daemon's start-up line.
const char* crc32cPathName() noexcept;

}  // namespace splicegate::audit
