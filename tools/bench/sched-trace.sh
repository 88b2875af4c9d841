#!/bin/bash
# sched-trace.sh: runs the rr test (64 B x 64 connections, 2-thread client and echo upstream)
# through one relay and records the CPU scheduler for 2 s of its window with `perf sched
# record`, then prints `perf sched latency`: per thread its CPU time, how often it was switched
# in, and how long it waited for a CPU once woken. It answers "does the relay's tail come from
# its work or from when it gets a CPU", which run.sh's per-run runqueue figures only hint at.
#
#   tools/bench/sched-trace.sh splicegate|haproxy [--splicegate PATH]
#
# Loopback only, ports 17003 and 17010; everything it starts is stopped by PID on exit.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=$ROOT/build/bin
party=${1:-}
SPLICEGATE=$BIN/splicegate
[[ ${2:-} == --splicegate ]] && SPLICEGATE=${3:?--splicegate wants a path}
case $party in splicegate|haproxy) ;; *) echo "usage: $0 splicegate|haproxy [--splicegate PATH]" >&2; exit 2 ;; esac
command -v perf >/dev/null || { echo "sched-trace.sh: perf (Debian's linux-perf) is needed" >&2; exit 1; }
WORK=$(mktemp -d /tmp/splicegate-sched.XXXXXX)
PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT
renice -n -10 -p $$ >/dev/null
ECHO=127.0.0.1:17003 RELAY=127.0.0.1:17010
"$BIN/splicegate-bench" server --mode echo --listen $ECHO --threads 2 --duration 60 \
    >"$WORK/echo.log" 2>&1 &
PIDS+=($!)
"$BIN/splicegate-bench" waitport --connect $ECHO --timeout 10
if [[ $party == splicegate ]]; then
    "$SPLICEGATE" --listen $RELAY --upstream $ECHO --workers 2 --admin-socket '' \
        --metrics-listen '' --audit-dir '' >"$WORK/relay.log" 2>&1 &
else
    BENCH_LISTEN=$RELAY BENCH_UPSTREAM=$ECHO haproxy -db -f "$HERE/haproxy-nosplice.cfg" \
        >"$WORK/relay.log" 2>&1 &
fi
PIDS+=($!)
"$BIN/splicegate-bench" waitport --connect $RELAY --timeout 10
"$BIN/splicegate-bench" rr --conns 64 --size 64 --threads 2 --duration 5 --warmup 0.5 \
    --connect $RELAY >"$WORK/client.out" &
client=$!
sleep 1.5
perf sched record -o "$WORK/sched.data" -- sleep 2 >/dev/null 2>&1
wait $client
cat "$WORK/client.out"
perf sched latency -i "$WORK/sched.data" 2>/dev/null | sort -t'|' -k2 -rn | head -6
echo "sched-trace.sh: trace kept in $WORK/sched.data"
