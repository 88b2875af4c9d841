#pragma once
// The io_uring user_data codec shared by every ring owner (workers, the admin server): an
// operation code, a direction, a slot index and the slot's generation, packed into 64 bits.
// A completion names its owner by slot + generation, never by pointer: when the slot was reused
// (generation moved on) the completion is stale and dropped, so a late CQE can never reach an
// object that is gone.
//
// Layout: op (8 bits) | direction (8) | generation (16) | slot (32).
// Op codes are the owner's: each ring owner defines its own enum over std::uint8_t.
#include <cstdint>

namespace splicegate {

struct CompletionTag {
    std::uint8_t op = 0;
    std::uint8_t direction = 0;
    std::uint16_t generation = 0;
    std::uint32_t slot = 0;

    template <typename Op>
    static constexpr CompletionTag make(Op code, std::uint32_t slot = 0,
                                        std::uint16_t generation = 0,
                                        std::uint8_t direction = 0) noexcept {
        return CompletionTag{static_cast<std::uint8_t>(code), direction, generation, slot};
    }

    constexpr std::uint64_t encode() const noexcept {
        return static_cast<std::uint64_t>(op) << 56 | static_cast<std::uint64_t>(direction) << 48 |
               static_cast<std::uint64_t>(generation) << 32 | slot;
    }

    static constexpr CompletionTag decode(std::uint64_t userData) noexcept {
        return CompletionTag{
            static_cast<std::uint8_t>(userData >> 56), static_cast<std::uint8_t>(userData >> 48),
            static_cast<std::uint16_t>(userData >> 32), static_cast<std::uint32_t>(userData)};
    }

    template <typename Op>
    constexpr Op opAs() const noexcept {
        return static_cast<Op>(op);
    }

    friend constexpr bool operator==(const CompletionTag&, const CompletionTag&) = default;
};

static_assert(CompletionTag::decode(CompletionTag{3, 1, 0xbeef, 0x12345678}.encode()) ==
              CompletionTag{3, 1, 0xbeef, 0x12345678});

}  // namespace splicegate
