#!/usr/bin/env bash
# One load against one splicegate, for A/B comparisons of builds or options and for profiles:
# what tools/bench/run.sh measures side by side, but one party, quick, with `perf record -g` on
# the relay if asked. Runs in a private network namespace, on loopback.
# usage: tools/bench/profile.sh [--load rr|churn|upload] [--seconds 8] [--perf FILE]
#            [--rate-mbps MBIT/S] [--splicegate PATH] [-- DAEMON-OPTION...]
#   rr:     64 connections x 64-byte request/response (run.sh's rr)
#   churn:  32 connections in flight, 1 KiB each way (run.sh's churn)
#   upload: 8 streams upstream into a sink, with an archiver stand-in emptying sealed audit data
#           files (pass --audit-dir DIR among the daemon options to audit; with
#           --audit-retention-bytes N the daemon's retention frees the space instead)
# --rate-mbps paces the load (all streams together), so CPU per GiB can be compared at one rate.
# Prints the load generator's result line; --perf writes a perf.data of the relay, recorded
# from second 2 on. Example A/B: run it alternately with two --splicegate binaries, 3 times each.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tools/bench/common.sh
source "$HERE/common.sh"
LOAD=rr SECONDS_=8 PERF_OUT="" SPLICEGATE="" RATE_MBPS=0
ORIGINAL_ARGS=("$@")
while (($#)); do
    case $1 in
        --load) LOAD=${2:?}; shift 2 ;;
        --seconds) SECONDS_=${2:?}; shift 2 ;;
        --perf) PERF_OUT=${2:?}; shift 2 ;;
        --splicegate) SPLICEGATE=${2:?}; shift 2 ;;
        --rate-mbps) RATE_MBPS=${2:?}; shift 2 ;;
        --) shift; break ;;
        -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "profile.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
DAEMON_OPTIONS=("$@")
[[ $LOAD =~ ^(rr|churn|upload)$ ]] || { echo "profile.sh: --load rr, churn or upload" >&2; exit 2; }
[[ $SECONDS_ =~ ^[1-9][0-9]*$ ]] || { echo "profile.sh: --seconds must be a positive integer" >&2; exit 2; }
[[ $RATE_MBPS =~ ^[0-9]+$ ]] || { echo "profile.sh: --rate-mbps must be a whole number" >&2; exit 2; }
[[ -z $PERF_OUT ]] || command -v perf >/dev/null || { echo "profile.sh: perf is not installed" >&2; exit 1; }

bench_enter_netns profile "${ORIGINAL_ARGS[@]}"
bench_setup profile splicegate splicegate-bench
SPLICEGATE=${SPLICEGATE:-$BIN/splicegate}

UPSTREAM=127.0.0.1:65313 RELAY=127.0.0.1:65311
if [[ $LOAD == upload ]]; then
    "$BIN/splicegate-bench" server --mode sink --listen "$UPSTREAM" --threads 2 --duration 7200 \
        >"$WORK/upstream.log" 2>&1 &
else
    "$BIN/splicegate-bench" server --mode echo --listen "$UPSTREAM" --threads 2 --duration 7200 \
        >"$WORK/upstream.log" 2>&1 &
fi
PIDS+=($!)
"$BIN/splicegate-bench" waitport --connect "$UPSTREAM" --timeout 10

defaults=()
for option in --workers --admin-socket --metrics-listen --audit-dir; do
    [[ " ${DAEMON_OPTIONS[*]} " == *" $option "* ]] && continue
    case $option in
        --workers) defaults+=(--workers 2) ;;
        *) defaults+=("$option" '') ;;
    esac
done
"$SPLICEGATE" --listen "$RELAY" --upstream "$UPSTREAM" "${defaults[@]}" "${DAEMON_OPTIONS[@]}" \
    >"$WORK/relay.log" 2>&1 &
relay=$!
PIDS+=("$relay")
"$BIN/splicegate-bench" waitport --connect "$RELAY" --timeout 10

audit_dir="" retention=0
for ((i = 0; i < ${#DAEMON_OPTIONS[@]}; ++i)); do
    [[ ${DAEMON_OPTIONS[i]} == --audit-dir ]] && audit_dir=${DAEMON_OPTIONS[i + 1]:-}
    [[ ${DAEMON_OPTIONS[i]} == --audit-retention-bytes ]] && retention=1
done
# The daemon's own retention keeps the disk from filling; the stand-in would damage its log.
if [[ $LOAD == upload && -n $audit_dir ]] && ((!retention)); then
    bench_archive_sealed "$audit_dir" "$relay" &
    PIDS+=("$!")
fi

case $LOAD in
    rr) args=(rr --conns 64 --size 64 --threads 2 --warmup 1) ;;
    churn) args=(churn --concurrency 32 --size 1024 --threads 2 --warmup 1) ;;
    upload) args=(bulk --streams 8 --direction up --warmup 2) ;;
esac
"$BIN/splicegate-bench" "${args[@]}" --duration "$SECONDS_" --connect "$RELAY" \
    --rate-mbps "$RATE_MBPS" --watch-pid "$relay" >"$WORK/load.txt" 2>"$WORK/load.err" &
load=$!
PIDS+=("$load")
if [[ -n $PERF_OUT ]]; then
    sleep 2
    perf record -F 1999 -g -p "$relay" -o "$PERF_OUT" -- sleep "$((SECONDS_ > 4 ? SECONDS_ - 2 : 2))" \
        >/dev/null 2>&1 || echo "profile.sh: perf record failed" >&2
fi
wait "$load" || true
tail -n 1 "$WORK/load.txt"
