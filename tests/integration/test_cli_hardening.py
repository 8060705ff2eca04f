"""CLI, process and session hardening shared by every tool (issue 9, issue 8 item 7).

- stdout on /dev/full: exit 1 and "TOOL: cannot write output: No space left on device",
  in every mode (text, -j, --help, --ebpf) of all six tools; a report boundary
  (SIGUSR1) while a report is blocked on a full pipe does not fail the write;
- argv fuzz over all six tools (long arguments, random option soup): no crash, no
  hang, exit codes only 0/1/2, one stderr line for a usage error, nothing left in
  $TMPDIR;
- Ctrl-C during the compile ends every tool at once (exit 130, 4 of 4 runs each, the
  compile never finished); SIGKILL during it
  leaves at most a dir the next run sweeps; TMPDIR is honoured (read-only /tmp);
- -p lists: 10,000 ids refused at once, a long live list starts fast (map filter)
  and filters right, a list with one dead PID traces the rest and names the dead one;
- naptime -p stops by itself when its target exits;
- while each tool runs it holds BPF programs and perf-event/link fds (read from
  /proc/PID/fd and fdinfo); after Ctrl-C none of its programs is still loaded.
"""
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from harness import (bpf_fds, bpf_prog_ids, check, finish, leftover_bpf_programs, ndjson,  # noqa: E402
                     require_built, require_root, start, stop, tool, wait_attached, wait_for, workload)

require_root()
require_built(tool("doctor"))  # the tool registry: every tracer but doctor (a checker)
TOOLS = [r["tool"] for r in ndjson(subprocess.run([tool("doctor"), "--list", "-j"], stdout=subprocess.PIPE,
                                                  text=True).stdout) if r["tool"] != "doctor"]
require_built(*[tool(t) for t in TOOLS])

# outside /tmp: one check below makes /tmp read-only
TMP = tempfile.mkdtemp(prefix="hard-cli-tmpdir-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None)
T_START = time.time()
ENV = dict(os.environ, TMPDIR=TMP)
PY_THREADS = ("import threading,time\n"
              "for _ in range(3): threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()\n"
              "print('ready', flush=True)\n"
              "while True: time.sleep(0.05)\n")
SLEEPER = "import time\nprint('ready', flush=True)\nwhile True: time.sleep(0.05)\n"


def tmp_left():
    return sorted(os.listdir(TMP))


def run(args, timeout=20, stdout=subprocess.PIPE, env=ENV):
    return subprocess.run(args, stdout=stdout, stderr=subprocess.PIPE, text=True,
                          timeout=timeout, env=env)


def ready_process(code):
    """A python process that has run its setup (it says "ready")."""
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    check(p.stdout.readline().strip() == "ready", "helper process %d ready" % p.pid)
    return p


pool = ready_process(PY_THREADS)
sleeper = ready_process(SLEEPER)


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
for t in TOOLS:
    for mode in ("text", "-j", "--help", "--ebpf"):
        with open("/dev/full", "w") as full:
            r = run([tool(t)] + tool_args(t, mode), stdout=full)
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
for t, args in cases:
    try:
        r = run([tool(t)] + args, timeout=10)
    except subprocess.TimeoutExpired:
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

# --- 3. signals during compile, SIGKILL, TMPDIR -----------------------------------------
# These are about the compile (its header shim in TMPDIR): the compiled-object cache
# (common/bpf_object.h) is off for them, or a cached start would skip the compile.
NOCACHE = dict(ENV, BPFDIAG_CACHE="0")
def catches_sigint(pid):
    """The process has its own SIGINT handler (SigCgt bit 1): before that, a Ctrl-C is
    the kernel's default action on a process still starting (exec, dynamic loading),
    not a test of the tool."""
    try:
        with open("/proc/%d/status" % pid) as f:
            caught = next(l for l in f if l.startswith("SigCgt:")).split()[1]
        return bool(int(caught, 16) & 2)
    except (OSError, StopIteration):
        return False


def compiling(pid):
    """The tool is inside its compile: its header shim dir (bpfdiag-kheaders-PID-...)
    exists in TMPDIR. It is created before clang runs and removed after the compile,
    before anything is attached, so a Ctrl-C now must end the tool with 130."""
    return any(n.startswith("bpfdiag-kheaders-%d-" % pid) for n in tmp_left())


def target_args(t):
    """What tool t needs to start tracing (a target for the tools that require one)."""
    return {"pmheld": ["-p", str(sleeper.pid)], "threadpool": ["-p", str(pool.pid)]}.get(t, [])


def private_cache_env():
    """ENV with a compiled-object cache of its own, empty: a start misses it and compiles."""
    cache = tempfile.mkdtemp(prefix="hard-cli-ctrlc-cache-", dir=os.path.dirname(TMP))
    env = dict(ENV, BPFDIAG_CACHE_DIR=cache)
    env.pop("BPFDIAG_CACHE", None)
    return cache, env


def compile_ms(t):
    """How long tool t's compile takes here, now (BPFDIAG_TIMING's "libbcc compile + maps"
    phase of an uninterrupted start on an empty private cache): the yardstick for
    "promptly" below. Also the control for "the cache stays empty": a finished compile
    stores its object there."""
    cache, env = private_cache_env()
    p = start([tool(t)] + target_args(t), env=dict(env, BPFDIAG_TIMING="1"))
    wait_attached(p)
    out, err, rc = stop(p)
    cached = os.listdir(cache)
    shutil.rmtree(cache)
    check(len(cached) >= 1, "%s: an uninterrupted start stores its compiled object in an empty private cache (%s)" % (
        t, cached))
    for line in err.splitlines():
        if "bpfdiag-timing: libbcc compile + maps" in line:
            return float(line.split("+ maps")[1].split("ms")[0])
    check(False, "%s: BPFDIAG_TIMING=1 reports its compile (rc %d, %r)" % (t, rc, err.strip()[-300:]))
    return 0.0


# Every tool, 4 runs each, each interrupted while its compile is under way: the Ctrl-C
# is sent as soon as the header shim dir exists (it is made just before clang starts and
# removed once the compile is over, before anything is attached), so "the compile won"
# is not an outcome. Each run has a private, empty compiled-object cache: it misses (so
# the tool compiles), and it stays empty only if the compile never finished, which a
# tool that noted the signal and acted on it after its compile would not manage (it
# stores the object as soon as it is compiled). 130 in 4 of 4 runs, and promptly: before
# an uninterrupted compile (measured just before) would have ended, and within 1 s.
CTRL_C_RUNS = 4
for t in TOOLS:
    budget_ms = min(compile_ms(t), 1000.0)
    good, runs = 0, []
    for _ in range(CTRL_C_RUNS):
        cache, env = private_cache_env()
        p = subprocess.Popen([tool(t)] + target_args(t), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env)
        wait_for(lambda: catches_sigint(p.pid) or p.poll() is not None, 10, "%s's SIGINT handler" % t)
        deadline = time.time() + 20
        while not compiling(p.pid) and p.poll() is None and time.time() < deadline:
            time.sleep(0.0005)
        in_compile = compiling(p.pid)
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        p.wait(timeout=10)
        took_ms = (time.monotonic() - sent) * 1000
        out, err = p.communicate(timeout=10)
        attached = "Tracing" in err or "Sampling" in err  # the banner goes to stderr
        cached = os.listdir(cache)
        shutil.rmtree(cache)
        ok = (in_compile and p.returncode == 130 and not attached and not cached and took_ms < budget_ms
              and tmp_left() == [])
        good += ok
        runs.append("rc %d in %.0f ms%s%s%s%s" % (
            p.returncode, took_ms, "" if in_compile else ", shim dir not seen", ", attached" if attached else "",
            ", compile finished (cached %s)" % cached if cached else "", ", left %s" % tmp_left() if tmp_left() else ""))
    check(good == CTRL_C_RUNS,
          "%s: Ctrl-C during its compile -> exit 130 in < %.0f ms (its compile), compile not finished, "
          "not attached, nothing left in TMPDIR: %d of %d runs (%s)" % (t, budget_ms, good, CTRL_C_RUNS,
                                                                      "; ".join(runs)))

killed_left = []
for delay in (0.1, 0.2):
    p = subprocess.Popen([tool("naptime"), "-d", "5"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=NOCACHE)
    time.sleep(delay)
    p.kill()
    p.wait()
    killed_left += tmp_left()
r = run([tool("naptime"), "-d", "0.1"], env=NOCACHE)
check(r.returncode == 0 and tmp_left() == [],
      "SIGKILL during compile left %s; the next run swept it (rc %d, left %s)" % (
          killed_left, r.returncode, tmp_left()))

# read-only /tmp: only TMPDIR may be written
ro = "mount --bind /tmp /tmp && mount -o remount,bind,ro /tmp && "
r = subprocess.run(["unshare", "-m", "sh", "-c", ro + "TMPDIR=%s %s -d 0.2" % (TMP, tool("naptime"))],
                   capture_output=True, text=True, timeout=30, env=NOCACHE)
check(r.returncode == 0, "read-only /tmp, TMPDIR=%s: naptime runs (rc %d, %r)" % (TMP, r.returncode, r.stderr.strip()))
env_no = dict(os.environ, BPFDIAG_CACHE="0")
env_no.pop("TMPDIR", None)
r = subprocess.run(["unshare", "-m", "sh", "-c", ro + tool("naptime") + " -d 0.2"],
                   capture_output=True, text=True, timeout=30, env=env_no)
check(r.returncode == 1 and "TMPDIR" in r.stderr and len(r.stderr.strip().splitlines()) == 1,
      "read-only /tmp without TMPDIR: one line with the TMPDIR hint, exit 1 (rc %d, %r)" % (
          r.returncode, r.stderr.strip()))
# with the compiled object cached, nothing is written to /tmp at all
cache = tempfile.mkdtemp(prefix="hard-cli-cache-", dir="/var/tmp")
env_cached = dict(os.environ, BPFDIAG_CACHE_DIR=cache)
env_cached.pop("TMPDIR", None)
first = run([tool("naptime"), "-d", "0.1"], env=env_cached)
r = subprocess.run(["unshare", "-m", "sh", "-c", ro + tool("naptime") + " -d 0.2"],
                   capture_output=True, text=True, timeout=30, env=env_cached)
check(first.returncode == 0 and r.returncode == 0 and len(os.listdir(cache)) == 1,
      "read-only /tmp, compiled object cached in %s: naptime runs (rc %d then %d, %r; cache %s)" % (
          cache, first.returncode, r.returncode, r.stderr.strip(), os.listdir(cache)))
shutil.rmtree(cache)

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

pool.kill()
sleeper.kill()
check(tmp_left() == [], "nothing left in TMPDIR at the end: %s" % tmp_left())
shutil.rmtree(TMP, ignore_errors=True)
print("took %.0f s" % (time.time() - T_START))
finish()
