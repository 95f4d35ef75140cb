#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The tracer's output, read with nothing but Python's json module.

    check_trace.py SCENARIO FERN_TRACE_TOOL [sanitized]

Runs tests/debug/trace_scenario.c twice, traced through $FERN_TRACE and
through fern_trace_start / fern_trace_stop, and checks each file:
  - it parses as JSON (a list of trace events);
  - every worker has a named track ("fern worker N": both workers);
  - every named thread of the scenario (ping, pong, sleeper, spinner-1,
    spinner-2) has slices, and each slice says why it ended;
  - every wake-up has its flow: each run of ping, pong and sleeper that
    follows a park begins with a flow's end ("f"), whose start ("s", same
    id) comes earlier on some track; and each "f" has its "s";
  - a spinner was preempted: a "preempted" instant event and a spinner slice
    that ended "preempted" (a sanitizer build, "sanitized", preempts only at
    fern calls and, on a loaded machine, sometimes not in time: there the
    two checks apply only if a preemption happened);
  - the sleeper parks on "sleep", ping and pong on channels;
  - slices on one track nest: sorted by start, each ends before the slice
    that encloses it ends (no partial overlap);
  - the thread counters were sampled: "running", "runnable", "parked" and
    "live", each with its "threads" value, all four at every sample, parked
    being live less running and runnable (0 where that is negative), and
    a sample taken while the scenario's threads ran (if one was: samples
    are 10 to 100 ms apart, at the writer's pace) shows main parked in its
    joins while a thread it spawned lives;
  - a per-thread track only where asked for: with FERN_TRACE_THREADS=1 (a
    third run) every named thread has a named track of its own, in the
    process "fern green threads", holding exactly its runs (the same start,
    length and end reason as its slices on the workers' tracks), and none
    without.
Then runs the summary tool (bin/fern-trace) on the first file and checks
that it names the scenario's threads and prints latency percentiles.
"""
import collections
import json
import os
import subprocess
import sys
import tempfile

NAMES = ["ping", "pong", "sleeper", "spinner-1", "spinner-2"]


def fail(msg):
    print("check_trace: FAIL: " + msg)
    sys.exit(1)


SANITIZED = False


def check_counters(path, ev):
    kinds = ("running", "runnable", "parked", "live")
    samples = collections.defaultdict(dict)
    for e in ev:
        if e.get("ph") != "C":
            continue
        if e["name"] not in kinds or set(e.get("args", {})) != {"threads"}:
            fail("%s: an unexpected counter: %r" % (path, e))
        samples[e["ts"]][e["name"]] = e["args"]["threads"]
    if not samples:
        fail("%s: no thread counters" % path)
    runs = [(e["ts"], e["ts"] + e["dur"]) for e in ev
            if e.get("ph") == "X" and e.get("cat") == "run" and e["name"] in NAMES]
    lo, hi = min(r[0] for r in runs), max(r[1] for r in runs)
    during = 0
    busy = 0
    for ts, v in samples.items():
        during += lo <= ts <= hi
        if set(v) != set(kinds):
            fail("%s: the counters sampled at %s are %s, not all four" % (path, ts, sorted(v)))
        if v["parked"] != max(0, v["live"] - v["running"] - v["runnable"]):
            fail("%s: counters at %s do not add up: %r" % (path, ts, v))
        busy += v["live"] >= 2 and v["parked"] >= 1  # main, parked in its joins
    # The writer samples when it drains, 10 to 100 ms apart: a sanitizer
    # build's slow start may leave no sample inside the scenario's 100 ms.
    if during and not busy:
        fail("%s: no counter sample shows the scenario's threads: %r" % (path, samples))
    if not during:
        print("check_trace: note: no counter sample fell inside the scenario's runs")


def check_thread_tracks(path, ev, wanted):
    procs = {e["pid"]: e["args"]["name"] for e in ev
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    tp = [p for p, n in procs.items() if n.startswith("fern green threads")]
    on_threads = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "thread"]
    if not wanted:
        if tp or on_threads:
            fail("%s: thread tracks without FERN_TRACE_THREADS" % path)
        return
    if len(tp) != 1:
        fail("%s: %d processes of thread tracks: %r" % (path, len(tp), procs))
    names = {e["tid"]: e["args"]["name"] for e in ev if e.get("ph") == "M"
             and e.get("pid") == tp[0] and e.get("name") == "thread_name"}
    runs = collections.defaultdict(list)
    for e in ev:
        if e.get("ph") == "X" and e.get("cat") == "run":
            runs[e["args"]["thread"]].append((e["ts"], e["dur"], e["args"]["end"]))
    mine = collections.defaultdict(list)
    for e in on_threads:
        if e["pid"] != tp[0] or e["tid"] not in names:
            fail("%s: a thread-track slice on an unnamed track: %r" % (path, e))
        if not e["name"].startswith("fern worker"):
            fail("%s: a thread-track slice not named after its worker: %r" % (path, e))
        mine[e["tid"]].append((e["ts"], e["dur"], e["args"]["end"]))
    for n in NAMES:
        ids = [t for t, m in names.items() if m == n]
        if len(ids) != 1:
            fail("%s: thread %s has %d tracks of its own" % (path, n, len(ids)))
        if sorted(mine[ids[0]]) != sorted(runs[ids[0]]):
            fail("%s: %s's own track has %d slices, its runs on the workers %d"
                 % (path, n, len(mine[ids[0]]), len(runs[ids[0]])))


def check(path, threads=False):
    with open(path) as f:
        ev = json.load(f)
    if not isinstance(ev, list) or not ev:
        fail(path + ": not a list of events")
    tracks = {e["tid"]: e["args"]["name"] for e in ev
              if e.get("ph") == "M" and e.get("name") == "thread_name"}
    workers = {t for t, n in tracks.items() if n.startswith("fern worker")}
    if len(workers) < 2:
        fail("%s: %d named worker tracks, expected 2: %r" % (path, len(workers), tracks))
    slices = [e for e in ev if e.get("ph") == "X"]
    for s in slices:
        if s["tid"] in workers or s.get("cat") == "run":
            if s["tid"] not in tracks:
                fail("slice on an unnamed track: %r" % s)
    by_name = collections.defaultdict(list)
    for s in slices:
        if s.get("cat") == "run":
            by_name[s["name"]].append(s)
            if "end" not in s.get("args", {}):
                fail("a run slice without its end reason: %r" % s)
    for n in NAMES:
        if not by_name[n]:
            fail("%s: no slice for thread %s (slices: %s)" % (path, n, sorted(by_name)))
    starts = {}
    for e in ev:
        if e.get("ph") == "s":
            starts[e["id"]] = e
    ends = [e for e in ev if e.get("ph") == "f"]
    for e in ends:
        s = starts.get(e["id"])
        if not s:
            fail("flow end without its start: %r" % e)
        if s["ts"] > e["ts"]:
            fail("flow ends before it starts: %r %r" % (s, e))
    end_at = collections.defaultdict(set)
    for e in ends:
        end_at[e["tid"]].add(e["ts"])
    wakeups = 0
    for n in ["ping", "pong", "sleeper"]:
        runs = sorted(by_name[n], key=lambda s: s["ts"])
        for prev, cur in zip(runs, runs[1:]):
            if prev["args"]["end"] != "park":
                continue
            wakeups += 1
            if cur["ts"] not in end_at[cur["tid"]]:
                fail("%s's run at %s follows a park but no flow ends there" % (n, cur["ts"]))
    if wakeups < 600:
        fail("%d wake-ups of ping, pong and sleeper, expected >= 600" % wakeups)
    preempted = any(e.get("ph") == "i" and e["name"] == "preempted" for e in ev)
    if not preempted and not SANITIZED:
        fail("no preemption event")
    if preempted and not any(s["args"]["end"] == "preempted"
                             for n in ("spinner-1", "spinner-2") for s in by_name[n]):
        fail("a preemption event but no spinner slice ended preempted")
    if not preempted:
        print("check_trace: note: no preemption in this sanitizer run; those checks skipped")
    if not any(s["args"]["end"] == "park" and s["args"].get("on") == "sleep" for s in by_name["sleeper"]):
        fail("the sleeper never parked on sleep")
    for n in ("ping", "pong"):
        if not any(s["args"].get("on", "").startswith("chan") for s in by_name[n]):
            fail("%s never parked on a channel" % n)
    per_track = collections.defaultdict(list)
    for s in slices:
        per_track[(s["pid"], s["tid"])].append(s)
    nested = 0
    for tid, ss in per_track.items():
        ss.sort(key=lambda s: (s["ts"], -s["dur"]))
        stack = []
        for s in ss:
            b, e = s["ts"], s["ts"] + s["dur"]
            while stack and stack[-1] <= b + 1e-9:
                stack.pop()
            if stack and e > stack[-1] + 1e-6:
                fail("slices overlap on track %s: one ends at %s, %r ends at %s" % (tid, stack[-1], s, e))
            stack.append(e)
            nested += 1
    check_counters(path, ev)
    check_thread_tracks(path, ev, threads)
    print("check_trace: %s: %d events, %d worker tracks, %d slices, %d flows, %d wake-ups checked"
          % (path, len(ev), len(workers), nested, len(ends), wakeups))


def main():
    global SANITIZED
    prog, tool = sys.argv[1], sys.argv[2]
    SANITIZED = sys.argv[3:4] == ["sanitized"]
    with tempfile.TemporaryDirectory() as d:
        env_path = os.path.join(d, "env.json")
        env = dict(os.environ, FERN_TRACE=env_path)
        env.pop("FERN_TRACE_THREADS", None)
        r = subprocess.run([prog], env=env, timeout=120)
        if r.returncode:
            fail("the scenario under FERN_TRACE exited %d" % r.returncode)
        check(env_path)
        api_path = os.path.join(d, "api.json")
        env = dict(os.environ)
        env.pop("FERN_TRACE", None)
        env.pop("FERN_TRACE_THREADS", None)
        r = subprocess.run([prog, api_path], env=env, timeout=120)
        if r.returncode:
            fail("the scenario with fern_trace_start exited %d" % r.returncode)
        check(api_path)
        thr_path = os.path.join(d, "threads.json")
        env = dict(os.environ, FERN_TRACE=thr_path, FERN_TRACE_THREADS="1")
        r = subprocess.run([prog], env=env, timeout=120)
        if r.returncode:
            fail("the scenario under FERN_TRACE_THREADS=1 exited %d" % r.returncode)
        check(thr_path, threads=True)
        out = subprocess.run([sys.executable, tool, env_path], capture_output=True, text=True,
                             timeout=120)
        if out.returncode:
            fail("fern-trace exited %d: %s" % (out.returncode, out.stderr))
        for n in NAMES + ["p50", "p99", "fern worker 0"]:
            if n not in out.stdout:
                fail("fern-trace's summary lacks %r:\n%s" % (n, out.stdout))
        # The timeline: a PNG where matplotlib is installed, else a clear
        # refusal (exit 2) naming the package.
        png = os.path.join(d, "t.png")
        out = subprocess.run([sys.executable, tool, env_path, "--png", png], capture_output=True,
                             text=True, timeout=300)
        try:
            import matplotlib  # noqa: F401
            if out.returncode or open(png, "rb").read(8) != b"\x89PNG\r\n\x1a\n":
                fail("fern-trace --png wrote no PNG: %s" % out.stderr)
            print("check_trace: fern-trace --png OK")
        except ImportError:
            if out.returncode != 2 or "matplotlib" not in out.stderr:
                fail("fern-trace --png without matplotlib: exit %d, %r" % (out.returncode, out.stderr))
            print("check_trace: fern-trace --png refuses without matplotlib, as it should")
        print("check_trace: fern-trace summary OK")


if __name__ == "__main__":
    main()
