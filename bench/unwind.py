#!/usr/bin/env python3
"""Cost of user-stack unwinding in offcputime: --unwind=fp vs --unwind=dwarf (issue 11).

Load: `perf bench sched pipe -T` (two threads of one process ping-pong over a pipe;
Debian's perf is built without frame pointers). offcputime -p PID runs for SECONDS in
each mode; the kernel's own BPF statistics (kernel.bpf_stats_enabled, read from the
program's fdinfo: run_time_ns / run_cnt) give the cost per sched_switch run, and the
program's verified_insns the verifier's work (in dwarf mode the unwinder is a second
program reached by a tail call: its time is counted in the handler's run_time_ns, its
verified_insns are in the start record's unwind_tables). Also reported: attach time (table
building + compile + verification), the unwind tables built (start record) and the
pipe's round trips per second under each mode. Prints one JSON line per mode and the
dwarf/fp ratios.

Usage: sudo bench/unwind.py [SECONDS=4] [OFFCPUTIME OPTIONS...]     (env BIN=build/bin)
       e.g. `bench/unwind.py 4 -U`: user stacks only, so the per-run difference is the
       user-stack walk alone (fp: bpf_get_stackid; dwarf: the tail-called unwinder).
Run it under `flock -x /tmp/bpfdiag-quiet.lock` on a shared machine.
"""
import json
import os
import re
import subprocess
import sys
import time

BIN = os.environ.get("BIN", os.path.join(os.path.dirname(os.path.abspath(__file__)), "../build/bin"))
OC = os.path.join(BIN, "offcputime")
SECS = float(sys.argv[1]) if len(sys.argv) > 1 else 4.0
EXTRA = sys.argv[2:]


def prog_stats(pid):
    """fdinfo of every BPF program fd `pid` holds: {prog_id: {run_cnt, run_time_ns, verified_insns}}."""
    out = {}
    d = "/proc/%d/fdinfo" % pid
    for fd in os.listdir(d):
        try:
            txt = open(os.path.join(d, fd)).read()
        except OSError:
            continue
        if "prog_id:" not in txt or "run_cnt:" not in txt:  # links show their prog_id too
            continue
        kv = dict(re.findall(r"^(\w+):\s+(\S+)", txt, re.M))
        out[kv["prog_id"]] = {k: int(kv.get(k, 0)) for k in ("run_cnt", "run_time_ns", "verified_insns")}
    return out


def one(mode):
    bench = subprocess.Popen(["perf", "bench", "sched", "pipe", "-T", "-l", "1000000000"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.3)
    t0 = time.monotonic()
    oc = subprocess.Popen([OC, "--unwind=" + mode, *EXTRA, "-j", "-p", str(bench.pid)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    start = json.loads(oc.stdout.readline())
    attach_s = time.monotonic() - t0
    s0 = prog_stats(oc.pid)
    rt0 = time.monotonic()
    time.sleep(SECS)
    s1 = prog_stats(oc.pid)
    rt1 = time.monotonic()
    oc.send_signal(2)
    out, err = oc.communicate(timeout=60)
    bench.kill()
    bench.wait()
    # the sched_switch program is the one that ran most
    pid_ = max(s1, key=lambda k: s1[k]["run_cnt"] - s0.get(k, {"run_cnt": 0})["run_cnt"])
    runs = s1[pid_]["run_cnt"] - s0[pid_]["run_cnt"]
    ns = s1[pid_]["run_time_ns"] - s0[pid_]["run_time_ns"]
    recs = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    summ = [r for r in recs if r.get("type") == "offcputime.summary"]
    stacks = [r for r in recs if r.get("type") == "offcputime.stack"]
    depth = (sum(len(r.get("user_stack", [])) * r["offcpu_count"] for r in stacks) /
             max(1, sum(r["offcpu_count"] for r in stacks)))
    return {"mode": mode, "attach_s": round(attach_s, 2), "verified_insns": s1[pid_]["verified_insns"],
            "runs_per_s": round(runs / (rt1 - rt0)), "ns_per_run": round(ns / max(1, runs)),
            "user_frames_per_stack": round(depth, 1), "unwind_tables": start.get("unwind_tables"),
            "data_quality": summ[-1]["data_quality"] if summ else None}


def main():
    if os.geteuid() != 0:
        sys.exit("unwind bench: must run as root")
    old = open("/proc/sys/kernel/bpf_stats_enabled").read().strip()
    open("/proc/sys/kernel/bpf_stats_enabled", "w").write("1")
    try:
        res = {m: one(m) for m in ("fp", "dwarf")}
    finally:
        open("/proc/sys/kernel/bpf_stats_enabled", "w").write(old)
    for r in res.values():
        print(json.dumps(r))
    fp, dw = res["fp"], res["dwarf"]
    print(json.dumps({"ratio_ns_per_run_dwarf_over_fp": round(dw["ns_per_run"] / max(1, fp["ns_per_run"]), 2),
                      "ratio_switch_rate_dwarf_over_fp": round(dw["runs_per_s"] / max(1, fp["runs_per_s"]), 2),
                      "ratio_verified_insns": round(dw["verified_insns"] / max(1, fp["verified_insns"]), 2),
                      "attach_s_added": round(dw["attach_s"] - fp["attach_s"], 2)}))


main()
