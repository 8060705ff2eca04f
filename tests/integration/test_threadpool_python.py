#!/usr/bin/env python3
"""threadpool on a real CPython pool: tests/workloads/py_pool.py runs a
concurrent.futures.ThreadPoolExecutor(8) under Debian's /usr/bin/python3 (every thread
is named "python3"), in two phases:
  sleep  tasks burn ~0.2 ms of CPU then time.sleep(5 ms), ~700 tasks/s: sleep-bound
  gil    pure-Python tasks keep every worker supplied: GIL-bound, one runs at a time
Ground truth is the workers' own CPU clocks and timed sleeps over the same window (it
opens when threadpool has attached and closes when its summary arrives).
The sleep phase runs while PID 1 is kept busy (harness.Pid1Traffic): on Firecracker
guests no BPF program runs in its threads' context, so many worker switch-ins are never
seen and must be recovered (bpf_sources/arrival.h).
Checks: utilisation within 0.1 absolute and busy workers within 15% of the workload's
figures, the main thread (TID == PID, submitting and waiting for results) not counted
as a worker, nor (sleep phase) a monitor thread that shares the name "python3" but
never waits for work (it wakes every 20 ms to read the queue's length), nor a
second ThreadPoolExecutor(3) in the same process, which must be a group of its own
(told apart by the queue its threads wait for work on), and the verdict: the
GIL-bound pool names the GIL.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (SRC, Pid1Traffic, check, compare_pool, finish,  # noqa: E402
                     measure_against_truth, require_built, require_root, skip, tool)

TOOL = tool("threadpool")
PY = "/usr/bin/python3"
WORKLOAD = os.path.join(SRC, "tests/workloads/py_pool.py")


def evaluate(phase, expect, secs=5, monitor=False, second_pool=0):
    wl = subprocess.Popen([PY, WORKLOAD, "--phase", phase, "--workers", "8"] +
                          (["--monitor"] if monitor else []) +
                          (["--second-pool", str(second_pool)] if second_pool else []),
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        ready = json.loads(wl.stdout.readline())
        pid, mon = ready["pid"], ready["monitor"]
        rc, err, records, truth = measure_against_truth(
            wl, pid, [TOOL, "-j", "-d", str(secs)], "threadpool")
        summaries = [r for r in records if r["type"] == "threadpool.group" and r["final"]]
    finally:
        wl.kill()
        wl.wait()
    if not check(rc == 0 and summaries and truth, "%s: threadpool ran: rc %d %s" % (phase, rc, err.strip())):
        return
    s = max(summaries, key=lambda r: r["thread_count"])
    compare_pool(phase, s, truth)
    tids = [t["tid"] for t in s["threads"]]
    if second_pool:
        check(sorted(tids) == ready["worker_tids"],
              "%s: the 8-thread group is the first pool's workers: %s vs %s" % (
                  phase, sorted(tids), ready["worker_tids"]))
        other = [r for r in summaries if sorted(t["tid"] for t in r["threads"]) == ready["second_tids"]]
        check(len(other) == 1 and other[0]["group"] != s["group"],
              "%s: the second pool (%s) is a group of its own: %s" % (
                  phase, ready["second_tids"],
                  ["%s: %s" % (r["group"], sorted(t["tid"] for t in r["threads"])) for r in summaries]))
    check(s["thread_count"] == 8 and pid not in tids and mon not in tids,
          "%s: pool is the 8 workers, main thread %d%s left out (threads %d)" % (
              phase, pid, " and monitor thread %d" % mon if mon else "", s["thread_count"]))
    if mon:
        check("thread %d left out" % mon in s["work_waits"]["description"],
              "%s: the report says the monitor thread is left out: %s" % (
                  phase, s["work_waits"]["description"]))
    check(s["verdict"] == expect and (expect != "blocked-on-gil" or "GIL" in s["verdict_reason"]),
          "%s: verdict %s (want %s): %s" % (phase, s["verdict"], expect, s["verdict_reason"]))


def main():
    require_root()
    require_built(TOOL)
    if not os.access(PY, os.X_OK):
        skip("%s missing (Debian's python3)" % PY)
    with Pid1Traffic() as traffic:
        evaluate("sleep", "sleeping", monitor=True, second_pool=3)
    print("info sleep phase: %d connections to PID 1's port %s" % (traffic.connects, traffic.port))
    evaluate("gil", "blocked-on-gil")
    finish()


if __name__ == "__main__":
    sys.exit(main())
