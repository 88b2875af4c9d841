#!/usr/bin/env bash
# A/B of two splicegate builds or option sets under rr, for changes smaller than this machine's
# noise. Both relays run at once in front of one echo server, and short rr windows alternate
# between them (A B, B A, ...), so a drift of the host hits both alike; profile.sh, which starts a
# fresh set-up per run, measures pairs 15 s apart and their ratios spread by +-30 % here.
# Prints each window's result line and the medians of the per-pair ratios B/A. An A/A run (the
# same binary twice) shows the method's own bias: 5-8 % on this machine; swap A and B to cancel it.
# usage: tools/bench/ab.sh [--rounds 20] [--seconds 3] [--a BIN] [--b BIN]
#            [--a-options "OPT..."] [--b-options "OPT..."]
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tools/bench/common.sh
source "$HERE/common.sh"
ROUNDS=20 SECONDS_=3 BIN_A="" BIN_B="" OPTIONS_A="" OPTIONS_B=""
ORIGINAL_ARGS=("$@")
while (($#)); do
    case $1 in
        --rounds) ROUNDS=${2:?}; shift 2 ;;
        --seconds) SECONDS_=${2:?}; shift 2 ;;
        --a) BIN_A=${2:?}; shift 2 ;;
        --b) BIN_B=${2:?}; shift 2 ;;
        --a-options) OPTIONS_A=${2?}; shift 2 ;;
        --b-options) OPTIONS_B=${2?}; shift 2 ;;
        -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "ab.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[[ $ROUNDS =~ ^[1-9][0-9]*$ && $ROUNDS -le 1000 ]] || { echo "ab.sh: --rounds must be 1..1000" >&2; exit 2; }
[[ $SECONDS_ =~ ^[1-9][0-9]*$ && $SECONDS_ -le 600 ]] || { echo "ab.sh: --seconds must be 1..600" >&2; exit 2; }

bench_enter_netns ab "${ORIGINAL_ARGS[@]}"
bench_setup ab splicegate splicegate-bench
BIN_A=${BIN_A:-$BIN/splicegate} BIN_B=${BIN_B:-$BIN/splicegate}

UPSTREAM=127.0.0.1:65333
"$BIN/splicegate-bench" server --mode echo --listen "$UPSTREAM" --threads 2 --duration 7200 \
    >"$WORK/upstream.log" 2>&1 &
PIDS+=($!)
"$BIN/splicegate-bench" waitport --connect "$UPSTREAM" --timeout 10

declare -A PORT=([A]=65331 [B]=65332) RELAY=()
start_relay() {
    local side=$1 binary=$2 options=$3 workers=(--workers 2)
    [[ " $options " == *" --workers "* ]] && workers=()
    # shellcheck disable=SC2086 # the options are words
    "$binary" --listen "127.0.0.1:${PORT[$side]}" --upstream "$UPSTREAM" "${workers[@]}" \
        --admin-socket '' --metrics-listen '' --audit-dir '' $options \
        >"$WORK/relay-$side.log" 2>&1 &
    RELAY[$side]=$!
    PIDS+=($!)
    "$BIN/splicegate-bench" waitport --connect "127.0.0.1:${PORT[$side]}" --timeout 10 ||
        { echo "ab.sh: relay $side did not start: $(tail -n 1 "$WORK/relay-$side.log")" >&2; exit 1; }
}
start_relay A "$BIN_A" "$OPTIONS_A"
start_relay B "$BIN_B" "$OPTIONS_B"

window() {
    local side=$1 line
    line=$("$BIN/splicegate-bench" rr --conns 64 --size 64 --threads 2 --warmup 0.5 \
        --duration "$SECONDS_" --connect "127.0.0.1:${PORT[$side]}" --watch-pid "${RELAY[$side]}")
    echo "$side $line"
}
results=()
for ((round = 0; round < ROUNDS; ++round)); do
    if ((round % 2)); then order=(A B); else order=(B A); fi
    for side in "${order[@]}"; do
        line=$(window "$side")
        echo "$line"
        results+=("$line")
    done
done

echo
echo "A: $BIN_A $OPTIONS_A"
echo "B: $BIN_B $OPTIONS_B"
for key in rps p99_us relay_cpu_us_per_req; do
    ratios=$(for ((i = 0; i < ${#results[@]}; i += 2)); do
        first=${results[i]} second=${results[i + 1]}
        [[ $first == A* ]] && { a=$first; b=$second; } || { a=$second; b=$first; }
        awk -v a="$(field "$key" "$a")" -v b="$(field "$key" "$b")" 'BEGIN { if (a > 0) print b / a }'
    done | median)
    echo "$key: median of the $ROUNDS pair ratios B/A = $ratios"
done
