"""CLI, process and session hardening shared by every tool (issue 9, issue 8 item 7).

- stdout on /dev/full: exit 1 and "TOOL: cannot write output: No space left on device",
  in every mode (text, -j, --help, --ebpf) of all six tools; a report boundary
  (SIGUSR1) while a report is blocked on a full pipe does not fail the write;
- argv fuzz over all six tools (long arguments, random option soup): no crash, no
  hang, exit codes only 0/1/2, one stderr line for a usage error, nothing left in
  $TMPDIR;
- (Ctrl-C and SIGKILL during the compile, TMPDIR: test_compile_interrupt.py)
- -p lists: 10,000 ids refused at once, a long live list starts fast (map filter)
  and filters right, a list with one dead PID traces the rest and names the dead one;
- naptime -p stops by itself when its target exits;
- while each tool runs it holds BPF programs and perf-event/link fds (read from
  /proc/PID/fd and fdinfo); after Ctrl-C none of its programs is still loaded.
"""
import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(__file__))
from harness import (bpf_fds, bpf_prog_ids, check, finish, leftover_bpf_programs, ndjson,  # noqa: E402
                     start, stop, tool, wait_attached, workload)
from cli_util import ENV, SLEEPER, TOOLS, end, pool, ready_process, run, sleeper, tmp_left  # noqa: E402


def tool_args(t, mode):
    """A short real run of tool t (~0.3 s of tracing) in `mode`."""
    base = {
        "runqlen": ["0.3", "1"],
        "offcputime": ["0.3"],
        "lockstat": ["-i", "0.3", "-c", "1"],
        "pmheld": ["-p", str(sleeper.pid), "-d", "0.3"],
        "naptime": ["-d", "0.3"],
        "profile": ["-d", "0.3"],
        "threadpool": ["-p", str(pool.pid), "-i", "0.3", "-d", "0.3"],
    }[t]
    if mode == "text":
        return base
    if mode == "-j":
        return ["-j"] + base
    if mode == "--help":
        return ["--help"]
    return ["--ebpf"] + base


# --- 0. BPF objects while running, none left after exit -------------------------------
for t in TOOLS:
    args = {"pmheld": ["-p", str(sleeper.pid)], "threadpool": ["-p", str(pool.pid)]}.get(t, [])
    p = start([tool(t)] + args, env=ENV)
    seen = wait_attached(p)
    fds = bpf_fds(p.pid)
    ids = fds["prog_ids"]
    loaded = bpf_prog_ids() or set()
    out, err, rc = stop(p)
    check(seen and fds["prog"] > 0 and len(ids) == fds["prog"] and fds["link"] + fds["perf_event"] > 0,
          "%s attached (%s): holds %d BPF programs, %d links, %d perf events, %d maps" % (
              t, seen, fds["prog"], fds["link"], fds["perf_event"], fds["map"]))
    check(ids and ids <= loaded, "%s: its programs %s are among the %d the kernel lists" % (
        t, sorted(ids), len(loaded)))
    left = leftover_bpf_programs(ours=ids)
    check(rc == 0 and left == [], "%s: Ctrl-C -> exit 0 and none of its programs left (rc %d, left %s)" % (
        t, rc, left))

# --- 1. output errors ---------------------------------------------------------------
# (independent runs, three at a time: a robustness check, no figure to disturb)
def to_full(t, mode):
    with open("/dev/full", "w") as full:
        return run([tool(t)] + tool_args(t, mode), stdout=full)


modes = [(t, mode) for t in TOOLS for mode in ("text", "-j", "--help", "--ebpf")]
with ThreadPoolExecutor(max_workers=3) as ex:
    results = list(ex.map(lambda tm: to_full(*tm), modes))
for (t, mode), r in zip(modes, results):
    want = "%s: cannot write output: No space left on device" % t
    check(r.returncode == 1 and want in r.stderr,
          "%s %s > /dev/full -> exit 1 and %r (got %d, %r)" % (t, mode, want, r.returncode,
                                                               r.stderr.strip()[-200:]))
check(tmp_left() == [], "nothing left in TMPDIR after the /dev/full runs: %s" % tmp_left())

# A report boundary (SIGUSR1) while a report is blocked on a full pipe: the write goes on
# (it failed with EINTR: "cannot write output: Input/output error", exit 1, the rest of
# the output lost). lockstat -P on 500 waiting threads writes ~700 KB; stdout is not read
# until after both signals.
crowd = subprocess.Popen([workload("lock_crowd"), "--threads", "500", "--duration-ms", "20000"],
                         stdout=subprocess.PIPE, text=True)
try:
    crowd.stdout.readline()
    ls = subprocess.Popen([tool("lockstat"), "-p", str(crowd.pid), "-U", "-P", "-j", "-n", "0", "-s", "10",
                           "-d", "6"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    first = ls.stdout.readline()  # the start record: attached, the handlers are in place
    time.sleep(2)
    ls.send_signal(signal.SIGUSR1)
    time.sleep(1.5)
    ls.send_signal(signal.SIGUSR1)
    time.sleep(3)
    out, err = ls.communicate(timeout=60)
finally:
    crowd.kill()
    crowd.wait()
recs = ndjson(first + out, "lockstat")
summaries = [r for r in recs if r["type"] == "lockstat.summary"]
# (the second boundary may come while the first report is still blocked: one report)
check(ls.returncode == 0 and len(summaries) >= 2 and summaries[-1]["final"],
      "lockstat -P -j with a full stdout pipe and two SIGUSR1s: exit %d, %d bytes, %d summaries "
      "(want 0 and 2-3, the last final) %s" % (ls.returncode, len(first + out), len(summaries), err.strip()[-150:]))

# --- 2. argv fuzz ---------------------------------------------------------------------
VOCAB = ["-p", "-t", "-j", "-v", "-T", "-C", "-f", "-U", "-K", "-u", "-k", "-m", "-M", "-i",
         "-s", "-n", "-d", "-F", "-L", "-h", "--json", "--pid", "--tid", "--sort", "--fields",
         "--comm", "--threads", "--min", "--stack-storage-size", "--map-size", "--uprobes",
         "--no-hist", "--cfs", "--", "-", "", "0", "1", "-1", "1.5", "1e9", "10ms", "0x10",
         "99999999999999999999", "abc", "%s%n", "pid", ",", ",,", "1,,2", "*", "(", "[a-",
         "\u00e9t\u00e9", "--pid=", "-p=", "=", "-pj", "--ebpf=1", "--json=false"]
rng = random.Random(20261123)
cases = []
for t in TOOLS:
    # long arguments: the std::regex matcher overflowed the stack on these
    for a in ["-" + "a" * 30000, "--" + "x" * 30000, "--pid=" + "1" * 30000, "-p" + "9" * 30000,
              "-" * 30000, "a" * 30000, "--fields=" + "+comm," * 5000, "-j" * 15000]:
        cases.append((t, [a, "--ebpf"]))
        cases.append((t, ["--ebpf", a]))
    for _ in range(40):
        args = [rng.choice(VOCAB) for _ in range(rng.randint(1, 6))]
        if rng.random() < 0.3:
            args.append("".join(chr(rng.randint(33, 126)) for _ in range(rng.randint(1, 40))))
        args.insert(rng.randint(0, len(args)), "--ebpf")  # parse-level: never traces
        cases.append((t, args))
bad = []
t0 = time.time()


def fuzz_run(case):
    t, args = case
    try:
        return run([tool(t)] + args, timeout=10)
    except subprocess.TimeoutExpired:
        return None


with ThreadPoolExecutor(max_workers=3) as ex:  # three at a time, as above
    fuzz_results = list(ex.map(fuzz_run, cases))
for (t, args), r in zip(cases, fuzz_results):
    if r is None:
        bad.append((t, args[:3], "hang"))
        continue
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    if r.returncode not in (0, 1, 2):
        bad.append((t, [a[:40] for a in args], "rc %d" % r.returncode))
    elif r.returncode == 2 and len(lines) != 1:
        bad.append((t, [a[:40] for a in args], "%d stderr lines" % len(lines)))
    elif r.returncode == 2 and len(lines[0]) > 400:
        bad.append((t, [a[:40] for a in args], "stderr line of %d chars" % len(lines[0])))
check(not bad, "argv fuzz: %d runs over %d tools in %.0f s, no crash/hang/odd exit: %s" % (
    len(cases), len(TOOLS), time.time() - t0, bad[:5]))
check(tmp_left() == [], "nothing left in TMPDIR after the fuzz: %s" % tmp_left())

# --- 4. PID lists ----------------------------------------------------------------------
t0 = time.time()
r = run([tool("naptime"), "-p", ",".join(str(i) for i in range(1, 10001)), "-d", "1"])
check(r.returncode == 2 and "too many PIDs" in r.stderr and time.time() - t0 < 2,
      "10,000 PIDs refused in %.2f s: %r" % (time.time() - t0, r.stderr.strip()))

other = ready_process(SLEEPER)  # sleeps too, not in the list
live = sorted(int(d) for d in os.listdir("/proc") if d.isdigit() and int(d) != other.pid)
ids = [sleeper.pid] + [p for p in live if p != sleeper.pid][:4000]
ids += list(range(4194300 - (4096 - len(ids)), 4194300))  # pad to 4096 with dead ones
t0 = time.time()
p = subprocess.Popen([tool("naptime"), "-j", "-p", ",".join(map(str, ids)), "-d", "1"],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
out, err = p.communicate(timeout=30)
took = time.time() - t0
recs = [x for x in ndjson(out) if x["type"] == "naptime.sleep"]
pids = {x["pid"] for x in recs}
check(p.returncode == 0 and took < 2.0 + 1.0, "naptime -p with 4096 ids (%d live): rc %d in %.2f s (1 s traced)" % (
    len(ids) - (4096 - len(live)), p.returncode, took))
check(sleeper.pid in pids and other.pid not in pids,
      "map-backed -p filter: listed sleeper traced (%d sleeps), unlisted one not (%s)" % (
          sum(1 for x in recs if x["pid"] == sleeper.pid), other.pid in pids))
other.kill()
other.wait()

dead = subprocess.Popen(["true"])
dead.wait()
r = run([tool("naptime"), "-j", "-p", "%d,%d" % (sleeper.pid, dead.pid), "-d", "0.5"])
recs = [x for x in ndjson(r.stdout) if x["type"] == "naptime.sleep"]
check(r.returncode == 0 and str(dead.pid) in r.stderr and any(x["pid"] == sleeper.pid for x in recs),
      "-p live,dead: traces the live one (%d sleeps), names the dead one: %r" % (len(recs), r.stderr.strip()))
r = run([tool("naptime"), "-p", "%d" % dead.pid, "-d", "0.5"])
check(r.returncode == 2, "-p with no live PID -> exit 2 (%d, %r)" % (r.returncode, r.stderr.strip()))

# --- 5. target exit stops naptime -p ---------------------------------------------------
short = subprocess.Popen([sys.executable, "-c", "import time\nfor _ in range(20): time.sleep(0.05)\ntime.sleep(0.5)\n"])
t0 = time.time()
p = subprocess.Popen([tool("naptime"), "--summary", "-p", str(short.pid)], stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True, env=ENV)
try:
    out, err = p.communicate(timeout=15)
except subprocess.TimeoutExpired:
    p.kill()
    out, err = p.communicate()
short.wait()
check(p.returncode == 0 and "PID %d exited" % short.pid in err and "SLEEPS" in out,
      "naptime -p stops when the target exits, with its report and a note (rc %s, %.1f s, %r)" % (
          p.returncode, time.time() - t0, err.strip()))

end()
finish()
