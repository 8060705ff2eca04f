#!/usr/bin/env python3
"""offcputime against offcpu_blockers, whose four threads time their own blocking in
a pipe read, a condition variable, a sleep and a contended mutex.

Checks (numbers, not exit codes):
  * for each blocker thread, the off-CPU time offcputime attributes to that thread's
    stacks through the expected kernel path is within 5% of the time the workload
    measured around its blocking calls; the thread totals (pipe, cond, sleep) too;
  * kernel stacks show the path (anon_pipe_read/pipe_read, futex_wait,
    do_nanosleep/hrtimer_nanosleep) and user stacks the workload's function names
    (the cond-var user stack is truncated inside glibc, which has no frame pointers:
    reported, not required);
  * folded output (system-wide, per thread) parses as "frames value" lines, round-trips
    through the project's own parser, and still names the functions of the workload,
    which has exited before offcputime stops (symbols snapshot at first sight);
  * bad input and not-root give one line and a non-zero exit; nothing left attached.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F401

require_root()
OC = tool("offcputime")
WL = workload("offcpu_blockers")
for p in (OC, WL):
    if not os.path.exists(p):
        print("SKIP: %s not built" % p)
        sys.exit(SKIP)

ITERS, DELAY_MS = 25, 20
KERNEL_PATH = {
    "blk_pipe": ("anon_pipe_read", "pipe_read"),
    "blk_cond": ("futex_wait",),
    "blk_sleep": ("do_nanosleep", "hrtimer_nanosleep"),
    "blk_mutex": ("futex_wait",),
}
TOL = 0.05


def run_json_once():
    """Workload waits 1.5 s before starting its threads; offcputime -p attaches in
    that window and runs past the workload's end."""
    wl = subprocess.Popen([WL, str(ITERS), str(DELAY_MS), "1500"], stdout=subprocess.PIPE, text=True)
    oc = start([OC, "-j", "-p", str(wl.pid), "4"])
    wl_out, _ = wl.communicate(timeout=30)
    out = oc.communicate(timeout=60)[0]
    rc = oc.returncode
    truth = json.loads(wl_out)
    recs = ndjson(out)
    return truth, recs, rc


def analyse(truth, rec):
    """Returns (list of (ok, msg)) for one run."""
    res = []
    stacks = rec["stacks"]
    threads = {t["tid"]: t for t in rec["threads"]}
    for t in truth["threads"]:
        name, tid, fn, measured = t["name"], t["tid"], t["function"], t["blocked_ns"]
        mine = [s for s in stacks if s["tid"] == tid]
        path = KERNEL_PATH[name]
        attributed = sum(s["total_ns"] for s in mine if any(f in path for f in s["kernel_stack"]))
        res.append((within(attributed, measured, rel=TOL),
                    "%s: off-CPU time in %s %.1f ms vs measured %.1f ms (5%%)"
                    % (name, "/".join(path), attributed / 1e6, measured / 1e6)))
        total = threads.get(tid, {}).get("total_ns", 0)
        if name != "blk_mutex":  # the mutex thread also spins (and may be preempted) between locks
            res.append((within(total, measured, rel=TOL),
                        "%s: thread total %.1f ms vs measured %.1f ms (5%%)" % (name, total / 1e6, measured / 1e6)))
        else:
            res.append((total >= attributed * 0.999, "%s: thread total %.1f ms >= attributed" % (name, total / 1e6)))
        top = max(mine, key=lambda s: s["total_ns"]) if mine else None
        res.append((top is not None and any(f in path for f in top["kernel_stack"]),
                    "%s: top kernel stack has %s (%s)" % (name, "/".join(path),
                                                          ";".join(top["kernel_stack"][:8]) if top else None)))
        has_fn = top is not None and fn in top["user_stack"]
        if name == "blk_cond":
            print("info %s: top user stack %s (glibc's cond wait has no frame pointers)"
                  % (name, top["user_stack"] if top else None))
        else:
            res.append((has_fn, "%s: top user stack names %s (%s)" % (name, fn, top["user_stack"] if top else None)))
    dq = rec["data_quality"]
    res.append(("lost_stacks" in dq and "unmatched_end" in dq and "map_full" in dq,
                "data_quality present: %s" % dq))
    res.append((dq["map_full"] == 0 and dq["lost_events"] == 0, "no map-full drops or lost events"))
    res.append((dq.get("seen_full") == 0, "seen map never full (%s)" % dq.get("seen_full")))
    return res


# --- 1. numbers vs ground truth (retry: other engineers load this 2-CPU machine) ---------
for attempt in range(3):
    truth, recs, rc = run_json_once()
    if rc != 0 or len(recs) != 1:
        results = [(False, "offcputime -j exit %d, %d records" % (rc, len(recs)))]
    else:
        results = analyse(truth, recs[0])
    if all(ok for ok, _ in results) or attempt == 2:
        break
    print("attempt %d failed (%s), retrying" % (attempt + 1, [m for ok, m in results if not ok]))
for ok, msg in results:
    check(ok, msg)

# --- 2. folded, system-wide, per thread; workload exits before the tool stops ---------------
oc = start([OC, "-f", "-P", "-m", "1000", "--stack-storage-size", "65536", "5"])
time.sleep(2.0)
wl = run([WL, "10", "20"], timeout=30)
out, err = oc.communicate(timeout=60)
rc = oc.returncode
check(rc == 0, "offcputime -fP exits 0 (%s)" % err.strip()[-200:])
lines = [l for l in out.splitlines() if l]
check(len(lines) > 0 and all(re.match(r"^\S.* \d+$", l) for l in lines),
      "every folded line is 'frames value' (%d lines)" % len(lines))
wpid = json.loads(wl.stdout)["pid"]
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
with tempfile.NamedTemporaryFile("w", suffix=".folded", delete=False) as fh:
    fh.write(out)
    path = fh.name
ut = os.path.join(BIN, "unit_offcputime")
if os.path.exists(ut):
    r = subprocess.run([ut, "-tc=*folded file round trip*", "-s"], capture_output=True, text=True,
                       env=dict(os.environ, OFFCPU_FOLDED_FILE=path))
    m = re.search(r"folded lines round-tripped: (\d+)", r.stdout)
    check(r.returncode == 0 and m and int(m.group(1)) == len(lines),
          "folded output round-trips through bpfdiag::parse_folded (%s lines)" % (m.group(1) if m else "?"))
os.unlink(path)

# --- 3. text output: BCC layout -------------------------------------------------------------
r = run([OC, "-d", "-p", str(os.getpid()), "1"], timeout=60)
check(r.returncode == 0 and r.stdout.startswith("Tracing off-CPU time (us) of PID %d" % os.getpid()),
      "text banner")
check("data quality:" in r.stdout, "text report shows data quality")

# --- 3b. `seen` holds live processes only: more short-lived processes than --map-size ------
# Each child sleeps once (a switch-out that announces it) and exits; without pruning at
# exit the 1024-entry `seen` map fills after ~1024 of them and seen_full counts the rest.
NCHILD, MAPSZ = 2500, 1024
live = sum(1 for d in os.listdir("/proc") if d.isdigit())
if live > MAPSZ // 2:
    print("info: %d live processes; the seen-pruning check needs fewer than %d" % (live, MAPSZ // 2))
else:
    oc = start([OC, "-j", "-u", "--map-size", str(MAPSZ), "-m", "100000000", "14"])
    time.sleep(2.0)
    announced = 0
    t0 = time.time()
    for i in range(NCHILD):
        pid = os.fork()
        if pid == 0:
            time.sleep(0.0005)
            os._exit(0)
        os.waitpid(pid, 0)
        if time.time() - t0 > 9.0 or announced > 2 * MAPSZ:
            break
        announced += 1
    out = oc.communicate(timeout=60)[0]
    recs = ndjson(out)
    check(oc.returncode == 0 and len(recs) == 1, "offcputime -j --map-size %d exits 0 with one record" % MAPSZ)
    if recs:
        dq = recs[0]["data_quality"]
        check(announced > MAPSZ + live, "forked %d sleeping children (> map size %d + %d live)"
              % (announced, MAPSZ, live))
        check(dq.get("seen_full") == 0,
              "seen map pruned at exit: seen_full %s after %d short-lived processes" % (dq.get("seen_full"), announced))

# --- 4. bad input, not root, nothing left attached ---------------------------------------------
usage_error([OC, "-p", "4194304"])
usage_error([OC, "-p", "1", "-t", str(os.getpid())])
usage_error([OC, "-m", "5000", "-M", "100"])
usage_error([OC, "-m", "99999999999999999999"])
usage_error([OC, "--stack-storage-size", "100000000"])
usage_error([OC, "-u", "-k"])
not_root_error([OC, "1"])
check(not leftover_probe_events(), "no probe events left behind")
# -p on a single-threaded process that waits on its children all the time: its whole
# traced duration is off-CPU (regression: -p once matched nothing because libbcc split
# the filter macro's cflag on its spaces)
sh = subprocess.Popen(["/bin/sh", "-c", "while :; do sleep 0.05; done"])
time.sleep(0.3)
r = run([OC, "-j", "-p", str(sh.pid), "2"], timeout=60)
sh.kill()
sh.wait()
recs = ndjson(r.stdout) if r.returncode == 0 else []
total = sum(st["total_ns"] for st in recs[-1]["stacks"]) if recs else 0
check(recs and all(st["pid"] == sh.pid for st in recs[-1]["stacks"]),
      "-p %d: only that process's stacks" % sh.pid)
check(1.5e9 <= total <= 2.2e9, "-p on a waiting shell: %.2f s off-CPU of a 2 s trace" % (total / 1e9))

finish()
