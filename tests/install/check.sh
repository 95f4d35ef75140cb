#!/bin/sh
# SPDX-License-Identifier: MIT
# Install fern from a build tree into a scratch prefix and build consumers
# against it the ways the README tells users to: a C program (prog.c), a
# C++ program (prog.cc) and a fern-hook program (prog_hook.c) with pkg-config
# and with find_package(fern); then the
# uninstall command, the library configured and built with
# -DBUILD_TESTING=OFF while GoogleTest is hidden (as on a machine without it),
# and the README's own steps for installing into a prefix, run as written.
# Each check prints ok/FAIL; the last line is `install check: N passed, N failed`.
#
#   tests/install/check.sh [BUILD_DIR]      (default build/release)
set -u
build=${1:-build/release}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
prefix=$(mktemp -d)
work=$(mktemp -d)
trap 'rm -rf "$prefix" "$work"' EXIT
CC=${CC:-cc}
CXX=${CXX:-c++}
passed=0 failed=0

check() {   # check NAME COMMAND...: run COMMAND, its output to $work/NAME.log
    name=$1
    shift
    if "$@" >"$work/$name.log" 2>&1; then
        echo "ok    $name"
        passed=$((passed + 1))
    else
        echo "FAIL  $name"
        sed 's/^/      /' "$work/$name.log" | tail -n 30
        failed=$((failed + 1))
    fi
}

prints() {  # prints EXPECTED PROGRAM: PROGRAM runs and prints EXPECTED
    out=$("$2") || return 1
    [ "$out" = "$1" ] || { echo "printed: $out"; return 1; }
}

install_tree() {
    cmake --install "$build" --prefix "$prefix" &&
    libdir=$(ls -d "$prefix"/lib*/pkgconfig | head -n 1 | xargs dirname) &&
    echo "$libdir" >"$work/libdir"
}
check install install_tree
libdir=$(cat "$work/libdir" 2>/dev/null || echo "$prefix/lib")
export PKG_CONFIG_PATH="$libdir/pkgconfig"

c_pkgconfig() {
    $CC -o "$work/prog" "$here/prog.c" $(pkg-config --cflags --libs fern) -Wl,-rpath,"$libdir" &&
    prints "fern ok 42" "$work/prog"
}
check c-pkg-config c_pkgconfig

c_static() {
    $CC -o "$work/prog_static" "$here/prog.c" $(pkg-config --cflags fern) "$libdir/libfern.a" \
        $(pkg-config --static --libs-only-other fern) &&
    prints "fern ok 42" "$work/prog_static"
}
check c-static c_static

cxx_pkgconfig() {
    $CXX -std=c++20 -o "$work/prog_cxx" "$here/prog.cc" $(pkg-config --cflags --libs fern) \
        -Wl,-rpath,"$libdir" &&
    prints "fern++ ok 42" "$work/prog_cxx"
}
check cxx-pkg-config cxx_pkgconfig

# Below C++20 (g++ 12 defaults to C++17) the first error is fern.hpp's one
# #error naming what it needs, and fern.hpp reports nothing else (errors in
# the consumer's own uses of fern:: follow, as they must).
cxx_too_old() {
    if $CXX -std=c++17 -c -o "$work/old.o" "$here/prog.cc" $(pkg-config --cflags fern) \
            2>"$work/old.err"; then
        echo "compiled as C++17"
        return 1
    fi
    cat "$work/old.err"
    [ "$(grep -c 'fern\.hpp:[0-9]*:[0-9]*: error' "$work/old.err")" -eq 1 ] &&
    grep -m 1 'error' "$work/old.err" | grep -q 'fern.hpp needs C++20'
}
check cxx17-one-clear-error cxx_too_old

cmake_package() {
    mkdir -p "$work/cm" &&
    cp "$here/prog.c" "$here/prog.cc" "$here/overflow.c" "$here/prog_hook.c" "$here/prog_nohook_calls.c" \
        "$here/CMakeLists.txt" "$work/cm/" &&
    cmake -S "$work/cm" -B "$work/cm/build" -DCMAKE_PREFIX_PATH="$prefix" &&
    cmake --build "$work/cm/build" &&
    prints "fern ok 42" "$work/cm/build/prog" &&
    prints "fern++ ok 42" "$work/cm/build/prog_cxx" &&
    prints "fern-hook ok" "$work/cm/build/prog_hook" &&
    for p in prog_static prog_cxx_static prog_hook_static; do
        # Static: no libfern*.so among what the program needs.
        ! readelf -d "$work/cm/build/$p" | grep -q 'NEEDED.*libfern' ||
            { echo "$p needs a shared libfern"; return 1; }
    done &&
    prints "fern ok 42" "$work/cm/build/prog_static" &&
    prints "fern++ ok 42" "$work/cm/build/prog_cxx_static" &&
    prints "fern-hook ok" "$work/cm/build/prog_hook_static"
}
check cmake-package-shared-and-static cmake_package

# fern::hook_static brings every member of libfern-hook.a, even into a
# program that calls no hooked function itself: each global function the
# archive defines is defined in the program.
hook_static_whole() {
    prints "fern-hook static ok 0" "$work/cm/build/prog_hook_nocalls" &&
    nm -g --defined-only "$libdir/libfern-hook.a" | awk '$2 == "T" { print $3 }' | sort -u >"$work/hook.syms" &&
    nm --defined-only "$work/cm/build/prog_hook_nocalls" | awk '$2 == "T" || $2 == "t" { print $3 }' |
        sort -u >"$work/prog.syms" &&
    missing=$(comm -23 "$work/hook.syms" "$work/prog.syms") &&
    echo "$(wc -l <"$work/hook.syms") functions in libfern-hook.a, missing: ${missing:-none}" &&
    [ -z "$missing" ] && [ "$(wc -l <"$work/hook.syms")" -ge 40 ]
}
check hook-static-target-links-whole hook_static_whole

# fern-hook (docs/hooks.md): pkg-config fern-hook (shared), and the static
# archive linked whole, as the docs say.
hook_pkgconfig() {
    $CC -o "$work/prog_hook" "$here/prog_hook.c" $(pkg-config --cflags --libs fern-hook) \
        -Wl,-rpath,"$libdir" &&
    prints "fern-hook ok" "$work/prog_hook"
}
check hook-pkg-config hook_pkgconfig

hook_static() {
    $CC -o "$work/prog_hook_static" "$here/prog_hook.c" $(pkg-config --cflags fern-hook) \
        -Wl,--whole-archive "$libdir/libfern-hook.a" -Wl,--no-whole-archive "$libdir/libfern.a" \
        -pthread -ldl &&
    prints "fern-hook ok" "$work/prog_hook_static"
}
check hook-static hook_static

# One version everywhere (CHANGELOG.md, "Versioning"): fern.pc, fern.h's
# FERN_VERSION_MAJOR/MINOR, and the sonames of libfern and libfern-hook
# (major.minor before 1.0, then major).
versions_agree() {
    v=$(pkg-config --modversion fern) || return 1
    major=${v%%.*}
    rest=${v#*.}
    minor=${rest%%.*}
    h=$(printf '#include <fern/fern.h>\nFERN_VERSION_MAJOR.FERN_VERSION_MINOR\n' |
        $CC -E -P $(pkg-config --cflags fern) - | tail -n 1 | tr -d ' ')
    if [ "$major" = 0 ]; then want="libfern.so.0.$minor"; else want="libfern.so.$major"; fi
    soname=$(readelf -d "$libdir/libfern.so" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
    # libfern-hook follows the same rule (CHANGELOG.md).
    hwant=$(echo "$want" | sed 's/^libfern\./libfern-hook./')
    hsoname=$(readelf -d "$libdir/libfern-hook.so" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
    echo "fern.pc $v, fern.h $h, soname $soname (want $want), $hsoname (want $hwant)"
    [ "$h" = "$major.$minor" ] && [ "$soname" = "$want" ] && [ -e "$libdir/$want" ] &&
    [ "$hsoname" = "$hwant" ] && [ -e "$libdir/$hwant" ]
}
check versions-agree versions_agree

# The man pages are installed where man finds them: `man fern_spawn`.
man_pages() {
    m="$prefix/share/man"
    n=$(ls "$m"/man3/fern_*.3 | wc -l)
    # fern__* are private to libfern-hook (src/hookapi.h): no pages.
    exported=$(nm -D --defined-only "$libdir/libfern.so" | awk '$2 == "T" && $3 ~ /^fern_[a-z0-9]/ { print $3 }')
    echo "$n pages, $(echo "$exported" | wc -l) exported functions"
    for f in $exported fern fern_config fern_attr; do
        [ -f "$m/man3/$f.3" ] || { echo "no page $f.3"; return 1; }
    done
    # The function pages plus the two structure pages, nothing else.
    [ "$n" -eq $(($(echo "$exported" | wc -l) + 2)) ] &&
    [ -f "$m/man7/fern-hook.7" ] && [ -f "$m/man7/fern-cxx.7" ] &&
    MANPATH="$m" man -w fern_spawn | grep -q "$m/man3/fern_spawn.3" &&
    MANPATH="$m" man -w 7 fern-hook | grep -q "$m/man7/fern-hook.7" &&
    MANPATH="$m" man -w fern_config | grep -q "$m/man3/fern_config.3"
}
check man-pages man_pages

# fern-trace (bin/fern-trace) is installed beside the library with its man
# page: it runs from the prefix, summarises a trace written by FERN_TRACE
# (the scratch program, run from the prefix) and `man fern-trace` finds it.
fern_trace_installed() {
    bin="$prefix/bin/fern-trace"
    [ -x "$bin" ] || { echo "no $bin"; return 1; }
    MANPATH="$prefix/share/man" man -w fern-trace | grep -q "$prefix/share/man/man1/fern-trace.1" ||
        { echo "man fern-trace does not find the installed page"; return 1; }
    t="$work/trace.json"
    FERN_TRACE="$t" "$work/prog" >/dev/null || { echo "the traced program failed"; return 1; }
    "$bin" "$t" | grep -q "^workers:" || { echo "fern-trace printed no summary of $t"; return 1; }
}
check fern-trace fern_trace_installed

# fern-memcached (apps/memcached/) is installed with the library when the
# examples are built (FERN_BUILD_EXAMPLES, on in `make build`): it runs from
# the prefix without LD_LIBRARY_PATH, its --help and its man page describe
# the same options, `man fern-memcached` finds the page, and it serves and
# stops on SIGTERM with status 0.
memcached_installed() {
    bin="$prefix/bin/fern-memcached"
    page="$prefix/share/man/man1/fern-memcached.1"
    [ -x "$bin" ] || { echo "no $bin"; return 1; }
    help=$(env -u LD_LIBRARY_PATH "$bin" --help) || { echo "--help failed"; return 1; }
    echo "$help" | head -n 1 | grep -q '^usage: fern-memcached' || { echo "help: $help"; return 1; }
    MANPATH="$prefix/share/man" man -w fern-memcached | grep -q "$page" || return 1
    opts=$(echo "$help" | grep -o -e '--[a-z][a-z-]*' | sort -u)
    [ -n "$opts" ] || { echo "no options in --help"; return 1; }
    for o in $opts; do
        sed 's/\\-/-/g' "$page" | grep -q -e "$o" || { echo "$o is not in $page"; return 1; }
    done
    "$bin" -p 0 -t 1 >"$work/mc.out" 2>"$work/mc.err" &
    pid=$!
    i=0
    while ! grep -q '^listening on 127\.0\.0\.1:[0-9]' "$work/mc.out" && [ $i -lt 100 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    grep -q '^listening on' "$work/mc.out" || { kill "$pid"; cat "$work/mc.err"; return 1; }
    kill -TERM "$pid"
    wait "$pid" || { echo "exit status $? after SIGTERM"; return 1; }
}
if grep -q '^FERN_BUILD_EXAMPLES:BOOL=ON' "$build/CMakeCache.txt"; then
    check fern-memcached-installed memcached_installed
else
    echo "note  fern-memcached-installed: not checked, $build has FERN_BUILD_EXAMPLES off"
fi

# The flags consumers get carry -fstack-clash-protection: a 200 KiB frame on
# a 128 KiB stack (overflow.c) is reported as an overflow naming the thread,
# built with pkg-config and with the CMake package.
overflow_reported() {
    $CC -O2 -o "$work/overflow" "$here/overflow.c" $(pkg-config --cflags --libs fern) \
        -Wl,-rpath,"$libdir" || return 1
    for p in "$work/overflow" "$work/cm/build/overflow"; do
        if "$p" 2>"$work/overflow.err"; then echo "$p: exited normally"; return 1; fi
        grep -q '"big-frame" overflowed its stack of 131072 bytes' "$work/overflow.err" ||
            { echo "$p: no overflow report:"; cat "$work/overflow.err"; return 1; }
    done
}
check big-frame-overflow-reported overflow_reported

# The exported fern::fern names the include directory once.
include_once() {
    line=$(grep -A6 'add_library(fern::fern SHARED' "$libdir"/cmake/fern/fernTargets.cmake |
           grep INTERFACE_INCLUDE_DIRECTORIES) || return 1
    echo "$line"
    [ "$(echo "$line" | grep -o 'include' | wc -l)" -eq 1 ]
}
check include-dir-listed-once include_once

# The README's uninstall command removes every installed file.
uninstall() {
    xargs rm -f <"$build/install_manifest.txt" &&
    left=$(find "$prefix" -type f | head -n 5) &&
    { [ -z "$left" ] || { echo "left behind: $left"; return 1; }; }
}
check uninstall uninstall

# The library alone, tests off, GoogleTest hidden: configure, build, install,
# and the C consumer builds against it.
no_tests() {
    cmake -S "$root" -B "$work/notest" -DBUILD_TESTING=OFF -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON \
        -DFERN_BUILD_EXAMPLES=OFF -DFERN_BUILD_BENCH=OFF &&
    cmake --build "$work/notest" -j 2 &&
    [ ! -e "$work/notest/tests" ] &&
    cmake --install "$work/notest" --prefix "$work/notest-prefix" &&
    cmake -S "$work/cm" -B "$work/cm/build2" -DCMAKE_PREFIX_PATH="$work/notest-prefix" &&
    cmake --build "$work/cm/build2" --target prog &&
    prints "fern ok 42" "$work/cm/build2/prog"
}
check build-without-tests-or-gtest no_tests

# The README's steps for a prefix of one's own, exactly as written there (the
# sh block after its "tests/install/check.sh runs the next block" marker),
# with HOME a scratch directory and none of the variables they set already
# set: a C program with pkg-config and a CMake project with find_package
# build and run, and `man fern_spawn` finds the installed page. Run last:
# its install rewrites the build's install_manifest.txt.
readme_prefix() {
    awk '/tests\/install\/check.sh runs the next block/ { want = 1; next }
         want && /^```sh/ { inblock = 1; next }
         inblock && /^```/ { exit }
         inblock { print }' "$root/README.md" >"$work/readme.sh" &&
    [ "$(wc -l <"$work/readme.sh")" -ge 5 ] || { echo "README block not found"; return 1; }
    mkdir -p "$work/rd/home" "$work/rd/myproject" &&
    ln -s "$(cd "$build" && pwd)" "$work/rd/build" &&
    cp "$here/prog.c" "$work/rd/" &&
    cp "$here"/*.c "$here/prog.cc" "$here/CMakeLists.txt" "$work/rd/myproject/" &&
    (cd "$work/rd" && env -u PKG_CONFIG_PATH -u LD_LIBRARY_PATH -u CMAKE_PREFIX_PATH -u MANPATH \
        HOME="$work/rd/home" MANWIDTH=80 sh -e "$work/readme.sh") >"$work/readme.out" 2>&1
    rc=$?
    cat "$work/readme.out"
    [ $rc -eq 0 ] &&
    [ "$(grep -c '^fern ok 42$' "$work/readme.out")" -eq 2 ] &&
    grep -q 'fern_spawn *- ' "$work/readme.out" &&
    # Given the directory alone, as well.
    man -M "$work/rd/home/.local/share/man" fern_spawn | grep -q 'fern_spawn *- '
}
check readme-prefix-steps readme_prefix

echo "install check: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
