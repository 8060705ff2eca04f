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
Every NDJSON record is validated against docs/schema/pmheld.schema.json, and every
-j run starts with a pmheld.start record (the probes are attached; no fixed sleep).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from harness import (check, finish, require_built, schema_verdict, leftover_probe_events, ndjson, require_root, run, tool,  # noqa: E402
                     usage_error, within, workload, not_root_error, start, stop, wait_attached)



PMHELD = tool("pmheld")

# pmheld times a hold from its lock_return uretprobe to its unlock_entry (or
# cond_entry) uprobe; the workloads time it from after the lock returned to just before
# the unlock or wait call (condvar_hold's stamp comes after its sem_post: a clean-clone
# CI run had the woken signaler preempt the waiter inside that sem_post for ~1.9 ms,
# 53 us excess per hold, while the stamp was still taken before it). The tool's window
# therefore also contains, per hold, the return from the uretprobe trap, the unlock call
# and the unlock trap. Measured here (kernel 6.18, load average 8 from other engineers'
# BPF tests): condvar_hold --hold-us 0 gives 3.4 us excess per hold (p50 4.3 us, max
# 24 us); with 200 us holds the p50 exceeds the known hold by 1.4 us (mutex_contention)
# / 4.5 us (condvar_hold) and the total exceeds the measured one by 8.1 / 10.7 us per
# hold; a CI failure was 16.5 us per hold (823 us over 50 holds). Allow 10% + 25 us per
# hold above; the tool's window contains the workload's, so below it is 10% only.
PROBE_LATENCY_NS = 25000


def total_ok(tool_total, measured, holds):
    """Tool total within 10% below measured, and at most 10% + holds x PROBE_LATENCY_NS above."""
    return measured * 0.90 <= tool_total <= measured * 1.10 + holds * PROBE_LATENCY_NS


def traced_run(wl_args, pm_args):
    """Starts the workload paused on a go-file, attaches pmheld -p PID -j, releases
    the workload and lets pmheld stop when it exits. Returns (truth, records, pm
    stderr, pm rc). One run: the checks compare with what the workload measured of
    itself in the same run, so a busy machine moves both sides alike."""
    tmp = tempfile.mkdtemp(prefix="pmheld-test-")
    go = os.path.join(tmp, "go")
    wl = subprocess.Popen(wl_args + ["--go-file", go], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    line = wl.stderr.readline()
    pid = int(line.split()[1])
    pm = subprocess.Popen([PMHELD, "-p", str(pid), "-j"] + pm_args, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    first = pm.stdout.readline()  # pmheld.start: the probes are attached
    open(go, "w").close()
    wout, _ = wl.communicate(timeout=120)
    pout, perr = pm.communicate(timeout=60)
    shutil.rmtree(tmp, ignore_errors=True)
    truth = ndjson(wout)[-1]
    recs = ndjson(first + pout, "pmheld")
    check(bool(recs) and recs[0]["type"] == "pmheld.start" and recs[0]["pid"] == [pid],
          "-j: the first record is pmheld.start for PID %d (%s)" % (pid, first.strip()[:100]))
    return truth, recs, perr, pm.returncode


def lock_record(recs, addr):
    """The record of the mutex at `addr` (the workload's "0x..." string, as JSON's addr)."""
    for r in recs:
        if r.get("type") == "pmheld.lock" and r.get("addr") == addr:
            return r
    return None


def test_contention():
    hold_ns = 200000
    truth, recs, err, rc = traced_run(
        [workload("mutex_contention"), "--threads", "4", "--hold-us", "200", "--gap-us", "50",
         "--duration-ms", "2000"], [])
    check(rc == 0, "pmheld exits 0 when the traced process exits (rc %d, %r)" % (rc, err.strip()))
    notes = [l for l in err.splitlines() if l.strip() and not l.startswith("Tracing ")]  # banner: attached
    check("exited" in err and len(notes) == 1,
          "one clear stderr line when the target exits: %r" % err.strip())
    r = lock_record(recs, truth["mutex_addr"])
    check(r is not None, "a record for cache_lock at %s" % truth["mutex_addr"])
    if r is None:
        return
    for k in ("type", "pid", "addr", "lock", "symbol", "hold_count", "hold_total_ns", "hold_max_ns", "hold_p50_ns",
              "hold_p90_ns", "hold_p99_ns", "hold_hist", "stacks", "data_quality"):
        check(k in r, "lock record has %s" % k)
    check(r["symbol"] == "cache_lock", "lock named by its data symbol (%r)" % r["symbol"])
    check(r["pid"] == truth["pid"], "pid %d == %d" % (r["pid"], truth["pid"]))
    check(abs(r["hold_count"] - truth["acquisitions"]) <= 2,
          "holds %d == workload acquisitions %d (+-2)" % (r["hold_count"], truth["acquisitions"]))
    check(within(r["hold_p50_ns"], truth["hold_p50_ns"], rel=0.10),
          "p50 hold %d ns within 10%% of the workload's own median hold %d ns (target %d)" % (
              r["hold_p50_ns"], truth["hold_p50_ns"], hold_ns))
    excess = (r["hold_total_ns"] - truth["hold_ns"]) / max(r["hold_count"], 1)
    print("note: contention: p50 excess over the known hold %d ns, total excess per hold %d ns"
          % (r["hold_p50_ns"] - hold_ns, excess))
    check(total_ok(r["hold_total_ns"], truth["hold_ns"], r["hold_count"]),
          "total hold %d ns within 10%% (+%d ns/hold probe latency) of the workload's measured %d ns"
          % (r["hold_total_ns"], PROBE_LATENCY_NS, truth["hold_ns"]))
    check(r["hold_p99_ns"] >= r["hold_p90_ns"] >= r["hold_p50_ns"] > 0, "p99 >= p90 >= p50 > 0")
    bucket_sum = sum(b["count"] for b in r["hold_hist"]["buckets"])
    check(bucket_sum == r["hold_count"], "histogram buckets sum to count (%d)" % bucket_sum)
    frames = [f for s in r["stacks"] for f in s["user_stack"]]
    check(any("update_cache" in f for f in frames), "acquiring stack names update_cache")
    dq = r["data_quality"]
    check(dq["map_full"] == 0 and dq["lost_stacks"] == 0, "no map-full or lost stacks: %s" % dq)
    summ = [x for x in recs if x.get("type") == "pmheld.summary"]
    check(len(summ) == 1 and summ[0]["final"], "one final summary record")
    check(summ and summ[0]["hold_count"] >= r["hold_count"], "the summary's holds include the lock's")


def test_condvar():
    hold_ns, wait_ns = 200000, 50000000
    truth, recs, err, rc = traced_run(
        [workload("condvar_hold"), "--cycles", "10", "--hold-us", "200", "--wait-ms", "50"], [])
    check(rc == 0, "pmheld exits 0 (rc %d, %r)" % (rc, err.strip()))
    r = lock_record(recs, truth["mutex_addr"])
    check(r is not None, "a record for cv_lock")
    if r is None:
        return
    check(r["symbol"] == "cv_lock", "named cv_lock (%r)" % r["symbol"])
    expected_holds = truth["waiter_holds"] + truth["signaler_holds"]
    check(r["hold_count"] == expected_holds,
          "holds %d == %d (4 per round around the waits + 1 per signal)" % (r["hold_count"], expected_holds))
    # a preempted holder still holds (the workload measured 5.3 ms once on a busy
    # machine), so the lower bound is the workload's own longest hold (the tool's window
    # contains the workload's). Above it, one hold can take any preemption between the
    # workload's stamp and the probe (the CI run that had the signaler preempted ~1.9 ms
    # inside sem_post failed a "+10% + 25 us" bound here); the totals below bound the
    # excess in aggregate. What the maximum must show is that no cond wait was counted
    # as holding: it stays far below the 50 ms wait.
    measured_max = max(truth["waiter_max_hold_ns"], truth["signaler_max_hold_ns"])
    check(measured_max < wait_ns / 4 and measured_max * 0.90 <= r["hold_max_ns"] < wait_ns / 4,
          "max hold %d ns at least 90%% of the workload's longest hold %d ns, and below a quarter of"
          " the %d ns cond wait: waits are not holding" % (r["hold_max_ns"], measured_max, wait_ns))
    expected_total = truth["waiter_hold_ns"] + truth["signaler_hold_ns"]
    excess = (r["hold_total_ns"] - expected_total) / max(r["hold_count"], 1)
    print("note: condvar: p50 excess over the known hold %d ns, total excess per hold %d ns"
          % (r["hold_p50_ns"] - hold_ns, excess))
    check(total_ok(r["hold_total_ns"], expected_total, r["hold_count"]),
          "total hold %d ns within 10%% (+%d ns/hold probe latency x %d holds) of the measured %d ns"
          % (r["hold_total_ns"], PROBE_LATENCY_NS, r["hold_count"], expected_total))
    # the ~1 s of cond waits must be excluded: with them the total would be
    # measured + cond_wait_ns; the tolerance above is far smaller than that
    check(truth["cond_wait_ns"] > 10 * (expected_total * 0.10 + r["hold_count"] * PROBE_LATENCY_NS),
          "the cond waits (%d ns) dwarf the tolerance, so the check above excludes them"
          % truth["cond_wait_ns"])
    check(r["hold_total_ns"] < expected_total + truth["cond_wait_ns"] / 10,
          "total hold %d ns far below measured holds + cond waits (%d + %d ns): waits excluded"
          % (r["hold_total_ns"], expected_total, truth["cond_wait_ns"]))
    # the workload's own median, not the 200 us target: on a loaded box a preempted holder
    # holds longer (a stress-ng --cpu 2 run read 223 us against the target)
    check(within(r["hold_p50_ns"], truth["hold_p50_ns"], rel=0.10),
          "p50 hold %d ns within 10%% of the workload's own median hold %d ns (target %d)"
          % (r["hold_p50_ns"], truth["hold_p50_ns"], hold_ns))
    dq = r["data_quality"]
    check(dq["cond_waits"] == truth["cond_waits"],
          "cond waits seen %d == %d made" % (dq["cond_waits"], truth["cond_waits"]))
    check(dq["unmatched_end"] == 0 and dq["unmatched_begin"] == 0, "no unmatched holds: %s" % dq)


def test_bad_input():
    usage_error([PMHELD, "-p", "abc"])
    usage_error([PMHELD, "-p", "0"])
    usage_error([PMHELD, "--sort", "nosuch"])
    usage_error([PMHELD, "-S", "nosuch"])
    usage_error([PMHELD, "-s", "-1"])
    usage_error([PMHELD, "1", "2"])
    usage_error([PMHELD, "5"])  # no positional duration: -d 5
    usage_error([PMHELD, "-c", "2"])  # a count needs an interval
    # a PID that does not exist: bad input (exit 2, one line)
    usage_error([PMHELD, "-p", "4194303", "-d", "1"])
    r = run([PMHELD, "-p", "4194303", "-d", "1"], timeout=60)
    check("no process with PID 4194303" in r.stderr, "missing PID named (%r)" % r.stderr.strip())
    usage_error([PMHELD, "--stack-storage-size", "0"])
    # a process without libc: kthreadd (PID 2)
    r = run([PMHELD, "-p", "2", "-d", "1"], timeout=60)
    check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "kernel thread" in r.stderr,
          "kernel thread -> exit 1, one line saying so (%d, %r)" % (r.returncode, r.stderr.strip()))
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
            r = run([PMHELD, "-p", str(p.pid), "-d", "1"], timeout=60)
            p.kill()
            p.wait()
            check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
                  and "static" in r.stderr,
                  "static stripped binary -> exit 1, one line (%d, %r)" % (r.returncode, r.stderr.strip()))
        else:
            print("note: cannot build a static binary here (%s); static check not run" % b.stderr.strip()[:100])
        shutil.rmtree(tmp, ignore_errors=True)
    check(not leftover_probe_events(), "no uprobe events left behind")
    not_root_error([PMHELD, "-p", "1", "-d", "1"])


def test_exec():
    """-p on a shell that then execs the workload: uprobes on libc keep firing, and the
    new program's name and symbols are read after the exec (issue 9 item 7)."""
    sh = subprocess.Popen(["sh", "-c", 'read go; exec "$0" --threads 4 --hold-us 200 --gap-us 50 '
                           '--duration-ms 1500', workload("mutex_contention")],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    pm = start([PMHELD, "-p", str(sh.pid), "-j"])
    wait_attached(pm)
    sh.stdin.write("go\n")
    sh.stdin.flush()
    wout, _ = sh.communicate(timeout=60)
    out, err, rc = stop(pm, timeout=60)  # it stops by itself when the target exits
    truth = ndjson(wout)[-1]
    recs = ndjson(out, "pmheld")
    r = lock_record(recs, truth["mutex_addr"])
    check(rc == 0 and r is not None, "exec: a record for the new program's mutex (rc %d, %r)" % (rc, err.strip()[-200:]))
    if r is None:
        return
    check(r["symbol"] == "cache_lock" and r["comm"] == "mutex_contentio",
          "exec: lock and process named from the new program (%r, %r)" % (r["symbol"], r["comm"]))
    check(abs(r["hold_count"] - truth["acquisitions"]) <= 2,
          "exec: holds %d == acquisitions %d (+-2)" % (r["hold_count"], truth["acquisitions"]))
    frames = [f for st in r["stacks"] for f in st["user_stack"]]
    check(any("update_cache" in f for f in frames), "exec: acquiring stack names update_cache")


def main():
    require_root()
    require_built(PMHELD)
    test_bad_input()
    test_contention()
    test_condvar()
    test_exec()
    check(not leftover_probe_events(), "no uprobe events left behind after the runs")
    out = run(["pgrep", "-x", "pmheld"]).stdout.strip()
    check(out == "", "no pmheld process left running (%r)" % out)
    schema_verdict("pmheld")
    finish()


if __name__ == "__main__":
    main()
