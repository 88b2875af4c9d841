#!/bin/sh
# Quick start: installs the dependencies, builds, starts a demo upstream (a static HTTP server on
# 127.0.0.1:8080 serving this repository) and runs splicegate in the foreground with the example
# config packaging/splicegate.conf (relay on 127.0.0.1:8443). Ctrl-C drains and stops both.
# Push bytes through it from another shell:  curl -s http://127.0.0.1:8443/README.md | head
set -eu
cd "$(dirname "$0")/.."
./tools/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build
python3 -m http.server 8080 --bind 127.0.0.1 --directory . >/dev/null 2>&1 &
upstream=$!
trap 'kill "$upstream" 2>/dev/null || true' EXIT INT TERM
echo "demo upstream on 127.0.0.1:8080 (pid $upstream); relay on 127.0.0.1:8443"
echo "try: curl -s http://127.0.0.1:8443/README.md | head"
echo "then: build/bin/splicegatectl --socket /tmp/splicegate-demo/admin.sock status"
echo "      curl -s http://127.0.0.1:9464/metrics | grep splicegate_bytes_total"
echo "      build/bin/splicegate-audit list /tmp/splicegate-demo/audit"
mkdir -p /tmp/splicegate-demo
build/bin/splicegate --config packaging/splicegate.conf \
    --admin-socket /tmp/splicegate-demo/admin.sock --admin-group root \
    --audit-dir /tmp/splicegate-demo/audit
