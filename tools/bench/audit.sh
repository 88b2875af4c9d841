#!/bin/bash
# Audit cost on loopback: bulk Gbit/s, relay CPU ticks and fdatasync count with the audit off
# and in batch mode, 1 and 8 streams, 3 rounds. Run as root from the repository root after a
# build: tools/bench/audit.sh. (A quick probe; run.sh is the full side-by-side benchmark.)
$B/splicegate-bench server --listen 127.0.0.1:19401 --mode sink --threads 2 >/dev/null 2>&1 & SP=$!
sleep 0.3
run() { # name streams args...
  name=$1; streams=$2; shift 2
  rm -rf /tmp/abench; 
  $B/splicegate --listen 127.0.0.1:19400 --upstream 127.0.0.1:19401 --workers 2 --admin-socket '' --metrics-listen 127.0.0.1:19466 "$@" 2>/dev/null & DP=$!
  sleep 0.5
  c0=$(awk '{print $14+$15}' /proc/$DP/stat)
  r=$($B/splicegate-bench bulk --connect 127.0.0.1:19400 --streams $streams --duration 4 --direction up 2>/dev/null)
  c1=$(awk '{print $14+$15}' /proc/$DP/stat)
  fs=$(curl -s 127.0.0.1:19466/metrics | awk '/^splicegate_audit_fsync_seconds_count/{print $2}')
  kill $DP; wait $DP
  echo "$name streams=$streams $(echo $r | grep -o 'gbps=[0-9.]*') bytes=$(echo $r | grep -o ' bytes=[0-9]*') cpu_ticks=$((c1-c0)) fsyncs=$fs"
}
for i in 1 2 3; do
run off 1 --audit-dir ''
run batch 1 --audit-dir /tmp/abench --audit-durability batch
run off 8 --audit-dir ''
run batch 8 --audit-dir /tmp/abench --audit-durability batch
done
kill $SP
