#!/bin/sh
# SPDX-License-Identifier: MIT
# Build the parser fuzz targets with clang (libFuzzer + ASan + UBSan) and run
# each for a bounded time over its seed corpus: the HTTP parser
# (examples/http_parser.c) and fern-memcached's ASCII and binary parsers
# (apps/memcached/; their targets, seeds and dictionary are in
# apps/memcached/tests/fuzz/). Skips (exit 0) without clang or without libFuzzer's
# runtime.
#
#   tests/fuzz/run.sh [SECONDS]        (per target; default 60; or $FUZZ_TIME)
#
# New inputs libFuzzer finds go to a scratch corpus under $FUZZ_OUT (default
# a temporary directory), never into tests/fuzz/corpus*/. A crash leaves its
# input in $FUZZ_OUT and makes the script fail.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
secs=${1:-${FUZZ_TIME:-60}}
CLANG=${CLANG:-clang}

if ! command -v "$CLANG" >/dev/null 2>&1; then
    echo "fuzz: skipped: $CLANG is not installed"
    exit 0
fi

out=${FUZZ_OUT:-$(mktemp -d /tmp/fern-fuzz.XXXXXX)}

# fuzz NAME SEED_CORPUS DICT MAX_LEN SOURCES...
fuzz() {
    name=$1 seeds=$2 dict=$3 maxlen=$4
    shift 4
    mkdir -p "$out/$name/corpus"
    bin="$out/$name/$name"
    if ! "$CLANG" -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
            -I"$root/examples" -o "$bin" "$@" 2>"$out/$name/build.log"; then
        if grep -q -e 'libclang_rt.fuzzer' -e 'fuzzer' "$out/$name/build.log"; then
            echo "fuzz: skipped: $CLANG cannot link -fsanitize=fuzzer (install libclang-rt-dev)"
            cat "$out/$name/build.log" >&2
            exit 0
        fi
        cat "$out/$name/build.log" >&2
        echo "fuzz: build of $name failed" >&2
        exit 1
    fi
    echo "fuzz: running $bin for ${secs}s (scratch corpus $out/$name/corpus)"
    (cd "$out/$name" && "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -max_len="$maxlen" ${dict:+-dict="$dict"} -print_final_stats=1 \
        "$out/$name/corpus" "$seeds")
}

fuzz http_parser_fuzz "$here/corpus" "$here/http.dict" 16384 \
    "$here/http_parser_fuzz.c" "$root/examples/http_parser.c"
mc=$root/apps/memcached
fuzz mc_ascii_parse_fuzz "$mc/tests/fuzz/corpus_mc_ascii" "$mc/tests/fuzz/mc_ascii.dict" 4096 \
    "$mc/tests/fuzz/mc_ascii_parse_fuzz.c" "$mc/ascii_parse.c"
fuzz mc_binary_parse_fuzz "$mc/tests/fuzz/corpus_mc_binary" "" 4096 \
    "$mc/tests/fuzz/mc_binary_parse_fuzz.c" "$mc/binary_parse.c"
echo "fuzz: ok"
