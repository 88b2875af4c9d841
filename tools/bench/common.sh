# Shared by the benchmark scripts beside run.sh (strict.sh, audit-paced.sh, control.sh); sourced,
# not run. Each script parses its own options, then:
#   bench_enter_netns NAME "${ORIGINAL_ARGS[@]}"   re-runs the script in a private network
#                                                  namespace (loopback up, wide port range)
#   bench_setup NAME TOOL...                       checks build/bin, makes $WORK (under
#                                                  $BENCH_WORK_BASE, default /tmp), and stops
#                                                  every PID in PIDS (by PID), a radosgw started
#                                                  in $WORK/s3, and removes $WORK and $AUDIT on
#                                                  any exit
#   bench_start_sink ADDR                          `splicegate-bench server --mode sink`
#   bench_measure_disk ROOT SIZE                   the disk's O_DIRECT write Gbit/s (fio) in DISK
#   bench_archive_sealed DIR PID                   while PID runs, empties the data files of
#                                                  sealed audit segments in DIR (run it with &)
#   field KEY LINE / median                        read result lines, take medians
# shellcheck shell=bash

BENCH_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN=$BENCH_ROOT/build/bin

bench_enter_netns() {
    local name=$1
    shift
    if [[ ${SPLICEGATE_BENCH_IN_NETNS:-} != 1 ]]; then
        exec unshare --net -- env SPLICEGATE_BENCH_IN_NETNS=1 bash "$0" "$@"
    fi
    ip link set lo up || { echo "$name: cannot bring up loopback in the namespace" >&2; exit 1; }
    sysctl -qw net.ipv4.ip_local_port_range="1024 65000"
}

WORK="" AUDIT=""
PIDS=()
bench_cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    if [[ -n $WORK && -d $WORK/s3 ]]; then
        "$BENCH_ROOT/tests/s3/radosgw.sh" stop "$WORK/s3" >/dev/null 2>&1 || true
    fi
    [[ -z $AUDIT ]] || rm -rf "$AUDIT"
    [[ -z $WORK ]] || rm -rf "$WORK"
}

bench_setup() {
    local name=$1 tool
    shift
    for tool in "$@"; do
        [[ -x $BIN/$tool ]] || { echo "$name: $BIN/$tool missing: build first" >&2; exit 1; }
    done
    WORK=$(mktemp -d "${BENCH_WORK_BASE:-/tmp}/splicegate-$name.XXXXXX")
    trap bench_cleanup EXIT
}

bench_start_sink() {
    "$BIN/splicegate-bench" server --mode sink --listen "$1" --threads 2 --duration 7200 \
        >"$WORK/sink.log" 2>&1 &
    PIDS+=($!)
    "$BIN/splicegate-bench" waitport --connect "$1" --timeout 10
}

# An archiver stand-in, for runs that write a GB/s of audit for a minute: every second, the data
# files of each worker's segments but the newest 3 are emptied (sealed long since: a segment is
# 1 GiB, and the writer lets a file go once it is synced). Index files stay, so the bytes kept
# are still counted from the log.
bench_archive_sealed() {
    local dir=$1 watched=$2 worker file
    while kill -0 "$watched" 2>/dev/null; do
        for worker in $(ls "$dir" 2>/dev/null | sed -n 's/^\(w[0-9]*\)-.*\.data$/\1/p' | sort -u); do
            ls "$dir" | grep "^$worker-.*\.data$" | sort | head -n -3 |
                while read -r file; do truncate -s 0 "$dir/$file"; done
        done
        sleep 1
    done
}

# The disk's sequential O_DIRECT write bandwidth in Gbit/s on the filesystem of directory ROOT
# (sets DISK): fio, SIZE bytes in 2 MiB writes, 8 in flight, into a new file. With `overwrite`,
# fio writes the same file once more (sets DISK_OVERWRITE): blocks allocated and written already,
# no extent to convert. Its file lives in $AUDIT while fio runs, so the cleanup trap removes it
# on every exit path.
bench_measure_disk() {
    local root=$1 size=$2 pass passes=(DISK)
    [[ ${3:-} == overwrite ]] && passes+=(DISK_OVERWRITE)
    AUDIT=$(mktemp -d "$root/splicegate-bench-fio.XXXXXX")
    for pass in "${passes[@]}"; do
        if ! fio --name=disk --filename="$AUDIT/fio.data" --rw=write --bs=2M --direct=1 \
            --ioengine=io_uring --iodepth=8 --size="$size" --output-format=json \
            >"$WORK/fio.json" 2>"$WORK/fio.err"; then
            echo "$(basename "$0"): fio failed: $(tail -n 1 "$WORK/fio.err")" >&2
            exit 1
        fi
        printf -v "$pass" '%s' "$(jq -r '.jobs[0].write.bw_bytes * 8 / 1e9 * 1000 | round / 1000' "$WORK/fio.json")"
    done
    rm -rf "$AUDIT"
    AUDIT=""
}

# The value of KEY in a "result=... KEY=VALUE ..." line.
field() { grep -o " $1=[0-9.]*" <<<" $2" | head -n 1 | cut -d= -f2; }
# The median of the numbers on standard input, one per line.
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
