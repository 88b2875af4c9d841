#pragma once
// The daemon's process-level duties: options, limits, signals, the relay's lifetime.
// runDaemon() is main(); it returns the exit code (0 ok, 1 runtime failure, 2 usage error).
namespace splicegate {
int runDaemon(int argc, const char* const* argv);
}
