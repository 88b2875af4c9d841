#!/bin/bash
# archive-alongside.sh: the relay's throughput and rr tail with and without splicegate-archive
# shipping its audit log at the same time, how fast the archive keeps up with the audit, and the
# time from a segment's seal to its verified objects. One box: radosgw (tests/s3/radosgw.sh, one
# memstore OSD) runs on the same CPUs as the relay, and its own 3-4 CPU-s per GiB would count
# against the relay here, where a real deployment's object store is elsewhere. So by default
# (--store-priority idle) the store runs under SCHED_IDLE: it gets only the CPU the relay and the
# archiver leave, as a remote store costs the box nothing; --store-priority normal runs it as any
# process (the worst case: the object store on the gateway's own CPUs). The archiver runs as its
# unit runs it (packaging/systemd/splicegate-archive.service: SCHED_BATCH, nice 10).
# Per run, one relay with the audit on (two routes: bulk to a sink, rr to an echo server):
#   phase off: a paced upload of RATE Mbit/s and 64 rr connections for DURATION s, no archiver;
#   phase on:  the same load for DURATION s while `splicegate-archive` (scan every second) ships
#              every segment sealed so far, phase off's included;
#   then the relay stops (sealing the rest) and the archiver ships what is left.
# Segments roll at 1 GiB per worker. Seal time: the index file's mtime (its seal is the last
# write); verified time: the state file's mtime (its last move is to verified).
#
# --rr-rate N offers the rr connections N requests/s in all on a fixed schedule (latency counted
# from when each request was due) instead of saturating the CPUs: a gateway with headroom, where
# the default (0) is one with none. --archiver-priority idle runs the archiver under SCHED_IDLE
# instead of as its unit does, to tell its own CPU's share of the tail from the rest.
#
#   tools/bench/archive-alongside.sh [--rate-mbps N] [--duration S] [--runs N] [--rr-rate N]
#                                    [--store-priority idle|normal] [--archiver-priority unit|idle]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
RATE=600 DURATION=30 RUNS=3 STORE_PRIORITY=idle RR_RATE=0 ARCHIVER_PRIORITY=unit
USAGE="usage: $0 [--rate-mbps N] [--duration S] [--runs N] [--rr-rate N] [--store-priority idle|normal] [--archiver-priority unit|idle]"
while (($#)); do
    case $1 in
        --rate-mbps) RATE=${2:?}; shift 2 ;;
        --duration) DURATION=${2:?}; shift 2 ;;
        --runs) RUNS=${2:?}; shift 2 ;;
        --store-priority) STORE_PRIORITY=${2:?}; shift 2 ;;
        --rr-rate) RR_RATE=${2:?}; shift 2 ;;
        --archiver-priority) ARCHIVER_PRIORITY=${2:?}; shift 2 ;;
        *) echo "$USAGE" >&2; exit 2 ;;
    esac
done
case $STORE_PRIORITY in
    idle) STORE_SCHED=(chrt --idle 0) ;;
    normal) STORE_SCHED=() ;;
    *) echo "archive-alongside.sh: --store-priority is idle or normal, not '$STORE_PRIORITY'" >&2; exit 2 ;;
esac
case $ARCHIVER_PRIORITY in
    unit) ARCHIVER_SCHED=(nice -n 10 chrt --batch 0) ;;   # CPUSchedulingPolicy=batch, Nice=10
    idle) ARCHIVER_SCHED=(chrt --idle 0) ;;
    *) echo "archive-alongside.sh: --archiver-priority is unit or idle, not '$ARCHIVER_PRIORITY'" >&2; exit 2 ;;
esac
# shellcheck source=tools/bench/common.sh
source "$HERE/common.sh"
# Under /var/tmp, not /tmp: the relay's audit files want a disk file system (O_DIRECT).
BENCH_WORK_BASE=/var/tmp bench_setup archive-alongside splicegate splicegate-archive splicegate-bench splicegate-bench-s3-bucket

# A fresh radosgw per run: its memstore OSD keeps every locked object in RAM (the lock forbids
# deleting them), two phases of audit a run, plus a quarter.
PER_RUN_BYTES=$(( RATE * DURATION * 2 / 8 * 1000000 ))

"$BIN/splicegate-bench" server --mode sink --listen 127.0.0.1:17202 --duration 3600 >/dev/null 2>&1 &
PIDS+=($!)
"$BIN/splicegate-bench" server --mode echo --listen 127.0.0.1:17203 --duration 3600 >/dev/null 2>&1 &
PIDS+=($!)
"$BIN/splicegate-bench" waitport --connect 127.0.0.1:17202 --timeout 10
"$BIN/splicegate-bench" waitport --connect 127.0.0.1:17203 --timeout 10
cat >"$WORK/relay.conf" <<CONF
[route.bulk]
listen = 127.0.0.1:17201
upstream = 127.0.0.1:17202
[route.rr]
listen = 127.0.0.1:17204
upstream = 127.0.0.1:17203
CONF

value() { tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p"; }

# One phase: the paced upload and the rr probe together; prints "gbps p99_us".
load() {
    local bulk rr
    "$BIN/splicegate-bench" bulk --connect 127.0.0.1:17201 --direction up --streams 2 \
        --rate-mbps "$RATE" --duration "$DURATION" --warmup 1 >"$WORK/bulk.out" &
    bulk=$!
    "$BIN/splicegate-bench" rr --connect 127.0.0.1:17204 --conns 64 --threads 1 --rate "$RR_RATE" \
        --duration "$DURATION" --warmup 1 >"$WORK/rr.out"
    wait "$bulk"
    echo "$(value "$(cat "$WORK/bulk.out")" gbps) $(value "$(cat "$WORK/rr.out")" p99_us)"
}

for run in $(seq "$RUNS"); do
    SPLICEGATE_RADOSGW_MEMSTORE_BYTES=$(( (PER_RUN_BYTES + (1 << 30)) * 5 / 4 )) \
        "${STORE_SCHED[@]}" "$ROOT/tests/s3/radosgw.sh" start "$WORK/s3" >/dev/null
    ENDPOINT=$(head -n1 "$WORK/s3/endpoint")
    audit=$WORK/audit-$run state=$WORK/state-$run bucket=alongside-$run-$$
    "$BIN/splicegate-bench-s3-bucket" --endpoint "$ENDPOINT" --credentials "$WORK/s3/credentials" \
        --bucket "$bucket"
    "$BIN/splicegate" --config "$WORK/relay.conf" --admin-socket '' --metrics-listen '' \
        --audit-dir "$audit" >"$WORK/relay-$run.log" 2>&1 &
    relay=$!
    PIDS+=($relay)
    "$BIN/splicegate-bench" waitport --connect 127.0.0.1:17201 --timeout 10
    read -r off_gbps off_p99 < <(load)
    audit_before=$(du -sb "$audit" | awk '{ print $1 }')
    "${ARCHIVER_SCHED[@]}" "$BIN/splicegate-archive" --config /dev/null --audit-dir "$audit" \
        --state-dir "$state" --s3-endpoint "$ENDPOINT" --s3-bucket "$bucket" --s3-prefix alongside \
        --s3-credentials-file "$WORK/s3/credentials" --lock-days 1 --scan-interval-ms 1000 \
        --log-level warn >"$WORK/archive-$run.log" 2>&1 &
    archiver=$!
    PIDS+=($archiver)
    on_start=$(date +%s.%N)
    read -r on_gbps on_p99 < <(load)
    on_end=$(date +%s.%N)
    audit_after=$(du -sb "$audit" | awk '{ print $1 }')
    kill -TERM "$relay"; wait "$relay" || true
    kill -TERM "$archiver"; wait "$archiver" || true
    "$BIN/splicegate-archive" --config /dev/null --once --audit-dir "$audit" --state-dir "$state" \
        --s3-endpoint "$ENDPOINT" --s3-bucket "$bucket" --s3-prefix alongside \
        --s3-credentials-file "$WORK/s3/credentials" --lock-days 1 --log-level warn \
        >>"$WORK/archive-$run.log" 2>&1 || echo "archive-alongside.sh: run $run: the final --once pass failed" >&2
    python3 - "$audit" "$state" "$run" "$off_gbps" "$off_p99" "$on_gbps" "$on_p99" \
        "$audit_before" "$audit_after" "$DURATION" "$on_start" "$on_end" <<'PY'
import os, sys
audit, state, run, off_g, off_p, on_g, on_p, before, after, duration, start, end = sys.argv[1:]
lat = []
shipped = 0  # data bytes whose objects were verified while the load ran
for name in sorted(os.listdir(state)):
    if not name.endswith(".upload"): continue
    index = os.path.join(audit, name[:-len(".upload")] + ".index")
    if not os.path.exists(index): continue
    verified = os.stat(os.path.join(state, name)).st_mtime
    lat.append(verified - os.stat(index).st_mtime)
    data = index[:-len(".index")] + ".data"
    if float(start) <= verified <= float(end) and os.path.exists(data):
        shipped += os.path.getsize(data)
lat.sort()
pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] if lat else float("nan")
audited = (int(after) - int(before)) / float(duration) / 1e6
print(f"run={run} off_gbps={off_g} on_gbps={on_g} on_over_off={float(on_g)/float(off_g):.3f} "
      f"off_rr_p99_us={off_p} on_rr_p99_us={on_p} p99_on_over_off={float(on_p)/float(off_p):.3f} "
      f"audit_mb_per_s={audited:.1f} archived_mb_per_s={shipped / (float(end) - float(start)) / 1e6:.1f} segments={len(lat)} seal_to_verified_p50_s={pick(0.5):.1f} "
      f"p95_s={pick(0.95):.1f} max_s={lat[-1] if lat else float('nan'):.1f}")
PY
    grep -h "warn\|error" "$WORK/archive-$run.log" | head -3 >&2 || true
    "$ROOT/tests/s3/radosgw.sh" stop "$WORK/s3" >/dev/null
    rm -rf "$audit" "$state"
done
