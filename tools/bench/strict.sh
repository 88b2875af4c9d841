#!/usr/bin/env bash
# Strict-mode group commit (issue 3 "Targets"): 64 streams uploading through splicegate with
# --audit-durability strict, against the design group commit replaces: one file per connection,
# each chunk fdatasync'd before the next (`splicegate-bench fsync-per-chunk`, 64 threads, the
# chunk size the relay actually wrote). Same file system, one run after the other, N rounds,
# medians. Runs in a private network namespace, like run.sh.
#
# usage: tools/bench/strict.sh [--runs N] [--streams N] [--duration S] [--audit-root DIR]
#                              [--engine inline|chain]
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tools/bench/common.sh
source "$HERE/common.sh"
RUNS=3 STREAMS=64 DURATION=5 AUDIT_ROOT=/var/tmp ENGINE=inline
ORIGINAL_ARGS=("$@")
while (($#)); do
    case $1 in
        --runs) RUNS=${2:?}; shift 2 ;;
        --streams) STREAMS=${2:?}; shift 2 ;;
        --duration) DURATION=${2:?}; shift 2 ;;
        --audit-root) AUDIT_ROOT=${2:?}; shift 2 ;;
        --engine) ENGINE=${2:?}; shift 2 ;;
        -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "strict.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[[ $RUNS =~ ^[1-9][0-9]*$ && $STREAMS =~ ^[1-9][0-9]*$ ]] || {
    echo "strict.sh: --runs and --streams want positive integers" >&2; exit 2; }

bench_enter_netns strict.sh "${ORIGINAL_ARGS[@]}"

bench_setup strict splicegate splicegate-bench splicegate-audit

SINK=127.0.0.1:65102 RELAY=127.0.0.1:65101 METRICS=127.0.0.1:65166
bench_start_sink "$SINK"

fsync_count() {  # the relay's fdatasync count (group commits) from its metrics page
    curl -s "http://$METRICS/metrics" |
        awk '/^splicegate_audit_fsync_seconds_count/ { s += $2 } END { printf "%d", s }'
}

: >"$WORK/rows"
for run in $(seq "$RUNS"); do
    AUDIT=$(mktemp -d "$AUDIT_ROOT/splicegate-strict-audit.XXXXXX")
    "$BIN/splicegate" --listen "$RELAY" --upstream "$SINK" --workers 2 --admin-socket '' \
        --metrics-listen "$METRICS" --audit-dir "$AUDIT" --audit-durability strict \
        --splice-engine "$ENGINE" >"$WORK/relay.log" 2>&1 &
    relay=$!
    PIDS+=("$relay")
    "$BIN/splicegate-bench" waitport --connect "$RELAY" --timeout 10
    "$BIN/splicegate-bench" waitport --connect "$METRICS" --timeout 10
    before=$(fsync_count)
    started=$(date +%s.%N)
    out=$("$BIN/splicegate-bench" bulk --connect "$RELAY" --streams "$STREAMS" --direction up \
        --duration "$DURATION" --warmup 0.5 --watch-pid "$relay" 2>"$WORK/bulk.err") || true
    elapsed=$(awk -v s="$started" -v e="$(date +%s.%N)" 'BEGIN { print e - s }')
    after=$(fsync_count)
    kill -TERM "$relay"; wait "$relay" || true
    summary=$("$BIN/splicegate-audit" verify "$AUDIT" 2>&1 | tail -n 1)
    # "DIR: consistent (S segments, C connections, R records, B bytes ...)"
    read -r segments connections records bytes < <(sed -E \
        's/.*\(([0-9]+) segments, ([0-9]+) connections, ([0-9]+) records, ([0-9]+) .*/\1 \2 \3 \4/' \
        <<<"$summary")
    rm -rf "$AUDIT"
    chunks=$((records - 2 * connections - 2 * segments))
    ((chunks > 0)) || { echo "strict.sh: no chunks in the log: $summary" >&2; exit 1; }
    chunk=$((bytes / chunks))
    fsyncs=$((after - before))
    base=$("$BIN/splicegate-bench" fsync-per-chunk --dir "$AUDIT_ROOT" --files "$STREAMS" \
        --chunk "$chunk" --duration "$DURATION")
    serial=$("$BIN/splicegate-bench" fsync-per-chunk --dir "$AUDIT_ROOT" --files "$STREAMS" \
        --threads 1 --chunk "$chunk" --duration "$DURATION")
    gbps=$(field gbps "$out") base_gbps=$(field gbps "$base") serial_gbps=$(field gbps "$serial")
    row=$(awk -v g="$gbps" -v f="$fsyncs" -v t="$elapsed" -v c="$chunks" -v ch="$chunk" \
        -v bg="$base_gbps" -v bf="$(field fsyncs_per_s "$base")" -v ok="$(field ok "$out")" \
        -v cpu="$(field relay_cpu_s_per_gib "$out")" -v sg="$serial_gbps" \
        -v sf="$(field fsyncs_per_s "$serial")" 'BEGIN {
            printf "%.3f %.1f %.1f %d %.3f %.1f %.2f %.3f %s %.3f %.1f %.2f", g, f / t, c / f, ch, bg, bf, g / bg, cpu, ok, sg, sf, g / sg }')
    echo "$row" >>"$WORK/rows"
    echo "strict.sh: [$run/$RUNS] $row" >&2
    [[ $(field ok "$out") == 1 ]] || echo "strict.sh: run $run: bulk reported a failure: $(cat "$WORK/bulk.err") $out" >&2
done

col() { awk -v c="$1" '{ print $c }' "$WORK/rows" | median; }
echo "# strict-mode group commit, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
echo "Command: \`tools/bench/strict.sh${ORIGINAL_ARGS[*]:+ ${ORIGINAL_ARGS[*]}}\`; $STREAMS streams up, ${DURATION}-s windows, $ENGINE engine, audit log in $AUDIT_ROOT ($(df --output=fstype "$AUDIT_ROOT" | tail -n 1)); medians of $RUNS."
echo
echo "| measure | median |"
echo "|---|---:|"
echo "| strict relay, Gbit/s | $(col 1) |"
echo "| strict relay, fdatasyncs (group commits) per second | $(col 2) |"
echo "| chunks per group commit | $(col 3) |"
echo "| mean chunk, bytes | $(col 4) |"
echo "| relay CPU-s per GiB | $(col 8) |"
echo "| one fdatasync per chunk per connection, $STREAMS files, a thread each (syncs overlap), Gbit/s | $(col 5) |"
echo "| ... its fdatasyncs per second | $(col 6) |"
echo "| the same, one thread taking the files in turn (syncs one after another), Gbit/s | $(col 10) |"
echo "| ... its fdatasyncs per second | $(col 11) |"
echo "| **strict ÷ per-chunk fdatasync, overlapping** (target ≥ 5×) | **$(col 7)×** |"
echo "| **strict ÷ per-chunk fdatasync, one after another** (target ≥ 5×) | **$(col 12)×** |"
echo
echo "Every run: gbps fsyncs/s chunks/commit chunk_bytes overlapping_gbps overlapping_fsyncs/s ratio cpu_s_per_gib ok serial_gbps serial_fsyncs/s serial_ratio"
sed 's/^/    /' "$WORK/rows"
