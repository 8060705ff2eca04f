"""Ctrl-C and SIGKILL during the BPF compile, and TMPDIR (issue 9; split from
test_cli_hardening.py so that ctest runs the two side by side):

- Ctrl-C during the compile ends every tool at once (exit 130, 4 of 4 runs each, the
  compile never finished, nothing attached, nothing left in TMPDIR);
- SIGKILL during it leaves at most a dir the next run sweeps;
- TMPDIR is honoured (read-only /tmp): with TMPDIR set the tools run, without it one
  line names TMPDIR, and with the compiled object cached nothing is written to /tmp.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from harness import check, finish, start, stop, tool, wait_attached, wait_for  # noqa: E402
from cli_util import ENV, TMP, TOOLS, end, run, target_args, tmp_left  # noqa: E402

# --- 3. signals during compile, SIGKILL, TMPDIR -----------------------------------------
# These are about the compile (its header shim in TMPDIR): the compiled-object cache
# (common/bpf_object.h) is off for them, or a cached start would skip the compile.
NOCACHE = dict(ENV, BPFDIAG_CACHE="0")

def compiled_objects(cache):
    """The compiled objects in a cache directory (*.bpfobj): the cache also keeps this
    boot's kernel struct offsets (kernel.btffacts), written before any compile."""
    return sorted(f for f in os.listdir(cache) if f.endswith(".bpfobj"))

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
    cached = compiled_objects(cache)
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
        cached = compiled_objects(cache)
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
check(first.returncode == 0 and r.returncode == 0 and len(compiled_objects(cache)) == 1,
      "read-only /tmp, compiled object cached in %s: naptime runs (rc %d then %d, %r; cache %s)" % (
          cache, first.returncode, r.returncode, r.stderr.strip(), os.listdir(cache)))
shutil.rmtree(cache)

end()
finish()
