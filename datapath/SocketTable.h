#pragma once
// The worker ring's registered (fixed) file table, holding the sockets of buffer-lane
// connections. An SQE on a fixed file skips the fd lookup and the file reference count (fget and
// fput) that the kernel otherwise pays for every socket operation (docs/kernel-notes.md §6).
//
// Entries 2s and 2s+1 belong to connection slot s (client, upstream), so there is nothing to
// allocate. A slot's entries are filled when its connection enters the buffer lane and emptied
// when the connection is released, both by an IORING_OP_FILES_UPDATE that goes to the kernel in
// the loop turn's one submission: no system call of their own. The table holds a reference to
// each socket it has, so closing the fd alone does not end the socket; the emptying does.
//
// A kernel that refuses the table, or a slot past its end, leaves a connection on plain fds:
// same operations, one lookup more each.
//
// Thread affinity: the worker's thread; the io_uring must outlive it.
#include <cstdint>

#include "common/CompletionTag.h"
#include "common/RingOps.h"
#include "common/RingRegistration.h"

namespace splicegate {

// The socket an SQE names: an fd, or an entry of the ring's fixed file table.
struct SocketRef {
    int index = -1;
    bool fixed = false;

    // The SQE flags of an operation given `index`: a table entry is named as a fixed file.
    SqeFlags flags() const noexcept { return SqeFlags::when(fixed, SqeFlag::FixedFile); }
};

class SocketTable {
  public:
    // Room for the sockets of `connectionSlots` connections (capped at kMaxSlots and at half of
    // RLIMIT_NOFILE), registered sparse (empty) through `registration`; the updates go through
    // `ring`, the same ring's operations. Never throws: a refusal leaves the table disabled.
    SocketTable(RingOps& ring, RingRegistration& registration, unsigned connectionSlots) noexcept;
    ~SocketTable();
    SocketTable(const SocketTable&) = delete;
    SocketTable& operator=(const SocketTable&) = delete;

    // Kernel memory is a pointer per entry: 16,384 connections cost 256 KiB per worker.
    static constexpr unsigned kMaxSlots = 16384;

    bool enabled() const noexcept { return slots_ > 0; }
    bool covers(std::uint32_t slot) const noexcept { return slot < slots_; }
    // `side` 0 is the client's socket, 1 the upstream's.
    static int entry(std::uint32_t slot, unsigned side) noexcept {
        return static_cast<int>(2 * slot + side);
    }
    // Queues filling slot `slot`'s entries with `sockets` (client, upstream). The kernel reads
    // the array when the SQE is submitted: it must stay where it is until then. The completion
    // carries `tag` (the number of entries filled, or -errno). False, and nothing queued, when
    // the slot is past the table's end.
    bool install(std::uint32_t slot, const int (&sockets)[2], CompletionTag tag) noexcept;
    // Queues emptying slot `slot`'s entries; the completion carries `tag`.
    void remove(std::uint32_t slot, CompletionTag tag) noexcept;

  private:
    void update(std::uint32_t slot, const int* sockets, CompletionTag tag) noexcept;

    RingOps& ring_;
    RingRegistration& registration_;
    unsigned slots_ = 0;
};

}  // namespace splicegate
