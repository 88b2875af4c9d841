#pragma once
// The running daemon's audit side of `splicegatectl upgrade` (docs/operations.md "Upgrade with
// the audit log on"): what the new process needs to audit in the same directory while this one
// drains. The directory's lock goes along (the lock file's fd: an open file description lock is
// the description's, so it stays held while either process has the fd and a third daemon is
// still refused); the chains this process and its still-running predecessors write, so that the
// new one picks other worker numbers and its recovery leaves these alone; and the end of the
// connection id lease, past which the new one leases. This process stops writing the lease file
// from then on (the new one owns it), unless the upgrade fails, when renewals resume past
// whatever the failed process leased and the connection ids skip past it too.
// maintenance() serialises an upgrade with this process's retention runs: none runs while a new
// process recovers the directory, and none after a hand-off (the new process runs retention once
// no holder is left).
// Thread affinity: prepare()/abandon() on the admin thread (the upgrade), maintenance() from the
// main thread too. Error contract: prepare() throws std::system_error naming the lease file when
// the lease cannot be extended (the upgrade is then refused, nothing changed).
#include <cstdint>
#include <mutex>
#include <vector>

#include "audit/AuditDirectory.h"
#include "audit/ConnectionIdLease.h"
#include "relay/AuditHolders.h"
#include "splicegate/handoff.pb.h"

namespace splicegate {

class Relay;

class AuditHandover {
  public:
    // `chains`: the worker numbers this process's workers write. All references outlive this.
    AuditHandover(const audit::AuditDirectory& directory, audit::ConnectionIdLease& lease,
                  std::vector<unsigned> chains, const AuditHolders& predecessors, Relay& relay);

    std::mutex& maintenance() noexcept { return maintenance_; }

    // The Audit message for the new process (attach lockFd()); suspends the lease.
    handoff::Message prepare();
    int lockFd() const noexcept { return directory_.lockFd(); }
    // The upgrade failed after prepare() (its new process has exited): the lease and the ids go
    // on past what it leased. Nothing when prepare() was not called or failed.
    void abandon() noexcept;

  private:
    const audit::AuditDirectory& directory_;
    audit::ConnectionIdLease& lease_;
    const std::vector<unsigned> chains_;
    const AuditHolders& predecessors_;
    Relay& relay_;
    std::mutex maintenance_;
    bool suspended_ = false;
    std::uint64_t handedEnd_ = 0;  // the lease end prepare() handed over
};

}  // namespace splicegate
