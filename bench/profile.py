#!/usr/bin/env python3
"""profile next to perf (and bpftrace) on the same target in the same run.

1. cpu_split (func_a ~75% / func_b ~25% of its CPU time, measured by itself):
   func_a's share and samples per CPU-second from profile -p, perf record -g -p and
   bpftrace profile:hz, all attached at once.
2. CPython (real software): a busy loop in two Python functions; CPython 3.11 has
   no perf map, so native frames only: samples vs F x the process's CPU time (from
   /proc/PID/stat), and the share of samples in _PyEval_EvalFrameDefault, for
   profile and perf.
usage: bench/profile.py   (root; BIN and WORKLOADS default to build/)
"""
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ.get("BIN", os.path.join(HERE, "..", "build", "bin"))
WL = os.environ.get("WORKLOADS", os.path.join(HERE, "..", "build", "workloads"))
F = 99
tmp = tempfile.mkdtemp(prefix="bpfdiag-bench-profile-")


def wait_line(p, word, timeout=30):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        line = p.stderr.readline()
        if not line:
            break
        if word in line:
            return True
    return False


def profile_start(pid, extra=()):
    p = subprocess.Popen([os.path.join(BIN, "profile"), "-j", "-F", str(F), "-p", str(pid), *extra],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert wait_line(p, "Sampling"), "profile did not attach"
    return p


def perf_start(pid, data):
    return subprocess.Popen(["perf", "record", "-q", "-F", str(F), "-g", "-p", str(pid), "-o", data],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def perf_stacks(data, tids=None):
    r = subprocess.run(["perf", "script", "-i", data, "-F", "tid,ip,sym"], capture_output=True, text=True)
    out = []
    for block in r.stdout.split("\n\n"):
        lines = [l for l in block.splitlines() if l.strip()]
        if lines and (tids is None or int(lines[0].split()[0]) in tids):
            out.append([l.split()[1] if len(l.split()) > 1 else "?" for l in lines[1:]])
    return out


def bpftrace_start(pid):
    prog = "profile:hz:%d /pid == %d/ { @[ustack] = count(); }" % (F, pid)
    p = subprocess.Popen(["unshare", "-m", "sh", "-c",
                          "mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing; "
                          "exec bpftrace -e '%s'" % prog],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 30:
        line = p.stdout.readline()
        if "Attaching" in line or not line:
            break
    time.sleep(1.0)  # bpftrace prints "Attaching" before it attaches
    return p


def bpftrace_counts(p):
    p.send_signal(2)
    out = p.communicate(timeout=60)[0]
    a = b = total = 0
    for block in out.split("@[")[1:]:
        n = int(block.rsplit("]:", 1)[1].split()[0])
        total += n
        a += n if "func_a" in block else 0
        b += n if "func_b" in block else 0
    return a, b, total


def share(a, b):
    return a / float(a + b) if a + b else 0.0


def profile_stacks(out):
    recs = [json.loads(l) for l in out.splitlines() if l.strip()]
    return [r for r in recs if r["type"] == "profile.stack"]


# --- 1. cpu_split, three samplers at once ---------------------------------------------
t_wl = time.monotonic()
wl = subprocess.Popen([os.path.join(WL, "cpu_split"), "8", "4000"], stdout=subprocess.PIPE, text=True)
pr = profile_start(wl.pid)
pf = perf_start(wl.pid, os.path.join(tmp, "split.data"))
bt = bpftrace_start(wl.pid)
# bpftrace symbolizes ustack when it prints, so it must stop while the workload lives
time.sleep(max(0.0, t_wl + 4.0 + 7.0 - time.monotonic()))
ba, bb, btotal = bpftrace_counts(bt)
truth = json.loads(wl.communicate(timeout=60)[0])
out = pr.communicate(timeout=60)[0]
pf.wait(timeout=60)
st = [s for s in profile_stacks(out) if s["tid"] == truth["tid"]]
a = sum(s["sample_count"] for s in st if "func_a" in s.get("user_stack", []))
b = sum(s["sample_count"] for s in st if "func_b" in s.get("user_stack", []))
n = sum(s["sample_count"] for s in st)
ps = perf_stacks(os.path.join(tmp, "split.data"), {truth["tid"]})
pa = sum(1 for s in ps if "func_a" in s)
pb = sum(1 for s in ps if "func_b" in s)
cpu_s = truth["cpu_ns"] / 1e9
want = share(truth["func_a_cpu_ns"], truth["func_b_cpu_ns"])
print("cpu_split: %.2f CPU-s burnt; ground truth func_a share %.3f (a:b %.2f)"
      % (cpu_s, want, truth["func_a_cpu_ns"] / float(truth["func_b_cpu_ns"])))
print("  (bpftrace stops 1 s before the end: its share only; it symbolizes at exit)")
for name, x, y, tot in (("profile", a, b, n), ("perf", pa, pb, len(ps)), ("bpftrace", ba, bb, btotal)):
    print("  %-8s func_a share %.3f (a:b %.2f, off truth by %+.3f)  samples %d = %.3f x F*cpu"
          % (name, share(x, y), x / float(y or 1), share(x, y) - want, tot, tot / (F * cpu_s)))

# --- 2. CPython ------------------------------------------------------------------------
code = ("import time\n"
        "def func_a(n):\n  x = 0\n  for i in range(n): x += i * i\n  return x\n"
        "def func_b(n):\n  x = 0\n  for i in range(n): x ^= i\n  return x\n"
        "time.sleep(4)\nend = time.time() + 8\n"
        "while time.time() < end:\n  func_a(30000); func_b(10000)\n")
py = subprocess.Popen(["/usr/bin/python3", "-c", code])
pr = profile_start(py.pid)
pf = perf_start(py.pid, os.path.join(tmp, "py.data"))
time.sleep(3.5)
# the process CPU time (utime + stime, clock ticks) just before it exits
last = 0
while py.poll() is None:
    try:
        with open("/proc/%d/stat" % py.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
            last = int(fields[11]) + int(fields[12])
    except OSError:
        break
    time.sleep(0.05)
out = pr.communicate(timeout=60)[0]
pf.wait(timeout=60)
hz = os.sysconf("SC_CLK_TCK")
cpu_s = last / float(hz)  # whole-process CPU time (the 4 s sleep uses none)
st = profile_stacks(out)
n = sum(s["sample_count"] for s in st)
ev = sum(s["sample_count"] for s in st if "_PyEval_EvalFrameDefault" in s.get("user_stack", []))
ps = perf_stacks(os.path.join(tmp, "py.data"))
pev = sum(1 for s in ps if "_PyEval_EvalFrameDefault" in s)
print("CPython 3.11 busy loop: %.2f CPU-s (utime+stime)" % cpu_s)
print("  profile samples %d = %.3f x F*cpu; _PyEval_EvalFrameDefault in %.3f of stacks" % (n, n / (F * cpu_s), ev / float(n or 1)))
print("  perf    samples %d = %.3f x F*cpu; _PyEval_EvalFrameDefault in %.3f of stacks" % (len(ps), len(ps) / (F * cpu_s), pev / float(len(ps) or 1)))
