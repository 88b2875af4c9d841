#pragma once
// The subcommands of splicegate-bench. Each parses argv from index 2 on, prints its usage on
// --help, and returns the process exit code (0 success, 1 runtime failure); usage errors throw
// UsageError (exit 2, reported by main).

namespace splicegate::bench {

int runServer(int argc, char** argv);
int runBulk(int argc, char** argv);
int runRequestResponse(int argc, char** argv);
int runChurn(int argc, char** argv);
int runIdle(int argc, char** argv);
int runWaitPort(int argc, char** argv);
int runReport(int argc, char** argv);
int runFsyncPerChunk(int argc, char** argv);

}  // namespace splicegate::bench
