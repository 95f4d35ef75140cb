#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""fern-hook benchmarks (docs/hooks.md): hook-sleep, hook-pg, hook-redis
(green threads vs pthreads vs redis-benchmark -c 200, same run),
hook-plain (a pthread's pipe round trip with and without fern-hook) and
hook-file (random 4 KiB preads of a 2 GiB file with the page cache
dropped, 64 green threads vs 64 pthreads, and page-cache hits against the
raw system call; --file-only runs just this one). The file is written in
the temporary directory (2 GiB of disk: checked first) and deleted at the
end; dropping the cache needs root (/proc/sys/vm/drop_caches), else the
file's own pages are dropped with posix_fadvise.
hook-lock (pthread locking code on 200 green threads vs 200 pthreads:
condvar, mutex across a hooked call, rwlock + semaphore, plain producer,
SQLite 100 x 50, and a plain thread's uncontended mutex with and without
fern-hook; bench/hooks/hook_lock.c).

Starts its own redis-server and PostgreSQL on free 127.0.0.1 ports in temp
directories (PostgreSQL as the `postgres` user when run as root) and stops
them at the end. Runs are interleaved so a noisy machine hurts every side
alike; writes results/hooks.json and results/hooks.md with the load average
seen, so a shared machine is visible in the figures.

--redis-only runs just the wake-up scenario of issue 30's target: a 1 ms
ticker beside 200 green threads running unmodified hiredis (fern-hook,
default workers), then 200 pthreads, interleaved; each run is printed with
the load average, and results/hooks-redis.json written.

--sqlite-only runs just the SQLite scenario of issue 32's target (100 green
threads x 50 transactions, then 100 pthreads, interleaved per run) and prints
each run with the load average and the green/pthread ratio.

usage: python3 bench/hooks/hooks.py [--build-dir build/rel] [--runs 5] [--only-locks]
       python3 bench/hooks/hooks.py --sqlite-only [--runs 3]
       python3 bench/hooks/hooks.py --redis-only [--runs 10] [--redis-seconds 3]
"""
import argparse, json, os, pwd, re, shutil, signal, socket, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # bench/


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def port_open(p):
    try:
        socket.create_connection(("127.0.0.1", p), timeout=0.2).close()
        return True
    except OSError:
        return False


class Server:
    def __init__(self, argv, user=None, log=None):
        pre = ["/usr/sbin/runuser", "-u", user, "--"] if user and os.geteuid() == 0 else []
        self.log = open(log, "ab")
        self.p = subprocess.Popen(pre + argv, stdout=self.log, stderr=self.log, start_new_session=True)

    def stop(self, sig=signal.SIGTERM):
        try:
            os.killpg(self.p.pid, sig)
            self.p.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.p.wait()


def start_redis(tmp):
    port = free_port()
    s = Server(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", tmp, "--maxclients", "10000"], log=tmp + "/redis.log")
    for _ in range(200):
        if port_open(port):
            return s, port
        time.sleep(0.05)
    s.stop()
    sys.exit("redis-server did not start:\n" + open(tmp + "/redis.log").read())


def start_pg(tmp):
    port = free_port()
    d = tmp + "/pg"
    os.mkdir(d)
    user = "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
    if os.geteuid() == 0:
        pw = pwd.getpwnam(user)
        os.chown(d, pw.pw_uid, pw.pw_gid)
    vers = sorted(os.listdir("/usr/lib/postgresql"))
    bindir = "/usr/lib/postgresql/%s/bin" % vers[-1]
    pre = ["/usr/sbin/runuser", "-u", user, "--"] if os.geteuid() == 0 else []
    log = d + "/log"
    with open(log, "ab") as lf:
        subprocess.check_call(pre + [bindir + "/initdb", "-D", d + "/data", "-A", "trust", "-U", user,
                                     "--no-sync"], stdout=lf, stderr=lf)
    s = Server([bindir + "/postgres", "-D", d + "/data", "-k", d, "-p", str(port), "-c",
                "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=300"],
               user=user, log=log)
    for _ in range(400):
        if port_open(port) and "ready to accept" in open(log).read():
            return s, "host=%s port=%d user=%s dbname=postgres" % (d, port, user)
        time.sleep(0.05)
    s.stop(signal.SIGINT)
    sys.exit("postgres did not start:\n" + open(log).read())


def run_json(argv, env=None):
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    sys.exit("%s failed (%d): %s %s" % (argv, out.returncode, out.stdout, out.stderr))


def redis_benchmark(port, n):
    out = subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", "200", "-n", str(n),
                          "-t", "set,get", "--csv", "-q"], capture_output=True, text=True, timeout=300).stdout
    rps = [float(m.group(1)) for m in re.finditer(r'^"(?:SET|GET)","([\d.]+)"', out, re.M)]
    if len(rps) != 2:
        sys.exit("redis-benchmark output not understood:\n" + out)
    return sum(rps) / 2


def loadavg():
    return float(open("/proc/loadavg").read().split()[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default="build/release")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--redis-seconds", type=float, default=3)
    ap.add_argument("--only-locks", action="store_true", help="only the hook-lock benchmarks (no servers)")
    ap.add_argument("--render", action="store_true", help="only rewrite results/hooks.md from results/hooks.json")
    ap.add_argument("--file-only", action="store_true", help="run only hook-file (results/hooks-file.*)")
    ap.add_argument("--file-mib", type=int, default=2048)
    ap.add_argument("--file-seconds", type=float, default=5)
    ap.add_argument("--redis-only", action="store_true",
                    help="only the hiredis wake-up scenario: 200 green threads (fern-hook, default workers) "
                         "beside a 1 ms ticker, then 200 pthreads, interleaved per run; prints each run "
                         "and writes results/hooks-redis.json (results/hooks.md is left alone)")
    ap.add_argument("--sqlite-only", action="store_true",
                    help="only hook-lock's SQLite scenario, green then pthreads per run; prints each run")
    a = ap.parse_args()
    if a.sqlite_only:
        b = os.path.join(a.build_dir, "bench")
        ratio = []
        for r in range(a.runs):
            g = run_json([b + "/hook_lock", "sqlite", "green", "100"])
            t = run_json([b + "/hook_lock_nohook", "sqlite", "pthread", "100"])
            ratio.append(t["wall_s"] / g["wall_s"])
            print("run %d/%d (load %.1f): green %.0f tx/s (rows %d, errors %d, ticker late %.1f ms), "
                  "pthreads %.0f tx/s (rows %d, errors %d): %.2fx"
                  % (r + 1, a.runs, loadavg(), g["rows"] / g["wall_s"], g["rows"], g["errors"],
                     g["ticker_late_max_ms"], t["rows"] / t["wall_s"], t["rows"], t["errors"], ratio[-1]),
                  flush=True)
        print("sqlite scenario, %d runs: green/pthread %.2fx median (min %.2f); target >= 0.9x in every run"
              % (len(ratio), med(ratio), min(ratio)))
        return
    if a.render:
        with open(os.path.join(HERE, "results", "hooks.json")) as f:
            write(json.load(f))
        return
    b = os.path.join(a.build_dir, "bench")
    tmp = tempfile.mkdtemp(prefix="fern-hookbench-")
    os.chmod(tmp, 0o755)
    if a.redis_only:
        redis = None
        runs = []
        try:
            redis, rport = start_redis(tmp)
            for r in range(a.runs):
                g = run_json([b + "/hook_redis", "green", str(rport), str(a.redis_seconds)])
                t = run_json([b + "/hook_redis", "pthread", str(rport), str(a.redis_seconds)])
                runs.append({"load": loadavg(), "green": g, "pthread": t})
                print("run %d/%d (load %.1f): ticker late max %.1f ms (plain pthread ticker %.1f ms), "
                      "hiredis %.0f ops/s green vs %.0f pthreads (%.2fx)"
                      % (r + 1, a.runs, runs[-1]["load"], g["ticker_late_max_ms"],
                         g.get("plain_ticker_late_max_ms", float("nan")), g["ops_per_s"], t["ops_per_s"],
                         g["ops_per_s"] / t["ops_per_s"]), flush=True)
        finally:
            if redis:
                redis.stop()
            shutil.rmtree(tmp, ignore_errors=True)
        late = [x["green"]["ticker_late_max_ms"] for x in runs]
        ratio = [x["green"]["ops_per_s"] / x["pthread"]["ops_per_s"] for x in runs]
        print("hiredis scenario, %d runs: ticker late max %.1f ms worst, %.1f median; rate %.2fx median "
              "(min %.2f) of 200 pthreads; target: <= 10 ms, >= 1.0x" %
              (len(runs), max(late), med(late), med(ratio), min(ratio)))
        with open(os.path.join(HERE, "results", "hooks-redis.json"), "w") as f:
            json.dump({"cpus": os.cpu_count(), "runs": runs}, f, indent=1)
        return
    if a.file_only:
        try:
            res = {"runs": a.runs, "cpus": os.cpu_count(), "load": [], "file": file_bench(b, tmp, a)}
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        write_file(res)
        return
    res = {"runs": a.runs, "cpus": os.cpu_count(), "load": [], "sleep": [], "pg": [], "redis_green": [],
           "redis_pthread": [], "redis_benchmark": [], "plain_hooked": [], "plain_nohook": []}
    res["locks"] = []
    redis = pg = None
    try:
        if not a.only_locks:
            redis, rport = start_redis(tmp)
            pg, conninfo = start_pg(tmp)
            res["file"] = file_bench(b, tmp, a)
        for r in range(a.runs):
            res["load"].append(loadavg())
            res["locks"].append(lock_run(b))
            if a.only_locks:
                print("run %d/%d done (load %.1f)" % (r + 1, a.runs, res["load"][-1]), flush=True)
                continue
            res["sleep"].append(run_json([b + "/hook_sleep"]))
            res["pg"].append(run_json([b + "/hook_pg", conninfo]))
            res["redis_green"].append(run_json([b + "/hook_redis", "green", str(rport), str(a.redis_seconds)]))
            res["redis_pthread"].append(run_json([b + "/hook_redis", "pthread", str(rport), str(a.redis_seconds)]))
            res["redis_benchmark"].append(redis_benchmark(rport, 200000))
            res["plain_hooked"].append(run_json([b + "/hook_plain"]))
            res["plain_nohook"].append(run_json([b + "/hook_plain_nohook"]))
            print("run %d/%d done (load %.1f)" % (r + 1, a.runs, res["load"][-1]), flush=True)
        res["load"].append(loadavg())
    finally:
        if redis:
            redis.stop()
        if pg:
            pg.stop(signal.SIGINT)
        shutil.rmtree(tmp, ignore_errors=True)
    if shutil.which("valgrind"):
        # The plain-thread mutex in instructions, which a loaded machine
        # cannot blur: 4 rounds minus 2 rounds of 100 k pairs, per pair.
        cg = {}
        for name in ("hook_lock", "hook_lock_nohook"):
            n = []
            for rounds in ("2", "4"):
                out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                                      b + "/" + name, "plainmutex", "pthread", rounds],
                                     capture_output=True, text=True).stderr
                m = re.search(r"Collected : (\d+)", out)
                n.append(int(m.group(1)) if m else None)
            cg[name] = (n[1] - n[0]) / 200000.0 if None not in n else None
        res["lock_callgrind"] = cg
    if shutil.which("valgrind") and not a.only_locks:
        res["callgrind"] = {}
        for name in ("hook_plain", "hook_plain_nohook"):
            out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                                  b + "/" + name, "100000"], capture_output=True, text=True).stderr
            m = re.search(r"Collected : (\d+)", out)
            res["callgrind"][name] = int(m.group(1)) if m else None
    write(res)


def drop_cache(path):
    """The file's pages out of the page cache: the whole cache as root,
    the file's own (clean) pages otherwise."""
    subprocess.run(["sync"])
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1")
    except OSError:
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def file_bench(b, tmp, a):
    need = a.file_mib << 20
    free = shutil.disk_usage(tmp).free
    if free < need + (1 << 30):
        sys.exit("hook-file needs %d MiB in %s, %d MiB free" % (a.file_mib + 1024, tmp, free >> 20))
    path = os.path.join(tmp, "file")
    out = {"mib": a.file_mib, "seconds": a.file_seconds, "green": [], "pthread": [], "hit": [], "load": []}
    try:
        subprocess.check_call([b + "/hook_file", "prepare", path, str(a.file_mib)])
        for r in range(a.runs):
            out["load"].append(loadavg())
            drop_cache(path)
            out["green"].append(run_json([b + "/hook_file", "green", path, str(a.file_seconds)]))
            drop_cache(path)
            out["pthread"].append(run_json([b + "/hook_file", "pthread", path, str(a.file_seconds)]))
            out["hit"].append(run_json([b + "/hook_file", "hit", path]))
            print("hook-file run %d/%d done (load %.1f)" % (r + 1, a.runs, out["load"][-1]), flush=True)
        out["load"].append(loadavg())
    finally:
        if os.path.exists(path):
            os.unlink(path)
    return out


def file_lines(fr):
    g, p, h = fr["green"], fr["pthread"], fr["hit"]
    ratios = [x["reads_per_s"] / y["reads_per_s"] for x, y in zip(g, p)]
    hits = [x["hooked_ns"] / x["raw_ns"] for x in h]
    return [
        "| hook-file: random 4 KiB preads of a %d MiB file, page cache dropped, 64 green threads (%s), %.0f s | %.0f reads/s median (min %.0f, max %.0f), ticker late %.1f ms median (max %.1f; %s), errors %d | >= 0.9x pthreads, late <= 10 ms |"
        % (fr["mib"], g[0]["file_io"], fr["seconds"], med([x["reads_per_s"] for x in g]),
           min(x["reads_per_s"] for x in g), max(x["reads_per_s"] for x in g),
           med([x["ticker_late_max_ms"] for x in g]), max(x["ticker_late_max_ms"] for x in g), plain_late(g),
           sum(x["errors"] for x in g)),
        "| hook-file: 64 pthreads, same loop | %.0f reads/s median (green/pthread per run: %s) | |"
        % (med([x["reads_per_s"] for x in p]), ", ".join("%.2f" % x for x in ratios)),
        "| hook-file: page-cache hit, hooked pread on a green thread vs raw pread64 | %.0f ns vs %.0f ns (ratio per run: %s) | <= 1.1x |"
        % (med([x["hooked_ns"] for x in h]), med([x["raw_ns"] for x in h]), ", ".join("%.2f" % x for x in hits)),
        "| hook-file: the raw preadv2(RWF_NOWAIT) the hook makes, vs raw pread64 (the kernel's share of the above) | %s | |"
        % (", ".join("%.2f" % (x["raw_nowait_ns"] / x["raw_ns"]) for x in h if "raw_nowait_ns" in x) or "not measured"),
    ]


def write_file(res):
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "hooks-file.json"), "w") as f:
        json.dump(res, f, indent=1)
    lines = ["# fern-hook file benchmark (bench/hooks/hooks.py --file-only)", "",
             "Median of %d interleaved runs on %d CPUs. Load average during the runs: %s." %
             (res["runs"], res["cpus"], ", ".join("%.1f" % x for x in res["file"]["load"])), "",
             "| benchmark | figure | target |", "|---|---|---|"] + file_lines(res["file"])
    with open(os.path.join(HERE, "results", "hooks-file.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


LOCK_SCENARIOS = {  # ideal wall time, s (bench/hooks/hook_lock.c)
    "cond": 0.020, "mutex": 0.100, "rwsem": 0.029, "plainprod": 0.020,
}


def lock_run(b):
    """One interleaved round of hook-lock: each scenario green on 1 and 2
    workers and on pthreads (the binary without fern-hook), SQLite, and the
    plain-thread mutex with and without fern-hook."""
    out = {}
    for sc in LOCK_SCENARIOS:
        out[sc + "_green1"] = run_json([b + "/hook_lock", sc, "green", "1"])
        out[sc + "_green2"] = run_json([b + "/hook_lock", sc, "green", "2"])
        out[sc + "_pthread"] = run_json([b + "/hook_lock_nohook", sc, "pthread", "2"])
    out["sqlite_green"] = run_json([b + "/hook_lock", "sqlite", "green", "100"])
    out["sqlite_pthread"] = run_json([b + "/hook_lock_nohook", "sqlite", "pthread", "100"])
    out["plainmutex_hooked"] = run_json([b + "/hook_lock", "plainmutex", "pthread", "0"])
    out["plainmutex_nohook"] = run_json([b + "/hook_lock_nohook", "plainmutex", "pthread", "0"])
    return out


def plain_late(xs):
    """The plain pthread ticker of the same runs: the machine's own
    lateness, the floor a green ticker's figure is judged against."""
    v = [x["plain_ticker_late_max_ms"] for x in xs if "plain_ticker_late_max_ms" in x]
    return "plain pthread ticker %.1f ms median (max %.1f)" % (med(v), max(v)) if v else "no plain ticker"


def lock_lines(runs, cg=None):
    if not runs:
        return []
    lines = []
    for sc, ideal in LOCK_SCENARIOS.items():
        for w in ("1", "2"):
            xs = [r[sc + "_green" + w] for r in runs]
            lines.append("| hook-lock %s: 200 green threads, %s worker(s) | wall %.3f s median (max %.3f; ideal %.3f: %.2fx), ticker late %.1f ms median (max %.1f; %s), violations %d, errors %d | <= 1.5x ideal, late <= 5 ms, 0 violations |"
                         % (sc, w, med([x["wall_s"] for x in xs]), max(x["wall_s"] for x in xs), ideal,
                            max(x["wall_s"] for x in xs) / ideal, med([x["ticker_late_max_ms"] for x in xs]),
                            max(x["ticker_late_max_ms"] for x in xs), plain_late(xs), sum(x["violations"] for x in xs),
                            sum(x["errors"] for x in xs)))
        xs = [r[sc + "_pthread"] for r in runs]
        lines.append("| hook-lock %s: same code on 200 pthreads (no fern-hook) | wall %.3f s median (max %.3f), violations %d | |"
                     % (sc, med([x["wall_s"] for x in xs]), max(x["wall_s"] for x in xs), sum(x["violations"] for x in xs)))
    g = [r["sqlite_green"] for r in runs]
    p = [r["sqlite_pthread"] for r in runs]
    ratios = [(5000 / x["wall_s"]) / (5000 / y["wall_s"]) for x, y in zip(g, p)]
    lines.append("| hook-lock sqlite: 100 green threads x 50 transactions, 2 workers (WAL, busy timeout) | %.0f tx/s median, rows %s, errors %d, ticker late %.1f ms median (max %.1f; %s) | every row, 0 errors, late <= 10 ms |"
                 % (med([x["rows"] / x["wall_s"] for x in g]), "/".join(str(x["rows"]) for x in g), sum(x["errors"] for x in g),
                    med([x["ticker_late_max_ms"] for x in g]), max(x["ticker_late_max_ms"] for x in g), plain_late(g)))
    lines.append("| hook-lock sqlite: 100 pthreads, same program | %.0f tx/s median; green/pthread per run: %s | >= 0.9x in every run |"
                 % (med([x["rows"] / x["wall_s"] for x in p]), ", ".join("%.2f" % x for x in ratios)))
    h = [r["plainmutex_hooked"]["ns_per_pair"] for r in runs]
    n = [r["plainmutex_nohook"]["ns_per_pair"] for r in runs]
    lines.append("| hook-lock plainmutex: a plain thread's uncontended lock + unlock, hook_lock / hook_lock_nohook (two processes; fastest of 20 x 1 M each run) | %.2f / %.2f ns median (%+.2f ns) | |"
                 % (med(h), med(n), med(h) - med(n)))
    # The same pair both ways in one process (hook_lock.c's plainmutex_ab):
    # the figure the target is judged on; the nohook binary's own
    # difference (libc's against libc's) is the method's noise.
    ab = [r["plainmutex_hooked"]["ab_first_ns"] - r["plainmutex_hooked"]["ab_libc_ns"]
          for r in runs if "ab_first_ns" in r["plainmutex_hooked"]]
    ctl = [r["plainmutex_nohook"]["ab_first_ns"] - r["plainmutex_nohook"]["ab_libc_ns"]
           for r in runs if "ab_first_ns" in r["plainmutex_nohook"]]
    if ab and ctl:
        lines.append("| hook-lock plainmutex in one process: fern-hook's pthread_mutex_lock/unlock against libc's, alternating rounds (fastest of 200 x 100 k each) | %.2f / %.2f ns median (%+.2f ns; per run %s; the same method without fern-hook: %s ns) | <= +2 ns |"
                     % (med([r["plainmutex_hooked"]["ab_first_ns"] for r in runs]),
                        med([r["plainmutex_hooked"]["ab_libc_ns"] for r in runs]), med(ab),
                        ", ".join("%+.2f" % x for x in ab), ", ".join("%+.2f" % x for x in ctl)))
    if cg and cg.get("hook_lock") and cg.get("hook_lock_nohook"):
        lines.append("| hook-lock plainmutex under callgrind (user-space instructions per lock + unlock pair) | %.1f with, %.1f without (%+.1f) | |"
                     % (cg["hook_lock"], cg["hook_lock_nohook"], cg["hook_lock"] - cg["hook_lock_nohook"]))
    return lines


def med(xs):
    return statistics.median(xs)


def write(res):
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    name = "hooks.json" if res["sleep"] else "hooks-locks.json"  # --only-locks keeps hooks.json
    with open(os.path.join(HERE, "results", name), "w") as f:
        json.dump(res, f, indent=1)
    if not res["sleep"]:  # --only-locks
        lines = ["# fern-hook benchmarks (bench/hooks/hooks.py --only-locks)", "",
                 "Median of %d interleaved runs on %d CPUs. Load average during the runs: %s." %
                 (res["runs"], res["cpus"], ", ".join("%.1f" % x for x in res["load"])), "",
                 "| benchmark | figure | target |", "|---|---|---|"] + lock_lines(res.get("locks", []), res.get("lock_callgrind"))
        with open(os.path.join(HERE, "results", "hooks-locks.md"), "w") as f:
            f.write("\n".join(lines) + "\n")
        print("\n".join(lines))
        return
    s, p = res["sleep"], res["pg"]
    rg = med([x["ops_per_s"] for x in res["redis_green"]])
    rp = med([x["ops_per_s"] for x in res["redis_pthread"]])
    rb = med(res["redis_benchmark"])
    ph = med([x["ns_per_roundtrip"] for x in res["plain_hooked"]])
    pn = med([x["ns_per_roundtrip"] for x in res["plain_nohook"]])
    cg = res.get("callgrind", {})
    lines = [
        "# fern-hook benchmarks (bench/hooks/hooks.py)",
        "",
        "Median of %d interleaved runs on %d CPUs. Load average during the runs: %s (a load"
        " above the CPU count means the machine was shared and noisy: lateness figures suffer"
        " first)." % (res["runs"], res["cpus"], ", ".join("%.1f" % x for x in res["load"])),
        "",
        "| benchmark | figure | target |",
        "|---|---|---|",
        "| hook-sleep: 300 green threads, 1 worker, one 200 ms call each | wall %.3f s (max %.3f), ticker late %.1f ms median (min %.1f, max %.1f), errors %d | <= 0.5 s, late <= 5 ms |"
        % (med([x["wall_s"] for x in s]), max(x["wall_s"] for x in s), med([x["ticker_late_max_ms"] for x in s]),
           min(x["ticker_late_max_ms"] for x in s), max(x["ticker_late_max_ms"] for x in s),
           sum(x["errors"] for x in s)),
        "| hook-sleep: a plain pthread's 1 ms clock_nanosleep ticker in the same runs (the machine's own lateness) | late %.1f ms median (min %.1f, max %.1f) | |"
        % (med([x.get("plain_ticker_late_max_ms", float("nan")) for x in s]),
           min(x.get("plain_ticker_late_max_ms", float("nan")) for x in s),
           max(x.get("plain_ticker_late_max_ms", float("nan")) for x in s)),
        "| hook-pg: 40 green threads, 1 worker, SELECT pg_sleep(0.3) | wall %.3f s (max %.3f), ticker late %.1f ms median (max %.1f), errors %d | <= 1.2 s, late <= 10 ms |"
        % (med([x["wall_s"] for x in p]), max(x["wall_s"] for x in p), med([x["ticker_late_max_ms"] for x in p]),
           max(x["ticker_late_max_ms"] for x in p), sum(x["errors"] for x in p)),
        "| hook-redis: 200 green threads, hiredis SET/GET | %.0f ops/s; ticker late %.1f ms median (max %.1f; plain pthread ticker, same runs: %.1f ms, max %.1f) | late <= 10 ms at worst |"
        % (rg, med([x["ticker_late_max_ms"] for x in res["redis_green"]]),
           max(x["ticker_late_max_ms"] for x in res["redis_green"]),
           med([x.get("plain_ticker_late_max_ms", float("nan")) for x in res["redis_green"]]),
           max(x.get("plain_ticker_late_max_ms", float("nan")) for x in res["redis_green"])),
        "| hook-redis: 200 pthreads, same program | %.0f ops/s (green/pthread = %.2f) | green >= 1.0x |" % (rp, rg / rp),
        "| hook-redis: redis-benchmark -c 200 (SET, GET mean) | %.0f ops/s (green/redis-benchmark = %.2f) | green >= 0.85x |" % (rb, rg / rb),
        "| hook-plain: pthread pipe write+read, with fern-hook | %.1f ns | |" % ph,
        "| hook-plain: same, without fern-hook | %.1f ns (hooked/plain = %.3f) | within 2%% |" % (pn, ph / pn),
    ]
    if res.get("file"):
        lines += file_lines(res["file"])
    lines += lock_lines(res.get("locks", []), res.get("lock_callgrind"))
    if cg.get("hook_plain") and cg.get("hook_plain_nohook"):
        lines.append("| hook-plain under callgrind, 100k round trips (user-space instructions) | %d with, %d without (%+.1f%%) | |"
                     % (cg["hook_plain"], cg["hook_plain_nohook"], 100.0 * (cg["hook_plain"] / cg["hook_plain_nohook"] - 1)))
    with open(os.path.join(HERE, "results", "hooks.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
