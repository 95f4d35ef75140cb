#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""fern server benchmarks: http, echo, rpc (Python standard library only).

Builds the fern example servers (examples/http, echo_server, rpc) and the peers
in bench/servers/ into build/bench/servers/, then for every run round starts
each server in turn pinned to CPU 0 (`taskset -c 0`), waits for its
`listening on 127.0.0.1:PORT` line, warms it up, drives it from CPU 1
(`taskset -c 1`) with every load configuration, and stops it with SIGTERM
(checking that it exits). Runtimes are interleaved round by round.

  http  wrk -t1, 64/256/1024 connections, without and with pipelining (16
        requests per write, bench/servers/pipeline.lua), GET /plaintext.
  echo  bench/servers/echo_load (epoll, one thread), 64-byte messages,
        64/256/1024 connections, one message in flight per connection.
  rpc   examples/rpc (fern client+server green threads vs two dedicated
        pthreads, same process), run --runs times.

Per load run it records requests (round trips) per second, p50/p99 latency,
the server's CPU seconds (user+sys of every process in its session, from
/proc/PID/stat before and after), requests per server-CPU-second, and the
load generator's own CPU use (when that is near 100% the request rate measures
the client, so the per-CPU-second figure is the one to compare).

Writes bench/results/servers.json and the "## Servers" section of
bench/results/latest.md (between marker comments; the rest of the file is kept),
and a PNG plot when matplotlib is importable. --quick writes
servers-quick.json and the section into quick.md instead.

    python3 bench/servers/servers.py            # 5 rounds, 3 s loads: about 18 minutes
    python3 bench/servers/servers.py --quick    # smoke: 1 run, 1 s loads
    python3 bench/servers/servers.py --only http --runtimes fern,go_http --duration 2
    python3 bench/servers/servers.py --md-only  # re-render the section from servers.json
                                                # (bench/tools/run.py rewrites latest.md whole)
"""

import argparse
import datetime
import json
import os
import platform
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "common"))
from benchproc import (GO, GO_ENV, JAVA, SERVER_CPU, CLIENT_CPU, build_java, first_line, log,  # noqa: E402
                       sh)

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # bench/
ROOT = os.path.dirname(HERE)
SRV = os.path.join(HERE, "servers")
FASTHTTP = "github.com/valyala/fasthttp"
BEGIN, END = "<!-- servers:begin (bench/servers/servers.py) -->", "<!-- servers:end -->"

HTTP_RUNTIMES = ["fern", "go_http", "fasthttp", "nginx", "epoll", "pthread", "java"]
ECHO_RUNTIMES = ["fern", "go", "epoll", "pthread", "java"]
CONNS = [64, 256, 1024]
PIPELINE = 16
SATURATED_PCT = 90.0

DESCR = {
    "http": {
        "fern": "examples/http: one green thread per connection, --workers 1",
        "go_http": "bench/servers/go_http: Go net/http, GOMAXPROCS 1 (pinned)",
        "fasthttp": "bench/servers/go_fasthttp: fasthttp (Go module), GOMAXPROCS 1",
        "nginx": "nginx, bench/servers/nginx.conf: worker_processes 1, `return 200`, access_log off "
                 "(master + 1 worker; CPU of both counted)",
        "epoll": "bench/servers/epoll_http.c: one thread, edge-triggered epoll (the cost floor)",
        "pthread": "bench/servers/pthread_http.c: one kernel thread per connection, blocking sockets",
        "java": "bench/servers/java/VtServer.java http: hand-written, one virtual thread per connection "
                "over blocking java.net.Socket streams (not com.sun.net.httpserver); parallelism 1",
    },
    "echo": {
        "fern": "examples/echo_server: one green thread per connection, --workers 1",
        "go": "bench/servers/go_echo: goroutine per connection, GOMAXPROCS 1",
        "epoll": "bench/servers/epoll_echo.c: one thread, edge-triggered epoll (the cost floor)",
        "pthread": "bench/servers/pthread_echo.c: one kernel thread per connection, blocking sockets",
        "java": "bench/servers/java/VtServer.java echo: one virtual thread per connection; parallelism 1",
    },
}


# ---------------------------------------------------------------------------
# Building
# ---------------------------------------------------------------------------

def build_all(args, out):
    """Returns ({name: path or 'not built: ...'}, [notes])."""
    bins, notes = {}, []
    bdir = os.path.join(ROOT, args.build_dir)
    cc = os.environ.get("CC", "cc")
    # fern: the library, then the example servers (CMake targets when
    # examples/servers.cmake is included, otherwise compiled here).
    if not args.no_build_lib and (os.path.exists(os.path.join(bdir, "build.ninja")) or
                                  os.path.exists(os.path.join(bdir, "Makefile"))):
        rc, msg = sh(["cmake", "--build", bdir, "--target", "fern"], timeout=600)
        if rc != 0:
            notes.append("cmake --build %s --target fern failed: %s" % (args.build_dir, msg.strip()[-300:]))
    have_targets = False
    try:
        with open(os.path.join(bdir, "build.ninja")) as f:
            have_targets = re.search(r"^build examples/http:", f.read(), re.M) is not None
    except OSError:
        pass
    lib = os.path.join(bdir, "libfern.a")
    fern_ex = {"http": ["examples/http.c", "examples/http_parser.c"], "echo_server": ["examples/echo_server.c"],
               "rpc": ["examples/rpc.c"]}
    if have_targets and not args.no_build_lib:
        rc, msg = sh(["cmake", "--build", bdir, "--target"] + list(fern_ex), timeout=600)
        for e in fern_ex:
            p = os.path.join(bdir, "examples", e)
            bins["fern_" + e] = p if rc == 0 and os.access(p, os.X_OK) else \
                "not built: cmake target %s: %s" % (e, msg.strip()[-300:])
        notes.append("fern servers: CMake targets in %s/examples" % args.build_dir)
    else:
        for e, srcs in fern_ex.items():
            p = os.path.join(out, "fern_" + e)
            if not os.path.exists(lib):
                bins["fern_" + e] = "not built: %s missing" % lib
                continue
            rc, msg = sh([cc, "-O2", "-D_GNU_SOURCE", "-I", os.path.join(ROOT, "include"), "-o", p] +
                         [os.path.join(ROOT, s) for s in srcs] + [lib, "-lpthread"], timeout=300)
            bins["fern_" + e] = p if rc == 0 else "not built: cc failed: " + msg.strip()[-300:]
        notes.append("fern servers: compiled by servers.py against %s/libfern.a (examples/servers.cmake "
                     "not included in examples/CMakeLists.txt yet)" % args.build_dir)
    # C peers and the echo load client.
    for name in ("epoll_http", "epoll_echo", "pthread_http", "pthread_echo", "echo_load"):
        p = os.path.join(out, name)
        rc, msg = sh([cc, "-O2", "-Wall", "-Wextra", "-o", p, os.path.join(SRV, name + ".c"), "-lpthread"],
                     timeout=120)
        bins[name] = p if rc == 0 else "not built: cc failed: " + msg.strip()[-300:]
    # Go peers: offline, except fasthttp's module (fetched once through the
    # module proxy into the module cache when go.sum's versions are missing).
    if not os.access(GO, os.X_OK):
        for n in ("go_http", "go_echo", "go_fasthttp"):
            bins[n] = "not built: go not found"
    else:
        env = dict(os.environ, **GO_ENV)
        for n in ("go_http", "go_echo"):
            p = os.path.join(out, n)
            rc, msg = sh([GO, "build", "-o", p, "./" + n], cwd=SRV, env=env, timeout=300)
            bins[n] = p if rc == 0 else "not built: go build failed: " + msg.strip()[-300:]
        p = os.path.join(out, "go_fasthttp")
        fdir = os.path.join(SRV, "go_fasthttp")
        rc, msg = sh([GO, "build", "-o", p, "."], cwd=fdir, env=env, timeout=300)
        if rc != 0:
            env2 = dict(env, GOPROXY=os.environ.get("GOPROXY", "https://proxy.golang.org"))
            log("  fetching %s through the module proxy (once)" % FASTHTTP)
            rc, msg = sh([GO, "mod", "download"], cwd=fdir, env=env2, timeout=300)
            if rc == 0:
                rc, msg = sh([GO, "build", "-o", p, "."], cwd=fdir, env=env, timeout=300)
            if rc == 0:
                notes.append("fasthttp fetched through the module proxy (go mod download)")
        bins["go_fasthttp"] = p if rc == 0 else "not built: go build failed: " + msg.strip()[-300:]
    # Java.
    bins["java"] = build_java(os.path.join(SRV, "java", "VtServer.java"), out)
    bins["nginx"] = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx")
                                              else "not built: nginx not installed (apt-get install nginx)")
    bins["wrk"] = shutil.which("wrk") or "not built: wrk not installed (apt-get install wrk)"
    for k, v in sorted(bins.items()):
        if v.startswith("not built"):
            notes.append("%s: %s" % (k, v))
    return bins, notes


def server_argv(scen, rt, bins, port_hint, tmp):
    """argv list (without taskset) or 'not built: ...'. nginx gets a config in tmp."""
    w = ["--port", "0", "--workers", "1"]
    key = {("http", "fern"): "fern_http", ("echo", "fern"): "fern_echo_server",
           ("http", "go_http"): "go_http", ("http", "fasthttp"): "go_fasthttp", ("echo", "go"): "go_echo",
           ("http", "epoll"): "epoll_http", ("echo", "epoll"): "epoll_echo",
           ("http", "pthread"): "pthread_http", ("echo", "pthread"): "pthread_echo",
           ("http", "java"): "java", ("echo", "java"): "java", ("http", "nginx"): "nginx"}[(scen, rt)]
    b = bins.get(key, "not built")
    if b.startswith("not built"):
        return b
    if rt == "java":
        return [JAVA, "-Xss256k", "-XX:+UseParallelGC", "-Djdk.virtualThreadScheduler.parallelism=1",
                "-cp", b, "VtServer", scen] + w
    if rt == "nginx":
        with open(os.path.join(SRV, "nginx.conf")) as f:
            conf = f.read().replace("@PORT@", str(port_hint)).replace("@DIR@", tmp)
        for d in ("logs", "tmp"):
            os.makedirs(os.path.join(tmp, d), exist_ok=True)
        cpath = os.path.join(tmp, "nginx.conf")
        with open(cpath, "w") as f:
            f.write(conf)
        return [b, "-p", tmp, "-c", cpath, "-e", os.path.join(tmp, "logs", "error.log")]
    return [b] + w


# ---------------------------------------------------------------------------
# Processes
# ---------------------------------------------------------------------------

TCK = os.sysconf("SC_CLK_TCK")


def session_cpu(sid):
    """user+sys seconds of every live process in session sid (threads included)."""
    tot = 0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                s = f.read()
        except OSError:
            continue
        f = s[s.rindex(")") + 2:].split()
        # f[0]=state f[1]=ppid f[2]=pgrp f[3]=session ... f[11]=utime f[12]=stime
        if int(f[3]) == sid:
            tot += int(f[11]) + int(f[12])
    return tot / TCK


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Server:
    def __init__(self, scen, rt, argv, tmp):
        self.scen, self.rt, self.tmp = scen, rt, tmp
        self.errpath = os.path.join(tmp, "%s_%s.stderr" % (scen, rt))
        self.err = open(self.errpath, "w+")
        self.p = subprocess.Popen(["taskset", "-c", SERVER_CPU] + argv, stdout=subprocess.PIPE,
                                  stderr=self.err, text=True, start_new_session=True)
        self.port = None

    def wait_ready(self, timeout, nginx_port=None):
        end = time.monotonic() + timeout
        if nginx_port:
            while time.monotonic() < end:
                if self.p.poll() is not None:
                    return "exited early (%s): %s" % (self.p.returncode, self.stderr_tail())
                try:
                    socket.create_connection(("127.0.0.1", nginx_port), timeout=1).close()
                    self.port = nginx_port
                    return None
                except OSError:
                    time.sleep(0.05)
            return "no answer on port %d within %ds" % (nginx_port, timeout)
        import select
        buf = ""
        while time.monotonic() < end:
            r, _, _ = select.select([self.p.stdout], [], [], 0.2)
            if r:
                line = self.p.stdout.readline()
                if not line:
                    return "exited before `listening on` (%s): %s" % (self.p.poll(), self.stderr_tail())
                buf += line
                m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                    return None
            elif self.p.poll() is not None:
                return "exited before `listening on` (%s): %s" % (self.p.returncode, self.stderr_tail())
        return "no `listening on` line within %ds (stdout: %r)" % (timeout, buf[-200:])

    def cpu(self):
        return session_cpu(self.p.pid)

    def stderr_tail(self, n=300):
        try:
            if not self.err.closed:
                self.err.flush()
            with open(self.errpath) as f:
                return f.read().strip().replace("\n", " / ")[-n:]
        except OSError:
            return ""

    def stop(self, grace=5.0):
        """SIGTERM; returns None if it exited within grace seconds, else a problem string."""
        if self.p.poll() is not None:
            return "had already exited (%s) before SIGTERM: %s" % (self.p.returncode, self.stderr_tail())
        t0 = time.monotonic()
        self.p.send_signal(signal.SIGTERM)
        try:
            rc = self.p.wait(timeout=grace)
            problem = None
            # Java exits 143 on SIGTERM (its normal way); everyone else should exit 0.
            if rc != 0 and not (self.rt == "java" and rc == 143):
                problem = "exit status %s after SIGTERM: %s" % (rc, self.stderr_tail())
        except subprocess.TimeoutExpired:
            problem = "did not exit within %.0fs of SIGTERM (killed): %s" % (grace, self.stderr_tail())
        # Whatever is left in its session (nginx worker, stray children).
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            self.p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self.stop_s = time.monotonic() - t0
        self.p.stdout.close()
        self.err.close()
        return problem


def sanity(scen, port):
    """One request / one echo through a plain socket; None if fine."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=3) as s:
            if scen == "http":
                s.sendall(b"GET /plaintext HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                data = b""
                while b"Hello, World!" not in data and len(data) < 4096:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                if not data.startswith(b"HTTP/1.1 200") or b"Hello, World!" not in data:
                    return "bad answer to GET /plaintext: %r" % data[:200]
            else:
                msg = bytes(range(64))
                s.sendall(msg)
                data = b""
                while len(data) < 64:
                    chunk = s.recv(64 - len(data))
                    if not chunk:
                        break
                    data += chunk
                if data != msg:
                    return "bad echo: %r" % data[:80]
    except OSError as e:
        return "sanity request failed: %s" % e
    return None


# ---------------------------------------------------------------------------
# Load
# ---------------------------------------------------------------------------

def to_us(v, unit):
    return float(v) * {"us": 1, "ms": 1e3, "s": 1e6}[unit]


def run_load(argv, timeout):
    """Run the load generator pinned to CLIENT_CPU; returns (rc, out, wall s, client cpu s)."""
    t0 = time.monotonic()
    p = subprocess.Popen(["taskset", "-c", CLIENT_CPU] + argv, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return -9, "timed out after %ds: %s" % (timeout, out[-300:]), time.monotonic() - t0, 0.0
    # communicate() reaped it; its rusage is in RUSAGE_CHILDREN deltas (taken by the caller).
    return p.returncode, out, time.monotonic() - t0, None


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def parse_wrk(out):
    m = re.search(r"Requests/sec:\s*([0-9.]+)", out)
    if not m:
        return None, "no Requests/sec in wrk output: " + out.strip()[-300:]
    res = {"rps": float(m.group(1))}
    for q, name in (("50", "p50_us"), ("99", "p99_us")):
        mm = re.search(r"^\s*%s(?:\.000)?%%\s+([0-9.]+)(us|ms|s)\s*$" % q, out, re.M)
        if mm and float(mm.group(1)) > 0:  # wrk prints 0.00us when its histogram has no such rank
            res[name] = to_us(mm.group(1), mm.group(2))
    mm = re.search(r"(\d+) requests in", out)
    res["requests"] = int(mm.group(1)) if mm else 0
    errs = 0
    mm = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if mm:
        errs += sum(int(x) for x in mm.groups())
    mm = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if mm:
        errs += int(mm.group(1))
    res["errors"] = errs
    return res, None


def parse_echo(out):
    m = re.search(r"rps ([0-9.]+) p50_us ([0-9.]+) p99_us ([0-9.]+).*errors (\d+)", out)
    if not m:
        return None, "no result line from echo_load: " + out.strip()[-300:]
    mm = re.search(r"round_trips (\d+)", out)
    return {"rps": float(m.group(1)), "p50_us": float(m.group(2)), "p99_us": float(m.group(3)),
            "errors": int(m.group(4)), "requests": int(mm.group(1)) if mm else 0}, None


def configs(scen):
    if scen == "http":
        return ["c%d" % c for c in CONNS] + ["c%d_p%d" % (c, PIPELINE) for c in CONNS]
    return ["c%d" % c for c in CONNS]


def load_argv(scen, cfg, port, bins, duration, warmup_only=False):
    conns = int(re.match(r"c(\d+)", cfg).group(1))
    if scen == "http":
        a = [bins["wrk"], "-t1", "-c%d" % conns, "-d%gs" % duration, "--timeout", "5s", "--latency"]
        if "_p" in cfg:
            a += ["-s", os.path.join(SRV, "pipeline.lua")]
        a.append("http://127.0.0.1:%d/plaintext" % port)
        if "_p" in cfg:
            a += ["--", str(PIPELINE)]
        return a
    return [bins["echo_load"], "--port", str(port), "--conns", str(conns), "--size", "64",
            "--duration", "%g" % duration, "--warmup", "0" if warmup_only else "0.5"]


def one_server_round(scen, rt, bins, args, tmp, rec):
    """Start rt's server, warm it up, run every config once, stop it. Appends to rec."""
    port_hint = free_port() if rt == "nginx" else None
    ntmp = tempfile.mkdtemp(prefix="nginx-", dir=tmp) if rt == "nginx" else tmp
    argv = server_argv(scen, rt, bins, port_hint, ntmp)
    if isinstance(argv, str):
        rec["status"] = argv
        return
    rec.setdefault("command", " ".join(os.path.relpath(a, ROOT) if a.startswith(ROOT) else a for a in argv))
    srv = Server(scen, rt, argv, ntmp)
    why = srv.wait_ready(30, nginx_port=port_hint)
    if why:
        rec["problems"].append("start: " + why)
        srv.stop()
        return
    bad = sanity(scen, srv.port)
    if bad:
        rec["problems"].append(bad)
    # Warm-up: same load as the 256-connection run (JIT for Java, caches, stacks).
    wu = args.warmup * (3 if rt == "java" else 1)
    if wu > 0:
        run_load(load_argv(scen, "c256", srv.port, bins, wu, warmup_only=True), timeout=wu + 30)
    for cfg in configs(scen):
        if srv.p.poll() is not None:
            rec["problems"].append("%s: server died (%s): %s" % (cfg, srv.p.returncode, srv.stderr_tail()))
            break
        c0, k0 = srv.cpu(), children_cpu()
        rc, out, wall, _ = run_load(load_argv(scen, cfg, srv.port, bins, args.duration), args.duration + 30)
        c1, k1 = srv.cpu(), children_cpu()
        res, err = (parse_wrk(out) if scen == "http" else parse_echo(out)) if rc != -9 else (None, out)
        if res is None:
            rec["problems"].append("%s: %s" % (cfg, err))
            log("    %s %-8s %-9s FAILED %s" % (scen, rt, cfg, err[-200:]))
            continue
        scpu = max(c1 - c0, 0.0)
        res["server_cpu_s"] = scpu
        res["wall_s"] = wall
        res["client_cpu_pct"] = 100.0 * (k1 - k0) / wall if wall > 0 else 0.0
        res["rps_per_cpu_s"] = res["requests"] / scpu if scpu > 0 else None
        if res.get("errors"):
            rec["problems"].append("%s: %d errors (socket errors / non-2xx / broken connections)" %
                                   (cfg, res["errors"]))
        rec["runs"].setdefault(cfg, []).append(res)
        log("    %s %-8s %-9s %9.0f rps  p50 %8.0f us  p99 %8.0f us  server cpu %.2fs  client cpu %3.0f%%%s" % (
            scen, rt, cfg, res["rps"], res.get("p50_us", -1), res.get("p99_us", -1), scpu,
            res["client_cpu_pct"], "  errors %d" % res["errors"] if res.get("errors") else ""))
    problem = srv.stop()
    if problem:
        rec["problems"].append("stop: " + problem)
    tail = srv.stderr_tail(2000)
    # Keep only lines that look like trouble (the servers print "signal, stopping").
    for line in tail.split(" / "):
        if line and re.search(r"error|fail|abort|assert|warn|still open|back", line, re.I) \
                and line not in rec["stderr"]:
            rec["stderr"].append(line[:300])


def summarize(rec):
    stats = {}
    for cfg, runs in rec["runs"].items():
        st = {}
        for k in ("rps", "p50_us", "p99_us", "server_cpu_s", "rps_per_cpu_s", "client_cpu_pct", "errors"):
            vals = [r[k] for r in runs if r.get(k) is not None]
            if vals:
                st[k] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
                         "n": len(vals), "values": vals}
        stats[cfg] = st
    rec["stats"] = stats


def run_rpc(bins, runs):
    b = bins.get("fern_rpc", "not built")
    rec = {"status": "ok", "runs": [], "problems": []}
    if b.startswith("not built"):
        rec["status"] = b
        return rec
    rec["command"] = os.path.relpath(b, ROOT) if b.startswith(ROOT) else b
    for i in range(runs):
        rc, out = sh([b], timeout=120)
        f = re.search(r"rpc fern round_trip ([0-9.]+) us", out)
        p = re.search(r"rpc pthreads round_trip ([0-9.]+) us", out)
        if rc != 0 or not f or not p:
            rec["problems"].append("run %d: exit %s: %s" % (i + 1, rc, out.strip()[-300:]))
            continue
        hdr = re.search(r"^# (.*)$", out, re.M)
        if hdr:
            rec["header"] = hdr.group(1)
        rec["runs"].append({"fern_us": float(f.group(1)), "pthreads_us": float(p.group(1))})
        log("    rpc run %d: fern %.2f us, pthreads %.2f us" % (i + 1, float(f.group(1)), float(p.group(1))))
    for k in ("fern_us", "pthreads_us"):
        vals = [r[k] for r in rec["runs"]]
        if vals:
            rec.setdefault("stats", {})[k] = {"median": statistics.median(vals), "min": min(vals),
                                              "max": max(vals), "n": len(vals)}
    if rec["problems"] and not rec["runs"]:
        rec["status"] = "failed"
    return rec


# ---------------------------------------------------------------------------
# Targets, report
# ---------------------------------------------------------------------------

def med(data, scen, rt, cfg, k):
    try:
        return data["scenarios"][scen]["results"][rt]["stats"][cfg][k]["median"]
    except (KeyError, TypeError):
        return None


def targets(data):
    out = []

    def ratio_row(name, scen, cfg, peer, want, lower_better=False):
        for metric, label in (("rps", "requests/s"), ("rps_per_cpu_s", "requests per server-CPU-second")):
            if lower_better and metric != "rps":
                continue
            k = "p99_us" if lower_better else metric
            f, p = med(data, scen, "fern", cfg, k), med(data, scen, peer, cfg, k)
            if not f or not p:
                r = None
            else:
                r = p / f if lower_better else f / p
            ccpu = med(data, scen, peer, cfg, "client_cpu_pct")
            fcpu = med(data, scen, "fern", cfg, "client_cpu_pct")
            sat = max(ccpu or 0, fcpu or 0) >= SATURATED_PCT
            out.append({"target": name, "figure": "p99 latency (peer/fern)" if lower_better else label,
                        "ratio": r, "want": want, "met": None if r is None else r >= want,
                        "client_saturated": sat})

    ratio_row("http 256 conns, no pipelining: fern >= 1.3x Go net/http", "http", "c256", "go_http", 1.3)
    ratio_row("http 256 conns, no pipelining: fern >= 0.85x epoll loop", "http", "c256", "epoll", 0.85)
    ratio_row("http 256 conns, no pipelining: fern p99 <= Go net/http p99", "http", "c256", "go_http", 1.0,
              lower_better=True)
    ratio_row("http 256 conns, pipelining 16: fern >= fasthttp", "http", "c256_p16", "fasthttp", 1.0)
    ratio_row("echo 64 B, 256 conns: fern >= 1.3x Go", "echo", "c256", "go", 1.3)
    rpc = data["scenarios"].get("rpc", {}).get("stats", {})
    if rpc.get("fern_us") and rpc.get("pthreads_us"):
        r = rpc["pthreads_us"]["median"] / rpc["fern_us"]["median"]
        out.append({"target": "rpc: fern round trip faster than two dedicated pthreads",
                    "figure": "round-trip time (pthreads/fern)", "ratio": r, "want": 1.0, "met": r > 1.0,
                    "client_saturated": False})
    return out


def fmt(v, nd=0):
    if v is None:
        return "—"
    if abs(v) >= 1e6:
        return "%.2f M" % (v / 1e6)
    if abs(v) >= 1e4:
        return "%.0f k" % (v / 1e3) if abs(v) >= 1e5 else "%.1f k" % (v / 1e3)
    return ("%%.%df" % nd) % v


def cell(st, k, nd=0, unit=""):
    s = st.get(k)
    if not s:
        return "—"
    if s["n"] == 1:
        return fmt(s["median"], nd) + unit
    return "%s%s [%s – %s]" % (fmt(s["median"], nd), unit, fmt(s["min"], nd), fmt(s["max"], nd))


def section(data):
    m = data["machine"]
    L = [BEGIN, "## Servers", ""]
    quick = data.get("quick")
    L += ["Generated by `bench/servers/servers.py`%s on %s (%s, %s cores, Linux %s). wrk: %s; nginx: %s; go: %s; java: %s." % (
        " --quick (**smoke run: 1 run, short loads — not for quoting**)" if quick else "",
        m["date"], m["cpu"], m["cores"], m["kernel"], m["wrk"], m["nginx"], m["go"], m["java"]), ""]
    L += ["Servers pinned to CPU %s, load generator to CPU %s, 127.0.0.1 only; %d run(s) per runtime, interleaved "
          "round by round (each round starts every server afresh, warms it up with %gs of 256-connection load — "
          "Java 3x that — then runs every configuration for %gs). Cells: median [min – max]. "
          "**server CPU** = user+sys of the server's processes during the load (from /proc/PID/stat); "
          "**req/CPU-s** = requests per second of server CPU time. **client CPU** = the load generator's CPU use: "
          "at >= %d%% the client is the bottleneck and req/s measures it, so compare req/CPU-s there. "
          "CPU used by other processes meanwhile: %.0f%%%s." % (
              SERVER_CPU, CLIENT_CPU, data["runs"], data["warmup"], data["duration"], SATURATED_PCT,
              data.get("other_cpu_pct", -1),
              " — **the machine was shared: treat every figure with care**" if data.get("other_cpu_pct", 0) > 10
              else ""), ""]
    if data.get("plots"):
        L += ["Plot: " + ", ".join("[%s](%s)" % (os.path.basename(p), os.path.basename(p))
                                    for p in data["plots"]) + ".", ""]
    else:
        L += ["Plot: none (%s)." % data.get("plots_note", "matplotlib not importable"), ""]
    tg = targets(data)
    if tg:
        L += ["### Targets", "", "| target | figure | ratio | want | met | note |", "| --- | --- | --- | --- | --- | --- |"]
        for t in tg:
            L.append("| %s | %s | %s | >= %.2f | %s | %s |" % (
                t["target"], t["figure"], "—" if t["ratio"] is None else "**%.2f**" % t["ratio"], t["want"],
                "—" if t["met"] is None else ("yes" if t["met"] else "**no**"),
                "client saturated: compare the per-CPU-second row" if t["client_saturated"] else ""))
        L += ["", "Ratio = fern/peer for throughput, peer/fern for latency and round-trip time: above 1 = fern better.", ""]
    titles = {"http": "HTTP/1.1 plaintext (GET /plaintext -> Hello, World!), wrk -t1",
              "echo": "TCP echo, 64-byte messages, one in flight per connection (bench/servers/echo_load)"}
    for scen in ("http", "echo"):
        sc = data["scenarios"].get(scen)
        if not sc:
            continue
        L += ["### " + titles[scen], ""]
        L += ["| config | runtime | req/s | p50 µs | p99 µs | server CPU s | req/CPU-s | client CPU % | ratio req/s | ratio req/CPU-s |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for cfg in configs(scen):
            for rt in sc["runtimes"]:
                r = sc["results"][rt]
                st = r.get("stats", {}).get(cfg)
                if not st:
                    continue
                rr = rc = "—"
                if rt != "fern":
                    f, p = med(data, scen, "fern", cfg, "rps"), st.get("rps", {}).get("median")
                    rr = "%.2f" % (f / p) if f and p else "—"
                    f, p = med(data, scen, "fern", cfg, "rps_per_cpu_s"), st.get("rps_per_cpu_s", {}).get("median")
                    rc = "%.2f" % (f / p) if f and p else "—"
                label = cfg.replace("c", "", 1).replace("_p", " conns, pipeline ") if "_p" in cfg else \
                    cfg[1:] + " conns"
                L.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                    label, "**fern**" if rt == "fern" else rt, cell(st, "rps"), cell(st, "p50_us"),
                    cell(st, "p99_us"), cell(st, "server_cpu_s", 2), cell(st, "rps_per_cpu_s"),
                    cell(st, "client_cpu_pct"), rr, rc))
        L.append("")
        L += ["- %s: %s" % (rt, DESCR[scen][rt]) for rt in sc["runtimes"]]
        if scen == "http":
            L.append("- Pipelining: bench/servers/pipeline.lua sends %d requests per write; wrk records one latency "
                     "per batch, so the pipelined p50/p99 are per 16 requests; wrk 4.1 often prints a 99%% of 0.00us "
                     "under pipelining (its percentile is taken over the request count, not the batch count): "
                     "shown as —." % PIPELINE)
        else:
            L.append("- echo_load: one thread, one epoll loop, connects all connections first, measures after a "
                     "0.5 s warm-up; rps = round trips per second; latency = send to last echoed byte.")
        for rt in sc["runtimes"]:
            r = sc["results"][rt]
            if r.get("status", "ok") != "ok":
                L.append("- **%s**: %s" % (rt, r["status"]))
            for p in r.get("problems", []):
                L.append("- **%s problem**: %s" % (rt, p.replace("|", "/")[:300]))
            for p in r.get("stderr", [])[:5]:
                L.append("- %s stderr: `%s`" % (rt, p.replace("`", "'")[:200]))
        L.append("")
    rpc = data["scenarios"].get("rpc")
    if rpc:
        L += ["### rpc: request/response over loopback TCP in one process (examples/rpc)", ""]
        if rpc.get("stats"):
            st = rpc["stats"]
            r = st["pthreads_us"]["median"] / st["fern_us"]["median"]
            L += ["| runtime | round trip µs | ratio |", "| --- | --- | --- |",
                  "| **fern** (client + server green threads, 1 worker) | %s | |" % cell(st, "fern_us", 2),
                  "| pthreads (two dedicated kernel threads, blocking sockets) | %s | **%.2f** |" % (
                      cell(st, "pthreads_us", 2), r), ""]
            L.append("- %d separate runs of `%s` (not pinned; fern and pthreads alternate inside each run). %s" % (
                len(rpc["runs"]), rpc.get("command", "rpc"), rpc.get("header", "")))
        if rpc.get("status", "ok") != "ok":
            L.append("- **status**: " + rpc["status"])
        for p in rpc.get("problems", []):
            L.append("- **problem**: " + p.replace("|", "/")[:300])
        L.append("")
    if data.get("build"):
        L += ["Build notes: " + "; ".join(data["build"]), ""]
    L.append(END)
    return "\n".join(L) + "\n"


def put_section(path, text):
    try:
        with open(path) as f:
            old = f.read()
    except OSError:
        old = ""
    if BEGIN in old and END in old:
        a = old.index(BEGIN)
        b = old.index(END) + len(END)
        new = old[:a] + text.rstrip("\n") + old[b:]
    else:
        new = old.rstrip("\n") + ("\n\n" if old else "") + text
    with open(path, "w") as f:
        f.write(new)


def plots(data, outdir):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:  # noqa: BLE001
        return [], "matplotlib not importable; no PNG plot written"
    panels = [(s, c) for s in ("http", "echo") if s in data["scenarios"] for c in configs(s)]
    if not panels:
        return [], "no data"
    fig, axes = plt.subplots(2, len(panels), figsize=(3.0 * len(panels), 6), squeeze=False)
    for i, (s, c) in enumerate(panels):
        sc = data["scenarios"][s]
        for row, k in enumerate(("rps", "rps_per_cpu_s")):
            names, vals, lo, hi = [], [], [], []
            for rt in sc["runtimes"]:
                v = med(data, s, rt, c, k)
                if v:
                    st = sc["results"][rt]["stats"][c][k]
                    names.append(rt)
                    vals.append(v)
                    lo.append(v - st.get("min", v))
                    hi.append(st.get("max", v) - v)
            ax = axes[row][i]
            # Error bars: the range (min to max) of the runs; the bar is the median.
            ax.bar(names, vals, yerr=[lo, hi], capsize=2,
                   color=["#2a7" if n == "fern" else "#888" for n in names])
            ax.set_title("%s %s\n%s" % (s, c, "req/s" if k == "rps" else "req per server CPU-s"), fontsize=8)
            ax.tick_params(axis="x", labelrotation=60, labelsize=7)
    fig.tight_layout()
    p = os.path.join(outdir, "servers.png")
    fig.savefig(p, dpi=100)
    plt.close(fig)
    return [p], ""


def machine(bins):
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    rc, jv = sh([JAVA, "-version"], timeout=30)
    rc2, nv = sh([bins["nginx"], "-v"], timeout=30) if not bins["nginx"].startswith("not") else (1, "")
    rc3, wv = sh([bins["wrk"], "-v"], timeout=30) if not bins["wrk"].startswith("not") else (1, "")
    return {"cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "go": first_line([GO, "version"]),
            "java": jv.strip().splitlines()[0] if rc == 0 and jv.strip() else "not found",
            "nginx": nv.strip().splitlines()[0] if nv.strip() else "not found",
            "wrk": wv.strip().splitlines()[0] if wv.strip() else "not found"}


class CpuMeter:
    """Share of the machine's CPU used by processes other than this driver's children."""

    def __init__(self):
        self.t0, self.b0, self.o0 = time.monotonic(), self.busy(), self.own()

    @staticmethod
    def busy():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / TCK

    @staticmethod
    def own():
        c, me = resource.getrusage(resource.RUSAGE_CHILDREN), resource.getrusage(resource.RUSAGE_SELF)
        return c.ru_utime + c.ru_stime + me.ru_utime + me.ru_stime

    def foreign_pct(self, extra_own=0.0):
        wall = time.monotonic() - self.t0
        other = (self.busy() - self.b0) - (self.own() - self.o0) - extra_own
        return max(0.0, 100.0 * other / (wall * (os.cpu_count() or 1)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="run rounds (default 5; --quick: 1)")
    ap.add_argument("--duration", type=float, default=3.0, help="seconds per load run (default 3; --quick: 1)")
    ap.add_argument("--warmup", type=float, default=1.0,
                    help="warm-up seconds per server start (default 1, Java 3x; --quick: 0.5)")
    ap.add_argument("--quick", action="store_true", help="smoke run; writes servers-quick.json and quick.md")
    ap.add_argument("--only", action="append", choices=["http", "echo", "rpc"])
    ap.add_argument("--runtimes", help="comma-separated subset, e.g. fern,go_http,epoll")
    ap.add_argument("--build-dir", default="build/release", help="CMake build dir with libfern.a")
    ap.add_argument("--no-build-lib", action="store_true",
                    help="do not run cmake --build on the fern library (use libfern.a as is)")
    ap.add_argument("--md-only", action="store_true", help="re-render the Markdown section from the JSON")
    ap.add_argument("--plots-only", action="store_true",
                    help="redraw the PNG plot and the Markdown section from the JSON (no runs)")
    args = ap.parse_args()
    if args.quick:
        args.runs = 1 if args.runs == 5 else args.runs
        args.duration = 1.0 if args.duration == 3.0 else args.duration
        args.warmup = 0.5 if args.warmup == 1.0 else args.warmup
    if args.duration <= 0 or args.duration > 60:
        ap.error("--duration must be in (0, 60] (every load run is bounded)")
    resdir = os.path.join(HERE, "results")
    os.makedirs(resdir, exist_ok=True)
    jpath = os.path.join(resdir, "servers-quick.json" if args.quick else "servers.json")
    mdpath = os.path.join(resdir, "quick.md" if args.quick else "latest.md")
    if args.md_only or args.plots_only:
        with open(jpath) as f:
            data = json.load(f)
        if args.plots_only:
            files, note = plots(data, resdir)
            data["plots"] = [os.path.relpath(p, HERE) for p in files]
            data["plots_note"] = note
            with open(jpath, "w") as f:
                json.dump(data, f, indent=1, sort_keys=True)
        put_section(mdpath, section(data))
        log("wrote the Servers section of %s" % os.path.relpath(mdpath, ROOT))
        return 0

    # 1024 connections: both sides need more than 1024 descriptors.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, 65536) if hard != resource.RLIM_INFINITY else 65536
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    start = time.monotonic()
    out = os.path.join(ROOT, "build", "bench", "servers")
    os.makedirs(out, exist_ok=True)
    log("building into %s" % os.path.relpath(out, ROOT))
    bins, notes = build_all(args, out)
    for n in notes:
        log("  " + n)
    if bins["wrk"].startswith("not") and "http" in (args.only or ["http"]):
        log("  " + bins["wrk"])
    scen = args.only or ["http", "echo", "rpc"]
    sel = set(args.runtimes.split(",")) if args.runtimes else None
    data = {"scenarios": {}, "runs": args.runs, "duration": args.duration, "warmup": args.warmup,
            "quick": args.quick, "build": notes or ["all programs built"]}
    data["machine"] = machine(bins)
    meter = CpuMeter()
    tmp = tempfile.mkdtemp(prefix="fern-servers-")
    try:
        for s in ("http", "echo"):
            if s not in scen:
                continue
            rts = [rt for rt in (HTTP_RUNTIMES if s == "http" else ECHO_RUNTIMES) if not sel or rt in sel]
            if "fern" not in rts:
                rts.insert(0, "fern")
            res = {rt: {"status": "ok", "runs": {}, "problems": [], "stderr": []} for rt in rts}
            data["scenarios"][s] = {"runtimes": rts, "results": res}
            if s == "http" and bins["wrk"].startswith("not"):
                for rt in rts:
                    res[rt]["status"] = bins["wrk"]
                continue
            for i in range(args.runs):
                log("%s round %d/%d" % (s, i + 1, args.runs))
                for rt in rts:
                    if res[rt]["status"] != "ok":
                        continue
                    one_server_round(s, rt, bins, args, tmp, res[rt])
            for rt in rts:
                summarize(res[rt])
        if "rpc" in scen:
            log("rpc (%d runs)" % args.runs)
            data["scenarios"]["rpc"] = run_rpc(bins, args.runs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    # The servers and load generators are this driver's children, so their
    # CPU is "own"; the rest is other people's work on the machine.
    data["other_cpu_pct"] = round(meter.foreign_pct(), 1)
    files, note = plots(data, resdir) if not args.quick else ([], "quick mode: no plot")
    data["plots"] = [os.path.relpath(p, HERE) for p in files]
    data["plots_note"] = note
    with open(jpath, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    put_section(mdpath, section(data))
    log("wrote %s and the Servers section of %s (%.0f s)" % (
        os.path.relpath(jpath, ROOT), os.path.relpath(mdpath, ROOT), time.monotonic() - start))
    for t in targets(data):
        log("  target: %-62s %-36s %s" % (t["target"], t["figure"],
                                          "—" if t["ratio"] is None else "%.2f (%s)" % (
                                              t["ratio"], "met" if t["met"] else "NOT met")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
