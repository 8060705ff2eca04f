#!/usr/bin/env python3
"""runqlen end to end, against the kernel's own accounting in the same window.

Busy loops are pinned to CPUs with taskset, so the queue each CPU holds is known and
cannot drift (no momentary 3+1 spread). Ground truth, measured while runqlen runs:
  * per CPU: the summed run_delay (ns a task waited on a run queue, field 2 of
    /proc/PID/task/TID/schedstat) of the loops pinned there, divided by the window,
    is that CPU's time-averaged queue of those loops;
  * whole machine: the summed run_delay of every task on the box (anything else that
    runs, another test or a build, waits on the same queues and is counted by runqlen
    too), and /proc/stat's procs_running sampled every 4 ms.
The textbook value (k loops on a CPU queue k-1) holds only on an otherwise quiet box:
it is checked when the in-window ground truth says the box was quiet, and reported as
not applicable otherwise (the ground truth is the judge).
Every NDJSON line is validated against docs/schema/runqlen.schema.json.
Checks: the mean per CPU and overall; an idle CPU reported at ~0 and sampled as often
as a loaded one (-C, text and JSON); occupancy; BCC's --cfs view; text layout;
signals; bad input."""
import glob
import json
import os
import signal
import subprocess
import sys
import threading
import time

from harness import *

require_root()
RUNQLEN = tool("runqlen")
require_built(RUNQLEN, workload("busyloops"))
cpus = os.cpu_count()
SECONDS = 3

def records(text, what):
    """NDJSON lines, each validated against the schema."""
    recs = ndjson(text, "runqlen")
    check(len(recs) > 0, "%s: %d records (each validated against runqlen.schema.json)" % (what, len(recs)))
    return recs


def all_run_delay_ns():
    """run_delay of every task now: {tid: ns}."""
    out = {}
    for f in glob.glob("/proc/[0-9]*/task/[0-9]*/schedstat"):
        try:
            with open(f) as fh:
                out[f] = int(fh.read().split()[1])
        except (OSError, IndexError, ValueError):
            pass
    return out


class AllRunDelay(threading.Thread):
    """run_delay of every task, read every 0.2 s while runqlen runs: a task that exits
    in the window (a build's compilers) keeps what it had waited when last read. With a
    snapshot at each end alone its wait was lost: beside a build, the test read 'cpus
    without our loops: means [0.34], at most the 0.16 other tasks queued'."""

    def __init__(self):
        super().__init__(daemon=True)
        a = time.monotonic()
        self.first = all_run_delay_ns()
        self.t0 = (a + time.monotonic()) / 2  # a scan takes a while: its middle
        self.last = dict(self.first)
        self.done = threading.Event()

    def run(self):
        while not self.done.wait(0.2):
            self.last.update(all_run_delay_ns())

    def finish(self):
        """(deltas, window s): the last scan right away, the window between the scans'
        middles (a scan of every task takes 0.1 s and more beside 8 busy loops)."""
        self.done.set()
        self.join()
        a = time.monotonic()
        self.last.update(all_run_delay_ns())
        t1 = (a + time.monotonic()) / 2
        return [v - self.first.get(f, 0) for f, v in self.last.items()], t1 - self.t0


class ProcsRunning(threading.Thread):
    """/proc/stat procs_running is every CPU's nr_running at the moment of reading; the
    reader is one of them. Queued tasks per CPU = (procs_running - 1 - CPUs)+ / CPUs
    when every CPU is busy."""

    def __init__(self):
        super().__init__(daemon=True)
        self.samples = []
        self.stop = False

    def run(self):
        while not self.stop:
            with open("/proc/stat") as f:
                for line in f:
                    if line.startswith("procs_running"):
                        self.samples.append(int(line.split()[1]))
            time.sleep(0.004)

    def mean_queue(self):
        if not self.samples:
            return 0.0
        return sum(max(0, n - 1 - cpus) for n in self.samples) / len(self.samples) / cpus


class PinnedLoops:
    """`n` busy threads pinned to `cpu` (one process)."""

    def __init__(self, cpu, n, seconds, duty=()):
        """cpu None: not pinned (the scheduler places the threads)."""
        self.cpu, self.n = cpu, n
        pin = ["taskset", "-c", str(cpu)] if cpu is not None else []
        self.p = subprocess.Popen([*pin, workload("busyloops"), str(n), str(seconds), *map(str, duty)],
                                  stdout=subprocess.PIPE, text=True)

    def run_delay_ns(self):
        total = 0
        for f in glob.glob("/proc/%d/task/*/schedstat" % self.p.pid):
            try:
                with open(f) as fh:
                    total += int(fh.read().split()[1])
            except (OSError, IndexError, ValueError):
                pass
        return total

    def finish(self):
        self.p.terminate()
        self.p.communicate(timeout=30)


def measure(per_cpu_loops, extra=(), duty=(), unpinned=0):
    """per_cpu_loops[c] busy loops pinned on CPU c while runqlen runs SECONDS seconds, and
    `unpinned` more the scheduler places; duty=(SPIN_US, SLEEP_US) makes them short
    sleepers (busyloops).
    Returns (records, truth) with truth = {"cpu": {c: mean queue}, "kernel": mean}."""
    # the loops outlive runqlen's start (a compile, seconds under load) and window; the
    # truth covers runqlen's window alone, from its start record to its exit (a window
    # that included the compile averaged in another load: beside a build, every task's
    # run_delay read 4.56 where runqlen and procs_running read 4.28 and 4.33)
    loops = [PinnedLoops(c, n, SECONDS + 60, duty) for c, n in enumerate(per_cpu_loops) if n > 0]
    if unpinned:
        loops.append(PinnedLoops(None, unpinned, SECONDS + 60, duty))
    time.sleep(0.5)
    p = start([RUNQLEN, "-j", *extra, "-i", str(SECONDS), "-c", "1"])
    wait_attached(p, timeout=60)
    sampler = ProcsRunning()
    sampler.start()
    every = AllRunDelay()
    every.start()
    t0 = time.monotonic()
    d0 = [l.run_delay_ns() for l in loops]
    out, err, rc = stop(p, timeout=SECONDS + 30, sig=None)  # it ends after its one interval
    r = subprocess.CompletedProcess(p.args, rc, out, err)
    d1 = [l.run_delay_ns() for l in loops]
    t1 = time.monotonic()
    deltas, every_s = every.finish()
    sampler.stop = True
    for l in loops:
        l.finish()
    window_ns = (t1 - t0) * 1e9
    # one task cannot wait longer than the window: a larger delta is not a delta (a task
    # the first snapshot missed, or a reused TID; a fresh CI run read "every task's
    # run_delay 33.12" per CPU next to runqlen's 1.15 and procs_running's 1.18)
    every_ns = every_s * 1e9
    bad = [d for d in deltas if not 0 <= d <= every_ns * 1.05]
    if bad:
        print("info %d task(s) with a run_delay delta outside [0, window] left out (%s s)"
              % (len(bad), [round(d / 1e9, 1) for d in bad[:5]]))
    truth = {"cpu": {c: 0.0 for c in range(cpus)}, "kernel": sampler.mean_queue(),
             "all": sum(d for d in deltas if 0 <= d <= every_ns * 1.05) / every_ns / cpus}
    for l, a, b in zip(loops, d0, d1):
        if l.cpu is not None:
            truth["cpu"][l.cpu] = (b - a) / window_ns
    check(r.returncode == 0, "runqlen -j %s exits 0 (%s)" % (" ".join(extra), r.stderr.strip()[-200:]))
    recs = records(r.stdout, "runqlen -j %s" % " ".join(extra))
    types = [x["type"] for x in recs]
    want = ["runqlen.start"] + (["runqlen.cpu"] * cpus if "-C" in extra else []) + ["runqlen.all", "runqlen.summary"]
    check(types == want, "records %s" % types)
    check(all(x["final"] for x in recs[1:]), "the only report is final")
    return [x for x in recs if x["type"] in ("runqlen.cpu", "runqlen.all")], truth


# --- 1. mean run queue with 0, 2 and 4 loops pinned on every CPU ------------------------------
for k in (0, 2, 4):
    recs, truth = measure([k] * cpus)
    if not recs:
        continue
    rec = recs[0]
    mean = rec["runqlen_avg"]
    expected = max(0, k - 1)
    loops_truth = sum(truth["cpu"].values()) / cpus
    check(within(mean, truth["all"], abs_=0.25),
          "%d loops/CPU: runqlen mean %.2f vs every task's run_delay %.2f (+-0.25; the loops' alone %.2f)"
          % (k, mean, truth["all"], loops_truth))
    if k > 0:  # procs_running only shows a queue when every CPU is busy
        check(within(mean, truth["kernel"], rel=0.2, abs_=0.25),
              "%d loops/CPU: runqlen mean %.2f vs procs_running %.2f (+-20%%/0.25)"
              % (k, mean, truth["kernel"]))
    # quiet: within 0.1 of the textbook (a fresh CI run had truth 3.25 for 3 with 4 loops,
    # runqlen 3.35 = truth + 0.10 judged against 3 +- 0.3: the box's own extra load
    # counted against the tool)
    if within(truth["all"], expected, abs_=0.1):
        check(within(mean, expected, abs_=0.3),
              "%d loops/CPU: mean %.2f, textbook %d (the box was quiet: truth %.2f)"
              % (k, mean, expected, truth["all"]))
    else:
        print("note %d loops/CPU: textbook %d not applicable, the box was busy in the window "
              "(every task's run_delay %.2f, procs_running %.2f); judged against those above"
              % (k, expected, truth["all"], truth["kernel"]))
    check(rec["sample_count"] > 0 and rec["data_quality"]["read_errors"] == 0,
          "samples counted (%d), no kernel read errors" % rec["sample_count"])

# --- 1b. short sleepers: since 6.12 a task that sleeps owing CPU time stays queued, delayed
# (EEVDF delayed dequeue) and rq.nr_running counts it, though it waits for nothing (no
# run_delay accrues). 20 threads spinning 30 us and sleeping 100 us on 2 CPUs: reading
# nr_running as BCC does gave 8.0 per CPU against every task's run_delay 5.6-5.9 (bpftrace,
# same kernel); minus the delayed tasks 5.9-6.0. runqlen leaves them out, so it must be
# nearer run_delay than the count with them (its mean plus delayed_dequeue_tasks per sample).
# Some runs read above run_delay even so: 8.0 vs 6.9 and 8.7 vs 7.4 in 2 of 4 (+15-17%),
# and pinned with taskset 6.8-7.0 vs 5.5-5.8; not understood yet (bpftrace's sampled
# nr_running minus delayed reads the same), so the bound is 25%, and the gap is printed.
recs, truth = measure([0] * cpus, extra=("-F", "997"), duty=(30, 100), unpinned=10 * cpus)
if recs:
    rec = recs[0]
    dq = rec["data_quality"]
    raw = rec["runqlen_avg"] + dq["delayed_dequeue_tasks"] / max(1, rec["sample_count"])
    print("info short sleepers: %d of %d samples had delayed tasks queued; counted, the mean would be %.2f"
          % (dq["delayed_dequeue_samples"], rec["sample_count"], raw))
    check(abs(rec["runqlen_avg"] - truth["all"]) < abs(raw - truth["all"]),
          "short sleepers: runqlen mean %.2f nearer every task's run_delay %.2f than with delayed tasks (%.2f)"
          % (rec["runqlen_avg"], truth["all"], raw))
    check(within(rec["runqlen_avg"], truth["all"], rel=0.25, abs_=0.25),
          "short sleepers: runqlen mean %.2f vs every task's run_delay %.2f (+-25%%/0.25)"
          % (rec["runqlen_avg"], truth["all"]))

# --- 2. -C: every CPU reported, loaded or idle, each sampled as often -------------------------
# CPU 0 holds two loops (queue 1), the others are idle.
def others_queue(truth):
    """Tasks queued on the whole box that are not our pinned loops (summed over CPUs): what
    another test, a build or stress-ng adds. Our "idle" CPUs are idle only when it is ~0."""
    return max(0.0, truth["all"] * cpus - sum(truth["cpu"].values()))


def check_unloaded_cpus(by_cpu, truth, what):
    """CPUs 1.. hold none of our loops: ~0 on a quiet box; otherwise together at most what
    the other tasks queued (they may queue on CPU 0 as well, so this is an upper bound),
    and all CPUs together at the box's every-task run_delay."""
    rest = [by_cpu[c]["runqlen_avg"] for c in range(1, cpus) if c in by_cpu]
    others = others_queue(truth)
    if others < 0.1:
        for c, mean in zip(range(1, cpus), rest):
            check(mean <= 0.1, "%s idle cpu %d: mean %.2f (~0)" % (what, c, mean))
    else:
        check(sum(rest) <= others + 0.1 * len(rest),
              "%s cpus without our loops: means %s, at most the %.2f other tasks queued on the box"
              % (what, [round(m, 2) for m in rest], others))
        total = sum(r["runqlen_avg"] for r in by_cpu.values())
        check(within(total, truth["all"] * cpus, abs_=0.25 * cpus),
              "%s all cpus: summed mean %.2f vs every task's run_delay %.2f (the box was busy: %.2f "
              "queued that are not our loops)" % (what, total, truth["all"] * cpus, others))


recs, truth = measure([2] + [0] * (cpus - 1), extra=("-C",))
by_cpu = {r["cpu"]: r for r in recs if r["type"] == "runqlen.cpu"}
check(sorted(by_cpu) == list(range(cpus)), "-C: one record per CPU, idle ones included (%s)" % sorted(by_cpu))
if 0 in by_cpu:
    busy = by_cpu[0]
    # other tasks that land on CPU 0 queue there as well: the loops' run_delay is its floor
    top = truth["cpu"][0] + others_queue(truth)
    check(truth["cpu"][0] - 0.25 <= busy["runqlen_avg"] <= top + 0.25 and busy["runqlen_avg"] >= 0.7,
          "loaded cpu 0: mean %.2f vs run_delay %.2f of its loops (+ at most %.2f of other tasks)"
          % (busy["runqlen_avg"], truth["cpu"][0], top - truth["cpu"][0]))
    check_unloaded_cpus(by_cpu, truth, "-C:")
    for c in range(1, cpus):
        r = by_cpu.get(c)
        if not r:
            continue
        ratio = r["sample_count"] / max(1, busy["sample_count"])
        check(0.85 <= ratio <= 1.15, "idle cpu %d sampled as often as the loaded one: %d vs %d samples"
              % (c, r["sample_count"], busy["sample_count"]))

# --- 2b. idle periods that begin unseen ------------------------------------------------------
# Where PID 1 is the Firecracker agent no BPF program runs in its threads' context, so a CPU
# one of them leaves idle goes idle unseen (bpf_sources/runqlen.bpf.c idle_start). With PID 1
# kept busy, the idle CPU must still be counted for its whole idle time (recovered from
# rq.clock_idle, few dropped: harness.few_dropped).
with Pid1Traffic(pause=0.02) as traffic:
    if traffic.port is None:
        print("info PID 1 listens on no TCP port: unseen idle starts not exercised here")
    else:
        recs, truth = measure([2] + [0] * (cpus - 1), extra=("-C",))
        by_cpu = {r["cpu"]: r for r in recs if r["type"] == "runqlen.cpu"}
        if check(0 in by_cpu and 1 in by_cpu, "PID 1 busy: -C reports CPUs 0 and 1"):
            dq = by_cpu[1]["data_quality"]
            print("info PID 1 busy (%d connections): idle periods recovered %d, dropped %d"
                  % (traffic.connects, dq["recovered_periods"], dq["dropped_periods"]))
            # idle time left out would weigh CPU 1's few busy samples up: its mean rises
            check(few_dropped(dq), "PID 1 busy: few idle periods dropped (%d vs %d samples)"
                  % (by_cpu[1]["sample_count"], by_cpu[0]["sample_count"]))
            check_unloaded_cpus(by_cpu, truth, "PID 1 busy:")

# --- 3. occupancy: with 2 loops pinned per CPU a queue exists nearly always ------------------
recs, _ = measure([2] * cpus, extra=("-O",))
occ = recs[0]["occupancy_pct"] if recs else -1
check(occ > 90, "occupancy %.1f%% > 90%% with 2 loops on every CPU" % occ)

# --- 4. BCC's CFS-only view: same answer here (the loops are not in nested cgroups) ----------
recs, truth = measure([2] * cpus, extra=("--cfs",))
if recs:
    loops_truth = sum(truth["cpu"].values()) / cpus
    # --cfs counts the root CFS queue's entities: another task in a nested cgroup (a build,
    # stress-ng in a session scope) counts once per group, so on a busy box the loops'
    # run_delay is the floor and every task's run_delay the ceiling
    top = loops_truth if others_queue(truth) < 0.1 else truth["all"]
    check(recs[0]["view"] == "cfs" and loops_truth - 0.25 <= recs[0]["runqlen_avg"] <= top + 0.25,
          "--cfs mean %.2f vs loops' run_delay %.2f (every task's %.2f)"
          % (recs[0]["runqlen_avg"], loops_truth, truth["all"]))

# --- 5. text mode: BCC's header, per-CPU sections for idle CPUs too, data quality ------------
r = run([RUNQLEN, "-F", "49", "1", "2"], timeout=30)  # BCC's positional [interval [count]]
check(r.returncode == 0 and r.stdout.count("runqlen       : count     distribution") == 2,
      "text mode: two interval histograms")
check("data quality:" in r.stdout, "text mode shows data quality")
r = run([RUNQLEN, "-C", "1", "1"], timeout=30)
check(r.returncode == 0 and all(("cpu = %d\n" % c) in r.stdout for c in range(cpus)),
      "text -C: a section for every CPU")

# --- 6. signals: final report and exit 0 (after the start record says it is attached) --------
for sig in (signal.SIGINT, signal.SIGTERM):
    p = start([RUNQLEN, "-j"])
    wait_attached(p)
    time.sleep(1)
    out, err, rc = stop(p, sig=sig)
    recs = records(out, "after %s" % sig.name)
    check(rc == 0 and [r["type"] for r in recs] == ["runqlen.start", "runqlen.all", "runqlen.summary"]
          and all(r["final"] for r in recs[1:]), "%s: start, final report and exit 0 (rc=%d, %s)" % (
              sig.name, rc, [r["type"] for r in recs]))

# --- 7. bad input: one line, exit 2 -----------------------------------------------------------
for args in (["-F", "0"], ["-F", "abc"], ["-f", "0"], ["-F", "9", "-f", "9"], ["0"], ["1", "0"], ["--bogus"],
             ["1", "2", "3"], ["-x"], ["-i", "1", "1"], ["-c", "2"]):
    usage_error([RUNQLEN, *args])
not_root_error([RUNQLEN, "1", "1"])
check(leftover_probe_events() == [], "no probe events left behind")
finish()
