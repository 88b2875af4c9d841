#pragma once
// The io_uring user_data codec shared by every ring owner: the owner (who routes the completion),
// the owner's operation code, a direction, a slot index and the slot's generation, packed into
// 64 bits. A completion names its target by slot + generation, never by pointer: when the slot
// was reused (generation moved on) the completion is stale and dropped, so a late CQE can never
// reach an object that is gone.
//
// Layout: owner (4 bits) | direction (4) | op (8) | generation (16) | slot (32).
// Op codes are the owner's: each owner defines its own enum over std::uint8_t, and since the
// owner is part of the tag two owners' codes may overlap (no op-range conventions).
#include <cstdint>
#include <type_traits>

namespace splicegate {

// Every component that submits to a ring. A completion is routed by this field alone
// (common/CompletionRouter.h).
enum class RingOwner : std::uint8_t {
    Worker = 0,      // the worker's own ops: control, timers, accept, connect, client watch
    Mover = 1,       // the splice lane's movers
    BufferLane = 2,  // the buffer lane (provided-buffer recv, send, socket table)
    AuditTap = 3,    // the audit tap's group commit (the splice writer's sync chain carries it)
    AuditLog = 4,    // the audit writers' own disk work (audit/AuditLogOps.h)
    AdminServer = 5,
    Test = 6,  // tests' own submissions
};
inline constexpr unsigned kRingOwnerCount = 7;
inline constexpr unsigned kMaxDirection = 15;  // the 4 bits a direction has

// An owner's op enum (or a plain std::uint8_t code) fits the tag's 8-bit op field.
template <typename Op>
concept CompletionOp = (std::is_enum_v<Op> || std::is_integral_v<Op>)&&sizeof(Op) == 1;

struct CompletionTag {
    std::uint8_t op = 0;
    std::uint8_t direction = 0;  // 0..kMaxDirection
    std::uint16_t generation = 0;
    std::uint32_t slot = 0;
    RingOwner owner = RingOwner::Worker;

    // A tag of `owner`.
    template <CompletionOp Op>
    static constexpr CompletionTag of(RingOwner owner, Op code, std::uint32_t slot = 0,
                                      std::uint16_t generation = 0,
                                      std::uint8_t direction = 0) noexcept {
        return CompletionTag{static_cast<std::uint8_t>(code), direction, generation, slot, owner};
    }
    // A worker tag (RingOwner::Worker), the form the worker's own ops use.
    template <CompletionOp Op>
    static constexpr CompletionTag make(Op code, std::uint32_t slot = 0,
                                        std::uint16_t generation = 0,
                                        std::uint8_t direction = 0) noexcept {
        return of(RingOwner::Worker, code, slot, generation, direction);
    }

    constexpr std::uint64_t encode() const noexcept {
        return static_cast<std::uint64_t>(owner) << 60 |
               static_cast<std::uint64_t>(direction & kMaxDirection) << 56 |
               static_cast<std::uint64_t>(op) << 48 | static_cast<std::uint64_t>(generation) << 32 |
               slot;
    }

    static constexpr CompletionTag decode(std::uint64_t userData) noexcept {
        return CompletionTag{static_cast<std::uint8_t>(userData >> 48),
                             static_cast<std::uint8_t>((userData >> 56) & kMaxDirection),
                             static_cast<std::uint16_t>(userData >> 32),
                             static_cast<std::uint32_t>(userData),
                             static_cast<RingOwner>(userData >> 60)};
    }

    template <CompletionOp Op>
    constexpr Op opAs() const noexcept {
        return static_cast<Op>(op);
    }
    template <CompletionOp Op>
    constexpr CompletionTag withOp(Op code) const noexcept {
        CompletionTag tag = *this;
        tag.op = static_cast<std::uint8_t>(code);
        return tag;
    }
    constexpr CompletionTag withSlot(std::uint32_t index) const noexcept {
        CompletionTag tag = *this;
        tag.slot = index;
        return tag;
    }

    friend constexpr bool operator==(const CompletionTag&, const CompletionTag&) = default;
};

static_assert(kRingOwnerCount <= 16, "the owner has 4 bits");
static_assert(static_cast<unsigned>(RingOwner::Test) + 1 == kRingOwnerCount);
static_assert(CompletionTag::decode(
                  CompletionTag{0xa5, 15, 0xbeef, 0xfffffffe, RingOwner::AdminServer}.encode()) ==
              CompletionTag{0xa5, 15, 0xbeef, 0xfffffffe, RingOwner::AdminServer});
static_assert(CompletionTag::decode(CompletionTag{0xff, 0, 0, 0, RingOwner::Test}.encode()).owner ==
              RingOwner::Test);
// The direction cannot spill into the owner.
static_assert(CompletionTag{0, 0xff, 0, 0, RingOwner::Worker}.encode() >> 60 == 0);

}  // namespace splicegate
