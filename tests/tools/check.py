#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""fern under external tools: gdb (tests/tools/parked.c), perf and valgrind
(tests/tools/busy.c).

  check.py live PROGRAM [nogcore]
      The build tree: the extension loads from the library's embedded
      .debug_gdb_scripts section. info fern-threads lists the three parked
      threads with their states and where each parked; fern-thread NAME bt
      shows each thread's own parking function and ends at the entry
      trampoline; the same again from a core written with gcore
      (FERN_GUARD=mprotect) and from a kernel core dump (default guards;
      where core_pattern writes a file in the cwd, else it says it did not
      run). Then all of it (live and gcore) with the extension loaded twice:
      gdb/fern-gdb.py sourced first, the embedded copy after it. However
      many copies load, gdb lists one fern unwinder and one frame filter.
  check.py installed BUILD_DIR CMAKE CC SOURCE
      Installs into a scratch prefix. Each way of loading the extension,
      live and on a gcore core, with every check above: the documented
      command (safe-path / plus add-auto-load-scripts-directory), which
      loads both the installed file and the embedded copy (checked with
      info auto-load), also on a kernel core dump; the embedded copy alone; then, with the library
      stripped (the embedded copy gone), the installed file alone, found
      with only add-auto-load-scripts-directory, and nothing without it.
      readelf -n on the installed library lists the six USDT probes; a
      program linked with the installed libfern.a has the extension too.
  check.py perf PROGRAM PROGRAM_FP
      perf record --call-graph dwarf on tests/tools/busy.c, and perf record
      -g on the same linked with a frame-pointer build of fern: every
      sample in busy_work unwinds through thread_entry to fern_ctx_entry
      and stops there (no garbage frame past the green stack's bottom).
      Exits 77
      (ctest: skipped, and says why) where perf_event is unavailable.
  check.py valgrind PROGRAM
      tests/tools/busy.c under valgrind: no error, and no "client switching
      stacks" warning (fern registers each green stack with
      VALGRIND_STACK_REGISTER).
  check.py deadlock PROGRAM
      tests/tools/deadlocked.c with FERN_DEADLOCK=fatal: the deadlock
      report walks each parked thread's stack by frame pointers (libunwind
      is kept out, see that file), says so, names transfer and audit in
      their threads' backtraces, and the process ends by SIGABRT.
  The live and installed modes also stop gdb at the USDT probes and read their arguments.
"""
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile

TIMEOUT = 120
failures = []


def check(cond, what, out=""):
    if cond:
        print("ok   " + what)
    else:
        print("FAIL " + what)
        if out:
            print("---- output ----\n" + out + "\n----------------")
        failures.append(what)


def gdb(args, env=None):
    cmd = ["gdb", "-nx", "-batch", "-iex", "set auto-load safe-path /"] + args
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env)
    return r.stdout + r.stderr


def thread_row(out, name):
    for line in out.splitlines():
        cols = line.split()
        if len(cols) > 2 and cols[0] in ("*",) + tuple(str(i) for i in range(1, 100)):
            if name in cols[:3]:
                return line
    return ""


def bt_of(out, marker):
    """The backtrace printed after the line `marker` (up to the next echo)."""
    if marker not in out:
        return ""
    return out.split(marker, 1)[1].split("@@", 1)[0]


PARKED = (
    ("chan-waiter", "parked on chan recv", "wait_on_channel"),
    ("mutex-waiter", "parked on mutex", "wait_on_mutex"),
    ("sleeper", "parked on sleep", "wait_asleep"),
)


def inspect(target_args, label, pre=()):
    """Run the checks on a live process or a core (target_args), gdb's
    options pre (how the extension is loaded) first."""
    cmds = ["-ex", "echo @@list\\n", "-ex", "info fern-threads"]
    for name, _, _ in PARKED + (("main", "", ""),):
        cmds += ["-ex", "echo @@bt %s\\n" % name, "-ex", "fern-thread %s bt" % name]
    cmds += ["-ex", "echo @@all\\n", "-ex", "fern-thread apply all bt 1"]
    cmds += ["-ex", "echo @@bad\\n", "-ex", "fern-thread no-such-thread bt"]
    cmds += ["-ex", "echo @@end\\n"]
    pre = list(pre)
    if target_args[0] == "-ex":  # live: run first, then look
        out = gdb(pre + target_args[:-1] + cmds + target_args[-1:])
    else:
        out = gdb(pre + cmds + target_args)
    listing = bt_of(out, "@@list")
    for name, state, fn in PARKED:
        row = thread_row(listing, name)
        check(state in row, "%s: info fern-threads shows %s %s" % (label, name, state), out)
        check(fn in row, "%s: info fern-threads says %s parked in %s" % (label, name, fn), out)
        bt = bt_of(out, "@@bt " + name)
        check(re.search(r"#\d+ .* in %s " % fn, bt) is not None, "%s: fern-thread %s bt shows %s" % (label, name, fn), out)
        frames = [l for l in bt.splitlines() if l.startswith("#")]
        check(frames and "fern_ctx_entry" in frames[-1],
              "%s: %s's backtrace ends at fern_ctx_entry" % (label, name), bt)
        check(not any("stop_here" in l or "main_green" in l for l in frames),
              "%s: %s's backtrace has none of the host thread's frames" % (label, name), bt)
        # Its own stack, not another's: none of the other waiters' functions.
        others = [f for n, _, f in PARKED if n != name]
        check(not any(f in l for l in frames for f in others),
              "%s: %s's backtrace has none of the other waiters' frames" % (label, name), bt)
    row = thread_row(listing, "main")
    check("running" in row, "%s: main is running" % label, listing)
    bt = bt_of(out, "@@bt main")
    check("stop_here" in bt and "main_green" in bt and "fern_ctx_entry" in bt,
          "%s: fern-thread main bt is its worker's stack" % label, bt)
    check(bt_of(out, "@@all").count("Green thread ") == 4, "%s: fern-thread apply all visits all four" % label, out)
    check("no green thread with id or name 'no-such-thread'" in out,
          "%s: an unknown name is an error" % label, out)
    return out


PROBES = ("spawn", "switch", "park", "wake", "exit", "steal")


def probes_listed(lib):
    r = subprocess.run(["readelf", "-n", lib], capture_output=True, text=True, timeout=TIMEOUT)
    names = re.findall(r"Provider: fern\s+Name: (\w+)", r.stdout)
    for p in PROBES:
        check(p in names, "readelf -n %s lists fern:%s" % (os.path.basename(lib), p), r.stdout)


def probes_hit(prog, label):
    """gdb breaks at the probes and reads their arguments."""
    out = gdb(["-ex", "break main", "-ex", "run", "-ex", "info probes stap fern",
               "-ex", "break -probe-stap fern:spawn", "-ex", "continue",
               "-ex", "printf \"@@spawn %d %s\\n\", $_probe_arg0, (char *)$_probe_arg1",
               "-ex", "delete", "-ex", "break -probe-stap fern:park if $_probe_arg1 != 0",
               "-ex", "continue",
               "-ex", "printf \"@@park %d %s\\n\", $_probe_arg0, (char *)$_probe_arg1",
               "-ex", "kill", prog])
    listed = set(re.findall(r"^stap\s+fern\s+(\w+)", out, re.M))
    check(listed >= set(PROBES), "%s: gdb info probes lists the six fern probes" % label, out)
    check("@@spawn 1 main" in out, "%s: fern:spawn gives id 1 and name main" % label, out)
    check(re.search(r"@@park \d+ \w", out) is not None, "%s: fern:park gives an id and what" % label, out)


def kernel_core(prog, tmp, label="kernel core", pre=()):
    """The program dumps core itself (its SIGTRAP, default guards): the
    kernel's dump keeps the stacks gcore loses to MADV_GUARD_INSTALL."""
    with open("/proc/sys/kernel/core_pattern") as f:
        pattern = f.read().strip()
    if pattern.startswith("|") or "/" in pattern:
        print("NOTE: kernel core dump check NOT RUN: core_pattern is %r (not a file in the cwd)" % pattern)
        return
    cwd = tempfile.mkdtemp(dir=tmp)
    r = subprocess.run([prog], cwd=cwd, capture_output=True, timeout=TIMEOUT,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY,
                                                                                    resource.RLIM_INFINITY)))
    cores = [os.path.join(cwd, c) for c in os.listdir(cwd) if c.startswith("core")]
    check(r.returncode == -signal.SIGTRAP and cores, "%s: the kernel wrote a core (exit %d)"
          % (label, r.returncode))
    if cores:
        inspect([prog, cores[0]], label, pre)


def live_and_gcore(prog, tmp, label, pre=()):
    """inspect() on the running program, and on a gcore of it; pre: how
    the extension is loaded."""
    core = os.path.join(tmp, label.replace(" ", "_").replace(",", "") + ".core")
    # gcore reads memory in 1 MiB pieces through /proc/pid/mem, and a
    # MADV_GUARD_INSTALL guard page fails the whole piece, so a gcore
    # of green stacks needs mprotect guards (kernel core dumps do not:
    # see docs/debugging.md).
    env = dict(os.environ, FERN_GUARD="mprotect")
    out = gdb(list(pre) + ["-ex", "run", "-ex", "gcore " + core] +
              ["-ex", "echo @@list\\n", "-ex", "info fern-threads", "-ex", "echo @@end\\n", prog], env=env)
    check(os.path.exists(core), "%s: gcore wrote a core" % label, out)
    inspect(["-ex", "run", prog], label, pre)
    if os.path.exists(core):
        inspect([prog, core], label + " core", pre)
        os.unlink(core)


# The extension's source, for loading it a second time by hand.
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "gdb", "fern-gdb.py")


def live(prog, gcore=True):
    probes_hit(prog, "live")
    twice = ["-iex", "source " + SCRIPT]
    loaded_scripts(prog, twice, "live, loaded twice")
    if not gcore:
        inspect(["-ex", "run", prog], "live")
        inspect(["-ex", "run", prog], "live, loaded twice", twice)
        print("NOTE: core-file checks NOT RUN in this (sanitizer) build: gcore would copy the "
              "sanitizer's shadow memory; the Release build runs them")
        return
    tmp = tempfile.mkdtemp()
    try:
        live_and_gcore(prog, tmp, "live")
        kernel_core(prog, tmp)
        live_and_gcore(prog, tmp, "live, loaded twice", twice)
    finally:
        shutil.rmtree(tmp)


def loaded_scripts(prog, pre, label):
    """The scripts gdb says it loaded for prog: (installed file?, embedded?).
    Also checks that however many copies ran, gdb has one fern unwinder and
    one fern frame filter."""
    out = gdb(list(pre) + ["-ex", "break main", "-ex", "run", "-ex", "info auto-load python-scripts",
                           "-ex", "echo @@unwinders\\n", "-ex", "info unwinder",
                           "-ex", "info frame-filter", "-ex", "echo @@end\\n", "-ex", "kill", prog])
    rows = [l.rstrip() for l in out.splitlines() if l.startswith("Yes")]
    regs = bt_of(out, "@@unwinders")
    check(len(re.findall(r"^[ \t]+fern$", regs, re.M)) == 1 and
          len(re.findall(r"^[ \t]+100[ \t]+Yes[ \t]+fern$", regs, re.M)) == 1,
          "%s: one fern unwinder and one fern frame filter registered" % label, regs)
    return (any(l.endswith("-gdb.py") for l in rows),
            any("gdb.inlined-script.fern" in l for l in rows), out)


def installed(build, cmake, cc, source):
    tmp = tempfile.mkdtemp()
    try:
        prefix = os.path.join(tmp, "prefix")
        subprocess.run([cmake, "--install", build, "--prefix", prefix], check=True,
                       capture_output=True, timeout=TIMEOUT)
        libdir = next(os.path.join(prefix, d) for d in ("lib", "lib64", "lib/x86_64-linux-gnu")
                      if os.path.exists(os.path.join(prefix, d, "libfern.so")))
        real = os.path.realpath(os.path.join(libdir, "libfern.so"))
        script = os.path.join(prefix, "share/gdb/auto-load") + real + "-gdb.py"
        check(os.path.exists(script), "the extension is installed as " + script)
        probes_listed(real)
        prog = os.path.join(tmp, "parked")
        subprocess.run([cc, "-g", "-o", prog, os.path.join(source, "tests/tools/parked.c"),
                        "-I", os.path.join(prefix, "include"), "-L", libdir, "-lfern",
                        "-Wl,-rpath," + libdir, "-pthread"], check=True, timeout=TIMEOUT)
        # The documented command (docs/debugging.md) on the unstripped
        # library: gdb runs both the installed file and the embedded copy.
        auto = ["-iex", "add-auto-load-scripts-directory " + os.path.join(prefix, "share/gdb/auto-load")]
        file_, embedded, out = loaded_scripts(prog, auto, "documented command")
        check(file_ and embedded, "documented command: gdb loaded both the installed file and the "
              "embedded copy", out)
        live_and_gcore(prog, tmp, "documented command", auto)
        kernel_core(prog, tmp, "documented command, kernel core", auto)
        # The embedded copy alone (no auto-load directory).
        file_, embedded, out = loaded_scripts(prog, [], "embedded only")
        check(embedded and not file_, "no auto-load directory: gdb loaded the embedded copy only", out)
        live_and_gcore(prog, tmp, "embedded only")
        subprocess.run(["strip", "-g", real], check=True, timeout=TIMEOUT)
        probes_listed(real)
        r = subprocess.run(["readelf", "-S", real], capture_output=True, text=True, timeout=TIMEOUT)
        check(".debug_gdb_scripts" not in r.stdout, "strip -g removed the embedded copy")
        # The library stripped, so its embedded copy is gone: only the
        # installed file can give the extension.
        file_, embedded, out = loaded_scripts(prog, auto, "installed file only")
        check(file_ and not embedded, "stripped: gdb loaded the installed file only", out)
        live_and_gcore(prog, tmp, "installed file only", auto)
        probes_hit(prog, "installed")
        # A static link carries the map and the embedded extension along.
        prog_static = os.path.join(tmp, "parked_static")
        subprocess.run([cc, "-g", "-o", prog_static, os.path.join(source, "tests/tools/parked.c"),
                        "-I", os.path.join(prefix, "include"), os.path.join(libdir, "libfern.a"),
                        "-pthread"], check=True, timeout=TIMEOUT)
        out = gdb(["-ex", "run", "-ex", "info fern-threads", "-ex", "fern-thread mutex-waiter bt", prog_static])
        check("parked on mutex" in thread_row(out, "mutex-waiter"), "static: info fern-threads (embedded copy)", out)
        check("wait_on_mutex" in out and "fern_ctx_entry" in out, "static: fern-thread mutex-waiter bt", out)
        out = gdb(["-ex", "run", "-ex", "info fern-threads", prog])
        check("parked on sleep" not in out, "installed: without the auto-load directory there is no extension", out)
    finally:
        shutil.rmtree(tmp)


def perf(prog, prog_fp):
    tmp = tempfile.mkdtemp()
    try:
        data = os.path.join(tmp, "perf.data")
        probe = subprocess.run(["perf", "record", "-e", "cpu-clock", "-o", data, "true"],
                               capture_output=True, text=True, timeout=TIMEOUT)
        if probe.returncode != 0:
            print("PERF UNAVAILABLE on this machine, perf test NOT RUN:\n" + probe.stderr[-500:])
            sys.exit(77)
        for how, p, opts in (("dwarf", prog, ["--call-graph", "dwarf,16384"]), ("-g", prog_fp, ["-g"])):
            r = subprocess.run(["perf", "record", "-e", "cpu-clock"] + opts + ["-o", data, p],
                               capture_output=True, text=True, timeout=TIMEOUT)
            check(r.returncode == 0, "perf record %s ran" % how, r.stderr)
            r = subprocess.run(["perf", "script", "-F", "ip,sym", "-i", data], capture_output=True,
                               text=True, timeout=TIMEOUT)
            samples = [s for s in r.stdout.split("\n\n") if "busy_work" in s]
            check(len(samples) >= 10, "perf %s: %d samples in busy_work" % (how, len(samples)), r.stdout[-2000:])
            bad, in_handler = [], 0
            for s in samples:
                syms = [l.split(None, 1)[1] if len(l.split(None, 1)) > 1 else "?"
                        for l in s.strip().splitlines()]
                if "on_preempt" in syms or "sighandler" in syms or "__restore_rt" in syms:
                    # Taken inside the preemption tick's signal handler
                    # (ThreadSanitizer's wrapper of it is `sighandler`), or
                    # on its way out in libc's return trampoline
                    # (`__restore_rt`, whose one instruction is the
                    # sigreturn call): the walk crosses the kernel's signal
                    # frame, which perf's DWARF unwinder does not always get
                    # through (1 sample in 2,470 seen). Counted, and bounded
                    # below, not required to reach the base.
                    in_handler += 1
                    continue
                if "thread_entry" not in syms or syms[-1] != "fern_ctx_entry":
                    bad.append(s)
            check(not bad, "perf %s: every busy_work sample ends at fern_ctx_entry (%d of %d do not; "
                  "%d in the preemption handler or its return)" % (how, len(bad), len(samples), in_handler),
                  "\n\n".join(bad[:3]))
            check(in_handler * 20 <= len(samples), "perf %s: at most 5%% of the samples in the preemption "
                  "handler or its return (%d of %d)" % (how, in_handler, len(samples)))
    finally:
        shutil.rmtree(tmp)


def valgrind(prog):
    r = subprocess.run(["valgrind", "--error-exitcode=9", prog], capture_output=True, text=True,
                       timeout=TIMEOUT * 3)
    check(r.returncode == 0, "valgrind: %s ran clean (exit %d)" % (os.path.basename(prog), r.returncode),
          r.stderr[-3000:])
    check("switching stacks" not in r.stderr, "valgrind: no 'client switching stacks' warning",
          r.stderr[-3000:])


def deadlock(prog):
    env = dict(os.environ, FERN_DEADLOCK="fatal")
    r = subprocess.run([prog], capture_output=True, text=True, timeout=TIMEOUT, env=env,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)))
    err = r.stderr
    check(r.returncode == -signal.SIGABRT, "deadlock: FERN_DEADLOCK=fatal ends by SIGABRT (exit %d)"
          % r.returncode, err)
    check("fern: deadlock is fatal (FERN_DEADLOCK=fatal): aborting" in err, "deadlock: says it aborts", err)
    check(err.count("    (backtrace by frame pointers: libunwind.so.8 not found or unusable;") == 2, "deadlock: both backtraces by frame pointers", err)
    for name, other in (("transfer", "audit"), ("audit", "transfer")):
        # This thread's backtrace: from its line to the next thread's.
        m = re.search(r'thread \d+ "%s" waits for mutex (\S+) \(0x[0-9a-f]+\)[^\n]*\n((?:    [^\n]*\n)*)'
                      % name, err)
        bt = m.group(2) if m else ""
        check(re.search(r"^    #\d+ 0x[0-9a-f]+ %s\+0x[0-9a-f]+ \(/\S+deadlocked_fp\+0x[0-9a-f]+\)$" % name,
                        bt, re.M) is not None,
              "deadlock: %s's backtrace names %s (deadlocked_fp+offset)" % (name, name), err)
        check(other + "+0x" not in bt, "deadlock: %s's backtrace has none of %s's frames" % (name, other), bt)
        check(re.search(r"^    #\d+ 0x[0-9a-f]+ fern_ctx_entry\+0x", bt, re.M) is not None,
              "deadlock: %s's backtrace reaches fern_ctx_entry" % name, bt)
    check("waits for mutex ledger_lock (" in err and "waits for mutex accounts_lock (" in err,
          "deadlock: the static mutexes by name", err)


def main():
    if len(sys.argv) < 3:
        sys.argv[1:] = ["usage"]
    if sys.argv[1] == "live":
        live(sys.argv[2], gcore=sys.argv[3:] != ["nogcore"])
    elif sys.argv[1] == "valgrind":
        valgrind(sys.argv[2])
    elif sys.argv[1] == "perf":
        perf(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "deadlock":
        deadlock(sys.argv[2])
    elif sys.argv[1] == "installed":
        installed(*sys.argv[2:6])
    else:
        sys.exit("usage: check.py live PROGRAM [nogcore] | installed BUILD CMAKE CC SOURCE | perf PROGRAM PROGRAM_FP | "
                 "valgrind PROGRAM | deadlock PROGRAM")
    if failures:
        print("%d check(s) failed" % len(failures))
        sys.exit(1)
    print("all checks passed")


main()
