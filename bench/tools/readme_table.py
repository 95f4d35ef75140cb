#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Render the README's benchmark tables from the measured results.

The tables in README.md between `<!-- bench-table:begin -->` and
`<!-- bench-table:end -->` are written by this script from
bench/results/latest.json (bench/tools/run.py) and bench/results/servers.json
(bench/servers/servers.py), so every figure in them is a median some run measured,
and a re-run cannot leave a stale cell behind. A scenario or runtime that did
not run shows "—"; the line under the tables says when each file was measured.

    python3 bench/tools/readme_table.py          # rewrite the section in README.md
    python3 bench/tools/readme_table.py --print  # print it instead
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # bench/
ROOT = os.path.dirname(HERE)
BEGIN = "<!-- bench-table:begin (bench/tools/readme_table.py) -->"
END = "<!-- bench-table:end -->"
PEERS = [("go", "Go"), ("java", "Java 25 VT"), ("boost", "Boost.Fiber"), ("pthread", "pthreads")]


def fmt(v):
    """Three significant figures; k and M from 10,000 up."""
    if v is None:
        return "—"
    a = abs(v)
    if a >= 1e6:
        return "%.3g M" % (v / 1e6)
    if a >= 1e4:
        return "%.3g k" % (v / 1e3)
    if a >= 1000:
        return "{:,.0f}".format(v)
    if a >= 100:
        return "%.0f" % v
    if a >= 10:
        return "%.1f" % v
    return "%.2f" % v if a >= 1 else "%.3f" % v


def ratio(fern, peer, higher_better):
    if fern is None or peer is None or fern == 0 or peer == 0:
        return None
    return fern / peer if higher_better else peer / fern


def fmt_ratio(r):
    if r is None:
        return ""
    return "%.0f×" % r if r >= 100 else "%.1f×" % r if r >= 10 else "%.2f×" % r


class Results:
    def __init__(self, latest, servers):
        self.latest = latest
        self.servers = servers

    def med(self, scen, rt, metric):
        r = self.latest.get("scenarios", {}).get(scen, {}).get("results", {}).get(rt, {})
        if r.get("status") != "ok":
            return None
        s = r.get("stats", {}).get(metric)
        return s["median"] if s else None

    def srv(self, scen, rt, cfg, metric):
        r = self.servers.get("scenarios", {}).get(scen, {}).get("results", {}).get(rt, {})
        if r.get("status") != "ok":
            return None
        s = r.get("stats", {}).get(cfg, {}).get(metric)
        return s["median"] if s else None


def cell(vals, fern_vals, higher_better, note_same_n=True):
    """One table cell: values joined by ' / ', ratios to fern's in brackets."""
    if all(v is None for v in vals):
        return "—"
    text = " / ".join(fmt(v) for v in vals)
    rs = [fmt_ratio(ratio(f, v, higher_better)) for f, v in zip(fern_vals, vals)]
    rs = [r for r in rs if r]
    return text + (" (%s)" % " / ".join(rs) if rs else "")


def runtime_rows(res):
    rows = []

    def row(label, scen, metrics, higher_better=False, peers=PEERS, fern_only_ratio=True):
        fern = [res.med(scen, "fern", m) for m in metrics]
        cells = [" / ".join(fmt(v) for v in fern)]
        for rt, _ in peers:
            cells.append(cell([res.med(scen, rt, m) for m in metrics], fern, higher_better))
        rows.append("| %s | %s |" % (label, " | ".join(cells)))

    row("yield, ns per switch (1 worker)", "yield", ["ns_per_switch"])
    row("switch between different code, ns: two functions / three round-robin / 10,000 cold stacks",
        "switch", ["ns_per_switch_asym", "ns_per_switch_rr3", "ns_per_switch_cold"])
    row("spawn + join, ns per thread", "spawn", ["ns_per_thread"])
    row("1M threads parked on a condvar: spawn+park / wake-all, µs per thread (= seconds for the million; "
        "pthreads: 10,000)",
        "million", ["spawn_park_us_per_thread", "wake_all_us_per_thread"])
    row("1M parked threads: bytes per thread", "million", ["bytes_per_thread"])
    row("think: 1M threads × 900 KiB of stack, time ÷ the same plain calls on the same CPUs "
        "(Boost, pthreads: 10,000)", "think", ["ratio_to_baseline"])
    row("think: peak RSS, MiB", "think", ["peak_rss_mib"])
    row("deepstack: 256 KiB of stack, fresh ÷ pooled (higher: the pool saves more)", "deepstack",
        ["fresh_over_pooled"], higher_better=True)
    row("pingpong, unbuffered channel round trip, ns, 1 / 2 workers", "pingpong",
        ["ns_per_roundtrip_w1", "ns_per_roundtrip_w2"])
    row("prodcons, ns per item, mutex + 2 condvars / channel (1 worker)", "prodcons",
        ["ns_per_item_condvar", "ns_per_item_chan"])
    row("mutex, 8 threads on 2 workers, ops/s (higher better)", "mutex", ["ops_per_sec"], higher_better=True)
    row("migrate between two clusters of k workers, moves/s, k = 1 / 2 (higher better; peers "
        "emulate it with a queue hand-off)", "migrate", ["migrations_per_s_k1", "migrations_per_s_k2"],
        higher_better=True)
    head = ["| scenario | fern | " + " | ".join(n for _, n in PEERS) + " |",
            "| --- | --- |" + " --- |" * len(PEERS)]
    return head + rows


def preempt_rows(res):
    m = lambda k: res.med("preempt", "fern", k)
    if m("late_app_ms") is None:
        return []
    return [
        "| preemption (fern only, 1 worker, 10 ms slice) | measured | target |",
        "| --- | --- | --- |",
        "| worst lateness of a 1 ms sleeper beside two arithmetic spinners | %s ms | ≤ 25 ms |" % fmt(m("late_app_ms")),
        "| … beside two spinners inside libc (`memchr`) | %s ms | ≤ 40 ms |" % fmt(m("late_libc_ms")),
        "| … beside a thread blocked 400 ms in a raw `read` system call | %s ms | ≤ 40 ms |" % fmt(m("late_syscall_ms")),
        "| four spinners for 1.5 s: smallest / largest share | %s%% / %s%% | 20–30%% |"
        % (fmt(m("share_min_pct")), fmt(m("share_max_pct"))),
        "| CPU cost of preemption to a CPU-bound loop running alone (ticks, monitor) | %s%% | ≤ 1%% |"
        % fmt(m("loop_alone_loss_pct")),
        "| … to two loops sharing the worker in slices (off: a spare runs the second) | %s%% | |"
        % fmt(m("loop_loss_pct")),
    ]


SERVER_PEERS = {
    "http": [("go_http", "Go net/http"), ("fasthttp", "fasthttp"), ("nginx", "nginx"), ("epoll", "epoll loop"),
             ("java", "Java 25 VT"), ("pthread", "pthreads")],
    "echo": [("go", "Go"), ("epoll", "epoll loop"), ("java", "Java 25 VT"), ("pthread", "pthreads")],
}


def server_rows(res):
    out = []
    for scen, title in (("http", "HTTP plaintext (wrk)"), ("echo", "echo, 64 B messages")):
        if scen not in res.servers.get("scenarios", {}):
            continue
        peers = SERVER_PEERS[scen]
        out.append("| %s, 256 connections | fern | %s |" % (title, " | ".join(n for _, n in peers)))
        out.append("| --- | --- |" + " --- |" * len(peers))
        cfgs = [("c256", "rps", "requests/s", True), ("c256", "rps_per_cpu_s", "requests per server CPU-second", True),
                ("c256", "p99_us", "p99 latency, µs", False)]
        if scen == "http":
            cfgs += [("c256_p16", "rps", "pipelined ×16: requests/s", True),
                     ("c256_p16", "rps_per_cpu_s", "pipelined ×16: requests per server CPU-second", True)]
        for cfg, metric, label, hb in cfgs:
            f = res.srv(scen, "fern", cfg, metric)
            cells = [fmt(f)] + [cell([res.srv(scen, rt, cfg, metric)], [f], hb) for rt, _ in peers]
            out.append("| %s | %s |" % (label, " | ".join(cells)))
        out.append("")
    return out[:-1] if out else out


def render(res):
    lat, srv = res.latest, res.servers
    dates = sorted({v.get("date", "?") for v in lat.get("scenarios", {}).values()})
    if dates and dates[0][:10] == dates[-1][:10]:
        dates = [dates[0]] if len(dates) == 1 else [dates[0].replace(" UTC", ""), dates[-1][11:]]
    foreign = max((v.get("other_cpu_pct", 0) for v in lat.get("scenarios", {}).values()), default=0)
    mach = lat.get("machine", {})
    desc = mach.get("cpu", "") if isinstance(mach, dict) else ""
    lines = [BEGIN, ""]
    lines += runtime_rows(res)
    lines += ["", "Cells: the median of the runs; (N×) = how many times better fern is than that peer "
              "(below 1: fern loses). Measured by `bench/tools/run.py` %s%s; other processes used at most %.1f%% "
              "of the machine's CPU during any scenario."
              % ("on " + (dates[0] if len(dates) == 1 else "%s – %s" % (dates[0], dates[-1])) if dates else "",
                 (", " + desc) if desc else "", foreign), ""]
    p = preempt_rows(res)
    if p:
        lines += p + [""]
    s = server_rows(res)
    if s:
        lines += ["Servers: the server pinned to one core, the load generator on the other; fern runs one green "
                  "thread per connection in plain sequential code, on one worker.", ""]
        lines += s
        lines += ["", "Measured by `bench/servers/servers.py`, %d run(s) per server; other processes used %.0f%% of the "
                  "machine's CPU meanwhile." % (srv.get("runs", 0), srv.get("other_cpu_pct", 0)), ""]
    lines.append(END)
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--print", action="store_true", help="print the section instead of rewriting README.md")
    args = ap.parse_args()
    load = lambda n: json.load(open(os.path.join(HERE, "results", n))) \
        if os.path.exists(os.path.join(HERE, "results", n)) else {}
    text = render(Results(load("latest.json"), load("servers.json")))
    if args.print:
        print(text)
        return 0
    path = os.path.join(ROOT, "README.md")
    readme = open(path).read()
    if BEGIN not in readme or END not in readme:
        print("readme_table: README.md has no %s ... %s section" % (BEGIN, END), file=sys.stderr)
        return 1
    a, rest = readme.split(BEGIN, 1)
    _, b = rest.split(END, 1)
    with open(path, "w") as f:
        f.write(a + text + b)
    return 0


if __name__ == "__main__":
    sys.exit(main())
