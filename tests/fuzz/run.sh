#!/bin/sh
# Build the HTTP parser fuzz target with clang (libFuzzer + ASan + UBSan) and
# run it for a bounded time over the seed corpus. Skips (exit 0) without clang
# or without libFuzzer's runtime.
#
#   tests/fuzz/run.sh [SECONDS]        (default 60; or $FUZZ_TIME)
#
# New inputs libFuzzer finds go to a scratch corpus under $FUZZ_OUT (default
# a temporary directory), never into tests/fuzz/corpus/. A crash leaves its
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
mkdir -p "$out/corpus"
bin="$out/http_parser_fuzz"
if ! "$CLANG" -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
        -I"$root/examples" -o "$bin" \
        "$here/http_parser_fuzz.c" "$root/examples/http_parser.c" 2>"$out/build.log"; then
    if grep -q -e 'libclang_rt.fuzzer' -e 'fuzzer' "$out/build.log"; then
        echo "fuzz: skipped: $CLANG cannot link -fsanitize=fuzzer (install libclang-rt-dev)"
        cat "$out/build.log" >&2
        exit 0
    fi
    cat "$out/build.log" >&2
    echo "fuzz: build failed" >&2
    exit 1
fi

echo "fuzz: running $bin for ${secs}s (scratch corpus $out/corpus)"
cd "$out"
"$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
    -dict="$here/http.dict" -print_final_stats=1 \
    "$out/corpus" "$here/corpus"
echo "fuzz: ok"
