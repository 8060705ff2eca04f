#!/usr/bin/env python3
"""Ctrl-C ends a system-wide tool within about a second under a fork storm (issue 19
item 7): 2000 threads blocking and waking plus ~300 short processes a second
(workloads/crowd_storm). Before the fix, system-wide offcputime spent 25-28 s after
SIGINT loading the symbol tables of every process and file it had not seen yet.

Asserted per run: exit within 1.5 s of SIGINT (the promise is ~1 s: a 500 ms symbol
loading budget plus rendering; the extra 0.5 s absorbs the scheduler on this 2-CPU
machine under the same load), exit code 0, and a final report (offcputime.summary record
with a data_quality object carrying symbolize_skipped; in text mode the data quality
line).

Not in CI yet: the goal does not hold (3-7 s after SIGINT on this 2-CPU machine at load
~160, from 25-30 s). Run by hand as root after a build: python3 bench/prompt_exit.py
(BIN and WORKLOADS default to build/bin and build/workloads)."""
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
os.environ.setdefault("BIN", os.path.join(HERE, "..", "build", "bin"))
os.environ.setdefault("WORKLOADS", os.path.join(HERE, "..", "build", "workloads"))
os.environ.setdefault("SRC", os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
from harness import (check, finish, require_built, require_root, start, stop, tool, wait_attached,  # noqa: E402
                     workload)

LIMIT_S = 1.5


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
    p = start([tool("offcputime")] + args)
    wait_attached(p, timeout=60)
    check(storm_seconds(wl, 3), "crowd_storm keeps forking while offcputime %s traces" % " ".join(args))
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    out, err, rc = stop(p, timeout=120)
    took = time.monotonic() - t0
    check(took <= LIMIT_S, "offcputime %s exits %.2f s after SIGINT (limit %.1f s)" % (" ".join(args), took, LIMIT_S))
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
    require_built(tool("offcputime"), workload("crowd_storm"))
    wl = subprocess.Popen([workload("crowd_storm"), "--threads", "2000", "--forks-per-s", "300"],
                          stdout=subprocess.PIPE, text=True)
    try:
        ready = json.loads(wl.stdout.readline() or "{}")
        check(ready.get("threads") == 2000, "crowd_storm started 2000 threads (%r)" % ready)
        one_run(wl, ["-j"], True)
        one_run(wl, [], False)
    finally:
        wl.send_signal(signal.SIGINT)
        try:
            wl.wait(timeout=30)
        except subprocess.TimeoutExpired:
            wl.kill()
            wl.wait()
    finish()


if __name__ == "__main__":
    main()
