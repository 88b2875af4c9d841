#!/bin/bash
# archive-list.sh: how long `splicegate-audit list s3://…` takes over a day of many boxes'
# archive, against a real S3 server (Ceph radosgw, one node on 127.0.0.1, started and stopped
# here by tests/s3/radosgw.sh); the target is one day of 20 boxes in 30 s or less.
#   1. a real relay (2 workers) audits CHURN seconds of short echoed connections (200 bytes,
#      splicegate-bench churn) per run, RUNS runs (each run opens a segment per worker), and `splicegate-archive --once` ships them under the
#      prefix seed;
#   2. splicegate-bench-s3-fill copies seed's segments under box01..boxNN (--boxes), once per
#      hour of 2026-01-01 (--hours), keyed and timed as the archiver would have (the data and
#      index objects only under box01: list reads neither, and radosgw's memstore is RAM);
#   3. times (best of --repeat): list over one box; over all boxes, one list per box in a loop
#      and `list s3://BUCKET --all-boxes`; a one-hour --since/--until window over one box (the
#      pruned read); an extract of one connection.
# radosgw's OSD here is a memstore (RAM): the objects are small.
#
# --baseline BIN: the list of one box and --all-boxes timed with that splicegate-audit binary
# too, on the same bucket (before/after a change; the churn's connection count varies by run).
#
#   tools/bench/archive-list.sh [--boxes N] [--hours N] [--churn SECONDS] [--runs N] [--repeat N]
#                               [--baseline BIN]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BOXES=20 HOURS=24 CHURN=0.2 RUNS=1 REPEAT=3 BASELINE=
while (($#)); do
    case $1 in
        --boxes) BOXES=${2:?}; shift 2 ;;
        --hours) HOURS=${2:?}; shift 2 ;;
        --churn) CHURN=${2:?}; shift 2 ;;
        --runs) RUNS=${2:?}; shift 2 ;;
        --repeat) REPEAT=${2:?}; shift 2 ;;
        --baseline) BASELINE=${2:?}; shift 2 ;;
        *) echo "usage: $0 [--boxes N] [--hours N] [--churn SECONDS] [--runs N] [--repeat N] [--baseline BIN]" >&2; exit 2 ;;
    esac
done
# shellcheck source=tools/bench/common.sh
source "$HERE/common.sh"
# Under /var/tmp, not /tmp: the relay's audit files want a disk file system (O_DIRECT).
BENCH_WORK_BASE=/var/tmp bench_setup archive-list-bench splicegate splicegate-archive splicegate-audit splicegate-bench splicegate-bench-s3-bucket splicegate-bench-s3-fill

"$ROOT/tests/s3/radosgw.sh" start "$WORK/s3" >/dev/null
ENDPOINT=$(head -n1 "$WORK/s3/endpoint")
CREDS=$WORK/s3/credentials
BUCKET=list-bench-$$
"$BIN/splicegate-bench-s3-bucket" --endpoint "$ENDPOINT" --credentials "$CREDS" --bucket "$BUCKET"

# 1. One real box's archive.
"$BIN/splicegate-bench" server --mode echo --listen 127.0.0.1:17112 --duration 600 >/dev/null 2>&1 &
PIDS+=($!)
"$BIN/splicegate-bench" waitport --connect 127.0.0.1:17112 --timeout 10
for run in $(seq "$RUNS"); do
    "$BIN/splicegate" --listen 127.0.0.1:17111 --upstream 127.0.0.1:17112 --workers 2 \
        --admin-socket '' --metrics-listen '' --audit-dir "$WORK/audit" >"$WORK/relay.log" 2>&1 &
    relay=$!
    PIDS+=($relay)
    "$BIN/splicegate-bench" waitport --connect 127.0.0.1:17111 --timeout 10
    "$BIN/splicegate-bench" churn --connect 127.0.0.1:17111 --concurrency 2 --threads 1 \
        --size 200 --duration "$CHURN" --warmup 0 >/dev/null
    kill -TERM "$relay"
    wait "$relay" || true
done
"$BIN/splicegate-archive" --config /dev/null --once --audit-dir "$WORK/audit" \
    --state-dir "$WORK/state" --s3-endpoint "$ENDPOINT" --s3-bucket "$BUCKET" --s3-prefix seed \
    --s3-credentials-file "$CREDS" --lock-days 1 --log-level warn
SEED_ROWS=$("$BIN/splicegate-audit" list "s3://$BUCKET/seed" --s3-endpoint "$ENDPOINT" \
    --s3-credentials-file "$CREDS" --jsonl | wc -l)
echo "archive-list.sh: seed box: $SEED_ROWS connections in $(ls "$WORK/audit"/*.index | wc -l) segments" >&2

# 2. The simulated boxes.
start=$(date +%s.%N)
"$BIN/splicegate-bench-s3-fill" --endpoint "$ENDPOINT" --credentials "$CREDS" --bucket "$BUCKET" \
    --from seed --boxes "$BOXES" --hours "$HOURS" --day 2026-01-01 --payload-boxes 1 >&2
echo "archive-list.sh: filled in $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }') s" >&2

S3=(--s3-endpoint "$ENDPOINT" --s3-credentials-file "$CREDS")
# best_of NAME COMMAND...: the best wall time of REPEAT runs, and the output lines of the last
# one (its bytes with COUNT=bytes).
best_of() {
    local name=$1 best='' start end secs rows unit=${COUNT:-lines}
    shift
    for _ in $(seq "$REPEAT"); do
        start=$(date +%s.%N)
        if [[ $unit == bytes ]]; then rows=$("$@" | wc -c); else rows=$("$@" | wc -l); fi
        end=$(date +%s.%N)
        secs=$(awk -v s="$start" -v e="$end" 'BEGIN { printf "%.3f", e - s }')
        if [[ -z $best ]] || awk -v a="$secs" -v b="$best" 'BEGIN { exit !(a < b) }'; then best=$secs; fi
    done
    echo "$name seconds=$best $unit=$rows"
}
list_each_box() {
    local box
    for box in $(seq -f 'box%02g' 1 "$BOXES"); do
        "$BIN/splicegate-audit" list "s3://$BUCKET/$box" "${S3[@]}" --jsonl
    done
}
best_of "list_one_box(${HOURS}h)" "$BIN/splicegate-audit" list "s3://$BUCKET/box01" "${S3[@]}" --jsonl
best_of "list_each_box_loop(${BOXES}x${HOURS}h)" list_each_box
if "$BIN/splicegate-audit" list --help | grep -q -- --all-boxes; then
    best_of "list_all_boxes(${BOXES}x${HOURS}h)" "$BIN/splicegate-audit" list "s3://$BUCKET" \
        --all-boxes "${S3[@]}" --jsonl
fi
best_of "list_one_box_one_hour_window" "$BIN/splicegate-audit" list "s3://$BUCKET/box01" "${S3[@]}" \
    --jsonl --since 2026-01-01T12:00:00Z --until 2026-01-01T12:59:59Z
# From hour 0: its copies keep the seed's ids, which their (copied) index objects hold.
ID=$("$BIN/splicegate-audit" list "s3://$BUCKET/box01" "${S3[@]}" --jsonl \
    --since 2026-01-01T00:00:00Z --until 2026-01-01T00:59:59Z | sed -n '1s/{"id": \([0-9]*\),.*/\1/p')
COUNT=bytes best_of "extract_one_connection(id=$ID)" "$BIN/splicegate-audit" extract "s3://$BUCKET/box01" \
    "${S3[@]}" --connection "$ID" --direction c2u
if [[ -n $BASELINE ]]; then
    best_of "baseline_list_one_box(${HOURS}h)" "$BASELINE" list "s3://$BUCKET/box01" "${S3[@]}" --jsonl
    best_of "baseline_list_all_boxes(${BOXES}x${HOURS}h)" "$BASELINE" list "s3://$BUCKET" \
        --all-boxes "${S3[@]}" --jsonl
fi
