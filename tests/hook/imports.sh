#!/bin/sh
# SPDX-License-Identifier: MIT
# libfern must not call a function that libfern-hook defines: with the hook
# loaded (or linked whole, statically) such a call from inside the runtime
# would run the hook's logic there (park a green thread inside the
# scheduler, adopt fern's own descriptors, recurse). src/base/sys.h makes
# the runtime's system calls raw; its locks are plocks (src/base/base.h).
#
#   imports.sh NM libfern.so libfern-hook.so [libfern.a]
#
# Fails, naming each symbol, when libfern.so (and libfern.a, if given)
# imports a symbol that libfern-hook.so exports, unless ALLOW below lists
# it with its reason.
set -eu

if [ $# -lt 3 ]; then
    echo "usage: $0 NM libfern.so libfern-hook.so [libfern.a]" >&2
    exit 2
fi
NM=$1 LIB=$2 HOOK=$3 ARCHIVE=${4:-}

# Symbols libfern may import from libc although the hook defines them, one
# per line: "name  why the call is safe through the hook". Keep it empty
# unless there is no raw form; every entry needs its reason.
ALLOW='
'

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The names only, without version suffixes (read@GLIBC_2.2.5).
"$NM" -D --defined-only "$HOOK" | awk 'NF >= 3 { sub(/@.*/, "", $3); print $3 }' |
    sort -u >"$tmp/hook"
[ -s "$tmp/hook" ] || { echo "imports.sh: no symbols defined in $HOOK" >&2; exit 2; }
printf '%s\n' "$ALLOW" | awk 'NF { print $1 }' | sort -u >"$tmp/allow"

fail=0
check() { # what, file of undefined names
    sort -u "$2" | comm -12 - "$tmp/hook" | comm -23 - "$tmp/allow" >"$tmp/bad"
    if [ -s "$tmp/bad" ]; then
        echo "FAIL: $1 imports $(wc -l <"$tmp/bad") symbol(s) that libfern-hook interposes:"
        sed 's/^/  /' "$tmp/bad"
        echo "  (make the call raw: src/base/sys.h; a lock: plock; or allow it in $0 with a reason)"
        fail=1
    else
        echo "ok: $1 imports nothing libfern-hook interposes ($(wc -l <"$tmp/hook") hook symbols)"
    fi
}

"$NM" -D --undefined-only "$LIB" | awk '{ sub(/@.*/, "", $NF); print $NF }' >"$tmp/lib"
[ -s "$tmp/lib" ] || { echo "imports.sh: no undefined symbols in $LIB" >&2; exit 2; }
check "$(basename "$LIB")" "$tmp/lib"
if [ -n "$ARCHIVE" ]; then
    # A static link pulls the hook in whole: the archive's calls count too.
    "$NM" --undefined-only "$ARCHIVE" | awk 'NF == 2 && $1 == "U" { print $2 }' >"$tmp/ar"
    [ -s "$tmp/ar" ] || { echo "imports.sh: no undefined symbols in $ARCHIVE" >&2; exit 2; }
    check "$(basename "$ARCHIVE")" "$tmp/ar"
fi
exit $fail
