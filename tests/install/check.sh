#!/bin/sh
# Install fern from a build tree into a scratch prefix, then build and run a
# program against it twice: with pkg-config and with find_package(fern).
set -eu
build=${1:-build/release}
src=$(cd "$(dirname "$0")" && pwd)
prefix=$(mktemp -d)
work=$(mktemp -d)
trap 'rm -rf "$prefix" "$work"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
libdir=$(ls -d "$prefix"/lib*/pkgconfig | head -n 1 | xargs dirname)

# 1. pkg-config, shared library
PKG_CONFIG_PATH="$libdir/pkgconfig" cc -o "$work/prog" "$src/prog.c" \
  $(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs fern) -Wl,-rpath,"$libdir"
out=$("$work/prog")
[ "$out" = "fern ok 42" ] || { echo "pkg-config build printed: $out"; exit 1; }

# 2. pkg-config, static library
PKG_CONFIG_PATH="$libdir/pkgconfig" cc -o "$work/prog_static" "$src/prog.c" \
  $(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags fern) "$libdir/libfern.a" -pthread
out=$("$work/prog_static")
[ "$out" = "fern ok 42" ] || { echo "static build printed: $out"; exit 1; }

# 3. CMake package
mkdir -p "$work/cm"
cp "$src/prog.c" "$src/CMakeLists.txt" "$work/cm/"
cmake -S "$work/cm" -B "$work/cm/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/cm/build" >/dev/null
out=$("$work/cm/build/prog")
[ "$out" = "fern ok 42" ] || { echo "find_package build printed: $out"; exit 1; }
echo "install check: 3 passed, 0 failed"
