#!/usr/bin/env python3
"""Startup time (process start -> probes attached) and peak memory of our tools next
to bpftrace running an equivalent program, measured in the same run.

Attached = the moment the tool prints its "attached" banner (ours: "Sampling..."/
"Tracing..."; bpftrace: "Attaching N probes..."), both printed after attach.
Peak memory = VmHWM from /proc/PID/status just before the tool is stopped.
usage: bench/startup.py [RUNS]   (needs root; BIN defaults to build/bin)
"""
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 7
BIN = os.environ.get("BIN", os.path.join(os.path.dirname(__file__), "..", "build", "bin"))

CASES = [
    # (label, our command, our banner, bpftrace program)
    ("runqlen",
     [os.path.join(BIN, "runqlen")], "Sampling",
     "profile:hz:99 { $t = (struct task_struct *)curtask; "
     "@q = lhist($t->se.cfs_rq->rq->nr_running, 0, 100, 1); }"),
    ("naptime",
     [os.path.join(BIN, "naptime")], "Tracing",
     "tracepoint:syscalls:sys_enter_nanosleep, tracepoint:syscalls:sys_enter_clock_nanosleep "
     "{ @start[tid] = nsecs; } tracepoint:syscalls:sys_exit_nanosleep, "
     "tracepoint:syscalls:sys_exit_clock_nanosleep /@start[tid]/ "
     "{ @[comm] = hist(nsecs - @start[tid]); delete(@start[tid]); }"),
    ("profile",
     [os.path.join(BIN, "profile")], "Sampling",
     "profile:hz:49 /pid != 0/ { @[kstack, ustack, comm] = count(); }"),
]


def measure(cmd, banner):
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    attached = None
    while True:
        line = p.stdout.readline()
        if not line:
            break
        if banner in line:
            attached = time.monotonic() - t0
            break
        if "ERROR" in line:
            print("    %s: %s" % (cmd[0], line.strip()))
    hwm = 0
    try:
        with open("/proc/%d/status" % p.pid) as f:
            for l in f:
                if l.startswith("VmHWM:"):
                    hwm = int(l.split()[1]) // 1024
    except OSError:
        pass
    p.send_signal(signal.SIGINT)
    try:
        p.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
    return attached, hwm


def bench(label, cmd, banner):
    times, mems = [], []
    for _ in range(RUNS):
        t, m = measure(cmd, banner)
        if t is None:
            return None
        times.append(t)
        mems.append(m)
    return statistics.median(times), max(mems)


if os.geteuid() != 0:
    sys.exit("startup.py: must run as root")
if shutil.which("bpftrace") is None:  # the peer comes from Debian
    subprocess.run(["apt-get", "install", "-y", "-qq", "bpftrace"], capture_output=True)
have_bpftrace = shutil.which("bpftrace") is not None
print("%-10s %-10s %10s %10s" % ("tool", "impl", "attach_s", "peak_MB"))
for label, cmd, banner, bt in CASES:
    if not os.path.exists(cmd[0]):
        print("%-10s (not built)" % label)
        continue
    ours = bench(label, cmd, banner)
    # bpftrace needs tracefs mounted; give it a private mount namespace with tracefs,
    # as our tools make for themselves, so it is measured working rather than failing.
    peer_cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                "mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing; "
                "exec bpftrace -e \"$0\"", bt]
    peer = bench(label, peer_cmd, "Attaching") if have_bpftrace else None
    if ours:
        print("%-10s %-10s %10.3f %10d" % (label, "bpfdiag", ours[0], ours[1]))
    else:
        print("%-10s %-10s %10s" % (label, "bpfdiag", "FAILED"))
    if peer:
        print("%-10s %-10s %10.3f %10d" % (label, "bpftrace", peer[0], peer[1]))
    else:
        print("%-10s %-10s %10s" % (label, "bpftrace", "FAILED" if have_bpftrace else "absent"))
    if ours and peer:
        print("%-10s ratio ours/bpftrace: attach %.2fx, memory %.2fx  (goal: <1, <0.5 s, <150 MB)"
              % (label, ours[0] / peer[0], ours[1] / max(peer[1], 1)))
