#!/usr/bin/env python3
"""offcputime against offcpu_blockers, whose four threads time their own blocking in
a pipe read, a condition variable, a sleep and a contended mutex.

Checks (numbers, not exit codes):
  * for each blocker thread, the off-CPU time offcputime attributes to that thread's
    stacks through the expected kernel path is within 5% of the time the workload
    measured around its blocking calls; the thread totals (pipe, cond, sleep) too
    (one run, no retries: -p ends the run when the workload exits);
  * kernel stacks show the path (anon_pipe_read/pipe_read, futex_wait,
    do_nanosleep/hrtimer_nanosleep) and user stacks the workload's function names
    (the cond-var user stack is truncated inside glibc, which has no frame pointers:
    reported, not required);
  * every NDJSON record validates against docs/schema/offcputime.schema.json; the
    first is offcputime.start, the last offcputime.summary (final);
  * folded output (system-wide, per thread) parses as "frames value" lines, and the
    values per workload thread add up to the time that thread measured (within 5%),
    with the workload's function names, though it exited before offcputime stops;
  * interval reports (-i/-c): one summary per interval, and their sum matches;
  * bad input and not-root give one line and a non-zero exit; the BPF programs the
    tool held while running are gone after it exits.
"""
import json
import os
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F401

require_root()
OC = tool("offcputime")
WL = workload("offcpu_blockers")
require_built(OC, WL)

ITERS, DELAY_MS = 25, 20
KERNEL_PATH = {
    "blk_pipe": ("anon_pipe_read", "pipe_read"),
    "blk_cond": ("futex_wait",),
    "blk_sleep": ("do_nanosleep", "hrtimer_nanosleep"),
    "blk_mutex": ("futex_wait",),
}
TOL = 0.05


def read_start_record(proc, timeout=30.0):
    """The first stdout line of -j mode: the offcputime.start record (probes attached)."""
    deadline = time.time() + timeout
    line = proc.stdout.readline()
    if not line or time.time() > deadline:
        raise AssertionError("no start record: %s" % proc.stderr.read()[-300:])
    rec = json.loads(line)
    if rec.get("type") != "offcputime.start":
        raise AssertionError("first record is %r, not offcputime.start" % rec.get("type"))
    return rec


def run_json(iters=ITERS, delay_ms=DELAY_MS):
    """The workload starts its threads when told on stdin, once offcputime -p has
    attached (its start record), and offcputime ends when the workload exits."""
    steal0 = steal_ns()
    t0 = time.monotonic()
    wl = subprocess.Popen([WL, str(iters), str(delay_ms), "-1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True)
    oc = start([OC, "-j", "-p", str(wl.pid)])
    first = read_start_record(oc)
    print("info attached %.2f s after the workload started" % (time.monotonic() - t0))
    wl_out, _ = wl.communicate(input="go\n", timeout=60)
    out, err = oc.communicate(timeout=60)
    truth = json.loads(wl_out)
    truth["steal_ns"] = steal_ns() - steal0
    print("info hypervisor steal during the run: %.1f ms (all CPUs)" % (truth["steal_ns"] / 1e6))
    recs = [first] + ndjson(out)
    check(oc.returncode == 0 and "PID %d exited" % wl.pid in err,
          "offcputime -j -p ends by itself when the workload exits (rc %d, %r)" % (oc.returncode, err.strip()[-200:]))
    return truth, recs


def analyse(truth, stacks, summary):
    threads = {t["tid"]: t for t in summary["threads"]}
    for t in truth["threads"]:
        name, tid, fn, measured = t["name"], t["tid"], t["function"], t["blocked_ns"]
        mine = [s for s in stacks if s["tid"] == tid]
        path = KERNEL_PATH[name]
        attributed = sum(s["offcpu_total_ns"] for s in mine if any(f in path for f in s["kernel_stack"]))
        steal = truth.get("steal_ns", 0)  # can only inflate the workload's own number
        check(within(attributed, measured, rel=TOL) or measured - steal * 1.05 <= attributed <= measured,
              "%s: off-CPU time in %s %.1f ms vs measured %.1f ms (5%%, or below it by at most the steal)"
              % (name, "/".join(path), attributed / 1e6, measured / 1e6))
        total = threads.get(tid, {}).get("offcpu_total_ns", 0)
        if name != "blk_mutex":  # the mutex thread also spins (and may be preempted) between locks
            check(within(total, measured, rel=TOL) or measured - steal * 1.05 <= total <= measured,
                  "%s: thread total %.1f ms vs measured %.1f ms (5%%, or below it by at most the steal)"
                  % (name, total / 1e6, measured / 1e6))
        else:
            check(total >= attributed * 0.999, "%s: thread total %.1f ms >= attributed" % (name, total / 1e6))
        top = max(mine, key=lambda s: s["offcpu_total_ns"]) if mine else None
        check(top is not None and any(f in path for f in top["kernel_stack"]),
              "%s: top kernel stack has %s (%s)" % (name, "/".join(path),
                                                    ";".join(top["kernel_stack"][:8]) if top else None))
        if name == "blk_cond":
            print("info %s: top user stack %s (glibc's cond wait has no frame pointers)"
                  % (name, top["user_stack"] if top else None))
        else:
            check(top is not None and fn in top["user_stack"],
                  "%s: top user stack names %s (%s)" % (name, fn, top["user_stack"] if top else None))
    dq = summary["data_quality"]
    check(dq["map_full"] == 0 and dq["lost_events"] == 0 and dq["seen_full"] == 0,
          "no map-full drops, lost events or full seen map: %s" % dq)
    check(sum(s["offcpu_total_ns"] for s in stacks) == summary["offcpu_total_ns"],
          "summary offcpu_total_ns is the sum of the stack records")


# --- 1. numbers vs ground truth (one run) ------------------------------------------------
truth, recs = run_json()
validate("offcputime", recs)
stacks = [r for r in recs if r["type"] == "offcputime.stack"]
summaries = [r for r in recs if r["type"] == "offcputime.summary"]
check(len(summaries) == 1 and recs[-1]["type"] == "offcputime.summary" and recs[-1]["final"],
      "one final summary, last (%d records)" % len(recs))
if summaries:
    analyse(truth, stacks, summaries[0])

# --- 1b. switch-ins the kernel never shows (bpf_sources/arrival.h) ------------------------
# Where PID 1 is the Firecracker agent, no BPF program runs in its threads' context, so
# the thread each of them switches to is never seen switching in. Keeping PID 1 busy
# (connections to its own port) makes such switches frequent: the periods they end must
# still add up (recovered from the scheduler's record of the arrival), few dropped.
with Pid1Traffic() as traffic:
    if traffic.port is None:
        print("info PID 1 listens on no TCP port: the unseen switch-in case is not exercised here")
    else:
        truth, recs = run_json(iters=100, delay_ms=5)
        summaries = [r for r in recs if r["type"] == "offcputime.summary"]
        if check(len(summaries) == 1, "PID 1 busy: one summary"):
            dq = summaries[0]["data_quality"]
            print("info PID 1 busy (%d connections to its port %d): recovered %d periods, dropped %d"
                  % (traffic.connects, traffic.port, dq["recovered_periods"], dq["dropped_periods"]))
            check(few_dropped(dq), "PID 1 busy: at most 1%% of the unseen switch-ins not recovered (%s)" % dq)
            analyse(truth, [r for r in recs if r["type"] == "offcputime.stack"], summaries[0])

# --- 1c. preempted threads wait for a CPU: wait_class "cpu" vs the kernel's run_delay -------
# busyloops: 2 spinning threads per CPU, so about half their time is spent runnable. A
# thread switched out runnable is classed "cpu" from its state, whatever its stack; the
# kernel counts the same wait in schedstat's run_delay, read from the start record to
# after offcputime exits: a window longer than the tool's by its final report and
# detach (0.5 s under a build), so the truth is that rate over the tool's interval_ns.
# (harness.task_run_delay)


loops = subprocess.Popen([workload("busyloops"), str(2 * os.cpu_count()), "60"], stdout=subprocess.DEVNULL)
time.sleep(0.3)
oc = start([OC, "-j", "-p", str(loops.pid), "-d", "3"])
first = read_start_record(oc)
d0, t0 = task_run_delay(loops.pid), time.monotonic()
out, err = oc.communicate(timeout=60)
d1, t1 = task_run_delay(loops.pid), time.monotonic()
loops.kill()
loops.wait()
summ = [r for r in ndjson(out) if r["type"] == "offcputime.summary"]
by = summ[-1]["wait_class_total_ns"] if summ else {}
cpu_ns, all_ns = by.get("cpu", 0), sum(by.values())
truth = (d1 - d0) / (t1 - t0) * (summ[-1]["interval_ns"] / 1e9) if summ else 0
print("info busyloops: cpu class %.0f ms of %.0f ms off-CPU; run_delay %.0f ms in %.2f s, %.0f ms at that rate "
      "over the tool's window" % (cpu_ns / 1e6, all_ns / 1e6, (d1 - d0) / 1e6, t1 - t0, truth / 1e6))
check(summ and cpu_ns >= 0.9 * all_ns, "busyloops: at least 90%% of the off-CPU time is class cpu (%s)" % by)
check(summ and within(cpu_ns, truth, rel=0.10, abs_=3e8),
      "busyloops: class cpu %.0f ms vs the kernel's run_delay %.0f ms over the tool's window (10%% or 0.3 s)"
      % (cpu_ns / 1e6, truth / 1e6))

# --- 2. folded, system-wide, per thread; workload exits before the tool stops ---------------
def wait_banner(proc):
    line = proc.stderr.readline()
    if not line.startswith("Tracing off-CPU time"):
        raise AssertionError("no banner: %r %s" % (line, proc.stderr.read()[-300:]))
    return line


def parse_folded(line):
    """The folded format: frames joined by ';' (none empty), a space, an integer."""
    stack, _, value = line.rpartition(" ")
    frames = stack.split(";")
    if not stack or not value.isdigit() or any(not f for f in frames):
        return None
    return frames, int(value)


oc = start([OC, "-f", "-P", "-m", "1000", "--stack-storage-size", "65536", "--duration", "6"])
wait_banner(oc)
steal0 = steal_ns()
wl = run([WL, "10", "20"], timeout=30)
steal = steal_ns() - steal0  # as in run_json: lengthens the workload's clock only
print("info hypervisor steal during the folded run: %.1f ms (all CPUs)" % (steal / 1e6))
out, err = oc.communicate(timeout=60)
check(oc.returncode == 0, "offcputime -fP exits 0 (%s)" % err.strip()[-200:])
lines = [l for l in out.splitlines() if l]
parsed = [parse_folded(l) for l in lines]
check(len(lines) > 0 and all(parsed), "every folded line is 'frames value' (%d lines, bad: %s)"
      % (len(lines), [l for l, p in zip(lines, parsed) if not p][:2]))
wtruth = json.loads(wl.stdout)
wpid = wtruth["pid"]
per_name = {}
for p in filter(None, parsed):
    per_name.setdefault(p[0][0], []).append(p)
for t in wtruth["threads"]:
    key = "%s-%d/%d" % (t["name"], wpid, t["tid"])
    mine = per_name.get(key, [])
    total_us = sum(v for _, v in mine)
    if t["name"] == "blk_mutex":  # also off-CPU between its locks (preempted while spinning)
        check(total_us * 1000 >= t["blocked_ns"] * (1 - TOL),
              "folded %s: %.1f ms >= measured %.1f ms" % (key, total_us / 1e3, t["blocked_ns"] / 1e6))
    else:
        check(within(total_us * 1000, t["blocked_ns"], rel=TOL)
              or t["blocked_ns"] - steal * 1.05 <= total_us * 1000 <= t["blocked_ns"],
              "folded %s: values add up to %.1f ms vs measured %.1f ms (5%%, or below it by at most the steal)"
              % (key, total_us / 1e3, t["blocked_ns"] / 1e6))
ours = [l for l in lines if re.match(r"^blk_\w+-%d/\d+;" % wpid, l)]
# System-wide, a stack can lose its slot to a hash collision in the stack table
# (counted as lost stacks, shown as [Missed User Stack]); binaries without frame
# pointers (e.g. compilers run by other engineers) fill it with garbage stacks.
# Require the name of at least one of the three frame-pointer-visible blockers.
named = [fn for fn, kf in (("block_in_sleep", "do_nanosleep"), ("block_in_pipe_read", "anon_pipe_read"),
                           ("block_in_mutex_lock", "futex_wait"))
         if any((";%s;" % fn) in l and kf in l for l in ours)]
check(len(named) >= 1, "exited workload's stacks still symbolized with user + kernel frames: %s" % named)
check(any(";-;" in l for l in ours), "'-' frame between user and kernel parts")
check("data quality:" in err, "data quality line on stderr in folded mode")

# --- 2b. interval reports: -i/-c, one summary per interval ------------------------------------
oc = start([OC, "-j", "-i", "1", "-c", "3", "-p", str(os.getpid())])
read_start_record(oc)
# This test's main thread reads the reports as they come: it is off-CPU from one
# report's arrival to the next, and notes when each arrives.
began = time.monotonic()
err_parts = []
drain = threading.Thread(target=lambda: err_parts.append(oc.stderr.read()), daemon=True)
drain.start()
watchdog = threading.Timer(60, oc.kill)  # a hung tool fails the check below, not the suite
watchdog.start()
out_lines, arrived = [], []
for line in iter(oc.stdout.readline, ""):
    out_lines.append(line)
    if '"offcputime.summary"' in line:
        arrived.append(time.monotonic())
oc.wait(timeout=30)
watchdog.cancel()
drain.join(10)
out, err = "".join(out_lines), "".join(err_parts)
recs = ndjson(out)
validate("offcputime", recs)
sums = [r for r in recs if r["type"] == "offcputime.summary"]
check(oc.returncode == 0 and len(sums) == 3 and [r["final"] for r in sums] == [False, False, True],
      "-i 1 -c 3: three summaries, the last final (%s)" % [r["final"] for r in sums])
check(all(within(r["interval_ns"], 1e9, rel=0.2) for r in sums),
      "interval_ns about 1 s: %s" % [r["interval_ns"] for r in sums])
# Off-CPU time counts when a period ends (at switch-in), so the wait for report N lands
# in report N+1, and the last one (still off-CPU when the final report detaches) in
# none. Each wait is bounded by the time between two arrivals (a report rendered slowly
# under load delays its arrival: a fixed bound of 1.25 intervals failed at 1.275 s).
waiting = [sum(t["offcpu_total_ns"] for t in r["threads"] if t["tid"] == os.getpid()) for r in sums]
gaps = [arrived[0] - began, arrived[1] - arrived[0]] if len(arrived) == 3 else [0, 0]
check(len(arrived) == 3 and waiting[0] <= 0.1 * sums[0]["interval_ns"] and
      all(0.85 * g * 1e9 <= w <= 1.05 * g * 1e9 + 5e6 for w, g in zip(waiting[1:], gaps)),
      "-i: the reading thread's off-CPU time per report %s: none in the first, then its waits for the "
      "first two reports (%s s apart)" % (waiting, ["%.3f" % g for g in gaps]))

# --- 2c. the schema names every key: the golden NDJSON (every record type) and -U/-K runs --------
with open(os.path.join(SRC, "tests", "golden", "offcputime_report.ndjson")) as fh:
    validate("offcputime", ndjson(fh.read()))
waiter = subprocess.Popen(["/bin/sh", "-c", "while :; do sleep 0.05; done"])
for part in ("-U", "-K"):
    r = run([OC, "-j", part, "-p", str(waiter.pid), "--duration", "0.5"], timeout=60)
    recs = ndjson(r.stdout)
    absent = "kernel_stack" if part == "-U" else "user_stack"
    check(r.returncode == 0 and any(x["type"] == "offcputime.stack" for x in recs)
          and all(absent not in x for x in recs if x["type"] == "offcputime.stack"),
          "-j %s: stack records without %s" % (part, absent))
    validate("offcputime", recs)
waiter.kill()
waiter.wait()

# --- 3. text output: BCC layout -------------------------------------------------------------
r = run([OC, "-d", "-p", str(os.getpid()), "1"], timeout=60)
check(r.returncode == 0 and r.stderr.startswith("Tracing off-CPU time (us) of PID %d" % os.getpid())
      and "Tracing" not in r.stdout, "text: banner on stderr, not stdout")
check("data quality:" in r.stdout, "text report shows data quality")
# the banner is on stderr in every mode, printed once attached; in -j mode the start record too
for mode in (["-f"], ["-j"]):
    p = start([OC, *mode, "-p", str(os.getpid())])
    line = p.stderr.readline()
    first = p.stdout.readline() if mode == ["-j"] else ""
    out, err, rc = stop(p)
    check(line.startswith("Tracing off-CPU time (us) of PID %d" % os.getpid()) and "Ctrl-C" in line
          and "Tracing" not in out and rc == 0,
          "%s: one banner line on stderr after attach (%r)" % (mode[0], line.strip()))
    if mode == ["-j"]:
        start_rec = json.loads(first)  # probes: sched_switch, _exec, _exit, sys_enter_mmap, with -p _free
        check(start_rec["type"] == "offcputime.start" and start_rec["pid"] == [os.getpid()]
              and start_rec["probes"] == 5 and start_rec["options"]["min_ns"] == 1000,
              "-j: the first record is offcputime.start with the PID and options (%s)" % first.strip()[:200])

# --- 3b. `seen` holds live processes only: more short-lived processes than --map-entries ---
# Each child sleeps once (a switch-out that announces it) and exits; without pruning at
# exit the 1024-entry `seen` map fills after ~1024 of them and seen_full counts the rest.
MAPSZ = 1024
live = sum(1 for d in os.listdir("/proc") if d.isdigit())
if live > MAPSZ // 2:
    check(False, "%d live processes; the seen-pruning check needs fewer than %d" % (live, MAPSZ // 2))
else:
    oc = start([OC, "-j", "-u", "--map-entries", str(MAPSZ), "-m", "100s"])
    read_start_record(oc)
    announced = 0
    t0 = time.time()
    # as many children as it takes (the count is the point, not the rate: a fork here
    # took 8-40 ms on some days); 120 s only guards against a hang
    while announced <= MAPSZ + live + 64 and time.time() - t0 < 120:
        pid = os.fork()
        if pid == 0:
            time.sleep(0.0005)
            os._exit(0)
        os.waitpid(pid, 0)
        announced += 1
    time.sleep(0.2)
    out, err, rc = stop(oc)
    recs = ndjson(out)
    summary = [r for r in recs if r["type"] == "offcputime.summary"]
    check(rc == 0 and len(summary) == 1, "offcputime -j --map-entries %d exits 0 with a summary" % MAPSZ)
    if summary:
        dq = summary[0]["data_quality"]
        check(announced > MAPSZ + live, "forked %d sleeping children (> map size %d + %d live)"
              % (announced, MAPSZ, live))
        check(dq["seen_full"] == 0,
              "seen map pruned at exit: seen_full %s after %d short-lived processes" % (dq["seen_full"], announced))

# --- 4. bad input, not root, nothing left loaded ---------------------------------------------
usage_error([OC, "-p", "4194304"])
usage_error([OC, "-p", "1", "-t", str(os.getpid())])
usage_error([OC, "-m", "5000", "-M", "100"])
usage_error([OC, "-m", "99999999999999999999"])
usage_error([OC, "--stack-storage-size", "100000000"])
usage_error([OC, "-u", "-k"])
usage_error([OC, "--duration", "1", "2"])
usage_error([OC, "-c", "2"])
usage_error([OC, "--map-size", "10"])
not_root_error([OC, "1"])


def bpf_prog_ids(pid):
    """Ids of the BPF programs process `pid` holds (fds of anon_inode:bpf-prog)."""
    ids = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            if "bpf-prog" not in os.readlink("/proc/%d/fd/%s" % (pid, fd)):
                continue
            with open("/proc/%d/fdinfo/%s" % (pid, fd)) as fh:
                m = re.search(r"^prog_id:\s*(\d+)", fh.read(), re.M)
            if m:
                ids.add(int(m.group(1)))
        except OSError:
            pass
    return ids


p = start([OC, "-j", "-p", str(os.getpid())])
read_start_record(p)
held = bpf_prog_ids(p.pid)
out, err, rc = stop(p)
check(rc == 0 and len(held) >= 3, "while running, offcputime holds its BPF programs (ids %s)" % sorted(held))
# the kernel frees a released program asynchronously: wait for that, up to 2 s
deadline = time.time() + 2.0
while True:
    left = [i for i in held if subprocess.run(["bpftool", "prog", "show", "id", str(i)],
                                              capture_output=True).returncode == 0]
    if not left or time.time() > deadline:
        break
    time.sleep(0.1)
check(held and not left, "after exit, none of its %d BPF programs is still loaded (left: %s)" % (len(held), left))
# -p on a single-threaded process that waits on its children all the time: its whole
# traced duration is off-CPU (regression: -p once matched nothing because libbcc split
# the filter macro's cflag on its spaces)
sh = subprocess.Popen(["/bin/sh", "-c", "while :; do sleep 0.05; done"])
time.sleep(0.3)
r = run([OC, "-j", "-p", str(sh.pid), "2"], timeout=60)
sh.kill()
sh.wait()
recs = [x for x in ndjson(r.stdout) if x["type"] == "offcputime.stack"] if r.returncode == 0 else []
total = sum(st["offcpu_total_ns"] for st in recs)
check(recs and all(st["pid"] == sh.pid for st in recs), "-p %d: only that process's stacks" % sh.pid)
check(1.5e9 <= total <= 2.2e9, "-p on a waiting shell: %.2f s off-CPU of a 2 s trace" % (total / 1e9))

finish()
