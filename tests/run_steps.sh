#!/bin/sh
# SPDX-License-Identifier: MIT
# Runs the named steps of `make test` one after the other and ends with one
# line `N passed, N failed` (`, N skipped` when something did not run), alone
# on its line, for people and CI to read. Exit status 0 only when nothing
# failed.
#
#   tests/run_steps.sh LOGDIR STEP...
#
# A step NAME runs `make test-NAME` (override the command with $STEP_CMD, in
# which the word {} is replaced by the step name); its whole output goes to
# LOGDIR/NAME.log and one line per step is printed. How a step is counted:
#   - if its output has ctest's summary ("... N tests failed out of M"), every
#     ctest test counts: passed = M - failed - did not run (ctest counts tests
#     that did not run, skipped or disabled, as passed; here they are skipped);
#   - else if its output has a line `N passed, N failed[, N skipped]`, those
#     counts (the install check reports its sub-checks so);
#   - else the step counts as one test: failed if it exits non-zero, else
#     skipped if it printed a line `...skipped: REASON` (it could not run, for
#     the reason given: no clang for the fuzz step), else passed.
# A step that exits non-zero with no failure counted is one more failure, so
# a crash after a good summary still fails. Skipped steps and failed tests
# are named just above the final line, after the output of the failed
# ctest tests (at most 40 lines each).
set -u
logdir=${1:?usage: $0 LOGDIR STEP...}
shift
mkdir -p "$logdir"
cmd_template=${STEP_CMD:-"${MAKE:-make} --no-print-directory test-{}"}
total_pass=0 total_fail=0 total_skip=0
notes=""
details=$(mktemp) || exit 1
trap 'rm -f "$details"' EXIT

note() { notes="$notes$1
"; }

# The tests ctest lists under the heading $1 in $log, comma-separated.
ctest_list() {
    awk -v head="$1" '$0 == head { on = 1; next }
        on && /^\t/ { sub(/^\t+ *[0-9]+ - /, ""); printf "%s%s", sep, $0; sep = ", "; next }
        on { on = 0 }' "$log"
}

for step in "$@"; do
    log="$logdir/$step.log"
    cmd=$(printf '%s' "$cmd_template" | sed "s/{}/$step/g")
    start=$(date +%s)
    sh -c "$cmd" >"$log" 2>&1 </dev/null
    rc=$?
    secs=$(($(date +%s) - start))
    # ctest: take the last summary in the log (a step runs ctest once).
    counts=$(awk '
        / tests failed out of [0-9]+$/ { failed = $(NF-5); total = $NF; seen = 1; notrun = 0; inskip = 0 }
        /^The following tests did not run:/ { inskip = 1; next }
        inskip && /^\t/ { notrun++; next }
        inskip { inskip = 0 }
        END { if (seen) print total - failed - notrun, failed, notrun }' "$log")
    if [ -z "$counts" ]; then
        counts=$(grep -E '^(.*: )?[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$' "$log" | tail -n 1 |
                 sed -E 's/^(.*: )?([0-9]+) passed, ([0-9]+) failed(, ([0-9]+) skipped)?$/\2 \3 \5/')
    fi
    if [ -n "$counts" ]; then
        set -- $counts 0
        p=$1 f=$2 s=$3
        shift 3
    elif [ $rc -ne 0 ]; then
        p=0 f=1 s=0
    elif skip=$(grep -E '(^|: )skipped: ' "$log" | tail -n 1) && [ -n "$skip" ]; then
        p=0 f=0 s=1
        note "skipped: $step: ${skip#*skipped: }"
    else
        p=1 f=0 s=0
    fi
    why=""
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1
        why="exited with status $rc"
    fi
    if [ -n "$counts" ] && [ "$s" -gt 0 ]; then
        note "skipped: $step: $(ctest_list 'The following tests did not run:') ($log)"
    fi
    if [ "$f" -gt 0 ]; then
        failed_names=$(ctest_list 'The following tests FAILED:')
        [ -n "$failed_names" ] || failed_names=${why:-"see the end of $log"}
        note "failed: $step: $failed_names ($log)"
    fi
    printf '%-10s %5d passed, %d failed, %d skipped  %4ds\n' "$step" "$p" "$f" "$s" "$secs"
    if [ "$f" -gt 0 ]; then
        # ctest prints a failed test's output right after its result line
        # (--output-on-failure): kept for the end of the output, so a CI log
        # that shows only its last lines still says why.
        awk -v step="$step" '
             /^ *[0-9]+\/[0-9]+ Test +#[0-9]+: .*\*\*\*/ { on = 1; n = 0; print "---- " step ": " $0; next }
             /^ *[0-9]+\/[0-9]+ Test +#/ || /^ *Start +[0-9]+: / || / tests failed out of / { on = 0 }
             on && n < 40 && !/^ *$/ && !/^\[ *(RUN|OK) / && !/^\[(==|--)/ && !/^Running main/ && !/^ok / { print; n++ }' "$log" >>"$details"
    fi
    total_pass=$((total_pass + p))
    total_fail=$((total_fail + f))
    total_skip=$((total_skip + s))
done

tail -n 120 "$details"
printf '%s' "$notes"
if [ $total_skip -gt 0 ]; then
    echo "$total_pass passed, $total_fail failed, $total_skip skipped"
else
    echo "$total_pass passed, $total_fail failed"
fi
[ $total_fail -eq 0 ]
