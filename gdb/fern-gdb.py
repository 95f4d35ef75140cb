# SPDX-License-Identifier: MIT
"""fern's gdb extension: green threads as gdb sees them, live and in cores.

Commands
  info fern-threads [ID|NAME...]    one line per green thread: id, name,
                                    state (and what it is parked on), the
                                    worker running it, where it is
  fern-thread                       the green thread on the selected thread
  fern-thread ID|NAME CMD...        run a gdb command (bt, frame 2, info
                                    locals) in that green thread's context
  fern-thread apply all CMD...      the same for every green thread

Model. Nothing here calls into the process: the registry is read from
memory, so a core file works as well as a live process. The runtime exports
one symbol, fern_debug_map (src/debugmap.c): the address of the runtime,
the offsets of the fields read here, and the layout of the frame
fern_ctx_switch saves. No DWARF is needed (Release builds, stripped
libraries); docs/debugging.md describes the shape.

A parked (or runnable) thread's registers sit on its own stack. To show its
frames, an unwinder takes over one frame of the selected OS thread (the
"host"): gdb asks the unwinder for the caller of that frame, and it answers
with the green thread's saved registers, so every older frame is the green
thread's, unwound by gdb's ordinary means (DWARF/.eh_frame) down to
fern_ctx_entry, whose return address is undefined: the bottom. A frame
filter hides the host's own frames. Two rules keep gdb's sanity checks
happy and the view right:
  - The frame claimed is the host's first real frame, found before the
    takeover (frame 0, or the frame holding frame 0 when frame 0 is inlined:
    gdb never offers an inlined frame to an unwinder, so claiming whatever
    it offers first would leave the host's inlined frames in view).
  - Its frame id is the green thread's stack pointer at the call into
    fern_ctx_switch (its canonical frame address), never below it: gdb
    stops a backtrace whose next frame is "inner" to (below) this one.
A running green thread needs none of this: it is the stack of its worker's
OS thread, which is selected instead.

Loaded twice. gdb may run this file more than once in one session: the
documented command (`set auto-load safe-path /` plus
`add-auto-load-scripts-directory`) lets both the installed copy and the
copy embedded in the library run, each in gdb's __main__ namespace, so the
second one rebinds every name defined here. Nothing that matters is kept in
those names: the takeover lives in one state object under sys.modules
(_STATE_KEY), which every copy finds, and each load registers its unwinder,
frame filter and commands again under the same names, replacing the
previous copy's (gdb keeps one of each). So whichever copy's code runs, there
is one unwinder, and the takeover a command sets is the one it reads.
"""

import struct
import sys
import types

import gdb
import gdb.unwinder

_MAGIC = 0x70616D2D6E726566  # "fern-map", little endian
_VERSION = 1
_FIELDS = (
    "runtime rt_running rt_chunks rt_clusters chunk_threads chunk_count "
    "thread_size t_sp t_stack t_fn t_cluster t_alloc t_run_state t_wait_what "
    "t_wait_obj t_id t_name t_name_size alloc_live c_next c_nworkers c_workers "
    "w_cur w_g0 w_index w_tid s_lo s_size frame_size f_rip f_rbp f_rbx f_r12 "
    "f_r13 f_r14 f_r15"
).split()
_STATES = ("new", "runnable", "running", "parked", "exiting")
_SAVED = ("rbp", "rbx", "r12", "r13", "r14", "r15")
# Stop after this many green threads when finding where each one is: one
# unwind each, and a million-thread process should still answer.
_WHERE_MAX = 1000
_MAX_FRAMES = 256

# The state shared by every copy of this file loaded into this gdb (see
# "Loaded twice" above): takeover, the _Takeover in force or None.
_STATE_KEY = "fern_gdb_state"
_state = sys.modules.get(_STATE_KEY)
if _state is None:
    _state = types.ModuleType(_STATE_KEY, "fern gdb extension: state shared by its copies")
    _state.takeover = None
    _state.loads = 0
    sys.modules[_STATE_KEY] = _state


class GreenThread:
    """One green thread as read from the registry."""

    def __init__(self, **kw):
        self.__dict__.update(kw)

    def state_text(self):
        s = self.state
        if s == "parked" and self.what:
            s += " on " + self.what
            if self.obj and self.what not in ("sleep",):
                s += " 0x%x" % self.obj
        return s


class _Reader:
    """The registry of one inferior, read through gdb's memory access."""

    def __init__(self):
        self.inf = gdb.selected_inferior()
        if not self.inf.threads():
            raise gdb.GdbError("fern: no process or core file")
        try:
            addr = int(gdb.parse_and_eval("(unsigned long)&fern_debug_map"))
        except gdb.error:
            raise gdb.GdbError("fern: no fern_debug_map symbol (program not linked with fern?)")
        magic, version, words = struct.unpack("<3Q", self._read(addr, 24))
        if magic != _MAGIC:
            raise gdb.GdbError("fern: fern_debug_map has a bad magic number")
        if version != _VERSION or words < len(_FIELDS):
            raise gdb.GdbError(
                "fern: fern_debug_map version %d, this extension reads %d" % (version, _VERSION)
            )
        vals = struct.unpack("<%dQ" % words, self._read(addr + 24, 8 * words))
        self.m = dict(zip(_FIELDS, vals))
        self._strings = {}

    def _read(self, addr, n):
        try:
            return self.inf.read_memory(addr, n).tobytes()
        except gdb.MemoryError:
            raise gdb.GdbError("fern: cannot read %d bytes at 0x%x" % (n, addr))

    def u64(self, addr):
        return struct.unpack("<Q", self._read(addr, 8))[0]

    def u32(self, addr):
        return struct.unpack("<I", self._read(addr, 4))[0]

    def cstring(self, addr, limit=64):
        if not addr:
            return None
        if addr not in self._strings:
            try:
                raw = self.inf.read_memory(addr, limit).tobytes()
            except gdb.MemoryError:
                raw = b"?"
            self._strings[addr] = raw.split(b"\0", 1)[0].decode("utf-8", "replace")
        return self._strings[addr]

    def running(self):
        m = self.m
        return self.u32(m["runtime"] + m["rt_running"]) != 0

    def on_cpu(self):
        """{thread address: (worker index, kernel thread id)} of running ones."""
        m = self.m
        out = {}
        c = self.u64(m["runtime"] + m["rt_clusters"])
        seen = set()
        while c and c not in seen:
            seen.add(c)
            for i in range(self.u32(c + m["c_nworkers"])):
                w = self.u64(c + m["c_workers"] + 8 * i)
                cur = self.u64(w + m["w_cur"])
                if cur and cur != w + m["w_g0"]:
                    tid = struct.unpack("<i", self._read(w + m["w_tid"], 4))[0]
                    out[cur] = (self.u32(w + m["w_index"]), tid)
            c = self.u64(c + m["c_next"])
        return out

    def threads(self):
        m = self.m
        cpu = self.on_cpu()
        size = m["thread_size"]
        out = []
        chunk = self.u64(m["runtime"] + m["rt_chunks"])
        seen = set()
        while chunk and chunk not in seen:
            seen.add(chunk)
            buf = self._read(chunk, m["chunk_threads"] + size * m["chunk_count"])
            for i in range(m["chunk_count"]):
                b = m["chunk_threads"] + i * size
                if buf[b + m["t_alloc"]] != m["alloc_live"]:
                    continue

                def q(off):
                    return struct.unpack_from("<Q", buf, b + off)[0]

                st = buf[b + m["t_run_state"]]
                raw = buf[b + m["t_name"] : b + m["t_name"] + m["t_name_size"]]
                addr = chunk + b
                worker, tid = cpu.get(addr, (None, None))
                out.append(
                    GreenThread(
                        addr=addr,
                        id=q(m["t_id"]),
                        name=raw.split(b"\0", 1)[0].decode("utf-8", "replace"),
                        state=_STATES[st] if st < len(_STATES) else "?",
                        what=self.cstring(q(m["t_wait_what"])),
                        obj=q(m["t_wait_obj"]),
                        sp=q(m["t_sp"]),
                        fn=q(m["t_fn"]),
                        worker=worker,
                        tid=tid,
                    )
                )
            chunk = struct.unpack_from("<Q", buf, 0)[0]
        out.sort(key=lambda t: t.id)
        return out

    def saved_registers(self, t):
        """The registers fern_ctx_switch saved on t's stack: {name: int}."""
        m = self.m
        frame = self._read(t.sp, m["frame_size"])

        def at(off):
            return struct.unpack_from("<Q", frame, off)[0]

        regs = {r: at(m["f_" + r]) for r in _SAVED}
        regs["rip"] = at(m["f_rip"])
        regs["rsp"] = t.sp + m["frame_size"]
        return regs


# ---------------------------------------------------------------------------
# Seeing a parked thread's frames


class _FrameId:
    def __init__(self, sp, pc):
        self.sp = sp
        self.pc = pc


class _Takeover:
    def __init__(self, host, level, regs):
        self.host = host  # global number of the OS thread whose frame is taken
        self.level = level  # the level of the frame taken
        self.regs = regs


class _GreenUnwinder(gdb.unwinder.Unwinder):
    """Answers "who called the host frame?" with the green thread's registers."""

    def __init__(self):
        super().__init__("fern")

    def __call__(self, pending):
        tk = _state.takeover
        if tk is None or pending.level() != tk.level:
            return None
        th = gdb.selected_thread()
        if th is None or th.global_num != tk.host:
            return None
        sp_type = pending.read_register("rsp").type
        pc_type = pending.read_register("rip").type
        # Frame id at the green thread's canonical frame address (its stack
        # pointer before the call into fern_ctx_switch): the green frames
        # above are all at or above it, so gdb never sees one "inner" to it.
        fid = _FrameId(gdb.Value(tk.regs["rsp"]).cast(sp_type), pending.read_register("rip"))
        info = pending.create_unwind_info(fid)
        for name, val in tk.regs.items():
            t = pc_type if name == "rip" else sp_type
            info.add_saved_register(name, gdb.Value(val).cast(t))
        return info


class _HideHost:
    """Frame filter: while a takeover is on, show only the green frames."""

    def __init__(self):
        self.name = "fern"
        self.priority = 100
        self.enabled = True

    def filter(self, frames):
        tk = _state.takeover
        if tk is None:
            return frames
        th = gdb.selected_thread()
        if th is None or th.global_num != tk.host:
            return frames
        return (f for f in frames if f.inferior_frame().level() > tk.level)


def _first_real_level():
    f = gdb.newest_frame()
    level = 0
    while f is not None and f.type() == gdb.INLINE_FRAME:
        f = f.older()
        level += 1
    return level


class _Inside:
    """Context: gdb's selected frame is t's innermost one, until exit."""

    def __init__(self, reader, t):
        self.reader = reader
        self.t = t
        self.old_thread = None

    def __enter__(self):
        t = self.t
        self.old_thread = gdb.selected_thread()
        if t.tid is not None:
            for th in self.reader.inf.threads():
                if th.ptid[1] == t.tid:
                    th.switch()
                    return gdb.newest_frame()
            raise gdb.GdbError("fern: thread %d runs on LWP %d, which gdb does not list" % (t.id, t.tid))
        if not t.sp:
            raise gdb.GdbError(
                "fern: thread %d (%s) has no saved context: it %s"
                % (t.id, t.state, "has not started" if t.state == "new" else "is not parked")
            )
        regs = self.reader.saved_registers(t)
        if regs["rip"] == 0:
            # gcore reads 1 MiB at a time and drops a piece holding a
            # MADV_GUARD_INSTALL guard page; kernel core dumps keep stacks.
            raise gdb.GdbError(
                "fern: thread %d's stack is not in this core (a gcore of stacks "
                "guarded by MADV_GUARD_INSTALL: use a kernel core dump, or run "
                "with FERN_GUARD=mprotect)" % t.id
            )
        host = gdb.selected_thread()
        if host is None:
            raise gdb.GdbError("fern: no thread selected")
        gdb.invalidate_cached_frames()
        level = _first_real_level()
        _state.takeover = _Takeover(host.global_num, level, regs)
        gdb.invalidate_cached_frames()
        f = gdb.newest_frame()
        while f is not None and f.level() <= level:
            f = f.older()
        if f is None:
            self.__exit__(None, None, None)
            raise gdb.GdbError("fern: thread %d's saved frame does not unwind" % t.id)
        f.select()
        return f

    def __exit__(self, *exc):
        if _state.takeover is not None:
            _state.takeover = None
            gdb.invalidate_cached_frames()
        if self.old_thread is not None and self.old_thread.is_valid():
            self.old_thread.switch()
        return False


def _in_runtime(frame):
    """Is frame's code fern's own (the library, or a fern_* function of a
    static link)?"""
    lib = gdb.solib_name(frame.pc())
    if lib is not None and "libfern.so" in lib:
        return True
    name = frame.name()
    return name is not None and name.startswith("fern_")


def _where(first):
    """The first frame outside the runtime (where the thread's own code
    stopped), and the runtime function it called."""
    f = first
    inner = None
    for _ in range(_MAX_FRAMES):
        if f is None:
            break
        if not _in_runtime(f):
            name = f.name() or "0x%x" % f.pc()
            return "%s (in %s)" % (name, inner) if inner else name
        inner = f.name() or "0x%x" % f.pc()
        try:
            f = f.older()
        except gdb.error:
            break
    return inner or "?"


def _symbol(addr):
    s = gdb.execute("info symbol 0x%x" % addr, to_string=True).strip()
    return s.split(" in section ")[0] if not s.startswith("No symbol") else "0x%x" % addr


def _where_of(reader, t):
    if t.state == "new":
        return "not started: " + _symbol(t.fn)
    if t.tid is None and not t.sp:
        return "-"
    try:
        with _Inside(reader, t) as f:
            return _where(f)
    except (gdb.error, gdb.GdbError) as e:
        return "? (%s)" % str(e).replace("fern: ", "").split(" (")[0]


def _select(threads, words):
    """Threads named by ids or names, in order; raises on an unknown one."""
    out = []
    for w in words:
        hit = [t for t in threads if str(t.id) == w] if w.isdigit() else []
        hit = hit or [t for t in threads if t.name == w]
        if not hit:
            raise gdb.GdbError("fern: no green thread with id or name %r" % w)
        out.extend(t for t in hit if t not in out)
    return out


def _current(reader, threads):
    th = gdb.selected_thread()
    if th is None:
        return None
    for t in threads:
        if t.tid is not None and t.tid == th.ptid[1]:
            return t
    return None


def _open():
    reader = _Reader()
    if not reader.running():
        raise gdb.GdbError("fern: the runtime is not running (fern_init not called, or shut down)")
    return reader


class InfoFernThreads(gdb.Command):
    """List green threads: info fern-threads [ID|NAME...]

One line each: id, name, state (running, runnable, parked and on what:
mutex, cond, chan send/recv, select, fd read/write, sleep, join, ...), the
worker running it, and where it is: the function that made the fern call it
is parked in. '*' marks the thread running on gdb's selected thread."""

    def __init__(self):
        super().__init__("info fern-threads", gdb.COMMAND_STATUS)

    def invoke(self, arg, from_tty):
        reader = _open()
        threads = reader.threads()
        if arg.strip():
            threads = _select(threads, gdb.string_to_argv(arg))
        cur = _current(reader, threads)
        rows = []
        for n, t in enumerate(threads):
            where = _where_of(reader, t) if n < _WHERE_MAX else "(not looked up)"
            worker = "-" if t.worker is None else str(t.worker)
            rows.append(("*" if t is cur else " ", str(t.id), t.name or "-", t.state_text(), worker, where))
        if not rows:
            print("No green threads.")
            return
        head = (" ", "Id", "Name", "State", "Worker", "Where")
        width = [max(len(r[i]) for r in rows + [head]) for i in range(5)]
        for r in [head] + rows:
            print("  ".join(r[i].ljust(width[i]) for i in range(5)) + "  " + r[5])


class FernThread(gdb.Command):
    """Run a gdb command in a green thread's context.

fern-thread                   show the green thread on the selected OS thread
fern-thread ID|NAME CMD...    run CMD (bt, frame 2, info locals, ...) with
                              that green thread's frames selected
fern-thread apply all CMD...  run CMD in every green thread that has frames"""

    def __init__(self):
        super().__init__("fern-thread", gdb.COMMAND_STACK)

    def invoke(self, arg, from_tty):
        reader = _open()
        threads = reader.threads()
        words = arg.split(None, 1)
        if not words:
            t = _current(reader, threads)
            if t is None:
                print("The selected thread runs no green thread.")
            else:
                print('[Current green thread is %d "%s" (%s)]' % (t.id, t.name, t.state_text()))
            return
        if words[0] == "apply":
            rest = words[1].split(None, 1) if len(words) > 1 else []
            if len(rest) < 2 or rest[0] != "all":
                raise gdb.GdbError("usage: fern-thread apply all CMD...")
            for t in threads:
                if t.tid is None and not t.sp:
                    continue
                print('\nGreen thread %d "%s" (%s):' % (t.id, t.name, t.state_text()))
                self._run(reader, t, rest[1], from_tty)
            return
        if len(words) < 2:
            raise gdb.GdbError("usage: fern-thread ID|NAME CMD...")
        targets = _select(threads, [words[0]])
        for t in targets:
            if len(targets) > 1:
                print('\nGreen thread %d "%s" (%s):' % (t.id, t.name, t.state_text()))
            self._run(reader, t, words[1], from_tty)

    @staticmethod
    def _run(reader, t, cmd, from_tty):
        with _Inside(reader, t):
            gdb.execute(cmd, from_tty)


# Every load registers this copy's unwinder, frame filter and commands,
# replacing a previous copy's by name (see "Loaded twice" above): the
# embedded copy, which matches the library, runs after the installed file.
_state.loads += 1
gdb.unwinder.register_unwinder(None, _GreenUnwinder(), replace=True)
gdb.frame_filters["fern"] = _HideHost()
InfoFernThreads()
FernThread()
