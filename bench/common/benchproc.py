# SPDX-License-Identifier: MIT
"""What the Python benchmark drivers (bench/idle/idle.py,
bench/servers/servers.py) share: logging, running a command without
raising, the Go and Java toolchains the peers are built with, the CPUs the
server and the client are pinned to, and compiling one Java peer.

Standard library only; the drivers put bench/common on sys.path."""

import os
import shutil
import subprocess
import sys

JAVA_HOME = "/usr/lib/jvm/temurin-25-jdk-amd64"
JAVA = os.path.join(JAVA_HOME, "bin", "java")
JAVAC = os.path.join(JAVA_HOME, "bin", "javac")
GO = shutil.which("go") or "/usr/local/go/bin/go"
# Offline Go builds of the peers (no toolchain download, no module proxy).
GO_ENV = {"GOTOOLCHAIN": "local", "GOPROXY": "off", "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}
SERVER_CPU, CLIENT_CPU = "0", "1"


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def sh(cmd, **kw):
    """Run cmd; (exit status, stdout and stderr together), -1 if it could not run or timed out."""
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
        return p.returncode, p.stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        return -1, str(e)


def first_line(cmd):
    """The first line cmd prints, or "not found"."""
    rc, out = sh(cmd, timeout=30)
    return out.strip().splitlines()[0] if rc == 0 and out.strip() else "not found"


def build_java(src, out):
    """javac src into out/java: that class directory, or 'not built: ...'."""
    if not os.path.exists(JAVAC):
        return "not built: %s not found" % JAVAC
    cls = os.path.join(out, "java")
    os.makedirs(cls, exist_ok=True)
    rc, msg = sh([JAVAC, "-d", cls, src], timeout=300)
    return cls if rc == 0 else "not built: javac failed: " + msg.strip()[-300:]
