// splicegate-archive: ships each sealed segment of a splicegate audit directory to an
// S3-compatible bucket with Object Lock, and keeps track of what is verified there
// (docs/archive.md, splicegate-archive(8)).
// Exit status: 0 success, 1 runtime failure (with --once: a segment failed or conflicted),
// 2 usage error. Errors are one line each on stderr.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <iostream>
#include <memory>
#include <mutex>
#include <thread>

#include "archive/ArchiveOptions.h"
#include "archive/ArchiveService.h"
#include "common/Error.h"
#include "common/Log.h"
#include "common/SocketAddress.h"
#include "metrics/HttpServer.h"

#ifndef SPLICEGATE_VERSION
#define SPLICEGATE_VERSION "unknown"
#endif

using namespace splicegate;
using namespace splicegate::archive;

namespace {

std::string hostName() {
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "splicegate";
    return name;
}

std::int64_t nowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// Waits for SIGTERM or SIGINT (blocked in every thread, taken by sigtimedwait here).
bool stopRequested(const sigset_t& signals, unsigned waitMs) {
    timespec timeout{static_cast<time_t>(waitMs / 1000), static_cast<long>(waitMs % 1000) * 1000000};
    int signal = ::sigtimedwait(&signals, nullptr, &timeout);
    return signal == SIGTERM || signal == SIGINT;
}

int run(const ArchiveOptions& options) {
    s3::Credentials credentials;
    try {
        credentials = s3::loadCredentials(options.credentialsFile);
    } catch (const std::runtime_error& e) {
        throw UsageError(e.what());  // a configuration problem: exit 2
    }
    s3::S3Client client(options.client, credentials);
    S3ObjectStore bucket(client, options.bucket);
    UploadStateStore states(options.stateDir);
    Archiver archiver(bucket, states, options.archive);
    // Before any upload of this process: what a run killed during a multipart upload left.
    if (auto stale = archiver.abortStaleUploads(); !stale)
        logWarn("archive: unfinished multipart uploads not cleaned up: ", stale.error.message,
                " (each resumed segment aborts its own before it is shipped again)");
    else if (*stale > 0)
        logInfo("archive: aborted ", *stale,
                " unfinished multipart uploads a previous run left on this prefix");
    ArchiveMetrics metrics;
    metrics.countHttp(client);
    std::unique_ptr<HttpServer> metricsServer;
    if (!options.metricsListen.empty()) {
        auto addresses = SocketAddress::resolve(options.metricsListen);  // UsageError if bad
        metricsServer = std::make_unique<HttpServer>(
            addresses.front(), [&metrics](std::string_view, std::string_view path) {
                HttpResponse response;
                if (path == "/metrics") {
                    response.contentType = "text/plain; version=0.0.4; charset=utf-8";
                    response.body = metrics.exposition();
                } else if (path == "/-/healthy" || path == "/-/ready") {
                    response.body = "OK\n";
                } else {
                    response.status = 404;
                    response.body = "not found\n";
                }
                return response;
            });
        logInfo("metrics endpoint listening on http://", options.metricsListen, "/metrics");
    }
    ArchiveService service(archiver, states, options.auditDir, options.parallel, &metrics);
    logInfo("archiving ", options.auditDir, " to s3://", options.bucket, "/",
            options.archive.prefix, " at ", options.client.endpoint, " (state in ",
            options.stateDir, ")");
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    for (;;) {
        auto pass = service.runPass(nowNs());
        if (options.once) return pass.failed + pass.conflicts == 0 ? 0 : 1;
        if (stopRequested(signals, options.scanIntervalMs)) {
            logInfo("stopping: signal received");
            return 0;
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // before any thread starts
    ArchiveOptions options;
    try {
        options = parseArchiveOptions({argv + 1, argv + argc}, hostName());
    } catch (const UsageError& e) {
        std::cerr << "splicegate-archive: " << e.what() << "\n";
        return 2;
    }
    if (options.help) {
        std::cout << options.helpText;
        return 0;
    }
    if (options.version) {
        std::cout << "splicegate-archive " << SPLICEGATE_VERSION << "\n";
        return 0;
    }
    LogLevel level;
    if (!parseLogLevel(options.logLevel, level)) {
        std::cerr << "splicegate-archive: --log-level '" << options.logLevel
                  << "': must be debug, info, warn or error\n";
        return 2;
    }
    setLogLevel(level);
    detectJournal(std::getenv("JOURNAL_STREAM"));
    try {
        return run(options);
    } catch (const UsageError& e) {
        std::cerr << "splicegate-archive: " << e.what() << "\n";
        return 2;
    } catch (const std::exception& e) {
        std::cerr << "splicegate-archive: " << e.what() << "\n";
        return 1;
    }
}
