#!/bin/sh
# Builds the Debian package splicegate_<version>_<arch>.deb with Debian's own tools
# (dpkg-buildpackage + debhelper). The version comes from project(... VERSION ...) in the
# top-level CMakeLists.txt, the one place it is kept.
#
#   packaging/build-deb.sh [--out DIR] [--version VERSION] [--prebuilt BUILD_DIR] [--keep]
#
#   --out DIR             where the .deb (and .buildinfo/.changes) go; default build/deb
#   --version VERSION     override the package version (tests build a bumped one to upgrade to)
#   --prebuilt BUILD_DIR  package the binaries of an existing CMake build tree instead of
#                         building from scratch (configured with packaging/install.cmake
#                         included; used by tests/integration/PackageTest.cpp)
#   --keep                keep the staged source tree DIR/splicegate-VERSION
#
# How: the working tree's files (git's tracked and untracked-but-not-ignored files, or all but
# build directories without git) are staged in DIR/splicegate-VERSION/, packaging/debian/ is
# copied to its debian/, debian/changelog is written for VERSION, and
# `dpkg-buildpackage -b` builds in there (a fresh CMake build in obj-*/ unless --prebuilt).
# Needs: dpkg-dev, debhelper (no fakeroot: Rules-Requires-Root: no) and the build dependencies
# in packaging/debian/control (tools/install-deps.sh installs them all). Exit 0 ok, 1 failure,
# 2 usage error.
set -eu

die() { echo "build-deb.sh: $*" >&2; exit 1; }
usage_error() { echo "build-deb.sh: $* (see --help)" >&2; exit 2; }

src=$(cd "$(dirname "$0")/.." && pwd)
out="$src/build/deb"
version=""
prebuilt=""
keep=0
while [ $# -gt 0 ]; do
    case "$1" in
        --out) [ $# -ge 2 ] || usage_error "--out needs a directory"; out=$2; shift 2 ;;
        --version) [ $# -ge 2 ] || usage_error "--version needs a value"; version=$2; shift 2 ;;
        --prebuilt) [ $# -ge 2 ] || usage_error "--prebuilt needs a build directory"; prebuilt=$2; shift 2 ;;
        --keep) keep=1; shift ;;
        -h|--help) sed -n '2,/^set -eu$/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) usage_error "unknown argument '$1'" ;;
    esac
done

for tool in dpkg-buildpackage dh cmake; do
    command -v "$tool" >/dev/null 2>&1 ||
        die "$tool not found: apt-get install dpkg-dev debhelper cmake (or tools/install-deps.sh)"
done

if [ -z "$version" ]; then
    version=$(sed -n 's/^project(splicegate[[:space:]]\{1,\}VERSION[[:space:]]\{1,\}\([0-9][0-9.]*\).*/\1/p' \
        "$src/CMakeLists.txt" | head -n 1)
    [ -n "$version" ] || die "no 'project(splicegate VERSION x.y.z ...)' in $src/CMakeLists.txt"
fi
case "$version" in
    [0-9]*) ;;
    *) die "version '$version' must start with a digit" ;;
esac

if [ -n "$prebuilt" ]; then
    prebuilt=$(cd "$prebuilt" && pwd) || die "no build directory '$prebuilt'"
    [ -f "$prebuilt/cmake_install.cmake" ] || die "$prebuilt is not a CMake build tree"
    for binary in splicegate splicegatectl splicegate-audit; do
        [ -x "$prebuilt/bin/$binary" ] || die "$prebuilt/bin/$binary is not built"
    done
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
stage="$out/splicegate-$version"
rm -rf "$stage"
mkdir -p "$stage"

# Stage the sources.
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    # shellcheck disable=SC2016
    (cd "$src" && git ls-files -z --cached --others --exclude-standard |
        xargs -0 sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh |
        tar --null -T - -cf -) | tar -xf - -C "$stage"
else
    (cd "$src" && tar --exclude='./build' --exclude='./build-*' --exclude='./.git' -cf - .) |
        tar -xf - -C "$stage"
fi
rm -rf "$stage/debian"
cp -a "$src/packaging/debian" "$stage/debian"

# debian/changelog for this version; its date (and so SOURCE_DATE_EPOCH) is the last commit's.
date=$(git -C "$src" log -1 --format=%aD 2>/dev/null || true)
[ -n "$date" ] || date=$(date -R)
maintainer=$(sed -n 's/^Maintainer: //p' "$src/packaging/debian/control")
cat > "$stage/debian/changelog" <<EOF
splicegate ($version) unstable; urgency=medium

  * Release $version (built from the project's CMakeLists.txt version by
    packaging/build-deb.sh).

 -- $maintainer  $date
EOF

jobs=$(nproc 2>/dev/null || echo 1)
export DEB_BUILD_OPTIONS="${DEB_BUILD_OPTIONS:-parallel=$jobs}"
deps_flag=""
if [ -n "$prebuilt" ]; then
    export SPLICEGATE_PREBUILT="$prebuilt"
    # Nothing is compiled: the build dependencies are not needed to package prebuilt binaries,
    # and a -dbgsym package of a test build would be thrown away.
    deps_flag="-d"
    DEB_BUILD_OPTIONS="$DEB_BUILD_OPTIONS noautodbgsym"
fi

echo "build-deb.sh: building splicegate $version in $stage${prebuilt:+ (binaries from $prebuilt)}"
(cd "$stage" && dpkg-buildpackage -b -us -uc $deps_flag)

arch=$(dpkg-architecture -qDEB_HOST_ARCH)
deb="$out/splicegate_${version}_${arch}.deb"
[ -f "$deb" ] || die "dpkg-buildpackage did not produce $deb"
[ "$keep" -eq 1 ] || rm -rf "$stage"
echo "build-deb.sh: built $deb"
