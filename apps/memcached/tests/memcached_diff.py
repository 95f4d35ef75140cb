#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Differential checks: the same bytes to fern-memcached and to memcached.

    memcached_diff.py FERN_BIN MEMCACHED_BIN

Starts both servers on free 127.0.0.1 ports, sends each case's bytes on a
fresh connection to each, and compares what comes back: the bytes (the
version line's number aside) and whether the server closed the connection.
Each case also states the answer memcached 1.6.18 gives (measured on
loopback), so a case fails when either server strays from it. The cases are
the places where fern-memcached used to answer differently (issue 30):
noreply on a bad data chunk, flags of 2^32 and more, binary headers claiming
bodies of 2 GiB and more, oversized stores (fern answers them before the
value arrives, memcached once it is in: the bytes are the same) and command
lines holding a NUL. A missing program fails; nothing is skipped. Every wait
is bounded (10 s per reply, 0.3 s for "nothing yet").
"""
import os, re, select, socket, struct, subprocess, sys, time

FERN_BIN, MC_BIN = sys.argv[1], sys.argv[2]
failures = []
REPLY_WAIT = 10.0  # a reply that is due
QUIET_WAIT = 0.3  # checking that nothing was answered yet
NOOP_OPAQUE = 0xFEEDBEEF


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_fern():
    p = subprocess.Popen([FERN_BIN, "-p", "0", "-t", "2"], stdout=subprocess.PIPE)
    line, deadline = b"", time.monotonic() + 10
    while not line.endswith(b"\n") and time.monotonic() < deadline:
        if select.select([p.stdout], [], [], 0.2)[0]:
            c = os.read(p.stdout.fileno(), 1)
            if not c:
                break
            line += c
    m = re.match(rb"listening on 127\.0\.0\.1:(\d+)\n", line)
    if not m:
        p.kill()
        sys.exit(f"FAIL  start {FERN_BIN}: no 'listening on' line (got {line!r})")
    return p, int(m.group(1))


def start_memcached():
    port = free_port()
    cmd = [MC_BIN, "-p", str(port), "-l", "127.0.0.1", "-U", "0", "-t", "2"]
    if os.geteuid() == 0:
        cmd += ["-u", "nobody"]
    p = subprocess.Popen(cmd)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return p, port
        except OSError:
            if p.poll() is not None:
                break
            time.sleep(0.05)
    p.kill()
    sys.exit(f"FAIL  start {MC_BIN}: not listening on port {port}")


def hdr(op, keylen=0, extlen=0, bodylen=0, opaque=0):
    return struct.pack(">BBHBBHIIQ", 0x80, op, keylen, extlen, 0, 0, bodylen, opaque, 0)


NOOP = hdr(0x0A, opaque=NOOP_OPAQUE)


def bin_res(op, status, body=b"", opaque=0):
    return struct.pack(">BBHBBHIIQ", 0x81, op, 0, 0, 0, status, len(body), opaque, 0) + body


NOOP_RES = bin_res(0x0A, 0, opaque=NOOP_OPAQUE)


def ascii_done(buf):
    return re.search(rb"(^|\n)VERSION [^\r\n]*\r\n$", buf) is not None


def bin_done(buf):
    """True once the answers end with the noop's (walks whole answers)."""
    off = 0
    while len(buf) - off >= 24:
        n = struct.unpack(">I", buf[off + 8:off + 12])[0]
        if len(buf) - off < 24 + n:
            return False
        if buf[off + 1] == 0x0A and struct.unpack(">I", buf[off + 12:off + 16])[0] == NOOP_OPAQUE:
            return off + 24 + n == len(buf)
        off += 24 + n
    return False


def read_until(s, done, wait):
    """Read until done(buf), end of input or `wait` seconds; (buf, closed)."""
    buf, deadline = b"", time.monotonic() + wait
    while not (done and done(buf)):
        left = deadline - time.monotonic()
        if left <= 0:
            return buf, False
        s.settimeout(left)
        try:
            b = s.recv(65536)
        except socket.timeout:
            return buf, False
        except ConnectionResetError:
            return buf, True
        if not b:
            return buf, True
        buf += b
    return buf, False


def normalize(buf):
    return re.sub(rb"VERSION [^\r\n]*\r\n", b"VERSION\r\n", buf)


def run_case(port, pieces, end, fern):
    """Send the pieces; between two, collect what was answered meanwhile.
    end: 'version' (an ASCII `version` closes the case), 'noop' (a binary
    noop does) or 'close' (the server must close). fern: whether the server
    is fern-memcached (only it owes an early answer). Returns ([answered after
    each piece], closed)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=REPLY_WAIT)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    tail = {"version": b"version\r\n", "noop": NOOP, "close": b""}[end]
    done = {"version": ascii_done, "noop": bin_done, "close": None}[end]
    seen = []
    try:
        for i, (data, early) in enumerate(pieces):
            last = i == len(pieces) - 1
            try:
                s.sendall(data + (tail if last else b""))
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server closed: what it answered is still read below
            if last:
                buf, closed = read_until(s, done, REPLY_WAIT)
            elif early is None or not fern:  # nothing may be answered yet
                buf, closed = read_until(s, None, QUIET_WAIT)
            else:  # this much is due now (fern; memcached answers later)
                buf, closed = read_until(s, lambda b: len(b) >= len(early), REPLY_WAIT)
            seen.append(normalize(buf))
            if closed:
                return seen, True
        # 'version'/'noop': the answer to the closing request was read with
        # the connection open; 'close': read_until timed out, still open
        return seen, False
    finally:
        s.close()


def flush(port):
    with socket.create_connection(("127.0.0.1", port), timeout=REPLY_WAIT) as s:
        s.sendall(b"flush_all\r\n")
        buf, _ = read_until(s, lambda b: b.endswith(b"\r\n"), REPLY_WAIT)
        if buf != b"OK\r\n":
            sys.exit(f"FAIL  flush_all answered {buf!r}")


# name, pieces [(bytes, what fern answers before the next piece or None)],
# end, memcached 1.6.18's whole answer, whether the connection is closed,
# compare: "bytes" (the answers must be the same) or "closed" (only that
# both close: memcached drops answers it had not written yet when it closes
# on a wrong magic byte; fern sends them).
V = b"VERSION\r\n"
E2BIG = bin_res(0x01, 0x03, b"Too large.")
EINVAL_GET = bin_res(0x00, 0x04, b"Invalid arguments")
BIG = 2 * 1024 * 1024  # over the default -I 1m
CASES = [
    # 1. noreply silences CLIENT_ERROR bad data chunk; the bytes after the
    # announced length are the next command (here the empty line: ERROR).
    ("noreply bad data chunk: no answer", [(b"set k 0 0 3 noreply\r\nabcde\r\nget k\r\n", None)],
     "version", b"ERROR\r\nEND\r\n" + V, False, "bytes"),
    ("noreply bad data chunk, pipelined: the next answers stay in step",
     [(b"set k 0 0 1\r\na\r\nset k 0 0 3 noreply\r\nabcXY\r\nget k\r\n", None)],
     "version", b"STORED\r\nERROR\r\nVALUE k 0 1\r\na\r\nEND\r\n" + V, False, "bytes"),
    ("bad data chunk without noreply: CLIENT_ERROR", [(b"set k 0 0 3\r\nabcde\r\nget k\r\n", None)],
     "version", b"CLIENT_ERROR bad data chunk\r\nERROR\r\nEND\r\n" + V, False, "bytes"),
    # 2. flags: read as strtoul reads them, the low 32 bits stored.
    ("flags 2^32 stored as 0", [(b"set f 4294967296 0 1\r\nx\r\nget f\r\n", None)],
     "version", b"STORED\r\nVALUE f 0 1\r\nx\r\nEND\r\n" + V, False, "bytes"),
    ("flags 2^32 + 5 stored as 5", [(b"set f 4294967301 0 1\r\nx\r\nget f\r\n", None)],
     "version", b"STORED\r\nVALUE f 5 1\r\nx\r\nEND\r\n" + V, False, "bytes"),
    ("flags 2^64 - 1 stored as 2^32 - 1", [(b"set f 18446744073709551615 0 1\r\nx\r\nget f\r\n", None)],
     "version", b"STORED\r\nVALUE f 4294967295 1\r\nx\r\nEND\r\n" + V, False, "bytes"),
    ("flags 2^64 refused", [(b"set f 18446744073709551616 0 1\r\nx\r\nget f\r\n", None)],
     "version", b"CLIENT_ERROR bad command line format\r\nERROR\r\nEND\r\n" + V, False, "bytes"),
    ("flags -1 refused", [(b"set f -1 0 1\r\nx\r\nget f\r\n", None)],
     "version", b"CLIENT_ERROR bad command line format\r\nERROR\r\nEND\r\n" + V, False, "bytes"),
    ("flags +7, -0, -(2^64 - 1) as strtoul reads them",
     [(b"set f +7 0 1\r\nx\r\nget f\r\nset f -0 0 1\r\nx\r\nget f\r\n"
       b"set f -18446744073709551615 0 1\r\nx\r\nget f\r\n", None)],
     "version", b"STORED\r\nVALUE f 7 1\r\nx\r\nEND\r\nSTORED\r\nVALUE f 0 1\r\nx\r\nEND\r\n"
     b"STORED\r\nVALUE f 1 1\r\nx\r\nEND\r\n" + V, False, "bytes"),
    # 3. binary headers claiming 4 GiB bodies
    ("binary get claiming a 4 GiB body: EINVAL, closed", [(hdr(0x00, 1, 0, 0xFFFFFFFF) + b"k" + NOOP, None)],
     "close", EINVAL_GET, True, "bytes"),
    ("binary get with a value: EINVAL, closed", [(hdr(0x00, 1, 0, 5) + b"kxxxx" + NOOP, None)],
     "close", EINVAL_GET, True, "bytes"),
    ("binary noop claiming a 4 GiB body: EINVAL, closed", [(hdr(0x0A, 0, 0, 0xFFFFFFFF) + NOOP, None)],
     "close", bin_res(0x0A, 0x04, b"Invalid arguments"), True, "bytes"),
    ("binary get: nothing is answered before the key is in",
     [(hdr(0x00, 1, 0, 0xFFFFFFFF), None), (b"k", None)],
     "close", EINVAL_GET, True, "bytes"),
    ("binary set claiming a 4 GiB body: E2BIG at once, the next request answered",
     [(hdr(0x01, 1, 8, 0xFFFFFFFF) + bytes(8) + b"k", None)],
     "noop", E2BIG + NOOP_RES, False, "bytes"),
    ("binary set claiming a 2 GiB + 256 body: E2BIG, the next request answered",
     [(hdr(0x01, 1, 8, 0x80000100) + bytes(8) + b"k", None)],
     "noop", E2BIG + NOOP_RES, False, "bytes"),
    ("binary set claiming a 4 GiB body, value bytes sent: closed",
     [(hdr(0x01, 1, 8, 0xFFFFFFFF) + bytes(8) + b"k" + b"v" * 100, None)],
     "close", b"", True, "closed"),
    ("binary unknown opcode claiming a 4 GiB body: answered, the next request too",
     [(hdr(0x70, 0, 0, 0xFFFFFFFF), None)],
     "noop", bin_res(0x70, 0x81, b"Unknown command") + NOOP_RES, False, "bytes"),
    ("binary unknown opcode with a small body: the body is skipped",
     [(hdr(0x70, 0, 0, 5) + b"xxxxx", None)],
     "noop", bin_res(0x70, 0x81, b"Unknown command") + NOOP_RES, False, "bytes"),
    # 4. oversized stores: the same answer; fern sends it before the value
    ("binary set over -I: E2BIG (fern: before the value), value skipped",
     [(hdr(0x01, 1, 8, 9 + BIG) + bytes(8) + b"k", E2BIG), (b"v" * BIG, None)],
     "noop", E2BIG + NOOP_RES, False, "bytes"),
    ("ascii set over -I: SERVER_ERROR (fern: before the value), value skipped",
     [(b"set big 0 0 %d\r\n" % BIG, b"SERVER_ERROR object too large for cache\r\n"),
      (b"v" * BIG + b"\r\nget big\r\n", None)],
     "version", b"SERVER_ERROR object too large for cache\r\nEND\r\n" + V, False, "bytes"),
    # 5. a command line ends at its first NUL
    ("get a\\0b returns a", [(b"set a 0 0 1\r\nv\r\nget a\0b\r\n", None)],
     "version", b"STORED\r\nVALUE a 0 1\r\nv\r\nEND\r\n" + V, False, "bytes"),
    ("get a\\0b a: one value (the rest of the line is gone)", [(b"set a 0 0 1\r\nv\r\nget a\0b a\r\nget x a\0\r\n", None)],
     "version", b"STORED\r\nVALUE a 0 1\r\nv\r\nEND\r\nVALUE a 0 1\r\nv\r\nEND\r\n" + V, False, "bytes"),
    ("delete a\\0zz deletes a", [(b"set a 0 0 1\r\nv\r\ndelete a\0zz\r\nget a\r\n", None)],
     "version", b"STORED\r\nDELETED\r\nEND\r\n" + V, False, "bytes"),
    ("set q\\0r 0 0 1: ERROR (the line is `set q`)", [(b"set q\0r 0 0 1\r\nv\r\nget q\r\n", None)],
     "version", b"ERROR\r\nERROR\r\nEND\r\n" + V, False, "bytes"),
]


def check_binary_flags(servers):
    """An item stored over ASCII with flags 2^32 + 5 has flags 5 in a binary get."""
    why = []
    for who, (_, port) in servers.items():
        flush(port)
        with socket.create_connection(("127.0.0.1", port), timeout=REPLY_WAIT) as s:
            s.sendall(b"set f 4294967301 0 1\r\nx\r\n")
            read_until(s, lambda b: b.endswith(b"\r\n"), REPLY_WAIT)
        with socket.create_connection(("127.0.0.1", port), timeout=REPLY_WAIT) as s:
            s.sendall(hdr(0x00, 1, 0, 1) + b"f" + NOOP)
            buf, _ = read_until(s, bin_done, REPLY_WAIT)
        if len(buf) < 28 or buf[4] != 4 or struct.unpack(">I", buf[24:28])[0] != 5:
            why.append(f"{who} answered {buf[:40]!r}")
    name = "flags 2^32 + 5 set over ASCII: 5 in a binary get"
    if why:
        print(f"FAIL  {name}: " + "; ".join(why), flush=True)
        failures.append(name)
    else:
        print(f"ok    {name}", flush=True)


def main():
    servers = {}
    try:
        servers["memcached"] = start_memcached()
        servers["fern"] = start_fern()
        for name, pieces, end, want, want_closed, compare in CASES:
            got = {}
            for who, (_, port) in servers.items():
                flush(port)
                got[who] = run_case(port, pieces, end, who == "fern")
            fern = got["fern"]
            # memcached answers everything after the last piece; fern may
            # answer a piece early (the `early` bytes): compare the joins.
            why = []
            for who, (seen, closed) in got.items():
                whole = b"".join(seen)
                if compare == "bytes" and whole != want:
                    why.append(f"{who} answered {whole[:300]!r}, memcached 1.6.18 answers {want[:300]!r}")
                if closed != want_closed:
                    why.append(f"{who}: connection {'closed' if closed else 'left open'}")
            for i, (data, early) in enumerate(pieces[:-1]):
                if early is None:
                    for who, (seen, _) in got.items():
                        if len(seen) > i and seen[i]:
                            why.append(f"{who} answered before piece {i + 2} was sent: {seen[i][:100]!r}")
                elif len(fern[0]) <= i or fern[0][i] != early:
                    why.append(f"fern had not answered {early[:60]!r} before piece {i + 2} was sent")
            if why:
                print(f"FAIL  {name}: " + "; ".join(why), flush=True)
                failures.append(name)
            else:
                print(f"ok    {name}", flush=True)
        check_binary_flags(servers)
    finally:
        for p, _ in servers.values():
            p.terminate()
        for p, _ in servers.values():
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
    print(f"memcached_diff: {len(CASES) + 1 - len(failures)} passed, {len(failures)} failed")
    sys.exit(1 if failures else 0)


main()
