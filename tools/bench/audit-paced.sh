#!/usr/bin/env bash
# The audit at a link's pace (issue 3): uploads through splicegate paced to fixed rates, as a
# gateway's NIC would offer them, with the audit off and in batch mode, side by side per rate
# and round. Loopback lets the unaudited relay run at memory speed (20-30 Gbit/s here), far
# beyond what any copy to disk can follow; this shows what the audit keeps up with.
# usage: tools/bench/audit-paced.sh [--runs 3] [--rates 5000,8000,10000] [--streams 8]
#                                   [--duration 5] [--audit-root /var/tmp]
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tools/bench/common.sh
source "$HERE/common.sh"
RUNS=3 RATES=5000,8000,10000 STREAMS=8 DURATION=5 AUDIT_ROOT=/var/tmp
ORIGINAL_ARGS=("$@")
while (($#)); do
    case $1 in
        --runs) RUNS=${2:?}; shift 2 ;;
        --rates) RATES=${2:?}; shift 2 ;;
        --streams) STREAMS=${2:?}; shift 2 ;;
        --duration) DURATION=${2:?}; shift 2 ;;
        --audit-root) AUDIT_ROOT=${2:?}; shift 2 ;;
        -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "audit-paced.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || { echo "audit-paced.sh: --runs wants a positive integer" >&2; exit 2; }

bench_enter_netns paced.sh "${ORIGINAL_ARGS[@]}"

bench_setup paced splicegate splicegate-bench

SINK=127.0.0.1:65302 RELAY=127.0.0.1:65301
bench_start_sink "$SINK"

measure() {  # rate audit(off|batch): prints "gbps cpu_s_per_gib ok"
    local audit=(--audit-dir '')
    if [[ $2 == batch ]]; then
        AUDIT=$(mktemp -d "$AUDIT_ROOT/splicegate-paced-audit.XXXXXX")
        audit=(--audit-dir "$AUDIT" --audit-durability batch)
    fi
    "$BIN/splicegate" --listen "$RELAY" --upstream "$SINK" --workers 2 --admin-socket '' \
        --metrics-listen '' "${audit[@]}" >"$WORK/relay.log" 2>&1 &
    local relay=$!
    PIDS+=("$relay")
    "$BIN/splicegate-bench" waitport --connect "$RELAY" --timeout 10
    local out
    out=$("$BIN/splicegate-bench" bulk --connect "$RELAY" --streams "$STREAMS" --direction up \
        --duration "$DURATION" --warmup 0.5 --rate-mbps "$1" --watch-pid "$relay" 2>&1 | tail -n 1)
    kill -TERM "$relay"; wait "$relay" || true
    [[ -z $AUDIT ]] || rm -rf "$AUDIT"
    AUDIT=""
    echo "$(field gbps "$out") $(field relay_cpu_s_per_gib "$out") $(field ok "$out")"
}

: >"$WORK/rows"
for run in $(seq "$RUNS"); do
    for rate in ${RATES//,/ }; do
        read -r off_gbps off_cpu off_ok < <(measure "$rate" off)
        read -r on_gbps on_cpu on_ok < <(measure "$rate" batch)
        echo "$rate $off_gbps $on_gbps $off_cpu $on_cpu $((off_ok && on_ok))" >>"$WORK/rows"
        echo "audit-paced.sh: [$run/$RUNS] $rate Mbit/s offered: off $off_gbps, batch $on_gbps Gbit/s" >&2
    done
done

echo "# the audit at a link's pace, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
echo "Command: \`tools/bench/audit-paced.sh${ORIGINAL_ARGS[*]:+ ${ORIGINAL_ARGS[*]}}\`; $STREAMS uploads paced together, ${DURATION}-s windows, inline engine, --workers 2, audit log in $AUDIT_ROOT; medians of $RUNS."
echo
echo "| offered, Mbit/s | audit off, Gbit/s | audit batch, Gbit/s | batch ÷ off | CPU-s/GiB off | CPU-s/GiB batch | all runs ok |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
for rate in ${RATES//,/ }; do
    pick() { awk -v r="$rate" -v c="$1" '$1 == r { print $c }' "$WORK/rows" | median; }
    ratio=$(awk -v r="$rate" '$1 == r && $2 > 0 { printf "%.3f\n", $3 / $2 }' "$WORK/rows" | median)
    ok=$(awk -v r="$rate" '$1 == r && $6 != 1 { bad = 1 } END { print bad ? "no" : "yes" }' "$WORK/rows")
    echo "| $rate | $(pick 2) | $(pick 3) | ${ratio}× | $(pick 4) | $(pick 5) | $ok |"
done
echo
echo "Every run: offered off_gbps batch_gbps off_cpu batch_cpu ok"
sed 's/^/    /' "$WORK/rows"
