#!/bin/sh
# SPDX-License-Identifier: MIT
# End-to-end checks of examples/http. Builds nothing.
#
#   tests/servers/check.sh BUILD_DIR      (finds BUILD_DIR/examples/http or BUILD_DIR/http)
#
# Starts the server twice on free loopback ports: one with a 1 s idle timeout
# for the timeout checks, one with the default (10 s) for the rest, and drives
# them from a python3 client: GET /plaintext, keep-alive, pipelining (answers
# in order), 404/405/413/501/400/431 (each error closes), idle and mid-request
# timeouts, a client that vanishes mid-request, 2,000 concurrent connections,
# no fd leak (the server's fd count returns to its baseline), and SIGTERM
# stopping each server with exit code 0. Every wait is bounded; about 15 s in
# all. Exit code 0 when every check passes.
set -eu
build=${1:?usage: $0 BUILD_DIR}
bin=$build/examples/http
[ -x "$bin" ] || bin=$build/http
if [ ! -x "$bin" ]; then
    echo "check: no http binary in $build/examples or $build" >&2
    exit 1
fi
command -v python3 >/dev/null || { echo "check: python3 is needed" >&2; exit 1; }
# 2,000 connections need 2,000 descriptors on each side.
ulimit -n 8192 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
exec timeout -k 5 90 python3 - "$bin" <<'PYEOF'
import os, re, select, signal, socket, struct, subprocess, sys, time

BIN = sys.argv[1]
failures = []
servers = []

def ok(name):
    print(f"ok    {name}", flush=True)

def fail(name, why):
    print(f"FAIL  {name}: {why}", flush=True)
    failures.append(name)

def start(*args):
    p = subprocess.Popen([BIN, "--port", "0", "--workers", "2", *args],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    servers.append(p)
    deadline = time.monotonic() + 10
    line = b""
    while time.monotonic() < deadline and not line.endswith(b"\n"):
        r, _, _ = select.select([p.stdout], [], [], 0.2)
        if r:
            c = os.read(p.stdout.fileno(), 1)
            if not c:
                break
            line += c
    m = re.match(rb"listening on 127\.0\.0\.1:(\d+)\n", line)
    if not m:
        p.kill()
        print(f"FAIL  start: no 'listening on' line (got {line!r})")
        sys.exit(1)
    return p, int(m.group(1))

def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))

class Conn:
    def __init__(self, port, timeout=5.0):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def send(self, data):
        self.s.sendall(data)

    def fill(self):
        c = self.s.recv(65536)
        if not c:
            raise EOFError("closed")
        self.buf += c

    def response(self, head=False):
        """One response: (status, headers dict (lower-case names), body)."""
        while b"\r\n\r\n" not in self.buf:
            self.fill()
        h, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = h.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        hdrs = {}
        for l in lines[1:]:
            k, v = l.split(":", 1)
            hdrs[k.strip().lower()] = v.strip()
        n = 0 if head or status == 100 else int(hdrs.get("content-length", "0"))
        while len(self.buf) < n:
            self.fill()
        body, self.buf = self.buf[:n], self.buf[n:]
        return status, hdrs, body

    def closed_by_peer(self, within=3.0):
        """True if the server closes (EOF or reset) within the time."""
        self.s.settimeout(within)
        try:
            while True:
                c = self.s.recv(65536)
                if not c:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    def close(self):
        self.s.close()

GET = b"GET /plaintext HTTP/1.1\r\nHost: localhost\r\n\r\n"

checks_run = 0

def check(name, fn):
    global checks_run
    checks_run += 1
    try:
        fn()
    except AssertionError as e:
        fail(name, str(e) or "assertion failed")
    except Exception as e:
        fail(name, f"{type(e).__name__}: {e}")
    else:
        ok(name)

# ---------------------------------------------------------------------------
main, port = start()
quick, qport = start("--idle-timeout", "1")
time.sleep(0.2)
baseline = fd_count(main.pid)

def t_plaintext():
    c = Conn(port)
    c.send(GET)
    st, h, body = c.response()
    assert st == 200, st
    assert body == b"Hello, World!", body
    assert h.get("content-length") == "13", h
    assert h.get("content-type", "").startswith("text/plain"), h
    assert "server" in h and re.match(r"\w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT$", h.get("date", "")), h
    c.close()

def t_keepalive():
    c = Conn(port)
    for _ in range(5):
        c.send(GET)
        st, _, body = c.response()
        assert st == 200 and body == b"Hello, World!"
    c.send(b"GET /plaintext HTTP/1.0\r\n\r\n")
    st, h, _ = c.response()
    assert st == 200 and h.get("connection") == "close", h
    assert c.closed_by_peer(), "HTTP/1.0 without keep-alive not closed"
    c.close()

def t_pipelined():
    reqs, want = [], []
    for i in range(48):
        k = i % 4
        if k == 0:
            reqs.append(GET); want.append((200, b"Hello, World!"))
        elif k == 1:
            reqs.append(b"GET /nope%d HTTP/1.1\r\nHost: a\r\n\r\n" % i); want.append((404, None))
        elif k == 2:
            reqs.append(b"POST /plaintext HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc"); want.append((405, None))
        else:
            reqs.append(b"HEAD /plaintext HTTP/1.1\r\nHost: a\r\n\r\n"); want.append((200, b""))
    c = Conn(port)
    c.send(b"".join(reqs))
    for i, (st_want, body_want) in enumerate(want):
        st, h, body = c.response(head=(i % 4 == 3))
        assert st == st_want, f"answer {i}: {st} != {st_want}"
        if body_want is not None:
            assert body == body_want, f"answer {i}: {body!r}"
    # Split across writes, byte by byte for one request.
    for b in GET:
        c.send(bytes([b]))
    st, _, body = c.response()
    assert st == 200 and body == b"Hello, World!"
    c.close()

def expect_error_and_close(data, status):
    c = Conn(port)
    c.send(data)
    st, h, _ = c.response()
    assert st == status, f"{st} != {status}"
    assert h.get("connection") == "close", h
    assert c.closed_by_peer(), "not closed after the error"
    c.close()

def t_malformed():
    expect_error_and_close(b"GARBAGE\r\n\r\n", 400)
    expect_error_and_close(b"GET / HTTP/1.1\r\nHost: a\r\nBad Header\r\n\r\n", 400)
    expect_error_and_close(b"\x00\x01\x02\x03\r\n\r\n", 400)
    expect_error_and_close(b"GET / HTTP/1.1\r\n\r\n", 400)  # no Host

def t_oversized():
    expect_error_and_close(b"GET / HTTP/1.1\r\nHost: a\r\nX: " + b"x" * 10000 + b"\r\n\r\n", 431)
    expect_error_and_close(b"GET / HTTP/1.1\r\nHost: a\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(70)) + b"\r\n", 431)
    expect_error_and_close(b"GET /" + b"u" * 9000 + b" HTTP/1.1\r\n", 414)

def t_bodies():
    expect_error_and_close(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2000000\r\n\r\n", 413)
    expect_error_and_close(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 501)
    # A body in pieces, then a request after it on the same connection.
    c = Conn(port)
    c.send(b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 20000\r\n\r\n" + b"b" * 5000)
    st, _, _ = c.response()
    assert st == 404, st
    c.send(b"b" * 15000 + GET)
    st, _, body = c.response()
    assert st == 200 and body == b"Hello, World!", (st, body)
    # Expect: 100-continue gets the interim answer, then the final one.
    c.send(b"PUT /x HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n")
    st, _, _ = c.response()
    assert st == 100, st
    st, _, _ = c.response()
    assert st == 404, st
    c.send(b"data" + GET)
    st, _, _ = c.response()
    assert st == 200, st
    c.close()

def t_idle_timeout():
    c = Conn(qport)
    t0 = time.monotonic()
    assert c.closed_by_peer(within=4.0), "silent client not closed within 4 s"
    dt = time.monotonic() - t0
    assert 0.7 <= dt <= 3.5, f"closed after {dt:.2f} s (idle timeout 1 s)"
    c.close()
    # After an answer, the next request gets a fresh timeout.
    c = Conn(qport)
    time.sleep(0.6)
    c.send(GET)
    assert c.response()[0] == 200
    time.sleep(0.6)
    c.send(GET)
    assert c.response()[0] == 200
    c.close()
    # Part of a request, then silence: 408, then closed.
    c = Conn(qport)
    c.send(b"GET /plaintext HTTP/1.1\r\nHo")
    c.s.settimeout(4.0)
    st, _, _ = c.response()
    assert st == 408, st
    assert c.closed_by_peer()
    c.close()

def t_vanishing_client():
    a = Conn(port)
    a.send(b"GET /plaintext HTTP/1.1\r\nHost: a\r\nX-Half: ")
    b = Conn(port)
    b.send(b"GET /plaintext HTTP/1.1\r\n")
    # a vanishes with a reset, mid-request.
    a.s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    a.close()
    c = Conn(port)
    for _ in range(3):
        c.send(GET)
        assert c.response()[0] == 200
    b.send(b"Host: b\r\n\r\n")
    st, _, body = b.response()
    assert st == 200 and body == b"Hello, World!"
    # And one that closes politely mid-request.
    d = Conn(port)
    d.send(b"GET /plain")
    d.close()
    c.send(GET)
    assert c.response()[0] == 200
    b.close(); c.close()

def t_many():
    n = 2000
    conns = []
    try:
        for _ in range(n):
            c = Conn(port, timeout=10.0)
            c.send(GET)
            conns.append(c)
        deadline = time.monotonic() + 5
        while fd_count(main.pid) < baseline + n and time.monotonic() < deadline:
            time.sleep(0.05)
        held = fd_count(main.pid) - baseline
        assert held >= n, f"server holds {held} connections, expected {n}"
        for c in conns:
            st, _, body = c.response()
            assert st == 200 and body == b"Hello, World!"
        for c in conns[::2]:  # half keep going on the same connection
            c.send(GET)
        for c in conns[::2]:
            assert c.response()[0] == 200
    finally:
        for c in conns:
            c.close()

def t_no_fd_leak():
    deadline = time.monotonic() + 5
    while fd_count(main.pid) != baseline and time.monotonic() < deadline:
        time.sleep(0.05)
    now = fd_count(main.pid)
    assert now == baseline, f"{now} fds open, baseline {baseline}"

def stop(p, name):
    p.send_signal(signal.SIGTERM)
    try:
        rc = p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        raise AssertionError(f"{name} did not stop within 5 s of SIGTERM")
    err = p.stderr.read().decode(errors="replace")
    assert rc == 0, f"{name} exit code {rc}; stderr: {err}"

def t_sigterm():
    # One connection still open, one parked mid-request: both are shut down.
    c = Conn(port)
    c.send(GET)
    c.response()
    d = Conn(port)
    d.send(b"GET /pl")
    time.sleep(0.1)
    stop(main, "server")
    assert c.closed_by_peer(1.0) and d.closed_by_peer(1.0), "connections left open"
    stop(quick, "server (idle timeout 1 s)")

t_start = time.monotonic()
try:
    check("GET /plaintext -> 200 Hello, World!", t_plaintext)
    check("keep-alive; HTTP/1.0 closes", t_keepalive)
    check("pipelined requests answered in order", t_pipelined)
    check("malformed request -> 400 and close", t_malformed)
    check("oversized head -> 431/414 and close", t_oversized)
    check("bodies: 413, 501, skipped body, 100-continue", t_bodies)
    check("idle timeout closes silent and half-sent clients", t_idle_timeout)
    check("vanishing client does not disturb others", t_vanishing_client)
    check("2000 concurrent connections served", t_many)
    check("fd count back to baseline (no leak)", t_no_fd_leak)
    check("SIGTERM stops cleanly, exit code 0", t_sigterm)
finally:
    for p in servers:
        if p.poll() is None:
            p.kill()
            p.wait()

print(f"servers check ({time.monotonic() - t_start:.1f} s): "
      f"{checks_run - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
PYEOF
