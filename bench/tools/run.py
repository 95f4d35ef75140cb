#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""fern benchmark driver (Python standard library only).

Builds the Go and Java peers into build/bench/, runs every scenario for every
runtime interleaved (fern pthread go java boost, fern pthread go java boost,
...), and writes bench/results/latest.json and latest.md (plus PNG plots when
matplotlib is importable). The C and C++ programs (fern_*, pthread_*, boost_*)
come from the CMake build (build/release/bench, `make bench` builds it first).

Each program prints lines `scenario runtime metric value unit`. For every
(scenario, runtime, metric) we keep every run's value and report the median,
min and max. Ratios are peer / fern for lower-is-better metrics and
fern / peer for higher-is-better ones: above 1 means fern is better.

    python3 bench/tools/run.py              # the full run, >= 5 runs each
    python3 bench/tools/run.py --quick      # smoke pass: small sizes, 1 run,
                                            # writes results/quick.{json,md}
    python3 bench/tools/run.py --only yield # one scenario, merged into latest
"""

import argparse
import datetime
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "common"))
from benchproc import first_line, sh  # noqa: E402

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # bench/
ROOT = os.path.dirname(HERE)
JAVA_HOME = "/usr/lib/jvm/temurin-25-jdk-amd64"
JAVA = os.path.join(JAVA_HOME, "bin", "java")
JAVAC = os.path.join(JAVA_HOME, "bin", "javac")
RUNTIMES = ["fern", "pthread", "go", "java", "boost"]

# Per scenario: sizes (full, quick) per runtime, or a reason it is skipped;
# a per-run timeout in seconds; the headline metrics with their orientation.
SCENARIOS = {
    "yield": {
        "title": "yield: two threads alternate by yielding on one worker",
        "timeout": 60,
        "sizes": {"fern": (1000000, 100000), "pthread": (500000, 50000),
                  "go": (1000000, 100000), "java": (1000000, 100000),
                  "boost": (1000000, 100000)},
        "headline": [("ns_per_switch", "lower")],
        "notes": [
            "Size = yields per thread (pthread: 500,000 per thread; others 1,000,000).",
            "fern: fern_init(workers=1), two green threads calling fern_yield().",
            "pthread: sched_yield(2), both threads pinned to CPU 0.",
            "go: runtime.Gosched(), GOMAXPROCS=1. java: Thread.yield() on virtual threads, "
            "-Djdk.virtualThreadScheduler.parallelism=1 -Djdk.virtualThreadScheduler.maxPoolSize=1, "
            "3 warm-up rounds first. boost: boost::this_fiber::yield(), two fibers, one thread.",
            "switch_pct = share of yield calls after which the other thread ran (100% = strict alternation).",
        ],
    },
    "spawn": {
        "title": "spawn: spawn + join trivial threads in batches of 1000",
        "timeout": 90,
        "sizes": {"fern": (1000000, 100000), "pthread": (20000, 2000),
                  "go": (1000000, 100000), "java": (1000000, 100000),
                  "boost": (1000000, 100000)},
        "headline": [("ns_per_thread", "lower")],
        "notes": [
            "1,000,000 threads per run; pthread only 20,000 (pthread_create + join), reported per thread.",
            "fern: fern_spawn + fern_join from a green thread, default workers (one per CPU). "
            "go: go + sync.WaitGroup. java: Thread.ofVirtual().start + join, after a 100,000-thread warm-up. "
            "boost: fiber + join, default stack allocator (fixedsize_stack, 128 KiB malloc).",
        ],
    },
    "million": {
        "title": "million: threads parked on one condition variable, then wake all",
        "timeout": 150,
        "prewarm_gib": 6,
        "sizes": {"fern": (1000000, 100000), "pthread": (10000, 2000),
                  "go": (1000000, 100000), "java": (1000000, 100000),
                  "boost": (1000000, 100000)},
        "headline": [("spawn_park_s", "lower"), ("spawn_park_us_per_thread", "lower"),
                     ("bytes_per_thread", "lower"), ("wake_all_s", "lower"),
                     ("wake_all_us_per_thread", "lower")],
        "notes": [
            "1,000,000 threads; pthread only 10,000 (ratios on seconds are then n/a; the per-thread rows compare).",
            "Every runtime uses a mutex + condition variable: fern_mutex/fern_cond, sync.Mutex/sync.Cond, "
            "ReentrantLock/Condition, boost::fibers::mutex/condition_variable, pthread_mutex/cond.",
            "bytes_per_thread = growth of (VmRSS + VmPTE) from before the first spawn to all parked, / N. "
            "pthread: the kernel's own per-thread memory (kernel stack, task_struct) is not in VmRSS, so its figure is a lower bound. "
            "java: includes the Java heap the JVM committed meanwhile.",
            "fern: default stack size (128 KiB reserved), detached threads, default workers. "
            "boost: 16 KiB fixedsize_stack (the default 128 KiB is a malloc/mmap per fiber). "
            "pthread: glibc default stacks (8 MiB reserved).",
            "wake_all = broadcast until the last thread has re-acquired the mutex and finished.",
            "Before every run (every runtime alike) the driver writes and frees 6 GiB. This machine is a VM "
            "whose host takes back memory the guest has freed: the first write to such a page costs "
            "~11 us here against ~1.3 us for a page the host still backs (measured), so without this a "
            "run's spawn time depended on what ran before it (the same fern binary: 1.3 s or 3.2 s).",
        ],
    },
    "think": {
        "title": "think: threads that each touch 900 KiB of their own stack and return",
        "timeout": 150,
        "sizes": {"fern": (1000000, 50000), "pthread": (10000, 1000),
                  "go": (1000000, 50000), "boost": (10000, 1000),
                  "java": "skipped: Java cannot place a 900 KiB block on a thread's stack; recursion depth "
                          "would stand in, but frame sizes depend on the JIT and a virtual thread runs on its "
                          "carrier's stack while mounted (frames are copied to the heap only when it parks), "
                          "so it would not measure the same thing."},
        "headline": [("us_per_thread", "lower"), ("ratio_to_baseline", "lower"),
                     ("peak_rss_mib", "lower")],
        "notes": [
            "Each thread writes one byte per 4 KiB page over 900 KiB of its stack (top down), then returns; "
            "windows of 1000 (spawn 1000, join 1000). Baseline = the same number of plain calls in the same process, "
            "spread over as many kernel threads as the runtime uses CPUs (one per CPU for fern, pthread and Go; one for "
            "boost, whose fibers share one thread), so both sides use the same CPUs; "
            "ratio_to_baseline = threads time / baseline time.",
            "fern: attr.stack_size = 1 MiB, default workers (one per CPU). "
            "go: an assembly function with a 900 KiB frame (the goroutine stack grows to 1 MiB), default GOMAXPROCS. "
            "boost: fixedsize_stack(1 MiB), 10,000 fibers (glibc returns each freed window to the kernel, so every fiber "
            "faults its pages in; 1,000,000 would take ~10 minutes). pthread: 1 MiB stacks, 10,000 threads.",
            "peak_rss_mib = VmHWM of the process (includes the baseline phase and the runtime itself).",
        ],
    },
    "deepstack": {
        "title": "deepstack: a thread using 256 KiB of stack, fresh stack vs pooled stack",
        "timeout": 60,
        "sizes": {"fern": (1000, 200), "pthread": (1000, 200), "go": (1000, 200),
                  "boost": (1000, 200),
                  "java": "skipped: not in this round's peer list (a virtual thread has no stack of its own "
                          "while mounted, so there is no fresh-vs-pooled stack to compare)."},
        "headline": [("fresh_us", "lower"), ("pooled_us", "lower")],
        "notes": [
            "One CPU for everyone (fern workers=1, GOMAXPROCS=1, pthread process pinned to CPU 0, boost one thread).",
            "fresh: 1000 threads alive at once, each touches 256 KiB of stack then waits on a condvar, so each needs a new stack; "
            "pooled: then 1000 sequential spawn+join, each can reuse a freed stack. us per thread.",
            "fern: attr.stack_size = 512 KiB. pthread: 512 KiB stacks (glibc's stack cache reuses the stack but "
            "MADV_DONTNEEDs it at exit). go: goroutine stack grows to 512 KiB by copying (assembly frame of 256 KiB). "
            "boost: fixedsize_stack(512 KiB) via malloc.",
        ],
    },
    "migrate": {
        "title": "migrate: two clusters x k workers, threads migrate back and forth",
        "timeout": 60,
        "sizes": {"fern": (10000, 2000), "pthread": (10000, 2000), "go": (10000, 2000),
                  "java": "skipped: no clusters/schedulers to migrate between (not emulated).",
                  "boost": "skipped: no clusters/schedulers to migrate between (not emulated)."},
        "headline": [("migrations_per_s_k1", "higher"), ("migrations_per_s_k2", "higher")],
        "notes": [
            "10,000 threads, each does fern_migrate(B), fern_migrate(A) 10 times = 20 migrations; "
            "clusters A and B have k workers each (k = 1, 2); timed from a start gate to the last join: before it every thread has started on A (its stack bound and touched) and yields there, as the emulations create their items before their clocks start (a thread's first run is spawn's cost: spawn, million).",
            "pthread and go are EMULATIONS, not migrations of a running thread: two pools of k workers "
            "(kernel threads / goroutines), a work item handed to the other pool's queue (mutex+condvar FIFO / "
            "buffered channel) 20 times. They measure a queue hand-off, which is cheaper than moving a stack "
            "between kernel threads.",
        ],
    },
}

SCENARIOS.update({
    "preempt": {
        "title": "preempt: a 1 ms sleeper beside spinners, CPU shares and loop cost, 1 worker (fern only)",
        "timeout": 120,
        "sizes": {"fern": (1000, 500),
                  "pthread": "skipped: the kernel preempts threads; this measures fern's preemption",
                  "go": "skipped: no program", "java": "skipped: no program",
                  "boost": "skipped: Boost.Fiber has no preemption"},
        "headline": [("late_app_ms", "lower"), ("late_libc_ms", "lower"), ("late_syscall_ms", "lower"),
                     ("late_stuck2_ms", "lower"), ("share_min_pct", "higher"), ("loop_alone_loss_pct", "lower"),
                     ("loop_loss_pct", "lower")],
        "notes": [
            "Default configuration (10 ms slice), fern_init(workers=1). Size = ms each lateness phase lasts.",
            "late_*_ms: worst lateness of a green thread sleeping 1 ms at a time beside two threads spinning in "
            "arithmetic (target <= 25), two threads spinning in memchr over 1 MiB (<= 40), one thread blocked "
            "400 ms in a raw syscall(SYS_read) on a pipe (<= 40). late_stuck2_ms: two workers, preemption off, eight "
            "1 ms sleepers, one thread blocked 1 s in a raw read(2) (<= 40; issue 17).",
            "share_*_pct: four spinners for 1.5 s of the worker's CPU time, each one's share of the iterations "
            "(target 20-30%). slice_*_ms: the CPU time each ran between switches there (the slice granted). "
            "late_libc_deferred: preemptions that found a spinner inside memchr.",
            "loop_alone_loss_pct: one fixed CPU-bound loop alone on one worker, process CPU time (workers, "
            "monitor, signal handling) with preemption on vs off, best of 3 interleaved pairs (target <= 1%): "
            "nothing to preempt, so this is what the ticks and the monitor cost. loop_loss_pct: two such loops "
            "on one worker, on vs off; not the same schedule (on: 10 ms slices on one kernel thread; off: the "
            "monitor starts a spare after two slices and the loops run on two).",
        ],
    },
    "pingpong": {
        "title": "pingpong: unbuffered channel round trip between two threads, 1 and 2 workers",
        "timeout": 60,
        # Two parts per run: the program is started once with W=1 and once
        # with W=2 (argv: N W); sizes are per part (w1, w2).
        "parts": [["1"], ["2"]],
        "java_parallelism": "part",
        "sizes": {"fern": [(1000000, 100000), (1000000, 100000)],
                  "pthread": [(20000, 5000), (20000, 5000)],
                  "go": [(1000000, 100000), (1000000, 100000)],
                  "java": [(300000, 50000), (300000, 50000)],
                  "boost": [(1000000, 100000), (50000, 10000)]},
        "headline": [("ns_per_roundtrip_w1", "lower"), ("ns_per_roundtrip_w2", "lower")],
        "notes": [
            "A round trip = A sends i on `ping`, B receives it and sends i+1 on `pong`, A receives and checks it "
            "(2 sends + 2 receives, each a rendezvous). Timed by A over N round trips after a warm-up; "
            "w1 and w2 are separate processes. N: fern, go, boost w1 1,000,000; boost w2 50,000; java 300,000; "
            "pthread 20,000 (the metric is per round trip).",
            "fern: two fern_chan of capacity 0; w1 = fern_init(workers=1), w2 = the same runtime plus a "
            "fern_cluster_create(2) on which both threads are spawned (steals_w2 / worker_sleeps_w2 = fern_stats "
            "deltas over the measured round: how often the pair was actually split over the two workers).",
            "pthread: two one-slot rendezvous (pthread_mutex + pthread_cond; the sender waits until the value is "
            "taken); w1 = process pinned to one CPU, w2 = pinned to two CPUs.",
            "go: unbuffered chan int, GOMAXPROCS=W. java: SynchronousQueue<Integer> between two virtual threads, "
            "-Djdk.virtualThreadScheduler.parallelism=W -Djdk.virtualThreadScheduler.maxPoolSize=W, 3 warm-up rounds. "
            "boost: boost::fibers::unbuffered_channel<long>; w1 = both fibers on one thread (round_robin); "
            "w2 = two threads with algo::work_stealing(2, suspend=true) (idle threads sleep; Boost's default "
            "suspend=false spins, which measured slower on this shared machine), fibers launched on one of them.",
        ],
    },
    "prodcons": {
        "title": "prodcons: one producer, one consumer, one-slot buffer (mutex + two condvars) and capacity-1 channel, 1 worker",
        "timeout": 60,
        "java_parallelism": 1,
        "sizes": {"fern": (1000000, 100000), "pthread": (100000, 20000), "go": (1000000, 100000),
                  "java": (300000, 50000), "boost": (1000000, 100000)},
        "headline": [("ns_per_item_condvar", "lower"), ("ns_per_item_chan", "lower")],
        "notes": [
            "condvar: the classic coursework buffer: one slot, a mutex and two condition variables "
            "(not_full, not_empty), each side waiting in a while loop and signalling the other. "
            "chan: the runtime's channel/queue of capacity 1. ns per item from the producer's first put to the "
            "consumer's last get, after a warm-up; the consumer checks the sum of the items.",
            "One worker everywhere: fern_init(workers=1); pthread process pinned to one CPU (100,000 items, "
            "others 1,000,000, java 300,000: the metric is per item); GOMAXPROCS=1; java parallelism=1, "
            "maxPoolSize=1, 3 warm-up rounds; boost one thread.",
            "Primitives: fern_mutex/fern_cond, fern_chan(capacity 1); pthread_mutex/pthread_cond (no channel "
            "version: it would be this same code); sync.Mutex + 2 sync.Cond, make(chan int, 1); "
            "ReentrantLock + 2 Conditions, ArrayBlockingQueue<Integer>(1); boost::fibers::mutex + "
            "2 condition_variable, buffered_channel<long>(2) (Boost needs a power of 2 >= 2 and keeps one slot "
            "free, so it holds at most 1 item).",
        ],
    },
    "switch": {
        "title": "switch: yields between different code: two functions, three round-robin, 10,000 cold stacks; 1 worker",
        "timeout": 60,
        "parts": [["asym"], ["rr3"], ["cold"]],
        "java_parallelism": 1,
        "sizes": {"fern": [(1000000, 100000), (1000000, 100000), (1000000, 100000)],
                  "pthread": [(100000, 20000), (100000, 20000), (100000, 20000)],
                  "go": [(1000000, 100000), (1000000, 100000), (1000000, 100000)],
                  "java": [(300000, 50000), (300000, 50000), (300000, 50000)],
                  "boost": [(1000000, 100000), (1000000, 100000), (1000000, 100000)]},
        "headline": [("ns_per_switch_asym", "lower"), ("ns_per_switch_rr3", "lower"),
                     ("ns_per_switch_cold", "lower")],
        "notes": [
            "ns per yield call, each part a separate process, timed from the moment all its threads run. "
            "asym: two threads running two different functions (different call sites, different code "
            "around the yield) alternate, N yields each; rr3: three threads, three different functions, "
            "round-robin, N each; cold: 10,000 threads round-robin with N yields in all, so each switch "
            "enters a stack and a descriptor last touched 9,999 switches earlier (out of L1 and L2).",
            "Threads that reach the start gate early wait blocked (mutex + condvar, channel, latch), "
            "not in a yield loop, which would cost O(threads^2) switches before the clock starts.",
            "The yield scenario above has both threads in the same loop, where the CPU's return-stack "
            "predictor guesses the return into the other thread right; these are the cases it does not.",
            "fern: fern_init(workers=1), fern_yield(). pthread: sched_yield(2), process pinned to CPU 0, "
            "64 KiB stacks; cold with 1,000 threads (each is a kernel task), N = 100,000. go: runtime.Gosched(), "
            "GOMAXPROCS=1. java: Thread.yield() on virtual threads, parallelism=1, maxPoolSize=1, "
            "3 warm-up rounds, N = 300,000. boost: boost::this_fiber::yield(), round_robin on one thread, "
            "16 KiB fixedsize_stack.",
        ],
    },
    "mutex": {
        "title": "mutex: 8 threads on 2 workers increment one counter under one mutex",
        "timeout": 60,
        "java_parallelism": 2,
        "sizes": {"fern": (20000000, 2000000), "pthread": (20000000, 2000000), "go": (20000000, 2000000),
                  "java": (20000000, 2000000), "boost": (20000000, 2000000)},
        "headline": [("ops_per_sec", "higher")],
        "notes": [
            "4 x workers = 8 threads, 2 workers; each does N/8 lock, counter++, unlock (N = 20,000,000); "
            "ops_per_sec = N / wall time from the first spawn to the last join (after a warm-up round); the "
            "counter is checked. **Higher is better; ratio = fern/peer.**",
            "fern: fern_init(workers=2), fern_mutex (hands off to a waiter that waited > 1 ms). "
            "pthread: 8 kernel threads, default pthread_mutex, not pinned (2 CPUs). "
            "go: sync.Mutex, 8 goroutines, GOMAXPROCS=2. java: ReentrantLock (non-fair), 8 virtual threads, "
            "parallelism=2, maxPoolSize=2, 3 warm-up rounds. boost: boost::fibers::mutex, 2 threads x 4 fibers "
            "(round_robin on each thread, no migration).",
            "With a critical section this short, throughput mostly measures how long one thread keeps "
            "re-acquiring the lock before another gets it (a fair hand-off per unlock would be far slower).",
        ],
    },
})

# Metrics that run.py derives from a run's own lines.
DERIVED = {
    "million": [("spawn_park_us_per_thread", "spawn_park_s", 1e6, "us"),
                ("wake_all_us_per_thread", "wake_all_s", 1e6, "us")],
}

LINE_RE = re.compile(r"^(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s*$")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# Building the peers
# ---------------------------------------------------------------------------

def build_go(outdir, scenarios):
    """go build each scenario's program, offline. Returns {scenario: path or error}."""
    res = {}
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go") else None)
    if not go:
        return {s: "not built: go not found" for s in scenarios}
    env = dict(os.environ, GOTOOLCHAIN="local", GOPROXY="off", GOFLAGS="-mod=mod", CGO_ENABLED="0")
    if not env.get("GOCACHE") and not os.access(os.path.expanduser("~"), os.W_OK):
        env["GOCACHE"] = os.path.join(outdir, "gocache")
    os.makedirs(os.path.join(outdir, "go"), exist_ok=True)
    for s in scenarios:
        if not os.path.isdir(os.path.join(HERE, "go", s)):
            continue
        out = os.path.join(outdir, "go", s)
        rc, msg = sh([go, "build", "-o", out, "./" + s], cwd=os.path.join(HERE, "go"), env=env, timeout=300)
        res[s] = out if rc == 0 else "not built: go build failed: " + msg.strip()[-300:]
    return res


def build_java(outdir):
    """javac every bench/java/*.java. Returns the class dir or an error string."""
    if not os.path.exists(JAVAC):
        return "not built: " + JAVAC + " not found"
    srcs = sorted(os.path.join(HERE, "java", f) for f in os.listdir(os.path.join(HERE, "java"))
                  if f.endswith(".java"))
    cls = os.path.join(outdir, "java")
    os.makedirs(cls, exist_ok=True)
    rc, msg = sh([JAVAC, "-d", cls] + srcs, timeout=300)
    return cls if rc == 0 else "not built: javac failed: " + msg.strip()[-300:]


def commands(args, go_bins, java_cls):
    """{(scenario, runtime): argv list or 'skipped: ...' / 'not built: ...'}."""
    cdir = os.path.join(ROOT, args.build_dir, "bench")
    cmds = {}
    for s, spec in SCENARIOS.items():
        for rt in RUNTIMES:
            size = spec["sizes"].get(rt, "skipped: no program for this runtime")
            if isinstance(size, str):
                cmds[(s, rt)] = size
                continue
            # A run is one process, or one per part ("parts": extra argv per
            # process, sizes then a list with one (full, quick) per part).
            parts = spec.get("parts", [[]])
            sizes = size if isinstance(size, list) else [size] * len(parts)
            ns = [str(sz[1] if args.quick else sz[0]) for sz in sizes]
            if rt in ("fern", "pthread", "boost"):
                exe = os.path.join(cdir, "%s_%s" % (rt, s))
                if os.access(exe, os.X_OK):
                    cmds[(s, rt)] = [[exe, n] + part for n, part in zip(ns, parts)]
                elif rt == "boost":
                    cmds[(s, rt)] = "not built: %s missing (Boost.Fiber not found by CMake? apt-get install libboost-fiber-dev libboost-context-dev)" % exe
                else:
                    cmds[(s, rt)] = "not built: %s missing (does the library build?)" % exe
            elif rt == "go":
                b = go_bins.get(s, "not built: no Go program")
                cmds[(s, rt)] = [[b, n] + part for n, part in zip(ns, parts)] if not b.startswith("not built") else b
            elif rt == "java":
                if java_cls.startswith("not built"):
                    cmds[(s, rt)] = java_cls
                    continue
                argvs = []
                for n, part in zip(ns, parts):
                    par = spec.get("java_parallelism", 1 if s == "yield" else None)
                    if par == "part":
                        par = part[0]
                    flags = [] if par is None else ["-Djdk.virtualThreadScheduler.parallelism=%s" % par,
                                                    "-Djdk.virtualThreadScheduler.maxPoolSize=%s" % par]
                    argvs.append([JAVA] + flags + ["-cp", java_cls, s.capitalize(), n] + part)
                cmds[(s, rt)] = argvs
    return cmds


# ---------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------

def run_once(argvs, timeout):
    """One run: each argv in turn (a scenario's parts), metrics merged; stops at
    the first part that fails. Returns (status, {metric: (value, unit)}, seconds, tail)."""
    metrics, dt, tails = {}, 0.0, []
    for argv in argvs:
        status, m, d, tail = run_part(argv, timeout)
        metrics.update(m)
        dt += d
        if tail:
            tails.append(tail)
        if status != "ok":
            return status, metrics, dt, tail
    return "ok", metrics, dt, " / ".join(tails)[-400:]


def run_part(argv, timeout):
    """Run one program. Returns (status, {metric: (value, unit)}, seconds, tail)."""
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=timeout, start_new_session=True)
    except subprocess.TimeoutExpired as e:
        # subprocess.run kills the child on timeout; its process group may still hold helpers.
        tail = (e.stderr or "")[-400:] if isinstance(e.stderr, str) else ""
        return "timeout", {}, time.monotonic() - t0, "timed out after %ds %s" % (timeout, tail)
    except OSError as e:
        return "crashed", {}, time.monotonic() - t0, str(e)
    dt = time.monotonic() - t0
    metrics = {}
    for line in p.stdout.splitlines():
        m = LINE_RE.match(line.strip())
        if not m:
            continue
        try:
            metrics[m.group(3)] = (float(m.group(4)), m.group(5))
        except ValueError:
            pass
    if p.returncode != 0:
        why = "signal %d" % -p.returncode if p.returncode < 0 else "exit %d" % p.returncode
        return "crashed", metrics, dt, (why + ": " + p.stderr.strip()[-400:]).strip()
    if not metrics:
        return "crashed", metrics, dt, "no result lines: " + p.stderr.strip()[-400:]
    return "ok", metrics, dt, p.stderr.strip()[-400:]


def prewarm(gib):
    """Write and free gib GiB, so that the next process gets memory the
    hypervisor backs already (see the million scenario's notes)."""
    b = b"\x01" * (gib << 30)
    del b


def run_scenario(s, cmds, runs, budget_end):
    spec = SCENARIOS[s]
    res = {rt: {"status": None, "runs": [], "failures": [], "seconds": []} for rt in RUNTIMES}
    for rt in RUNTIMES:
        if isinstance(cmds[(s, rt)], str):
            res[rt]["status"] = cmds[(s, rt)]
        else:
            res[rt]["command"] = "; ".join(" ".join(os.path.relpath(a, ROOT) if a.startswith(ROOT) else a
                                                    for a in argv) for argv in cmds[(s, rt)])
    for i in range(runs):
        for rt in RUNTIMES:
            r = res[rt]
            if r["status"] is not None and not r["status"].startswith("crashed"):
                continue  # skipped, not built, timed out or over budget
            if time.monotonic() > budget_end:
                r["status"] = r["status"] or "stopped: time budget exhausted after %d run(s)" % len(r["runs"])
                continue
            if spec.get("prewarm_gib"):
                prewarm(spec["prewarm_gib"])
            status, metrics, dt, tail = run_once(cmds[(s, rt)], spec["timeout"])
            r["seconds"].append(round(dt, 3))
            log("  %-9s %-7s run %d/%d: %s (%.1fs)%s" % (s, rt, i + 1, runs, status, dt,
                                                       "" if status == "ok" else " " + tail[-200:]))
            if status == "ok":
                for name, src, mul, unit in DERIVED.get(s, []):
                    if src in metrics and "threads" in metrics and metrics["threads"][0] > 0:
                        metrics[name] = (metrics[src][0] * mul / metrics["threads"][0], unit)
                r["runs"].append({k: v[0] for k, v in metrics.items()})
                r.setdefault("units", {}).update({k: v[1] for k, v in metrics.items()})
            elif status == "timeout":
                r["failures"].append("run %d: %s" % (i + 1, tail))
                r["status"] = "timeout (>%ds) in run %d; remaining runs skipped" % (spec["timeout"], i + 1)
            else:
                r["failures"].append("run %d: %s" % (i + 1, tail))
                r["status"] = "crashed in %d of %d run(s)" % (len(r["failures"]), i + 1)
    for rt in RUNTIMES:
        r = res[rt]
        stats = {}
        names = sorted({k for run in r["runs"] for k in run})
        for k in names:
            vals = [run[k] for run in r["runs"] if k in run]
            stats[k] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
                        "n": len(vals), "unit": r.get("units", {}).get(k, ""), "values": vals}
        r["stats"] = stats
        if r["status"] is None:
            r["status"] = "ok"
    # Ratios peer vs fern on the headline metrics (above 1 = fern better).
    fern = res["fern"]["stats"]
    for rt in RUNTIMES:
        ratios = {}
        for metric, orient in spec["headline"]:
            a, b = fern.get(metric), res[rt]["stats"].get(metric)
            if rt == "fern" or not a or not b or a["median"] <= 0 or b["median"] <= 0:
                continue
            na = fern.get("threads", {}).get("median")
            nb = res[rt]["stats"].get("threads", {}).get("median")
            if metric.endswith("_s") and na and nb and na != nb:
                ratios[metric] = None  # totals over different thread counts
                continue
            ratios[metric] = b["median"] / a["median"] if orient == "lower" else a["median"] / b["median"]
        res[rt]["ratio_vs_fern"] = ratios
    return res


# Hot paths counted with callgrind: scenario -> the per-run extra argv (the
# part to run), how many operations one unit of N makes, and the unit's name.
# The programs' warm-ups are fixed (or absent), so the difference of two run
# lengths counts exactly the extra operations.
CALLGRIND = {
    "yield": {"extra": [], "ops_per_n": 2, "unit": "switch", "key": "instr_per_switch",
              "runtimes": ("fern", "boost"), "sizes": ((2000, 12000), (10000, 110000))},
    "pingpong": {"extra": ["1"], "ops_per_n": 1, "unit": "round trip (1 worker)", "key": "instr_per_roundtrip",
                 "runtimes": ("fern", "boost"), "sizes": ((12000, 22000), (20000, 120000))},
}


def callgrind(args, cmds, scenario="yield"):
    """Instructions per operation of a hot path (the yield switch, the
    pingpong round trip), from two run lengths."""
    vg = shutil.which("valgrind")
    if not vg:
        return {"status": "skipped: valgrind not installed"}
    cg = CALLGRIND[scenario]
    out = {}
    n1, n2 = cg["sizes"][0] if args.quick else cg["sizes"][1]
    tmp = tempfile.mkdtemp(prefix="fern-callgrind-")
    try:
        for rt in cg["runtimes"]:
            c = cmds.get((scenario, rt))
            if isinstance(c, str) or not c:
                out[rt] = {"status": c or "not built"}
                continue
            counts, pcts = [], []
            for n in (n1, n2):
                # Twice each, keeping the smaller count: a run can only gain
                # instructions from other threads' work meanwhile, never lose
                # any (one full run measured the short run as the longer one,
                # a negative difference; the same runs by hand gave 167).
                best = None
                for _ in range(2):
                    rc, msg = sh([vg, "--tool=callgrind", "--callgrind-out-file=" + os.path.join(tmp, "cg.%s.%d" % (rt, n)),
                                  c[0][0], str(n)] + cg["extra"], timeout=300)
                    m = re.search(r"Collected\s*:\s*(\d+)", msg)
                    if rc != 0 or not m:
                        break
                    best = int(m.group(1)) if best is None else min(best, int(m.group(1)))
                if rc != 0 or not m:
                    out[rt] = {"status": "failed: " + msg.strip()[-300:]}
                    break
                counts.append(best)
                sp = re.search(r"switch_pct\s+([0-9.eE+-]+)", msg)
                pcts.append(float(sp.group(1)) if sp else -1.0)
            else:
                ops = cg["ops_per_n"] * (n2 - n1)
                if scenario == "yield":
                    out[rt] = {"status": "ok", "instr_per_switch": (counts[1] - counts[0]) / ops,
                               "switch_pct": pcts,
                               "method": "callgrind Ir(%d yields/thread) - Ir(%d yields/thread), / %d switches; "
                                         "switch_pct under valgrind %s" % (n2, n1, ops,
                                                                           " / ".join("%.1f%%" % p for p in pcts))}
                    if min(pcts) < 99:
                        out[rt]["status"] = "suspect: the threads did not strictly alternate under valgrind"
                else:
                    out[rt] = {"status": "ok", cg["key"]: (counts[1] - counts[0]) / ops,
                               "method": "callgrind Ir(%d round trips) - Ir(%d round trips), / %d; argv %s" % (
                                   n2, n1, ops, " ".join(["N"] + cg["extra"]))}
            log("  callgrind %-6s %s" % (rt, out[rt]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


# ---------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------

class CpuMeter:
    """CPU time the whole machine spent busy, minus what this driver and its
    benchmark children used: how much other work shared the machine."""

    def __init__(self):
        self.t0, self.busy0, self.own0 = time.monotonic(), self._busy(), self._own()

    @staticmethod
    def _busy():
        try:
            with open("/proc/stat") as f:
                v = [int(x) for x in f.readline().split()[1:9]]
            # user nice system idle iowait irq softirq steal
            return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return None

    @staticmethod
    def _own():
        c, me = resource.getrusage(resource.RUSAGE_CHILDREN), resource.getrusage(resource.RUSAGE_SELF)
        return c.ru_utime + c.ru_stime + me.ru_utime + me.ru_stime

    def foreign_pct(self):
        busy = self._busy()
        wall = time.monotonic() - self.t0
        if busy is None or self.busy0 is None or wall <= 0:
            return -1.0
        other = (busy - self.busy0) - (self._own() - self.own0)
        return max(0.0, 100.0 * other / (wall * (os.cpu_count() or 1)))


def machine():
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    boost = "not found"
    try:
        with open("/usr/include/boost/version.hpp") as f:
            m = re.search(r'#define BOOST_LIB_VERSION "([^"]+)"', f.read())
            boost = m.group(1).replace("_", ".") if m else boost
    except OSError:
        pass
    rc, jv = sh([JAVA, "-version"], timeout=30)
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "gcc": first_line(["gcc", "--version"]),
        "go": first_line([shutil.which("go") or "/usr/local/go/bin/go", "version"]),
        "java": jv.strip().splitlines()[0] if rc == 0 and jv.strip() else "not found",
        "boost": boost,
        "valgrind": first_line(["valgrind", "--version"]),
    }


def fmt(v):
    if v is None:
        return "—"
    a = abs(v)
    if a >= 1e6:
        return "%.3g M" % (v / 1e6) if a < 1e9 else "%.3g G" % (v / 1e9)
    if a >= 1000:
        return "%.0f" % v
    if a >= 100:
        return "%.1f" % v
    if a >= 10:
        return "%.2f" % v
    return "%.3g" % v


def write_md(path, data):
    m = data["machine"]
    L = ["# fern benchmarks", "",
         "Machine: %s, %s cores, Linux %s; %s. gcc: %s; go: %s; java: %s; Boost %s; valgrind: %s." % (
             m["cpu"], m["cores"], m["kernel"], m["date"], m["gcc"], m["go"], m["java"], m["boost"],
             m["valgrind"]),
         "",
         "Generated by `bench/tools/run.py`%s: every number below was measured by it in this run. "
         "Each cell is the median of the runs with [min – max]; runtimes were run interleaved "
         "(fern, pthread, go, java, boost, then again). **Ratio** = peer/fern for lower-is-better metrics "
         "and fern/peer for higher-is-better ones: **above 1 means fern is better**." % (
             " --quick (smoke pass: small sizes, not for quoting)" if data.get("quick") else ""),
         ""]
    if data.get("plots"):
        L += ["Plots: " + ", ".join("[%s](%s)" % (os.path.basename(p), os.path.basename(p))
                                     for p in data["plots"]) + ".", ""]
    else:
        L += ["Plots: none (%s)." % data.get("plots_note", "matplotlib not importable"), ""]
    for s, spec in SCENARIOS.items():
        sc = data["scenarios"].get(s)
        if not sc:
            continue
        busy = ""
        other = sc.get("other_cpu_pct", -1)
        if other > 10:
            busy = (" **Other processes used %.0f%% of the machine's CPU meanwhile: treat these numbers "
                    "with care.**" % other)
        L += ["## " + spec["title"], "",
              "Measured %s, %d run(s) per runtime; CPU used by other processes meanwhile: %.1f%%.%s" % (
                  sc["date"], sc["runs"], other, busy), ""]
        head = "| runtime | status | " + " | ".join(
            "%s (%s)" % (mname, "higher better" if o == "higher" else "lower better")
            for mname, o in spec["headline"]) + " | other |"
        L += [head, "|" + " --- |" * (len(spec["headline"]) + 3)]
        for rt in RUNTIMES:
            r = sc["results"][rt]
            cells = []
            for mname, _ in spec["headline"]:
                st = r["stats"].get(mname)
                if not st:
                    cells.append("—")
                    continue
                c = "%s %s [%s – %s]" % (fmt(st["median"]), st["unit"], fmt(st["min"]), fmt(st["max"]))
                if rt != "fern" and mname in r.get("ratio_vs_fern", {}):
                    ratio = r["ratio_vs_fern"][mname]
                    c += "; ratio **%s**" % ("n/a (different N)" if ratio is None else "%.2f" % ratio)
                cells.append(c)
            heads = {h for h, _ in spec["headline"]}
            other = ", ".join("%s %s %s" % (k, fmt(v["median"]), v["unit"]) for k, v in sorted(r["stats"].items())
                              if k not in heads)
            status = r["status"]
            if status.startswith(("skipped", "not built")):
                status = status.split(":")[0] + " (below)"
            L.append("| %s | %s | %s | %s |" % (rt, status.replace("|", "/"), " | ".join(cells), other or ""))
        skips = [(rt, sc["results"][rt]["status"]) for rt in RUNTIMES
                 if sc["results"][rt]["status"].startswith(("skipped", "not built"))]
        if skips:
            L += [""] + ["- **%s %s**: %s" % (rt, why.split(":")[0], why.split(":", 1)[1].strip() if ":" in why else "")
                         for rt, why in skips]
        fails = [(rt, f) for rt in RUNTIMES for f in sc["results"][rt]["failures"]]
        if fails:
            L += ["", "Failures (crash / timeout, as measured):"] + [
                "- %s %s" % (rt, f.replace("\n", " ").replace("|", "/")[:300]) for rt, f in fails]
        L += [""] + ["- " + n for n in spec["notes"]] + [""]
    cg = data.get("callgrind")
    if cg:
        L += ["## callgrind: yield hot path", ""]
        if "status" in cg:
            L += [cg["status"], ""]
        else:
            L += ["| runtime | instructions per switch | method |", "| --- | --- | --- |"]
            for rt, v in cg.items():
                if "instr_per_switch" in v:
                    L.append("| %s | %.1f%s | %s |" % (rt, v["instr_per_switch"],
                                                      "" if v["status"] == "ok" else " (%s)" % v["status"],
                                                      v["method"]))
                else:
                    L.append("| %s | — | %s |" % (rt, v.get("status", "").replace("|", "/")[:200]))
            L += ["", "- Counted per switch: one fern_yield / this_fiber::yield call plus the benchmark loop around it "
                      "(~10 instructions). The difference of two run lengths cancels start-up and shutdown.",
                  "- User-space instructions only (valgrind serialises threads on one core; "
                      "kernel work is not counted). fern links the Valgrind stack registration "
                      "when valgrind/valgrind.h is present (FERN_VALGRIND).", ""]
    cg = data.get("callgrind_pingpong")
    if cg:
        L += ["## callgrind: pingpong round trip (1 worker)", ""]
        if "status" in cg:
            L += [cg["status"], ""]
        else:
            L += ["| runtime | instructions per round trip | method |", "| --- | --- | --- |"]
            for rt, v in cg.items():
                if "instr_per_roundtrip" in v:
                    L.append("| %s | %.1f%s | %s |" % (rt, v["instr_per_roundtrip"],
                                                      "" if v["status"] == "ok" else " (%s)" % v["status"],
                                                      v["method"]))
                else:
                    L.append("| %s | — | %s |" % (rt, v.get("status", "").replace("|", "/")[:200]))
            L += ["", "- Counted per round trip: 2 channel sends + 2 receives (4 rendezvous, each parking one "
                      "side: about 4 context switches) plus the benchmark loop and its check. fern: two "
                      "fern_chan(capacity 0) on fern_init(workers=1); boost: two unbuffered_channel<long> on one "
                      "thread. The fixed warm-up (10,000 round trips) and start-up cancel in the difference.",
                  "- User-space instructions only, as above.", ""]
    L += ["## Build notes", ""] + ["- " + b for b in data.get("build", [])] + [""]
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")


def plots(data, outdir):
    try:
        import matplotlib  # noqa: F401
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:  # noqa: BLE001 - any import failure means no plots
        return [], "matplotlib not importable; no PNG plots written"
    files = []
    for s, spec in SCENARIOS.items():
        sc = data["scenarios"].get(s)
        if not sc:
            continue
        mets = spec["headline"]
        fig, axes = plt.subplots(1, len(mets), figsize=(4.2 * len(mets), 3.4), squeeze=False)
        for ax, (mname, orient) in zip(axes[0], mets):
            names, med, lo, hi = [], [], [], []
            for rt in RUNTIMES:
                st = sc["results"][rt]["stats"].get(mname)
                if st:
                    names.append(rt)
                    med.append(st["median"])
                    lo.append(st["median"] - st["min"])
                    hi.append(st["max"] - st["median"])
            ax.bar(names, med, yerr=[lo, hi], capsize=3,
                   color=["#2a7" if n == "fern" else "#888" for n in names])
            unit = next((sc["results"][rt]["stats"][mname]["unit"] for rt in RUNTIMES
                         if mname in sc["results"][rt]["stats"]), "")
            ax.set_title("%s (%s, %s better)" % (mname, unit, orient), fontsize=9)
            if med and max(med) / max(min(med), 1e-12) > 50:
                ax.set_yscale("log")
        fig.suptitle(spec["title"], fontsize=10)
        fig.tight_layout()
        p = os.path.join(outdir, "%s.png" % s)
        fig.savefig(p, dpi=110)
        plt.close(fig)
        files.append(p)
    return files, ""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="runs per (scenario, runtime), default 5")
    ap.add_argument("--quick", action="store_true", help="small sizes, 1 run; writes results/quick.*")
    ap.add_argument("--only", action="append", choices=list(SCENARIOS), help="run only this scenario (repeatable)")
    ap.add_argument("--build-dir", default="build/release", help="CMake build dir holding bench/ (default build/release)")
    ap.add_argument("--budget", type=float, default=840, help="stop starting runs after this many seconds (default 840)")
    ap.add_argument("--no-callgrind", action="store_true")
    ap.add_argument("--plots-only", action="store_true",
                    help="redraw the PNG plots and the report from results/latest.json (no runs)")
    args = ap.parse_args()
    if args.plots_only:
        resdir = os.path.join(HERE, "results")
        jpath = os.path.join(resdir, "latest.json")
        with open(jpath) as f:
            data = json.load(f)
        files, note = plots(data, resdir)
        data["plots"] = [os.path.relpath(p, HERE) for p in files]
        data["plots_note"] = note
        with open(jpath, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        write_md(os.path.join(resdir, "latest.md"), data)
        log("plots: %s" % (", ".join(data["plots"]) or note))
        return 0
    runs = 1 if args.quick and args.runs == 5 else args.runs
    scen = args.only or list(SCENARIOS)
    start = time.monotonic()

    outdir = os.path.join(ROOT, "build", "bench")
    os.makedirs(outdir, exist_ok=True)
    log("building Go and Java peers into %s" % os.path.relpath(outdir, ROOT))
    go_bins = build_go(outdir, scen)
    java_cls = build_java(outdir)
    cmds = commands(args, go_bins, java_cls)
    build = []
    for s in scen:
        for rt in RUNTIMES:
            c = cmds[(s, rt)]
            if isinstance(c, str) and c.startswith("not built"):
                build.append("%s/%s: %s" % (s, rt, c))
    for b in build:
        log("  " + b)

    resdir = os.path.join(HERE, "results")
    os.makedirs(resdir, exist_ok=True)
    base = "quick" if args.quick else "latest"
    jpath = os.path.join(resdir, base + ".json")
    data = {"scenarios": {}}
    if args.only and not args.quick and os.path.exists(jpath):
        try:
            with open(jpath) as f:
                data = json.load(f)  # merge: keep the other scenarios' results
        except (OSError, ValueError):
            data = {"scenarios": {}}
    data["machine"] = machine()
    data["quick"] = bool(args.quick)
    data["build"] = build or ["all programs built"]

    # Cheap scenarios first, so a slow one cannot starve them of the budget;
    # the report keeps the SCENARIOS order.
    order = ["yield", "switch", "spawn", "deepstack", "migrate", "pingpong", "prodcons", "mutex", "think", "preempt", "million"]
    for s in sorted(scen, key=order.index):
        log("scenario %s (%d run(s) per runtime)" % (s, runs))
        meter = CpuMeter()
        res = run_scenario(s, cmds, runs, start + args.budget)
        data["scenarios"][s] = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                                "runs": runs, "quick": bool(args.quick), "results": res,
                                "other_cpu_pct": round(meter.foreign_pct(), 1)}
        if s == "yield" and not args.no_callgrind:
            log("callgrind: yield hot path")
            data["callgrind"] = callgrind(args, cmds)
        if s == "pingpong" and not args.no_callgrind:
            log("callgrind: pingpong round trip (1 worker)")
            data["callgrind_pingpong"] = callgrind(args, cmds, "pingpong")

    files, note = plots(data, resdir) if not args.quick else ([], "quick mode: no plots")
    data["plots"] = [os.path.relpath(p, HERE) for p in files]
    data["plots_note"] = note
    with open(jpath, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    write_md(os.path.join(resdir, base + ".md"), data)
    log("wrote %s and %s (%.0f s)" % (os.path.relpath(jpath, ROOT),
                                       os.path.relpath(os.path.join(resdir, base + ".md"), ROOT),
                                       time.monotonic() - start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
