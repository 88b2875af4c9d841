#!/usr/bin/env bash
# The audit over a long run (issue 12: at the disk's pace for hours, not for what the page cache
# hides): one relay with the audit on and its own retention (--audit-retention-bytes) takes 8
# upload streams for MINUTES, and is sampled every INTERVAL seconds from its metrics endpoint and
# /proc: relayed and audited Gbit/s, relay CPU-s per GiB, resident memory, the audit directory's
# size, audit errors and lost bytes. The disk's O_DIRECT bandwidth (fio) is measured before and
# after on the same filesystem. At the end the log that retention kept is verified
# (`splicegate-audit verify`). The first interval holds the page cache's fill (docs/kernel-notes.md
# §12) and is left out of the summary. --live-readers: an operator reads the log meanwhile
# (`splicegate-audit verify`, `list`, and `extract` of the first connection listed, one after
# another until the load ends); their runs and failures go in the report. Their reads share the
# disk with the audit, so take the throughput figures from a run without them.
# --upstream-tcp-congestion ALGO is passed to the relay (docs/kernel-notes.md §20).
# usage: tools/bench/audit-soak.sh [--minutes 30] [--interval 60] [--streams 8] [--workers 2]
#            [--durability batch] [--retention-gib 16] [--audit-root /var/tmp] [--fio-size 6G]
#            [--live-readers] [--upstream-tcp-congestion ALGO] [--out FILE]
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tools/bench/common.sh
source "$HERE/common.sh"
MINUTES=30 INTERVAL=60 STREAMS=8 WORKERS=2 DURABILITY=batch RETENTION_GIB=16
AUDIT_ROOT=/var/tmp FIO_SIZE=6G OUT="" LIVE_READERS=0
CONGESTION_OPTION=()
ORIGINAL_ARGS=("$@")
while (($#)); do
    case $1 in
        --minutes) MINUTES=${2:?}; shift 2 ;;
        --interval) INTERVAL=${2:?}; shift 2 ;;
        --streams) STREAMS=${2:?}; shift 2 ;;
        --workers) WORKERS=${2:?}; shift 2 ;;
        --durability) DURABILITY=${2:?}; shift 2 ;;
        --retention-gib) RETENTION_GIB=${2:?}; shift 2 ;;
        --audit-root) AUDIT_ROOT=${2:?}; shift 2 ;;
        --fio-size) FIO_SIZE=${2:?}; shift 2 ;;
        --live-readers) LIVE_READERS=1; shift ;;
        --upstream-tcp-congestion) CONGESTION_OPTION=(--upstream-tcp-congestion "${2:?}"); shift 2 ;;
        --out) OUT=${2:?}; shift 2 ;;
        -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "audit-soak.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
for n in "$MINUTES" "$INTERVAL" "$STREAMS" "$WORKERS" "$RETENTION_GIB"; do
    [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "audit-soak.sh: '$n' is not a positive integer" >&2; exit 2; }
done
((MINUTES <= 60)) || { echo "audit-soak.sh: --minutes is at most 60 (the load generator's limit)" >&2; exit 2; }
case $DURABILITY in batch|strict|none) ;; *)
    echo "audit-soak.sh: --durability must be batch, strict or none" >&2; exit 2 ;; esac
for tool in fio jq curl; do
    command -v "$tool" >/dev/null || { echo "audit-soak.sh: $tool is not installed" >&2; exit 1; }
done
# Retention runs every second while it finds work, every 10 s otherwise: its first busy run
# may find up to 20 GB (10 s at 2 GB/s) above the cap, and the 45-min soak peaked 2.1 GiB over.
free_gb=$(df -B1G --output=avail "$AUDIT_ROOT" | tail -n 1 | tr -d ' ')
if ((free_gb < RETENTION_GIB + 30)); then
    echo "audit-soak.sh: only $free_gb GB free on $AUDIT_ROOT; $((RETENTION_GIB + 30)) GB needed" >&2
    exit 1
fi

bench_enter_netns soak "${ORIGINAL_ARGS[@]}"
bench_setup soak splicegate splicegate-bench splicegate-audit

SINK=127.0.0.1:65322 RELAY=127.0.0.1:65321 METRICS=127.0.0.1:65323
bench_start_sink "$SINK"
echo "audit-soak.sh: fio, $FIO_SIZE O_DIRECT on $AUDIT_ROOT" >&2
bench_measure_disk "$AUDIT_ROOT" "$FIO_SIZE"
DISK_BEFORE=$DISK

AUDIT=$(mktemp -d "$AUDIT_ROOT/splicegate-soak-audit.XXXXXX")
"$BIN/splicegate" --listen "$RELAY" --upstream "$SINK" --workers "$WORKERS" --admin-socket '' \
    --metrics-listen "$METRICS" --audit-dir "$AUDIT" --audit-durability "$DURABILITY" \
    --audit-retention-bytes $((RETENTION_GIB << 30)) "${CONGESTION_OPTION[@]}" >"$WORK/relay.log" 2>&1 &
relay=$!
PIDS+=("$relay")
"$BIN/splicegate-bench" waitport --connect "$RELAY" --timeout 10
"$BIN/splicegate-bench" bulk --connect "$RELAY" --streams "$STREAMS" --direction up \
    --duration $((MINUTES * 60)) --warmup 0 --watch-pid "$relay" >"$WORK/bulk.out" 2>"$WORK/bulk.log" &
load=$!
PIDS+=("$load")

# An operator reading the log while the load runs: one line "COMMAND EXIT-CODE" per run in
# $WORK/readers, the output of each failed run appended to $WORK/readers.failed.
live_readers() {
    local command id rc
    local -a args
    while kill -0 "$load" 2>/dev/null; do
        for command in verify list extract; do
            case $command in
                verify) args=(verify "$AUDIT") ;;
                list) args=(list "$AUDIT" --jsonl) ;;
                extract)
                    id=$(head -n 1 "$WORK/readers.list" | jq -r '.id // empty' 2>/dev/null || true)
                    [[ $id =~ ^[0-9]+$ ]] || continue
                    args=(extract "$AUDIT" --connection "$id" --direction c2u -o /dev/null) ;;
            esac
            rc=0
            "$BIN/splicegate-audit" "${args[@]}" >"$WORK/readers.list.new" 2>"$WORK/readers.err" || rc=$?
            [[ $command != list ]] || mv "$WORK/readers.list.new" "$WORK/readers.list"
            echo "$command $rc" >>"$WORK/readers"
            if ((rc != 0)); then
                { echo "== $command: exit $rc"; head -n 5 "$WORK/readers.err"; } >>"$WORK/readers.failed"
            fi
        done
    done
}
: >"$WORK/readers"
: >"$WORK/readers.list"
if ((LIVE_READERS)); then
    live_readers &
    PIDS+=($!)
fi

# One sample: "seconds c2u_bytes audit_bytes cpu_ticks rss_bytes stored_bytes errors lost".
sample() {
    local metrics cpu
    metrics=$(curl -sf "http://$METRICS/metrics") || return 1
    cpu=$(awk '{ print $14 + $15 }' "/proc/$relay/stat")
    awk -v now="$(date +%s.%N)" -v cpu="$cpu" '
        /^splicegate_bytes_total\{.*direction="c2u"/ { c2u += $NF }
        /^splicegate_audit_bytes_total / { audit = $NF }
        /^process_resident_memory_bytes / { rss = $NF }
        /^splicegate_audit_stored_bytes / { stored = $NF }
        /^splicegate_audit_errors_total/ { errors += $NF }
        /^splicegate_audit_lost_bytes_total / { lost = $NF }
        END { printf "%s %.0f %.0f %s %.0f %.0f %.0f %.0f\n", now, c2u, audit, cpu, rss, stored,
              errors, lost }' <<<"$metrics"
}

TICKS=$(getconf CLK_TCK)
: >"$WORK/samples"
sample >>"$WORK/samples"
deadline=$((SECONDS + MINUTES * 60))
while ((SECONDS + INTERVAL <= deadline)) && kill -0 "$load" 2>/dev/null; do
    sleep "$INTERVAL"
    sample >>"$WORK/samples" || break
    tail -n 1 "$WORK/samples" >&2
done
wait "$load" || true
((LIVE_READERS == 0)) || wait "${PIDS[-1]}" || true
kill -TERM "$relay"
wait "$relay" || true
echo "audit-soak.sh: verifying what retention kept" >&2
verify_start=$SECONDS
if "$BIN/splicegate-audit" verify "$AUDIT" >"$WORK/verify.out" 2>&1; then verify=ok; else verify="FAILED"; fi
verify_seconds=$((SECONDS - verify_start))
kept_gib=$(du -sB1 "$AUDIT" | awk '{ printf "%.1f", $1 / 2^30 }')
rm -rf "$AUDIT"
AUDIT=""
bench_measure_disk "$AUDIT_ROOT" "$FIO_SIZE"
DISK_AFTER=$DISK

# Interval rows from consecutive samples.
awk -v ticks="$TICKS" -v interval="$INTERVAL" '
    NR > 1 {
        dt = $1 - t; gib = ($2 - c) / 2^30
        printf "| %d | %.2f | %.2f | %.3f | %.0f | %.1f | %d | %d |\n", NR - 1,
            ($2 - c) * 8 / dt / 1e9, ($3 - a) * 8 / dt / 1e9,
            (gib > 0 ? ($4 - cpu) / ticks / gib : 0), $5 / 2^20, $6 / 2^30, $7, $8
    }
    { t = $1; c = $2; a = $3; cpu = $4 }' "$WORK/samples" >"$WORK/rows"

# Column N of the interval rows from the second on, as numbers.
column() { awk -F'|' -v n="$1" 'NR > 1 { print $n + 0 }' "$WORK/rows"; }
summary=$(column 3 | median)
lowest=$(column 3 | sort -g | head -n 1)
cpu_median=$(column 5 | median)
rss_first=$(awk -F'|' 'NR == 1 { print $6 + 0 }' "$WORK/rows")
rss_last=$(awk -F'|' 'END { print $6 + 0 }' "$WORK/rows")
stored_max=$(column 7 | sort -g | tail -n 1)

report() {
    echo "# splicegate audit soak, $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "Command: \`tools/bench/audit-soak.sh ${ORIGINAL_ARGS[*]}\`"
    echo
    echo "- Machine: $(nproc) CPUs, kernel $(uname -r); the load generator and the sink share"
    echo "  them with the relay. Loopback in a private network namespace."
    echo "- Relay: \`splicegate --workers $WORKERS --audit-durability $DURABILITY"
    echo "  --audit-retention-bytes $((RETENTION_GIB << 30))\` ($RETENTION_GIB GiB), the default audit"
    echo "  writer; $STREAMS upload streams for $MINUTES min, sampled every $INTERVAL s."
    echo "- Disk (fio, $FIO_SIZE sequential O_DIRECT writes of 2 MiB, 8 in flight, on $AUDIT_ROOT):"
    echo "  **$DISK_BEFORE Gbit/s** before, **$DISK_AFTER Gbit/s** after."
    echo "- CPU = utime+stime of the relay (all threads) over the interval, per GiB relayed."
    echo
    echo "| interval | relayed Gbit/s | audited Gbit/s | relay CPU-s/GiB | RSS MiB | audit dir GiB | audit errors | lost bytes |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
    cat "$WORK/rows"
    echo
    echo "**Summary, intervals 2 to the end** (the first holds the page cache's fill):"
    echo "relayed Gbit/s median **$summary** (lowest $lowest) = $(awk -v g="$summary" -v d="$DISK_BEFORE" \
        'BEGIN { printf "%.2f", (d > 0 ? g / d : 0) }')x the disk before the run;"
    echo "relay CPU-s/GiB median $cpu_median; RSS $rss_first MiB in interval 1, $rss_last MiB at the end;"
    echo "audit directory at most $stored_max GiB from interval 2 on (retention cap $RETENTION_GIB GiB;"
    echo "splicegate_audit_stored_bytes, itself recomputed at most every 10 s);"
    echo "\`splicegate-audit verify\` of the $kept_gib GiB kept: **$verify** ($verify_seconds s)."
    if [[ $verify != ok ]]; then
        echo
        echo '```'
        tail -n 20 "$WORK/verify.out"
        echo '```'
    fi
    if ((LIVE_READERS)); then
        echo
        echo "**Live readers** (runs during the load; exit codes other than 0 are failures):"
        local command
        for command in verify list extract; do
            awk -v c="$command" '$1 == c { n++; if ($2 != 0) f++ }
                END { printf "%s %d runs, %d failed; ", c, n, f }' "$WORK/readers"
        done
        echo
        if [[ -s $WORK/readers.failed ]]; then
            echo
            echo '```'
            head -n 30 "$WORK/readers.failed"
            echo '```'
        fi
    fi
    echo
    echo "Load generator's own line: \`$(tail -n 1 "$WORK/bulk.out")\`"
}
if [[ -n $OUT ]]; then report | tee "$OUT"; else report; fi
