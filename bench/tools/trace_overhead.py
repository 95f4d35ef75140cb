#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""What tracing costs the in-process echo benchmark (docs/debugging.md,
"What it costs"): interleaved pairs of untraced and traced runs of
examples/echo, each run's round trips per wall-clock second and per CPU
second (user + system of the whole process, from the kernel's accounting
of the child). On a shared machine both rates move with the other load,
so each traced run is compared with the untraced run beside it and the
median of the pairs' ratios is reported.

    trace_overhead.py ECHO [--pairs 8] [--conns 1000] [--duration 2]
                      [--trace FILE] [--lib DIR ...]

--lib DIR runs ECHO with LD_LIBRARY_PATH=DIR (another libfern build); given
more than once, each pair is run with each library in turn.
"""
import argparse
import os
import re
import resource
import statistics
import subprocess
import sys


def run(cmd, env):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    m = re.search(r"(\d+) round trips in ([\d.]+) s", out)
    if not m:
        sys.exit("trace_overhead: unexpected output from echo:\n" + out)
    trips, secs = int(m.group(1)), float(m.group(2))
    return trips / secs, trips / cpu, cpu


def writer_cpu(path):
    """The writer's CPU seconds, from the trace's last record."""
    with open(path, "rb") as f:
        f.seek(max(0, os.path.getsize(path) - 400))
        m = re.search(rb'"writer_cpu_us":(\d+)', f.read())
    return int(m.group(1)) / 1e6 if m else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("echo")
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--conns", type=int, default=1000)
    ap.add_argument("--duration", type=float, default=2)
    ap.add_argument("--trace", default="/tmp/trace_overhead.json")
    ap.add_argument("--lib", action="append",
                    help="run with LD_LIBRARY_PATH=DIR; repeated: each pair is run with each "
                         "in turn, so builds are compared under the same load")
    a = ap.parse_args()
    libs = a.lib or [None]
    base = [a.echo, "--conns", str(a.conns), "--duration", str(a.duration)]
    res = {lib: ([], [], []) for lib in libs}
    for i in range(a.pairs):
        for lib in libs:
            env = dict(os.environ)
            if lib:
                env["LD_LIBRARY_PATH"] = lib
            wall, cpu, share = res[lib]
            w0, c0, _ = run(base, env)
            w1, c1, t1 = run(base + ["--trace", a.trace], env)
            wall.append(w1 / w0)
            cpu.append(c1 / c0)
            share.append(writer_cpu(a.trace) / t1)
            print(f"pair {i + 1}{' ' + lib if lib else ''}: untraced {w0:7.0f}/s wall "
                  f"{c0:7.0f}/CPU s   traced {w1:7.0f}/s wall {c1:7.0f}/CPU s   ratio wall "
                  f"{w1 / w0:.3f} CPU {c1 / c0:.3f}   writer {100 * share[-1]:.2f}% of the CPU",
                  flush=True)
    for lib in libs:
        wall, cpu, share = res[lib]
        print(f"{lib + ': ' if lib else ''}median traced/untraced: per CPU second "
              f"{statistics.median(cpu):.3f}, per wall-clock second {statistics.median(wall):.3f}; "
              f"the writer's share of the traced process's CPU: median "
              f"{100 * statistics.median(share):.2f}% ({a.pairs} pairs)")
    os.unlink(a.trace)


if __name__ == "__main__":
    main()
