#!/bin/sh
# Installs the dependencies, builds everything and runs the whole test suite (CTest).
# Needs root: integration tests start the daemon, open thousands of sockets and use namespaces.
set -eu
cd "$(dirname "$0")/.."
./tools/install-deps.sh
# Warnings are errors here (and so in CI); a plain cmake build only reports them.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPLICEGATE_WERROR=ON
cmake --build build
ctest --test-dir build --output-on-failure --timeout 600 "$@"
