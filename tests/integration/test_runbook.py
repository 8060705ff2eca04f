#!/usr/bin/env python3
"""runbook (issue 12): one run per runbook against a bundled workload with ground truth;
the report's findings are checked against the workload's own numbers, run.json against
what ran, every NDJSON line against its tool's schema.

- lock-contention vs mutex_contention: the top finding names cache_lock, its wait within
  10% of the workload's own total; pmheld's hold total within 10% (+25 us per hold).
- sleepy-process vs sleepers: naptime's finding counts every sleep the workload issued
  and their total within 2% (+0.2 ms per sleep).
- cpu-saturation vs busyloops (4 loops, 2 CPUs): the run-queue finding is a problem and
  its average within 0.3 of every task's run_delay over the window (/proc schedstat,
  task by task; runqlen's final report covers the window: runbook's SIGUSR1 boundary).
- slow-service vs demo_app: lockstat's top lock is stats_lock; threadpool's verdict for
  the worker pool is the tool's own; every tool's section and data quality present.
- doctor vs sleepers_nofp: a frame-pointer warning for the target is a finding.
Also: bad usage exits 2 with one line; --list names every runbook; Ctrl-C ends the
window early and the report is still written; a tool that cannot run (threadpool
without -p) is reported as failed; a program that is not the suite's refuses the
runbook (test_runbook_security.py has the hostile cases).
"""
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import check, finish, require_built, require_root, run, usage_error, within, workload, BIN  # noqa: E402
from runbook_util import RUNBOOK, check_ranking, check_report_dir, findings, number, run_runbook, safe_tmpdir  # noqa: E402

require_root()
require_built(RUNBOOK, workload("mutex_contention"), workload("sleepers"), workload("busyloops"),
              workload("demo_app"), workload("sleepers_nofp"))
TMP = tempfile.mkdtemp(prefix="bpfdiag-runbook-test-")
HAVE_PROFILE = os.access(os.path.join(BIN, "profile"), os.X_OK)

# --- usage -------------------------------------------------------------------------------
usage_error([RUNBOOK])
usage_error([RUNBOOK, "no-such-runbook"])
usage_error([RUNBOOK, "slow-service", "-d", "abc"])
usage_error([RUNBOOK, "slow-service", "-p", "999999999"])
usage_error([RUNBOOK, "slow-service", "extra"])
lst = run([RUNBOOK, "--list"])
for n in ("slow-service", "lock-contention", "cpu-saturation", "sleepy-process", "doctor"):
    check(lst.returncode == 0 and n in lst.stdout, "--list names %s" % n)


def show(name, fs):
    print("     %s findings:" % name)
    for f in fs:
        print("       [%s] %s — %s (%s)" % ("x" if f["fine"] else " ", f["text"], f["number"], f["tool"]))


# --- 1. lock-contention vs mutex_contention ---------------------------------------------------
out = os.path.join(TMP, "lock")
go = os.path.join(TMP, "go")
w = subprocess.Popen([workload("mutex_contention"), "--go-file", go, "--threads", "4", "--hold-us", "500",
                      "--gap-us", "200", "--hold-mode", "sleep", "--duration-ms", "2000"],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
ready = w.stderr.readline()
rc, so, se, attached = run_runbook(["lock-contention", "-p", str(w.pid), "-d", "60", "-o", out],
                                   on_attached=lambda: open(go, "w").close())
wo, _ = w.communicate(timeout=60)
gt = json.loads(wo.strip().splitlines()[-1])
check(rc == 0 and attached, "lock-contention: runbook exits 0 after every tool attached (rc %d, %r)" % (rc, se[-300:]))
rj, recs = check_report_dir(out, "lock-contention", ["lockstat", "pmheld", "offcputime"], w.pid)
fs = findings(out)
show("lock-contention", fs)
check_ranking("lock-contention", out, recs)
top = fs[0] if fs else {"text": "", "number": "", "tool": ""}
ms = number(top["number"], " ms waited")
check(top["tool"] == "lockstat" and "cache_lock" in top["text"] and ms is not None and
      within(ms * 1e6, gt["total_wait_ns"], rel=0.10),
      "lock-contention: top finding names cache_lock, %s ms waited vs the workload's own %.1f ms (10%%)"
      % (ms, gt["total_wait_ns"] / 1e6))
lock = [r for r in recs.get("lockstat", []) if r["type"] == "lockstat.lock" and r.get("symbol") == "cache_lock"]
check(lock and "%.1f ms waited" % (lock[-1]["wait_total_ns"] / 1e6) in top["number"] and lock[-1]["reading"] in top["text"],
      "lock-contention: the finding is lockstat's own record (wait_total_ns, reading)")
held = [f for f in fs if f["tool"] == "pmheld"]
hms = number(held[0]["number"], " ms held") if held else None
check(held and "cache_lock" in held[0]["text"] and hms is not None and
      within(hms * 1e6, gt["hold_ns"], rel=0.10, abs_=25000 * gt["acquisitions"]),
      "lock-contention: pmheld finding names cache_lock, held %s ms vs the workload's %.1f ms" % (hms, gt["hold_ns"] / 1e6))
check(any(f["tool"] == "offcputime" for f in fs) and os.path.getsize(os.path.join(out, "offcputime.folded")) > 0
      and open(os.path.join(out, "offcputime.svg")).read().startswith("<?xml"),
      "lock-contention: offcputime finding, folded stacks and flame graph SVG")
folded = open(os.path.join(out, "offcputime.folded")).read()
check("update_cache" in folded, "lock-contention: the folded off-CPU stacks name update_cache")

# --- 2. sleepy-process vs sleepers -------------------------------------------------------
out = os.path.join(TMP, "sleepy")
w = subprocess.Popen([workload("sleepers"), "--no-sleep1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
json.loads(w.stdout.readline())


def go_sleepers():
    w.stdin.write("go\n")
    w.stdin.flush()


rc, so, se, attached = run_runbook(["sleepy-process", "-p", str(w.pid), "-d", "60", "-o", out], on_attached=go_sleepers)
wo, _ = w.communicate(timeout=60)
gt = json.loads(wo.strip().splitlines()[-1])
check(rc == 0 and attached, "sleepy-process: runbook exits 0 (rc %d, %r)" % (rc, se[-300:]))
rj, recs = check_report_dir(out, "sleepy-process", ["naptime", "offcputime"], w.pid)
fs = findings(out)
show("sleepy-process", fs)
check_ranking("sleepy-process", out, recs)
nap = [f for f in fs if f["tool"] == "naptime"]
truth_n = len(gt["sleeps"])
truth_ms = sum(s["slept_ns"] for s in gt["sleeps"]) / 1e6
got_n = int(nap[0]["text"].split()[0]) if nap else -1
got_ms = number(nap[0]["number"], " ms asleep") if nap else None
check(got_n == truth_n, "sleepy-process: naptime finding counts %d sleeps, the workload issued %d" % (got_n, truth_n))
# The workload times each call from outside it (clock reads around the call): a
# preemption between its clock read and the syscall, or after the syscall returns, is
# in its time and not in naptime's. Under load that was 9 ms over 11 sleeps (281.1 vs
# 290.2 ms); the workload's run-queue wait around each call (schedstat) bounds it.
delay_ms = sum(s.get("run_delay_ns", 0) for s in gt["sleeps"]) / 1e6
check(got_ms is not None and within(got_ms, truth_ms, rel=0.02, abs_=0.2 * truth_n + delay_ms),
      "sleepy-process: %s ms asleep vs the workload's own %.1f ms (2%% + 0.2 ms/sleep + its %.1f ms "
      "of run-queue wait around the calls)" % (got_ms, truth_ms, delay_ms))

# --- 3. cpu-saturation vs busyloops ------------------------------------------------------


def run_delay_ns():
    """{task path: run_delay ns} of every task now."""
    delays = {}
    for f in glob.glob("/proc/[0-9]*/task/[0-9]*/schedstat"):
        try:
            delays[f] = int(open(f).read().split()[1])
        except (OSError, ValueError, IndexError):
            pass
    return delays


def run_delay_delta(d0, d1):
    """Run delay accrued between two snapshots, task by task. A task gone by the second
    (runbook's tools exit before it) is left out: subtracting its run delay before the
    window (their BPF compiles wait for the CPUs) would take time off the window's."""
    return sum(v - d0.get(k, 0) for k, v in d1.items())


out = os.path.join(TMP, "cpu")
w = subprocess.Popen([workload("busyloops"), "4", "30"], stdout=subprocess.PIPE, text=True)
snap = {}


def at_window():
    snap["t0"], snap["d0"] = time.monotonic(), run_delay_ns()


rc, so, se, attached = run_runbook(["cpu-saturation", "-p", str(w.pid), "-d", "4", "-o", out], on_attached=at_window)
# the window ended a moment before runbook returned: close enough for +-0.3 of a queue
t1, d1 = time.monotonic(), run_delay_ns()
w.kill()
w.wait()
check(rc == 0 and attached, "cpu-saturation: runbook exits 0 (rc %d, %r)" % (rc, se[-300:]))
rj, recs = check_report_dir(out, "cpu-saturation", ["runqlen", "profile", "offcputime"], w.pid)
fs = findings(out)
show("cpu-saturation", fs)
check_ranking("cpu-saturation", out, recs)
cpus = os.cpu_count()
truth = run_delay_delta(snap["d0"], d1) / ((t1 - snap["t0"]) * 1e9) / cpus if snap else -1
rq = [f for f in fs if f["tool"] == "runqlen"]
avg = number(rq[0]["number"], ",") if rq else None
check(rq and not rq[0]["fine"] and avg is not None and within(avg, truth, rel=0.2, abs_=0.3),
      "cpu-saturation: run-queue finding is a problem, avg %s vs every task's run_delay %.2f per CPU (20%% or 0.3)" % (avg, truth))
check("has no -p" in open(os.path.join(out, "report.md")).read(), "cpu-saturation: the report says runqlen measured the whole machine")
# SIGUSR1 at the window's start: each tool's final report covers the window, not its
# own attach onwards (runqlen attaches first and saw the others' BPF compiles: 5.4 s of
# its 4 s window before the boundary)


def check_window(book, rj, recs, names):
    """Every tool's final report covers the runbook's window (issue 21: a threadpool
    summary covered 16.85 s of a 10 s runbook, its own attach onwards). Within 2%, or
    0.35 s: how late a tool under load reacts to the boundary and the stop (quiet, all
    within 0.3%; with a CI run beside it, runqlen's stop came 0.26 s late)."""
    window_s = (rj["window_end_ns"] - rj["window_start_ns"]) / 1e9
    for name in names:
        kind = name + (".group" if name == "threadpool" else ".summary")
        fin = [r for r in recs.get(name, []) if r.get("type") == kind and r.get("final")]
        got = fin[-1]["interval_ns"] / 1e9 if fin else None
        check(got is not None and within(got, window_s, rel=0.02, abs_=0.35),
              "%s: %s's final report covers %s s of the %.3f s window (2%% or 0.35 s)" % (book, name, got, window_s))


check_window("cpu-saturation", rj, recs, ("runqlen", "profile", "offcputime"))
prof = [f for f in fs if f["tool"] == "profile"]
if HAVE_PROFILE:
    check(prof and "busyloops" in prof[0]["text"] and os.path.exists(os.path.join(out, "profile.svg")),
          "cpu-saturation: profile's hottest stack is busyloops' (%s)" % (prof[0]["text"] if prof else None))
else:
    check(prof and "profile failed" in prof[0]["text"] and "not found" in prof[0]["text"],
          "cpu-saturation: profile is not built here; the report says so (%s)" % (prof[0]["text"] if prof else None))

# --- 4. slow-service vs demo_app ---------------------------------------------------------
out = os.path.join(TMP, "slow")
w = subprocess.Popen([workload("demo_app"), "60", "4", "3"], stdout=subprocess.PIPE, text=True)
time.sleep(0.5)  # its threads exist (threadpool groups them by name)
rc, so, se, attached = run_runbook(["slow-service", "-p", str(w.pid), "-d", "5", "-o", out])
w.kill()
w.wait()
check(rc == 0 and attached, "slow-service: runbook exits 0 (rc %d, %r)" % (rc, se[-300:]))
rj, recs = check_report_dir(out, "slow-service", ["threadpool", "offcputime", "lockstat", "runqlen", "profile"], w.pid)
check_window("slow-service", rj, recs, ("threadpool", "offcputime", "lockstat", "runqlen", "profile"))
fs = findings(out)
show("slow-service", fs)
check_ranking("slow-service", out, recs)
lk = [f for f in fs if f["tool"] == "lockstat"]
check(lk and "stats_lock" in lk[0]["text"], "slow-service: lockstat's top lock is stats_lock (%s)" % (lk[0]["text"] if lk else None))
groups = [r for r in recs.get("threadpool", []) if r["type"] == "threadpool.group" and r["final"] and r["group"] == "worker"]
tp = [f for f in fs if f["tool"] == "threadpool" and "'worker'" in f["text"]]
check(groups and tp and (": %s — " % groups[-1]["verdict"]) in tp[0]["text"],
      "slow-service: the worker pool's finding carries threadpool's own verdict (%s)" % (tp[0]["text"] if tp else None))
rq = [f for f in fs if f["tool"] == "runqlen"]
check(rq and not rq[0]["fine"], "slow-service: 7 busy threads on %d CPUs: the run queue is a problem finding" % cpus)
check("report: " in so and "findings" in so, "slow-service: findings and the report's path on stdout")

# --- 5. doctor vs sleepers_nofp ----------------------------------------------------------
out = os.path.join(TMP, "doctor")
w = subprocess.Popen([workload("sleepers_nofp"), "--no-sleep1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
json.loads(w.stdout.readline())
rc, so, se, attached = run_runbook(["doctor", "-p", str(w.pid), "-o", out])
w.kill()
w.wait()
check(rc == 0, "doctor: runbook exits 0 (rc %d, %r)" % (rc, se[-300:]))
rj, recs = check_report_dir(out, "doctor", ["doctor"], w.pid)
fs = findings(out)
show("doctor", fs)
# doctor's checks of the target in Machine checks: sleepers_nofp has no frame pointers but
# .eh_frame, which our stack tools unwind by default: covered, ok, not a finding
checks = [r for r in recs.get("doctor", []) if r["type"] == "doctor.check"]
fp = [c for c in checks if c["name"] == "exe_frame_pointers"]
md = open(os.path.join(out, "report.md")).read()
check(fp and fp[-1]["status"] == "ok" and "covered" in fp[-1]["detail"] and "[ok] exe_frame_pointers: " in md,
      "doctor: the target without frame pointers is covered by our unwinding, in Machine checks (%s)"
      % (fp[-1]["detail"][:120] if fp else None))
bad = sorted(c["name"] for c in checks if c["status"] in ("warn", "fail"))
said = sorted(f["text"].split(":")[0][len("check "):] for f in fs if f["tool"] == "doctor" and f["text"].startswith("check "))
check(bad == said and not any(f["text"].startswith("check exe_frame_pointers") for f in fs),
      "doctor: every warn/fail check is a finding, nothing else (%s vs %s)" % (bad, said))
summ = [r for r in recs.get("doctor", []) if r["type"] == "doctor.summary"]
check(summ and any(("machine verdict: %s" % summ[-1]["verdict"]) == f["text"] for f in fs),
      "doctor: the machine verdict finding is doctor's own")

# --- 6. Ctrl-C ends the window early; the report is still written --------------------------
out = os.path.join(TMP, "ctrlc")
p = subprocess.Popen([RUNBOOK, "sleepy-process", "-d", "600", "-o", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
t0 = time.monotonic()
buf = b""
while b"all tools attached" not in buf and time.monotonic() - t0 < 150:
    buf += p.stderr.read1(4096) if hasattr(p.stderr, "read1") else p.stderr.read(1)
time.sleep(1)
p.send_signal(signal.SIGINT)
so, se = p.communicate(timeout=120)
rjp = os.path.join(out, "run.json")
rj = json.load(open(rjp)) if os.path.exists(rjp) else {}
check(p.returncode == 0 and rj.get("interrupted") is True and os.path.exists(os.path.join(out, "report.html")),
      "Ctrl-C: runbook exits 0, run.json says interrupted, report.html written (rc %d)" % p.returncode)
check(all(t["status"] == "exit 0" for t in rj.get("tools", [])), "Ctrl-C: every tool stopped with its final report")

# --- 7. a tool that cannot run is reported, the rest still runs --------------------------
# (threadpool needs -p; runbook files must be in directories only root can write: not /tmp)
rbdir = safe_tmpdir("bpfdiag-runbook-books-")
with open(os.path.join(rbdir, "broken.runbook"), "w") as f:
    f.write("title: broken\ntool: threadpool\ntool: naptime\n")
os.chmod(os.path.join(rbdir, "broken.runbook"), 0o644)
out = os.path.join(TMP, "broken")
r = run([RUNBOOK, "broken", "-d", "1", "-o", out], timeout=180, env=dict(os.environ, BPFDIAG_RUNBOOKS=rbdir))
fs = findings(out) if os.path.exists(os.path.join(out, "report.md")) else []
check(r.returncode == 0 and fs and "threadpool failed" in fs[0]["text"] and "-p PID is required" in fs[0]["text"],
      "a tool that cannot run is the first finding, with its error; the report is written (%s)" % (fs[0]["text"] if fs else None))
check(any(f["tool"] == "naptime" for f in fs), "the other tool of the runbook still reported")
# a PID list (a process pool: nginx's workers) to a runbook with threadpool: threadpool
# takes the list as one pool (tests/integration/test_threadpool_procpool.py checks the
# numbers on nginx); runbook hands it the list and it runs, as naptime does
sleepers = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
plist = ",".join(str(p.pid) for p in sleepers)
with open(os.path.join(rbdir, "pool.runbook"), "w") as f:
    f.write("title: pool\ntool: threadpool\ntool: naptime\n")
os.chmod(os.path.join(rbdir, "pool.runbook"), 0o644)
out = os.path.join(TMP, "pool")
r = run([RUNBOOK, "pool", "-p", plist, "-d", "1", "-o", out], timeout=180, env=dict(os.environ, BPFDIAG_RUNBOOKS=rbdir))
for p in sleepers:
    p.kill()
    p.wait()
fs = findings(out) if os.path.exists(os.path.join(out, "report.md")) else []
rjp = os.path.join(out, "run.json")
rj = json.load(open(rjp)) if os.path.exists(rjp) else {}
tp = next((t for t in rj.get("tools", []) if t["name"] == "threadpool"), {})
check(r.returncode == 0 and tp.get("status") == "exit 0" and tp.get("command", [])[2:4] == ["-p", plist]
      and not any("not run" in f["text"] for f in fs) and any(f["tool"] == "naptime" for f in fs),
      "-p with a PID list: threadpool is handed the list and runs, naptime runs (rc %d, %s, %s)"
      % (r.returncode, tp.get("status"), [f["text"] for f in fs][:2]))
# a program that is not the suite's refuses the runbook before anything runs
with open(os.path.join(rbdir, "alien.runbook"), "w") as f:
    f.write("title: alien\ntool: naptime\ntool: no-such-tool\n")
os.chmod(os.path.join(rbdir, "alien.runbook"), 0o644)
r = run([RUNBOOK, "alien", "-d", "1", "-o", os.path.join(TMP, "alien")], env=dict(os.environ, BPFDIAG_RUNBOOKS=rbdir))
check(r.returncode == 2 and "alien.runbook:3: 'no-such-tool' is not a tool of the suite" in r.stderr
      and not os.path.exists(os.path.join(TMP, "alien")),
      "a tool that is not the suite's: exit 2 naming the line, nothing run (%r)" % r.stderr.strip())
shutil.rmtree(rbdir, ignore_errors=True)

shutil.rmtree(TMP, ignore_errors=True)
finish()
