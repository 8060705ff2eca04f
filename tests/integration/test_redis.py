#!/usr/bin/env python3
"""offcputime on real software: redis-server under redis-benchmark, next to bpftrace.

A redis-server of our own (127.0.0.1:6390, no persistence, its own directory) is
loaded by redis-benchmark (a bounded request count). `offcputime -p <redis>` and an
equivalent bpftrace off-CPU sum for the same PID (sched_switch: time from switch-out
to switch-in, per thread) trace the same window: bpftrace counts only between two
marker execs the test makes right after offcputime has attached and right before it
stops offcputime with SIGINT (an idle redis thread is off-CPU all the time, so any
gap between the two windows is off-CPU time one side has and the other has not: a
--duration window ends before offcputime symbolizes and exits, ~1 s before a disarm
after its exit on a loaded CI box). Checks: offcputime's total off-CPU time for redis is within 10% of
bpftrace's; per thread and in total, both fit the window (sum <= threads x window);
no stacks lost; every NDJSON record validates against the schema. redis is stopped afterwards, also on failure."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F401
import services  # noqa: E402

require_root()
OC = tool("offcputime")
require_built(OC)
PORT = 6390
TOL = 0.10
DURATION = 8  # offcputime's window, s (ended by SIGINT)

missing = [b for b in ("redis-server", "redis-benchmark", "redis-cli", "bpftrace", "unshare") if not shutil.which(b)]
if missing:
    if os.environ.get("CI") == "true":  # scripts/install-deps provides them
        check(False, "needed here: %s (scripts/install-deps installs them)" % ", ".join(missing))
        finish()
    print("SKIP: not installed: %s" % ", ".join(missing))
    sys.exit(SKIP)

BT_SCRIPT = r"""
tracepoint:sched:sched_process_exec /str(args->filename) == "%(arm)s"/ { @armed = 1; }
tracepoint:sched:sched_process_exec /str(args->filename) == "%(disarm)s"/ { @armed = 0; }
tracepoint:sched:sched_switch /@armed/
{
  if (pid == %(pid)d) { @start[tid] = nsecs; }
  $s = @start[args->next_pid];
  if ($s) {
    @total = sum(nsecs - $s);
    @per[args->next_pid] = sum(nsecs - $s);
    delete(@start[args->next_pid]);
  }
}
END { clear(@start); clear(@armed); }
"""


def wait_line(stream, marker, proc, timeout):
    deadline = time.time() + timeout
    seen = []
    while time.time() < deadline:
        line = stream.readline()
        if not line:
            if proc.poll() is not None:
                break
            continue
        seen.append(line)
        if marker in line:
            return True
    print("did not see %r: %s" % (marker, "".join(seen)[-500:]))
    return False


def kill(proc):
    if proc and proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)


srv = services.Redis(port=PORT)  # its own directory, no persistence, hz 100
tmp = srv.tmp
arm, disarm = os.path.join(tmp, "arm"), os.path.join(tmp, "disarm")
for p in (arm, disarm):
    shutil.copy("/bin/true", p)
redis = bt = oc = None
try:
    srv.start()
    redis = srv.server
    threads = len(os.listdir("/proc/%d/task" % redis.pid))

    # bpftrace needs tracefs; mount it in a private mount namespace (nothing left behind)
    script = BT_SCRIPT % {"arm": arm, "disarm": disarm, "pid": redis.pid}
    bt = subprocess.Popen(["unshare", "-m", "sh", "-c",
                           "{ mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing; } && exec bpftrace -e '%s'" % script],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if not check(wait_line(bt.stdout, "Attaching", bt, 60), "bpftrace attached"):
        raise AssertionError("bpftrace failed")
    time.sleep(1.0)  # bpftrace prints its banner before it attaches

    oc = subprocess.Popen([OC, "-j", "-p", str(redis.pid)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    start_line = oc.stdout.readline()
    check(start_line.startswith("{") and json.loads(start_line)["type"] == "offcputime.start",
          "offcputime.start record once attached (%s)" % start_line.strip()[:120])
    subprocess.run([arm], check=True)
    t_arm = time.monotonic()
    bench = subprocess.Popen(["redis-benchmark", "-p", str(PORT), "-c", "20", "-n", "1000000", "-t",
                              "set,get,lpush,lpop", "-q"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    time.sleep(DURATION)
    subprocess.run([disarm], check=True)
    oc.send_signal(signal.SIGINT)
    window_bt = time.monotonic() - t_arm
    bench_running = bench.poll() is None
    kill(bench)
    bench_out = bench.communicate()[0]
    check(bench_running and "rps=" in bench_out,
          "redis-benchmark ran through the window: %s" % bench_out.replace("\r", "\n").strip().split("\n")[-1][:160])
    out, err = oc.communicate(timeout=60)
    time.sleep(0.5)
    bt.send_signal(2)
    bt_out = bt.communicate(timeout=30)[0]

    check(oc.returncode == 0, "offcputime -p exits 0 (%s)" % err.strip()[-200:])
    recs = ndjson(start_line + out)
    validate("offcputime", recs)
    summaries = [r for r in recs if r["type"] == "offcputime.summary"]
    check(len(summaries) == 1 and recs[-1] is summaries[0], "one summary record, last")
    rec = summaries[-1]
    window_oc = rec["interval_ns"]
    oc_threads = {t["tid"]: t["offcpu_total_ns"] for t in rec["threads"]}
    oc_total = sum(oc_threads.values())
    m = re.search(r"^@total: (\d+)", bt_out, re.M)
    bt_total = int(m.group(1)) if m else 0
    bt_threads = {int(t): int(v) for t, v in re.findall(r"^@per\[(\d+)\]: (\d+)", bt_out, re.M)}
    check(m is not None, "bpftrace printed its total (%s)" % bt_out.strip()[-200:])
    print("info: redis pid %d, %d threads; offcputime %.3f s off-CPU in %.2f s, bpftrace %.3f s in %.2f s"
          % (redis.pid, threads, oc_total / 1e9, window_oc / 1e9, bt_total / 1e9, window_bt))
    for tid in sorted(set(oc_threads) | set(bt_threads)):
        print("info:   tid %d: offcputime %.3f s, bpftrace %.3f s"
              % (tid, oc_threads.get(tid, 0) / 1e9, bt_threads.get(tid, 0) / 1e9))
    check(bt_total > 0 and within(oc_total, bt_total, rel=TOL),
          "redis off-CPU total: offcputime %.3f s vs bpftrace %.3f s (%+.1f%%, allowed 10%%)"
          % (oc_total / 1e9, bt_total / 1e9, 100.0 * (oc_total - bt_total) / max(1, bt_total)))
    check(all(v <= window_oc * 1.01 for v in oc_threads.values()) and oc_total <= threads * window_oc * 1.01,
          "offcputime: every thread <= window %.2f s, sum %.2f s <= %d threads x window"
          % (window_oc / 1e9, oc_total / 1e9, threads))
    check(all(v <= window_bt * 1e9 * 1.01 for v in bt_threads.values()) and bt_total <= threads * window_bt * 1e9 * 1.01,
          "bpftrace: every thread <= window %.2f s, sum %.2f s <= %d threads x window"
          % (window_bt, bt_total / 1e9, threads))
    check(set(oc_threads) <= {int(t) for t in os.listdir("/proc/%d/task" % redis.pid)},
          "offcputime reports redis's threads only")
    dq = rec["data_quality"]
    check(dq["lost_stacks"] == 0 and dq["map_full"] == 0 and dq["lost_events"] == 0,
          "no stacks lost, no map full, no lost events (%s)" % dq)
except (AssertionError, RuntimeError) as e:
    check(False, str(e))
finally:
    kill(oc)
    kill(bt)
    srv.stop()
finish()
