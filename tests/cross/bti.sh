#!/bin/sh
# SPDX-License-Identifier: MIT
# In a build with -mbranch-protection=standard, every object of the library
# (the C files and src/arch's assembly) must carry the GNU property note
# claiming BTI and PAC, and those objects linked together must keep it: the
# linker ANDs the notes, so one object without it (say, assembly missing its
# note) would silently drop BTI for the whole library.
#
# The installed libfern.so itself is marked only where the toolchain's start
# files and static helpers (crti.o, crtbeginS.o, libgcc.a, ...) are marked
# too; Debian 12's are not, so the link below leaves them out to check
# fern's own objects. The result for libfern.so is printed either way.
#   tests/cross/bti.sh BUILD_DIR
set -eu
build=$(cd "${1:?usage: bti.sh BUILD_DIR}" && pwd)
cross=${CROSS:-aarch64-linux-gnu-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The library's objects, exactly: the members of the static archive.
mkdir "$tmp/o"
(cd "$tmp/o" && "${cross}ar" x "$build/libfern.a")
objs=$(ls "$tmp"/o/*.o)
[ -n "$objs" ] || { echo "bti check: no objects in $build/libfern.a"; exit 1; }
bad=0
for o in $objs; do
  "${cross}readelf" -n "$o" | grep -q 'AArch64 feature: BTI, PAC' || {
    echo "bti check: $o does not claim BTI, PAC"; bad=1; }
done
[ $bad = 0 ] || exit 1
# shellcheck disable=SC2086
"${cross}gcc" -shared -nostdlib -o "$tmp/fern_only.so" $objs
"${cross}readelf" -n "$tmp/fern_only.so" | grep -q 'AArch64 feature: BTI, PAC' || {
  echo "bti check: fern's objects linked together lose the BTI, PAC note"; exit 1; }
n=$(echo "$objs" | wc -l)
lib=$(ls "$build"/libfern.so.* | head -n 1)
if "${cross}readelf" -n "$lib" | grep -q 'AArch64 feature: BTI, PAC'; then
  installed="marked BTI, PAC"
else
  installed="not marked (the toolchain's start files carry no BTI note)"
fi
echo "bti check: $n objects claim BTI, PAC and keep it linked; $(basename "$lib"): $installed"
