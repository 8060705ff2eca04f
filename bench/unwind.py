#!/usr/bin/env python3
"""Cost of user-stack unwinding: offcputime --unwind=fp vs --unwind=dwarf, and the peers
(bpftrace's ustack, perf record --call-graph dwarf) on the same load, in one run (issue 11).

Load: `perf bench sched pipe -T` (two threads of one process ping-pong over a pipe;
Debian's perf is built without frame pointers), a new one per measurement, pinned to
CPU LOAD_CPU (default 1). Each mode
traces its switch-outs for SECONDS:
  none            no tracer: the load's own switch rate
  fp, dwarf       offcputime -p PID --unwind=MODE -j (+ OFFCPUTIME OPTIONS)
  bpftrace-ustack bpftrace: tracepoint:sched:sched_switch /pid == PID/ { @[ustack] = count(); }
                  (frame pointers; private tracefs mount, as bpftrace 0.17 needs it)
  perf-dwarf      perf record -e sched:sched_switch --call-graph dwarf,8192 -p PID -o - > /dev/null
Every tracer is attached before the window starts (offcputime: its start record;
bpftrace: its program has run; perf: --control's ack). A tracer's cost is CPU time per
traced switch: the load's own on-CPU time (/proc/PID/task/*/schedstat: the BPF handlers
and perf's sample copies run in the traced threads' context) plus the tracer process's
(perf writing its samples), divided by the load's context switches (/proc/.../status),
minus the same without a tracer: `added_cpu_ns_per_switch`. (The pipe's throughput is no
measure on 2 shared vCPUs: it moved 3x between rounds of the same mode.) For fp, dwarf
and bpftrace the kernel's BPF statistics (kernel.bpf_stats_enabled; fdinfo run_time_ns
/ run_cnt) also give the handler's own ns per sched_switch run (the tail-called unwinder
included). Modes run interleaved, ROUNDS times; medians.
Prints one JSON line per mode and the ratios (goals: dwarf adds <= 2x what fp adds,
and less than perf's dwarf mode).

Usage: sudo bench/unwind.py [SECONDS=3] [OFFCPUTIME OPTIONS...]     (env BIN=build/bin,
       ROUNDS=3). `bench/unwind.py 3 -U`: user stacks only, so the per-run difference is
       the user-stack walk alone (fp: bpf_get_stackid; dwarf: the tail-called unwinder).
Run it under `flock -x /tmp/bpfdiag-quiet.lock` on a shared machine.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

BIN = os.environ.get("BIN", os.path.join(os.path.dirname(os.path.abspath(__file__)), "../build/bin"))
OC = os.path.join(BIN, "offcputime")
SECS = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
ROUNDS = int(os.environ.get("ROUNDS", "3"))
LOAD_CPU = os.environ.get("LOAD_CPU", "1")
PRIVATE_TRACEFS = "mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing; exec "
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


def switches(pid):
    """Context switches of every thread of `pid` so far, as the kernel counts them."""
    n = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            txt = open("/proc/%d/task/%s/status" % (pid, tid)).read()
        except OSError:
            continue
        n += sum(int(v) for v in re.findall(r"^(?:non)?voluntary_ctxt_switches:\s+(\d+)", txt, re.M))
    return n


def cpu_ns(pid):
    """On-CPU ns of every thread of `pid` so far (schedstat)."""
    n = 0
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return 0
    for tid in tids:
        try:
            n += int(open("/proc/%d/task/%s/schedstat" % (pid, tid)).read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return n


def wait_bpf_ran(pid, timeout=30):
    """Until one of `pid`'s BPF programs has run (it is attached)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if any(v["run_cnt"] > 0 for v in prog_stats(pid).values()):
            return True
        time.sleep(0.05)
    return False


def start_tracer(mode, pid, tmp):
    """Starts `mode` on the load `pid`; returns (process, start record or None) once attached."""
    if mode in ("fp", "dwarf"):
        p = subprocess.Popen([OC, "--unwind=" + mode, *EXTRA, "-j", "-p", str(pid)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        return p, json.loads(p.stdout.readline())
    if mode == "bpftrace-ustack":
        prog = "tracepoint:sched:sched_switch /pid == %d/ { @[ustack] = count(); }" % pid
        p = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c",
                              PRIVATE_TRACEFS + 'bpftrace -e "$0"', prog],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not wait_bpf_ran(p.pid) and not any(wait_bpf_ran(int(c), 1) for c in children(p.pid)):
            sys.exit("unwind bench: bpftrace did not attach")
        return p, None
    ctl, ack = os.path.join(tmp, "ctl"), os.path.join(tmp, "ack")
    for f in (ctl, ack):
        if os.path.exists(f):
            os.unlink(f)
        os.mkfifo(f)
    p = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c",
                          PRIVATE_TRACEFS + 'perf record -q -e sched:sched_switch --call-graph dwarf,8192 -D -1 '
                          '--control fifo:%s,%s -p %d -o - > /dev/null' % (ctl, ack, pid)],
                         stderr=subprocess.DEVNULL)
    with open(ctl, "w") as c, open(ack) as a:
        c.write("enable\n")
        c.flush()
        if a.readline().strip() != "ack":
            sys.exit("unwind bench: perf record did not enable its events")
    return p, None


def children(pid):
    try:
        return open("/proc/%d/task/%d/children" % (pid, pid)).read().split()
    except OSError:
        return []


def one(mode, tmp):
    # both threads on one CPU: every switch is a direct hand-off there, so the CPU time
    # per switch is steady (across CPUs it moved 2x between runs of the same mode)
    bench = subprocess.Popen(["taskset", "-c", LOAD_CPU, "perf", "bench", "sched", "pipe", "-T", "-l", "1000000000"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.3)
    t0 = time.monotonic()
    tr, start = start_tracer(mode, bench.pid, tmp) if mode != "none" else (None, None)
    attach_s = time.monotonic() - t0
    time.sleep(0.2)
    bpf = mode in ("fp", "dwarf", "bpftrace-ustack")
    s0 = prog_stats(tr.pid) if bpf else {}
    c0, l0, t0_, rt0 = switches(bench.pid), cpu_ns(bench.pid), cpu_ns(tr.pid) if tr else 0, time.monotonic()
    time.sleep(SECS)
    c1, l1, t1_, rt1 = switches(bench.pid), cpu_ns(bench.pid), cpu_ns(tr.pid) if tr else 0, time.monotonic()
    s1 = prog_stats(tr.pid) if bpf else {}
    n = max(1, c1 - c0)
    r = {"mode": mode, "switches_per_s": round((c1 - c0) / (rt1 - rt0)),
         "load_cpu_ns_per_switch": round((l1 - l0) / n), "tracer_cpu_ns_per_switch": round((t1_ - t0_) / n),
         "cpu_ns_per_switch": round((l1 - l0 + t1_ - t0_) / n)}
    if s1:  # the handler: the program that ran most
        k = max(s1, key=lambda x: s1[x]["run_cnt"] - s0.get(x, {"run_cnt": 0})["run_cnt"])
        runs = s1[k]["run_cnt"] - s0.get(k, {"run_cnt": 0})["run_cnt"]
        r["ns_per_run"] = round((s1[k]["run_time_ns"] - s0.get(k, {"run_time_ns": 0})["run_time_ns"]) / max(1, runs))
    if tr and mode not in ("fp", "dwarf"):
        tr.kill() if mode == "bpftrace-ustack" else tr.send_signal(2)
        for c in children(tr.pid):  # bpftrace under sh: killed with its shell
            try:
                os.kill(int(c), 9)
            except OSError:
                pass
        tr.wait(timeout=60)
    if mode in ("fp", "dwarf"):
        tr.send_signal(2)
        out, err = tr.communicate(timeout=60)
        recs = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
        summ = [x for x in recs if x.get("type") == "offcputime.summary"]
        stacks = [x for x in recs if x.get("type") == "offcputime.stack"]
        depth = (sum(len(x.get("user_stack", [])) * x["offcpu_count"] for x in stacks) /
                 max(1, sum(x["offcpu_count"] for x in stacks)))
        r.update({"attach_s": round(attach_s, 2),
                  "user_frames_per_stack": round(depth, 1), "unwind_tables": start.get("unwind_tables"),
                  "data_quality": summ[-1]["data_quality"] if summ else None})
    elif tr:
        r["attach_s"] = round(attach_s, 2)
    bench.kill()
    bench.wait()
    return r


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def main():
    if os.geteuid() != 0:
        sys.exit("unwind bench: must run as root")
    modes = ["none", "fp", "dwarf", "bpftrace-ustack", "perf-dwarf"]
    old = open("/proc/sys/kernel/bpf_stats_enabled").read().strip()
    open("/proc/sys/kernel/bpf_stats_enabled", "w").write("1")
    runs = {m: [] for m in modes}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for k in range(ROUNDS):  # interleaved: a load change hits every mode alike
                for m in modes:
                    runs[m].append(one(m, tmp))
                    print("round %d %s: %d switches/s, %d cpu ns/switch" % (k + 1, m, runs[m][-1]["switches_per_s"],
                          runs[m][-1]["cpu_ns_per_switch"]), file=sys.stderr)
    finally:
        open("/proc/sys/kernel/bpf_stats_enabled", "w").write(old)
    base = median([r["cpu_ns_per_switch"] for r in runs["none"]])
    res = {}
    for m in modes:
        r = dict(runs[m][-1])
        for key in ("switches_per_s", "cpu_ns_per_switch", "load_cpu_ns_per_switch", "tracer_cpu_ns_per_switch",
                    "ns_per_run", "attach_s"):
            if key in r:
                r[key] = median([x[key] for x in runs[m]])
        r["added_cpu_ns_per_switch"] = r["cpu_ns_per_switch"] - base
        res[m] = r
        print(json.dumps(r))
    fp, dw, bt, pd = res["fp"], res["dwarf"], res["bpftrace-ustack"], res["perf-dwarf"]

    def ratio(a, b):
        return round(a / b, 2) if b > 0 else None
    print(json.dumps({
        "ratio_ns_per_run_dwarf_over_fp": ratio(dw["ns_per_run"], fp["ns_per_run"]),
        "ratio_ns_per_run_dwarf_over_bpftrace_ustack": ratio(dw["ns_per_run"], bt["ns_per_run"]),
        "ratio_added_cpu_dwarf_over_fp": ratio(dw["added_cpu_ns_per_switch"], fp["added_cpu_ns_per_switch"]),
        "ratio_added_cpu_dwarf_over_perf_dwarf": ratio(dw["added_cpu_ns_per_switch"], pd["added_cpu_ns_per_switch"]),
        "ratio_added_cpu_dwarf_over_bpftrace_ustack": ratio(dw["added_cpu_ns_per_switch"],
                                                            bt["added_cpu_ns_per_switch"]),
        "attach_s_added_dwarf_over_fp": round(dw["attach_s"] - fp["attach_s"], 2)}))

main()
