"""Shared helpers for the integration tests (stdlib only).

Each test_*.py is run by ctest with BIN, WORKLOADS and SRC in the environment and
exits 77 (skipped, with the reason printed) when it cannot run here.
"""
import json
import os
import signal
import subprocess
import sys
import time

BIN = os.environ.get("BIN", os.path.join(os.path.dirname(__file__), "../../build/bin"))
WORKLOADS = os.environ.get("WORKLOADS", os.path.join(os.path.dirname(__file__), "../../build/workloads"))
SRC = os.environ.get("SRC", os.path.join(os.path.dirname(__file__), "../.."))
SKIP = 77

_failures = []


def require_root():
    if os.geteuid() != 0:
        print("SKIP: needs root to load BPF programs")
        sys.exit(SKIP)
    if not os.path.exists("/sys/kernel/btf/vmlinux"):
        print("SKIP: kernel has no BTF (/sys/kernel/btf/vmlinux)")
        sys.exit(SKIP)


def tool(name):
    return os.path.join(BIN, name)


def workload(name):
    return os.path.join(WORKLOADS, name)


def run(args, timeout=60, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kw)


def start(args):
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_attached(proc, marker=None, timeout=15.0):
    """Waits until a tool has attached: for text output its banner line, for JSON a
    fixed settle time after start (the tools attach in well under a second)."""
    if marker is None:
        time.sleep(2.0)
        return
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stdout.readline()
        if marker in line:
            return
        if proc.poll() is not None:
            break
    raise AssertionError("tool did not attach: %s" % proc.stderr.read())


def stop(proc, timeout=20):
    """SIGINT, then collect (stdout, stderr, returncode)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=timeout)
    return out, err, proc.returncode


def ndjson(text):
    recs = []
    for line in text.splitlines():
        line = line.strip()
        if line:
            recs.append(json.loads(line))
    return recs


def check(cond, msg):
    status = "ok  " if cond else "FAIL"
    print("%s %s" % (status, msg))
    if not cond:
        _failures.append(msg)
    return cond


def within(actual, expected, rel=None, abs_=None):
    tol = 0.0
    if rel is not None:
        tol = max(tol, abs(expected) * rel)
    if abs_ is not None:
        tol = max(tol, abs_)
    return abs(actual - expected) <= tol


def usage_error(args, expect_rc=2):
    """Runs a tool expecting a one-line error on stderr and exit code expect_rc."""
    r = run(args, timeout=30)
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    check(r.returncode == expect_rc and len(lines) == 1 and r.stdout == "",
          "%s -> exit %d with one stderr line (got %d, %r)" % (" ".join(args[1:]), expect_rc, r.returncode, r.stderr.strip()))


def leftover_probe_events():
    """Dynamic probe events that libbcc created (names contain "bcc_") and did not
    remove; libbcc names them after the tracing process, so any left are ours."""
    left = []
    for d in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing"):
        for f in ("uprobe_events", "kprobe_events"):
            try:
                with open(os.path.join(d, f)) as fh:
                    left += [l.strip() for l in fh if "bcc_" in l]
            except OSError:
                pass
    return left


def not_root_error(args):
    """As an unprivileged user the tool must fail with one clear line and exit 1."""
    r = run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *args], timeout=30)
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    check(r.returncode == 1 and len(lines) == 1 and "root" in r.stderr,
          "not root -> exit 1 with one line naming root (got %d, %r)" % (r.returncode, r.stderr.strip()))


def require_built(*paths):
    """A binary the build should have made is missing: a failure, never a skip."""
    missing = [p for p in paths if not os.access(p, os.X_OK)]
    for p in missing:
        check(False, "%s is built" % p)
    if missing:
        finish()


def finish():
    if _failures:
        print("%d check(s) failed" % len(_failures))
        sys.exit(1)
    print("all checks passed")
    sys.exit(0)
