"""Helpers for the runbook tests: run a runbook, read its report directory."""
import json
import os
import re
import select
import subprocess
import tempfile
import time

from harness import SCHEMA_DIR, check, tool, validate

RUNBOOK = tool("runbook")
# "- [ ] text — **number** (tool)", one finding per line of report.md
FINDING = re.compile(r"^- \[( |x)\] (.*) — \*\*(.*)\*\* \(([\w-]+)\)$")


def read_line(fd, timeout):
    deadline = time.monotonic() + timeout
    buf = b""
    while not buf.endswith(b"\n"):
        r, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
        if not r:
            return None
        b = os.read(fd, 1)
        if not b:
            return None
        buf += b
    return buf.decode(errors="replace")


def wait_all_attached(p, timeout=150):
    """Reads runbook's stderr until it says every tool attached (or it ends).
    Returns (attached, stderr so far)."""
    err = ""
    while True:
        line = read_line(p.stderr.fileno(), timeout)
        if line is None:
            return False, err
        err += line
        if "all tools attached" in line:
            return True, err


def run_runbook(args, on_attached=None, timeout=240):
    """Runs `runbook ARGS`; once it says every tool attached, calls on_attached().
    Returns (rc, stdout, stderr, attached)."""
    p = subprocess.Popen([RUNBOOK] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    attached, err = wait_all_attached(p)
    if attached and on_attached:
        on_attached()
    out, rest = p.communicate(timeout=timeout)
    return p.returncode, out.decode(errors="replace"), err + rest.decode(errors="replace"), attached


def findings(outdir, context=True):
    """report.md's findings as dicts {fine, text, number, tool, context}, ranked as the
    report ranks them; those under "### Context" (not findings: waiting for work, sleeps)
    come last with context True, or are left out with context=False."""
    got, inside, ctx = [], False, False
    for line in open(os.path.join(outdir, "report.md")):
        line = line.rstrip("\n")
        if line == "## Findings":
            inside = True
            continue
        if inside and line.startswith("## "):
            break
        if inside and line.startswith("### Context"):
            ctx = True
        m = FINDING.match(line)
        if inside and m and (context or not ctx):
            got.append({"fine": m.group(1) == "x", "text": m.group(2), "number": m.group(3), "tool": m.group(4),
                        "context": ctx})
    return got


def check_ranking(name, outdir, recs):
    """The findings as an operator reads them (issue 21): no idle, sleep or condition wait
    among them (those are context); the problems ordered by the share of thread time
    each explains, one-off events after the sustained ones; every tool's losses in its
    NDJSON shown in the Data quality section and next to its findings."""
    fs = findings(outdir)
    real = [f for f in fs if not f["context"]]
    idle = [f["text"] for f in real if re.search(r"\[(idle|sleep|condition)[:\]]", f["text"])]
    check(not idle, "%s: no idle, sleep or condition wait among the findings (%s)" % (name, idle[:2]))
    problems = [f for f in real if not f["fine"] and " failed" not in f["text"]]
    shares = [(float(m.group(1)), "one-off" in f["text"]) for f in problems
              for m in [re.search(r"([\d.]+)% of (thread|off-CPU) time", f["number"])] if m]
    sustained = [s for s, one in shares if not one]
    order_ok = sustained == sorted(sustained, reverse=True) and \
        all(not one for s, one in shares[:len(sustained)])
    check(order_ok, "%s: problems ranked by their share of thread time, one-offs last (%s)" % (name, shares))
    md = open(os.path.join(outdir, "report.md")).read()
    quality = md.split("## Data quality", 1)[1].split("\n## ", 1)[0] if "## Data quality" in md else ""
    for tool, rs in recs.items():
        dq = {}
        for r in rs:
            dq = r.get("data_quality", dq)
        lost = [k for k in ("lost_events", "lost_stacks", "map_full", "unmatched_begin", "unmatched_end")
                if dq.get(k)]
        if not lost:
            continue
        line = [l for l in quality.splitlines() if l.startswith("- %s lost data" % tool)]
        check(line and all("%s %d" % (k, dq[k]) in line[0] for k in lost),
              "%s: %s's losses (%s) said in Data quality (%s)" % (name, tool, {k: dq[k] for k in lost}, line))
        mine = [f for f in real if f["tool"] == tool and not f["fine"]]
        check(all("[weakened: %s" % tool in f["text"] for f in mine),
              "%s: %s's findings carry its losses (%d findings)" % (name, tool, len(mine)))


def check_report_dir(outdir, name, tools, pid=None):
    """run.json, the sections of report.md, every NDJSON line against its schema.
    Returns (run.json, {tool: records})."""
    files = set(os.listdir(outdir))
    for f in ("report.md", "report.html", "run.json"):
        check(f in files, "%s: %s written" % (name, f))
    rj = json.load(open(os.path.join(outdir, "run.json")))
    check(rj["suite"] == "bpfdiag" and rj["version"] and rj["runbook"] == name and rj["kernel"]["release"] == os.uname().release,
          "%s: run.json names suite %s %s, runbook and kernel %s" % (name, rj["suite"], rj["version"], rj["kernel"]["release"]))
    check([t["name"] for t in rj["tools"]] == tools, "%s: run.json tools %s" % (name, [t["name"] for t in rj["tools"]]))
    check(rj["start_ns"] <= rj["window_start_ns"] <= rj["window_end_ns"] <= rj["end_ns"],
          "%s: run.json start <= window <= end (%s .. %s)" % (name, rj["window_start_time"], rj["window_end_time"]))
    if pid is not None:
        check(rj["options"]["pid"] == [pid], "%s: run.json options.pid %s" % (name, rj["options"]["pid"]))
    for t in rj["tools"]:
        cmd = t["command"]
        check("-j" in cmd and (pid is None or t["name"] == "runqlen" or ["-p", str(pid)] == cmd[2:4] or
                                 (not t["found"])),
              "%s: %s ran as %s" % (name, t["name"], " ".join(cmd)))
        check("data_quality" in t and "exit_code" in t and "status" in t, "%s: run.json has %s's status %s and data quality %s"
              % (name, t["name"], t["status"], json.dumps(t["data_quality"])[:120]))
    md = open(os.path.join(outdir, "report.md")).read()
    order = [h for h in re.findall(r"^## (.*)$", md, re.M)]
    want = ["Findings", "Method and scope", "CPU and run queue", "Off-CPU", "Locks", "Sleeps", "Thread pool"]
    check(order[:len(want)] == want and order[-2:] == ["Data quality", "How to rerun"],
          "%s: report sections in checklist order (%s)" % (name, order))
    recs = {}
    for t in rj["tools"]:
        path = os.path.join(outdir, t["name"] + ".ndjson")
        if not t["found"]:
            continue
        lines = [l for l in open(path).read().splitlines() if l.strip()]
        recs[t["name"]] = [json.loads(l) for l in lines]
        if os.path.exists(os.path.join(SCHEMA_DIR, "%s.schema.json" % t["name"])):
            validate(t["name"], lines)
    return rj, recs


def number(s, unit):
    """The first number followed by `unit` in a finding's number text."""
    m = re.search(r"([\d.]+)%s" % re.escape(unit), s)
    return float(m.group(1)) if m else None


def _trusted_chain(path):
    """Every directory from / down to `path` is root's and writable by no one else
    (runbook's rule for runbook files)."""
    path = os.path.realpath(path)
    while True:
        st = os.stat(path)
        if st.st_uid != 0 or st.st_mode & 0o022:
            return False
        if path == "/":
            return True
        path = os.path.dirname(path)


def safe_tmpdir(prefix):
    """A new root-owned directory (0755) where runbook trusts runbook files: every
    directory above it is root's and writable by no one else (not /tmp, which is
    world-writable). Under /run, or the build tree's directory."""
    for base in ("/run", os.path.dirname(os.path.realpath(RUNBOOK))):
        if os.path.isdir(base) and _trusted_chain(base):
            d = tempfile.mkdtemp(prefix=prefix, dir=base)
            os.chmod(d, 0o755)
            return d
    raise RuntimeError("no root-owned directory that only root can write (tried /run and %s)"
                       % os.path.dirname(RUNBOOK))
