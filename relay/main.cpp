#include "relay/Daemon.h"

int main(int argc, char** argv) { return splicegate::runDaemon(argc, argv); }
