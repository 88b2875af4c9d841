#include "datapath/SocketTable.h"

#include <sys/resource.h>

#include <algorithm>

#include "common/Error.h"
#include "common/Log.h"
#include "common/Ring.h"

namespace splicegate {

namespace {
// What an update reads to empty both entries of a slot.
constexpr int kNoSockets[2] = {-1, -1};
}  // namespace

SocketTable::SocketTable(io_uring& ring, unsigned connectionSlots) noexcept : ring_(ring) {
    unsigned slots = std::min(connectionSlots, kMaxSlots);
    // The kernel refuses a table of more entries than RLIMIT_NOFILE: a smaller table, not none.
    rlimit files{};
    if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY)
        slots = static_cast<unsigned>(std::min<rlim_t>(slots, files.rlim_cur / 2));
    if (slots == 0) return;
    // Sparse registration: kernel 5.19.
    int rc = io_uring_register_files_sparse(&ring_, 2 * slots);
    if (rc < 0) {
        logInfo("io_uring fixed file table of ", 2 * slots, " entries refused (", errnoText(rc),
                "): buffer-lane sockets use plain fds");
        return;
    }
    slots_ = slots;
}

SocketTable::~SocketTable() {
    if (slots_ > 0) (void)io_uring_unregister_files(&ring_);
}

bool SocketTable::install(std::uint32_t slot, const int (&sockets)[2], std::uint64_t tag) noexcept {
    if (!covers(slot)) return false;
    update(slot, sockets, tag);
    return true;
}

void SocketTable::remove(std::uint32_t slot, std::uint64_t tag) noexcept {
    if (covers(slot)) update(slot, kNoSockets, tag);
}

void SocketTable::update(std::uint32_t slot, const int* sockets, std::uint64_t tag) noexcept {
    auto* sqe = nextSqe(ring_);
    // The kernel's argument is not const, but it only reads the array.
    io_uring_prep_files_update(sqe, const_cast<int*>(sockets), 2, entry(slot, 0));
    io_uring_sqe_set_data64(sqe, tag);
}

}  // namespace splicegate
