#!/bin/sh
# SPDX-License-Identifier: MIT
# Install a cross-built fern into a scratch prefix, build tests/cross/prog.c
# against it with the cross compiler and pkg-config (only the prefix's .pc
# files visible), shared and static, and run both under qemu-user.
#   tests/cross/check.sh BUILD_DIR [PARKED]
# CROSS (default aarch64-linux-gnu-), QEMU (default qemu-aarch64) and
# SYSROOT (default /usr/aarch64-linux-gnu) name the toolchain and emulator.
set -eu
build=${1:?usage: check.sh BUILD_DIR [PARKED]}
parked=${2:-100000}
cross=${CROSS:-aarch64-linux-gnu-}
qemu=${QEMU:-qemu-aarch64}
sysroot=${SYSROOT:-/usr/aarch64-linux-gnu}
src=$(cd "$(dirname "$0")" && pwd)
prefix=$(mktemp -d)
work=$(mktemp -d)
trap 'rm -rf "$prefix" "$work"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
libdir=$(ls -d "$prefix"/lib*/pkgconfig | head -n 1 | xargs dirname)
pc() { PKG_CONFIG_LIBDIR="$libdir/pkgconfig" PKG_CONFIG_PATH= pkg-config "$@" fern; }

"${cross}gcc" -std=gnu11 -O2 -Wall -Wextra -Werror -o "$work/prog" "$src/prog.c" \
  $(pc --cflags --libs) -Wl,-rpath,"$libdir"
"${cross}gcc" -std=gnu11 -O2 -Wall -Wextra -Werror -o "$work/prog_static" "$src/prog.c" \
  $(pc --cflags) "$libdir/libfern.a" -pthread
# The program really is for the target, and links the installed library.
"${cross}readelf" -h "$work/prog" | grep -q 'Machine: *AArch64' || { echo "prog is not an aarch64 program"; exit 1; }
"${cross}readelf" -d "$work/prog" | grep -q 'libfern.so' || { echo "prog does not link libfern.so"; exit 1; }

for p in prog prog_static; do
  start=$(date +%s)
  "$qemu" -L "$sysroot" "$work/$p" "$parked"
  echo "$p: $(( $(date +%s) - start )) s under $qemu"
done
echo "cross check: 2 passed, 0 failed"
