#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""End-to-end checks of fern-memcached, runnable against memcached itself.

    memcached_check.py fern BIN        # apps/memcached (fern-memcached)
    memcached_check.py memcached BIN   # the reference, to prove the checks
    memcached_check.py fern BIN --memccapable   # only memcached's own test
                                                # client: memccapable -a, -b

Each check starts its own server on a free 127.0.0.1 port and stops it with
SIGTERM (exit code 0 required of fern-memcached). What is checked: the ASCII
commands and memcached's semantics (CAS, 64-bit incr/decr, relative, absolute
and negative expiry, delayed flush_all, noreply on every command that takes
it), bad input (ERROR, CLIENT_ERROR, a too-large value answered and swallowed,
a bad data chunk, an oversized line closing only its connection, a client
vanishing mid-value leaving no item), stats fields, LRU eviction under -m (read items included),
binary quiet commands and framing errors, 10,000 simultaneous connections each
answered, the -c limit, the open-file limit and command-line misuse. Checks that depend on where
fern-memcached differs from memcached on purpose (documented in
apps/memcached/README.md) run for fern only. Every wait is bounded.
"""
import os, re, resource, select, signal, socket, struct, subprocess, sys, time

FLAVOR, BIN = sys.argv[1], sys.argv[2]
# --connections N: the simultaneous-connections check's size (default 10,000;
# the TSan build uses fewer: TSan stops a process at 8,128 threads, and it
# counts every green thread)
CONNECTIONS = int(sys.argv[sys.argv.index("--connections") + 1]) if "--connections" in sys.argv else 10000
FERN = FLAVOR == "fern"
failures = []


def ok(name):
    print(f"ok    {name}", flush=True)


def check(cond, name, why=""):
    if cond:
        ok(name)
    else:
        print(f"FAIL  {name}: {why}", flush=True)
        failures.append(name)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Server:
    def __init__(self, *args, nofile=None):
        pre = None
        if nofile:
            pre = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        if FERN:
            cmd = [BIN, "-p", "0", "-t", "2", *args]
        else:
            self.port = free_port()
            cmd = [BIN, "-p", str(self.port), "-l", "127.0.0.1", "-U", "0", "-t", "2", *args]
            if os.geteuid() == 0:
                cmd += ["-u", "nobody"]
        # stderr is the test's own: sanitizer reports show in the log
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, preexec_fn=pre)
        deadline = time.monotonic() + 10
        if FERN:
            line = b""
            while not line.endswith(b"\n") and time.monotonic() < deadline:
                if select.select([self.p.stdout], [], [], 0.2)[0]:
                    c = os.read(self.p.stdout.fileno(), 1)
                    if not c:
                        break
                    line += c
            m = re.match(rb"listening on 127\.0\.0\.1:(\d+)\n", line)
            if not m:
                self.p.kill()
                sys.exit(f"FAIL  start: no 'listening on' line (got {line!r})")
            self.port = int(m.group(1))
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        self.p.kill()
        sys.exit("FAIL  start: server not reachable")

    def conn(self):
        return Conn(self.port)

    def stop(self, sig=signal.SIGTERM, timeout=5):
        self.p.send_signal(sig)
        try:
            rc = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            return None
        return rc


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buf = b""

    def send(self, data):
        self.s.sendall(data)

    def line(self):
        while b"\r\n" not in self.buf:
            d = self.s.recv(65536)
            if not d:
                raise EOFError
            self.buf += d
        l, self.buf = self.buf.split(b"\r\n", 1)
        return l

    def exact(self, n):
        while len(self.buf) < n:
            d = self.s.recv(65536)
            if not d:
                raise EOFError
            self.buf += d
        r, self.buf = self.buf[:n], self.buf[n:]
        return r

    def cmd(self, data):
        self.send(data)
        return self.line()

    def get(self, key, cmd=b"get"):
        """{key: (flags, value, cas)} for a retrieval command."""
        self.send(cmd + b" " + key + b"\r\n")
        out = {}
        while True:
            l = self.line()
            if l == b"END":
                return out
            parts = l.split()
            assert parts[0] == b"VALUE", l
            v = self.exact(int(parts[3]) + 2)[:-2]
            out[parts[1]] = (int(parts[2]), v, int(parts[4]) if len(parts) > 4 else None)

    def stats(self):
        self.send(b"stats\r\n")
        st = {}
        while True:
            l = self.line()
            if l == b"END":
                return st
            _, k, v = l.split(b" ", 2)
            st[k.decode()] = v.decode()

    def closed(self, timeout=3):
        self.s.settimeout(timeout)
        try:
            while True:
                d = self.s.recv(65536)
                if not d:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False


def value(c, key):
    r = c.get(key)
    return r[key][1] if key in r else None


def t_basic(srv):
    c = srv.conn()
    check(c.cmd(b"set a 7 0 5\r\nhello\r\n") == b"STORED", "set")
    check(c.get(b"a").get(b"a", (0, 0))[:2] == (7, b"hello"), "get returns flags and value")
    check(c.cmd(b"add a 0 0 1\r\nx\r\n") == b"NOT_STORED", "add on existing")
    check(c.cmd(b"replace nope 0 0 1\r\nx\r\n") == b"NOT_STORED", "replace on missing")
    check(c.cmd(b"append a 0 0 6\r\n world\r\n") == b"STORED", "append")
    check(c.cmd(b"prepend a 0 0 1\r\n>\r\n") == b"STORED", "prepend")
    check(value(c, b"a") == b">hello world", "append + prepend value")
    cas = c.get(b"a", b"gets")[b"a"][2]
    check(c.cmd(b"cas a 0 0 1 %d\r\nX\r\n" % (cas + 1)) == b"EXISTS", "cas mismatch")
    check(c.cmd(b"cas a 0 0 1 %d\r\nY\r\n" % cas) == b"STORED", "cas match")
    check(c.cmd(b"cas a 0 0 1 %d\r\nZ\r\n" % cas) == b"EXISTS", "cas reused")
    check(c.cmd(b"cas nope 0 0 1 1\r\nZ\r\n") == b"NOT_FOUND", "cas missing")
    check(c.get(b"a b nope a") .keys() == {b"a"}, "multi-get")
    check(c.cmd(b"delete a\r\n") == b"DELETED" and c.cmd(b"delete a\r\n") == b"NOT_FOUND", "delete")
    check(c.cmd(b"bogus\r\n") == b"ERROR", "unknown command")
    check(c.cmd(b"set k 0 0 -1\r\n") == b"CLIENT_ERROR bad command line format", "negative length")
    check(c.cmd(b"get " + b"k" * 251 + b"\r\n") == b"CLIENT_ERROR bad command line format", "key too long")
    check(c.cmd(b"version\r\n").startswith(b"VERSION "), "version")
    check(c.cmd(b"verbosity 1\r\n") == b"OK", "verbosity")


def t_arith(srv):
    c = srv.conn()
    c.cmd(b"set n 0 0 20\r\n18446744073709551615\r\n")
    check(c.cmd(b"incr n 1\r\n") == b"0", "incr wraps at 2^64")
    check(c.cmd(b"decr n 5\r\n") == b"0", "decr stops at 0")
    check(c.cmd(b"incr n 18446744073709551615\r\n") == b"18446744073709551615", "incr by 2^64-1")
    check(c.cmd(b"incr n 18446744073709551616\r\n") == b"CLIENT_ERROR invalid numeric delta argument", "delta over 64 bits")
    check(c.cmd(b"incr nope 1\r\n") == b"NOT_FOUND", "incr missing")
    c.cmd(b"set s 0 0 3\r\nabc\r\n")
    check(c.cmd(b"incr s 1\r\n") == b"CLIENT_ERROR cannot increment or decrement non-numeric value", "incr non-numeric")
    c.cmd(b"set m 0 0 2\r\n99\r\n")
    check(c.cmd(b"incr m 1\r\n") == b"100" and value(c, b"m") == b"100", "incr grows the value")
    cas1 = c.get(b"m", b"gets")[b"m"][2]
    c.cmd(b"incr m 1\r\n")
    check(c.get(b"m", b"gets")[b"m"][2] != cas1, "incr changes the CAS")


def t_expiry(srv):
    c = srv.conn()
    now = int(time.time())
    c.cmd(b"set rel 0 1 1\r\nx\r\n")
    c.cmd(b"set abs 0 %d 1\r\nx\r\n" % (now + 2))
    c.cmd(b"set past 0 %d 1\r\nx\r\n" % (now - 10))
    check(c.cmd(b"set neg 0 -1 1\r\nx\r\n") == b"STORED" and value(c, b"neg") is None, "negative exptime: stored, gone")
    check(value(c, b"past") is None, "absolute time in the past: gone")
    check(value(c, b"rel") == b"x" and value(c, b"abs") == b"x", "not yet expired")
    c.cmd(b"set touched 0 1 1\r\nx\r\n")
    check(c.cmd(b"touch touched 100\r\n") == b"TOUCHED", "touch")
    check(c.cmd(b"touch nope 100\r\n") == b"NOT_FOUND", "touch missing")
    c.cmd(b"set gat 0 1 1\r\ng\r\n")
    r = c.get(b"100 gat nope", b"gats")
    check(list(r) == [b"gat"] and r[b"gat"][2] is not None, "gats returns value and CAS")
    deadline = time.time() + 4
    while time.time() < deadline and (value(c, b"rel") or value(c, b"abs")):
        time.sleep(0.2)
    check(value(c, b"rel") is None and value(c, b"abs") is None, "relative and absolute expiry")
    check(value(c, b"touched") == b"x" and value(c, b"gat") == b"g", "touch/gat extend the expiry")
    # delayed flush_all: items stored before the time go at that time
    c.cmd(b"set f1 0 0 1\r\nx\r\n")
    check(c.cmd(b"flush_all 2\r\n") == b"OK" and value(c, b"f1") == b"x", "flush_all delay: not yet")
    deadline = time.time() + 4
    while time.time() < deadline and value(c, b"f1"):
        time.sleep(0.2)
    check(value(c, b"f1") is None, "flush_all delay: flushed")
    time.sleep(1.1)  # memcached's flush time has a one-second grain
    c.cmd(b"set f2 0 0 1\r\nx\r\n")
    check(value(c, b"f2") == b"x", "stored after the flush time: kept")
    check(c.cmd(b"flush_all\r\n") == b"OK" and value(c, b"f2") is None, "flush_all")


def t_noreply(srv):
    c = srv.conn()
    c.send(b"set a 0 0 1 noreply\r\n1\r\nadd a 0 0 1 noreply\r\n2\r\nreplace a 0 0 1 noreply\r\n3\r\n"
           b"append a 0 0 1 noreply\r\n4\r\nprepend a 0 0 1 noreply\r\n5\r\nincr a 1 noreply\r\n"
           b"decr a 2 noreply\r\ntouch a 100 noreply\r\ncas a 0 0 1 1 noreply\r\nx\r\n"
           b"delete nope noreply\r\nverbosity 0 noreply\r\nset b 0 0 1 noreply\r\nb\r\n"
           b"delete b noreply\r\nflush_all 0 noreply\r\nset c 0 0 1 noreply\r\nc\r\nversion\r\n")
    check(c.line().startswith(b"VERSION"), "noreply: nothing but the version line")
    check(value(c, b"a") is None and value(c, b"c") == b"c", "noreply commands took effect")


def t_bad_input(srv):
    c, other = srv.conn(), srv.conn()
    other.cmd(b"set keep 0 0 4\r\nkeep\r\n")
    big = 1024 * 1024 + 100
    c.cmd(b"set huge 0 0 1\r\nx\r\n")
    c.send(b"set huge 0 0 %d\r\n" % big + b"v" * big + b"\r\n")
    check(c.line() == b"SERVER_ERROR object too large for cache", "too large: SERVER_ERROR")
    check(value(c, b"huge") is None, "too large: data swallowed, old value gone")
    c.send(b"set chunk 0 0 2\r\nabcd\r\n")  # "cd" ends the value; "\r\n" is an empty line
    check(c.line() == b"CLIENT_ERROR bad data chunk" and c.line() == b"ERROR" and value(c, b"chunk") is None,
          "bad data chunk: not stored")
    # a client that vanishes mid-value leaves nothing half-written
    v = srv.conn()
    v.send(b"set half 0 0 100\r\n" + b"h" * 50)
    v.s.close()
    time.sleep(0.2)
    check(value(c, b"half") is None, "vanished mid-value: no item")
    # an oversized line closes that connection and nothing else
    o = srv.conn()
    try:
        o.send(b"x" * 200000)
    except OSError:
        pass
    check(o.closed(), "oversized line closes the connection")
    check(value(other, b"keep") == b"keep" and value(c, b"keep") == b"keep", "other connections unaffected")


def t_stats(srv):
    c = srv.conn()
    c2 = srv.conn()
    c2.cmd(b"version\r\n")  # answered, hence accepted and counted
    s0 = c.stats()
    for f in ("curr_items", "total_items", "bytes", "curr_connections", "total_connections", "get_hits",
              "get_misses", "evictions", "cmd_get", "cmd_set", "limit_maxbytes", "threads", "uptime", "pid"):
        check(f in s0, f"stats has {f}")
    c.cmd(b"set s1 0 0 3\r\nabc\r\n")
    c.cmd(b"set s2 0 0 3\r\nabc\r\n")
    value(c, b"s1"), value(c, b"nope")
    s1 = c.stats()
    d = lambda k: int(s1[k]) - int(s0[k])
    check(d("curr_items") == 2 and d("total_items") == 2, "stats: items counted", f"{s0} {s1}")
    check(d("get_hits") == 1 and d("get_misses") == 1 and d("cmd_get") == 2, "stats: hits and misses")
    check(d("bytes") > 6, "stats: bytes grow")
    check(int(s1["curr_connections"]) >= 2, "stats: curr_connections")
    check(c.cmd(b"stats reset\r\n") == b"RESET" and int(c.stats()["get_hits"]) == 0, "stats reset")
    c2.s.close()


def t_eviction(srv):
    c = srv.conn()
    val = b"e" * 10000
    for i in range(3000):  # 30 MB into an 8 MB cache
        c.send(b"set e%d 0 0 %d noreply\r\n%s\r\n" % (i, len(val), val))
        if i % 20 == 0:
            value(c, b"hot")  # keeps the connection in step
        if i == 0:
            c.cmd(b"set hot 0 0 3\r\nhot\r\n")
    st = c.stats()
    check(int(st["evictions"]) > 0, "LRU: evictions counted", st.get("evictions"))
    check(int(st["bytes"]) <= 8 * 1024 * 1024, "LRU: bytes within -m", st.get("bytes"))
    check(value(c, b"hot") == b"hot", "LRU: a key in use survives")
    check(value(c, b"e0") is None and value(c, b"e2999") == val, "LRU: oldest gone, newest kept")



def t_eviction_all_read(srv):
    # Every item read right after its store: eviction must still make room
    # (fern-memcached gives read items a second chance; with all of them
    # marked, the walk has to come round and evict, not give up).
    c = srv.conn()
    val = b"r" * 10000
    stored = 0
    for i in range(2000):  # 20 MB into an 8 MB cache
        stored += c.cmd(b"set r%d 0 0 %d\r\n%s\r\n" % (i, len(val), val)) == b"STORED"
        value(c, b"r%d" % i)
    st = c.stats()
    check(stored == 2000, "LRU: every set stored when every item was read", "%d of 2000" % stored)
    check(int(st["evictions"]) > 0, "LRU: read items evicted in turn", st.get("evictions"))
    check(int(st["bytes"]) <= 8 * 1024 * 1024, "LRU: bytes within -m with read items", st.get("bytes"))
    check(value(c, b"r1999") == val, "LRU: the newest read item kept")



def t_evict_last_read(srv):  # fern only, -m 2: one item fills the cache
    # The only item, read, must still give way to the next (its second
    # chance takes it round the list once, then it is evicted).
    c = srv.conn()
    val = b"l" * 1200000
    check(c.cmd(b"set l1 0 0 %d\r\n%s\r\n" % (len(val), val)) == b"STORED", "LRU: one big item stored")
    check(value(c, b"l1") == val, "LRU: the big item read")
    check(c.cmd(b"set l2 0 0 %d\r\n%s\r\n" % (len(val), val)) == b"STORED",
          "LRU: the next big item evicts the only, read one")
    check(value(c, b"l1") is None and value(c, b"l2") == val, "LRU: the read item gone, the new one kept")


def bin_req(op, key=b"", ext=b"", val=b"", opaque=0, cas=0):
    return struct.pack(">BBHBBHIIQ", 0x80, op, len(key), len(ext), 0, 0, len(ext) + len(key) + len(val), opaque, cas) + ext + key + val


def bin_resp(c):
    h = c.exact(24)
    magic, op, kl, el, _, status, bl, opaque, cas = struct.unpack(">BBHBBHIIQ", h)
    body = c.exact(bl)
    return op, status, body[el:el + kl], body[el + kl:], opaque, cas


def t_binary(srv):
    c = srv.conn()
    c.send(bin_req(0x01, b"bk", struct.pack(">II", 5, 0), b"bval", 1))
    op, st, k, v, opq, cas = bin_resp(c)
    check(st == 0 and opq == 1 and cas != 0, "binary set")
    # quiet gets: only the hit answers; the noop closes the batch
    c.send(bin_req(0x09, b"nope", opaque=2) + bin_req(0x0d, b"bk", opaque=3) + bin_req(0x0a, opaque=4))
    op, st, k, v, opq, _ = bin_resp(c)
    check((op, st, k, v, opq) == (0x0d, 0, b"bk", b"bval", 3), "binary getkq hit answers, getq miss is silent")
    check(bin_resp(c)[0] == 0x0a, "binary noop after quiet gets")
    c.send(bin_req(0x05, b"ctr", struct.pack(">QQI", 5, 42, 0)))
    op, st, k, v, _, _ = bin_resp(c)
    check(st == 0 and struct.unpack(">Q", v)[0] == 42, "binary incr creates with the initial value")
    c.send(bin_req(0x05, b"ctr", struct.pack(">QQI", 5, 42, 0)))
    check(struct.unpack(">Q", bin_resp(c)[3])[0] == 47, "binary incr")
    c.send(bin_req(0x06, b"nope", struct.pack(">QQI", 1, 0, 0xffffffff)))
    check(bin_resp(c)[1] == 1, "binary decr on missing with exptime 0xffffffff: not found")
    big = 1024 * 1024 + 10
    c.send(bin_req(0x01, b"bk", struct.pack(">II", 0, 0), b"x" * big))
    check(bin_resp(c)[1] == 3, "binary too large: E2BIG")
    c.send(bin_req(0x00, b"bk"))
    check(bin_resp(c)[1] == 1, "binary too large: swallowed, old value gone")
    c.send(bin_req(0x42, b"", b"", b"zz"))
    check(bin_resp(c)[1] == 0x81, "binary unknown opcode")
    c.send(bin_req(0x0a))
    check(bin_resp(c)[0] == 0x0a, "binary connection goes on after unknown opcode and E2BIG")
    c.send(bin_req(0x00, b"k", b"1234") + bin_req(0x0a))
    check(bin_resp(c)[1] == 4 and c.closed(), "binary get with extras: EINVAL, then closed")
    if not FERN:
        return  # memcached answers an unframed request with UNKNOWN_COMMAND
    c = srv.conn()
    c.send(b"\x80" + b"\x00" * 3 + b"\x10" + b"\x00" * 3 + b"\x00\x00\x00\x01" + b"\x00" * 12
           + b"\x00" * 16)  # the extras: both servers wait for them first
    resp = bin_resp(c)
    check(resp[1] == 4 and c.closed(), "binary unframed request: EINVAL, then closed")


def t_many(srv, n=10000):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < n + 100:
        check(False, f"{n} connections", f"the hard open-file limit ({hard}) is too low for the client")
        return
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    socks = []
    t0 = time.monotonic()
    try:
        for i in range(n):
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
            socks.append(s)
        for i, s in enumerate(socks):
            s.sendall(b"set many%d 0 0 %d\r\n%d\r\n" % (i, len(str(i)), i))
        good = 0
        for s in socks:
            if s.recv(64) == b"STORED\r\n":
                good += 1
        st = srv.conn().stats()
        check(good == n and int(st["curr_connections"]) >= n, f"{n} simultaneous connections, each answered",
              f"{good} answered, curr_connections {st['curr_connections']}")
        c = srv.conn()
        check(value(c, b"many%d" % (n - 1)) == str(n - 1).encode(), f"{n} connections: data stored")
    finally:
        for s in socks:
            s.close()
    print(f"      ({n} connections in {time.monotonic() - t0:.1f} s)")


def t_conn_limit(srv):  # run with -c 5
    first = srv.conn()
    deadline = time.monotonic() + 10  # the start-up probe's connection may still count
    while int(first.stats()["curr_connections"]) != 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    conns = [first] + [srv.conn() for _ in range(4)]
    check(all(c.cmd(b"version\r\n").startswith(b"VERSION") for c in conns), "-c: up to the limit served")
    extra = srv.conn()
    check(extra.line() == b"ERROR Too many open connections" and extra.closed(), "-c: the one too many is refused")
    check(conns[0].cmd(b"version\r\n").startswith(b"VERSION"), "-c: the others still served")


def run(name, fn, *args, nofile=None, stop_timeout=5):
    srv = Server(*args, nofile=nofile)
    try:
        fn(srv)
    except Exception as e:  # noqa: BLE001 - a check that raised has failed
        check(False, name, f"{type(e).__name__}: {e}")
    t0 = time.monotonic()
    rc = srv.stop(timeout=stop_timeout)
    if time.monotonic() - t0 > 1:
        print(f"      (stopped in {time.monotonic() - t0:.1f} s)")
    if FERN:
        check(rc == 0, f"{name}: SIGTERM stops the server with exit code 0", f"rc={rc}")


def t_memccapable(srv):
    for proto in ("-a", "-b"):
        r = subprocess.run(["memccapable", "-h", "127.0.0.1", "-p", str(srv.port), proto, "-t", "10"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        out = r.stdout.decode(errors="replace")
        print(out, end="")
        check(r.returncode == 0 and "All tests passed" in out, f"memccapable {proto}: every test passes")


if "--memccapable" in sys.argv:
    run("memccapable", t_memccapable)
    print(f"{FLAVOR}: {len(failures)} failures" + (f": {failures}" if failures else ""))
    sys.exit(1 if failures else 0)

run("basic", t_basic)
run("arith", t_arith)
run("expiry", t_expiry)
run("noreply", t_noreply)
run("bad input", t_bad_input)
run("stats", t_stats)
run("eviction", t_eviction, "-m", "8")
run("eviction of read items", t_eviction_all_read, "-m", "8")
run("binary", t_binary)
run(f"{CONNECTIONS} connections", lambda srv: t_many(srv, CONNECTIONS), "-c", str(CONNECTIONS + 1000),
    stop_timeout=60)  # thousands of threads finishing: slow under the sanitizers
if FERN:
    run("conn limit", t_conn_limit, "-c", "5")
    run("eviction of the only item", t_evict_last_read, "-m", "2", "-I", "1500k")
    # -c raises the open-file limit from a low soft limit
    srv = Server("-c", "5000", nofile=1024)
    lim = open(f"/proc/{srv.p.pid}/limits").read()
    soft = int(re.search(r"Max open files\s+(\d+)", lim).group(1))
    check(soft >= 5000, "-c 5000 raises the open-file soft limit", f"soft {soft}")
    c = srv.conn()
    c.cmd(b"set x 0 0 1\r\nx\r\n")
    check(srv.stop(signal.SIGINT) == 0, "SIGINT with an open connection: exit code 0")
    # misuse of the command line: a clear message and exit code 2, no server
    for bad in (["-U", "5"], ["-m", "0"], ["-I", "512"], ["-p", "70000"], ["-c", "x"], ["--bogus"], ["extra"]):
        r = subprocess.run([BIN, *bad], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=10)
        check(r.returncode == 2 and r.stderr, f"command line {' '.join(bad)}: refused", f"rc {r.returncode}")

print(f"{FLAVOR}: {len(failures)} failures" + (f": {failures}" if failures else ""))
sys.exit(1 if failures else 0)
