#include "audit/DirectDataWriter.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <stdexcept>

#include "common/Error.h"
#include "common/Log.h"

namespace splicegate::audit {
namespace {

constexpr std::size_t kAlign = LogBuffer::kAlignment;

std::size_t alignDown(std::size_t value) noexcept {
    return value - value % kAlign;
}
std::size_t alignUp(std::size_t value) noexcept {
    return alignDown(value + kAlign - 1);
}

}  // namespace

DirectDataWriter::DirectDataWriter(RingOps& ring, RingRegistration& registration,
                                   const DirectLogOptions& options)
    : ring_(ring), options_(options), buffer_(options.bufferBytes, options.writeBytes) {
    if (options_.maxWritesInFlight == 0)
        throw std::invalid_argument("audit: maxWritesInFlight must be at least 1");
    if (int rc = buffer_.registerWith(registration); rc < 0)
        logWarn(options_.label, ": cannot register the ", buffer_.totalBytes(),
                "-byte audit buffer with io_uring (", errnoText(rc),
                rc == -ENOMEM ? "; RLIMIT_MEMLOCK is below it" : "",
                "): writing from unregistered memory");
    slots_.resize(buffer_.count());
    active_.reserve(buffer_.count());
    free_.reserve(buffer_.count());
    for (unsigned i = buffer_.count(); i > 0; --i) free_.push_back(i - 1);
    failures_.reserve(4);
    auto delay = options_.writeDelay.count();
    delay_.tv_sec = delay / 1000;
    delay_.tv_nsec = (delay % 1000) * 1000000;
}

DirectDataWriter::~DirectDataWriter() = default;

int DirectDataWriter::startFile(int fd, std::uint64_t fileId) noexcept {
    UniqueFd own(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
    if (!own) return -errno;
    int flags = ::fcntl(own.get(), F_GETFL);
    if (flags < 0) return -errno;
    bool direct = (flags & O_DIRECT) != 0;
    // F_SETFL reaches the open file description the caller shares with us: its fd is direct too.
    if (!direct && ::fcntl(own.get(), F_SETFL, flags | O_DIRECT) == 0) {
        direct = true;
    } else if (!direct) {
        if (errno != EINVAL) return -errno;
        if (!warnedBuffered_) {
            warnedBuffered_ = true;
            logWarn(options_.label,
                    ": the filesystem refuses O_DIRECT; audit data goes through the page cache "
                    "(buffered writes from the same buffers)");
        }
    }
    if (options_.preallocateBytes > 0) {
        // Allocated and inside the file's size, the writes are not extending ones, which ext4
        // serialises (it waits for each under the inode lock); io_uring keeps several in flight.
        // Only an optimisation: a disk that is full shows in the writes themselves.
        [[maybe_unused]] int rc =
            ::fallocate(own.get(), 0, 0, static_cast<off_t>(options_.preallocateBytes));
    }
    try {
        files_.emplace_back();
    } catch (const std::bad_alloc&) {
        return -ENOMEM;
    }
    if (files_.size() > 1) retire(files_[files_.size() - 2]);
    File& file = files_.back();
    file.fd = std::move(own);
    file.id = fileId;
    file.serial = nextSerial_++;
    file.direct = direct;
    file.lsnBegin = file.durable = file.syncTarget = appendedLsn_;
    pump();
    return 0;
}

void DirectDataWriter::retire(File& file) noexcept {
    if (!file.current) return;
    file.current = false;
    file.lsnEnd = appendedLsn_;
    if (active_.empty()) return;
    unsigned last = active_.back();
    Slot& slot = slots_[last];
    if (slot.file == file.serial && !slot.sealed) {
        slot.sealed = true;  // its partial tail is written now, padded
        if (slot.fill == 0 && slot.reservations == 0) release(last);
    }
}

void DirectDataWriter::closeFile() noexcept {
    if (files_.empty()) return;
    retire(files_.back());
    pump();
}

int DirectDataWriter::appendSlot(File& file) noexcept {
    if (!active_.empty()) {
        unsigned last = active_.back();
        const Slot& slot = slots_[last];
        if (!slot.sealed && slot.file == file.serial) return static_cast<int>(last);
    }
    if (free_.empty()) return -1;
    unsigned index = free_.back();
    free_.pop_back();
    Slot& slot = slots_[index];
    slot = Slot{};
    slot.file = file.serial;
    slot.lsn = appendedLsn_;
    // Every buffer of a file but its last is full, so this is a multiple of the alignment.
    slot.fileOffset = file.nextOffset;
    active_.push_back(index);  // capacity reserved for every slot: no allocation
    return static_cast<int>(index);
}

int DirectDataWriter::reserve(std::size_t length, LogReservation& out) noexcept {
    out = LogReservation{};
    out.lsn = appendedLsn_;
    if (files_.empty() || !files_.back().current) return -EBADF;
    File& file = files_.back();
    if (file.failed) return -EIO;  // the owner must start a new file: nothing more goes to this one
    out.fileOffset = file.nextOffset;
    if (length == 0) return 0;
    int index = appendSlot(file);
    if (index < 0) {
        ++stats_.fullAppends;
        return 0;
    }
    try {
        pending_.push_back({appendedLsn_, false});
    } catch (const std::bad_alloc&) {
        return -ENOMEM;
    }
    Slot& slot = slots_[static_cast<unsigned>(index)];
    std::size_t take = std::min(length, buffer_.bufferBytes() - slot.fill);
    out.memory = {buffer_.buffer(static_cast<unsigned>(index)) + slot.fill, take};
    out.slot = static_cast<std::uint32_t>(index);
    slot.fill += take;
    ++slot.reservations;
    file.nextOffset += take;
    appendedLsn_ += take;
    if (slot.fill == buffer_.bufferBytes()) slot.sealed = true;
    return 0;
}

void DirectDataWriter::complete(LogReservation& reservation, std::size_t filled) noexcept {
    if (reservation.memory.empty()) return;
    const unsigned index = reservation.slot;
    Slot& slot = slots_[index];
    const std::size_t size = reservation.memory.size();
    filled = std::min(filled, size);
    if (std::size_t unused = size - filled; unused > 0) {
        // Given back only from the end of the current file's last buffer: nothing follows it.
        bool last = reservation.lsn + size == appendedLsn_ && !slot.discard &&
                    active_.back() == index && files_.back().current &&
                    files_.back().serial == slot.file;
        if (last) {
            slot.fill -= unused;
            slot.sealed = false;  // it could only have been sealed for being full
            files_.back().nextOffset -= unused;
            appendedLsn_ -= unused;
        } else {
            std::memset(reservation.memory.data() + filled, 0, unused);
        }
    }
    for (auto& pending : pending_) {
        if (pending.lsn == reservation.lsn && !pending.done) {
            pending.done = true;
            break;
        }
    }
    while (!pending_.empty() && pending_.front().done) pending_.pop_front();
    --slot.reservations;
    stats_.appendedBytes += filled;
    reservation.memory = {};
    if (slot.discard && !slot.writing && slot.reservations == 0) release(index);
    pump();
}

template <typename Copy>
LogAppend DirectDataWriter::appendWith(std::size_t length, Copy&& copy) noexcept {
    LogAppend out;
    out.lsn = appendedLsn_;
    std::size_t done = 0;
    while (done < length) {
        LogReservation space;
        int rc = reserve(length - done, space);
        if (done == 0) out.fileOffset = space.fileOffset;
        if (rc < 0) {
            if (done == 0) out.bytes = rc;
            break;
        }
        if (space.memory.empty()) break;  // full
        long got = copy(space.memory.data(), space.memory.size(), done);
        complete(space, got > 0 ? static_cast<std::size_t>(got) : 0);
        if (got <= 0) {
            if (done == 0) out.bytes = got;
            break;
        }
        done += static_cast<std::size_t>(got);
        if (static_cast<std::size_t>(got) < space.memory.size()) break;  // the pipe is empty
    }
    if (done > 0) out.bytes = static_cast<long>(done);
    return out;
}

LogAppend DirectDataWriter::appendFromPipe(int pipeFd, std::size_t length) noexcept {
    return appendWith(length, [pipeFd](std::byte* to, std::size_t want, std::size_t) -> long {
        for (;;) {
            auto got = ::read(pipeFd, to, want);
            if (got >= 0) return static_cast<long>(got);
            if (errno != EINTR) return -errno;
        }
    });
}

LogAppend DirectDataWriter::append(const void* data, std::size_t length) noexcept {
    const auto* from = static_cast<const std::byte*>(data);
    return appendWith(length, [from](std::byte* to, std::size_t want, std::size_t done) -> long {
        std::memcpy(to, from + done, want);
        return static_cast<long>(want);
    });
}

std::size_t DirectDataWriter::room() const noexcept {
    std::size_t bytes = free_.size() * buffer_.bufferBytes();
    if (!active_.empty()) {
        const Slot& last = slots_[active_.back()];
        if (!last.sealed) bytes += buffer_.bufferBytes() - last.fill;
    }
    return bytes;
}

void DirectDataWriter::commit() noexcept {
    commitTarget_ = appendedLsn_;
    pump();
}

void DirectDataWriter::writeOut() noexcept {
    writeTarget_ = appendedLsn_;
    pump();
}

// Writes, oldest first, what is full or what a commit needs; then the syncs that are due.
void DirectDataWriter::pump() noexcept {
    for (unsigned index : active_) {
        if (writesInFlight_ >= options_.maxWritesInFlight) break;
        const Slot& slot = slots_[index];
        std::size_t ready = readyBytes(slot);
        if (slot.writing || slot.discard || slot.written >= ready) continue;
        if ((slot.sealed && ready == slot.fill) ||
            slot.lsn + slot.written < std::max(commitTarget_, writeTarget_))
            submitWrite(index);
    }
    startSyncs();
    closeFinishedFiles();
}

void DirectDataWriter::submitWrite(unsigned index) noexcept {
    Slot& slot = slots_[index];
    File* file = findFile(slot.file);
    std::byte* memory = buffer_.buffer(index);
    const std::size_t ready = readyBytes(slot);
    std::size_t start = slot.written;
    std::size_t end = ready;
    if (file->direct) {
        // O_DIRECT writes whole blocks: the block holding `written` is written again, and the
        // last one is padded with zeros past `fill` (bytes appended meanwhile, or reserved ones
        // being filled, land in padding that the next write of this buffer replaces).
        start = alignDown(start);
        end = alignUp(end);
        if (end > slot.fill) std::memset(memory + slot.fill, 0, end - slot.fill);
    }
    bool delayed = options_.writeDelay.count() > 0;
    ring_.makeRoom(delayed ? 2 : 1);  // a hard-linked pair must go into one submission
    if (delayed) {
        // The write runs when the timer fires (-ETIME).
        ring_.timeout(&delay_, 0, 0, auditLogTag(AuditLogOp::DataWriteDelay), SqeFlag::HardLink);
        ++inFlight_;
    }
    auto length = end - start;
    auto offset = slot.fileOffset + start;
    std::span<const std::byte> data(memory + start, length);
    int rwFlags = options_.dsyncWrites ? RWF_DSYNC : 0;
    auto tag = auditLogTag(AuditLogOp::DataWrite, index);
    if (buffer_.registered())
        ring_.writeFixed(file->fd.get(), data, offset, static_cast<int>(index), rwFlags, tag);
    else
        ring_.write(file->fd.get(), data, offset, rwFlags, tag);
    slot.writing = true;
    slot.submitStart = start;
    slot.submitFill = ready;
    ++file->writesInFlight;
    ++writesInFlight_;
    ++inFlight_;
    ++stats_.writes;
    stats_.writtenBytes += length;
    if (!slot.sealed) ++stats_.tailWrites;
}

// Plain writes become durable with an fdatasync of their file once every byte the sync is to
// cover has been written: the current file up to the commit target, a previous file in full.
void DirectDataWriter::startSyncs() noexcept {
    if (options_.dsyncWrites) return;
    std::uint64_t written = writtenLsn();
    for (File& file : files_) {
        if (file.failed || file.syncing) continue;
        std::uint64_t end = fileEnd(file);
        std::uint64_t want = file.current ? std::min(commitTarget_, end) : end;
        if (want <= file.durable || written < want) continue;
        ring_.makeRoom(1);
        ring_.fsync(file.fd.get(), SyncMode::DataOnly,
                    auditLogTag(AuditLogOp::DataSync, file.serial));
        file.syncing = true;
        file.syncTarget = want;
        ++inFlight_;
    }
}

void DirectDataWriter::onCompletion(CompletionTag tag, int result) noexcept {
    --inFlight_;
    auto op = tag.opAs<AuditLogOp>();
    if (op == AuditLogOp::DataWrite && tag.slot < slots_.size())
        onWrite(tag.slot, result);
    else if (op == AuditLogOp::DataSync)
        onSync(tag.slot, result);
    pump();
}

void DirectDataWriter::onWrite(unsigned index, int result) noexcept {
    Slot& slot = slots_[index];
    slot.writing = false;
    --writesInFlight_;
    File* file = findFile(slot.file);
    if (file != nullptr) --file->writesInFlight;
    if (slot.discard || file == nullptr) {
        if (slot.reservations == 0) release(index);
        return;
    }
    if (result <= 0) {  // nothing written of a non-empty write: treat as an I/O error, no loop
        fail(*file, result < 0 ? result : -EIO, true);
        return;
    }
    // A short write (the disk filled up mid-way) keeps what it wrote; the rest goes again and
    // then reports the real error.
    std::size_t reached = slot.submitStart + static_cast<std::size_t>(result);
    slot.written = std::max(slot.written, std::min(slot.submitFill, reached));
    if (options_.dsyncWrites) {
        // Each write was durable when it completed: the file is durable up to its first
        // unwritten byte.
        std::uint64_t frontier = fileEnd(*file);
        for (unsigned other : active_) {
            const Slot& s = slots_[other];
            if (s.file == file->serial && s.written < s.fill) {
                frontier = s.lsn + s.written;
                break;
            }
        }
        file->durable = std::max(file->durable, frontier);
    }
    if (slot.sealed && slot.written >= slot.fill) release(index);
}

void DirectDataWriter::onSync(std::uint32_t serial, int result) noexcept {
    File* file = findFile(serial);
    if (file == nullptr) return;
    file->syncing = false;
    ++stats_.syncs;
    if (result < 0) {
        fail(*file, result, false);
        return;
    }
    file->durable = std::max(file->durable, file->syncTarget);
}

void DirectDataWriter::fail(File& file, int error, bool inWrite) noexcept {
    if (file.failed) return;
    file.failed = true;
    try {
        failures_.push_back({file.id, error, inWrite, file.durable, fileEnd(file)});
    } catch (const std::bad_alloc&) {
        logError(options_.label, ": lost the report of a failed audit write (", errnoText(error),
                 "): out of memory");
    }
    // Its buffers hold nothing worth writing any more; those the kernel still reads go later.
    std::vector<unsigned> idle;
    idle.reserve(active_.size());
    for (unsigned index : active_) {
        Slot& slot = slots_[index];
        if (slot.file != file.serial) continue;
        slot.discard = true;
        if (!slot.writing && slot.reservations == 0) idle.push_back(index);
    }
    for (unsigned index : idle) release(index);
}

std::vector<LogFailure> DirectDataWriter::takeFailures() noexcept {
    std::vector<LogFailure> taken;
    taken.swap(failures_);
    return taken;
}

void DirectDataWriter::release(unsigned index) noexcept {
    std::erase(active_, index);
    free_.push_back(index);  // capacity reserved for every slot
}

namespace {
// A file whose space ahead ended exactly at its last byte needs no cut: ftruncate can wait for
// the journal even when the size does not change.
bool endsAt(int fd, std::uint64_t size) noexcept {
    struct stat st {};
    return ::fstat(fd, &st) == 0 && static_cast<std::uint64_t>(st.st_size) == size;
}
}  // namespace

void DirectDataWriter::closeFinishedFiles() noexcept {
    std::erase_if(files_, [this](const File& file) {
        bool done = !file.current && file.writesInFlight == 0 && !file.syncing &&
                    (file.failed || file.durable >= fileEnd(file));
        // Cut the preallocation (ours, or the owner's space taken ahead) and the padding: the
        // file ends with its last byte. The owner's
        // final fdatasync at sealing makes the new size durable; until then a longer file only
        // holds zeros after the last indexed byte, which readers and recovery ignore.
        if (done && !file.failed && !endsAt(file.fd.get(), file.nextOffset) &&
            ::ftruncate(file.fd.get(), static_cast<off_t>(file.nextOffset)) != 0)
            logWarn(options_.label, ": cannot cut audit data file ", file.id, " to its ",
                    file.nextOffset, " bytes (", errnoText(errno), "); it ends in zeros");
        return done;
    });
}

DirectDataWriter::File* DirectDataWriter::findFile(std::uint32_t serial) noexcept {
    for (auto& file : files_)
        if (file.serial == serial) return &file;
    return nullptr;
}

std::uint64_t DirectDataWriter::fileEnd(const File& file) const noexcept {
    return file.current ? appendedLsn_ : file.lsnEnd;
}

std::uint64_t DirectDataWriter::readyLsn() const noexcept {
    return pending_.empty() ? appendedLsn_ : pending_.front().lsn;
}

std::size_t DirectDataWriter::readyBytes(const Slot& slot) const noexcept {
    std::uint64_t ready = readyLsn();
    if (ready <= slot.lsn) return 0;
    return static_cast<std::size_t>(std::min<std::uint64_t>(ready - slot.lsn, slot.fill));
}

std::uint64_t DirectDataWriter::writtenLsn() const noexcept {
    for (unsigned index : active_) {
        const Slot& slot = slots_[index];
        if (!slot.discard && slot.written < slot.fill) return slot.lsn + slot.written;
    }
    return appendedLsn_;
}

std::uint64_t DirectDataWriter::durableLsn() const noexcept {
    for (const File& file : files_) {
        if (file.failed) continue;  // its bytes are reported lost
        if (file.durable < fileEnd(file)) return file.durable;
    }
    return appendedLsn_;
}

bool DirectDataWriter::directIo() const noexcept {
    return !files_.empty() && files_.back().direct;
}

}  // namespace splicegate::audit
