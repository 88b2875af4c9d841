#!/usr/bin/env bash
# splicegate benchmark: direct vs splicegate (chain and inline engines) vs HAProxy mode tcp with
# and without splice, side by side, on loopback inside one private network namespace.
# See tools/bench/README.md for what each number means.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
ALL_PARTIES="direct,splicegate-chain,splicegate-inline,haproxy-splice,haproxy-nosplice"
# Parties that keep a full copy of the streams (issue 3); not in the default set.
AUDIT_PARTIES="splicegate-inline-audit,splicegate-chain-audit,splicegate-inline-strict,haproxy-splice-tcpdump"
ALL_TESTS="bulk1,bulk8,rr,churn,idle"

usage() {
    cat <<EOF
usage: tools/bench/run.sh [options]

Runs every party inside one private network namespace (re-executes itself under
'unshare --net'), on loopback, and prints a markdown table of medians that is also
written to build/bench-results/results-<date>.md (never into tools/bench: the reference
table there, tools/bench/RESULTS.md, is updated by hand from a run).

options:
  --runs N            repetitions of every measurement; medians are reported (default 3)
  --quick             smoke mode: 1 run, 2-s windows, 2-s idle hold
  --duration S        measuring window of bulk, rr and churn in seconds (default 5)
  --warmup S          traffic before each window opens, not counted (default 0.5)
  --idle-conns N      connections held by the idle test (default 8000)
  --idle-hold S       how long the idle test holds them (default 6)
  --direction D       bulk direction: down (upstream to client, default) or up
  --parties LIST      comma-separated subset of: $ALL_PARTIES
                      and of the parties that keep a copy of every stream:
                      $AUDIT_PARTIES
                      (*-audit: --audit-durability batch, *-strict: strict, both with the
                      log under --audit-root; haproxy-splice-tcpdump: HAProxy splice plus
                      'tcpdump -w' of the upstream side, its CPU counted with HAProxy's)
  --audit-root DIR    where the audit logs and captures are written, one fresh directory per
                      measurement, removed after it (default /var/tmp: a disk, not tmpfs)
  --tests LIST        comma-separated subset of: $ALL_TESTS
  --bench PATH        splicegate-bench binary (default: the newer of build/bin and
                      build-bench/bin)
  --splicegate PATH   daemon binary (default build/bin/splicegate); parties are skipped
                      with a note when it is missing
  --out FILE          markdown output (default build/bench-results/results-<date>.md)
  --wait-quiet S      before each measurement, wait up to S seconds while other work keeps
                      the CPUs over 25 % busy (default 0: measure anyway, with a note)
  --nice N            run the whole benchmark at this nice value (e.g. -10 on a machine
                      shared with builds; negative values need root; default 0)
  --single-threaded   upstream servers and the rr/churn clients run one thread each (a
                      single-threaded epoll upstream and client, as a new user tries it);
                      default: 2 threads each
  --keep-logs         keep the work directory with every process's log
  --help              this text

Needs root (or unprivileged user namespaces) for the network namespace, haproxy on PATH.
EOF
}

die() { echo "run.sh: $*" >&2; exit 1; }
# alive PID: running and not a zombie (kill -0 succeeds on an unreaped zombie).
alive() {
    local state
    state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
    [[ -n $state && ${state%% *} != Z ]]
}

RUNS="" DURATION="" WARMUP="" IDLE_CONNS=8000 IDLE_HOLD="" DIRECTION=down QUICK=0
PARTIES=$ALL_PARTIES TESTS=$ALL_TESTS BENCH="" AUDIT_ROOT=/var/tmp SPLICEGATE="" OUT="" KEEP_LOGS=0 WAIT_QUIET=0 NICE=0 LOAD_THREADS=2
ORIGINAL_ARGS=("$@")
while (($#)); do
    case $1 in
        --runs) RUNS=${2:?--runs needs a value}; shift 2 ;;
        --quick) QUICK=1; shift ;;
        --duration) DURATION=${2:?}; shift 2 ;;
        --warmup) WARMUP=${2:?}; shift 2 ;;
        --idle-conns) IDLE_CONNS=${2:?}; shift 2 ;;
        --idle-hold) IDLE_HOLD=${2:?}; shift 2 ;;
        --direction) DIRECTION=${2:?}; shift 2 ;;
        --parties) PARTIES=${2:?}; shift 2 ;;
        --tests) TESTS=${2:?}; shift 2 ;;
        --bench) BENCH=${2:?}; shift 2 ;;
        --splicegate) SPLICEGATE=${2:?}; shift 2 ;;
        --out) OUT=${2:?}; shift 2 ;;
        --audit-root) AUDIT_ROOT=${2:?}; shift 2 ;;
        --keep-logs) KEEP_LOGS=1; shift ;;
        --single-threaded) LOAD_THREADS=1; shift ;;
        --wait-quiet) WAIT_QUIET=${2:?}; shift 2 ;;
        --nice) NICE=${2:?}; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "run.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
# --quick changes the defaults only; explicit options win wherever they stand.
if ((QUICK)); then
    RUNS=${RUNS:-1} DURATION=${DURATION:-2} WARMUP=${WARMUP:-0.3} IDLE_HOLD=${IDLE_HOLD:-2}
fi
RUNS=${RUNS:-3} DURATION=${DURATION:-5} WARMUP=${WARMUP:-0.5} IDLE_HOLD=${IDLE_HOLD:-6}
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --runs wants a positive integer" >&2; exit 2; }
[[ $NICE =~ ^-?[0-9]+$ ]] || { echo "run.sh: --nice wants an integer" >&2; exit 2; }
[[ $WAIT_QUIET =~ ^[0-9]+$ ]] || { echo "run.sh: --wait-quiet wants whole seconds" >&2; exit 2; }
[[ $IDLE_CONNS =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --idle-conns wants a positive integer" >&2; exit 2; }
[[ $DIRECTION == down || $DIRECTION == up ]] || { echo "run.sh: --direction wants down or up" >&2; exit 2; }
for p in ${PARTIES//,/ }; do
    [[ ,$ALL_PARTIES,$AUDIT_PARTIES, == *",$p,"* ]] || { echo "run.sh: unknown party '$p'" >&2; exit 2; }
done
for t in ${TESTS//,/ }; do
    [[ ,$ALL_TESTS, == *",$t,"* ]] || { echo "run.sh: unknown test '$t'" >&2; exit 2; }
done

# ---- into a private network namespace ------------------------------------------------------
if [[ ${SPLICEGATE_BENCH_IN_NETNS:-} != 1 ]]; then
    command -v unshare >/dev/null || die "unshare (util-linux) is needed"
    export SPLICEGATE_BENCH_CMDLINE="tools/bench/run.sh${ORIGINAL_ARGS[*]:+ ${ORIGINAL_ARGS[*]}}"
    if ((EUID == 0)); then
        exec unshare --net -- env SPLICEGATE_BENCH_IN_NETNS=1 bash "$0" "${ORIGINAL_ARGS[@]}"
    fi
    exec unshare --user --map-root-user --net -- env SPLICEGATE_BENCH_IN_NETNS=1 \
        bash "$0" "${ORIGINAL_ARGS[@]}"
fi

ip link set lo up
# Every process started from here on (relays, their io-wq workers, load tools) inherits it.
if ((NICE != 0)); then renice -n "$NICE" -p $$ >/dev/null || die "cannot renice to $NICE"; fi
sysctl -qw net.ipv4.ip_local_port_range="1024 65000" net.ipv4.tcp_tw_reuse=1 ||
    die "cannot set the namespace's sysctls"

# ---- binaries -------------------------------------------------------------------------------
if [[ -z $BENCH ]]; then  # the newer of build/ and build-bench/
    for candidate in "$ROOT/build/bin/splicegate-bench" "$ROOT/build-bench/bin/splicegate-bench"; do
        if [[ -x $candidate && ( -z $BENCH || $candidate -nt $BENCH ) ]]; then BENCH=$candidate; fi
    done
fi
[[ -n $BENCH && -x $BENCH ]] || die "splicegate-bench not found; build it: cmake --build build --target splicegate-bench (or pass --bench PATH)"
SPLICEGATE=${SPLICEGATE:-$ROOT/build/bin/splicegate}
NOTES=()
note() { NOTES+=("$*"); echo "run.sh: NOTE: $*" >&2; }

SELECTED=()
for p in ${PARTIES//,/ }; do
    case $p in
        splicegate-*)
            if [[ ! -x $SPLICEGATE ]]; then
                note "$p skipped: no daemon binary at $SPLICEGATE"
                continue
            fi ;;
        haproxy-*)
            if ! command -v haproxy >/dev/null; then
                note "$p skipped: haproxy is not installed"
                continue
            fi
            if [[ $p == *-tcpdump ]] && ! command -v tcpdump >/dev/null; then
                note "$p skipped: tcpdump is not installed"
                continue
            fi ;;
    esac
    SELECTED+=("$p")
done
((${#SELECTED[@]})) || die "no party left to measure"

# ---- limits -------------------------------------------------------------------------------
HARD_FDS=$(ulimit -Hn)
if [[ $HARD_FDS != unlimited ]]; then ulimit -n "$HARD_FDS"; fi
SOFT_FDS=$(ulimit -n)
RELAY_FDS=$((2 * IDLE_CONNS + 200))
if [[ $SOFT_FDS == unlimited ]] || ((RELAY_FDS <= SOFT_FDS)); then
    FD_STATEMENT="fd limit $SOFT_FDS per process; the idle test's $IDLE_CONNS connections need about $RELAY_FDS fds in a relay (2 sockets each + overhead): fits"
else
    FD_STATEMENT="fd limit $SOFT_FDS per process; the idle test's $IDLE_CONNS connections need about $RELAY_FDS fds in a relay: DOES NOT FIT, expect refused or failed connections"
    note "$FD_STATEMENT"
fi

# ---- processes and cleanup ----------------------------------------------------------------
WORK=$(mktemp -d /tmp/splicegate-bench.XXXXXX)
RAW=$WORK/raw.tsv
: >"$RAW"
# Snapshot the daemon: a rebuild of build/bin during the run must not mix two versions.
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n $(git -C "$ROOT" status --porcelain 2>/dev/null) ]]; then COMMIT="$COMMIT + uncommitted changes"; fi
if [[ -x $SPLICEGATE ]]; then
    cp "$SPLICEGATE" "$WORK/splicegate"
    SPLICEGATE_ORIGIN="$SPLICEGATE, sha256 $(sha256sum "$SPLICEGATE" | cut -c1-12), work tree at $COMMIT when the run began"
    SPLICEGATE=$WORK/splicegate
fi
PIDS=()
FAILED=0
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 50); do alive "$pid" || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    PIDS=()
    [[ -z ${COPY_DIR:-} ]] || rm -rf "$COPY_DIR"
    if ((KEEP_LOGS || FAILED)); then
        echo "run.sh: logs kept in $WORK" >&2
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT
trap 'echo "run.sh: interrupted" >&2; FAILED=1; exit 130' INT TERM HUP

forget_pid() {
    local keep=() pid
    for pid in "${PIDS[@]}"; do [[ $pid == "$1" ]] || keep+=("$pid"); done
    PIDS=("${keep[@]}")
}

# Listening ports sit above the ephemeral range (1024-65000 here): a listener on a port that a
# client socket in TIME_WAIT holds would fail to bind with EADDRINUSE.
SOURCE_ADDR=127.0.0.1:65001 SINK_ADDR=127.0.0.1:65002 ECHO_ADDR=127.0.0.1:65003
declare -A SERVER_PID=()
start_server() {  # mode address
    "$BENCH" server --mode "$1" --listen "$2" --threads "$LOAD_THREADS" --duration 7200 \
        </dev/null >"$WORK/server-$1.log" 2>&1 &
    PIDS+=($!)
    SERVER_PID[$1]=$!
    "$BENCH" waitport --connect "$2" --timeout 10 || die "server $1 did not start (see $WORK/server-$1.log)"
}
start_server source "$SOURCE_ADDR"
start_server sink "$SINK_ADDR"
start_server echo "$ECHO_ADDR"

NEXT_PORT=65010  # every relay start gets a fresh port in 65010-65529
RELAY_PID="" RELAY_ADDR="" RELAY_LOG="" RELAY_PARTY="" CAPTURE_PID="" COPY_DIR=""
# start_relay PARTY UPSTREAM TAG: sets RELAY_ADDR (and RELAY_PID unless direct, CAPTURE_PID for
# the tcpdump party, COPY_DIR for the parties that keep a copy); 1 on failure.
start_relay() {
    local party=$1 upstream=$2 tag=$3
    RELAY_PID="" RELAY_ADDR="" RELAY_LOG="$WORK/$tag.log" RELAY_PARTY=$party CAPTURE_PID="" COPY_DIR=""
    if [[ $party == direct ]]; then
        RELAY_ADDR=$upstream
        return 0
    fi
    RELAY_ADDR=127.0.0.1:$NEXT_PORT
    NEXT_PORT=$((NEXT_PORT >= 65529 ? 65010 : NEXT_PORT + 1))
    case $party in
        splicegate-chain|splicegate-inline)
            "$SPLICEGATE" --listen "$RELAY_ADDR" --upstream "$upstream" --workers 2 \
                --admin-socket '' --metrics-listen '' --audit-dir '' \
                --splice-engine "${party#splicegate-}" </dev/null >"$RELAY_LOG" 2>&1 &
            ;;
        splicegate-*-audit|splicegate-*-strict)
            local engine=${party#splicegate-} durability=batch
            [[ $party == *-strict ]] && durability=strict
            engine=${engine%-*}
            COPY_DIR=$(mktemp -d "$AUDIT_ROOT/splicegate-bench-audit.XXXXXX")
            "$SPLICEGATE" --listen "$RELAY_ADDR" --upstream "$upstream" --workers 2 \
                --admin-socket '' --metrics-listen '' --audit-dir "$COPY_DIR" \
                --audit-durability "$durability" --splice-engine "$engine" \
                </dev/null >"$RELAY_LOG" 2>&1 &
            ;;
        haproxy-splice|haproxy-nosplice|haproxy-splice-tcpdump)
            if [[ $party == *-tcpdump ]]; then
                # The copy an operator would keep instead: every packet of the upstream side,
                # whole (-s 0), into a file, with a capture buffer as large as HAProxy's pipes.
                COPY_DIR=$(mktemp -d "$AUDIT_ROOT/splicegate-bench-pcap.XXXXXX")
                tcpdump -i lo -s 0 -B 65536 -n -w "$COPY_DIR/upstream.pcap" \
                    "tcp port ${upstream##*:}" </dev/null >"$WORK/$tag.tcpdump.log" 2>&1 &
                CAPTURE_PID=$!
                PIDS+=("$CAPTURE_PID")
                for _ in $(seq 50); do
                    grep -q "listening on" "$WORK/$tag.tcpdump.log" 2>/dev/null && break
                    sleep 0.1
                done
            fi
            BENCH_LISTEN=$RELAY_ADDR BENCH_UPSTREAM=$upstream \
                haproxy -db -f "$HERE/${party%-tcpdump}.cfg" </dev/null >"$RELAY_LOG" 2>&1 &
            ;;
    esac
    RELAY_PID=$!
    PIDS+=("$RELAY_PID")
    if ! "$BENCH" waitport --connect "$RELAY_ADDR" --timeout 10 2>>"$RELAY_LOG"; then
        note "$tag: $party did not start listening on $RELAY_ADDR within 10 s: $(tail -n 3 "$RELAY_LOG" | tr '\n' ' ')"
        stop_relay "$tag"
        return 1
    fi
}

# stop_relay TAG: SIGTERM, up to 5 s to exit, then SIGKILL; notes anything unusual.
stop_relay() {
    local tag=$1 status=0 clean=0
    [[ -n $RELAY_PID ]] || return 0
    if alive "$RELAY_PID"; then
        kill -TERM "$RELAY_PID" 2>/dev/null || true
        for _ in $(seq 50); do alive "$RELAY_PID" || break; sleep 0.1; done
        if alive "$RELAY_PID"; then
            note "$tag: relay pid $RELAY_PID still running 5 s after SIGTERM; killed"
            kill -KILL "$RELAY_PID" 2>/dev/null || true
        fi
    fi
    wait "$RELAY_PID" 2>/dev/null || status=$?
    # splicegate must exit 0 on SIGTERM (SPEC: drain, then exit 0); haproxy -db hard-stops on
    # SIGTERM and dies of the signal (status 143), which is normal for it.
    [[ $RELAY_PARTY == haproxy-* && $status == 143 ]] && clean=1
    if ((status != 0 && status != 137 && !clean)); then
        note "$tag: relay exited with status $status after SIGTERM: $(tail -n 2 "$RELAY_LOG" | tr '\n' ' ')"
    fi
    forget_pid "$RELAY_PID"
    RELAY_PID=""
    if [[ -n $CAPTURE_PID ]]; then
        kill -INT "$CAPTURE_PID" 2>/dev/null || true
        wait "$CAPTURE_PID" 2>/dev/null || true
        forget_pid "$CAPTURE_PID"
        CAPTURE_PID=""
        # "N packets dropped by kernel": a capture that drops is not a full copy.
        local dropped
        dropped=$(awk '/packets dropped by kernel/ { print $1 }' "$WORK/$tag.tcpdump.log")
        if [[ -n $dropped && $dropped != 0 ]]; then
            note "$tag: tcpdump dropped $dropped packets: its copy of the streams is incomplete"
        fi
    fi
    if [[ -n $COPY_DIR ]]; then
        COPY_BYTES=$(du -sb "$COPY_DIR" | cut -f1)
        rm -rf "$COPY_DIR"
        COPY_DIR=""
    fi
}

# cpu_busy_pct: share of all CPUs busy over 0.5 s (from /proc/stat). Called between
# measurements, when nothing of the benchmark runs, it shows load from outside the benchmark.
cpu_busy_pct() {
    local a b
    read -r -a a < <(head -n 1 /proc/stat)
    sleep 0.5
    read -r -a b < <(head -n 1 /proc/stat)
    awk -v u1="${a[1]}" -v n1="${a[2]}" -v s1="${a[3]}" -v i1="${a[4]}" -v w1="${a[5]}" \
        -v q1="${a[6]}" -v r1="${a[7]}" -v t1="${a[8]}" \
        -v u2="${b[1]}" -v n2="${b[2]}" -v s2="${b[3]}" -v i2="${b[4]}" -v w2="${b[5]}" \
        -v q2="${b[6]}" -v r2="${b[7]}" -v t2="${b[8]}" 'BEGIN {
            busy = (u2 + n2 + s2 + q2 + r2 + t2) - (u1 + n1 + s1 + q1 + r1 + t1)
            idle = (i2 + w2) - (i1 + w1)
            printf "%.0f", ((busy + idle) > 0 ? 100 * busy / (busy + idle) : 0) }'
}
FOREIGN=()

# record RUN PARTY METRIC VALUE
# sample_placement PID OUT: every 0.1 s while PID lives, which CPU each of its sg-worker-*
# threads is on; writes the share of samples (%) that found two workers on one CPU. That, not
# the traffic, decided whether an rr run's tail was the good or the bad one (issue 32).
# Bash built-ins only, and one `sleep` per sample: a sampler that forks (cat, sed, awk, sort)
# some 150 times a second takes enough CPU from the measured processes to double the relay's rr
# p99 on 2 CPUs (measured: 2.4-3.4 ms with such a sampler, 1.4-1.9 ms without), and it ran only
# for the splicegate parties.
sample_placement() {
    local pid=$1 out=$2 samples=0 shared=0 task name stat fields cpu
    local -A seen
    while alive "$pid"; do
        seen=() cpu=0
        local workers=0 clash=0
        for task in /proc/"$pid"/task/*; do
            read -r name <"$task/comm" 2>/dev/null || continue
            [[ $name == sg-worker-* ]] || continue
            read -r stat <"$task/stat" 2>/dev/null || continue
            read -ra fields <<<"${stat##*) }"
            cpu=${fields[36]}  # field 39, "processor", counted from field 3
            [[ -n ${seen[$cpu]:-} ]] && clash=1
            seen[$cpu]=1
            workers=$((workers + 1))
        done
        if ((workers >= 2)); then
            samples=$((samples + 1)) shared=$((shared + clash))
        fi
        sleep 0.5
    done
    ((samples > 0)) && echo $((100 * shared / samples)) >"$out"
    return 0
}

# sched_totals PID: the process's threads summed, "RUN_NS WAIT_NS INVOLUNTARY_SWITCHES":
# time on a CPU, time runnable but waiting for one (/proc/PID/task/TID/schedstat), and the
# times a thread was preempted. Read twice around a window, it tells whether a tail comes from
# waiting for a CPU rather than from the work itself.
sched_totals() {
    local task run=0 wait=0 invol=0 r w key value
    for task in /proc/"$1"/task/*; do
        read -r r w _ <"$task/schedstat" 2>/dev/null || continue
        run=$((run + r)) wait=$((wait + w))
        while read -r key value; do
            [[ $key == nonvoluntary_ctxt_switches: ]] && invol=$((invol + value))
        done <"$task/status"
    done
    echo "$run $wait $invol"
}

# sample_sched PID WARMUP OUT: after the warm-up, the process's sched_totals until it is told
# to stop (SIGUSR1), as "cpu_ms wait_ms involuntary" over the window.
sample_sched() {
    local pid=$1 out=$3 before after
    sleep "$2"
    before=$(sched_totals "$pid")
    # `wait` returns at once on the signal (a foreground sleep would delay the trap).
    sleep "$LIMIT_S" &
    local nap=$!
    trap 'kill "$nap" 2>/dev/null; after=$(sched_totals "$pid"); echo "$before $after" | awk "{ printf \"%d %d %d\\n\", (\$4-\$1)/1e6, (\$5-\$2)/1e6, \$6-\$3 }" >"$out"; exit 0' USR1
    wait "$nap"
}

record() { [[ -n $4 ]] && printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$RAW"; return 0; }

# measure RUN TEST PARTY
measure() {
    local run=$1 test=$2 party=$3 tag="run$1-$2-$3" upstream args=() limit out rc=0
    case $test in
        bulk1|bulk8)
            upstream=$SOURCE_ADDR
            [[ $DIRECTION == up ]] && upstream=$SINK_ADDR
            args=(bulk --streams "${test#bulk}" --direction "$DIRECTION" --duration "$DURATION" --warmup "$WARMUP")
            limit=$(awk -v d="$DURATION" -v w="$WARMUP" 'BEGIN { printf "%d", d + w + 40 }') ;;
        rr)
            upstream=$ECHO_ADDR
            args=(rr --conns 64 --size 64 --threads "$LOAD_THREADS" --duration "$DURATION" --warmup "$WARMUP")
            limit=$(awk -v d="$DURATION" -v w="$WARMUP" 'BEGIN { printf "%d", d + w + 30 }') ;;
        churn)
            upstream=$ECHO_ADDR
            args=(churn --concurrency 32 --size 1024 --threads "$LOAD_THREADS" --duration "$DURATION" --warmup "$WARMUP")
            limit=$(awk -v d="$DURATION" -v w="$WARMUP" 'BEGIN { printf "%d", d + w + 30 }') ;;
        idle)
            upstream=$ECHO_ADDR
            args=(idle --conns "$IDLE_CONNS" --hold "$IDLE_HOLD" --open-timeout 60)
            limit=$(awk -v h="$IDLE_HOLD" 'BEGIN { printf "%d", h + 100 }') ;;
    esac
    local foreign waited=0
    foreign=$(cpu_busy_pct)
    while ((foreign > 25 && waited < WAIT_QUIET)); do  # --wait-quiet: let other work pass
        sleep 1.5
        waited=$((waited + 2))
        foreign=$(cpu_busy_pct)
    done
    FOREIGN+=("$foreign")
    ((foreign <= 25)) || note "$tag: CPUs were $foreign % busy with other work just before it"
    start_relay "$party" "$upstream" "$tag" || { FAILED=1; return 0; }
    args+=(--connect "$RELAY_ADDR")
    [[ -n $RELAY_PID ]] && args+=(--watch-pid "$RELAY_PID")
    [[ -n $CAPTURE_PID && $test != rr && $test != idle ]] && args+=(--also-watch-pid "$CAPTURE_PID")
    echo "run.sh: [$run/$RUNS] $test $party" >&2
    # In the background + wait, so a signal to run.sh interrupts at once and cleanup stops it.
    timeout -k 5 "$limit" "$BENCH" "${args[@]}" >"$WORK/$tag.client.out" 2>"$WORK/$tag.client.log" &
    local client=$!
    PIDS+=("$client")
    local sched_samplers=() who
    if [[ $test == rr || $test == churn ]]; then
        for who in relay:$RELAY_PID upstream:${SERVER_PID[echo]}; do
            [[ -n ${who#*:} ]] || continue
            LIMIT_S=$limit sample_sched "${who#*:}" "$WARMUP" "$WORK/$tag.sched-${who%%:*}" &
            sched_samplers+=($!)
        done
    fi
    local sampler=""
    if [[ $party == splicegate-* && -n $RELAY_PID && ($test == rr || $test == churn) ]]; then
        sample_placement "$RELAY_PID" "$WORK/$tag.placement" &
        sampler=$!
        PIDS+=("$sampler")
    fi
    wait "$client" || rc=$?
    forget_pid "$client"
    local s
    for s in "${sched_samplers[@]}"; do kill -USR1 "$s" 2>/dev/null; wait "$s" 2>/dev/null || true; done
    for who in relay upstream; do
        [[ -s $WORK/$tag.sched-$who ]] || continue
        local cpu_ms wait_ms invol
        read -r cpu_ms wait_ms invol <"$WORK/$tag.sched-$who"
        record "$run" "$party" "${test}_${who}_cpu_ms" "$cpu_ms"
        record "$run" "$party" "${test}_${who}_runq_wait_ms" "$wait_ms"
        record "$run" "$party" "${test}_${who}_preempted" "$invol"
    done
    out=$(cat "$WORK/$tag.client.out")
    if ((rc == 124 || rc == 137)); then
        note "$tag: load generator did not finish within $limit s (relay hang?)"
    elif ((rc != 0)); then
        note "$tag: load generator exit $rc: $(tail -n 2 "$WORK/$tag.client.log" | tr '\n' ' ') $out"
    fi
    if [[ -n $RELAY_PID ]] && ! alive "$RELAY_PID"; then
        local status=0
        wait "$RELAY_PID" 2>/dev/null || status=$?
        note "$tag: relay DIED during the test (exit status $status): $(tail -n 3 "$RELAY_LOG" | tr '\n' ' ')"
        forget_pid "$RELAY_PID"
        RELAY_PID=""
        FAILED=1
    fi
    COPY_BYTES=""
    stop_relay "$tag"
    if [[ -n $sampler ]]; then
        wait "$sampler" 2>/dev/null || true
        forget_pid "$sampler"
        [[ -s $WORK/$tag.placement ]] &&
            record "$run" "$party" "${test}_shared_cpu_pct" "$(cat "$WORK/$tag.placement")"
    fi
    [[ -n $COPY_BYTES ]] && record "$run" "$party" "${test}_copy_bytes" "$COPY_BYTES"
    ((rc == 0)) || FAILED=1
    echo "  $out" >&2
    # Parse "result=NAME key=value ..." into the raw table.
    declare -A kv=()
    local pair
    for pair in $out; do kv[${pair%%=*}]=${pair#*=}; done
    if [[ ${kv[result]:-} != "${args[0]}" || ${kv[ok]:-0} != 1 ]]; then
        # A failed measurement counts as a failed run; only idle's figures stay meaningful
        # (normalised by the connections actually held), the others are dropped.
        record "$run" "$party" "${test}_failed" 1
        [[ $test == idle && ${kv[result]:-} == idle ]] || return 0
    fi
    case $test in
        bulk1|bulk8)
            record "$run" "$party" "${test}_gbps" "${kv[gbps]:-}"
            record "$run" "$party" "${test}_cpu_gib" "${kv[relay_cpu_s_per_gib]:-}"
            record "$run" "$party" "${test}_cpu_pct" "${kv[relay_cpu_pct]:-}" ;;
        rr)
            record "$run" "$party" rr_rps "${kv[rps]:-}"
            record "$run" "$party" rr_p50_us "${kv[p50_us]:-}"
            record "$run" "$party" rr_p99_us "${kv[p99_us]:-}"
            record "$run" "$party" rr_cpu_us "${kv[relay_cpu_us_per_req]:-}" ;;
        churn)
            record "$run" "$party" churn_cps "${kv[cps]:-}"
            record "$run" "$party" churn_p99_us "${kv[p99_us]:-}"
            record "$run" "$party" churn_errors "${kv[errors]:-}"
            record "$run" "$party" churn_cpu_us "${kv[relay_cpu_us_per_conn]:-}" ;;
        idle)
            record "$run" "$party" idle_held "${kv[held]:-}"
            record "$run" "$party" idle_open_s "${kv[open_seconds]:-}"
            record "$run" "$party" idle_rss_before_kib "${kv[rss_before_kib]:-}"
            record "$run" "$party" idle_rss_held_kib "${kv[rss_held_kib]:-}"
            record "$run" "$party" idle_rss_per_conn_b "${kv[rss_per_conn_bytes]:-}"
            record "$run" "$party" idle_threads_before "${kv[threads_before]:-}"
            record "$run" "$party" idle_threads_held "${kv[threads_held]:-}"
            record "$run" "$party" idle_threads_max "${kv[threads_max]:-}"
            record "$run" "$party" idle_pipes_before "${kv[pipes_before]:-}"
            record "$run" "$party" idle_pipes_held "${kv[pipes_held]:-}" ;;
    esac
    if [[ -f $RELAY_LOG ]] && (($(stat -c %s "$RELAY_LOG") > 1048576)); then
        note "$tag: relay wrote $(($(stat -c %s "$RELAY_LOG") / 1024)) KiB of log (costs CPU)"
    fi
}

# ---- the runs ---------------------------------------------------------------------------------
START=$(date +%s)
echo "run.sh: parties ${SELECTED[*]}; tests $TESTS; $RUNS run(s) of ${DURATION}s windows; work dir $WORK" >&2
for run in $(seq "$RUNS"); do
    for test in ${TESTS//,/ }; do
        for party in "${SELECTED[@]}"; do
            measure "$run" "$test" "$party"
        done
    done
done
ELAPSED=$(($(date +%s) - START))

# ---- report -----------------------------------------------------------------------------------
DATE=$(date -u +%Y-%m-%d-%H%M)
if [[ -z $OUT ]]; then
    OUT=$ROOT/build/bench-results/results-$DATE.md
    mkdir -p "$(dirname "$OUT")"
fi
SG_VERSION="not measured" SPLICEGATE_ORIGIN=${SPLICEGATE_ORIGIN:-none}
if [[ " ${SELECTED[*]} " == *" splicegate-"* ]]; then
    SG_VERSION=$("$SPLICEGATE" --version 2>&1 | head -n 1 || true)
fi
CPU_MODEL=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
PARTY_LIST=$(IFS=,; echo "${SELECTED[*]}")
{
    echo "# splicegate benchmark, $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "Command: \`${SPLICEGATE_BENCH_CMDLINE:-tools/bench/run.sh}\` (took ${ELAPSED} s)"
    echo
    echo "- Machine: $(nproc) CPUs ($CPU_MODEL), kernel $(uname -r); load generators, upstream"
    echo "  servers and the relay share these CPUs. Loopback inside one private network namespace."
    echo "- Relays: splicegate \`$SG_VERSION\` ($SPLICEGATE_ORIGIN), \`--workers 2\`, audit,"
    echo "  admin and metrics off; $(haproxy -v 2>/dev/null | head -n 1 | cut -d' ' -f1-3),"
    echo "  \`nbthread 2\` (tools/bench/haproxy-*.cfg)."
    echo "- $RUNS run(s), medians; windows of ${DURATION} s after ${WARMUP} s warm-up; bulk direction"
    echo "  \`$DIRECTION\` ($([[ $DIRECTION == down ]] && echo "upstream to client" || echo "client to upstream"));"
    echo "  rr 64 B x 64 connections; churn 32 in flight, 1 KiB each way; idle $IDLE_CONNS connections"
    echo "  held ${IDLE_HOLD} s."
    echo "- $FD_STATEMENT."
    if ((${#FOREIGN[@]})); then
        sorted=$(printf '%s\n' "${FOREIGN[@]}" | sort -n)
        echo "- CPU busy with work outside the benchmark, sampled for 0.5 s before each of the"
        echo "  ${#FOREIGN[@]} measurements: median $(sed -n "$(((${#FOREIGN[@]} + 1) / 2))p" <<<"$sorted") %,"
        echo "  max $(tail -n 1 <<<"$sorted") % (over 25 % is noted below: such runs are not comparable)."
    fi
    if ((NICE != 0)); then
        echo "- Every benchmark process ran at nice $NICE, ahead of other work on the machine."
    fi
    echo "- CPU = utime+stime of the relay process (all threads, io-wq workers included) over the"
    echo "  window; GiB = 2^30 bytes received end to end. See tools/bench/README.md."
    echo
    "$BENCH" report --raw "$RAW" --parties "$PARTY_LIST"
    if ((${#NOTES[@]})); then
        echo
        echo "**Notes**"
        echo
        for n in "${NOTES[@]}"; do echo "- $n"; done
    fi
} >"$OUT"
cat "$OUT"
echo >&2
echo "run.sh: written to $OUT" >&2
