#!/bin/sh
# Installs every Debian 12 package splicegate needs to build, test, benchmark and package.
# Idempotent; safe to run on a fresh machine as root (or with sudo available).
set -eu
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
PACKAGES="
  build-essential cmake pkg-config ninja-build git
  liburing-dev libcap-dev
  libboost-program-options-dev
  libprotobuf-dev protobuf-compiler
  prometheus-cpp-dev libmicrohttpd-dev
  libgtest-dev libgmock-dev
  libssl-dev libcurl4-openssl-dev
  libacl1-dev
  libbpf-dev bpftool clang llvm libelf-dev zlib1g-dev
  iproute2 procps util-linux
  haproxy tcpdump fio linux-perf
  python3 curl
  debhelper lintian dpkg-dev strace man-db adduser
  prometheus
  radosgw ceph-mon ceph-osd
"
missing=""
for p in $PACKAGES; do
  # A package whose triggers have not run yet (pending, or awaited from another package) is
  # installed all the same: asking apt again would only run it every time.
  case "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" in
  "install ok installed" | "install ok triggers-pending" | "install ok triggers-awaited") ;;
  *) missing="$missing $p" ;;
  esac
done
if [ -n "$missing" ]; then
  $SUDO apt-get update -q
  # shellcheck disable=SC2086
  $SUDO apt-get install -y -q --no-install-recommends $missing
fi
