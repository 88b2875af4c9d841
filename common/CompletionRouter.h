#pragma once
// Routes each completion of a ring to the component that submitted it, by the owner field of
// its CompletionTag: one table, `owner -> handler`, instead of op-code ranges. The handler gets
// the decoded tag and the CQE; whether the tag's slot + generation still name something live
// (a stale completion is dropped) is the handler's to check, since only it holds the slots.
// No allocation: a handler is an object pointer and a member function bound at compile time.
#include <liburing.h>

#include <array>
#include <cstdint>

#include "common/CompletionTag.h"

namespace splicegate {

class CompletionRouter {
  public:
    using Handler = void (*)(void* target, CompletionTag tag, const io_uring_cqe& cqe);

    // Completions of `owner` go to `(target.*Method)(CompletionTag, const io_uring_cqe&)`.
    template <auto Method, typename Target>
    void route(RingOwner owner, Target& target) noexcept {
        routes_[index(owner)] =
            Route{&target, [](void* object, CompletionTag tag, const io_uring_cqe& cqe) {
                      (static_cast<Target*>(object)->*Method)(tag, cqe);
                  }};
    }
    void route(RingOwner owner, void* target, Handler handler) noexcept {
        routes_[index(owner)] = Route{target, handler};
    }
    void unroute(RingOwner owner) noexcept { routes_[index(owner)] = Route{}; }
    bool routes(RingOwner owner) const noexcept {
        return index(owner) < routes_.size() && routes_[index(owner)].handler != nullptr;
    }

    // Hands `cqe` to its owner's handler. False when no handler is routed for that owner (the
    // completion is dropped and counted in unrouted()).
    bool dispatch(const io_uring_cqe& cqe) noexcept {
        CompletionTag tag = CompletionTag::decode(cqe.user_data);
        if (!routes(tag.owner)) {
            ++unrouted_;
            return false;
        }
        const Route& route = routes_[index(tag.owner)];
        route.handler(route.target, tag, cqe);
        return true;
    }
    std::uint64_t unrouted() const noexcept { return unrouted_; }

  private:
    struct Route {
        void* target = nullptr;
        Handler handler = nullptr;
    };
    static constexpr std::size_t index(RingOwner owner) noexcept {
        return static_cast<std::size_t>(owner);
    }

    std::array<Route, kRingOwnerCount> routes_{};
    std::uint64_t unrouted_ = 0;
};

}  // namespace splicegate
