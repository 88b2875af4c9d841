#!/usr/bin/env bash
# The audit at the disk's pace, sustained (issue 12): uploads through splicegate for a minute or
# more, measured only after the page cache has filled (docs/kernel-notes.md §12), side by side in
# one run with the disk's own O_DIRECT bandwidth from fio on the audit directory's filesystem.
# Parties: audit off, direct writer batch, splice writer batch, direct writer strict with many
# streams, and HAProxy (splice) + `tcpdump -w` as the copy an operator would keep otherwise.
# At a GB/s a minute of audit is 60+ GB. --space retention (the default): the daemon's own
# --audit-retention-bytes (8 GiB) deletes the oldest segments, and the direct writer recycles
# their data files (docs/kernel-notes.md §19); bytes kept are the daemon's
# splicegate_audit_bytes_total, and `splicegate-audit verify` must pass on what is left.
# --space archiver: a stand-in empties the data files of sealed segments (the newest 3 per worker
# stay; index files stay, so the bytes kept are counted from the log), as shipping the audit off
# the box would. tcpdump writes a ring of 4 files of 1 GB; its kept share comes from its own
# packet counters. fio runs twice on one file: written fresh, then overwritten; before the parties
# and again after them.
# Party direct-cubic is the direct writer with --upstream-tcp-congestion cubic: the relay's
# sending leg unpaced whatever the system's congestion control (docs/kernel-notes.md §20).
# --congestion ALGO sets the private network namespace's default (net.ipv4.tcp_congestion_control)
# for every party, the load generator and the sink; default: the system's, as a user has it.
# usage: tools/bench/audit-sustained.sh [--streams 8] [--strict-streams 64] [--warmup 20]
#            [--duration 40] [--audit-root /var/tmp] [--fio-size 6G] [--workers 2]
#            [--parties off,direct,splice,strict,haproxy-tcpdump[,direct-cubic]]
#            [--space retention|archiver] [--congestion ALGO] [--out FILE]
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tools/bench/common.sh
source "$HERE/common.sh"
STREAMS=8 STRICT_STREAMS=64 WARMUP=20 DURATION=40 AUDIT_ROOT=/var/tmp FIO_SIZE=6G WORKERS=2
PARTIES=off,direct,splice,strict,haproxy-tcpdump OUT="" SPACE=retention CONGESTION=""
RETENTION_BYTES=$((8 << 30))
ORIGINAL_ARGS=("$@")
while (($#)); do
    case $1 in
        --streams) STREAMS=${2:?}; shift 2 ;;
        --strict-streams) STRICT_STREAMS=${2:?}; shift 2 ;;
        --warmup) WARMUP=${2:?}; shift 2 ;;
        --duration) DURATION=${2:?}; shift 2 ;;
        --audit-root) AUDIT_ROOT=${2:?}; shift 2 ;;
        --fio-size) FIO_SIZE=${2:?}; shift 2 ;;
        --workers) WORKERS=${2:?}; shift 2 ;;
        --parties) PARTIES=${2:?}; shift 2 ;;
        --space) SPACE=${2:?}; shift 2 ;;
        --congestion) CONGESTION=${2:?}; shift 2 ;;
        --out) OUT=${2:?}; shift 2 ;;
        -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "audit-sustained.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
for n in "$STREAMS" "$STRICT_STREAMS" "$WARMUP" "$DURATION" "$WORKERS"; do
    [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "audit-sustained.sh: '$n' is not a positive integer" >&2; exit 2; }
done
[[ $SPACE =~ ^(retention|archiver)$ ]] || { echo "audit-sustained.sh: --space retention or archiver" >&2; exit 2; }
command -v fio >/dev/null || { echo "audit-sustained.sh: fio is not installed" >&2; exit 1; }

bench_enter_netns sustained "${ORIGINAL_ARGS[@]}"
# Per network namespace: the host's setting stays as it is.
[[ -z $CONGESTION ]] || sysctl -q -w net.ipv4.tcp_congestion_control="$CONGESTION" ||
    { echo "audit-sustained.sh: --congestion $CONGESTION: not available" >&2; exit 2; }
bench_setup sustained splicegate splicegate-bench splicegate-audit

# A daemon built without --audit-writer has the direct writer only: its party runs without the
# option and the splice party is skipped, with a note in the report.
# (The help text is read whole first: `grep -q` in a pipe would exit at its match, and under
# pipefail the daemon's SIGPIPE would then read as "no such option".)
WRITER_OPTION=1
daemon_help=$("$BIN/splicegate" --help 2>/dev/null) || true
[[ $daemon_help == *--audit-writer* ]] || WRITER_OPTION=0

SINK=127.0.0.1:65312 RELAY=127.0.0.1:65311 METRICS=127.0.0.1:65319
bench_start_sink "$SINK"

# Refuses to start a party that could fill the filesystem (at most about 40 GB live at a time).
check_free_space() {
    local free_gb
    free_gb=$(df -B1G --output=avail "$AUDIT_ROOT" | tail -n 1 | tr -d ' ')
    if ((free_gb < 45)); then
        echo "audit-sustained.sh: only $free_gb GB free on $AUDIT_ROOT; 45 GB needed" >&2
        exit 1
    fi
}

# Bytes the audit log holds for the connections (c2u, the upload direction).
audit_bytes() {
    "$BIN/splicegate-audit" list "$1" --json 2>/dev/null | jq '[.[].c2u_bytes] | add // 0'
}

# The daemon's count of relayed bytes written to the audit log, less those it lost.
metric_audit_bytes() {
    curl -sf "http://$METRICS/metrics" | awk '
        /^splicegate_audit_bytes_total / { kept += $2 } /^splicegate_audit_lost_bytes_total / { kept -= $2 }
        END { printf "%.0f\n", kept }'
}

# measure PARTY: writes "gbps cpu_s_per_gib confirmed_bytes kept_bytes ok" to $WORK/result. Runs in
# this shell (not a subshell), so the cleanup trap knows its PIDs and directories.
measure() {
    local party=$1 streams=$STREAMS audit=(--audit-dir '') capture=0 relay space=()
    [[ $SPACE == retention ]] && space=(--audit-retention-bytes "$RETENTION_BYTES")
    AUDIT=""
    case $party in
        off) ;;
        direct|splice|direct-cubic)
            AUDIT=$(mktemp -d "$AUDIT_ROOT/splicegate-sustained-audit.XXXXXX")
            audit=(--audit-dir "$AUDIT" --audit-durability batch "${space[@]}")
            ((WRITER_OPTION)) && audit+=(--audit-writer "${party%-cubic}")
            [[ $party == direct-cubic ]] && audit+=(--upstream-tcp-congestion cubic) ;;
        strict)
            streams=$STRICT_STREAMS
            AUDIT=$(mktemp -d "$AUDIT_ROOT/splicegate-sustained-audit.XXXXXX")
            audit=(--audit-dir "$AUDIT" --audit-durability strict "${space[@]}")
            ((WRITER_OPTION)) && audit+=(--audit-writer direct) ;;
        haproxy-tcpdump)
            AUDIT=$(mktemp -d "$AUDIT_ROOT/splicegate-sustained-pcap.XXXXXX")
            tcpdump -i lo -s 0 -B 65536 -n -Z root -C 1000 -W 4 -w "$AUDIT/upstream.pcap" \
                "tcp dst port ${SINK##*:}" </dev/null >"$WORK/tcpdump.log" 2>&1 &
            capture=$!
            PIDS+=("$capture")
            for _ in $(seq 50); do
                grep -q "listening on" "$WORK/tcpdump.log" 2>/dev/null && break
                sleep 0.1
            done ;;
    esac
    if [[ $party == haproxy-tcpdump ]]; then
        BENCH_LISTEN=$RELAY BENCH_UPSTREAM=$SINK haproxy -db -f "$HERE/haproxy-splice.cfg" \
            </dev/null >"$WORK/relay-$party.log" 2>&1 &
    else
        "$BIN/splicegate" --listen "$RELAY" --upstream "$SINK" --workers "$WORKERS" \
            --admin-socket '' --metrics-listen "$METRICS" "${audit[@]}" >"$WORK/relay-$party.log" 2>&1 &
    fi
    relay=$!
    PIDS+=("$relay")
    if [[ -n $AUDIT && $party != haproxy-tcpdump && $SPACE == archiver ]]; then
        bench_archive_sealed "$AUDIT" "$relay" &
        PIDS+=("$!")
    fi
    "$BIN/splicegate-bench" waitport --connect "$RELAY" --timeout 10
    local out
    out=$("$BIN/splicegate-bench" bulk --connect "$RELAY" --streams "$streams" --direction up \
        --duration "$DURATION" --warmup "$WARMUP" --watch-pid "$relay" \
        --also-watch-pid "$capture" 2>>"$WORK/bulk.log" | tail -n 1)
    local kept=0 confirmed counted=0 ok
    [[ $party != haproxy-tcpdump ]] && counted=$(metric_audit_bytes || echo 0)
    kill -TERM "$relay"; wait "$relay" || true
    confirmed=$(field confirmed_bytes "$out")
    ok=$(field ok "$out")
    case $party in
        off) kept=0 ;;
        haproxy-tcpdump)
            kill -INT "$capture" 2>/dev/null || true; wait "$capture" || true
            # The capture is a ring (bounded disk): its share is tcpdump's own count of packets
            # captured against packets its filter saw, applied to the bytes received.
            kept=$(awk -v c="${confirmed:-0}" '
                /packets captured/ { got = $1 } /packets received by filter/ { seen = $1 }
                END { printf "%.0f\n", (seen > 0 ? c * got / seen : 0) }' "$WORK/tcpdump.log") ;;
        *)
            if [[ $SPACE == archiver ]]; then
                kept=$(audit_bytes "$AUDIT")
            else
                kept=$counted
                "$BIN/splicegate-audit" verify "$AUDIT" >"$WORK/verify-$party.log" 2>&1 || ok=0
            fi ;;
    esac
    rm -rf "$AUDIT"
    AUDIT=""
    echo "$(field gbps "$out") $(field relay_cpu_s_per_gib "$out") ${confirmed:-0} ${kept:-0} ${ok:-0}" \
        >"$WORK/result"
}

echo "audit-sustained.sh: fio, $FIO_SIZE O_DIRECT on $AUDIT_ROOT" >&2
bench_measure_disk "$AUDIT_ROOT" "$FIO_SIZE" overwrite
echo "audit-sustained.sh: disk $DISK Gbit/s (a fresh file), $DISK_OVERWRITE Gbit/s (overwritten)" >&2
: >"$WORK/rows"
for party in ${PARTIES//,/ }; do
    if [[ $party == haproxy-tcpdump ]] && ! command -v haproxy >/dev/null; then
        echo "$party - - - - skipped" >>"$WORK/rows"; continue
    fi
    if [[ $party == splice ]] && ((!WRITER_OPTION)); then
        echo "$party - - - - no-option" >>"$WORK/rows"; continue
    fi
    echo "audit-sustained.sh: $party ($((WARMUP + DURATION)) s)" >&2
    check_free_space
    measure "$party"
    read -r gbps cpu confirmed kept ok <"$WORK/result"
    echo "$party $gbps $cpu $confirmed $kept $ok" >>"$WORK/rows"
    echo "audit-sustained.sh: $party $gbps Gbit/s, $cpu CPU-s/GiB, kept $kept of $confirmed bytes" >&2
done

# The disk of a VM varies within minutes (a host cache, neighbours): measured again at the end.
DISK_BEFORE=$DISK DISK_OVERWRITE_BEFORE=$DISK_OVERWRITE
echo "audit-sustained.sh: fio again, after the parties" >&2
bench_measure_disk "$AUDIT_ROOT" "$FIO_SIZE" overwrite
DISK_AFTER=$DISK DISK_OVERWRITE_AFTER=$DISK_OVERWRITE
DISK=$DISK_BEFORE DISK_OVERWRITE=$DISK_OVERWRITE_BEFORE

report() {
    echo "# the audit, sustained, $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "Command: \`tools/bench/audit-sustained.sh${ORIGINAL_ARGS[*]:+ ${ORIGINAL_ARGS[*]}}\`."
    echo "Uploads through the relay (--workers $WORKERS, inline engine) for $((WARMUP + DURATION)) s,"
    echo "measured from second $WARMUP on; audit log in $AUDIT_ROOT ($(df -T "$AUDIT_ROOT" | awk 'NR == 2 { print $2 }'));"
    echo "load average before the run: $(cut -d' ' -f1-3 /proc/loadavg)."
    echo "TCP congestion control (every party, load and sink, unless a party says otherwise):"
    echo "$(sysctl -n net.ipv4.tcp_congestion_control)$([[ -n $CONGESTION ]] && echo " (--congestion)" || echo " (the system's)")."
    echo "Disk: \`fio --rw=write --bs=2M --direct=1 --ioengine=io_uring --iodepth=8 --size=$FIO_SIZE\`"
    echo "on the same filesystem: **$DISK Gbit/s** writing a new file, $DISK_OVERWRITE Gbit/s"
    echo "writing it again (blocks written already, as in a recycled data file), before the parties;"
    echo "after them: $DISK_AFTER Gbit/s and $DISK_OVERWRITE_AFTER Gbit/s. The ratios use the figures before."
    echo "Space: $([[ $SPACE == retention ]] && echo "the daemon's --audit-retention-bytes $RETENTION_BYTES" || echo "an archiver stand-in")."
    echo
    echo "| party | streams | Gbit/s | × disk | × disk overwritten | relay CPU-s/GiB | bytes kept / bytes received | ok |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|"
    while read -r party gbps cpu confirmed kept ok; do
        local streams=$STREAMS label=$party
        [[ $party == strict ]] && streams=$STRICT_STREAMS
        case $party in
            off) label="audit off" ;;
            direct) label="direct writer, batch" ;;
            direct-cubic) label="direct writer, batch, --upstream-tcp-congestion cubic" ;;
            splice) label="splice writer, batch" ;;
            strict) label="direct writer, strict" ;;
            haproxy-tcpdump) label="HAProxy splice + tcpdump -w" ;;
        esac
        if [[ $ok == skipped ]]; then
            echo "| $label | $streams | – | – | – | – | – | skipped (not installed) |"
            continue
        fi
        if [[ $ok == no-option ]]; then
            echo "| $label | $streams | – | – | – | – | – | skipped (this daemon has no --audit-writer) |"
            continue
        fi
        local ratio overwritten share
        ratio=$(awk -v g="$gbps" -v d="$DISK" 'BEGIN { printf "%.2f", (d > 0 ? g / d : 0) }')
        overwritten=$(awk -v g="$gbps" -v d="$DISK_OVERWRITE" 'BEGIN { printf "%.2f", (d > 0 ? g / d : 0) }')
        share=$(awk -v k="$kept" -v c="$confirmed" -v p="$party" \
            'BEGIN { if (p == "off") print "–"; else printf "%.4f", (c > 0 ? k / c : 0) }')
        echo "| $label | $streams | $gbps | $ratio | $overwritten | $cpu | $share | $([[ $ok == 1 ]] && echo yes || echo no) |"
    done <"$WORK/rows"
    echo
    if [[ $SPACE == retention ]]; then
        echo "Bytes kept: the daemon's splicegate_audit_bytes_total less splicegate_audit_lost_bytes_total"
        echo "at the end against the bytes the sink confirmed over the whole run (warm-up included), and"
        echo "ok only if \`splicegate-audit verify\` passed on what retention left; for tcpdump, its"
        echo "packets captured against packets received by its filter."
    else
        echo "Bytes kept: the audit log's c2u bytes (splicegate-audit list, from the index files) against"
        echo "the bytes the sink confirmed over the whole run (warm-up included); for tcpdump, its packets"
        echo "captured against packets received by its filter. An archiver stand-in emptied sealed data"
        echo "files during each party (the newest 3 per worker stayed), so a minute fits on the disk."
    fi
}
if [[ -n $OUT ]]; then report | tee "$OUT"; else report; fi
