#!/usr/bin/env python3
"""Ctrl-C ends a system-wide tool within a second under a fork storm (issue 19 item 7):
2000 threads blocking and waking plus ~300 short processes a second
(workloads/crowd_storm). Before the fix, system-wide offcputime spent 25-28 s after
SIGINT loading the symbol tables of every process and file it had not seen yet.

Asserted per run (JSON and text): exit within 1 s of SIGINT, exit code 0, and a final
report (offcputime.summary with a data_quality object carrying symbolize_skipped; in
text mode the data quality line).

What makes it hold: after a stop signal no new symbol tables once the tool spent 500 ms
of its own CPU time (symbolize_skipped counts what was left unnamed); /proc/kallsyms
read at attach, not in the final report; the loop thread at nice -20 (Ctrl-C's wakeup;
nice 0 among 2000 runnable threads waited seconds) and the final report SCHED_RR (nice
-20 alone is ~5% of a CPU against 2000 threads). Measured here (load ~500): 0.30-0.88 s;
the kernel's own signal-to-exit time (bpftrace: signal_generate to sched_process_exit)
0.8-1.2 s before the SCHED_RR report; 3-8 s with the report at nice -20 only.
"""
import json
import os
import signal
import subprocess
import time

from harness import check, end_process, finish, require_built, require_root, start, stop, tool, wait_attached, workload

LIMIT_S = 1.0


def storm_seconds(wl, n):
    """Reads the workload's per-second {"forks":N} lines until n of them came: the storm
    has run n seconds (an observable sign, not a sleep)."""
    seen = 0
    while seen < n:
        line = wl.stdout.readline()
        if not line:
            return False
        if '"forks"' in line:
            seen += 1
    return True


def one_run(wl, args, json_mode):
    p = start([tool("offcputime")] + args, env=dict(os.environ, BPFDIAG_TIMING="1"))
    wait_attached(p, timeout=60)
    check(storm_seconds(wl, 3), "crowd_storm keeps forking while offcputime %s traces" % " ".join(args))
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    # only one: a second Ctrl-C ends a tool at once (ci23 read exit 130 in 0.03 s when
    # the harness's own SIGINT followed while the final report was being written)
    out, err, rc = stop(p, timeout=120, sig=None)
    took = time.monotonic() - t0
    if not check(took <= LIMIT_S, "offcputime %s exits %.2f s after SIGINT (limit %.1f s)" % (" ".join(args), took, LIMIT_S)):
        # where the time went, by the tool's own clock (BPFDIAG_TIMING: the stop's phases)
        for line in err.splitlines():
            if line.startswith(("bpfdiag-timing: final", "bpfdiag-timing: stop signal")):
                print("info   " + line)
    check(rc == 0, "offcputime %s exit code 0 (got %s, stderr %r)" % (" ".join(args), rc, err.strip()[-300:]))
    if json_mode:
        summary = None
        for line in out.splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("type") == "offcputime.summary":
                summary = rec
        check(summary is not None and "symbolize_skipped" in summary.get("data_quality", {}),
              "final offcputime.summary record with data_quality.symbolize_skipped")
    else:
        check("data quality: lost events" in out + err, "text report ends with its data quality line")
    return took


def main():
    require_root()
    # The timer must not be starved by the load it measures under: at nice 0 among 2000
    # runnable threads this script saw the tool's exit seconds late (the kernel's own
    # signal-to-exit time, traced: 0.8-1.2 s, while this script measured 1.5-8 s). It
    # runs SCHED_FIFO; its children (the tool, the workload) start at the normal policy.
    os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(10))
    require_built(tool("offcputime"), workload("crowd_storm"))
    wl = subprocess.Popen([workload("crowd_storm"), "--threads", "2000", "--forks-per-s", "300"],
                          stdout=subprocess.PIPE, text=True)
    try:
        ready = json.loads(wl.stdout.readline() or "{}")
        check(ready.get("threads") == 2000, "crowd_storm started 2000 threads (%r)" % ready)
        one_run(wl, ["-j"], True)
        one_run(wl, [], False)
    finally:
        end_process(wl)
    finish()


if __name__ == "__main__":
    main()
