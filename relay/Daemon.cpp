#include "relay/Daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "admin/AdminServer.h"
#include "audit/AuditDirectory.h"
#include "audit/AuditLogFactory.h"
#include "audit/Crc32c.h"
#include "audit/Recovery.h"
#include "audit/Retention.h"
#include "audit/SegmentStore.h"
#include "common/Error.h"
#include "common/Groups.h"
#include "common/Log.h"
#include "common/Ring.h"
#include "common/ServiceNotifier.h"
#include "datapath/Failpoints.h"
#include "metrics/HttpServer.h"
#include "metrics/MetricsExposer.h"
#include "relay/AuditHandover.h"
#include "relay/AuditHolders.h"
#include "relay/Capabilities.h"
#include "relay/Config.h"
#include "relay/ConfigCheck.h"
#include "relay/Control.h"
#include "relay/EdgeControl.h"
#include "relay/FdBudget.h"
#include "relay/Handoff.h"
#include "relay/Relay.h"
#include "relay/Reloader.h"
#include "relay/RetentionJob.h"
#include "relay/Upgrader.h"

namespace splicegate {
namespace {
// Pipes a worker keeps for reuse (PipePool's maxIdle in Worker).
constexpr std::uint64_t kIdlePipesPerWorker = 16;
// Raises the soft fd limit to the hard one and plans how many connections (and pooled pipes) fit
// in it, counting every fd a connection can hold (FdBudget); logged once.
FdBudget raiseFdLimit(std::uint64_t wantedConnections, unsigned workers, std::size_t routes,
                      std::uint64_t controlFds, PipeFds pipes) {
    rlimit limit{};
    checkSys(::getrlimit(RLIMIT_NOFILE, &limit), "getrlimit(RLIMIT_NOFILE)");
    if (limit.rlim_cur < limit.rlim_max) {
        auto previous = limit.rlim_cur;
        limit.rlim_cur = limit.rlim_max;
        checkSys(::setrlimit(RLIMIT_NOFILE, &limit), "setrlimit(RLIMIT_NOFILE)");
        logInfo("raised the open-file limit from ", previous, " to ", limit.rlim_cur);
    }
    auto budget = FdBudget::plan(limit.rlim_cur, wantedConnections, workers, routes,
                                 kIdlePipesPerWorker, controlFds, pipes);
    if (budget.connections == 0)
        throw std::runtime_error(concat("the open-file limit ", limit.rlim_cur,
                                        " leaves no room for a connection (", budget.reserved,
                                        " fds reserved, ", budget.perConnection,
                                        " per connection): raise LimitNOFILE"));
    if (budget.connections < wantedConnections)
        logWarn("--max-connections ", wantedConnections, " needs ",
                wantedConnections * budget.perConnection + budget.reserved, " file descriptors (",
                budget.perConnection, " per connection) but the limit is ", limit.rlim_cur,
                ": at most ", budget.connections,
                " connections will be accepted, the rest refused (raise LimitNOFILE)");
    else
        logInfo("file descriptors: limit ", limit.rlim_cur, ", ", budget.perConnection,
                " per connection at most, room for ", budget.connections, " connections",
                budget.pipes > 0 ? concat(" and ", budget.pipes, " pipes") : std::string());
    return budget;
}

void checkKernel() {
    auto missing = missingOpcodes();
    if (missing.empty()) return;
    std::string names;
    for (const auto& name : missing) names += (names.empty() ? "" : ", ") + name;
    throw std::runtime_error("this kernel's io_uring lacks " + names +
                             "; splicegate needs Linux 6.1 or later");
}

std::uint64_t pipeBudget(const Config& config) {
    if (config.datapath.pipeBudgetBytes != 0) return config.datapath.pipeBudgetBytes;
    return PipeBudget::systemLimitBytes();
}

// The configuration's settings, lowered to what this system allows.
WorkerSettings workerSettings(const Config& config, const FdBudget& fds) {
    WorkerSettings settings{config.audit, config.datapath, config.relay, fds.pipes};
    auto systemMax = PipeBudget::systemMaxPipeSize();
    if (settings.datapath.pipeSize > systemMax) {
        logWarn("--pipe-size ", config.datapath.pipeSize, " is above fs.pipe-max-size; using ",
                systemMax);
        settings.datapath.pipeSize = systemMax;
    }
    settings.relay.maxConnections = fds.connections;
    return settings;
}

// The first connection id of this daemon: past every id the log names (`pastLog`) and past the
// lease of the daemon that ran last (FORMAT.md "Connection id lease"). A lease that cannot be
// read is passed by two blocks: ids the log lost beyond that would take a million connections
// in one unsynced interval.
std::uint64_t firstIdPastLease(const audit::AuditDirectory& held, std::uint64_t pastLog) {
    auto lease = audit::readConnectionIdLease(held.fd(), held.path());
    if (lease.problem.empty()) return std::max(pastLog, lease.end);
    const auto skip = 2 * audit::ConnectionIdLease::kDefaultBlock;
    logWarn("audit: ", lease.problem, "; connection ids skip ", skip,
            " to stay clear of those it leased");
    return pastLog + skip;
}

// --audit-group's gid (nullopt: the daemon's own group). The configuration check found it.
std::optional<gid_t> auditGroup(const Config& config) {
    if (config.audit.group.empty()) return std::nullopt;
    int error = 0;
    auto group = findGroup(config.audit.group, error);
    if (!group) throw UsageError("--audit-group " + config.audit.group + ": no such group");
    return group->gid;
}

// The worker numbers (chains) of `workers` workers: the smallest that no process still writing
// the directory holds. Without an upgrade that is 0..workers-1; an upgrade's new process takes the
// next free ones, and the upgrade after it the first ones again, each chain continuing after its
// last seal as a restart continues it.
std::vector<unsigned> chooseChains(unsigned workers, const std::set<unsigned>& held) {
    std::vector<unsigned> chains;
    for (unsigned chain = 0; chains.size() < workers; ++chain)
        if (held.count(chain) == 0) chains.push_back(chain);
    return chains;
}

// Recovers the audit directory (FORMAT.md) and says where each worker's log continues.
// `held`: the directory, locked by this process (null when audit is off). `holders`: the
// processes of an upgrade that still write chains in it; `handedLeaseEnd`: their lease's end.
AuditStart recoverAudit(const Config& config, unsigned workers, std::uint64_t& firstConnectionId,
                        const audit::AuditDirectory* held,
                        std::optional<audit::ConnectionIdLease>& idLease,
                        const AuditHolders& holders, std::uint64_t handedLeaseEnd) {
    AuditStart start;
    start.firstSegment.assign(workers, 1);
    start.chains = chooseChains(workers, {});
    firstConnectionId = 1;
    if (held == nullptr) return start;
    start.chains = chooseChains(workers, holders.handedChains());
    // Loaded once: recovery, every writer and retention seal with the same key.
    if (!config.audit.hmacKeyFile.empty())
        start.chainKey =
            audit::ChainKey::fromFile(config.audit.hmacKeyFile, audit::KeyFileUse::Daemon);
    auto report = audit::recoverAuditDirectory(*held, start.chainKey.get(), holders.handedChains());
    for (const auto& action : report.actions) logWarn("audit recovery: ", action);
    start.unsealedSegmentsLeft = report.leftUnsealed.size();
    if (!report.leftUnsealed.empty())
        logError("audit recovery: ", report.leftUnsealed.size(),
                 " segments left unsealed (older than a crash leaves, or after a seal that does "
                 "not hold): the log was changed on disk; run splicegate-audit verify ",
                 config.audit.dir);
    if (report.truncatedConnections > 0)
        logWarn("audit recovery: ", report.truncatedConnections,
                " connections were open at the last stop and are marked truncated");
    // Spares no worker will take: of chains no worker writes now, or all of them when the
    // writer does not recycle; those of the chains an upgrade's old process writes are its own.
    std::set<unsigned> keepSpares = holders.handedChains();
    if (recyclesSpareDataFiles(config.audit.writer))
        keepSpares.insert(start.chains.begin(), start.chains.end());
    for (const auto& name : audit::removeSpareDataFiles(held->fd(), held->path(), keepSpares))
        logInfo("audit: removed ", config.audit.dir, "/", name, ", a spare no worker will take");
    for (unsigned worker = 0; worker < workers; ++worker) {
        // Segments of every worker number seen are skipped, whatever the worker count is now.
        auto last = report.lastSegment.find(start.chains[worker]);
        if (last != report.lastSegment.end()) start.firstSegment[worker] = last->second + 1;
    }
    if (!holders.handedChains().empty()) {
        std::string names;
        for (auto chain : start.chains) names += (names.empty() ? "w" : ", w") + std::to_string(chain);
        logInfo("audit: the previous process still writes its chains; this one writes ", names);
    }
    // The floor covers ids whose segments retention has deleted since they were handed out.
    // An upgrade's old process hands out ids below the lease end it handed over (its chains were
    // not read: the lease covers their ids).
    firstConnectionId = std::max(
        {report.maxConnectionId + 1, report.maxIdFloor, handedLeaseEnd, std::uint64_t{1}});
    firstConnectionId = firstIdPastLease(*held, firstConnectionId);
    idLease.emplace(held->fd(), held->path(), firstConnectionId);
    start.idLease = &*idLease;
    logInfo("audit log in ", config.audit.dir, " (", toString(config.audit.durability),
            " durability; payload CRC-32C by ", audit::crc32cPathName(), ")");
    return start;
}

sigset_t controlSignals() {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&set, sig);
    return set;
}

// Rolls the current segments retention found holding deleted bytes past the age limit.
void rollRecycledSegments(Relay& relay, const std::vector<unsigned>& workers) {
    if (workers.empty()) return;
    std::set<unsigned> due(workers.begin(), workers.end());
    bool answered = relay.onEveryWorker(
        [due](Worker& worker) {  // a copy: a late worker may run it after the timeout
            if (!due.count(worker.auditChain())) return;
            if (int rc = worker.rotateAudit(); rc < 0)
                logWarn("audit retention: worker ", worker.index(),
                        " could not roll its recycled segment: ", errnoText(-rc));
            else
                logInfo("audit retention: worker ", worker.index(),
                        " rolled its current segment, a recycled file older than "
                        "--audit-retention-hours");
        },
        std::chrono::milliseconds(5000));
    if (!answered) logWarn("audit retention: a worker did not answer the roll of its segment");
}

// Serves signals until a drain is asked for; then drains and stops the relay. After an upgrade
// handed everything over (the admin thread sends SIGTERM then), the drain is this process's
// alone: the service goes on in the new one, so systemd is told nothing.
void serveSignals(Relay& relay, const Config& startConfig, Reloader& reloader,
                  ServiceNotifier& notifier, MetricsExposer* metrics, AdminServer* admin,
                  const Upgrader* upgrader, std::shared_ptr<const audit::ChainKey> chainKey,
                  AuditHandover* auditHandover, const AuditHolders& auditHolders) {
    auto signals = controlSignals();
    RetentionJob retention(startConfig, std::move(chainKey), metrics);
    auto drainTimeout = std::chrono::milliseconds(startConfig.relay.drainTimeoutMs);
    for (;;) {
        siginfo_t info{};
        timespec poll{1, 0};
        int sig = ::sigtimedwait(&signals, &info, &poll);
        if (sig < 0) {  // about once a second
            // retention.log has one writer: none while an upgrade's new process starts (the lock
            // is held then) or after it took over, none while an old process still writes.
            std::unique_lock<std::mutex> maintenance;
            if (auditHandover) maintenance = std::unique_lock(auditHandover->maintenance(), std::try_to_lock);
            const bool mine = (!auditHandover || maintenance.owns_lock()) &&
                              !(upgrader != nullptr && upgrader->handedOver()) &&
                              !auditHolders.alive();
            if (mine) rollRecycledSegments(relay, retention.tick());
            flushSuppressedWarnings();
        }
        if (sig == SIGHUP) {
            notifier.reloading();
            try {
                auto result = reloader.reload("SIGHUP");  // logs the outcome
                notifier.ready(concat("reloaded: ", result.config.routes.size(), " routes"));
            } catch (const std::exception& error) {
                notifier.ready(
                    concat("reload failed, running the previous configuration: ", error.what()));
            }
        } else if (sig == SIGTERM || sig == SIGINT) {
            if (upgrader != nullptr && upgrader->handedOver()) {
                logInfo("upgrade: PID ", upgrader->successor(),
                        " accepts now; draining this process's connections for up to ",
                        drainTimeout.count(), " ms");
                if (admin) admin->stopAccepting();
                if (metrics) metrics->stopAccepting();
            } else {
                logInfo(sig == SIGTERM ? "SIGTERM" : "SIGINT", ": draining for up to ",
                        drainTimeout.count(), " ms");
                notifier.stopping();
                if (metrics) metrics->setReady(false);
            }
            relay.drain();
            if (!relay.waitFinished(drainTimeout))
                logWarn("drain timeout reached: closing the remaining connections");
            relay.stop();
            return;
        }
    }
}

// The capabilities a start without --xdp-interface does not keep. --check-config drops the same
// ones, so that it judges the configuration with the privileges the daemon runs with.
std::vector<std::string> dropCapabilitiesNotKept(const Config& config) {
    if (!config.xdp.interface.empty()) return {};
    return dropEdgeFilterCapabilities();
}

// --check-config: one line per problem on stderr, exit 2 if there is any; warnings do not fail.
int checkConfigAndExit(const Config& config) {
    try {
        dropCapabilitiesNotKept(config);
    } catch (const std::exception& error) {
        std::cerr << "splicegate: " << error.what() << "\n";
        return 1;
    }
    auto report = checkConfiguration(config);
    for (const auto& warning : report.warnings)
        std::cerr << "splicegate: warning: " << warning << "\n";
    for (const auto& problem : report.problems) std::cerr << "splicegate: " << problem << "\n";
    if (!report.problems.empty()) return 2;
    std::cout << "splicegate: configuration OK (" << config.routes.size() << " routes)\n";
    return 0;
}

// The upstreams an operator took out (splicegatectl upstream disable): an upgrade hands them
// over, so that a systemctl reload (an upgrade) does not put them back in the rotation.
handoff::Maintenance upstreamsInMaintenance(const Relay& relay) {
    handoff::Maintenance maintenance;
    for (const auto& route : *relay.context().routes())
        for (const auto& upstream : route->pool->snapshot())
            if (upstream.disabled) {
                auto& entry = *maintenance.add_disabled();
                entry.set_route(upstream.route);
                entry.set_upstream(upstream.upstream);
            }
    return maintenance;
}

// The new process's side: each stays disabled where its configuration still has that route and
// upstream; the others are named in the log (a maintenance the new file ended).
void keepMaintenance(const Relay& relay, const handoff::Maintenance& maintenance) {
    for (const auto& disabled : maintenance.disabled()) {
        bool kept = false;
        for (const auto& route : *relay.context().routes())
            if (route->config.name == disabled.route())
                kept = route->pool->setDisabled(disabled.upstream(), true);
        if (kept)
            logInfo("upgrade: upstream ", disabled.upstream(), " of route ", disabled.route(),
                    " stays disabled");
        else
            logInfo("upgrade: upstream ", disabled.upstream(), " of route ", disabled.route(),
                    " was disabled; the configuration no longer has it");
    }
}

// What an upgrade hands over: every listener of the relay, the admin socket, the metrics
// listener (duplicates, so that a reload meanwhile closes nothing being sent).
std::vector<HandoffSocket> socketsToHandOver(const Relay& relay, const Config& config,
                                             const AdminServer* admin,
                                             const MetricsExposer* metrics) {
    std::vector<HandoffSocket> sockets;
    auto duplicate = [](int fd) { return UniqueFd(::fcntl(fd, F_DUPFD_CLOEXEC, 0)); };
    relay.context().listenerSockets()->forEach([&](const SocketAddress& address, int fd) {
        sockets.push_back({handoff::SOCKET_LISTENER, address.toString(), duplicate(fd)});
    });
    if (admin != nullptr)
        sockets.push_back({handoff::SOCKET_ADMIN, config.admin.socket, duplicate(admin->listenFd())});
    if (metrics != nullptr && metrics->listenFd() >= 0)
        sockets.push_back(
            {handoff::SOCKET_METRICS, config.metrics.listen, duplicate(metrics->listenFd())});
    std::erase_if(sockets, [](const HandoffSocket& socket) { return !socket.fd; });
    return sockets;
}

// How long an upgrade waits for its new process to be ready: a start without audit recovery
// takes well under a second; a hung one must not keep the operator waiting for long.
constexpr std::chrono::milliseconds kUpgradeReadyTimeout{30000};

int serveDaemon(int argc, const char* const* argv, std::unique_ptr<InheritedSockets>& inherited) {
    CommandLine commandLine;
    try {
        commandLine = parseCommandLine(argc, argv);
    } catch (const ConfigErrors& errors) {
        std::string all;
        for (const auto& problem : errors.problems()) {
            std::cerr << "splicegate: " << problem << "\n";
            all += (all.empty() ? "" : "; ") + problem;
        }
        if (inherited) inherited->failed(all);
        return 2;
    } catch (const std::exception& error) {
        std::cerr << "splicegate: " << error.what() << "\n";
        if (inherited) inherited->failed(error.what());
        return 2;
    }
    if (commandLine.action == CommandLine::Action::Help) {
        std::cout << commandLine.helpText;
        return 0;
    }
    if (commandLine.action == CommandLine::Action::Version) {
        std::cout << "splicegate " << SPLICEGATE_VERSION << "\n";
        return 0;
    }
    if (commandLine.action == CommandLine::Action::CheckConfig)
        return checkConfigAndExit(commandLine.config);
    const Config& config = commandLine.config;
    detectJournal(std::getenv("JOURNAL_STREAM"));
    setLogLevel(config.logLevel);
    if (auto loose = looseConfigFile(config.configFile)) logWarn(*loose);
    std::vector<std::string> args(argv + 1, argv + argc);
    auto notifier = ServiceNotifier::fromEnvironment();
    try {
        checkKernel();
        loadFailpoints();
        // Before any thread starts: capabilities are per thread and inherited at creation.
        if (auto dropped = dropCapabilitiesNotKept(config); !dropped.empty())
            logInfo("no --xdp-interface: dropped ", joinNames(dropped));
        // --check-config's checks, with the capabilities the daemon keeps (an algorithm outside
        // the allowed list needs CAP_NET_ADMIN, which goes above without --xdp-interface) and
        // before anything is bound or created: what it accepts, the start accepts.
        if (auto report = checkConfiguration(config); !report.problems.empty()) {
            std::string all;
            for (const auto& problem : report.problems) {
                logError(problem);
                all += (all.empty() ? "" : "; ") + problem;
            }
            if (inherited) inherited->failed(all);
            return 2;
        }
        // Signals are taken synchronously by the main thread; workers inherit the mask.
        auto signals = controlSignals();
        ::pthread_sigmask(SIG_BLOCK, &signals, nullptr);
        // A splice into a socket whose peer is gone must return EPIPE, not kill the process.
        ::signal(SIGPIPE, SIG_IGN);
        unsigned workers = workerThreads(config);
        // The metrics listener starts first: /-/healthy answers and /-/ready says 503 while the
        // audit log is recovered and the workers start.
        std::unique_ptr<MetricsExposer> metrics;
        if (!config.metrics.listen.empty())
            metrics = std::make_unique<MetricsExposer>(
                config.metrics.listen, StatsSource{}, config.audit.dir,
                inherited ? inherited->takeMetrics(config.metrics.listen).release() : -1);
        // The control plane's peers count too: an admin or scrape flood must not make a
        // connection's pipe() fail.
        std::uint64_t controlFds =
            (config.admin.socket.empty() ? 0 : AdminServerOptions{}.maxPeers) +
            (config.metrics.listen.empty() ? 0 : HttpServerLimits{}.maxConnections);
        auto fds =
            raiseFdLimit(config.relay.maxConnections, workers, config.routes.size(), controlFds,
                         config.datapath.lane == LaneKind::Buffer   ? PipeFds::None
                         : config.datapath.lane == LaneKind::Splice ? PipeFds::PerConnection
                                                                    : PipeFds::Shared);
        if (metrics) metrics->setConnectionsMax(fds.connections);
        auto settings = workerSettings(config, fds);
        auto budget = pipeBudget(config);
        std::uint64_t firstConnectionId = 1;
        // Locked before recovery and held until exit: a second daemon changes nothing here.
        std::optional<audit::AuditDirectory> auditDirectory;
        // An upgrade: the old process (and any before it still draining) writes on in the same
        // directory, whose lock it handed over.
        AuditHolders auditHolders;
        std::uint64_t handedLeaseEnd = 0;
        auto handedAudit = inherited ? inherited->takeAudit() : std::nullopt;
        if (!config.audit.dir.empty()) {
            auditDirectory.emplace(audit::AuditDirectory::open(
                config.audit.dir, auditGroup(config),
                handedAudit ? std::move(handedAudit->lock) : UniqueFd()));
            if (auditDirectory->lockHandedOver()) {
                auditHolders = AuditHolders(handedAudit->described);
                handedLeaseEnd = handedAudit->described.connection_id_lease_end();
                logInfo("upgrade: took over the audit directory ", config.audit.dir,
                        " from the running daemon");
            }
            notifier.status("recovering the audit log");
        }
        std::optional<audit::ConnectionIdLease> idLease;  // outlives the relay's workers
        auto auditStart =
            recoverAudit(config, workers, firstConnectionId,
                         auditDirectory ? &*auditDirectory : nullptr, idLease, auditHolders,
                         handedLeaseEnd);
        const auto auditChains = auditStart.chains;
        auto chainKey = auditStart.chainKey;
        if (metrics && auditDirectory) {
            metrics->setAuditUnsealedSegments(auditStart.unsealedSegmentsLeft);
            metrics->setAuditRetentionLimit(config.audit.retentionBytes);
        }
        // The edge filter before the listeners: no connection is accepted unfiltered. After an
        // upgrade this process's program replaces the running one's on its link here; should this
        // start fail later, the old process puts its own back.
        std::optional<EdgeControl::Handed> handedEdge;
        if (auto xdp = inherited ? inherited->takeXdp() : std::nullopt)
            handedEdge = EdgeControl::Handed{std::move(xdp->described), std::move(xdp->link)};
        EdgeControl edge(config, std::move(handedEdge));
        InheritedListeners adoptListeners;
        if (inherited)
            adoptListeners = [&inherited](const SocketAddress& address) {
                return inherited->takeListeners(address);
            };
        Relay relay(config, workers, settings, budget, std::move(auditStart), firstConnectionId,
                    adoptListeners);
        logInfo("splicegate ", SPLICEGATE_VERSION, " started: ", workers, " workers, ",
                toString(settings.datapath.engine()), " engine, pipe size ",
                settings.datapath.pipeSize, " B, pipe budget ",
                budget == 0 ? std::string("unlimited") : std::to_string(budget) + " B");
        if (inherited) keepMaintenance(relay, inherited->takeMaintenance());
        Reloader reloader(relay, edge, args, config, metrics.get());
        std::unique_ptr<AdminServer> admin;
        std::unique_ptr<DaemonControl> control;
        std::unique_ptr<Upgrader> upgrader;
        std::optional<AuditHandover> auditHandover;
        if (auditDirectory && idLease)
            auditHandover.emplace(*auditDirectory, *idLease, auditChains, auditHolders, relay);
        if (!config.admin.socket.empty()) {
            upgrader = std::make_unique<Upgrader>(
                args,
                [&relay, &config, &admin, &metrics] {
                    return socketsToHandOver(relay, config, admin.get(), metrics.get());
                },
                std::string(), kUpgradeReadyTimeout, auditHandover ? &*auditHandover : nullptr,
                &edge, [&relay] { return upstreamsInMaintenance(relay); });
            control = std::make_unique<DaemonControl>(relay, reloader, edge, config, upgrader.get());
            AdminServerOptions adminOptions;
            adminOptions.socketPath = config.admin.socket;
            adminOptions.group = config.admin.group;
            adminOptions.readonlyGroup = config.admin.readonlyGroup;
            admin = std::make_unique<AdminServer>(
                std::move(adminOptions), *control,
                inherited ? inherited->takeAdmin(config.admin.socket) : UniqueFd());
            admin->start();
            logInfo("admin socket ", config.admin.socket, " (group ", config.admin.group,
                    config.admin.readonlyGroup.empty()
                        ? std::string()
                        : ", read-only group " + config.admin.readonlyGroup,
                    ")");
        }
        std::optional<MetricsExposer::StatsBinding> metricsSource;  // before relay and admin go
        if (metrics)
            metricsSource.emplace(metrics->bindStatsSource([&relay, &admin, &edge] {
                auto snapshot = relay.snapshot();
                snapshot.xdpPackets = edge.packetCounts();
                if (admin) snapshot.adminRequests = admin->requestCounts();
                return snapshot;
            }));
        auto serving = concat("serving ", config.routes.size(), " routes with ", workers, " workers");
        if (metrics) metrics->setReady(true);
        if (inherited) {
            // systemd learns the new main PID before the old process may exit; then the old one
            // stops accepting. Sockets nobody took (a route removed) close here.
            notifier.readyAsMainProcess(serving);
            inherited->ready();
            inherited.reset();
            logInfo("upgrade: this process (PID ", ::getpid(), ") serves now");
        } else {
            notifier.ready(serving);
        }
        serveSignals(relay, config, reloader, notifier, metrics.get(), admin.get(),
                     upgrader.get(), std::move(chainKey), auditHandover ? &*auditHandover : nullptr,
                     auditHolders);
        // An upgrade: the peer that asked has its answer before the admin server goes.
        if (admin && upgrader && upgrader->handedOver())
            admin->waitForPeersToLeave(std::chrono::milliseconds(2000));
        // The workers are gone: no id at or past the next was handed out. After an upgrade the
        // lease file is the new process's.
        if (idLease && !(upgrader && upgrader->handedOver())) idLease->release(relay.nextConnectionId());
        metricsSource.reset();  // before the relay and the admin server its scrapes read
        admin.reset();
        logInfo("stopped");
        return 0;
    } catch (const std::exception& error) {
        logError(error.what());
        if (inherited) inherited->failed(error.what());
        return 1;
    }
}
}  // namespace

int runDaemon(int argc, const char* const* argv) {
    // First: a failure of anything after this is reported to the daemon that started us.
    std::unique_ptr<InheritedSockets> inherited;
    try {
        inherited = InheritedSockets::fromEnvironment();
    } catch (const std::exception& error) {
        std::cerr << "splicegate: " << error.what() << "\n";
        return 1;
    }
    int code = serveDaemon(argc, argv, inherited);
    if (inherited) inherited->failed(concat("exited with status ", code, " before it was ready"));
    return code;
}

}  // namespace splicegate
