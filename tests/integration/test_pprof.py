"""--pprof FILE on profile, offcputime, lockstat and pmheld, read back by the Go
toolchain's own pprof (go tool pprof: -raw, -top -sample_index=..., -traces), and
runbook's TOOL.pb.gz files.

Each tool runs for real as root against mutex_contention (4 threads on
`static pthread_mutex_t cache_lock`, taken in update_cache() called from worker()),
with -j and --pprof in the same run, so both outputs describe the same window:
  - the file parses and its sample types and units are the documented ones;
  - each sample type's total in pprof equals the tool's own JSON total of that run
    (profile: sample_count and sample_count x period; offcputime: offcpu_total_ns and
    offcpu_count; lockstat: wait_total_ns + other_wait_total_ns and the rows'
    wait_count; pmheld: hold_total_ns and hold_count), exactly;
  - every sample has the labels pid (the workload's PID) and comm (its name);
    lockstat and pmheld samples name the lock cache_lock; offcputime samples carry a
    wait_class;
  - a function of the workload (update_cache or worker) is in the stacks (-traces),
    in a location whose mapping is the workload's binary.
Then: runbook lock-contention writes lockstat.pb.gz, pmheld.pb.gz and
offcputime.pb.gz that parse, listed in run.json and report.md; and bad --pprof
paths are usage errors (exit 2, one line) before anything is traced.
go tool pprof runs with HOME and PPROF_TMPDIR in a temporary directory and is given
the file path only (no symbolization, no network).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from harness import (check, finish, ndjson, need, require_built, require_root, run, start, tool,  # noqa: E402
                     usage_error, workload)

require_root()
GO = need("go", "golang-go")
WL = workload("mutex_contention")
TOOLS = {t: tool(t) for t in ("profile", "offcputime", "lockstat", "pmheld", "runbook")}
require_built(WL, *TOOLS.values())

TMP = tempfile.mkdtemp(prefix="bpfdiag-pprof-test-")
GOENV = dict(os.environ, HOME=TMP, PPROF_TMPDIR=TMP, GOPATH=os.path.join(TMP, "go"),
             GOCACHE=os.path.join(TMP, "gocache"), GOFLAGS="-mod=mod", GOPROXY="off")
WL_COMM = "mutex_contention"[:15]  # the kernel's comm: 15 characters


def pprof(path, *args):
    """go tool pprof ARGS PATH: (rc, stdout, stderr)."""
    r = subprocess.run([GO, "tool", "pprof", *args, path], capture_output=True, text=True, timeout=120, env=GOENV)
    return r.returncode, r.stdout, r.stderr


def parse_raw(text):
    """go tool pprof -raw's text: sample types, period, samples (values, location ids,
    labels) and locations (id -> (function names, mapping file))."""
    out = {"types": [], "samples": [], "locations": {}, "mappings": {}, "period_type": None, "period": None}
    lines = text.splitlines()
    i = 0
    section = None
    cur = None
    while i < len(lines):
        l = lines[i]
        i += 1
        if l.startswith("PeriodType:"):
            out["period_type"] = l.split(":", 1)[1].strip()
        elif l.startswith("Period:"):
            out["period"] = int(l.split(":", 1)[1].strip())
        elif l == "Samples:":
            section = "samples"
            out["types"] = [t.replace("[dflt]", "") for t in lines[i].split()]
            i += 1
        elif l == "Locations":
            section = "locations"
        elif l == "Mappings":
            section = "mappings"
        elif section == "samples":
            m = re.match(r"^\s+([-\d\s]+):\s*([\d\s]*)$", l)
            if m:
                cur = {"values": [int(v) for v in m.group(1).split()],
                       "locations": [int(x) for x in m.group(2).split()], "labels": {}, "num_labels": {}}
                out["samples"].append(cur)
            elif cur is not None and l.strip():
                # "comm:[mutex_contention] lock:[cache_lock]" / "pid:[123] tid:[124]"
                for k, v in re.findall(r"(\w+):\[([^\]]*)\]", l):
                    cur["labels"][k] = v
        elif section == "locations":
            m = re.match(r"^\s+(\d+): (0x[0-9a-f]+) M=(\d+) (.*)$", l)
            if m:
                cur_loc = int(m.group(1))
                out["locations"][cur_loc] = {"addr": int(m.group(2), 16), "mapping": int(m.group(3)),
                                             "lines": [m.group(4)]}
            elif l.startswith("      ") and out["locations"]:
                out["locations"][max(out["locations"])]["lines"].append(l.strip())
        elif section == "mappings":
            m = re.match(r"^\s*(\d+): (0x[0-9a-f]+)/(0x[0-9a-f]+)/(0x[0-9a-f]+) (\S+)", l)
            if m:
                out["mappings"][int(m.group(1))] = m.group(5)
    return out


def totals(raw):
    t = [0] * len(raw["types"])
    for s in raw["samples"]:
        for k, v in enumerate(s["values"]):
            t[k] += v
    return t


def check_file(label, path, want_types, want_totals, lock=None, wait_class=False, pid=None):
    """The checks every tool's file gets (see the module docstring). Returns the parsed -raw."""
    rc, out, err = pprof(path, "-raw")
    if not check(rc == 0 and "Samples:" in out, "%s: go tool pprof -raw parses %s (rc %d, %s)" % (
            label, os.path.basename(path), rc, err.strip()[-300:])):
        return None
    raw = parse_raw(out)
    check(raw["types"] == want_types, "%s: sample types %s (want %s)" % (label, raw["types"], want_types))
    got = totals(raw)
    check(got == want_totals and sum(want_totals) > 0,
          "%s: pprof totals %s equal the tool's JSON totals %s" % (label, got, want_totals))
    print("info %s: pprof totals %s, JSON %s, %d samples" % (label, got, want_totals, len(raw["samples"])))
    pids = {s["labels"].get("pid") for s in raw["samples"]}
    comms = {s["labels"].get("comm") for s in raw["samples"]}
    check(pids == {str(pid)}, "%s: every sample has label pid=%d (%s)" % (label, pid, sorted(map(str, pids))))
    check(comms == {WL_COMM}, "%s: every sample has label comm=%s (%s)" % (label, WL_COMM, sorted(map(str, comms))))
    if lock:
        locks = {s["labels"].get("lock") for s in raw["samples"]}
        check(lock in locks, "%s: samples carry label lock=%s (%s)" % (label, lock, sorted(map(str, locks))))
    if wait_class:
        check(all("wait_class" in s["labels"] for s in raw["samples"]), "%s: every sample has a wait_class" % label)
    for t in want_types:
        rc, out, err = pprof(path, "-top", "-sample_index=" + t.split("/")[0])
        check(rc == 0 and re.search(r"^Type: %s$" % re.escape(t.split("/")[0]), out, re.M) is not None,
              "%s: -top -sample_index=%s (rc %d, %s)" % (label, t.split("/")[0], rc, (err or out).strip()[-200:]))
    # a workload function, at a location in the workload's own mapping
    rc, traces, err = pprof(path, "-traces")
    check(rc == 0 and re.search(r"\b(update_cache|worker)\b", traces) is not None,
          "%s: -traces shows update_cache or worker (rc %d)" % (label, rc))
    in_wl = [loc for loc in raw["locations"].values()
             if any(re.match(r"(\S*::)?(update_cache|worker) ", x) for x in loc["lines"])]
    check(bool(in_wl) and all(raw["mappings"].get(loc["mapping"], "").endswith("/mutex_contention") for loc in in_wl),
          "%s: update_cache/worker locations are in the mutex_contention mapping (%s)" % (
              label, sorted({raw["mappings"].get(loc["mapping"]) for loc in in_wl})))
    return raw


def traced(name, tool_args, wl_args, timeout=120):
    """mutex_contention paused on a go-file; the tool attached with -p PID -j --pprof F
    (its start record says so); the workload released; the tool ends when it exits.
    Returns (pid, records, stderr, rc, pprof path)."""
    go = os.path.join(TMP, name + ".go")
    path = os.path.join(TMP, name + ".pb.gz")
    w = start([WL, "--go-file", go] + wl_args)
    pid = int(w.stderr.readline().split()[1])
    t = start([TOOLS[name], "-p", str(pid), "-j", "--pprof", path] + tool_args)
    first = t.stdout.readline()
    open(go, "w").close()
    w.communicate(timeout=timeout)
    try:
        out, err = t.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        t.kill()
        out, err = t.communicate()
    recs = ndjson(first + out, name)
    check(bool(recs) and recs[0]["type"] == name + ".start", "%s: start record first (%s)" % (name, first[:80]))
    check(t.returncode == 0 and os.path.getsize(path) > 0 if os.path.exists(path) else False,
          "%s: exit 0 and %s written (rc %s, %s)" % (name, path, t.returncode, err.strip()[-300:]))
    return pid, recs, err, t.returncode, path


def summary(recs, name):
    s = [r for r in recs if r.get("type") == name + ".summary"]
    check(len(s) == 1, "%s: one summary record (%d)" % (name, len(s)))
    return s[-1] if s else {}


SPIN = ["--threads", "4", "--hold-us", "300", "--gap-us", "100", "--duration-ms", "2500"]
SLEEP = ["--threads", "4", "--hold-us", "500", "--gap-us", "200", "--hold-mode", "sleep", "--duration-ms", "2500"]

# --- profile -----------------------------------------------------------------------------
pid, recs, err, rc, path = traced("profile", ["-F", "199", "--unwind", "fp"], SPIN)
s = summary(recs, "profile")
period = 1000000000 // 199
raw = check_file("profile", path, ["samples/count", "cpu/nanoseconds"],
                 [s.get("sample_count", -1), s.get("sample_count", -1) * period], pid=pid)
if raw:
    check(raw["period_type"] == "cpu nanoseconds" and raw["period"] == period,
          "profile: period type cpu/nanoseconds, period %s = 1e9/199 (%s)" % (raw["period"], raw["period_type"]))
    tids = {s2["labels"].get("tid") for s2 in raw["samples"]}
    check(len(tids) >= 4, "profile: samples labelled with the worker threads' tids (%s)" % sorted(tids))

# --- offcputime --------------------------------------------------------------------------
pid, recs, err, rc, path = traced("offcputime", [], SLEEP)
s = summary(recs, "offcputime")
check_file("offcputime", path, ["off_cpu/nanoseconds", "off_cpu_periods/count"],
           [s.get("offcpu_total_ns", -1), s.get("offcpu_count", -1)], wait_class=True, pid=pid)

# --- lockstat ----------------------------------------------------------------------------
pid, recs, err, rc, path = traced("lockstat", ["-U", "-n", "0"], SLEEP)
s = summary(recs, "lockstat")
rows = [r for r in recs if r.get("type") == "lockstat.lock"]
check(len(rows) == s.get("lock_count", -1) + s.get("other_lock_count", -1),
      "lockstat: -n 0 lists every row (%d)" % len(rows))
check_file("lockstat", path, ["contentions/count", "delay/nanoseconds"],
           [sum(r["wait_count"] for r in rows), s.get("wait_total_ns", -1) + s.get("other_wait_total_ns", -1)],
           lock="cache_lock", wait_class=True, pid=pid)

# --- pmheld ------------------------------------------------------------------------------
pid, recs, err, rc, path = traced("pmheld", ["-n", "0"], SLEEP)
s = summary(recs, "pmheld")
check_file("pmheld", path, ["holds/count", "hold/nanoseconds"],
           [s.get("hold_count", -1), s.get("hold_total_ns", -1)], lock="cache_lock", pid=pid)

# --- runbook -----------------------------------------------------------------------------
out_dir = os.path.join(TMP, "report")
go = os.path.join(TMP, "runbook.go")
w = start([WL, "--go-file", go] + SLEEP[:-1] + ["60000"])
pid = int(w.stderr.readline().split()[1])
open(go, "w").close()
r = run([TOOLS["runbook"], "lock-contention", "-p", str(pid), "-d", "3", "-o", out_dir], timeout=300)
w.kill()
w.communicate()
check(r.returncode == 0, "runbook lock-contention exits 0 (rc %d, %s)" % (r.returncode, r.stderr.strip()[-300:]))
try:
    with open(os.path.join(out_dir, "run.json")) as f:
        rj = json.load(f)
except (OSError, ValueError) as e:
    rj = {}
    check(False, "runbook wrote run.json (%s)" % e)
try:
    with open(os.path.join(out_dir, "report.md")) as f:
        report_md = f.read()
except OSError:
    report_md = ""
files = {t.get("name"): t.get("files", []) for t in rj.get("tools", [])}
for name, types in (("lockstat", ["contentions/count", "delay/nanoseconds"]),
                    ("pmheld", ["holds/count", "hold/nanoseconds"]),
                    ("offcputime", ["off_cpu/nanoseconds", "off_cpu_periods/count"])):
    pb = os.path.join(out_dir, name + ".pb.gz")
    check(os.path.isfile(pb) and not os.path.islink(pb) and os.path.getsize(pb) > 0,
          "runbook: %s.pb.gz written" % name)
    check(name + ".pb.gz" in files.get(name, []), "runbook: run.json lists %s.pb.gz (%s)" % (name, files.get(name)))
    check(name + ".pb.gz" in report_md, "runbook: report.md links %s.pb.gz" % name)
    rc, out, err = pprof(pb, "-raw")
    raw = parse_raw(out) if rc == 0 else None
    check(raw is not None and raw["types"] == types and sum(totals(raw)) > 0,
          "runbook: %s.pb.gz parses with types %s and non-zero totals (rc %d, %s)" % (
              name, raw and raw["types"], rc, err.strip()[-200:]))

# --- bad paths: usage errors before tracing ----------------------------------------------
victim = os.path.join(TMP, "victim")
with open(victim, "w") as f:
    f.write("keep")
link = os.path.join(TMP, "link.pb.gz")
os.symlink(victim, link)
for name in ("profile", "offcputime", "lockstat", "pmheld"):
    usage_error([TOOLS[name], "--pprof", os.path.join(TMP, "no-such-dir", "x.pb.gz"), "-d", "1"])
    usage_error([TOOLS[name], "--pprof", link, "-d", "1"])
    usage_error([TOOLS[name], "--pprof", TMP, "-d", "1"])
with open(victim) as f:
    check(f.read() == "keep", "a symlinked --pprof target is left alone")

shutil.rmtree(TMP, ignore_errors=True)
finish()
