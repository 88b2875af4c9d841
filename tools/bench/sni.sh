#!/usr/bin/env bash
# SNI routing's cost (issue 35 "Measure"), in a private network namespace: every connection
# starts with the same real TLS ClientHello (tools/bench/client-hello.bin, captured once from
# `openssl s_client -servername bench.example.com`), through five parties, in one run:
#   direct          the client talks to the upstream server
#   sg-plain        splicegate, one route (--listen/--upstream): the ClientHello is payload
#   sg-sni          splicegate, two routes on one listen address told apart by `sni`: the
#                   ClientHello is peeked and routes the connection to `named`
#   haproxy-plain   HAProxy mode tcp with splice (tools/bench/haproxy-splice.cfg)
#   haproxy-sni     HAProxy tcp-request inspect-delay + use_backend if { req.ssl_sni -i NAME }
#                   (tools/bench/haproxy-sni.cfg)
# Tests: churn (connections/s: ClientHello + 16 bytes, echoed, the client closes) and bulk1
# (one stream: ClientHello, then upstream to client as fast as it goes). Each round measures
# every party once (the order rotates from round to round); the report gives medians over the
# rounds and the median of the per-round ratios sni/plain of each relay, so drift on a shared
# machine hits both sides of a ratio alike.
# usage: tools/bench/sni.sh [--runs N] [--duration S] [--out FILE] (FILE.raw: every figure)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tools/bench/common.sh
source "$HERE/common.sh"
RUNS=5 DURATION=3 WARMUP=0.5 OUT=""
ORIGINAL_ARGS=("$@")
while (($#)); do
    case $1 in
        --runs) RUNS=${2:?}; shift 2 ;;
        --duration) DURATION=${2:?}; shift 2 ;;
        --out) OUT=${2:?}; shift 2 ;;
        -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "sni.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || { echo "sni.sh: --runs wants a positive integer" >&2; exit 2; }
command -v haproxy >/dev/null || { echo "sni.sh: haproxy is not installed" >&2; exit 1; }

bench_enter_netns sni.sh "${ORIGINAL_ARGS[@]}"
sysctl -qw net.ipv4.tcp_tw_reuse=1
bench_setup sni splicegate splicegate-bench

HELLO=$HERE/client-hello.bin
SOURCE=127.0.0.1:65301 ECHO=127.0.0.1:65303
for mode in source echo; do
    address=$SOURCE
    [[ $mode == echo ]] && address=$ECHO
    "$BIN/splicegate-bench" server --mode "$mode" --listen "$address" --threads 2 \
        --duration 7200 >"$WORK/server-$mode.log" 2>&1 &
    PIDS+=($!)
    "$BIN/splicegate-bench" waitport --connect "$address" --timeout 10
done
# The daemon is copied: a rebuild of build/bin during the run cannot mix two versions.
cp "$BIN/splicegate" "$WORK/splicegate"
COMMIT=$(git -C "$BENCH_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)

NEXT_PORT=65310 RELAY_PID="" RELAY_ADDR=""
start_party() {  # PARTY UPSTREAM
    local party=$1 upstream=$2 log=$WORK/relay.log
    RELAY_PID="" RELAY_ADDR=$upstream
    [[ $party == direct ]] && return 0
    RELAY_ADDR=127.0.0.1:$NEXT_PORT
    NEXT_PORT=$((NEXT_PORT >= 65390 ? 65310 : NEXT_PORT + 1))
    local common=(--workers 2 --admin-socket '' --metrics-listen '' --audit-dir '')
    case $party in
        sg-plain)
            "$WORK/splicegate" --listen "$RELAY_ADDR" --upstream "$upstream" "${common[@]}" \
                >"$log" 2>&1 & ;;
        sg-sni)
            printf '[route.named]\nlisten = %s\nupstream = %s\nsni = bench.example.com\n\n[route.other]\nlisten = %s\nupstream = %s\n' \
                "$RELAY_ADDR" "$upstream" "$RELAY_ADDR" "$upstream" >"$WORK/sni.conf"
            "$WORK/splicegate" --config "$WORK/sni.conf" "${common[@]}" >"$log" 2>&1 & ;;
        haproxy-plain|haproxy-sni)
            local cfg=haproxy-splice.cfg
            [[ $party == haproxy-sni ]] && cfg=haproxy-sni.cfg
            BENCH_LISTEN=$RELAY_ADDR BENCH_UPSTREAM=$upstream haproxy -db -f "$HERE/$cfg" \
                >"$log" 2>&1 & ;;
    esac
    RELAY_PID=$!
    PIDS+=("$RELAY_PID")
    # 30 s: on a machine shared with builds a start can take long; one that never listens is a
    # failed measurement, not the end of the run.
    "$BIN/splicegate-bench" waitport --connect "$RELAY_ADDR" --timeout 30 2>>"$WORK/client.log"
}
stop_party() {
    [[ -n $RELAY_PID ]] || return 0
    kill -TERM "$RELAY_PID" 2>/dev/null || true
    wait "$RELAY_PID" 2>/dev/null || true
    RELAY_PID=""
}

PARTIES=(direct sg-plain sg-sni haproxy-plain haproxy-sni)
RAW=$WORK/raw.tsv
: >"$RAW"
START=$(date +%s)
for run in $(seq "$RUNS"); do
    # Rotate the order, so no party always comes first (or right after another) in a round.
    order=("${PARTIES[@]:$(((run - 1) % 5))}" "${PARTIES[@]:0:$(((run - 1) % 5))}")
    for party in "${order[@]}"; do
        for test in churn bulk1; do
            upstream=$SOURCE args=(bulk --streams 1 --direction down --first-bytes "$HELLO")
            if [[ $test == churn ]]; then
                upstream=$ECHO
                args=(churn --concurrency 32 --size 16 --first-bytes "$HELLO" --threads 2)
            fi
            if ! start_party "$party" "$upstream"; then
                stop_party
                echo "sni.sh: [$run/$RUNS] $party $test: the relay did not listen" >&2
                echo "$run $party ${test}_failed 1" >>"$RAW"
                continue
            fi
            args+=(--duration "$DURATION" --warmup "$WARMUP" --connect "$RELAY_ADDR")
            if [[ -n $RELAY_PID ]]; then args+=(--watch-pid "$RELAY_PID"); fi
            line=$(timeout -k 5 $((${DURATION%.*} + 30)) "$BIN/splicegate-bench" "${args[@]}" \
                2>>"$WORK/client.log") || line="$line failed=1"
            stop_party
            echo "sni.sh: [$run/$RUNS] $party $test: $line" >&2
            [[ $line == *" ok=1"* ]] || { echo "$run $party ${test}_failed 1" >>"$RAW"; continue; }
            if [[ $test == churn ]]; then
                echo "$run $party churn_cps $(field cps "$line")" >>"$RAW"
                echo "$run $party churn_p99_us $(field p99_us "$line")" >>"$RAW"
                cpu=$(field relay_cpu_us_per_conn "$line" || true)
                if [[ -n $cpu ]]; then echo "$run $party churn_cpu_us $cpu" >>"$RAW"; fi
            else
                echo "$run $party bulk1_gbps $(field gbps "$line")" >>"$RAW"
                cpu=$(field relay_cpu_s_per_gib "$line" || true)
                if [[ -n $cpu ]]; then echo "$run $party bulk1_cpu_gib $cpu" >>"$RAW"; fi
            fi
        done
    done
done
ELAPSED=$(($(date +%s) - START))

value() { awk -v r="$1" -v p="$2" -v m="$3" '$1 == r && $2 == p && $3 == m { print $4 }' "$RAW"; }
med() {  # PARTY METRIC: median over the runs ("-" when no run measured it)
    local run values
    values=$(for run in $(seq "$RUNS"); do value "$run" "$1" "$2"; done)
    if [[ -n $values ]]; then median <<<"$values"; else echo -; fi
}
ratio() {  # A B METRIC: median over the runs of A/B within each run
    local run a b values
    values=$(for run in $(seq "$RUNS"); do
        a=$(value "$run" "$1" "$3") b=$(value "$run" "$2" "$3")
        if [[ -n $a && -n $b ]]; then
            awk -v a="$a" -v b="$b" 'BEGIN { if (b > 0) printf "%.3f\n", a / b }'
        fi
    done)
    if [[ -n $values ]]; then median <<<"$values"; else echo -; fi
}
{
    echo "### SNI routing, $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "Command: \`tools/bench/sni.sh${ORIGINAL_ARGS[*]:+ ${ORIGINAL_ARGS[*]}}\` (took ${ELAPSED} s; splicegate at $COMMIT)."
    echo "$(nproc) CPUs, kernel $(uname -r), $(haproxy -v | head -n 1 | cut -d' ' -f1-3); $RUNS rounds of"
    echo "${DURATION}-s windows after ${WARMUP} s, medians. Every connection sends the same $(stat -c %s "$HELLO")-byte"
    echo "TLS 1.3 ClientHello first; churn: 32 in flight, ClientHello + 16 B echoed; bulk1: one stream"
    echo "upstream to client after it. Ratios: median of the per-round ratios."
    echo
    echo "| party | churn conn/s | churn p99 µs | relay µs CPU/conn | bulk1 Gbit/s | relay CPU-s/GiB |"
    echo "|---|---|---|---|---|---|"
    for party in "${PARTIES[@]}"; do
        echo "| $party | $(med "$party" churn_cps) | $(med "$party" churn_p99_us) | $(med "$party" churn_cpu_us) | $(med "$party" bulk1_gbps) | $(med "$party" bulk1_cpu_gib) |"
    done
    echo
    echo "| ratio (per round, median) | churn conn/s | bulk1 Gbit/s |"
    echo "|---|---|---|"
    for pair in "sg-sni sg-plain" "haproxy-sni haproxy-plain" "sg-sni haproxy-sni" \
        "sg-plain haproxy-plain" "sg-sni direct" "haproxy-sni direct"; do
        read -r a b <<<"$pair"
        echo "| $a / $b | $(ratio "$a" "$b" churn_cps) | $(ratio "$a" "$b" bulk1_gbps) |"
    done
    failed=$(awk '$3 ~ /_failed$/ { print $1 " " $2 " " $3 }' "$RAW")
    if [[ -n $failed ]]; then
        echo
        echo "Failed measurements (left out): $(tr '\n' ';' <<<"$failed")"
    fi
} >"$WORK/report.md"
cat "$WORK/report.md"
[[ -z $OUT ]] || { cp "$WORK/report.md" "$OUT"; cp "$RAW" "$OUT.raw"; }
