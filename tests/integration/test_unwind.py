#!/usr/bin/env python3
"""User stacks without frame pointers (issue 11): DWARF unwinding against
the *_nofp workloads (built -O2 -fomit-frame-pointer; unwind_solib_nofp calls into our
own stripped libunwind_blk.so), each thread blocking from a named function three calls
deep and timing its own blocking (tests/workloads/unwind_truth.h). The workloads start
their timed part when the test writes to their stdin, once offcputime has attached.

Checks (numbers, not exit codes):
  * -f -p PID (dwarf is the default with -p): for every thread, each chain function
    (callers and the blocking function) gets, summed over that thread's folded lines
    containing it, the time the workload measured, within 5%; the chain appears in
    order; the stacks go past the chain to the thread start (start_thread/clone3) with
    no marker frame ([truncated], [no CFI], ...);
  * --unwind=fp on the same workload still shows the short stacks (the chain gets less
    than 5% of the time): the regression guard that dwarf mode is what fixes it;
  * -j: NDJSON validates against the schema, the start record says unwind=dwarf and
    carries the unwinder's verification (verified_insns under the 1M limit), the
    ustack_* data_quality keys are there and nothing was truncated;
  * unwind_jit_nofp blocks through a generated stub (anonymous executable mapping, no
    CFI, a frame pointer, like a JVM's JIT frames): its chain and thread start are there
    (as above) and ustack_fp_frames counts the frame-pointer steps;
  * lockstat (futex and --uprobes) and pmheld -p -j on unwind_lock_nofp: g_mu's waiter
    stacks / acquiring stacks hold the waiter's chain up to the thread start, the wait
    total is the workload's within 5%, nothing lost or truncated;
  * perf (Debian's linux-perf; CI=true requires it): `perf record --call-graph dwarf -e
    sched:sched_switch` on each workload shows the same chain in each thread's samples.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F401

T0 = time.monotonic()
require_root()
OC = tool("offcputime")
WORKLOADS_NOFP = {  # name: args (counts/ms as in unwind_truth.h); start on stdin (-1) is appended
    "unwind_io_nofp": ["6", "100", "4", "100"],
    "unwind_lock_nofp": ["6", "100", "6", "50"],
    "unwind_solib_nofp": ["6", "100", "4", "100"],
    "unwind_jit_nofp": ["6", "100"],  # through a generated stub: no file, no CFI, a frame pointer
}
PERF_CHECKED = ["unwind_io_nofp", "unwind_lock_nofp", "unwind_solib_nofp"]  # perf is no judge of JIT frames
require_built(OC, *[workload(w) for w in WORKLOADS_NOFP])
perf = shutil.which("perf")
if not perf and CI:
    check(False, "CI=true, yet perf is missing (scripts/install-deps installs linux-perf)")
TOL = 0.05
THREAD_START = ("__GI___clone3", "clone3", "__clone3", "start_thread", "__clone")


def folded_lines(out):
    lines = []
    for l in out.splitlines():
        if " " not in l:
            continue
        frames, v = l.rsplit(" ", 1)
        if v.isdigit():
            lines.append((frames.split(";"), int(v)))
    return lines


def run_offcputime(wl, args, extra, tool_path=None):
    """Starts the workload (it waits on stdin), attaches offcputime (or tool_path) -p,
    then lets the timed part run; returns (truth, stdout, stderr, attach_s)."""
    w = subprocess.Popen([workload(wl), *args, "-1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    o = start([tool_path or OC, *extra, "-p", str(w.pid)])
    attached = wait_attached(o, timeout=30)
    attach_s = time.monotonic() - t0
    steal0 = steal_ns()
    truth = json.loads(w.communicate(input="go\n", timeout=60)[0])
    truth["steal_ns"] = steal_ns() - steal0  # lengthens the workload's own clock only
    out, err, rc = stop(o, timeout=30)  # -p: ends by itself when the workload exits
    check(attached and rc == 0, "%s %s: offcputime attached and exited 0 (rc %s, %r)" % (
        wl, " ".join(extra), rc, err.strip()[-300:]))
    return truth, out, err, attach_s


def chain_in_order(frames, chain):
    pos = 0
    for f in frames:
        if pos < len(chain) and f == chain[pos]:
            pos += 1
    return pos == len(chain)


for wl, args in WORKLOADS_NOFP.items():
    truth, out, err, attach_s = run_offcputime(wl, args, ["-f"])  # dwarf: the default with -p
    print("%s: attached in %.2f s" % (wl, attach_s))
    lines = folded_lines(out)
    for t in truth["threads"]:
        chain = t["callers"] + [t["function"]]
        truth_us = t["blocked_ns"] / 1000.0
        mine = [(fr, v) for fr, v in lines if fr[0] == t["name"]]
        # Hypervisor steal while a thread runs between its clock reads and the blocking
        # call lengthens the workload's number, not the off-CPU time: below by at most
        # the steal is allowed (as in test_offcputime)
        steal_us = truth["steal_ns"] / 1000.0
        # Above: a thread preempted while it spins or computes in a caller (uw_mutex spins in
        # mutex_loop until the holder has the lock) is off-CPU under that caller too, which
        # blocked_ns leaves out: at most the thread's run-queue wait (schedstat run_delay,
        # ~0 on a quiet box; 35 ms of mutex_loop under stress-ng --cpu 2)
        queued_us = t.get("run_delay_ns", 0) / 1000.0
        for fn in chain:
            got = sum(v for fr, v in mine if fn in fr)
            check(truth_us - max(TOL * truth_us, 1.05 * steal_us) <= got <= truth_us * (1 + TOL) + queued_us,
                  "%s %s: %s %.1f ms vs workload %.1f ms (-5%% or the steal %.1f ms, +5%% + its run-queue "
                  "wait %.1f ms)" % (wl, t["name"], fn, got / 1e3, truth_us / 1e3, steal_us / 1e3, queued_us / 1e3))
        full = [(fr, v) for fr, v in mine if chain_in_order(fr, chain)]
        chained = sum(v for _, v in full)
        if not check(chained >= (1 - TOL) * truth_us or chained >= truth_us - 1.05 * steal_us,
                     "%s %s: the chain %s in order (%.1f of %.1f ms)" % (
                         wl, t["name"], ";".join(chain), chained / 1e3, truth_us / 1e3)):
            for fr, v in mine:  # where the rest of the time went, for the record
                print("   %8d us  %s" % (v, ";".join(fr)[:300]))
            print("   " + (err.strip().splitlines() or [""])[-1])
        if full:
            top = max(full, key=lambda x: x[1])[0]
            print("   %s" % ";".join(top))
            user = top[1:top.index("-")] if "-" in top else top[1:]
            check(bool(user) and user[0] in THREAD_START,
                  "%s %s: the user stack reaches the thread start (outermost %r)" % (wl, t["name"], user[:1]))
            check(not any(f.startswith("[") and f.endswith("]") and not f.startswith("[unknown]") for f in user),
                  "%s %s: no marker frame ([truncated], [no CFI], ...) in the chain's stack" % (wl, t["name"]))

# regression guard: frame pointers alone lose the chain on these binaries
truth, out, err, _ = run_offcputime("unwind_io_nofp", WORKLOADS_NOFP["unwind_io_nofp"], ["--unwind=fp", "-f"])
lines = folded_lines(out)
for t in truth["threads"]:
    got = sum(v for fr, v in lines if fr[0] == t["name"] and t["function"] in fr)
    check(got < TOL * t["blocked_ns"] / 1000.0,
          "fp mode: %s gets %.1f ms of %.1f ms (frame pointers cannot see it)" % (
              t["function"], got / 1e3, t["blocked_ns"] / 1e6))

# JSON: schema, data_quality keys, the start record names the mode and the unwinder's cost
truth, out, err, _ = run_offcputime("unwind_io_nofp", ["2", "50", "2", "50"], ["-j"])
recs = validated("offcputime", ndjson(out, "offcputime"))
start_rec = recs[0] if recs else {}
check(start_rec.get("options", {}).get("unwind") == "dwarf", "start record: options.unwind is dwarf (the default with -p)")
ut = start_rec.get("unwind_tables", {})
check(0 < ut.get("verified_insns", 0) < 1000000 and ut.get("rows", 0) > 0,
      "start record: unwinder verified in %s insns (%.0f ms), %s rows, %s bytes of tables (built in %.1f ms)" % (
          ut.get("verified_insns"), ut.get("verify_ms", 0), ut.get("rows"), ut.get("bytes"), ut.get("build_ms", 0)))
summ = [r for r in recs if is_type(r, "offcputime", "summary")]
dq = summ[-1]["data_quality"] if summ else {}
check(all(k in dq for k in ("ustack_truncated", "ustack_no_cfi", "ustack_no_mapping", "ustack_unreadable",
                            "binaries_without_cfi")), "data_quality has the ustack_* keys: %s" % dq)
check(dq.get("ustack_truncated", 1) == 0, "no stack truncated at depth 64")

# JIT code (an anonymous executable mapping, no CFI) is walked by its frame pointer:
# the frames above it are there (checked with the others above) and counted
truth, out, err, _ = run_offcputime("unwind_jit_nofp", ["2", "50"], ["-j"])
recs = validated("offcputime", ndjson(out, "offcputime"))
summ = [r for r in recs if is_type(r, "offcputime", "summary")]
dq = summ[-1]["data_quality"] if summ else {}
check(dq.get("ustack_fp_frames", 0) >= 2 and dq.get("ustack_no_mapping", 1) == 0,
      "JIT stub: its frames walked by frame pointer (ustack_fp_frames %s, ustack_no_mapping %s)"
      % (dq.get("ustack_fp_frames"), dq.get("ustack_no_mapping")))

# profile: on-CPU samples in a chain without frame pointers (dwarf: the default with -p)
PROFILE, HZ = tool("profile"), 99
for mode in ("dwarf", "fp"):
    truth, out, err, _ = run_offcputime("unwind_cpu_nofp", ["20", "50"], ["-f", "-F", str(HZ), "--unwind=" + mode],
                                        tool_path=PROFILE)
    t = truth["threads"][0]
    chain = t["callers"] + [t["function"]]
    leaf = [(fr, v) for fr, v in folded_lines(out) if fr[0] == t["name"] and t["function"] in fr]
    n = sum(v for _, v in leaf)
    full = sum(v for fr, v in leaf if chain_in_order(fr, chain) and len(fr) > 1 and fr[1] in THREAD_START)
    want = t["blocked_ns"] / 1e9 * HZ
    if mode == "dwarf":
        check(0.7 * want <= n <= 1.3 * want, "profile: %d samples in %s for %.2f s of its CPU time at %d Hz (%.0f +-30%%)"
              % (n, t["function"], t["blocked_ns"] / 1e9, HZ, want))
        check(n and full >= 0.95 * n, "profile --unwind=dwarf: %d of %d samples show %s down to the thread start"
              % (full, n, ";".join(chain)))
    else:
        check(full <= 0.05 * max(n, 1), "profile --unwind=fp: %d of %d samples show the chain (frame pointers cannot)"
              % (full, n))

# lockstat's waiter stacks and pmheld's acquiring stacks (dwarf: the default with -p)
# name the mutex waiter's chain, past the C library, up to the thread start
LS, PM = tool("lockstat"), tool("pmheld")


def bare(frame):
    """'mutex_stage+0x1a (unwind_lock_nofp)' -> 'mutex_stage'."""
    return frame.split(" ")[0].split("+")[0]


def traced_json(cmd, wl, args):
    """Runs `cmd -p PID -j` over the workload's timed part; returns (truth, records)."""
    w = subprocess.Popen([workload(wl), *args, "-1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    o = start([*cmd, "-p", str(w.pid), "-j"])
    attached = wait_attached(o, timeout=30)
    steal0 = steal_ns()
    truth = json.loads(w.communicate(input="go\n", timeout=60)[0])
    truth["steal_ns"] = steal_ns() - steal0
    out, err, rc = stop(o, timeout=30)  # -p: ends by itself when the workload exits
    check(attached and rc == 0, "%s: attached and exited 0 (rc %s, %r)" % (" ".join(cmd[-1:]), rc, err.strip()[-300:]))
    return truth, validated(os.path.basename(cmd[0]), ndjson(out, os.path.basename(cmd[0])))


def chain_stack(stacks, chain, what):
    """The first stack (innermost-first frames) holding the chain in order; checks that it
    reaches the thread start with no marker frame."""
    for st in stacks:
        frames = [bare(f) for f in st]
        if chain_in_order(list(reversed(frames)), chain):
            # "[unknown]": a frame the unwinder found in a file without its symbol
            # (libstdc++'s thread entry); the markers say where a walk stopped early
            check(frames[-1] in THREAD_START and not any(f.startswith("[") and f != "[unknown]" for f in frames),
                  "%s: the stack reaches the thread start, no marker frame: %s" % (what, ";".join(frames)))
            return frames
    check(False, "%s: a stack names %s in order (stacks: %s)" % (
        what, ";".join(chain), [";".join(bare(f) for f in st)[:200] for st in stacks]))
    return None


LOCK_ARGS = WORKLOADS_NOFP["unwind_lock_nofp"]
for mode in ([], ["--uprobes"]):
    what = "lockstat %s" % (" ".join(mode) or "(futex)")
    truth, recs = traced_json([LS, "-U", *mode], "unwind_lock_nofp", LOCK_ARGS)
    waiter = next(t for t in truth["threads"] if t["name"] == "uw_mutex")
    chain = waiter["callers"] + [waiter["function"]]
    start_rec = recs[0] if recs else {}
    check(start_rec.get("options", {}).get("unwind") == "dwarf" and start_rec.get("unwind_tables", {}).get("rows", 0) > 0,
          "%s: start record says unwind dwarf with tables (%s)" % (what, start_rec.get("unwind_tables")))
    locks = [r for r in recs if is_type(r, "lockstat", "lock") and r.get("symbol") == "g_mu"]
    if check(len(locks) == 1, "%s: one record for g_mu (%d)" % (what, len(locks))):
        r = locks[0]
        steal_us, truth_us = truth["steal_ns"] / 1000.0, waiter["blocked_ns"] / 1000.0
        got_us = r["wait_total_ns"] / 1000.0
        check(within(got_us, truth_us, rel=TOL) or truth_us - 1.05 * steal_us <= got_us <= truth_us,
              "%s: g_mu waited %.1f ms vs the workload's %.1f ms (5%%, or below by at most the steal)"
              % (what, got_us / 1e3, truth_us / 1e3))
        frames = chain_stack([s["user_stack"] for s in r["sites"]], chain, what)
        if frames:
            print("   %s: %s" % (what, ";".join(frames)))
    summ = [x for x in recs if is_type(x, "lockstat", "summary")]
    dq = summ[-1]["data_quality"] if summ else {}
    check(dq.get("lost_stacks", 1) == 0 and dq.get("ustack_truncated", 1) == 0,
          "%s: no stack lost or truncated: %s" % (what, dq))

truth, recs = traced_json([PM], "unwind_lock_nofp", LOCK_ARGS)
waiter = next(t for t in truth["threads"] if t["name"] == "uw_mutex")
locks = [r for r in recs if is_type(r, "pmheld", "lock") and r.get("symbol") == "g_mu"]
if check(len(locks) == 1, "pmheld: one record for g_mu (%d)" % len(locks)):
    r = locks[0]
    rounds = int(LOCK_ARGS[0])
    check(r["hold_count"] == 2 * rounds, "pmheld: g_mu held %d times (holder + waiter, %d rounds each)"
          % (r["hold_count"], rounds))
    frames = chain_stack([s["user_stack"] for s in r["stacks"]],
                         waiter["callers"] + [waiter["function"]], "pmheld acquiring stacks")
    if frames:
        print("   pmheld: %s" % ";".join(frames))
summ = [x for x in recs if is_type(x, "pmheld", "summary")]
dq = summ[-1]["data_quality"] if summ else {}
check(dq.get("lost_stacks", 1) == 0 and dq.get("ustack_truncated", 1) == 0, "pmheld: no stack lost or truncated: %s" % dq)

# perf agrees on the chain (perf run where its tracefs mount stays private)
tracefs_before = host_tracefs_mounted()
if perf:
    for wl in PERF_CHECKED:
        args = WORKLOADS_NOFP[wl]
        with tempfile.TemporaryDirectory() as d:
            data = os.path.join(d, "perf.data")
            ctl, ack = os.path.join(d, "ctl"), os.path.join(d, "ack")
            os.mkfifo(ctl)
            os.mkfifo(ack)
            w = subprocess.Popen([workload(wl), *args, "-1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True)
            # started disabled (-D -1) and enabled through its control fifo, whose ack says
            # the events are on: perf prints nothing when it has attached
            p = subprocess.Popen(with_private_tracefs(
                                 [perf, "record", "-o", data, "--call-graph", "dwarf,8192", "-D", "-1",
                                  "--control", "fifo:%s,%s" % (ctl, ack), "-e", "sched:sched_switch",
                                  "-p", str(w.pid)]),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            with open(ctl, "w") as c, open(ack) as a:
                c.write("enable\n")
                c.flush()
                check(a.readline().strip() == "ack", "%s: perf record enabled" % wl)
            truth = json.loads(w.communicate(input="go\n", timeout=60)[0])
            perr = p.communicate(timeout=60)[1]
            if not check(p.returncode == 0, "%s: perf record ran (%r)" % (wl, perr[-200:])):
                continue
            samples = perf_script_stacks(perf, data)
            for t in truth["threads"]:
                chain = t["callers"] + [t["function"]]
                mine = [s for s in samples if s["tid"] == t["tid"]]
                ok = sum(chain_in_order(list(reversed(s["frames"])), chain) for s in mine)
                # the mutex waiter also switches out while spinning for the holder (outside the chain)
                check(mine and ok >= (len(mine) + 1) // 2 if t["name"] != "uw_mutex" else ok >= 1,
                      "%s %s: perf --call-graph dwarf shows the chain in %d of %d samples" % (
                          wl, t["name"], ok, len(mine)))
else:
    print("perf not installed: cross-check not run (scripts/install-deps installs linux-perf)")
check(host_tracefs_mounted() == tracefs_before,
      "perf left the host's tracefs as it was (mounted before: %s, after: %s)" % (tracefs_before, host_tracefs_mounted()))

elapsed = time.monotonic() - T0
check(elapsed < 60, "the whole test ran in %.1f s (< 60 s)" % elapsed)
finish()
