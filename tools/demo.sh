#!/bin/sh
# Quick start: installs the dependencies, builds, starts a demo upstream (a static HTTP server on
# 127.0.0.1:8080 serving this repository) and runs splicegate in the foreground with the example
# config packaging/splicegate.conf (relay on 127.0.0.1:8443). Ctrl-C drains and stops both.
# Push bytes through it from another shell:  curl -s http://127.0.0.1:8443/README.md | head
set -eu
cd "$(dirname "$0")/.."
./tools/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
# The three binaries the demo runs, not the tests and benchmarks (most of the tree).
cmake --build build --target splicegate splicegatectl splicegate-audit
# The example config relays to 127.0.0.1:8080: another server there would answer in place of
# the demo upstream (or the demo upstream would not start and curl would wait on nothing).
if ! python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 8080))' 2>/dev/null; then
  echo "demo.sh: 127.0.0.1:8080 is taken (ss -ltnp 'sport = :8080' shows by what); the" \
       "demo upstream needs it: stop that server or change [route.demo] in" \
       "packaging/splicegate.conf" >&2
  exit 1
fi
python3 -m http.server 8080 --bind 127.0.0.1 --directory . >/dev/null 2>&1 &
upstream=$!
trap 'kill "$upstream" 2>/dev/null || true' EXIT INT TERM
# Up to 5 s for it to answer; it says nothing when it fails.
tries=0
until python3 -c 'import socket; socket.create_connection(("127.0.0.1", 8080), 1)' 2>/dev/null; do
  tries=$((tries + 1))
  if ! kill -0 "$upstream" 2>/dev/null || [ "$tries" -ge 50 ]; then
    echo "demo.sh: the demo upstream (python3 -m http.server 8080) did not start" >&2
    exit 1
  fi
  sleep 0.1
done
echo "demo upstream on 127.0.0.1:8080 (pid $upstream); relay on 127.0.0.1:8443"
echo "try: curl -s http://127.0.0.1:8443/README.md | head"
echo "then: build/bin/splicegatectl --socket /tmp/splicegate-demo/admin.sock status"
echo "      curl -s http://127.0.0.1:9464/metrics | grep splicegate_bytes_total"
echo "      build/bin/splicegate-audit list /tmp/splicegate-demo/audit"
mkdir -p /tmp/splicegate-demo
build/bin/splicegate --config packaging/splicegate.conf \
    --admin-socket /tmp/splicegate-demo/admin.sock --admin-group root \
    --audit-dir /tmp/splicegate-demo/audit
