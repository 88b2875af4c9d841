#!/bin/bash
# archive.sh: how fast splicegate-archive ships, and at what CPU cost, against a real S3 server
# (Ceph radosgw, one node on 127.0.0.1, started and stopped here by tests/s3/radosgw.sh) beside
# what the same server takes from a plain client, in one run:
#   1. a real relay with the audit on takes MIB mebibytes of paced uploads (--rate-mbps), and is
#      stopped, which seals its segments;
#   2. `splicegate-archive --once` ships them to a fresh Object Lock bucket: wall time, MB/s,
#      archiver CPU-s per GiB (utime + stime from its /proc stat), and radosgw's CPU meanwhile;
#   3. repeated RUNS times with a new bucket and state each time; medians are the caller's.
# radosgw's OSD here is a memstore (RAM, sized here for RUNS × MIB): mind the machine's memory.
#
#   tools/bench/archive.sh [--mib N] [--runs N] [--parallel N] [--payload-hash crc32c|sha256]
#                          [--part-mb N]   (the archiver's --s3-part-mb; 0 = one PUT per object)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
MIB=256 RUNS=3 PARALLEL=2 PAYLOAD_HASH=crc32c PART_MB=64
while (($#)); do
    case $1 in
        --mib) MIB=${2:?}; shift 2 ;;
        --runs) RUNS=${2:?}; shift 2 ;;
        --parallel) PARALLEL=${2:?}; shift 2 ;;
        --payload-hash) PAYLOAD_HASH=${2:?}; shift 2 ;;
        --part-mb) PART_MB=${2:?}; shift 2 ;;
        *) echo "usage: $0 [--mib N] [--runs N] [--parallel N] [--payload-hash crc32c|sha256] [--part-mb N]" >&2; exit 2 ;;
    esac
done
# shellcheck source=tools/bench/common.sh
source "$HERE/common.sh"
# Under /var/tmp, not /tmp: the relay's audit files want a disk file system (O_DIRECT).
BENCH_WORK_BASE=/var/tmp bench_setup archive-bench splicegate splicegate-archive splicegate-bench splicegate-bench-s3-bucket

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }

# Every run's bucket stays in the OSD's RAM until the end: room for all of them.
SPLICEGATE_RADOSGW_MEMSTORE_BYTES=$(( (RUNS + 1) * MIB * 5 / 4 * 1048576 )) \
    "$ROOT/tests/s3/radosgw.sh" start "$WORK/s3" >/dev/null
ENDPOINT=$(head -n1 "$WORK/s3/endpoint")
RGW_PID=$(cat "$WORK/s3"/radosgw.pid)
OSD_PID=$(cat "$WORK/s3/osd.pid")

# The audit log: paced 1-stream upload through the relay for long enough to write MIB.
"$BIN/splicegate-bench" server --mode sink --listen 127.0.0.1:17102 --duration 600 >/dev/null 2>&1 &
PIDS+=($!)
"$BIN/splicegate-bench" waitport --connect 127.0.0.1:17102 --timeout 10
"$BIN/splicegate" --listen 127.0.0.1:17101 --upstream 127.0.0.1:17102 --admin-socket '' \
    --metrics-listen '' --audit-dir "$WORK/audit" >"$WORK/relay.log" 2>&1 &
RELAY=$!
PIDS+=($RELAY)
"$BIN/splicegate-bench" waitport --connect 127.0.0.1:17101 --timeout 10
SECONDS_NEEDED=$(awk -v m="$MIB" 'BEGIN { printf "%.1f", m * 8.388608 / 1000 }')
"$BIN/splicegate-bench" bulk --connect 127.0.0.1:17101 --direction up --rate-mbps 1000 \
    --duration "$SECONDS_NEEDED" --warmup 0 >/dev/null
kill -TERM "$RELAY"
wait "$RELAY" || true
AUDIT_BYTES=$(du -sb "$WORK/audit" | awk '{ print $1 }')
echo "archive.sh: audit log of $AUDIT_BYTES bytes in $(ls "$WORK/audit"/*.index | wc -l) segments; endpoint $ENDPOINT" >&2

HZ=$(getconf CLK_TCK)
for run in $(seq "$RUNS"); do
    bucket=bench-$run-$$
    "$BIN/splicegate-bench-s3-bucket" --endpoint "$ENDPOINT" --credentials "$WORK/s3/credentials" \
        --bucket "$bucket"
    rgw0=$(cpu_ticks "$RGW_PID") osd0=$( [[ -n $OSD_PID ]] && cpu_ticks "$OSD_PID" || echo 0)
    start=$(date +%s.%N)
    ${ARCHIVER_WRAPPER:-} "$BIN/splicegate-archive" --config /dev/null --once --audit-dir "$WORK/audit" \
        --state-dir "$WORK/state-$run" --s3-endpoint "$ENDPOINT" --s3-bucket "$bucket" \
        --s3-prefix bench --s3-credentials-file "$WORK/s3/credentials" --lock-days 1 \
        --parallel "$PARALLEL" --s3-payload-hash "$PAYLOAD_HASH" --s3-part-mb "$PART_MB" \
        --log-level warn &
    archiver=$!
    # The archiver's own CPU, read just before it exits (it is a child: /proc stays until wait).
    ticks=0
    while kill -0 "$archiver" 2>/dev/null; do
        t=$(cpu_ticks "$archiver")
        [[ $t -gt 0 ]] && ticks=$t
        sleep 0.05
    done
    wait "$archiver"
    end=$(date +%s.%N)
    rgw1=$(cpu_ticks "$RGW_PID") osd1=$( [[ -n $OSD_PID ]] && cpu_ticks "$OSD_PID" || echo 0)
    awk -v b="$AUDIT_BYTES" -v s="$start" -v e="$end" -v t="$ticks" -v hz="$HZ" \
        -v r=$((rgw1 - rgw0)) -v o=$((osd1 - osd0)) -v run="$run" -v pm="$PART_MB" 'BEGIN {
        secs = e - s; gib = b / 1073741824
        printf "run=%d part_mb=%d bytes=%d seconds=%.2f mb_per_s=%.1f archiver_cpu_s_per_gib=%.3f radosgw_cpu_s_per_gib=%.2f osd_cpu_s_per_gib=%.2f\n",
            run, pm, b, secs, b / 1e6 / secs, t / hz / gib, r / hz / gib, o / hz / gib }'
done
