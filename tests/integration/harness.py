"""Shared helpers for the integration tests (stdlib, plus python3-jsonschema for schemas).

Each test_*.py is run by ctest with BIN, WORKLOADS and SRC in the environment and
exits 77 (ctest SKIP_RETURN_CODE, with the reason printed) when it cannot run here;
under CI=true a missing prerequisite is a failure, never a skip (skip()).
"""
import difflib
import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import time

BIN = os.environ.get("BIN", os.path.join(os.path.dirname(__file__), "../../build/bin"))
WORKLOADS = os.environ.get("WORKLOADS", os.path.join(os.path.dirname(__file__), "../../build/workloads"))
SRC = os.environ.get("SRC", os.path.join(os.path.dirname(__file__), "../.."))
SKIP = 77
CI = os.environ.get("CI") == "true"
SCHEMA_DIR = os.path.join(SRC, "docs/schema")   # <tool>.schema.json
GOLDEN_DIR = os.path.join(SRC, "tests/golden")

_failures = []


def check(cond, msg):
    status = "ok  " if cond else "FAIL"
    print("%s %s" % (status, msg))
    if not cond:
        _failures.append(msg)
    return cond


def finish():
    _schema_summary()
    if _failures:
        print("%d check(s) failed" % len(_failures))
        sys.exit(1)
    print("all checks passed")
    sys.exit(0)


# --- environment gates ------------------------------------------------------------------
def skip(reason):
    """Ends the test as skipped (exit 77) when run by hand. Under CI (CI=true) every
    prerequisite (root, BTF, a package scripts/install-deps installs) is provided, so a
    skip there would hide a broken setup: it is a failure instead, never a skip."""
    if CI:
        check(False, "CI=true, yet: %s" % reason)
        finish()
    print("SKIP: " + reason)
    sys.exit(SKIP)


def require_root():
    if os.geteuid() != 0:
        skip("needs root to load BPF programs")
    if not os.path.exists("/sys/kernel/btf/vmlinux"):
        skip("kernel has no BTF (/sys/kernel/btf/vmlinux)")


def need(binary, pkg):
    """Path of `binary`, or a skip naming the Debian package install-deps installs."""
    path = shutil.which(binary)
    if not path:
        skip("%s not installed (scripts/install-deps installs %s)" % (binary, pkg))
    return path


def require_built(*paths):
    """A binary the build should have made is missing: a failure, never a skip."""
    missing = [p for p in paths if not os.access(p, os.X_OK)]
    for p in missing:
        check(False, "%s is built" % p)
    if missing:
        finish()


def tool(name):
    return os.path.join(BIN, name)


def workload(name):
    return os.path.join(WORKLOADS, name)


# --- running tools ----------------------------------------------------------------------
def run(args, timeout=60, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kw)


def start(args, **kw):
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def task_run_delay(pid):
    """Nanoseconds the threads of `pid` have waited for a CPU so far (the sum of
    /proc/PID/task/TID/schedstat's run_delay); a thread gone meanwhile counts 0."""
    total = 0
    for t in os.listdir("/proc/%d/task" % pid):
        try:
            total += int(open("/proc/%d/task/%s/schedstat" % (pid, t)).read().split()[1])
        except (OSError, IndexError, ValueError):
            pass
    return total


def wait_for(cond, timeout, what, step=0.01):
    """Polls cond() until true (returns its value) or fails the check after `timeout` s.
    A wait for a state, not a fixed sleep standing in for it."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v or time.monotonic() >= deadline:
            break
        time.sleep(step)
    check(bool(v), "%s (waited up to %.1f s)" % (what, timeout))
    return v


# "Tracing ...", "naptime: tracing ...", "Sampling ...": every tool's banner, printed
# once its probes are attached, on stdout or (in -j/--csv modes) on stderr.
_BANNER = re.compile(r"^(\w+: )?(Tracing|tracing|Sampling|sampling)\b")


def is_type(rec, tool_name, kind):
    """rec is a `<tool>.<kind>` record (new envelope) or `<tool>_<kind>` (old name)."""
    t = rec.get("type") if isinstance(rec, dict) else None
    return t in ("%s.%s" % (tool_name, kind), "%s_%s" % (tool_name, kind))


def _attach_line(line):
    """What a line says about attaching: the start record or banner, else None."""
    s = line.strip()
    if s.startswith("{"):
        try:
            rec = json.loads(s)
        except ValueError:
            return None
        t = rec.get("type", "") if isinstance(rec, dict) else ""
        return "start record %s" % t if re.match(r"^\w+[._]start$", t) else None
    return "banner %r" % s[:60] if _BANNER.match(s) else None


def wait_attached(proc, timeout=15.0):
    """Waits until a tool started with start() says its probes are attached: the JSON
    start record ({"type":"<tool>.start",...}) on stdout or the banner line on stdout
    or stderr. What it read is kept on proc and returned again by stop(). Returns what
    it saw; fails (and stops the tool) if the tool exits or stays silent."""
    proc._pre = {"out": b"", "err": b""}
    streams = {proc.stdout.fileno(): "out", proc.stderr.fileno(): "err"}
    sel = selectors.DefaultSelector()
    for fd in streams:
        sel.register(fd, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    seen, partial = None, {"out": b"", "err": b""}
    try:
        while seen is None and time.monotonic() < deadline:
            for key, _ in sel.select(timeout=max(0.0, deadline - time.monotonic())):
                name = streams[key.fd]
                data = os.read(key.fd, 65536)
                if not data:
                    sel.unregister(key.fd)
                    continue
                proc._pre[name] += data
                partial[name] += data
                *lines, partial[name] = partial[name].split(b"\n")
                for l in lines:
                    seen = seen or _attach_line(l.decode(errors="replace"))
            if not sel.get_map():
                break  # both streams closed: the tool ended
    finally:
        sel.close()
    if seen is None:
        out, err, rc = stop(proc)
        check(False, "%s attached within %.0f s (rc %s, stderr %r)" % (
            os.path.basename(proc.args[0]), timeout, rc, err.strip()[-300:]))
    return seen


def end_process(proc, sig=signal.SIGINT, timeout=30):
    """Sends `sig` to a process that still runs and waits for it; SIGKILL after
    `timeout` s (nothing a test starts outlives it)."""
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def stop(proc, timeout=20, sig=signal.SIGINT):
    """Sends `sig` (SIGINT; None: none, the caller sent it), then collects (stdout,
    stderr, returncode), including what wait_attached() read."""
    if sig is not None and proc.poll() is None:
        proc.send_signal(sig)
    out, err = proc.communicate(timeout=timeout)
    pre = getattr(proc, "_pre", None)
    if pre:
        out = pre["out"].decode(errors="replace") + (out or "")
        err = pre["err"].decode(errors="replace") + (err or "")
        proc._pre = None
    return out, err, proc.returncode


def usage_error(args, expect_rc=2):
    """Runs a tool expecting a one-line error on stderr and exit code expect_rc."""
    r = run(args, timeout=30)
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    check(r.returncode == expect_rc and len(lines) == 1 and r.stdout == "",
          "%s -> exit %d with one stderr line (got %d, %r)" % (" ".join(args[1:]), expect_rc, r.returncode, r.stderr.strip()))


def not_root_error(args):
    """As an unprivileged user the tool must fail with one clear line and exit 1."""
    r = run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *args], timeout=30)
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    check(r.returncode == 1 and len(lines) == 1 and "root" in r.stderr,
          "not root -> exit 1 with one line naming root (got %d, %r)" % (r.returncode, r.stderr.strip()))


def steal_ns():
    """Hypervisor steal time of all CPUs so far (/proc/stat, USER_HZ ticks). A vCPU
    stolen while the workload runs lengthens the workload's own clock readings but is
    no off-CPU time for the guest's scheduler: 27 ms of a 528.6 ms sleep total were
    seen on this VM (steal is ~3% of its CPU time; bursts reach seconds per test)."""
    with open("/proc/stat") as f:
        return int(f.readline().split()[8]) * 10**9 // os.sysconf("SC_CLK_TCK")


def with_private_tracefs(argv):
    """`argv` run in a private mount namespace with tracefs mounted there: perf mounts
    tracefs on the host by itself when it is missing (and leaves it), which every
    bpfdiag test must not do."""
    return ["unshare", "-m", "--propagation", "private", "sh", "-c",
            "mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing; "
            "exec \"$0\" \"$@\""] + list(argv)


def host_tracefs_mounted():
    with open("/proc/self/mountinfo") as f:
        return any(" - tracefs " in line for line in f)


def perf_script_stacks(perf, data):
    """The samples of `perf record -g` file `data` as [{"tid", "frames"}], frames
    innermost first, symbol names only (perf script -F tid,ip,sym)."""
    out = subprocess.run(with_private_tracefs([perf, "script", "-i", data, "-F", "tid,ip,sym"]),
                         capture_output=True, text=True, timeout=60).stdout
    samples, cur = [], None
    for line in out.splitlines():
        if not line.strip():
            cur = None
        elif not line.startswith("\t"):  # a sample's header: the tid, right-aligned in 5
            cur = {"tid": int(line.split()[0]), "frames": []}
            samples.append(cur)
        elif cur is not None:
            parts = line.split(None, 1)
            if len(parts) == 2:
                cur["frames"].append(parts[1].split(" (")[0].strip())
    return samples


class Pid1Traffic:
    """Makes PID 1 busy: a thread connects to (and closes) PID 1's own listening TCP
    socket in a loop. On Firecracker guests PID 1 is the sandbox's agent
    (process_api), in whose threads' context no BPF program runs, so each of its
    switches away is an unseen switch-in for the task that gets the CPU (the case
    bpf_sources/arrival.h recovers). `port` is None when PID 1 listens on no TCP port:
    the caller skips the case. Use as a context manager; `connects` counts; `pause`
    is the sleep between connections (s)."""

    def __init__(self, pause=0.002):
        self.port, self.connects, self._stop = self._listening_port(), 0, False
        self._thread, self.pause = None, pause

    @staticmethod
    def _listening_port():
        """A listening TCP port of PID 1: a socket in its fds or, where its fds cannot
        be read (the Firecracker agent's, even by root), one no readable process holds."""
        def socket_inodes(pid):
            found, readable = set(), False
            try:
                fds = os.listdir("/proc/%s/fd" % pid)
            except OSError:
                return found, False
            for fd in fds:
                try:
                    m = re.match(r"socket:\[(\d+)\]", os.readlink("/proc/%s/fd/%s" % (pid, fd)))
                    readable = True
                except OSError:
                    continue
                if m:
                    found.add(m.group(1))
            return found, readable or not fds
        pid1, pid1_readable = socket_inodes(1)
        others = set()
        if not pid1_readable:
            for pid in os.listdir("/proc"):
                if pid.isdigit() and pid != "1":
                    others |= socket_inodes(pid)[0]
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            try:
                lines = open(table).read().splitlines()[1:]
            except OSError:
                continue
            for line in lines:
                f = line.split()
                if f[3] != "0A":  # LISTEN
                    continue
                if f[9] in pid1 or (not pid1_readable and f[9] not in others):
                    return int(f[1].split(":")[1], 16)
        return None

    def _loop(self):
        import socket
        while not self._stop:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as c:
                    c.recv(1)
            except OSError:
                pass
            self.connects += 1
            time.sleep(self.pause)

    def __enter__(self):
        if self.port is not None:
            import threading
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop = True
        if self._thread:
            self._thread.join()


def within(actual, expected, rel=None, abs_=None):
    tol = 0.0
    if rel is not None:
        tol = max(tol, abs(expected) * rel)
    if abs_ is not None:
        tol = max(tol, abs_)
    return abs(actual - expected) <= tol


# --- BPF objects a process holds, and what outlives it (harness_bpf.py) ------------------
from harness_bpf import (BASELINE_PROGS, bpf_fds, bpf_prog_ids, held_prog_ids,  # noqa: E402,F401
                         leftover_bpf_programs, leftover_probe_events)


# --- NDJSON and schemas -----------------------------------------------------------------
_schemas = {}     # tool -> validator, or None when docs/schema/<tool>.schema.json is absent
_validated = {}   # tool -> records validated


def _validator(tool_name):
    if tool_name not in _schemas:
        path = os.path.join(SCHEMA_DIR, "%s.schema.json" % tool_name)
        if not os.path.exists(path):
            _schemas[tool_name] = None
        else:
            try:
                import jsonschema
            except ImportError:
                skip("python3-jsonschema is needed to validate %s (scripts/install-deps installs it)" % path)
            with open(path) as f:
                schema = json.load(f)
            cls = jsonschema.validators.validator_for(schema)
            cls.check_schema(schema)
            _schemas[tool_name] = cls(schema)
    return _schemas[tool_name]


def validate_ndjson(tool_name, records):
    """Validates each record (a dict or a JSON line) against
    docs/schema/<tool>.schema.json when that file exists; each invalid record is a
    failed check. Returns how many were validated (0 when there is no schema)."""
    v = _validator(tool_name)
    if v is None:
        _validated.setdefault(tool_name, 0)
        return 0
    n = 0
    for rec in records:
        if isinstance(rec, str):
            if not rec.strip():
                continue
            rec = json.loads(rec)
        errs = sorted(v.iter_errors(rec), key=lambda e: list(e.absolute_path))
        if errs:
            e = errs[0]
            check(False, "%s record %s matches docs/schema/%s.schema.json: %s at /%s" % (
                tool_name, rec.get("type"), tool_name, e.message[:200],
                "/".join(map(str, e.absolute_path))))
        n += 1
    _validated[tool_name] = _validated.get(tool_name, 0) + n
    return n


def validated(tool_name, records):
    """validate_ndjson, then the records (for chaining)."""
    validate_ndjson(tool_name, records)
    return records


def validate(tool_name, records):
    """One check: there are records and every one matches the tool's schema."""
    n = validate_ndjson(tool_name, records)
    return check(n > 0 and n == len([r for r in records if not isinstance(r, str) or r.strip()]),
                 "%d %s records validated against docs/schema/%s.schema.json" % (n, tool_name, tool_name))


def schema_verdict(tool_name):
    """One check: some of the tool's records were validated (each invalid one already
    failed its own check)."""
    check(_validated.get(tool_name, 0) > 0, "%d %s records validated against docs/schema/%s.schema.json" % (
        _validated.get(tool_name, 0), tool_name, tool_name))


def ndjson(text, tool_name=None):
    """Parses NDJSON. Each record is validated against its tool's schema: `tool_name`,
    or the tool a `<tool>.<kind>` type names (when docs/schema/<tool>.schema.json
    exists)."""
    recs = []
    for line in text.splitlines():
        line = line.strip()
        if line:
            recs.append(json.loads(line))
    by_tool = {}
    for r in recs:
        t = tool_name
        if t is None and isinstance(r, dict) and "." in str(r.get("type", "")):
            t = r["type"].split(".", 1)[0]
        if t:
            by_tool.setdefault(t, []).append(r)
    for t, rs in by_tool.items():
        validate_ndjson(t, rs)
    return recs


def _schema_summary():
    if _validated:
        print("schema: " + ", ".join(
            ("%s %d records validated" % (t, n)) if _schemas.get(t) else ("%s no schema (not validated)" % t)
            for t, n in sorted(_validated.items())))


# --- golden files -----------------------------------------------------------------------
def check_golden(name, text):
    """Compares `text` with tests/golden/<name>; UPDATE_GOLDEN=1 rewrites the file
    instead (review the diff). A missing file is a failure naming the variable."""
    path = os.path.join(GOLDEN_DIR, name)
    if os.environ.get("UPDATE_GOLDEN") == "1":
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        print("updated golden file %s" % path)
        return True
    try:
        with open(path) as f:
            want = f.read()
    except OSError:
        return check(False, "golden %s exists (UPDATE_GOLDEN=1 writes it)" % name)
    if want == text:
        return check(True, "output matches golden %s" % name)
    diff = difflib.unified_diff(want.splitlines(), text.splitlines(), "golden/" + name, "actual", lineterm="")
    print("\n".join(list(diff)[:40]))
    return check(False, "output matches golden %s (UPDATE_GOLDEN=1 rewrites it)" % name)


# --- a workload that measures its own ground truth over the tool's window ---------------
def measure_against_truth(wl, pid, tool_args, tool_name, timeout=120):
    """`wl` (a Popen with stdin and stdout pipes) is a workload that, told "start" and
    then "stop" on stdin, prints its own measurement of that window as one JSON line.
    The tool (tool_args + ["-p", pid], JSON mode) opens the window with its start record
    and its first "<tool>.summary" (which ends every report) closes it. Returns
    (rc, stderr, records, truth): records are every record after the start record."""
    tp = subprocess.Popen(tool_args + ["-p", str(pid)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    records, started, closed = [], False, False
    for line in tp.stdout:
        rec = ndjson(line, tool_name)[0]
        if is_type(rec, tool_name, "start"):
            started = True
            wl.stdin.write("start\n")
            wl.stdin.flush()
            continue
        records.append(rec)
        if is_type(rec, tool_name, "summary") and not closed:
            closed = True
            wl.stdin.write("stop\n")
            wl.stdin.flush()
    err = tp.stderr.read()
    rc = tp.wait(timeout=timeout)
    check(started, "%s printed its start record before its reports" % tool_name)
    truth = json.loads(wl.stdout.readline()) if closed and started else None
    return rc, err, records, truth


def few_dropped(dq):
    """Periods whose switch was never seen are recovered (bpf_sources/arrival.h), not
    dropped: at most 1% of them (and at least 1) may fail recovery. A CI run dropped 1
    and recovered 613 in threadpool's CPython sleep phase with PID 1 kept busy."""
    rec, drop = dq["recovered_periods"], dq["dropped_periods"]
    return drop <= max(1, 0.01 * (rec + drop))


def compare_pool(label, s, truth):
    """threadpool's summary `s` of a pool vs the workload's own figures: utilisation
    within 0.1 absolute, busy workers within 15%, data quality clean (no lost events,
    no map-full drops, few_dropped)."""
    print("%s truth: %s" % (label, json.dumps(truth)))
    print("%s threadpool: group %s threads %d util %.3f busy %.2f verdict %s (%s); blocked %s; "
          "work waits: %s" % (label, s["group"], s["thread_count"], s["utilization"], s["busy_avg"],
                              s["verdict"], s["verdict_reason"], json.dumps(s["blocked_total_ns"]),
                              s["work_waits"]["description"]))
    # time waiting for a CPU (truth's runnable_avg, ~0 on a quiet box) may count as busy:
    # threadpool's utilisation and busy workers include it (a worker with a task in hand
    # that waits for a CPU is not idle); the workload's own clocks cannot say
    lo, hi = truth["busy_avg"], truth["busy_avg"] + truth.get("runnable_avg", 0.0)
    ulo, uhi = truth["utilization"], truth["utilization"] + truth.get("runnable_avg", 0.0) / max(truth.get("workers", s["thread_count"]), 1)
    check(ulo - 0.1 <= s["utilization"] <= uhi + 0.1,
          "%s: utilisation %.3f vs the workload's own %.3f (+ %.3f waiting for a CPU) within 0.1" % (
              label, s["utilization"], ulo, uhi - ulo))
    check(0.85 * lo <= s["busy_avg"] <= 1.15 * hi,
          "%s: busy workers %.2f vs the workload's own %.2f (+ %.2f waiting for a CPU) within 15%%" % (
              label, s["busy_avg"], lo, hi - lo))
    dq = s["data_quality"]
    check(dq["lost_events"] == 0 and dq["map_full"] == 0 and few_dropped(dq),
          "%s: data quality clean: %s" % (label, json.dumps(dq)))
