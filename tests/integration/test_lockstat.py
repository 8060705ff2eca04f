#!/usr/bin/env python3
"""lockstat end to end, against workloads that measure their own ground truth.

1. futex mode: mutex_contention (N threads on `static pthread_mutex_t cache_lock`,
   hold and gap slept so the threads rarely compete for the 2 CPUs) times every
   pthread_mutex_lock call itself. lockstat's total wait for that mutex must be within
   10% of the workload's total, and the lock must be identified by its address and
   the symbol cache_lock. Why 10% is the right tolerance: the workload's number also
   contains the uncontended fast path (~20 ns per call), the user-space part of the
   slow path (retrying the atomic, syscall entry/exit, ~1-2 us per wait) and
   preemption between its clock reads and the lock; futex tracing sees only the time
   inside the futex syscall. With ~1.4 ms waits that is < 1% normally, but other
   tests share this 2-CPU machine, so we allow 10%.
2. per-thread view (-P): each worker thread's total within 10% (or 3 ms) of its own.
3. --uprobes: the pthread_mutex_lock calls counted equal the workload's acquisitions
   and the time within 10%; the call site is update_cache. On uncontended private
   mutexes the calibrated probe cost (probe_cost_ns) taken off each call brings the
   time per call back near the workload's untraced time per call.
4. kernel locks: mmap_storm's threads contend on their mmap_lock; lockstat -K names it
   mmap_lock (an rwsem) with a kernel stack through the mmap/munmap/fault paths.
   Its spinlock waits against a bpftrace pairing of the same tracepoints attached
   before it, over the same window (totals within 30%, counts within 10%, no longest
   wait beyond bpftrace's), and against perf's pairing of alternating windows (checked for spinlocks; for
   rwsems, whose waits include the wait for a CPU under the other load, shown).
5. bad input: usage errors (exit 2), unknown lock symbol, a PID without libc for
   --uprobes, a stripped static binary, a PID that exits while traced (exit 0 with a
   note), not root; nothing left attached.
Every NDJSON record of every run is validated against docs/schema/lockstat.schema.json,
and every -j run starts with a lockstat.start record (the probes are attached).
"""
import json
import os
import shutil
import subprocess
import tempfile
import time

from harness import *
from kpairing import (RWSEM, SPIN, compare_same_window, compare_turn, lockstat_window, perf_window, same_window,
                      start_load, stop_load)

require_root()
LOCKSTAT = tool("lockstat")
TMP = tempfile.mkdtemp(prefix="lockstat-test-")


def wait_banner(proc, timeout=30):
    """Text mode: the "Tracing ..." banner on stderr says the probes are attached."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line or "Tracing" in line:
            return
    raise AssertionError("lockstat did not attach")


def traced_run(wl, wargs, largs, timeout=60):
    """Starts the workload (waiting on a go file), attaches lockstat -p PID, then lets
    the workload run; lockstat ends when the workload exits. Returns
    (ground truth, lockstat records, lockstat stderr, lockstat rc)."""
    go = os.path.join(TMP, "go")
    if os.path.exists(go):
        os.unlink(go)
    w = start([workload(wl), "--go-file", go] + wargs)
    pid = int(w.stderr.readline().split()[1])
    l = start([LOCKSTAT, "-p", str(pid), "-j", "-n", "0"] + largs)
    # the first record says the probes are attached (no fixed sleep)
    first = l.stdout.readline()
    open(go, "w").close()
    wout, _ = w.communicate(timeout=timeout)
    try:
        lout, lerr = l.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        l.kill()
        lout, lerr = l.communicate()
    recs = ndjson(first + lout, "lockstat")
    check(bool(recs) and recs[0]["type"] == "lockstat.start" and recs[0]["pid"] == [pid],
          "-j: the first record is lockstat.start for PID %d (%s)" % (pid, first.strip()[:120]))
    return json.loads(wout), recs, lerr, l.returncode


def lock_record(recs, addr):
    for r in recs:
        if r.get("type") == "lockstat.lock" and r["addr"] == addr:
            return r
    return None


MC_ARGS = ["--threads", "4", "--hold-us", "500", "--gap-us", "200", "--hold-mode", "sleep",
           "--duration-ms", "2000"]

# --- 1. futex mode ----------------------------------------------------------------


def futex_run():
    gt, recs, err, rc = traced_run("mutex_contention", MC_ARGS, ["-U"])
    r = lock_record(recs, gt["mutex_addr"])
    d = {"gt": gt, "rec": r, "recs": recs, "err": err, "rc": rc}
    if r is None:
        d["why"] = "no record for %s: %s" % (gt["mutex_addr"], err.strip())
        return False, d
    ok = within(r["wait_total_ns"], gt["total_wait_ns"], rel=0.10)
    d["why"] = "total %d vs %d" % (r["wait_total_ns"], gt["total_wait_ns"])
    return ok, d


d = futex_run()[1]
gt, r = d["gt"], d["rec"]
check(d["rc"] == 0 and "PID %d exited" % gt["pid"] in d["err"],
      "lockstat exits 0 with a note when the traced PID exits (rc %s)" % d["rc"])
check(r is not None, "futex mode: a record for the mutex at %s" % gt["mutex_addr"])
if r:
    print("     workload: %d acquisitions, %d slow, total wait %.1f ms; lockstat: %d waits, %.1f ms"
          % (gt["acquisitions"], gt["slow_acquisitions"], gt["total_wait_ns"] / 1e6,
             r["wait_count"], r["wait_total_ns"] / 1e6))
    check(within(r["wait_total_ns"], gt["total_wait_ns"], rel=0.10),
          "futex mode: total wait %.1f ms within 10%% of the workload's own %.1f ms"
          % (r["wait_total_ns"] / 1e6, gt["total_wait_ns"] / 1e6))
    check(r["symbol"] == "cache_lock" and r["lock"] == "cache_lock" and r["addr"] == gt["mutex_addr"],
          "futex mode: mutex identified as %s at %s (got %r at %s)"
          % (gt["symbol"], gt["mutex_addr"], r["symbol"], r["addr"]))
    check(r["kind"] == "futex-mutex" and r["layer"] == "user" and r["pid"] == gt["pid"],
          "futex mode: kind futex-mutex, layer user, pid %d (got %s/%s/%s)"
          % (gt["pid"], r["kind"], r["layer"], r["pid"]))
    # every slow acquisition blocked at least once; barging can add a few extra waits
    check(gt["slow_acquisitions"] * 0.9 <= r["wait_count"] <= gt["acquisitions"] * 1.5,
          "futex mode: %d waits for %d slow acquisitions" % (r["wait_count"], gt["slow_acquisitions"]))
    check(r["thread_count"] == gt["threads"], "futex mode: %d waiting threads (got %d)" % (gt["threads"], r["thread_count"]))
    check(r["wait_max_ns"] <= gt["max_wait_ns"] * 1.05 + 100000,
          "futex mode: max wait %.2f ms <= workload's max %.2f ms"
          % (r["wait_max_ns"] / 1e6, gt["max_wait_ns"] / 1e6))
    check(0 < r["wait_p50_ns"] <= r["wait_p90_ns"] <= r["wait_p99_ns"],
          "futex mode: 0 < p50 <= p90 <= p99 (%d %d %d)" % (r["wait_p50_ns"], r["wait_p90_ns"], r["wait_p99_ns"]))
    check(r["wait_avg_ns"] == r["wait_total_ns"] // max(r["calls"], 1), "futex mode: avg = total / waits")
    # libc has no frame pointers: with -p the stack is unwound from .eh_frame (dwarf),
    # system-wide the site comes from the user-stack scan at the wait
    check(r["sites"] and "update_cache" in r["sites"][0]["site"],
          "futex mode: call site is update_cache, the function that called pthread_mutex_lock (%s)"
          % [c["site"] for c in r["sites"]])
    st = r["sites"][0]["user_stack"] if r["sites"] else []
    at = next((i for i, f in enumerate(st) if "update_cache" in f), None)
    check(at is not None and at >= 1 and all("lock" in f for f in st[:at]) and at + 1 < len(st)
          and "worker" in st[at + 1] and not r["sites"][0]["user_stack_missing"],
          "futex mode: stack lock wait (glibc) <- update_cache <- worker (%s)" % st)
    check("data_quality" in r and r["data_quality"]["map_full"] == 0 and r["data_quality"]["lost_stacks"] == 0,
          "futex mode: data quality present and clean (%s)" % r.get("data_quality"))
    check(r["reading"].startswith("convoy"), "futex mode: 4 waiters read as a convoy (%s)" % r["reading"])

# --- 2. per-thread view --------------------------------------------------------------


def threads_run():
    gt, recs, err, rc = traced_run("mutex_contention", MC_ARGS, ["-U", "-P", "-L", "cache_lock"])
    rows = {x["tid"]: x for x in recs if x.get("type") == "lockstat.thread"}
    bad = []
    for t in gt["per_thread"]:
        got = rows.get(t["tid"], {}).get("wait_total_ns", 0)
        if not within(got, t["wait_ns"], rel=0.10, abs_=3000000):
            bad.append((t["tid"], got, t["wait_ns"]))
    return not bad, {"gt": gt, "rows": rows, "bad": bad, "why": "threads off: %s" % bad, "err": err}


d = threads_run()[1]
check(len(d["rows"]) == d["gt"]["threads"] and not d["bad"],
      "-P: one row per worker, each thread's wait within 10%% (or 3 ms) of its own (%s)" % d["bad"])
check(all(x["top_lock"] == "cache_lock" for x in d["rows"].values()), "-P -L cache_lock: top lock is cache_lock")

# --- 3. --uprobes --------------------------------------------------------------------


def uprobe_run():
    gt, recs, err, rc = traced_run("mutex_contention", MC_ARGS, ["--uprobes", "-v"])
    r = lock_record(recs, gt["mutex_addr"])
    d = {"gt": gt, "rec": r, "err": err, "rc": rc}
    if r is None:
        d["why"] = "no record: %s" % err.strip()
        return False, d
    ok = within(r["wait_total_ns"], gt["total_wait_ns"], rel=0.10)
    d["why"] = "total %d vs %d" % (r["wait_total_ns"], gt["total_wait_ns"])
    return ok, d


d = uprobe_run()[1]
gt, r = d["gt"], d["rec"]
check(r is not None, "--uprobes: a record for the mutex (%s)" % d["err"].strip()[:300])
if r:
    check(r["kind"] == "pthread" and r["symbol"] == "cache_lock", "--uprobes: kind pthread, symbol cache_lock")
    check(abs(r["calls"] - gt["acquisitions"]) <= 2,
          "--uprobes: %d lock calls timed vs %d acquisitions" % (r["calls"], gt["acquisitions"]))
    check(within(r["wait_total_ns"], gt["total_wait_ns"], rel=0.10),
          "--uprobes: time in pthread_mutex_lock %.1f ms within 10%% of the workload's %.1f ms"
          % (r["wait_total_ns"] / 1e6, gt["total_wait_ns"] / 1e6))
    check(gt["slow_acquisitions"] * 0.9 <= r["wait_count"] <= r["calls"],
          "--uprobes: %d calls blocked (workload: %d slow)" % (r["wait_count"], gt["slow_acquisitions"]))
    check(r["sites"] and "update_cache" in r["sites"][0]["site"],
          "--uprobes: exact call site update_cache (%s)" % [c["site"] for c in r["sites"]][:2])
    check("pthread_mutex_lock" in d["err"], "-v says where the uprobes are")

# --uprobes probe cost: with uncontended locks (each thread its own mutex, no hold, no
# gap) a probed call's timed window is almost all the probes' own cost (leaving the
# entry trap, the return trap: ~0.3-1.3 us here, it varies with load and from run to
# run). lockstat calibrates that cost at startup, then follows each CPU's median of
# the targets' own uncontended calls, and takes it off each call, so the median call
# on the workload's mutexes must come back near the time per call the workload
# measures untraced (~20-40 ns), within a quarter of the probe cost (uncorrected it
# is about one probe cost; with the startup calibration alone CI saw 224 and 346 ns
# left of a 935 ns cost). The median, not the mean: a call preempted inside its
# window by other tests on this 2-CPU machine would swamp a mean of ~100 ns calls.
PRIV_ARGS = ["--private", "--threads", "2", "--hold-us", "0", "--gap-us", "0", "--duration-ms", "1000"]


def uprobe_cost_run():
    r = run([workload("mutex_contention")] + PRIV_ARGS, timeout=60)
    untraced = json.loads(r.stdout.strip().splitlines()[-1])
    gt, recs, err, rc = traced_run("mutex_contention", PRIV_ARGS, ["--uprobes", "-U"])
    rows = sorted((x for x in recs if x.get("type") == "lockstat.lock" and x["kind"] == "pthread"
                   and x["pid"] == gt["pid"]), key=lambda x: -x["calls"])
    calibrated = recs[0].get("probe_cost_ns", 0) if recs else 0
    summary = [x for x in recs if x.get("type") == "lockstat.summary"]
    cost = summary[-1]["probe_cost_ns"] if summary else 0
    calls = sum(x["calls"] for x in rows)
    truth = untraced["total_wait_ns"] / untraced["acquisitions"]
    p50s = [x["wait_p50_ns"] for x in rows[:2]]
    d = {"cost": cost, "calibrated": calibrated, "calls": calls, "acq": gt["acquisitions"], "p50s": p50s,
         "truth": truth,
         "mean": sum(x["wait_total_ns"] for x in rows) / max(calls, 1),
         "summary": summary}
    ok = 50 <= cost <= 5000 and len(p50s) == 2 and all(abs(p - truth) <= 0.25 * cost for p in p50s)
    d["why"] = "probe cost %d ns, medians %s ns vs %.0f untraced" % (cost, p50s, truth)
    return ok, d


d = uprobe_cost_run()[1]
print("     --uprobes uncontended: probe cost calibrated %d ns, tracked %d ns; medians %s ns, mean %.0f ns per"
      " call (%d calls of %d); untraced %.0f ns" % (d["calibrated"], d["cost"], d["p50s"], d["mean"], d["calls"],
                                                    d["acq"], d["truth"]))
check(50 <= d["calibrated"] <= 5000,
      "--uprobes: the start record's probe_cost_ns %d is measured (50-5000 ns)" % d["calibrated"])
check(len(d["summary"]) == 1 and 50 <= d["cost"] <= 5000,
      "--uprobes: the summary's probe_cost_ns %d is the tracked estimate (50-5000 ns)" % d["cost"])
check(abs(d["calls"] - d["acq"]) <= 4,  # + libc's own few (thread start, exit)
      "--uprobes: every uncontended call counted (%d calls, workload %d)" % (d["calls"], d["acq"]))
check(len(d["p50s"]) == 2 and all(abs(p - d["truth"]) <= 0.25 * d["cost"] for p in d["p50s"]),
      "--uprobes: median uncontended call %s ns, within a quarter of the %d ns probe cost of the untraced %.0f ns"
      % (d["p50s"], d["cost"], d["truth"]))

# --- 4. kernel locks -------------------------------------------------------------------


def kernel_run():
    gt, recs, err, rc = traced_run("mmap_storm", ["--threads", "4", "--duration-ms", "2000"], ["-K"])
    mm = [x for x in recs if x.get("type") == "lockstat.lock" and x["symbol"] == "mmap_lock"]
    d = {"gt": gt, "mm": mm, "recs": recs, "err": err}
    d["why"] = "no mmap_lock among %s" % [(x.get("kind"), x.get("symbol")) for x in recs][:6]
    return bool(mm) and mm[0]["wait_count"] > 0, d


d = kernel_run()[1]
check(bool(d["mm"]), "kernel: mmap_storm's mmap_lock reported (%d iterations)" % d["gt"]["iterations"])
if d["mm"]:
    m = d["mm"][0]
    stacks = [c["kernel_stack"] for c in m["sites"]]
    check(m["layer"] == "kernel" and m["kind"].startswith("rwsem"), "kernel: mmap_lock is an rwsem (%s)" % m["kind"])
    check(m["pid"] == d["gt"]["pid"], "kernel: waiters are mmap_storm's threads")
    check(any(len(s) >= 3 for s in stacks), "kernel: call sites carry kernel stacks")
    # kernel stacks are sampled (at most one walk per lock and process every 10 ms):
    # the sites are scaled to the lock's totals, and say from how many stacks
    n_sites = sum(c["wait_count"] for c in m["sites"])
    check(0 < m["site_sample_count"] <= m["wait_count"] and len(m["sites"]) < 10
          and abs(n_sites - m["wait_count"]) <= len(m["sites"]),
          "kernel: sites scaled from %d sampled stacks sum to the lock's %d waits (%d)"
          % (m["site_sample_count"], m["wait_count"], n_sites))
    paths = " ".join(" ".join(s) for s in stacks)
    check(any(k in paths for k in ("munmap", "mmap", "fault")),
          "kernel: stacks go through mmap/munmap/page fault (%s)" % [c["site"] for c in m["sites"]])
    # columns computed apart must agree: kernel waits are counted once each (calls ==
    # wait_count), the average is total / calls, the thread list sums to the lock
    tsum = sum(t["wait_total_ns"] for t in m["threads"])
    check(m["wait_total_ns"] > 0 and m["calls"] == m["wait_count"]
          and m["wait_avg_ns"] == m["wait_total_ns"] // m["calls"]
          and (len(m["threads"]) < m["thread_count"] or tsum == m["wait_total_ns"]),
          "kernel: wait numbers consistent (calls %d = waits %d, avg %d = %d / calls, threads sum %d = %d)"
          % (m["calls"], m["wait_count"], m["wait_avg_ns"], m["wait_total_ns"], tsum, m["wait_total_ns"]))

# --- 4b. kernel pairing vs an independent pairing of the same tracepoints ----------------
# lock:contention_begin/end nest (a semaphore's own spinlock inside its wait, wait_lock
# spins inside rwsem/mutex slow paths, interrupts while spinning). The old pairing left
# waits open when lockstat attached under load (begin traced before end) and later
# closed them with an end whose begin it never saw: rq_lock "spinlock waits" of 161 and
# 219 ms under MariaDB, and semaphore sleeps merged into their spinlock. Ground truth:
# perf record of the same tracepoints (near-zero in-window cost), paired here per task
# (idle: per CPU), an end closing the innermost open wait on its address. lockstat is
# attached while the workload already runs; the two windows alternate (both attached
# at once inflate each other's waits).
PERF = shutil.which("perf")
check(bool(PERF), "kernel pairing: perf installed (linux-perf, scripts/install-deps)")
load = start_load()
time.sleep(1)
# Which waits are compared: spinlocks where the kernel traces them. A hypervisor guest
# without paravirt spinlocks takes contended spinlocks in virt_spin_lock, before the
# slow path's contention_begin (kpairing.SPIN): on such a box perf pairs no spin waits
# under this load (measured here on PVM: 0 in 4 s, 2,900 rwsem begins), lockstat must
# not report any either, and the pairing is compared on the rwsem waits instead.
CLS = SPIN
if PERF:
    probe = perf_window(2, TMP)
    probe_n = sum(len(ws) for ws in probe.values())
    if probe_n < 200:
        CLS = RWSEM
        spins, _ = lockstat_window(LOCKSTAT, 2)
        ls_spin = sum(x["wait_count"] for x in spins)
        check(ls_spin <= 2 * probe_n + 50, "kernel: the kernel traces few spin waits here (perf: %d in 2 s), and "
              "lockstat -K reports as few (%d in 2 s)" % (probe_n, ls_spin))
    print("     kernel pairing: perf pairs %d spin waits in 2 s of the load: comparing %s waits"
          % (probe_n, CLS.name))
# rwsem waits are fewer (one mmap_lock per mmap_storm process: ~1,400 in 4 s here on a
# quiet box; with the CPUs loaded by a build, 382 in the 5 s same window and 207-369 per
# 4 s turn, and the same-window pairing still agreed exactly: 382 vs 382 waits, total
# 1.000x). The pairing sees the same events, so 200 waits are enough to judge it.
MIN_LS = 1000 if CLS is SPIN else 200
MIN_SAME = 500 if CLS is SPIN else 200
# The same window (issue 8: totals within 30% of an independent pairing, no impossible
# maxima). perf writes its sample after every BPF program on the tracepoint has run,
# so attached with lockstat its waits contain lockstat's end probe (0.49x-0.90x), and
# taking turns the load moves between windows (totals 0.09x-12x). A bpftrace pairing
# attached first runs before lockstat at every begin and end (kpairing.same_window:
# BPF programs on a tracepoint run in attach order), so both pair the same events and
# lockstat's waits contain only one bpftrace map write at each end. Measured here on
# this load (16 windows of 4-5 s, builds and other tests alongside, up to 1.2 s of
# steal per window): counts 1.000x-1.011x (window edges); totals without each side's
# longest wait 0.95x-1.00x on rq_lock, 0.97x-1.05x on page-table locks, 0.97x-0.99x on
# mmap_lock's wait_lock; all spinlocks 0.97x-1.00x; longest waits alike to a few us.
# With bpftrace's aggregation right after its clock read, ~3 us waits read
# 1.06x-1.27x; in the other attach order lockstat read 0.80x-0.89x (its own probe in
# bpftrace's waits). The comparison must fail a lockstat whose waits were 2x as long
# (asserted on this window's numbers).
sw = same_window(LOCKSTAT, 5, TMP, CLS)
check(sw["error"] is None, "kernel pairing, same window: bpftrace's pairing attached before lockstat -K and both "
      "ran 5 s (%s; %s)" % (sw["error"] or "ok", {k: round(v, 2) for k, v in sw["times"].items()}))
if sw["error"] is None:
    sw_fails, sw_max_fails, sw_lines, sw_worst = compare_same_window(sw, min_waits=MIN_SAME, cls=CLS)
    for line in sw_lines:
        print("     " + line)
    print("     bpftrace: %s; lockstat data quality %s; most steal of one CPU %.0f ms"
          % (sw["bt_extra"], {k: v for k, v in sw["dq"].items() if v}, sw["steal_cpu_max"] / 1e6))
    check(not sw_fails, "kernel pairing, same window: lockstat -K's %ss with >= %d waits (and all together) "
          "within 30%% of bpftrace's pairing in total wait and 10%% in count (%s)" % (CLS.name, MIN_SAME,
                                                                                   sw_fails or "all within"))
    check(not sw_max_fails, "kernel pairing, same window: no lockstat %s's longest wait above 1.3x bpftrace's "
          "+ 2 ms + one CPU's steal (closest: %.2f of that bound, %s)%s"
          % (CLS.name, sw_worst[0], sw_worst[1], "; " + "; ".join(sw_max_fails) if sw_max_fails else ""))
    sw_f2, _, _, _ = compare_same_window(sw, min_waits=MIN_SAME, scale=2.0, cls=CLS)
    sw_f2 = [f for f in sw_f2 if not f.startswith("no ")]  # too few waits proves nothing
    check(bool(sw_f2), "kernel pairing, same window: the comparison fails a lockstat whose waits were 2x as long "
          "(%d failures: %s)" % (len(sw_f2), sw_f2[:1]))
if not PERF:
    stop_load(load)
else:
    res = {}
    steal, wall = {}, {}  # hypervisor steal (ns, all CPUs) and wall time of each window
    for n in ("1", "2"):
        steal0, t0 = steal_ns(), time.monotonic()
        spins, dq = lockstat_window(LOCKSTAT, 4, CLS)
        steal1 = steal_ns()
        wall["ls" + n] = (time.monotonic() - t0) * 1e9
        res["ls" + n] = (sum(x["wait_count"] for x in spins), sum(x["wait_total_ns"] for x in spins),
                         max([x["wait_max_ns"] for x in spins] or [0]), spins, dq)
        t1 = time.monotonic()
        res["perf" + n] = perf_window(4, TMP, CLS)
        steal["ls" + n], steal["perf" + n] = steal1 - steal0, steal_ns() - steal1
        wall["perf" + n] = (time.monotonic() - t1) * 1e9
    steal_max = max(steal["ls1"], steal["ls2"])  # in a lockstat window
    # While lockstat runs, perf must still see the tracepoints' events: a BPF program
    # returning 0 makes the kernel drop them for every other perf user (perf recorded 0
    # waits here before lockstat's programs returned 1).
    ls = start([LOCKSTAT, "-K", "-j", "-n", "0"])
    ls.stdout.readline()  # the start record: attached
    shared = perf_window(2, TMP, CLS)
    ls.send_signal(2)
    ls.communicate(timeout=60)
    shared_n = sum(len(ws) for ws in shared.values())
    check(shared_n > 100, "kernel: perf pairs %d %s waits while lockstat -K runs (alone: %d in 4 s)"
          % (shared_n, CLS.name, sum(len(ws) for ws in res["perf1"].values())))
    stop_load(load)
    ls_n = res["ls1"][0] + res["ls2"][0]
    ls_tot = res["ls1"][1] + res["ls2"][1]
    ls_max = max(res["ls1"][2], res["ls2"][2])
    pf = {}
    for label in ("perf1", "perf2"):
        for a, ws in res[label].items():
            pf.setdefault(a, []).extend(ws)
    pf_all = [w for ws in pf.values() for w in ws]
    pf_n, pf_tot, pf_max = len(pf_all), sum(pf_all), max(pf_all or [0])
    print("     " + CLS.name + "s, 2x4 s each: lockstat %d waits %.1f ms max %.3f ms; perf pairing %d waits "
          "%.1f ms max %.3f ms (totals %.2fx, from different windows); lockstat data quality %s"
          % (ls_n, ls_tot / 1e6, ls_max / 1e6, pf_n, pf_tot / 1e6, pf_max / 1e6,
             ls_tot / pf_tot if pf_tot else 0, res["ls2"][4]))
    check(pf_n > 2 * MIN_LS and ls_n > 2 * MIN_LS, "kernel pairing: the workload contends kernel %ss (%d / %d "
          "waits, > %d each)" % (CLS.name, ls_n, pf_n, 2 * MIN_LS))
    # The tracers take turns (lockstat 4 s, perf 4 s, twice): attached at once, each
    # one's waits contain the other's probe, and not alike. Taking turns, the load
    # moves between windows, and lockstat's own probe effect shows: its contention_end
    # probe runs inside the critical section just acquired, so the lock's other waiters
    # wait that much longer while lockstat runs. Walking the kernel stack there on every
    # wait (~5 us of the probe's ~7 us) made a page-table lock's p50 2.1-2.4x and p90
    # 2.4-3.0x perf's; with the walk sampled (at most every 10 ms per lock and process)
    # p50 0.96-1.57x and p90 0.99-2.24x over 10 runs (rq_lock's p50 of ~1.8 us keeps
    # the probes' fixed ~0.5 us), but a window with heavy hypervisor steal read 3.46x
    # once: the probe effect is measured by bench/lockstat_kernel.py (ratios over
    # several turns), not here. What this check guards against is mispairing (issue 8:
    # 188 ms "spinlock waits", totals 0.3x-25x): for every spinlock compared, p90 within
    # 4x (+1 us) of perf's p90, p50 within 4x (+0.3 us) of perf's p20..p80, the mean
    # wait (the total) at most 4x (+1 us) perf's, stretched by the steal of lockstat's
    # window, and no spin wait over 20 ms below.
    # Which locks are compared: the wait rate moves between windows by far more than
    # the probe effect. A clean-clone CI run had counts 2.1-2.6x apart in every lock, and
    # one with 5.7 s of steal had perf pair 1,486 waits to lockstat's 10,125, so no lock
    # reached 1000 on both sides. Over 24 turns here (other tests running alongside,
    # steal <= 0.4 s per window, perf lost no events) the window totals were 0.09x-12x
    # apart while each lock's share of its window's waits stayed within 0.42x-2.6x; in
    # one test run perf paired 1,035 waits to lockstat's 47,022 with 0.2 s of steal, its
    # rq_lock waits almost all in the slow mode (below). So: >= 1000 waits on lockstat's
    # side (the side under test), >= 200 on perf's (enough for its p20..p90), the lock's
    # rate per second of non-steal time within 8x and its share of its window's spin
    # waits within 4x (over the 24 turns: 21 compared >= 1 lock, 64 comparisons, none
    # failing; in the other 3 lockstat itself had < 1000 waits on every lock). Each
    # window's counts, steal and perf's lost events are printed.
    # Why the median is held to perf's p20..p80: rq_lock's waits are bimodal (~1 us and
    # ~20 us) and the mix moves between windows, so its median jumps between the modes
    # (0.07x-13x perf's in 11 of 66 comparisons over those 24 turns, p90 0.67x-1.87x);
    # against p20..p80 the worst was 2.75x. A mispairing that moves most waits (a sleep
    # merged into a spin wait: ms for us) still lands far outside. The mean (0.30x-2.74x
    # there) catches what the quantiles cannot: a few percent of waits mispaired to ms
    # (under the 20 ms max) multiply a lock's total. Steal: a fraction f of the CPUs'
    # time stolen stretches a spinner's wait by 1/(1-f) on average, and a stolen lock
    # holder makes one long wait (a CI run: 58.8 ms), so each side's mean leaves out its
    # longest wait. (An additive ncpu x steal allowance was vacuous: with 3.7 s stolen in
    # a lockstat window a simulated 100x total passed; the real means were 1.5x-1.7x.)
    compared = 0
    skipped = []
    ncpu = os.cpu_count()
    stolen = {k: min(0.9, steal[k] / (ncpu * wall[k])) for k in steal}  # fraction of each window
    for n in ("1", "2"):
        rows, skip = compare_turn(res["ls" + n][3], res["perf" + n], "window " + n, min_waits=MIN_LS, max_count_ratio=8,
                                  min_perf_waits=200, rate_scale=(1 - stolen["perf" + n]) / (1 - stolen["ls" + n]),
                                  max_share_ratio=4)
        skipped += skip
        for name, got_n, perf_n, q in rows:
            compared += 1
            what = "%d vs %d waits, rate %.2fx, share %.2fx" % (got_n, perf_n, q["rate"], q["share"])
            # A sleeping (rwsem) wait lasts until the woken waiter gets a CPU, so its
            # length is the other load's, which a window apart does not share: with a
            # build sharing the 2 CPUs, perf's windows read p90 0.04-3.4 ms and
            # lockstat's 0.04-3.0 ms, 0.02x-79x apart both ways, while the same-window
            # bpftrace comparison above agreed (count 1.001x, total within 30%, max
            # within 2 us). For rwsems the alternating windows are shown, not checked;
            # mispairing is the same-window comparison's to catch.
            chk = check if CLS is SPIN else (lambda ok, msg: print("     info " + msg))
            got, want = q["p90"]
            chk(want / 4 - 1000 <= got <= 4 * want + 1000,
                "kernel pairing: %s p90 %s wait %d ns vs perf's pairing %d ns (%.2fx; %s)"
                % (name, CLS.name, got, want, got / max(want, 1), what))
            got, want = q["p50"]
            lo, hi = q["p20_p80"]
            chk(lo / 4 - 300 <= got <= 4 * hi + 300,
                "kernel pairing: %s p50 %s wait %d ns within 4x of perf's p20..p80 %d..%d ns (p50 %d ns, "
                "%.2fx; %s)" % (name, CLS.name, got, lo, hi, want, got / max(want, 1), what))
            got, want = q["mean"]
            stretch = 1 / (1 - stolen["ls" + n])
            chk(got <= (4 * want + 1000) * stretch,
                "kernel pairing: %s mean %s wait %.0f ns <= (4x perf's %.0f ns + 1 us) x %.2f for steal "
                "(%.2fx; %s)" % (name, CLS.name, got, want, stretch, got / max(want, 1), what))
    turns = ["window %s: lockstat %d, perf %d waits (%.2fx), steal %.0f / %.0f ms, perf lost %d events"
             % (n, res["ls" + n][0], sum(len(ws) for ws in res["perf" + n].values()),
                sum(len(ws) for ws in res["perf" + n].values()) / max(res["ls" + n][0], 1),
                steal["ls" + n] / 1e6, steal["perf" + n] / 1e6, res["perf" + n].lost) for n in ("1", "2")]
    print("     " + "; ".join(turns))
    check(compared >= 1, "kernel pairing: %d %ss with >= %d waits in lockstat's window and >= 200 in "
          "perf's, rates within 8x and shares within 4x, compared (%s; not compared: %s)" % (compared, CLS.name, MIN_LS, "; ".join(turns), skipped))
    if CLS is SPIN:
        # a spinlock is waited for with preemption off: tens of ms would already be a
        # stalled vCPU (the hypervisor's steal: a clean-clone CI run measured one wait of
        # 58.8 ms, perf's max 7.7 ms); hundreds of ms with no such steal are a mispaired
        # begin and end
        check(ls_max < 20e6 + steal_max,
              "kernel pairing: no spinlock wait over 20 ms + the window's hypervisor steal "
              "(max %.3f ms; steal %.0f ms; perf's max %.3f ms)" % (ls_max / 1e6, steal_max / 1e6, pf_max / 1e6))
        rq = [x for x in res["ls1"][3] + res["ls2"][3] if x.get("symbol") == "rq_lock"]
        check(rq and len({x["addr"] for x in rq}) <= ncpu,
              "kernel: run-queue locks named rq_lock, at most one per CPU (%s)" % sorted({x["addr"] for x in rq}))
    else:
        # sleeping waits may be long; what must hold is the name of the one the load contends
        top = max(res["ls1"][3] + res["ls2"][3], key=lambda x: x["wait_count"], default={})
        check(top.get("symbol") == "mmap_lock",
              "kernel: the most-waited rwsem under mmap_storm is named mmap_lock (%s %s)"
              % (top.get("symbol"), top.get("addr")))

# text mode: a table, a reading and the data-quality line
go = os.path.join(TMP, "go")
if os.path.exists(go):
    os.unlink(go)
w = start([workload("mutex_contention"), "--go-file", go] + MC_ARGS[:-1] + ["1000"])
pid = int(w.stderr.readline().split()[1])
l = start([LOCKSTAT, "-p", str(pid), "-U", "-H"])
wait_banner(l)
open(go, "w").close()
w.communicate(timeout=30)
out, err, rc = stop(l)
check(rc == 0 and "KIND" in out and "cache_lock" in out and "convoy" in out and "data quality:" in out
      and "nsecs" in out, "text report: table, reading, histogram and data quality (rc %d)" % rc)

# interval mode with a minimum wait: two 1-second reports (the second final), and
# only waits of 1.5 ms or more recorded; the shorter ones are counted as such. The
# threshold sits near the workload's median wait (~1.35 ms: 4 threads queue behind
# ~0.56 ms sleeps), so both sides get many waits; with 1 ms a run could have none below.
gt, recs, err, rc = traced_run("mutex_contention", MC_ARGS[:-1] + ["3000"], ["-U", "-m", "1500us", "-L", "cache_lock", "-i", "1", "-c", "2"])
locks = [x for x in recs if x.get("type") == "lockstat.lock"]
check(rc == 0 and [x["final"] for x in locks] == [False, True] and all(x["symbol"] == "cache_lock" for x in locks),
      "interval mode: two cache_lock records, the last final (%s)" % [(x["final"], x["symbol"]) for x in locks])
check(all(within(x["interval_ns"], 1e9, rel=0.2) for x in locks), "interval mode: ~1 s intervals")
check(all(x["wait_p50_ns"] >= 1500000 * 15 // 16 and x["wait_total_ns"] >= 1500000 * x["calls"] for x in locks),
      "-m 1500us: every recorded wait >= 1.5 ms")
# every record carries the counter; the sum shows the shorter waits (the final
# interval is short -- the workload's exit ends it -- and may legitimately have none)
check(all("below_min" in x["data_quality"] for x in locks)
      and sum(x["data_quality"].get("below_min", 0) for x in locks) > 0,
      "-m 1500us: shorter waits counted as below_min (%s)" % [x["data_quality"] for x in locks])
summ = [x for x in recs if x.get("type") == "lockstat.summary"]
check([x["final"] for x in summ] == [False, True], "interval mode: each report ends with a summary, the last final")
check(all(x["wait_total_ns"] <= 1.2e9 * gt["threads"] for x in locks), "interval mode: each report covers its interval only")


# interval reports drain the maps: summed over all reports, nothing is lost or counted
# twice, so the total wait matches the workload's own, as in a single report (10%)
def interval_sum_run():
    gt, recs, err, rc = traced_run("mutex_contention", MC_ARGS[:-1] + ["3000"], ["-U", "-L", "cache_lock", "-i", "300ms"])
    locks = [x for x in recs if x.get("type") == "lockstat.lock"]
    tot = sum(x["wait_total_ns"] for x in locks)
    d = {"gt": gt, "locks": locks, "rc": rc, "tot": tot,
         "why": "%d reports, total %d vs %d" % (len(locks), tot, gt["total_wait_ns"])}
    return rc == 0 and len(locks) >= 5 and within(tot, gt["total_wait_ns"], rel=0.10), d


d = interval_sum_run()[1]
check(d["rc"] == 0 and len(d["locks"]) >= 5 and within(d["tot"], d["gt"]["total_wait_ns"], rel=0.10),
      "interval mode: %s, within 10%% over the reports" % d["why"])

# --- 4b. map sizes (issue 9 item 8): 2000 threads on one mutex -------------------------


def crowd_run(extra):
    # the 3 s of contention start once lockstat is attached: under load its start
    # (2000 threads' tables) took longer than the window, which then held no waits and
    # proved nothing (a loaded fresh run: no map_full with 1024 entries)
    go = os.path.join(TMP, "crowd-go")
    if os.path.exists(go):
        os.unlink(go)
    w = start([workload("mutex_crowd"), "--threads", "2000", "--duration-ms", "3000", "--hold-us", "20",
               "--go-file", go])
    pid = int(w.stderr.readline().split()[1])
    ls = start([LOCKSTAT, "-p", str(pid), "-U", "-j", "-n", "1", "-s", "0"] + extra)
    wait_attached(ls, timeout=60)
    open(go, "w").close()
    wout, _ = w.communicate(timeout=90)
    out, err, rc = stop(ls, timeout=60)
    recs = ndjson(out, "lockstat")
    summ = [x for x in recs if x.get("type") == "lockstat.summary"]
    top = [x for x in recs if x.get("type") == "lockstat.lock"]
    r = subprocess.CompletedProcess(ls.args, rc, out, err)
    return r, (summ[-1]["data_quality"] if summ else {}), json.loads(wout), (top[0]["thread_count"] if top else 0)


r, dq, gt, nthreads = crowd_run([])
check(r.returncode == 0 and dq.get("map_full") == 0 and nthreads > 1024,
      "2000 threads on one mutex: maps sized from the target lose nothing (%s, %d acquisitions, %d threads "
      "waited: more than 1024)" % (dq, gt["acquisitions"], nthreads))
r, dq, gt, _ = crowd_run(["--map-entries", "1024"])
check(dq.get("map_full", 0) > 0 and "--map-entries" in r.stderr and "WARNING" in r.stderr,
      "forced small maps: loss counted (%s) and a warning names --map-entries (%r)"
      % (dq.get("map_full"), [l for l in r.stderr.splitlines() if "WARNING" in l][:1]))

# --- 5. bad input ----------------------------------------------------------------------
usage_error([LOCKSTAT, "--fields", ""])
usage_error([LOCKSTAT, "--map-entries", "12"])
usage_error([LOCKSTAT, "-K", "-U"])
usage_error([LOCKSTAT, "-S", "bogus"])
usage_error([LOCKSTAT, "1", "2"])      # no positional schedule: -i 1 -c 2
usage_error([LOCKSTAT, "-k", "total"])  # old flags (-k sort, -E entries) are gone
usage_error([LOCKSTAT, "-E", "5"])
usage_error([LOCKSTAT, "-L", "0xzz"])
usage_error([LOCKSTAT, "-p", "12x"])
usage_error([LOCKSTAT, "-m", "5 parsecs"])

sleeper = subprocess.Popen(["sleep", "30"])
r = run([LOCKSTAT, "-p", str(sleeper.pid), "-L", "no_such_lock_xyz", "-d", "1"])
check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "unknown lock symbol 'no_such_lock_xyz'" in r.stderr,
      "unknown lock symbol -> exit 1, one line (%r)" % r.stderr.strip())
r = run([LOCKSTAT, "-L", "no_such_lock_xyz", "-d", "1"])
check(r.returncode == 1 and "need -p PID" in r.stderr and len(r.stderr.strip().splitlines()) == 1,
      "user symbol without -p -> exit 1 with a hint (%r)" % r.stderr.strip())
sleeper.kill()
sleeper.wait()

r = run([LOCKSTAT, "--uprobes", "-p", "2", "-d", "1"])  # kthreadd: no libc mapped
check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and ("libc" in r.stderr or "kernel thread" in r.stderr),
      "--uprobes on a PID without libc -> exit 1, one line (%r)" % r.stderr.strip())

# a PID that does not exist is bad input: exit 2, one line naming it
usage_error([LOCKSTAT, "-p", "4000000", "-d", "1"])
r = run([LOCKSTAT, "-p", "4000000", "-d", "1"])
check(r.returncode == 2 and "no process with PID 4000000" in r.stderr, "missing PID -> exit 2 naming it (%r)" % r.stderr.strip())

cc = shutil.which("cc") or shutil.which("gcc")
if cc:
    src = os.path.join(TMP, "st.c")
    exe = os.path.join(TMP, "static_stripped")
    with open(src, "w") as f:
        f.write("#include <unistd.h>\nint main(void){sleep(30);return 0;}\n")
    if subprocess.run([cc, "-static", "-s", "-o", exe, src], capture_output=True).returncode == 0:
        p = subprocess.Popen([exe])
        time.sleep(0.2)
        r = run([LOCKSTAT, "--uprobes", "-p", str(p.pid), "-d", "1"])
        check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1,
              "--uprobes on a stripped static binary -> exit 1, one line (%r)" % r.stderr.strip())
        # futex mode needs no library: it works on the same process
        r2 = run([LOCKSTAT, "-U", "-p", str(p.pid), "-d", "0.5"])
        check(r2.returncode == 0 and "data quality:" in r2.stdout, "futex mode works on a static binary")
        p.kill()
        p.wait()
    else:
        print("     (no static libc: static-binary check skipped)")

not_root_error([LOCKSTAT, "-d", "1"])
check(leftover_probe_events() == [], "no probe events left behind")
schema_verdict("lockstat")
shutil.rmtree(TMP, ignore_errors=True)
finish()
