#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""hook-lock's green scenarios from two or more builds side by side.

Runs bench/hooks/hook_lock (cond, mutex, rwsem, plainprod, and on request
rwsempw, rwsem on a writer-preferring lock; 1 and 2 workers)
from each build in turn, interleaved run by run, so that the machine's load
falls on every build alike, and prints a Markdown table: per scenario,
workers and build, the median wall time and its ratio to the scenario's
ideal (the same ideals as hooks.py), the fastest and slowest run, the
ticker's lateness and the violations. For telling a regression from load:
compare builds measured in one session, never figures from two sessions.

usage: python3 bench/hooks/lock_ab.py [--runs 10] [--scenarios cond,rwsem,rwsempw]
                                      [--out FILE] NAME=BENCH_DIR[,VAR=VALUE...] ...

BENCH_DIR holds hook_lock (a build's bench/ directory); VAR=VALUE pairs set
environment variables for that build's runs (LD_LIBRARY_PATH, to try
another libfern-hook.so against one binary whose RUNPATH allows it).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hooks import LOCK_SCENARIOS  # noqa: E402  (the ideals)

# rwsem with a writer-preferring lock: the same ideal, not a target.
IDEALS = dict(LOCK_SCENARIOS, rwsempw=LOCK_SCENARIOS["rwsem"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--scenarios", default="cond,mutex,rwsem,plainprod")
    ap.add_argument("--out", help="also write the table to this file")
    ap.add_argument("builds", nargs="+", metavar="NAME=BENCH_DIR[,VAR=VALUE...]")
    a = ap.parse_args()
    builds = []
    for spec in a.builds:
        name, rest = spec.split("=", 1)
        parts = rest.split(",")
        env = dict(os.environ)
        for kv in parts[1:]:
            k, v = kv.split("=", 1)
            env[k] = v
        builds.append((name, parts[0], env))
    scen = a.scenarios.split(",")
    for sc in scen:
        if sc not in IDEALS:
            sys.exit("no such scenario: %s" % sc)
    res, loads = {}, []
    for _ in range(a.runs):
        loads.append(os.getloadavg()[0])
        for sc in scen:
            for w in ("1", "2"):
                for name, d, env in builds:
                    out = subprocess.run([os.path.join(d, "hook_lock"), sc, "green", w], capture_output=True,
                                         text=True, env=env, timeout=120)
                    if out.returncode:
                        sys.exit("%s %s %s: exit %d: %s" % (name, sc, w, out.returncode, out.stderr))
                    res.setdefault((sc, w, name), []).append(json.loads(out.stdout.strip().splitlines()[-1]))
    lines = ["%d interleaved runs per line on %d CPUs; load average at the start of each round: min %.1f, "
             "median %.1f, max %.1f." % (a.runs, os.cpu_count(), min(loads), statistics.median(loads), max(loads)),
             "", "| scenario | workers | build | wall median (x ideal) | fastest | slowest | ticker late median / max |"
             " violations |", "|---|---|---|---|---|---|---|---|"]
    for sc in scen:
        for w in ("1", "2"):
            for name, _, _ in builds:
                xs = res[(sc, w, name)]
                ws = [x["wall_s"] for x in xs]
                lt = [x["ticker_late_max_ms"] for x in xs]
                lines.append("| %s | %s | %s | %.1f ms (%.2fx) | %.1f ms | %.1f ms | %.1f / %.1f ms | %d |"
                             % (sc, w, name, 1e3 * statistics.median(ws),
                                statistics.median(ws) / IDEALS[sc], 1e3 * min(ws), 1e3 * max(ws),
                                statistics.median(lt), max(lt), sum(x["violations"] for x in xs)))
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
