#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""fern-memcached beside memcached: throughput, CPU cost, memory per item.

Each round starts each server in turn pinned to CPU 0 (`taskset -c 0`), one
worker (`fern-memcached -t 1`, `memcached -t 1`), and drives it from CPU 1
with memcaslap (`taskset -c 1 memcaslap -T 1 -c 64 -t 5s`, its default mix: 9
gets to 1 set, ~1 KiB values). The order of the two servers alternates round
by round (A B, B A, ...). Per run it records memcaslap's TPS, the server's CPU
seconds (user+sys of all its threads, /proc/PID/stat before and after the
load), transactions per server CPU-second, memcaslap's own CPU use (near 100%
means the client, not the server, set the pace), and the share of the
machine's CPU used by other processes meanwhile and the 1-minute load average
(the report says whether the machine was quiet or shared), the context
switches of all the server's threads per transaction
(/proc/PID/task/TID/status), and for the server's busiest thread (its worker)
the time it ran and the time it waited in the run queue per turn on the CPU
(/proc/PID/task/TID/schedstat).
The servers and memcaslap each start in a session of their own, hence in
their own scheduler autogroup: each competes with the machine's other jobs as
a service would, not inside the driver's group.

Memory per item: a fresh server of each kind (-m 1024, nothing evicted)
gets N items of a given value size over one connection; (RSS after - RSS
before) / N, from /proc/PID/status.

Writes bench/results/memcached.json, memcached.md and memcached.png (when
matplotlib is importable; Debian python3-matplotlib, so run it with
/usr/bin/python3).

    /usr/bin/python3 bench/servers/memcached.py            # 7 rounds: about 2 minutes
    /usr/bin/python3 bench/servers/memcached.py --rounds 1 --duration 2   # smoke
    /usr/bin/python3 bench/servers/memcached.py --md-only  # redraw from memcached.json
"""
import argparse, datetime, json, os, platform, re, resource, shutil, signal, socket, statistics
import subprocess, sys, time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # bench/
ROOT = os.path.dirname(HERE)
TICK = os.sysconf("SC_CLK_TCK")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def build(bin_path):
    if os.path.exists(bin_path):
        return bin_path
    bdir = os.path.join(ROOT, "build", "bench", "memcached")
    subprocess.run(["cmake", "-S", ROOT, "-B", bdir, "-DCMAKE_BUILD_TYPE=Release",
                    "-DBUILD_TESTING=OFF", "-DFERN_BUILD_BENCH=OFF"], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", bdir, "--target", "fern-memcached", "-j", "2"], check=True,
                   stdout=subprocess.DEVNULL)
    return os.path.join(bdir, "apps", "memcached", "fern-memcached")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Server:
    def __init__(self, kind, fern_bin, extra=()):
        self.kind = kind
        if kind == "fern":
            argv = [fern_bin, "-p", "0", "-t", "1", *extra]
        else:
            self.port = free_port()
            argv = ["memcached", "-p", str(self.port), "-l", "127.0.0.1", "-U", "0", "-t", "1", *extra]
            if os.geteuid() == 0:
                argv += ["-u", "nobody"]
        # Its own session, hence its own autogroup (see the module doc).
        self.p = subprocess.Popen(["taskset", "-c", "0"] + argv, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, start_new_session=True)
        if kind == "fern":
            line = self.p.stdout.readline().decode()
            m = re.match(r"listening on 127\.0\.0\.1:(\d+)", line)
            if not m:
                raise RuntimeError("fern-memcached did not start: %r" % line)
            self.port = int(m.group(1))
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def cpu(self):
        with open("/proc/%d/stat" % self.p.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime, all threads

    def schedstat(self):
        """{tid: (run ns, run-queue wait ns, times scheduled)} of every thread."""
        out = {}
        for tid in os.listdir("/proc/%d/task" % self.p.pid):
            try:
                with open("/proc/%d/task/%s/schedstat" % (self.p.pid, tid)) as f:
                    out[tid] = tuple(int(x) for x in f.read().split())
            except OSError:
                pass
        return out

    def ctxt_switches(self):
        """{tid: voluntary + involuntary context switches} of every thread."""
        out = {}
        for tid in os.listdir("/proc/%d/task" % self.p.pid):
            try:
                with open("/proc/%d/task/%s/status" % (self.p.pid, tid)) as f:
                    out[tid] = sum(int(x) for x in re.findall(r"ctxt_switches:\s+(\d+)", f.read()))
            except OSError:
                pass
        return out

    def rss(self):
        with open("/proc/%d/status" % self.p.pid) as f:
            return int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1)) * 1024

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            return self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return self.p.wait()


def machine_busy():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return (sum(v[:8]) - idle) / TICK, sum(v[:8]) / TICK


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def load_run(srv, duration, concurrency):
    la0 = loadavg()
    c0, (b0, t0), s0, x0 = srv.cpu(), machine_busy(), srv.schedstat(), srv.ctxt_switches()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    w0 = time.monotonic()
    out = subprocess.run(["taskset", "-c", "1", "memcaslap", "-s", "127.0.0.1:%d" % srv.port, "-T", "1",
                          "-c", str(concurrency), "-t", "%ds" % duration],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=duration + 60, start_new_session=True).stdout
    wall = time.monotonic() - w0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    c1, (b1, t1), s1, x1 = srv.cpu(), machine_busy(), srv.schedstat(), srv.ctxt_switches()
    la1 = loadavg()
    # The thread that ran most (the worker): how long it waited in the run
    # queue each time it was scheduled.
    d = {t: tuple(b - a for a, b in zip(s0[t], s1[t])) for t in s1 if t in s0}
    run, wait, slices = max(d.values(), key=lambda v: v[0]) if d else (0, 0, 0)
    m = re.findall(r"Run time: [\d.]+s Ops: (\d+) TPS: (\d+)", out)
    if not m:
        raise RuntimeError("memcaslap output not understood:\n" + out[-2000:])
    ops, tps = int(m[-1][0]), int(m[-1][1])
    switches = sum(x1[t] - x0[t] for t in x1 if t in x0)
    server_cpu = c1 - c0
    client_cpu = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    foreign = max(0.0, (b1 - b0) - server_cpu - client_cpu)
    return {"tps": tps, "ops": ops, "server_cpu_s": server_cpu, "tps_per_cpu_s": ops / server_cpu if server_cpu else 0,
            "client_cpu_pct": 100 * client_cpu / wall, "foreign_cpu_pct": 100 * foreign / max(t1 - t0, 1e-9),
            "worker_wait_ms_per_slice": wait / 1e6 / max(slices, 1),
            "worker_run_ms_per_slice": run / 1e6 / max(slices, 1),
            "ctxt_switches_per_1k": 1000 * switches / max(ops, 1), "loadavg": max(la0, la1)}


def memory_per_item(kind, fern_bin, n, size):
    srv = Server(kind, fern_bin, ["-m", "1024"])
    try:
        s = socket.create_connection(("127.0.0.1", srv.port))
        s.sendall(b"version\r\n")
        s.recv(100)
        time.sleep(0.2)
        before = srv.rss()
        val = b"v" * size
        batch = []
        for i in range(n):
            batch.append(b"set key:%010d 0 0 %d noreply\r\n%s\r\n" % (i, size, val))
            if len(batch) == 500:
                s.sendall(b"".join(batch))
                batch = []
        s.sendall(b"".join(batch) + b"stats\r\n")
        buf = b""
        while not buf.endswith(b"END\r\n"):
            buf += s.recv(65536)
        items = int(re.search(rb"STAT curr_items (\d+)", buf).group(1))
        time.sleep(0.2)
        after = srv.rss()
        s.close()
        if items != n:
            raise RuntimeError("%s kept %d of %d items" % (kind, items, n))
        return (after - before) / n
    finally:
        srv.stop()


def summary(xs):
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def machine():
    model = "?"
    with open("/proc/cpuinfo") as f:
        for l in f:
            if l.startswith("model name"):
                model = l.split(":", 1)[1].strip()
                break
    ver = subprocess.run(["memcached", "-V"], stdout=subprocess.PIPE, text=True).stdout.strip()
    return {"cpu": model, "cores": os.cpu_count(), "kernel": platform.release(), "memcached": ver,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def load_note(d):
    """What the machine was doing besides the benchmark, from the runs' own records."""
    runs = d["runs"]["fern"] + d["runs"]["memcached"]
    others = [r["foreign_cpu_pct"] for r in runs]
    la = [r["loadavg"] for r in runs if "loadavg" in r]
    s = ("Other processes used %.0f%% of the machine's CPU during the load runs (median; max %.0f%%)"
         % (statistics.median(others), max(others)))
    if la:
        s += ("; 1-minute load average %.1f (median; max %.1f), of which the benchmark's own server "
              "and client account for up to 2" % (statistics.median(la), max(la)))
    quiet = statistics.median(others) < 5
    return s + (". The machine was otherwise quiet." if quiet else
                ". The machine was shared with other jobs: the rates below depend on how the kernel "
                "scheduled the servers among them, the per-CPU-second figures much less."), quiet


def markdown(d):
    s, m = d["summary"], d["machine"]
    note, quiet = load_note(d)
    L = ["# fern-memcached vs memcached", "",
         "Machine: %s, %d cores, Linux %s; %s; %s. %s" % (
             m["cpu"], m["cores"], m["kernel"], m["memcached"], m["date"], note), "",
         "Each server pinned to CPU 0 with one worker thread (`-t 1`), `memcaslap -T 1 -c %d -t %ds` "
         "pinned to CPU 1, %d interleaved rounds; median [min–max]. *per CPU-s* = transactions per "
         "second of server CPU time (user+sys of all its threads, /proc/PID/stat). *others*: CPU "
         "used by other processes, share of the whole machine. *switches / 1k tx*: context switches "
         "of all the server's threads (/proc/PID/task/TID/status) per 1,000 transactions. The last "
         "column is the server's busiest thread (its worker) from /proc/PID/task/TID/schedstat."
         % (d["concurrency"], d["duration"], d["rounds"]), "",
         "| server | TPS | per server CPU-s | server CPU % | client CPU % | others % | switches / 1k tx | worker run / run-queue wait per scheduling, ms |",
         "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for k, name in (("fern", "fern-memcached"), ("memcached", "memcached -t 1")):
        r = s[k]
        rw = ("%.2f / %.2f" % (r["worker_run_ms_per_slice"]["median"], r["worker_wait_ms_per_slice"]["median"])
              if "worker_wait_ms_per_slice" in r else "—")
        cs = "%.0f" % r["ctxt_switches_per_1k"]["median"] if "ctxt_switches_per_1k" in r else "—"
        L.append("| %s | %s [%s–%s] | %s [%s–%s] | %.0f | %.0f | %.0f | %s | %s |" % (
            name, f"{r['tps']['median']:,.0f}", f"{r['tps']['min']:,.0f}", f"{r['tps']['max']:,.0f}",
            f"{r['tps_per_cpu_s']['median']:,.0f}", f"{r['tps_per_cpu_s']['min']:,.0f}",
            f"{r['tps_per_cpu_s']['max']:,.0f}", 100 * r["server_cpu_s"]["median"] / d["duration"],
            r["client_cpu_pct"]["median"], r["foreign_cpu_pct"]["median"], cs, rw))
    L += ["", "Ratios (fern / memcached, medians): throughput **%.2f×**, transactions per server "
          "CPU-second **%.2f×**." % (d["ratio_tps"], d["ratio_per_cpu"]), ""]
    busiest = max(100 * s[k]["server_cpu_s"]["median"] / d["duration"] for k in s)
    client = max(s[k]["client_cpu_pct"]["median"] for k in s)
    lower = sum(f["tps"] < m["tps"] for f, m in zip(d["runs"]["fern"], d["runs"]["memcached"]))
    if client >= 90:
        L += ["memcaslap used %.0f%% of its core: the client set the pace, so the rates say how "
              "much client work each server's answers leave room for, and the per-CPU-second "
              "column what a transaction costs each server." % client, ""]
    elif busiest < 50 and client < 50 and not quiet:
        L += ["Neither the servers (at most %.0f%% of their core) nor the client (%.0f%%) saturated a "
              "core: both waited mostly to be scheduled among the other jobs on the machine, so the "
              "rate depends on that as much as on the servers, and the per-CPU-second column is the "
              "one that measures what a transaction costs each server." % (busiest, client), ""]
    L += ["fern-memcached's rate was the lower one in %d of %d rounds." % (lower, len(d["runs"]["fern"])), ""]
    L += ["Memory per stored item (RSS growth / items, %d items, -m 1024, nothing evicted):" % d["mem_items"], "",
          "| value bytes | fern-memcached | memcached | fern / memcached |", "| --- | --- | --- | --- |"]
    for size, row in sorted(d["memory"].items(), key=lambda kv: int(kv[0])):
        L.append("| %s | %.0f B | %.0f B | %.2f |" % (size, row["fern"], row["memcached"], row["fern"] / row["memcached"]))
    L += ["", "Driver: `bench/servers/memcached.py`; raw runs in `memcached.json`; plot `memcached.png`.", ""]
    return "\n".join(L)


def plot(d, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:  # noqa: BLE001 - no matplotlib, no plot
        return False
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    names = ["fern", "memcached"]
    labels = ["fern-memcached", "memcached -t 1"]
    colors = ["#2a7f62", "#7a7a7a"]
    for ax, key, title in ((axes[0], "tps", "transactions / s"), (axes[1], "tps_per_cpu_s", "transactions / server CPU-s")):
        med = [d["summary"][n][key]["median"] for n in names]
        lo = [med[i] - d["summary"][n][key]["min"] for i, n in enumerate(names)]
        hi = [d["summary"][n][key]["max"] - med[i] for i, n in enumerate(names)]
        ax.bar(labels, med, yerr=[lo, hi], capsize=6, color=colors)
        ax.set_title(title + "\n(median, min–max error bars)", fontsize=9)
    sizes = sorted(d["memory"], key=int)
    x = range(len(sizes))
    axes[2].bar([i - 0.2 for i in x], [d["memory"][s]["fern"] for s in sizes], 0.4, label=labels[0], color=colors[0])
    axes[2].bar([i + 0.2 for i in x], [d["memory"][s]["memcached"] for s in sizes], 0.4, label=labels[1], color=colors[1])
    axes[2].set_xticks(list(x))
    axes[2].set_xticklabels(["%s B values" % s for s in sizes])
    axes[2].set_title("RSS bytes per stored item", fontsize=9)
    axes[2].legend(fontsize=8)
    fig.suptitle("memcaslap -T 1 -c %d, servers pinned to one core (%s)" % (d["concurrency"], d["machine"]["date"]), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "release", "apps", "memcached", "fern-memcached"))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--mem-items", type=int, default=100000)
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--md-only", action="store_true", help="rewrite the .md and .png from the .json")
    args = ap.parse_args()
    if args.md_only:
        with open(os.path.join(args.out, "memcached.json")) as f:
            d = json.load(f)
        with open(os.path.join(args.out, "memcached.md"), "w") as f:
            f.write(markdown(d))
        plot(d, os.path.join(args.out, "memcached.png"))
        return
    for tool in ("memcached", "memcaslap", "taskset"):
        if not shutil.which(tool):
            sys.exit("bench/servers/memcached.py: %s is not installed (Debian memcached, libmemcached-tools)" % tool)
    fern_bin = build(args.bin)
    runs = {"fern": [], "memcached": []}
    for r in range(args.rounds):
        order = ["fern", "memcached"] if r % 2 == 0 else ["memcached", "fern"]
        for kind in order:
            srv = Server(kind, fern_bin, ["-m", "1024"])
            try:
                load_run(srv, 1, args.concurrency)  # warm-up: fills the keys
                res = load_run(srv, args.duration, args.concurrency)
            finally:
                rc = srv.stop()
            if kind == "fern" and rc != 0:
                sys.exit("fern-memcached exited with %d" % rc)
            runs[kind].append(res)
            log("round %d %-9s TPS %6d  per CPU-s %7.0f  server CPU %.2fs  client %3.0f%%  others %3.0f%%  "
                "switches/1k %4.0f  load %.1f" % (
                    r + 1, kind, res["tps"], res["tps_per_cpu_s"], res["server_cpu_s"], res["client_cpu_pct"],
                    res["foreign_cpu_pct"], res["ctxt_switches_per_1k"], res["loadavg"]))
    memory = {}
    for size in (100, 1000):
        memory[str(size)] = {k: memory_per_item(k, fern_bin, args.mem_items, size) for k in ("fern", "memcached")}
        log("memory per item, %d B values: fern %.0f B, memcached %.0f B" % (
            size, memory[str(size)]["fern"], memory[str(size)]["memcached"]))
    summ = {k: {f: summary([x[f] for x in v]) for f in v[0]} for k, v in runs.items()}
    d = {"machine": machine(), "rounds": args.rounds, "duration": args.duration, "concurrency": args.concurrency,
         "mem_items": args.mem_items, "runs": runs, "summary": summ, "memory": memory,
         "ratio_tps": summ["fern"]["tps"]["median"] / summ["memcached"]["tps"]["median"],
         "ratio_per_cpu": summ["fern"]["tps_per_cpu_s"]["median"] / summ["memcached"]["tps_per_cpu_s"]["median"]}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "memcached.json"), "w") as f:
        json.dump(d, f, indent=1)
    with open(os.path.join(args.out, "memcached.md"), "w") as f:
        f.write(markdown(d))
    if not plot(d, os.path.join(args.out, "memcached.png")):
        log("matplotlib not importable: no plot (use /usr/bin/python3 with python3-matplotlib)")
    print(markdown(d))


if __name__ == "__main__":
    main()
