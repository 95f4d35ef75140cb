#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""fern's idle-connections scenario (Python standard library only).

Each peer is a small echo server holding one thread per connection blocked in
a read on a 512-byte buffer (the epoll loop: a small struct per connection
instead). For each run, bench/idle/client.c (target idle_client) starts the
server pinned to CPU 0 (`taskset -c 0`) from CPU 1, warms it up, reads its
VmRSS + VmPTE with 0 connections open, opens --conns connections (18,000 by
default; each from its own source address in 127.x.y.z), leaves them idle
--idle seconds, reads VmRSS + VmPTE again, then sends one byte on every
connection and times until each has echoed its byte, and stops the server.
Peers are interleaved: every peer once per round, --runs rounds.

  fern_hib       bench/fern/idle.c, FERN_HIBERNATE=1 FERN_HIBERNATE_US=--hibernate-us
  fern_hib_64k   the same with FERN_STACK_SIZE=64k (the pthread peer's stack size)
  fern           bench/fern/idle.c, FERN_HIBERNATE=0
  go             bench/go/idle, GOMAXPROCS 1
  java           bench/java/Idle.java, Java 25 virtual threads, parallelism 1
  epoll          bench/servers/epoll_echo.c: one thread, epoll, a 32-byte struct per connection
  pthread        bench/pthread/idle.c: one kernel thread per connection, 64 KiB stacks

Writes bench/results/idle.{json,md} (--quick: idle-quick.*).

    python3 bench/idle/idle.py                       # 3 rounds of 18,000 connections, 6-9 minutes
    python3 bench/idle/idle.py --quick               # 1 round of 2,000
    python3 bench/idle/idle.py --runtimes fern_hib,go --runs 5
    python3 bench/idle/idle.py --md-only             # re-render idle.md from idle.json
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "common"))
from benchproc import GO, GO_ENV, JAVA, SERVER_CPU, CLIENT_CPU, build_java, log, sh  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))  # bench/idle
BENCH = os.path.dirname(HERE)
ROOT = os.path.dirname(BENCH)
RESULTS = os.path.join(BENCH, "results")

RUNTIMES = ["fern_hib", "fern_hib_64k", "fern", "go", "java", "epoll", "pthread"]
DESCR = {
    "fern_hib": "bench/fern/idle.c: a green thread per connection parked in fern_read (512-byte buffer on its "
                "128 KiB stack), hibernation on (FERN_HIBERNATE=1, FERN_HIBERNATE_US=%(hib_us)d), 1 worker",
    "fern_hib_64k": "the same with FERN_STACK_SIZE=64k",
    "fern": "bench/fern/idle.c, hibernation off (FERN_HIBERNATE=0), 1 worker",
    "go": "bench/go/idle: a goroutine per connection in net.Conn.Read (512-byte heap buffer), GOMAXPROCS 1",
    "java": "bench/java/Idle.java: a virtual thread per connection in InputStream.read (512-byte array), "
            "Java 25, default GC and heap, -Djdk.virtualThreadScheduler.parallelism=1",
    "epoll": "bench/servers/epoll_echo.c: one thread, edge-triggered epoll, a 32-byte malloc'd struct per "
             "connection (the floor: no thread at all)",
    "pthread": "bench/pthread/idle.c: a kernel thread per connection in read(2) (512-byte buffer on a 64 KiB "
               "stack, pthread_attr_setstacksize, plus glibc's guard page)",
}
# (metric, header, decimals)
COLS = [("bytes_per_conn", "bytes/conn", 0), ("rss_per_conn", "RSS/conn", 0), ("pte_per_conn", "PTE/conn", 0),
        ("answer_all_ms", "answer-all ms", 0), ("answer_half_ms", "half answered ms", 0),
        ("bytes_per_conn_after", "bytes/conn after", 0), ("connect_s", "connect s", 1)]


def build(args, out):
    """{name: path or 'not built: ...'} for the servers and the client."""
    bins = {}
    bdir = os.path.join(ROOT, args.build_dir)
    targets = ["fern_idle", "pthread_idle", "epoll_echo", "idle_client"]
    if not args.no_build:
        rc, msg = sh(["cmake", "--build", bdir, "--target"] + targets, timeout=900)
        if rc != 0:
            log("cmake --build failed:\n" + msg[-2000:])
    for t in targets:
        p = os.path.join(bdir, "bench", t)
        bins[t] = p if os.access(p, os.X_OK) else "not built: %s missing (cmake -DFERN_BUILD_BENCH=ON)" % p
    if os.access(GO, os.X_OK):
        env = dict(os.environ, **GO_ENV)
        if not env.get("GOCACHE") and not os.access(os.path.expanduser("~"), os.W_OK):
            env["GOCACHE"] = os.path.join(out, "gocache")
        p = os.path.join(out, "go_idle")
        rc, msg = sh([GO, "build", "-o", p, "./idle"], cwd=os.path.join(BENCH, "go"), env=env, timeout=300)
        bins["go"] = p if rc == 0 else "not built: go build failed: " + msg.strip()[-300:]
    else:
        bins["go"] = "not built: go not found"
    bins["java"] = build_java(os.path.join(BENCH, "java", "Idle.java"), out)
    return bins


def server(rt, bins, args):
    """(argv, extra env, client flags) or a 'not built: ...' string."""
    w = ["--port", "0", "--workers", "1"]
    if rt.startswith("fern"):
        b = bins["fern_idle"]
        env = {"FERN_HIBERNATE": "0"}
        if rt.startswith("fern_hib"):
            env = {"FERN_HIBERNATE": "1", "FERN_HIBERNATE_US": str(args.hibernate_us)}
        if rt == "fern_hib_64k":
            env["FERN_STACK_SIZE"] = "64k"
        return ([b] + w, env, ["--stats"]) if not b.startswith("not built") else b
    if rt == "go":
        b = bins["go"]
        return ([b] + w, {}, []) if not b.startswith("not built") else b
    if rt == "java":
        b = bins["java"]
        return ([JAVA, "-Djdk.virtualThreadScheduler.parallelism=1", "-cp", b, "Idle"] + w, {}, []) \
            if not b.startswith("not built") else b
    b = bins["epoll_echo" if rt == "epoll" else "pthread_idle"]
    return ([b] + w, {}, []) if not b.startswith("not built") else b


def pin(cpu):
    return ["taskset", "-c", cpu] if shutil.which("taskset") else []


def one_run(rt, bins, args):
    s = server(rt, bins, args)
    if isinstance(s, str):
        return {"status": s}
    argv, env, flags = s
    client = bins["idle_client"]
    if client.startswith("not built"):
        return {"status": client}
    limit = args.limit
    cmd = pin(CLIENT_CPU) + [client, "--conns", str(args.conns), "--idle", str(args.idle), "--name", rt,
                             "--timeout", str(args.timeout), "--limit", str(limit)] + flags + \
        ["--"] + pin(SERVER_CPU) + argv
    load0 = os.getloadavg()
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=dict(os.environ, **env), timeout=limit + 30)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:  # the client's own alarm should have fired first
        rc, out, err = -9, e.stdout or "", (e.stderr or "") + "\nidle.py: timed out"
        if isinstance(out, bytes):
            out, err = out.decode(), err.decode() if isinstance(err, bytes) else err
    dt = time.monotonic() - t0
    metrics = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) == 5 and f[0] == "idle" and f[1] == rt:
            try:
                metrics[f[2]] = float(f[3])
            except ValueError:
                pass
    ok = rc == 0 and metrics.get("answered") == args.conns
    return {"status": "ok" if ok else "failed (exit %d)" % rc, "metrics": metrics, "seconds": round(dt, 2),
            "load_before": [round(x, 2) for x in load0], "load_after": [round(x, 2) for x in os.getloadavg()],
            "env": env, "argv": cmd, "stderr": err.strip()[-1500:]}


def machine():
    m = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
         "kernel": platform.release(), "cores": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            m["cpu"] = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
    except OSError:
        m["cpu"] = "?"
    rc, out = sh([GO, "version"], timeout=30)
    m["go"] = out.strip() if rc == 0 else "not found"
    rc, out = sh([JAVA, "-version"], timeout=30)
    m["java"] = out.strip().splitlines()[0] if rc == 0 and out.strip() else "not found"
    try:
        with open("/proc/self/limits") as f:
            m["nofile"] = next((ln.split()[3] for ln in f if ln.startswith("Max open files")), "?")
    except OSError:
        m["nofile"] = "?"
    return m


def stats(vals):
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def summarize(data):
    summ = {}
    for rt in data["runtimes"]:
        runs = [r for r in data["runs"] if r["runtime"] == rt]
        ok = [r for r in runs if r["status"] == "ok"]
        s = {"runs": len(runs), "ok": len(ok), "status": runs[0]["status"] if runs and not ok else "ok"}
        for k, _, _ in COLS + [("server_hibernated", "", 0), ("server_hibernate_bytes", "", 0)]:
            v = [r["metrics"][k] for r in ok if k in r["metrics"]]
            if v:
                s[k] = stats(v)
        summ[rt] = s
    return summ


def fmt(v, nd):
    return ("{:,.%df}" % nd).format(v)


def cell(s, k, nd):
    st = s.get(k)
    if not st:
        return "—"
    if st["n"] == 1:
        return fmt(st["median"], nd)
    return "%s [%s – %s]" % (fmt(st["median"], nd), fmt(st["min"], nd), fmt(st["max"], nd))


def render(data):
    summ = summarize(data)
    m = data["machine"]
    a = data["args"]
    L = ["# Idle connections", "",
         "Generated by `bench/idle/idle.py` on %s (%s, %s cores, Linux %s; %s; %s; descriptors per process: %s)."
         % (m["date"], m["cpu"], m["cores"], m["kernel"], m["go"], m["java"], m["nofile"]), "",
         "%s connections, each from its own source address in 127.x.y.z, idle %s s; %d round(s), peers "
         "interleaved; the server on CPU 0, the client (bench/idle/client.c) on CPU 1. Median [min – max] of the "
         "runs that succeeded. **bytes/conn** = growth of the server's VmRSS + VmPTE from 0 connections (after "
         "a warm-up of 100 connections opened, answered and closed) to the end of the idle time, divided by the "
         "connections; kernel memory (socket buffers, sockets, epoll registrations, kernel threads' stacks) is "
         "in neither. **answer-all** = from the first of the one-byte writes (one per connection) to the last "
         "echo back, every echo checked; **half answered** = when half had answered. **bytes/conn after** = the "
         "same growth once every connection has answered. **×Go** = peer / Go (lower is better for both)."
         % (fmt(a["conns"], 0), a["idle"], a["runs"]), ""]
    go = summ.get("go", {})
    head = ["peer", "bytes/conn", "×Go", "answer-all ms", "×Go", "half answered ms", "RSS/conn", "PTE/conn",
            "bytes/conn after", "connect s", "runs ok"]
    L += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for rt in data["runtimes"]:
        s = summ[rt]
        if not s["ok"]:
            L.append("| %s | %s |%s" % (rt, s["status"], " |" * (len(head) - 2)))
            continue

        def ratio(k):
            if k in s and k in go and go[k]["median"] > 0:
                return "%.2f" % (s[k]["median"] / go[k]["median"])
            return "—"
        L.append("| " + " | ".join([rt, cell(s, "bytes_per_conn", 0), ratio("bytes_per_conn"),
                                    cell(s, "answer_all_ms", 0), ratio("answer_all_ms"),
                                    cell(s, "answer_half_ms", 0), cell(s, "rss_per_conn", 0),
                                    cell(s, "pte_per_conn", 0), cell(s, "bytes_per_conn_after", 0),
                                    cell(s, "connect_s", 1), "%d/%d" % (s["ok"], s["runs"])]) + " |")
    L.append("")
    hib = [rt for rt in data["runtimes"] if rt.startswith("fern_hib") and "server_hibernated" in summ[rt]]
    for rt in hib:
        s = summ[rt]
        L.append("- %s: stacks hibernated when the bytes were sent (fern_stats): %s (the %s connections' threads "
                 "and the acceptor's); heap held by the hibernated stacks: %s bytes per thread." % (
                     rt, cell(s, "server_hibernated", 0), fmt(a["conns"], 0),
                     fmt(s["server_hibernate_bytes"]["median"] / max(1.0, s["server_hibernated"]["median"]), 0)))
    fh = summ.get("fern_hib", {})
    if fh.get("ok") and go.get("ok") and "bytes_per_conn" in fh and "bytes_per_conn" in go:
        b, g = fh["bytes_per_conn"]["median"], go["bytes_per_conn"]["median"]
        allok = all(r["status"] == "ok" for r in data["runs"] if r["runtime"] == "fern_hib")
        L.append("- Targets (issue 33), fern_hib: ≤ 1.5 KiB (1,536 bytes) per connection: %s (%s); ≤ 0.4× Go's "
                 "server in the same run: %s (%.2f×); every connection answered afterwards in every run: %s." % (
                     "met" if b <= 1536 else "**not met**", fmt(b, 0), "met" if b <= 0.4 * g else "**not met**",
                     b / g, "yes" if allok else "**no**"))
    loads = [r["load_before"][0] for r in data["runs"] if "load_before" in r]
    if loads:
        L.append("- Load average (1 min) at the start of the runs: %.1f – %.1f (the machine is shared; "
                 "2 cores)." % (min(loads), max(loads)))
    secs = sum(r.get("seconds", 0) for r in data["runs"])
    L.append("- The session took %.0f s of runs." % secs)
    L += ["", "What each peer is:", ""]
    for rt in data["runtimes"]:
        L.append("- **%s**: %s" % (rt, DESCR[rt] % {"hib_us": a["hibernate_us"]}))
    fails = [r for r in data["runs"] if r["status"] != "ok"]
    if fails:
        L += ["", "Failed runs:", ""]
        for r in fails:
            L.append("- round %d %s: %s: `%s`" % (r["round"], r["runtime"], r["status"],
                                                   r.get("stderr", "").replace("\n", " / ")[-400:]))
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default="build/release")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--conns", type=int, default=18000)
    ap.add_argument("--idle", type=float, default=4.0)
    ap.add_argument("--hibernate-us", type=int, default=200000)
    ap.add_argument("--timeout", type=int, default=120, help="each phase's deadline in the client, seconds")
    ap.add_argument("--limit", type=int, default=400, help="one run's time limit, seconds")
    ap.add_argument("--runtimes", default=",".join(RUNTIMES))
    ap.add_argument("--quick", action="store_true", help="1 round of 2,000 connections -> results/idle-quick.*")
    ap.add_argument("--no-build", action="store_true", help="use the binaries in --build-dir as they are")
    ap.add_argument("--md-only", action="store_true", help="re-render idle.md from idle.json")
    args = ap.parse_args()
    stem = "idle-quick" if args.quick else "idle"
    jpath, mpath = os.path.join(RESULTS, stem + ".json"), os.path.join(RESULTS, stem + ".md")
    if args.md_only:
        with open(jpath) as f:
            data = json.load(f)
        with open(mpath, "w") as f:
            f.write(render(data))
        print(open(mpath).read())
        return 0
    if args.quick:
        args.conns, args.runs = 2000, 1
    rts = [r for r in args.runtimes.split(",") if r]
    bad = [r for r in rts if r not in RUNTIMES]
    if bad:
        ap.error("unknown runtime(s) %s; known: %s" % (",".join(bad), ",".join(RUNTIMES)))
    out = os.path.join(ROOT, "build", "bench", "idle")
    os.makedirs(out, exist_ok=True)
    bins = build(args, out)
    data = {"machine": machine(), "runtimes": rts, "runs": [],
            "args": {"conns": args.conns, "idle": args.idle, "runs": args.runs, "hibernate_us": args.hibernate_us}}
    t0 = time.monotonic()
    for k in range(args.runs):
        for rt in rts:
            log("round %d/%d: %s (load %.1f)" % (k + 1, args.runs, rt, os.getloadavg()[0]))
            r = one_run(rt, bins, args)
            r["round"], r["runtime"] = k + 1, rt
            met = r.get("metrics", {})
            log("  %s: %s bytes/conn, answer-all %s ms, %s s" % (
                r["status"], fmt(met["bytes_per_conn"], 0) if "bytes_per_conn" in met else "—",
                fmt(met["answer_all_ms"], 0) if "answer_all_ms" in met else "—", r.get("seconds", "—")))
            if r["status"] != "ok" and r.get("stderr"):
                log("  " + r["stderr"].replace("\n", "\n  ")[-1200:])
            data["runs"].append(r)
    data["seconds"] = round(time.monotonic() - t0, 1)
    os.makedirs(RESULTS, exist_ok=True)
    with open(jpath, "w") as f:
        json.dump(data, f, indent=1)
    md = render(data)
    with open(mpath, "w") as f:
        f.write(md)
    print(md)
    log("wrote %s and %s (%.0f s)" % (jpath, mpath, data["seconds"]))
    return 0 if all(r["status"] == "ok" for r in data["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
