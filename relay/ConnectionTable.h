#pragma once
// A worker's connections by slot. Completions name a connection by slot and generation
// (common/CompletionTag.h): a released slot is reused with the next generation, so a late
// completion of the previous connection finds nothing. Each connection may hold one deadline in
// the table's timer wheel (relay/TimerWheel.h), which the worker's timer expires.
// Worker-thread only.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/CompletionTag.h"
#include "relay/Connection.h"
#include "relay/TimerWheel.h"

namespace splicegate {

// What the control plane shows of a connection.
struct ConnectionView {
    std::uint64_t id = 0;
    unsigned worker = 0;
    std::string route;
    std::string client;
    std::string upstream;
    std::uint64_t ageMs = 0;
    std::uint64_t bytesC2u = 0;
    std::uint64_t bytesU2c = 0;
    const char* state = "";
    std::string serverName;  // the ClientHello's; empty: none
    std::string via;         // the PROXY header's balancer; empty: none
};

class ConnectionTable {
  public:
    using Clock = std::chrono::steady_clock;

    // Deadlines are kept to `tick` (the worker's timer period).
    ConnectionTable(Clock::duration tick, Clock::time_point start);

    // A fresh connection with this (non-zero) id in a free slot, its generation moved on.
    Connection& allocate(std::uint64_t id);
    // Null unless the slot holds a live connection of that generation.
    Connection* find(std::uint32_t slot, std::uint16_t generation) noexcept;
    Connection* find(CompletionTag tag) noexcept { return find(tag.slot, tag.generation); }
    Connection* findById(std::uint64_t id) noexcept;
    // The slot is free again (its deadline gone); the connection's fds are the caller's to close.
    void release(Connection& c) noexcept;
    std::size_t live() const noexcept { return live_; }

    template <typename F>
    void forEach(F&& visit) {
        for (auto& c : slots_)
            if (c && c->id() != 0) visit(*c);
    }
    template <typename F>
    void forEach(F&& visit) const {
        for (const auto& c : slots_)
            if (c && c->id() != 0) visit(*c);
    }
    void appendViews(std::vector<ConnectionView>& out, unsigned worker,
                     Clock::time_point now) const;

    void setDeadline(const Connection& c, Clock::time_point deadline) {
        deadlines_.arm(c.io.slot, deadline);
    }
    void clearDeadline(const Connection& c) noexcept { deadlines_.cancel(c.io.slot); }
    bool hasDeadline(const Connection& c) const noexcept { return deadlines_.armed(c.io.slot); }
    // The live connections whose deadline is not after `now`, earliest first; their deadlines
    // are cleared.
    std::vector<Connection*> due(Clock::time_point now);

    void clear() noexcept;

  private:
    std::vector<std::unique_ptr<Connection>> slots_;
    std::vector<std::uint32_t> freeSlots_;
    std::size_t live_ = 0;
    TimerWheel deadlines_;
    std::vector<std::uint32_t> dueSlots_;
};

}  // namespace splicegate
