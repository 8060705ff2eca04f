#!/usr/bin/env python3
"""Files a traced process controls are untrusted input (issue 9, items 1, 2 and 10).

An unprivileged user (`nobody`) owns a process and plants, where root's tools read:
  * a FIFO as /tmp/perf-PID.map (an open() blocks forever),
  * a symlink /tmp/perf-PID.map -> /dev/zero (endless data),
  * a sparse 100 MiB perf map (over the 64 MiB cap), a 40 MiB perf map without a
    newline (one endless line), a perf map for a root process (wrong owner),
  * a deleted executable, and a deleted private libc.so.6, replaced by FIFOs at their
    paths (which /proc/PID/maps still names).
offcputime, pmheld and lockstat (-p PID, 2 s) must each finish within a few seconds of
their duration, exit 0, print exactly one "TOOL: warning: ignoring PATH: REASON" line
for a refused perf map, and keep their peak RSS (VmHWM, from /usr/bin/time) bounded.
After each run none of the BPF programs the tool loaded is still loaded.
Before the fix: the FIFOs hang every tool until SIGKILL; the /dev/zero link grows
offcputime by ~400 MB/s.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F401

require_root()
OC, PM, LS = tool("offcputime"), tool("pmheld"), tool("lockstat")
require_built(OC, PM, LS)
TIME = "/usr/bin/time"
if not os.access(TIME, os.X_OK):
    skip("GNU time (/usr/bin/time) is needed to read the peak RSS (scripts/install-deps installs time)")

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
DURATION = 2
SLACK = 8.0          # startup (BPF compile) and report, seconds
RSS_LIMIT_KB = 400 * 1024  # a normal run peaks near 110 MB here
LIBC = "/lib/x86_64-linux-gnu/libc.so.6"


def as_nobody(cmd):
    subprocess.run(NOBODY + ["sh", "-c", cmd], check=True)


def nobody_process(cmd):
    """Starts `cmd` as nobody (in the background) and returns its pid."""
    out = subprocess.run(NOBODY + ["sh", "-c", cmd + " >/dev/null 2>&1 & echo $!"],
                         check=True, capture_output=True, text=True).stdout
    pid = int(out.strip())
    wait_for(lambda: exec_done(pid), 5.0, "nobody's process %d exec'd and mapped libc" % pid)
    return pid


def exec_done(pid):
    """The shell has exec'd the command and the loader has mapped libc."""
    try:
        exe = os.readlink("/proc/%d/exe" % pid)
        with open("/proc/%d/maps" % pid) as f:
            maps = f.read()
    except OSError:
        return False
    return os.path.basename(exe) not in ("sh", "dash", "bash") and "libc.so.6" in maps


def run_tool(args, label, warning=None):
    """Runs a tool with GNU time; checks time, exit code, warning count, peak RSS."""
    name = os.path.basename(args[0])
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        t0 = time.time()
        # own session: a hung tool (the bug) is killed with its GNU time parent
        p = subprocess.Popen([TIME, "-f", "%M", "-o", tf.name] + args, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, err = p.communicate(timeout=DURATION + 20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            check(False, "%s: %s finishes (hung for %d s, killed)" % (label, name, DURATION + 20))
            return None
        r = subprocess.CompletedProcess(args, p.returncode, out, err)
        elapsed = time.time() - t0
        tf.seek(0)
        lines = tf.read().split()
        hwm_kb = int(lines[-1]) if lines and lines[-1].isdigit() else -1
    check(elapsed < DURATION + SLACK,
          "%s: %s finished in %.1f s (duration %d s)" % (label, name, elapsed, DURATION))
    check(r.returncode == 0, "%s: %s exit 0 (got %d, %r)" % (label, name, r.returncode, r.stderr.strip()[-300:]))
    check(0 < hwm_kb < RSS_LIMIT_KB, "%s: %s peak RSS %d MB < %d MB" % (label, name, hwm_kb >> 10, RSS_LIMIT_KB >> 10))
    left = leftover_bpf_programs()
    check(left == [], "%s: %s left no BPF program loaded: %s" % (label, name, left))
    if warning is not None:
        prefix = "%s: warning: ignoring %s: " % (name, warning)
        hits = [l for l in r.stderr.splitlines() if l.startswith(prefix)]
        check(len(hits) == 1, "%s: %s prints one line %r... (got %r)" % (label, name, prefix, r.stderr.strip()[-400:]))
    return r


def tools_for(pid, uprobes=False):
    out = [[OC, "-p", str(pid), str(DURATION)],
           [PM, "-p", str(pid), "-d", str(DURATION)],
           [LS, "-p", str(pid), "-d", str(DURATION)]]
    if uprobes:
        out.append([LS, "--uprobes", "-p", str(pid), "-d", str(DURATION)])
    return out


work = tempfile.mkdtemp(prefix="untrusted-")
os.chmod(work, 0o755)
os.chown(work, 65534, 65534)
pids = []
try:
    # 1. FIFO as the perf map of nobody's process: every tool that symbolizes it
    pid = nobody_process("exec sleep 120")
    pids.append(pid)
    perfmap = "/tmp/perf-%d.map" % pid
    as_nobody("mkfifo %s" % perfmap)
    for args in tools_for(pid):
        run_tool(args, "FIFO perf map", warning=perfmap)
    os.unlink(perfmap)

    # 2. symlink to /dev/zero
    as_nobody("ln -s /dev/zero %s" % perfmap)
    run_tool([OC, "-p", str(pid), str(DURATION)], "perf map -> /dev/zero", warning=perfmap)
    os.unlink(perfmap)

    # 3. a sparse file over the size cap, and one endless line under it
    as_nobody("truncate -s 100M %s" % perfmap)
    run_tool([OC, "-p", str(pid), str(DURATION)], "100 MiB perf map", warning=perfmap)
    os.unlink(perfmap)
    as_nobody("head -c 41943040 /dev/zero | tr '\\0' 'x' > %s" % perfmap)
    run_tool([OC, "-p", str(pid), str(DURATION)], "40 MiB line", warning="1 line of " + perfmap)
    os.unlink(perfmap)

    # 4. a perf map nobody planted for a root process: wrong owner
    root_proc = subprocess.Popen(["sleep", "120"])
    pids.append(root_proc.pid)
    root_map = "/tmp/perf-%d.map" % root_proc.pid
    as_nobody("echo '1000 10 planted_symbol' > %s" % root_map)
    r = run_tool([OC, "-p", str(root_proc.pid), str(DURATION)], "perf map of another owner", warning=root_map)
    if r is not None:
        check("owned by uid 65534" in r.stderr, "wrong owner: the warning names the owner (%r)" % r.stderr.strip()[-200:])
    os.unlink(root_map)

    # 5. nobody's deleted executable replaced by a FIFO at its path (maps names it)
    exe = os.path.join(work, "sleeper")
    as_nobody("cp /bin/sleep %s" % exe)
    pid = nobody_process("exec %s 120" % exe)
    pids.append(pid)
    as_nobody("rm %s && mkfifo %s" % (exe, exe))
    for args in tools_for(pid):
        run_tool(args, "executable replaced by a FIFO")

    # 6. a private libc.so.6, deleted and replaced by a FIFO (pthread probes read it)
    libdir = os.path.join(work, "lib")
    as_nobody("mkdir %s && cp %s %s/libc.so.6" % (libdir, LIBC, libdir))
    pid = nobody_process("LD_LIBRARY_PATH=%s exec sleep 120" % libdir)
    pids.append(pid)
    with open("/proc/%d/maps" % pid) as f:
        check(libdir in f.read(), "the target maps the private libc")
    as_nobody("rm %s/libc.so.6 && mkfifo %s/libc.so.6" % (libdir, libdir))
    for args in tools_for(pid, uprobes=True):
        run_tool(args, "libc replaced by a FIFO")
finally:
    for p in pids:
        try:
            os.kill(p, 9)
        except OSError:
            pass
    for p in pids:
        try:
            os.waitpid(p, 0)
        except OSError:
            pass
    for p in pids:
        try:
            os.unlink("/tmp/perf-%d.map" % p)
        except OSError:
            pass
    shutil.rmtree(work, ignore_errors=True)

finish()
