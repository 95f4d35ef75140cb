#!/bin/sh
# SPDX-License-Identifier: MIT
# The reference is complete and readable:
#  1. every public function has a page in MANDIR: the names come from two
#     sources independent of the page generator, the fern_* functions that
#     libfern exports (nm -D) and the fern_* declarations of fern.h;
#  2. every page (fern.3 included) renders with `man -l` with no warning and
#     names its function;
#  3. every page's NAME line says what the call does (not its return values,
#     "Return 0; ...", nor a warning, "NOTE: ...", nor a bare call) and its
#     DESCRIPTION opens with text of its own, not a return-value list;
#  4. fern_config(3) and fern_attr(3) exist and name every field of their
#     structure (fields read from fern.h here, not by the generator);
#  5. the section 7 pages in MAN7DIR (fern-hook, fern-cxx) render, and
#     fern-hook(7) names every function libfern-hook exports (nm -D of
#     LIBFERN_HOOK_SO), fern-cxx(7) every public class of fern.hpp;
#  6. the check itself fails when a page is missing (run on a copy of MANDIR
#     with one page removed) and when a summary is a return-value line.
#
#   tests/man/check.sh MANDIR LIBFERN_SO FERN_H MAN7DIR LIBFERN_HOOK_SO FERN_HPP
set -u
mandir=${1:?usage: $0 MANDIR LIBFERN_SO FERN_H}
lib=${2:?}
header=${3:?}
man7=${4:?}
hooklib=${5:?}
hpp=${6:?}
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

# NAME line and first DESCRIPTION paragraph of a rendered page (text on
# stdin), one line each.
name_and_description() {
    awk '
        /^NAME/ { sec = "name"; next }
        /^DESCRIPTION/ { sec = "desc"; next }
        /^[A-Z]/ { sec = "" }
        sec == "name" && NF { sub(/^ +/, ""); name = name " " $0 }
        sec == "desc" && NF && !done { sub(/^ +/, ""); desc = desc " " $0; got = 1; next }
        sec == "desc" && !NF && got { done = 1 }
        END { print substr(name, 2); print substr(desc, 2) }'
}

# A summary or description that is not about what the call does.
not_a_description() {   # not_a_description TEXT
    printf "%s\n" "$1" | grep -Eq '^(Return|Returns|NOTE)\b|^fern_[a-z0-9_]+\([^)]*\)$|^ *$'
}

described() {   # described NAME < RENDERED: print NAME if its summary or description is missing
    name_and_description >"$work/nd"
    summ=$(head -n 1 "$work/nd" | sed 's/^[^ ]* *- *//')
    desc=$(sed -n 2p "$work/nd")
    if not_a_description "$summ" || not_a_description "$desc"; then
        echo "$1: summary \"$summ\", description \"$(echo "$desc" | cut -c1-60)\""
    fi
}

# Structures: every field in the page.
for st in fern_config fern_attr; do
    if [ ! -f "$mandir/$st.3" ]; then
        echo "no page $st.3"
        fail=1
        continue
    fi
    fields=$(awk -v st="$st" '$0 ~ "^typedef struct " st " \\{" { in_ = 1; next }
        in_ && /^}/ { exit }
        in_ && /^    [a-z_].*;/ { line = $0; sub(/;.*/, "", line); n = split(line, w, /[ *]+/); print w[n] }' "$header")
    [ -n "$fields" ] || { echo "no fields found for $st in $header"; fail=1; }
    text=$(MANWIDTH=200 man -l "$mandir/$st.3" 2>/dev/null)
    for f in $fields; do
        printf "%s\n" "$text" | grep -Eq "^ +[a-z_ ]+[ *]$f\$" ||
            { echo "$st.3 does not describe field $f"; fail=1; }
    done
done

rendered=0
for page in "$mandir"/*.3 "$man7"/*.7; do
    name=$(basename "$page"); name=${name%.[37]}
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
    case $page in
    *.3)
        bad=$(printf "%s\n" "$out" | described "$name")
        if [ -n "$bad" ]; then
            echo "a page that does not say what the call does: $bad"
            fail=1
        fi ;;
    esac
done

# Section 7: fern-hook names every function it interposes, fern-cxx every
# public class template or class of fern.hpp and of the parts it includes
# (include/fern/cxx/*.hpp), outside fern::detail.
for p in fern-hook fern-cxx; do
    [ -f "$man7/$p.7" ] || { echo "no page $p.7"; fail=1; }
done
hooktext=$(MANWIDTH=200 man -l "$man7/fern-hook.7" 2>/dev/null)
nhook=0
for f in $(nm -D --defined-only "$hooklib" | awk '$2 == "T" { print $3 }'); do
    nhook=$((nhook + 1))
    printf "%s\n" "$hooktext" | grep -q "\b$f\b" || { echo "fern-hook.7 does not name $f"; fail=1; }
done
[ "$nhook" -ge 40 ] || { echo "libfern-hook exports only $nhook functions: the list is broken"; fail=1; }
cxxtext=$(MANWIDTH=200 man -l "$man7/fern-cxx.7" 2>/dev/null)
classes=$(awk '/^namespace detail/ { d = 1 } /^} \/\/ namespace detail/ { d = 0; next }
    !d && match($0, /^(template <.*> )?(class|struct) [a-z_]+ \{/) {
        s = substr($0, RSTART, RLENGTH); sub(/ \{$/, "", s); n = split(s, w, " "); print w[n] }' \
    "$hpp" "${hpp%/*}"/cxx/*.hpp | sort -u)
ncls=0
for c in $classes; do
    ncls=$((ncls + 1))
    printf "%s\n" "$cxxtext" | grep -q "fern::$c\b" || { echo "fern-cxx.7 does not name fern::$c"; fail=1; }
done
[ "$ncls" -ge 10 ] || { echo "found only $ncls classes in $hpp: the list is broken"; fail=1; }

# The check must notice a missing page.
mkdir "$work/copy"
cp "$mandir"/*.3 "$work/copy/"
victim=$(head -n 1 "$work/functions")
rm -f "$work/copy/$victim.3"
if [ "$(missing_pages "$work/copy")" != "$victim" ]; then
    echo "self-test: removing $victim.3 was not noticed"
    fail=1
fi

# ... and a summary that is a return-value line (fern_mutex_unlock's page
# as the generator used to make it).
sed -i 's/^fern_mutex_unlock \\- .*/fern_mutex_unlock \\- Return 0/' "$work/copy/fern_mutex_unlock.3"
if [ "$(MANWIDTH=80 man -l "$work/copy/fern_mutex_unlock.3" 2>/dev/null | described x)" = "" ]; then
    echo "self-test: a 'Return 0' summary was not noticed"
    fail=1
fi

echo "man pages: $n functions, $rendered pages rendered without warnings, $nhook hooked functions, $ncls C++ classes"
exit $fail
