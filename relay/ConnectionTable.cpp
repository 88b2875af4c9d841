#include "relay/ConnectionTable.h"

namespace splicegate {
namespace {
// With the worker's timer period as the tick (10 ms to 1 s) one revolution spans 10 s to 17 min.
constexpr std::uint32_t kWheelBuckets = 1024;

const char* stateName(ConnectionState state) noexcept {
    switch (state) {
        case ConnectionState::Preamble:
            return "preamble";
        case ConnectionState::Connecting:
            return "connecting";
        case ConnectionState::Relaying:
            return "relaying";
        case ConnectionState::Closing:
            break;
    }
    return "closing";
}
}  // namespace

ConnectionTable::ConnectionTable(Clock::duration tick, Clock::time_point start)
    : deadlines_(tick, kWheelBuckets, start) {}

Connection& ConnectionTable::allocate(std::uint64_t id) {
    std::uint32_t slot;
    if (!freeSlots_.empty()) {
        slot = freeSlots_.back();
        freeSlots_.pop_back();
    } else {
        slot = static_cast<std::uint32_t>(slots_.size());
        slots_.push_back(nullptr);
    }
    auto previousGeneration = slots_[slot] ? slots_[slot]->io.generation : 0;
    slots_[slot] = std::make_unique<Connection>();
    auto& c = *slots_[slot];
    c.io.id = id;
    c.io.slot = slot;
    c.io.generation = static_cast<std::uint16_t>(previousGeneration + 1);
    ++live_;
    return c;
}

Connection* ConnectionTable::find(std::uint32_t slot, std::uint16_t generation) noexcept {
    if (slot >= slots_.size()) return nullptr;
    auto* c = slots_[slot].get();
    if (c == nullptr || c->id() == 0 || c->io.generation != generation) return nullptr;
    return c;
}

Connection* ConnectionTable::findById(std::uint64_t id) noexcept {
    if (id == 0) return nullptr;
    for (auto& c : slots_)
        if (c && c->id() == id) return c.get();
    return nullptr;
}

void ConnectionTable::release(Connection& c) noexcept {
    if (c.id() == 0) return;
    deadlines_.cancel(c.io.slot);
    c.io.id = 0;
    c.route.reset();
    freeSlots_.push_back(c.io.slot);
    --live_;
}

std::vector<Connection*> ConnectionTable::due(Clock::time_point now) {
    dueSlots_.clear();
    deadlines_.expire(now, dueSlots_);
    std::vector<Connection*> connections;
    connections.reserve(dueSlots_.size());
    for (auto slot : dueSlots_)
        if (auto* c = slots_[slot].get(); c != nullptr && c->id() != 0) connections.push_back(c);
    return connections;
}

void ConnectionTable::appendViews(std::vector<ConnectionView>& out, unsigned worker,
                                  Clock::time_point now) const {
    forEach([&](const Connection& c) {
        ConnectionView view;
        view.id = c.id();
        view.worker = worker;
        view.route = c.routed ? c.route->config.name : "-";
        view.client = c.clientAddress.toString();
        view.upstream = c.upstreamAddress.toString();
        view.ageMs = static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::milliseconds>(now - c.opened).count());
        view.bytesC2u = c.io.flows[0].bytesForwarded();
        view.bytesU2c = c.io.flows[1].bytesForwarded();
        view.state = stateName(c.state);
        view.serverName = c.serverName;
        if (c.via.family() != AF_UNSPEC) view.via = c.via.toString();
        out.push_back(std::move(view));
    });
}

void ConnectionTable::clear() noexcept {
    for (auto& c : slots_)
        if (c) deadlines_.cancel(c->io.slot);
    slots_.clear();
    freeSlots_.clear();
    live_ = 0;
}

}  // namespace splicegate
