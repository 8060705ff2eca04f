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
2. per-thread view (-t): each worker thread's total within 10% (or 3 ms) of its own.
3. --uprobes: the pthread_mutex_lock calls counted equal the workload's acquisitions
   and the time within 10%; the call site is update_cache.
4. kernel locks: mmap_storm's threads contend on their mmap_lock; lockstat -K names it
   mmap_lock (an rwsem) with a kernel stack through the mmap/munmap/fault paths.
5. bad input: usage errors (exit 2), unknown lock symbol, a PID without libc for
   --uprobes, a stripped static binary, a PID that exits while traced (exit 0 with a
   note), not root; nothing left attached.
"""
import os
import shutil
import subprocess
import tempfile
import time

from harness import *

require_root()
LOCKSTAT = tool("lockstat")
TMP = tempfile.mkdtemp(prefix="lockstat-test-")


def traced_run(wl, wargs, largs, timeout=60):
    """Starts the workload (waiting on a go file), attaches lockstat -p PID, then lets
    the workload run; lockstat ends when the workload exits. Returns
    (ground truth, lockstat records, lockstat stderr, lockstat rc)."""
    go = os.path.join(TMP, "go")
    if os.path.exists(go):
        os.unlink(go)
    w = start([workload(wl), "--go-file", go] + wargs)
    pid = int(w.stderr.readline().split()[1])
    l = start([LOCKSTAT, "-p", str(pid), "-j", "-E", "0"] + largs)
    err_head = []
    deadline = time.time() + 30
    while time.time() < deadline:
        line = l.stderr.readline()
        if not line or "Tracing" in line:
            break
        err_head.append(line)
    open(go, "w").close()
    wout, _ = w.communicate(timeout=timeout)
    try:
        lout, lerr = l.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        l.kill()
        lout, lerr = l.communicate()
    return json.loads(wout), ndjson(lout), "".join(err_head) + lerr, l.returncode


def lock_record(recs, addr):
    for r in recs:
        if r.get("type") == "lock" and r["addr"] == addr:
            return r
    return None


def retry(fn, what, attempts=3):
    """Other engineers' BPF tests share the CPUs: a noisy run is retried; a real bug
    fails every attempt."""
    for i in range(attempts):
        ok, detail = fn()
        if ok:
            return detail
        print("     attempt %d of %s off: %s" % (i + 1, what, detail.get("why", "")))
    return detail


MC_ARGS = ["--threads", "4", "--hold-us", "500", "--gap-us", "200", "--hold-mode", "sleep",
           "--duration-ms", "2000"]

# --- 1. futex mode ----------------------------------------------------------------


def futex_run():
    gt, recs, err, rc = traced_run("mutex_contention", MC_ARGS, ["-U"])
    r = lock_record(recs, gt["mutex_addr_int"])
    d = {"gt": gt, "rec": r, "recs": recs, "err": err, "rc": rc}
    if r is None:
        d["why"] = "no record for %s: %s" % (gt["mutex_addr"], err.strip())
        return False, d
    ok = within(r["total_wait_ns"], gt["total_wait_ns"], rel=0.10)
    d["why"] = "total %d vs %d" % (r["total_wait_ns"], gt["total_wait_ns"])
    return ok, d


d = retry(futex_run, "futex mode")
gt, r = d["gt"], d["rec"]
check(d["rc"] == 0 and "PID %d exited" % gt["pid"] in d["err"],
      "lockstat exits 0 with a note when the traced PID exits (rc %s)" % d["rc"])
check(r is not None, "futex mode: a record for the mutex at %s" % gt["mutex_addr"])
if r:
    print("     workload: %d acquisitions, %d slow, total wait %.1f ms; lockstat: %d waits, %.1f ms"
          % (gt["acquisitions"], gt["slow_acquisitions"], gt["total_wait_ns"] / 1e6,
             r["contended"], r["total_wait_ns"] / 1e6))
    check(within(r["total_wait_ns"], gt["total_wait_ns"], rel=0.10),
          "futex mode: total wait %.1f ms within 10%% of the workload's own %.1f ms"
          % (r["total_wait_ns"] / 1e6, gt["total_wait_ns"] / 1e6))
    check(r["symbol"] == "cache_lock" and r["addr_hex"] == gt["mutex_addr"],
          "futex mode: mutex identified as %s at %s (got %r at %s)"
          % (gt["symbol"], gt["mutex_addr"], r["symbol"], r["addr_hex"]))
    check(r["kind"] == "futex-mutex" and r["layer"] == "user" and r["pid"] == gt["pid"],
          "futex mode: kind futex-mutex, layer user, pid %d (got %s/%s/%s)"
          % (gt["pid"], r["kind"], r["layer"], r["pid"]))
    # every slow acquisition blocked at least once; barging can add a few extra waits
    check(gt["slow_acquisitions"] * 0.9 <= r["contended"] <= gt["acquisitions"] * 1.5,
          "futex mode: %d waits for %d slow acquisitions" % (r["contended"], gt["slow_acquisitions"]))
    check(r["waiters"] == gt["threads"], "futex mode: %d waiting threads (got %d)" % (gt["threads"], r["waiters"]))
    check(r["max_wait_ns"] <= gt["max_wait_ns"] * 1.05 + 100000,
          "futex mode: max wait %.2f ms <= workload's max %.2f ms"
          % (r["max_wait_ns"] / 1e6, gt["max_wait_ns"] / 1e6))
    check(0 < r["p50_ns"] <= r["p95_ns"] <= r["p99_ns"] <= r["max_wait_ns"],
          "futex mode: 0 < p50 <= p95 <= p99 <= max (%d %d %d %d)"
          % (r["p50_ns"], r["p95_ns"], r["p99_ns"], r["max_wait_ns"]))
    check(r["avg_wait_ns"] == r["total_wait_ns"] // max(r["calls"], 1), "futex mode: avg = total / waits")
    # libc has no frame pointers: the site comes from the user-stack scan at the wait
    check(r["callsites"] and "update_cache" in r["callsites"][0]["site"],
          "futex mode: call site is update_cache, the function that called pthread_mutex_lock (%s)"
          % [c["site"] for c in r["callsites"]])
    check(r["callsites"] and r["callsites"][0]["stack"][1:3] and "update_cache" in r["callsites"][0]["stack"][1]
          and "worker" in r["callsites"][0]["stack"][2],
          "futex mode: stack lock wait <- update_cache <- worker (%s)" % (r["callsites"] and r["callsites"][0]["stack"]))
    check("data_quality" in r and r["data_quality"]["map_full"] == 0 and r["data_quality"]["lost_stacks"] == 0,
          "futex mode: data quality present and clean (%s)" % r.get("data_quality"))
    check(r["reading"].startswith("convoy"), "futex mode: 4 waiters read as a convoy (%s)" % r["reading"])

# --- 2. per-thread view --------------------------------------------------------------


def threads_run():
    gt, recs, err, rc = traced_run("mutex_contention", MC_ARGS, ["-U", "-t", "-L", "cache_lock"])
    rows = {x["tid"]: x for x in recs if x.get("type") == "thread"}
    bad = []
    for t in gt["per_thread"]:
        got = rows.get(t["tid"], {}).get("total_wait_ns", 0)
        if not within(got, t["wait_ns"], rel=0.10, abs_=3000000):
            bad.append((t["tid"], got, t["wait_ns"]))
    return not bad, {"gt": gt, "rows": rows, "bad": bad, "why": "threads off: %s" % bad, "err": err}


d = retry(threads_run, "per-thread view")
check(len(d["rows"]) == d["gt"]["threads"] and not d["bad"],
      "-t: one row per worker, each thread's wait within 10%% (or 3 ms) of its own (%s)" % d["bad"])
check(all(x["top_lock"] == "cache_lock" for x in d["rows"].values()), "-t -L cache_lock: top lock is cache_lock")

# --- 3. --uprobes --------------------------------------------------------------------


def uprobe_run():
    gt, recs, err, rc = traced_run("mutex_contention", MC_ARGS, ["--uprobes", "-v"])
    r = lock_record(recs, gt["mutex_addr_int"])
    d = {"gt": gt, "rec": r, "err": err, "rc": rc}
    if r is None:
        d["why"] = "no record: %s" % err.strip()
        return False, d
    ok = within(r["total_wait_ns"], gt["total_wait_ns"], rel=0.10)
    d["why"] = "total %d vs %d" % (r["total_wait_ns"], gt["total_wait_ns"])
    return ok, d


d = retry(uprobe_run, "--uprobes")
gt, r = d["gt"], d["rec"]
check(r is not None, "--uprobes: a record for the mutex (%s)" % d["err"].strip()[:300])
if r:
    check(r["kind"] == "pthread" and r["symbol"] == "cache_lock", "--uprobes: kind pthread, symbol cache_lock")
    check(abs(r["calls"] - gt["acquisitions"]) <= 2,
          "--uprobes: %d lock calls timed vs %d acquisitions" % (r["calls"], gt["acquisitions"]))
    check(within(r["total_wait_ns"], gt["total_wait_ns"], rel=0.10),
          "--uprobes: time in pthread_mutex_lock %.1f ms within 10%% of the workload's %.1f ms"
          % (r["total_wait_ns"] / 1e6, gt["total_wait_ns"] / 1e6))
    check(gt["slow_acquisitions"] * 0.9 <= r["contended"] <= r["calls"],
          "--uprobes: %d calls blocked (workload: %d slow)" % (r["contended"], gt["slow_acquisitions"]))
    check(r["callsites"] and "update_cache" in r["callsites"][0]["site"],
          "--uprobes: exact call site update_cache (%s)" % [c["site"] for c in r["callsites"]][:2])
    check("pthread_mutex_lock" in d["err"], "-v says where the uprobes are")

# --- 4. kernel locks -------------------------------------------------------------------


def kernel_run():
    gt, recs, err, rc = traced_run("mmap_storm", ["--threads", "4", "--duration-ms", "2000"], ["-K"])
    mm = [x for x in recs if x.get("type") == "lock" and x["symbol"] == "mmap_lock"]
    d = {"gt": gt, "mm": mm, "recs": recs, "err": err}
    d["why"] = "no mmap_lock among %s" % [(x.get("kind"), x.get("symbol")) for x in recs][:6]
    return bool(mm) and mm[0]["contended"] > 0, d


d = retry(kernel_run, "kernel locks")
check(bool(d["mm"]), "kernel: mmap_storm's mmap_lock reported (%d iterations)" % d["gt"]["iterations"])
if d["mm"]:
    m = d["mm"][0]
    stacks = [c["stack"] for c in m["callsites"]]
    check(m["layer"] == "kernel" and m["kind"].startswith("rwsem"), "kernel: mmap_lock is an rwsem (%s)" % m["kind"])
    check(m["pid"] == d["gt"]["pid"], "kernel: waiters are mmap_storm's threads")
    check(any(len(s) >= 3 for s in stacks), "kernel: call sites carry kernel stacks")
    paths = " ".join(" ".join(s) for s in stacks)
    check(any(k in paths for k in ("munmap", "mmap", "fault")),
          "kernel: stacks go through mmap/munmap/page fault (%s)" % [c["site"] for c in m["callsites"]])
    check(m["total_wait_ns"] > 0 and m["p99_ns"] <= m["max_wait_ns"], "kernel: wait numbers consistent")

# text mode: a table, a reading and the data-quality line
go = os.path.join(TMP, "go")
if os.path.exists(go):
    os.unlink(go)
w = start([workload("mutex_contention"), "--go-file", go] + MC_ARGS[:-1] + ["1000"])
pid = int(w.stderr.readline().split()[1])
l = start([LOCKSTAT, "-p", str(pid), "-U", "-H"])
wait_attached(l, "Tracing")
open(go, "w").close()
w.communicate(timeout=30)
out, err, rc = stop(l)
check(rc == 0 and "KIND" in out and "cache_lock" in out and "convoy" in out and "data quality:" in out
      and "nsecs" in out, "text report: table, reading, histogram and data quality (rc %d)" % rc)

# interval mode with a minimum wait: two 1-second reports (the second final), and
# only waits of 1.5 ms or more recorded; the shorter ones are counted as such. The
# threshold sits near the workload's median wait (~1.35 ms: 4 threads queue behind
# ~0.56 ms sleeps), so both sides get many waits; with 1 ms a run could have none below.
gt, recs, err, rc = traced_run("mutex_contention", MC_ARGS[:-1] + ["3000"], ["-U", "-m", "1500us", "-L", "cache_lock", "1", "2"])
locks = [x for x in recs if x.get("type") == "lock"]
check(rc == 0 and [x["final"] for x in locks] == [False, True] and all(x["symbol"] == "cache_lock" for x in locks),
      "interval mode: two cache_lock records, the last final (%s)" % [(x["final"], x["symbol"]) for x in locks])
check(all(within(x["interval_ns"], 1e9, rel=0.2) for x in locks), "interval mode: ~1 s intervals")
check(all(x["p50_ns"] >= 1500000 * 15 // 16 and x["total_wait_ns"] >= 1500000 * x["calls"] for x in locks),
      "-m 1500us: every recorded wait >= 1.5 ms")
# every record carries the counter; the sum shows the shorter waits (the final
# interval is short -- the workload's exit ends it -- and may legitimately have none)
check(all("below_min_wait" in x["data_quality"] for x in locks)
      and sum(x["data_quality"].get("below_min_wait", 0) for x in locks) > 0,
      "-m 1500us: shorter waits counted as below_min_wait (%s)" % [x["data_quality"] for x in locks])
check(all(x["total_wait_ns"] <= 1.2e9 * gt["threads"] for x in locks), "interval mode: each report covers its interval only")


# interval reports drain the maps: summed over all reports, nothing is lost or counted
# twice, so the total wait matches the workload's own, as in a single report (10%)
def interval_sum_run():
    gt, recs, err, rc = traced_run("mutex_contention", MC_ARGS[:-1] + ["3000"], ["-U", "-L", "cache_lock", "300ms"])
    locks = [x for x in recs if x.get("type") == "lock"]
    tot = sum(x["total_wait_ns"] for x in locks)
    d = {"gt": gt, "locks": locks, "rc": rc, "tot": tot,
         "why": "%d reports, total %d vs %d" % (len(locks), tot, gt["total_wait_ns"])}
    return rc == 0 and len(locks) >= 5 and within(tot, gt["total_wait_ns"], rel=0.10), d


d = retry(interval_sum_run, "interval sum")
check(d["rc"] == 0 and len(d["locks"]) >= 5 and within(d["tot"], d["gt"]["total_wait_ns"], rel=0.10),
      "interval mode: %s, within 10%% over the reports" % d["why"])

# --- 5. bad input ----------------------------------------------------------------------
usage_error([LOCKSTAT, "-K", "-U"])
usage_error([LOCKSTAT, "-k", "bogus"])
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
check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "libc" in r.stderr,
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
shutil.rmtree(TMP, ignore_errors=True)
finish()
