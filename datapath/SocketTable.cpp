#include "datapath/SocketTable.h"

#include <sys/resource.h>

#include <algorithm>

#include "common/Error.h"
#include "common/Log.h"

namespace splicegate {

namespace {
// What an update reads to empty both entries of a slot.
constexpr int kNoSockets[2] = {-1, -1};
}  // namespace

SocketTable::SocketTable(RingOps& ring, RingRegistration& registration,
                         unsigned connectionSlots) noexcept
    : ring_(ring), registration_(registration) {
    unsigned slots = std::min(connectionSlots, kMaxSlots);
    // The kernel refuses a table of more entries than RLIMIT_NOFILE: a smaller table, not none.
    rlimit files{};
    if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY)
        slots = static_cast<unsigned>(std::min<rlim_t>(slots, files.rlim_cur / 2));
    if (slots == 0) return;
    // Sparse registration: kernel 5.19.
    int rc = registration_.registerSparseFiles(2 * slots);
    if (rc < 0) {
        logInfo("io_uring fixed file table of ", 2 * slots, " entries refused (", errnoText(rc),
                "): buffer-lane sockets use plain fds");
        return;
    }
    slots_ = slots;
}

SocketTable::~SocketTable() {
    if (slots_ > 0) (void)registration_.unregisterFiles();
}

bool SocketTable::install(std::uint32_t slot, const int (&sockets)[2], CompletionTag tag) noexcept {
    if (!covers(slot)) return false;
    update(slot, sockets, tag);
    return true;
}

void SocketTable::remove(std::uint32_t slot, CompletionTag tag) noexcept {
    if (covers(slot)) update(slot, kNoSockets, tag);
}

void SocketTable::update(std::uint32_t slot, const int* sockets, CompletionTag tag) noexcept {
    ring_.filesUpdate(sockets, 2, entry(slot, 0), tag);
}

}  // namespace splicegate
