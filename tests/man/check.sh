#!/bin/sh
# SPDX-License-Identifier: MIT
# The reference is complete and readable:
#  1. every public function has a page in MANDIR: the names come from two
#     sources independent of the page generator, the fern_* functions that
#     libfern exports (nm -D) and the fern_* declarations of fern.h;
#  2. every page (fern.3 included) renders with `man -l` with no warning and
#     names its function;
#  3. the check itself fails when a page is missing (run on a copy of MANDIR
#     with one page removed).
#
#   tests/man/check.sh MANDIR LIBFERN_SO FERN_H
set -u
mandir=${1:?usage: $0 MANDIR LIBFERN_SO FERN_H}
lib=${2:?}
header=${3:?}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
command -v man >/dev/null || { echo "man is not installed (Debian: man-db)"; exit 1; }
command -v nm >/dev/null || { echo "nm is not installed (binutils)"; exit 1; }

# fern__* (two underscores) are libfern's private entry points for
# libfern-hook (src/hookapi.h, fern.h says so): no pages.
nm -D --defined-only "$lib" | awk '$2 == "T" && $3 ~ /^fern_[a-z0-9]/ { print $3 }' >"$work/exported"
# Declarations at the start of a line, outside comments: `type fern_name(`.
grep -E '^[A-Za-z_][A-Za-z0-9_ ]*[ *]fern_[a-z0-9_]+\(' "$header" |
    sed -E 's/^.*[ *](fern_[a-z0-9_]+)\(.*$/\1/' >"$work/declared"
sort -u "$work/exported" "$work/declared" >"$work/functions"
n=$(wc -l <"$work/functions")
[ "$n" -ge 50 ] || { echo "found only $n functions: the lists are broken"; exit 1; }

missing_pages() {   # missing_pages DIR: print the functions without a page in DIR
    while read -r f; do
        [ -f "$1/$f.3" ] || echo "$f"
    done <"$work/functions"
}

fail=0
missing=$(missing_pages "$mandir")
if [ -n "$missing" ]; then
    echo "functions without a man page:" $missing
    fail=1
fi

rendered=0
for page in "$mandir"/*.3; do
    name=$(basename "$page" .3)
    out=$(MANWIDTH=80 man --warnings -l "$page" 2>"$work/err")
    rc=$?
    if [ $rc -ne 0 ] || [ -s "$work/err" ]; then
        echo "$page: man -l failed (status $rc):"
        cat "$work/err"
        fail=1
    elif ! printf "%s\n" "$out" | grep -Eq "^ *$name +- "; then
        echo "$page: the rendered NAME section does not name $name"
        fail=1
    else
        rendered=$((rendered + 1))
    fi
done

# The check must notice a missing page.
mkdir "$work/copy"
cp "$mandir"/*.3 "$work/copy/"
victim=$(head -n 1 "$work/functions")
rm -f "$work/copy/$victim.3"
if [ "$(missing_pages "$work/copy")" != "$victim" ]; then
    echo "self-test: removing $victim.3 was not noticed"
    fail=1
fi

echo "man pages: $n functions, $rendered pages rendered without warnings"
exit $fail
