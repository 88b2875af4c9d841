#!/bin/sh
# A one-node Ceph cluster with an S3 gateway for the S3 tests, on 127.0.0.1 only:
#   tests/s3/radosgw.sh start DIR   -> DIR/endpoint (http://127.0.0.1:PORT), DIR/credentials
#                                      (AWS shared-credentials format, mode 0600), DIR/*.pid,
#                                      DIR/https-endpoint (https://127.0.0.1:PORT, the same
#                                      gateway over TLS) and DIR/ca.pem (the CA its certificate,
#                                      made here for 127.0.0.1, is signed by)
#   tests/s3/radosgw.sh stop DIR    -> ends the daemons by their pid files, removes what start made
# One monitor, one memstore OSD (RAM that grows with the data: keep test data small) and radosgw.
# Authentication is off (a throwaway cluster); then ms_*_mode must be crc as well, or the gateway
# cannot reach the monitor and dies after 300 s. Needs the Debian packages radosgw, ceph-mon and
# ceph-osd (tools/install-deps.sh).
set -eu

usage() { echo "usage: $0 start|stop DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
ACTION=$1
mkdir -p "$2"
DIR=$(cd "$2" && pwd)
CONF=$DIR/ceph.conf
ACCESS_KEY=SPLICEGATETESTKEY000
SECRET_KEY=splicegateTestSecretKey0000000000000000000
WAIT_SECONDS=${SPLICEGATE_RADOSGW_WAIT:-60}
# The OSD's RAM budget; a benchmark that ships more than the tests do raises it.
MEMSTORE_BYTES=${SPLICEGATE_RADOSGW_MEMSTORE_BYTES:-536870912}

# A port nobody listens on now (the kernel's pick, released again for the daemon to take).
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

stop_one() {
    pidfile=$DIR/$1.pid
    [ -f "$pidfile" ] || return 0
    pid=$(cat "$pidfile")
    # Only our own daemon: the pid must still be that program run with this cluster's config.
    if [ -n "$pid" ] && tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$CONF"; then
        kill "$pid" 2>/dev/null || true
        i=0
        while kill -0 "$pid" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
}

stop() {
    stop_one radosgw
    stop_one osd
    stop_one mon
    rm -rf "$DIR/mon" "$DIR/osd" "$DIR/rgw" "$DIR/run" "$DIR/log" "$DIR/monmap" "$DIR/ceph.conf" \
        "$DIR/endpoint" "$DIR/credentials" "$DIR/radosgw.out" "$DIR/mon.out" "$DIR/osd.out" \
        "$DIR/https-endpoint" "$DIR/ca.pem" "$DIR/tls"
    rmdir "$DIR" 2>/dev/null || true
}

fail() {
    echo "radosgw.sh: $*" >&2
    for log in "$DIR"/log/*.log "$DIR"/*.out; do
        [ -f "$log" ] || continue
        echo "--- tail of $log" >&2
        tail -n 15 "$log" >&2
    done
    stop
    exit 1
}

write_conf() {
    cat > "$CONF" <<CONF
[global]
fsid = $1
mon_host = v2:127.0.0.1:$2
mon_initial_members = a
public_addr = 127.0.0.1
auth_cluster_required = none
auth_service_required = none
auth_client_required = none
ms_mon_client_mode = crc
ms_mon_cluster_mode = crc
ms_mon_service_mode = crc
ms_client_mode = crc
ms_cluster_mode = crc
ms_service_mode = crc
ms_bind_msgr1 = false
run_dir = $DIR/run
admin_socket = $DIR/run/\$name.asok
log_file = $DIR/log/\$name.log
mon_data = $DIR/mon
osd_data = $DIR/osd
osd_objectstore = memstore
memstore_device_bytes = $MEMSTORE_BYTES
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_pool_default_pg_autoscale_mode = off
mon_allow_pool_size_one = true
mon_max_pg_per_osd = 1000
osd_crush_chooseleaf_type = 0
mon_warn_on_pool_no_redundancy = false
mgr_initial_modules =
[client.rgw.test]
rgw_frontends = beast endpoint=127.0.0.1:$3 ssl_endpoint=127.0.0.1:$4 ssl_certificate=$DIR/tls/server.pem ssl_private_key=$DIR/tls/server.key
rgw_data = $DIR/rgw
rgw_enable_usage_log = false
CONF
}

# A throwaway CA and a certificate for 127.0.0.1 signed by it: the clients verify TLS as they do
# in production, with --s3-ca-file DIR/ca.pem.
make_certificates() {
    mkdir -p "$DIR/tls"
    (
        cd "$DIR/tls"
        openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=splicegate test CA" \
            -keyout ca.key -out ca.pem
        openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout server.key -out server.csr
        printf 'subjectAltName = IP:127.0.0.1\nbasicConstraints = CA:FALSE\n' > server.ext
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
            -extfile server.ext -out server.pem
    ) > "$DIR/tls/openssl.out" 2>&1 || fail "openssl could not make the test certificates: $(tail -n 3 "$DIR/tls/openssl.out")"
    cp "$DIR/tls/ca.pem" "$DIR/ca.pem"
}

start() {
    for tool in ceph-mon ceph-osd radosgw radosgw-admin monmaptool ceph python3 curl openssl; do
        command -v "$tool" > /dev/null || { echo "radosgw.sh: $tool is missing (tools/install-deps.sh installs it)" >&2; exit 1; }
    done
    # A run that died before its stop left a cluster (or its files) here: end it first.
    if [ -f "$DIR/mon.pid" ] || [ -f "$CONF" ]; then stop; mkdir -p "$DIR"; fi
    mkdir -p "$DIR/mon" "$DIR/osd" "$DIR/rgw" "$DIR/run" "$DIR/log"
    fsid=$(python3 -c 'import uuid; print(uuid.uuid4())')
    mon_port=$(free_port)
    rgw_port=$(free_port)
    while [ "$rgw_port" = "$mon_port" ]; do rgw_port=$(free_port); done
    tls_port=$(free_port)
    while [ "$tls_port" = "$mon_port" ] || [ "$tls_port" = "$rgw_port" ]; do tls_port=$(free_port); done
    make_certificates
    write_conf "$fsid" "$mon_port" "$rgw_port" "$tls_port"

    monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$mon_port]" "$DIR/monmap" > /dev/null ||
        fail "monmaptool failed"
    ceph-mon -c "$CONF" -i a --mkfs --monmap "$DIR/monmap" > "$DIR/mon.out" 2>&1 || fail "ceph-mon --mkfs failed"
    ceph-mon -c "$CONF" -i a -f > "$DIR/mon.out" 2>&1 &
    echo $! > "$DIR/mon.pid"

    osd_uuid=$(python3 -c 'import uuid; print(uuid.uuid4())')
    osd_id=$(timeout 30 ceph -c "$CONF" osd create "$osd_uuid" 2> "$DIR/osd.out") || fail "ceph osd create failed"
    ceph-osd -c "$CONF" -i "$osd_id" --mkfs --osd-uuid "$osd_uuid" >> "$DIR/osd.out" 2>&1 || fail "ceph-osd --mkfs failed"
    ceph-osd -c "$CONF" -i "$osd_id" -f >> "$DIR/osd.out" 2>&1 &
    echo $! > "$DIR/osd.pid"

    radosgw -c "$CONF" -n client.rgw.test -f > "$DIR/radosgw.out" 2>&1 &
    echo $! > "$DIR/radosgw.pid"

    endpoint=http://127.0.0.1:$rgw_port
    deadline=$(( $(date +%s) + WAIT_SECONDS ))
    until curl -s -o /dev/null -m 2 "$endpoint/"; do
        [ "$(date +%s)" -lt "$deadline" ] || fail "no S3 endpoint at $endpoint after ${WAIT_SECONDS}s"
        for name in mon osd radosgw; do
            kill -0 "$(cat "$DIR/$name.pid")" 2>/dev/null || fail "$name exited before the endpoint came up"
        done
        sleep 0.5
    done

    timeout 60 radosgw-admin -c "$CONF" user create --uid=splicegate-test --display-name=splicegate-test \
        --access-key="$ACCESS_KEY" --secret-key="$SECRET_KEY" > "$DIR/run/user.json" 2>&1 ||
        fail "radosgw-admin user create failed: $(tail -n 3 "$DIR/run/user.json")"
    (umask 077 && printf '[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n' \
        "$ACCESS_KEY" "$SECRET_KEY" > "$DIR/credentials")
    chmod 0600 "$DIR/credentials"
    tls_endpoint=https://127.0.0.1:$tls_port
    curl -s -o /dev/null -m 5 --cacert "$DIR/ca.pem" "$tls_endpoint/" ||
        fail "no TLS S3 endpoint at $tls_endpoint verified with $DIR/ca.pem"
    echo "$endpoint" > "$DIR/endpoint"
    echo "$tls_endpoint" > "$DIR/https-endpoint"
    echo "radosgw.sh: S3 endpoint $endpoint ($tls_endpoint over TLS, CA $DIR/ca.pem), credentials in $DIR/credentials"
}

case "$ACTION" in
start) start ;;
stop) stop ;;
*) usage ;;
esac
