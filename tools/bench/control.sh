#!/usr/bin/env bash
# Control plane under load (issue 4 "Targets"), in a private network namespace:
#  1. admin status requests/s, p50 and p99 (splicegate-admin-bench, 4 connections) with the relay
#     idle and while it carries a bulk load paced to --load-mbps (default 1000 Mbit/s);
#  2. bulk throughput with metrics off and with metrics on and scraped every second, in
#     interleaved pairs whose order alternates (off-on, on-off, ...), so drift on a shared
#     machine and any first-or-second-run effect hit both alike.
# N rounds of each, medians. usage: tools/bench/control.sh [--runs N] [--duration S]
#                                   [--load-mbps M] [--streams N]
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tools/bench/common.sh
source "$HERE/common.sh"
RUNS=5 DURATION=5 LOAD_MBPS=1000 STREAMS=8
ORIGINAL_ARGS=("$@")
while (($#)); do
    case $1 in
        --runs) RUNS=${2:?}; shift 2 ;;
        --duration) DURATION=${2:?}; shift 2 ;;
        --load-mbps) LOAD_MBPS=${2:?}; shift 2 ;;
        --streams) STREAMS=${2:?}; shift 2 ;;
        -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "control.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || { echo "control.sh: --runs wants a positive integer" >&2; exit 2; }

bench_enter_netns control.sh "${ORIGINAL_ARGS[@]}"

bench_setup control splicegate splicegate-bench splicegate-admin-bench

SINK=127.0.0.1:65202 RELAY=127.0.0.1:65201 METRICS=127.0.0.1:65266 SOCKET=$WORK/admin.sock
bench_start_sink "$SINK"

RELAY_PID=""
start_relay() {  # metrics: on | off
    local metrics=''
    [[ $1 == on ]] && metrics=$METRICS
    "$BIN/splicegate" --listen "$RELAY" --upstream "$SINK" --workers 2 --audit-dir '' \
        --admin-socket "$SOCKET" --admin-group root --metrics-listen "$metrics" \
        >"$WORK/relay.log" 2>&1 &
    RELAY_PID=$!
    PIDS+=("$RELAY_PID")
    "$BIN/splicegate-bench" waitport --connect "$RELAY" --timeout 10
    [[ $1 == off ]] || "$BIN/splicegate-bench" waitport --connect "$METRICS" --timeout 10
    for _ in $(seq 100); do [[ -S $SOCKET ]] && break; sleep 0.05; done
}
stop_relay() { kill -TERM "$RELAY_PID"; wait "$RELAY_PID" || true; }
# A scraper as light as bash can make it (no curl process per scrape): on a 2-core machine the
# scraper's own CPU would otherwise be charged to the relay's throughput. A real Prometheus
# scrapes from elsewhere.
scrape_every_second() {
    local host=${METRICS%:*} port=${METRICS##*:} line
    while :; do
        if exec 3<>"/dev/tcp/$host/$port"; then
            printf 'GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n' "$METRICS" >&3
            while read -r -u 3 line; do :; done
            exec 3<&-
        fi
        sleep 1
    done
}

# on | off: one bulk run on a fresh relay, scraped every second when on; its result line goes to
# the variable named by $2 (not through $(...): the relay must be started by this shell, so the
# exit trap can stop it).
bulk_metrics() {
    local scraper=""
    start_relay "$1"
    if [[ $1 == on ]]; then
        scrape_every_second &
        scraper=$!
        PIDS+=("$scraper")
    fi
    printf -v "$2" '%s' "$(bulk "$DURATION")"
    [[ -z $scraper ]] || { kill "$scraper"; wait "$scraper" 2>/dev/null || true; }
    stop_relay
}
admin_load() { "$BIN/splicegate-admin-bench" --socket "$SOCKET" --clients 4 --duration "$DURATION"; }
bulk() {  # seconds, extra bulk arguments...
    local seconds=$1
    shift
    "$BIN/splicegate-bench" bulk --connect "$RELAY" --streams "$STREAMS" --direction up \
        --duration "$seconds" --warmup 0.5 --watch-pid "$RELAY_PID" "$@"
}

: >"$WORK/admin" ; : >"$WORK/metrics"
for run in $(seq "$RUNS"); do
    start_relay on
    idle=$(admin_load)
    bulk "$((DURATION + 2))" --rate-mbps "$LOAD_MBPS" >"$WORK/load.out" 2>&1 &
    load=$!
    sleep 1
    busy=$(admin_load)
    wait "$load" || true
    stop_relay
    loaded=$(field gbps "$(cat "$WORK/load.out")")
    echo "$(field rps "$idle") $(field p50_us "$idle") $(field p99_us "$idle") $(field rps "$busy") $(field p50_us "$busy") $(field p99_us "$busy") $loaded" >>"$WORK/admin"
    echo "control.sh: [$run/$RUNS] admin idle: $idle | under ${loaded} Gbit/s: $busy" >&2

    # Odd rounds measure off first, even rounds on first: whatever favours the first (or the
    # second) run of a pair hits both sides alike.
    if ((run % 2)); then
        bulk_metrics off off
        bulk_metrics on on
    else
        bulk_metrics on on
        bulk_metrics off off
    fi
    echo "$(field gbps "$off") $(field gbps "$on") $(field relay_cpu_s_per_gib "$off") $(field relay_cpu_s_per_gib "$on")" >>"$WORK/metrics"
    echo "control.sh: [$run/$RUNS] bulk metrics off: $(field gbps "$off") Gbit/s, on: $(field gbps "$on") Gbit/s" >&2
done

col() { awk -v c="$2" '{ print $c }' "$WORK/$1" | median; }
ratio() { awk -v c="$2" -v d="$3" '{ printf "%.3f\n", $d / $c }' "$WORK/$1" | median; }
echo "# control plane under load, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
echo "Command: \`tools/bench/control.sh${ORIGINAL_ARGS[*]:+ ${ORIGINAL_ARGS[*]}}\`; $(nproc) CPUs, loopback in a private network namespace, splicegate --workers 2, medians of $RUNS."
echo
echo "| admin status requests, 4 connections | relay idle | relay under load |"
echo "|---|---:|---:|"
echo "| requests/s | $(col admin 1) | $(col admin 4) |"
echo "| p50 latency, µs | $(col admin 2) | $(col admin 5) |"
echo "| p99 latency, µs | $(col admin 3) | $(col admin 6) |"
echo "| bulk load carried meanwhile (paced to $LOAD_MBPS Mbit/s), Gbit/s | — | $(col admin 7) |"
echo
echo "| bulk, $STREAMS streams up | metrics off | metrics on, scraped every 1 s | on ÷ off (median of per-round ratios) |"
echo "|---|---:|---:|---:|"
echo "| Gbit/s | $(col metrics 1) | $(col metrics 2) | $(ratio metrics 1 2)× |"
echo "| relay CPU-s per GiB | $(col metrics 3) | $(col metrics 4) | $(ratio metrics 3 4)× |"
echo
echo "Every round: admin (idle rps p50 p99, loaded rps p50 p99, load Gbit/s), then bulk (off, on Gbit/s; off, on CPU-s/GiB):"
paste -d'|' "$WORK/admin" "$WORK/metrics" | sed 's/^/    /'
