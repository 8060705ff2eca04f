#!/usr/bin/env python3
"""Fleets (issue 24): contrib/ansible/runbook.yml run by ansible-playbook (Debian's
ansible-core) on an inventory of local host aliases, with the tools of the build tree.

- host-a: lock-contention on mutex_contention by PID; host-b: sleepy-process on the
  same process found by its name (pgrep -x); both run at once. Each host's report
  directory is fetched and unpacked; its run.json names the runbook and the workload's
  PID, its findings (run.json's "findings", the same as report.md's) are the ones the
  workload makes: lockstat's top finding names cache_lock; naptime counts the
  workload's sleeps.
- host-c: bpfdiag_command that does not exist; host-d: a bpfdiag whose runbook hangs
  (the real one for doctor), with a 3 s timeout. Both are in the index as failed, with
  the step and the reason; the play exits 2 naming them; host-d's hung run is gone
  after it.
- index.html lists the four hosts in inventory order, links each fetched host's
  report.html and run.json (files that exist), shows host-a's cache_lock finding.
- fleet_index.py against hostile reports (a symlink, a device, ../, absolute and nested
  paths in the archive, markup and control characters in run.json and in a failure,
  JSON nested 200000 deep, a broken archive, a bad host name): nothing written outside
  the host's directory, nothing unescaped, every host listed with its status.
- Nothing is left: no remote temporary directory, no async job file, no ~/.ansible,
  no process. (The play's time is printed: 40 s on this 2-CPU machine at load 6,
  85-106 s at load 11.)
"""
import glob
import html.parser
import io
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import BIN, SRC, check, finish, need, require_built, require_root, tool, wait_for, workload  # noqa: E402

require_root()
PLAYBOOK = need("ansible-playbook", "ansible-core")
BPFDIAG = tool("bpfdiag")
require_built(BPFDIAG, tool("runbook"), tool("doctor"), workload("mutex_contention"))
CONTRIB = os.path.join(SRC, "contrib/ansible")
INDEX = os.path.join(CONTRIB, "fleet_index.py")
TMP = tempfile.mkdtemp(prefix="bpfdiag-ansible-test-")
ROOT_HOME = pwd.getpwuid(0).pw_dir
LEFT_BEFORE = {p: os.path.exists(p) for p in (os.path.join(ROOT_HOME, ".ansible"),
                                              os.path.join(ROOT_HOME, ".ansible_async"))}
REMOTE_TMP_BEFORE = set(glob.glob("/tmp/bpfdiag-fleet-*"))


class Rows(html.parser.HTMLParser):
    """index.html's host rows: {host: {"status", "links": [href], "findings": [text], "text"}}."""

    def __init__(self):
        super().__init__()
        self.rows, self.order, self.cur, self.raw_scripts = {}, [], None, 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script":
            self.raw_scripts += 1
        if tag == "tr" and "data-host" in a:
            self.cur = {"status": a.get("data-status"), "links": [], "findings": [], "text": ""}
            self.rows[a["data-host"]] = self.cur
            self.order.append(a["data-host"])
        elif tag == "a" and self.cur is not None:
            self.cur["links"].append(a.get("href"))
        elif tag == "li" and self.cur is not None and a.get("class") == "finding":
            self.cur["findings"].append("")

    def handle_endtag(self, tag):
        if tag == "tr":
            self.cur = None

    def handle_data(self, data):
        if self.cur is not None:
            self.cur["text"] += data
            if self.cur["findings"]:
                self.cur["findings"][-1] += data


def parse_index(path):
    p = Rows()
    p.feed(open(path, encoding="utf-8").read())
    return p


# --- 1. fleet_index.py against a hostile host report (no ansible needed) -------------------
hostile = os.path.join(TMP, "hostile")
os.mkdir(hostile, 0o700)
outside = os.path.join(TMP, "outside")
with open(os.path.join(hostile, "hosts.json"), "w") as f:
    json.dump({"hosts": ["evil", "../escape", "gone", "broken", "bad", "deep"], "started": "<b>now</b>",
               "failures": {"bad": {"run": hostile, "step": "<u>step</u>", "error": "<svg onload=alert(1)>"},
                            "gone": {"run": "/elsewhere", "step": "an earlier run's"}}}, f)
evil_run = {"suite": "bpfdiag", "runbook": "<script>alert(1)</script>", "version": "0.3.0", "host": "x\x1b[31m",
            "options": {"pid": [1]}, "tools": [{"name": "lockstat", "status": "exit 0", "losses": "lost_events <i>7</i>"}],
            "findings": [{"tool": "lockstat", "text": "<img src=x onerror=alert(1)> lock", "number": "\"><script>x</script>",
                          "problem": True, "context": False}]}
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w:gz") as t:
    def add(name, data=b"", **kw):
        ti = tarfile.TarInfo(name)
        for k, v in kw.items():
            setattr(ti, k, v)
        ti.size = len(data) if ti.type == tarfile.REGTYPE else 0
        t.addfile(ti, io.BytesIO(data) if ti.type == tarfile.REGTYPE else None)
    add("./run.json", json.dumps(evil_run).encode())
    add("./report.html", b"<html>host page</html>")
    add("./link", type=tarfile.SYMTYPE, linkname="/etc/passwd")
    add("../outside", b"escaped")
    add("/tmp/abs-" + os.path.basename(TMP), b"escaped")
    add("./sub/x", b"nested")
    add("./dev", type=tarfile.CHRTYPE)
with open(os.path.join(hostile, "evil.tar.gz"), "wb") as f:
    f.write(buf.getvalue())
with open(os.path.join(hostile, "broken.tar.gz"), "wb") as f:
    f.write(b"not a tar file")
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w:gz") as t:
    deep = b"[" * 200000 + b"]" * 200000
    ti = tarfile.TarInfo("run.json")
    ti.size = len(deep)
    t.addfile(ti, io.BytesIO(deep))
with open(os.path.join(hostile, "deep.tar.gz"), "wb") as f:
    f.write(buf.getvalue())
r = subprocess.run([sys.executable, INDEX, hostile], capture_output=True, text=True, timeout=60)
check(r.returncode == 0 and os.path.exists(os.path.join(hostile, "index.html")),
      "fleet_index.py writes the index of a hostile run (rc %d, %r)" % (r.returncode, r.stderr[-300:]))
got = sorted(os.listdir(os.path.join(hostile, "evil"))) if os.path.isdir(os.path.join(hostile, "evil")) else None
check(got == ["report.html", "run.json"] and not os.path.exists(outside)
      and not os.path.exists("/tmp/abs-" + os.path.basename(TMP)),
      "hostile archive: only its plain regular files unpacked, no link, device, ../ or absolute path (%s)" % got)
page = open(os.path.join(hostile, "index.html"), encoding="utf-8").read() if r.returncode == 0 else ""
ix = parse_index(os.path.join(hostile, "index.html")) if page else Rows()
check(page and ix.raw_scripts == 0 and "<img" not in page and "<i>" not in page and "<b>now" not in page
      and "<u>" not in page and "<svg" not in page and "&lt;svg onload=alert(1)&gt;" in page
      and "&lt;img src=x onerror=alert(1)&gt;" in page and "\x1b" not in page + r.stdout,
      "hostile run.json: every string escaped in the page, no control characters on the page or stdout")
check(ix.order == ["evil", "../escape", "gone", "broken", "bad", "deep"]
      and [ix.rows[h]["status"] for h in ix.order] == ["ok", "failed", "no result", "bad report", "failed", "bad report"],
      "hostile run: every listed host in the index, bad name failed, missing one 'no result' (another run's "
      "failure ignored), bad archive or run.json 'bad report' (%s)" % [(h, ix.rows[h]["status"]) for h in ix.order])
check('content="default-src \'none\'' in page, "the index forbids scripts (Content-Security-Policy)")

# --- 2. the playbook on four local host aliases --------------------------------------------
# a copy of the workload under a name of its own: host-b finds it by name, and another
# mutex_contention running on this machine must not be taken for it
wl_exe = os.path.join(TMP, "fleetwl%d" % (os.getpid() % 100000))
shutil.copy(workload("mutex_contention"), wl_exe)
wl = subprocess.Popen([wl_exe, "--threads", "4", "--hold-us", "500", "--gap-us", "200",
                       "--hold-mode", "sleep", "--duration-ms", "120000"],
                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
comm = os.path.basename(wl_exe)
# (Popen can return before the kernel renames the child: wait for the name itself)
wait_for(lambda: open("/proc/%d/comm" % wl.pid).read().strip() == comm, 5, "the workload runs, named %s" % comm)
fleet = os.path.join(TMP, "fleet")
# host-d's bpfdiag: the real one, except that its runbook hangs (a host whose run never
# ends: the play must end it at bpfdiag_timeout and go on)
HUNG_SECS = str(300 + os.getpid() % 1000)  # `sleep HUNG_SECS`: this test's, found by its argv
hung = os.path.join(TMP, "bpfdiag-hung")
with open(hung, "w") as f:
    f.write('#!/bin/sh\n[ "$1" = runbook ] && exec sleep %s\nexec %s "$@"\n' % (HUNG_SECS, BPFDIAG))
os.chmod(hung, 0o755)
inventory = os.path.join(TMP, "inventory.ini")
with open(inventory, "w") as f:
    f.write("""[fleet]
host-a bpfdiag_pid={pid} bpfdiag_runbook=lock-contention
host-b bpfdiag_process={comm} bpfdiag_runbook=sleepy-process
host-c bpfdiag_command=/nonexistent/bpfdiag
host-d bpfdiag_command={hung} bpfdiag_timeout=3

[fleet:vars]
ansible_connection=local
ansible_python_interpreter=/usr/bin/python3
ansible_become_method=su
bpfdiag_command={bpfdiag}
bpfdiag_duration=3
bpfdiag_poll=1
""".format(pid=wl.pid, comm=comm, bpfdiag=BPFDIAG, hung=hung))
home = os.path.join(TMP, "home")
os.mkdir(home, 0o700)
open(os.path.join(TMP, "ansible.cfg"), "w").close()
env = dict(os.environ, HOME=home, ANSIBLE_CONFIG=os.path.join(TMP, "ansible.cfg"),
           ANSIBLE_HOME=os.path.join(TMP, "ansible-home"), ANSIBLE_LOCAL_TEMP=os.path.join(TMP, "ansible-local"),
           ANSIBLE_REMOTE_TEMP=os.path.join(TMP, "ansible-remote"), ANSIBLE_ASYNC_DIR=os.path.join(TMP, "ansible-async"),
           ANSIBLE_NOCOLOR="1", ANSIBLE_PIPELINING="1", ANSIBLE_RETRY_FILES_ENABLED="0", ANSIBLE_FORKS="5")
t0 = time.monotonic()
r = subprocess.run([PLAYBOOK, "-i", inventory, os.path.join(CONTRIB, "runbook.yml"), "-e", "bpfdiag_fleet_dir=" + fleet],
                   capture_output=True, text=True, timeout=240, env=env, cwd=TMP)
took = time.monotonic() - t0
wl.kill()
wl.wait()
print("     ansible-playbook took %.1f s" % took)
recap = dict(re.findall(r"^(\S+)\s+: (ok=.*)$", r.stdout, re.M))
if r.returncode != 2 or os.environ.get("FLEET_VERBOSE"):
    print(r.stdout[-20000:], r.stderr[-2000:])
check(r.returncode == 2 and "2 of 4 hosts failed: host-c" in r.stdout and "host-d (" in r.stdout,
      "the play ran to its end and exits 2 naming the two failed hosts (rc %d)" % r.returncode)
check(all(re.search(r"\bfailed=0\b", recap.get(h, "failed=?")) and "unreachable=0" in recap.get(h, "")
          for h in ("host-a", "host-b", "host-c", "host-d")),
      "every host went through the play (a failed step is rescued and recorded): %s" % recap)
runs = glob.glob(os.path.join(fleet, "fleet-*"))
check(len(runs) == 1, "one run directory under bpfdiag_fleet_dir (%s)" % runs)
rundir = runs[0] if runs else fleet

# --- 3. each good host's report -----------------------------------------------------------
FINDING = re.compile(r"^- \[( |x)\] (.*) — \*\*(.*)\*\* \(([\w-]+)\)$")


def md_findings(d):
    return [(m.group(4), m.group(2), m.group(3)) for m in map(FINDING.match, open(os.path.join(d, "report.md")).read()
                                                              .split("\n## Method")[0].splitlines()) if m]


reports = {}
for host, book in (("host-a", "lock-contention"), ("host-b", "sleepy-process")):
    d = os.path.join(rundir, host)
    have = sorted(os.listdir(d)) if os.path.isdir(d) else []
    check({"run.json", "report.html", "report.md", "offcputime.svg"} <= set(have),
          "%s: its report directory fetched and unpacked (%d files)" % (host, len(have)))
    try:
        rj = json.load(open(os.path.join(d, "run.json")))
    except (OSError, ValueError) as e:
        check(False, "%s: run.json parses (%s)" % (host, e))
        continue
    reports[host] = rj
    check(rj.get("runbook") == book and rj.get("options", {}).get("pid") == [wl.pid],
          "%s: run.json says %s on PID %s (the workload's: %d)" % (host, rj.get("runbook"), rj.get("options", {}).get("pid"),
                                                                   wl.pid))
    fs = rj.get("findings", [])
    check(fs and [(f["tool"], f["text"], f["number"]) for f in fs] == md_findings(d)
          and all(isinstance(t.get("losses"), str) for t in rj["tools"]),
          "%s: run.json's findings are report.md's, in order (%d), each tool's losses there too" % (host, len(fs)))
    check(all(t["status"] == "exit 0" for t in rj["tools"]),
          "%s: every tool ran to the end (%s)" % (host, [(t["name"], t["status"]) for t in rj["tools"]]))
fa = [f for f in reports.get("host-a", {}).get("findings", []) if f["problem"] and not f["context"]]
check(fa and fa[0]["tool"] == "lockstat" and "cache_lock" in fa[0]["text"],
      "host-a: the top finding is lockstat's, naming cache_lock (%s)" % (fa[0]["text"][:100] if fa else None))
nap = [f for f in reports.get("host-b", {}).get("findings", []) if f["tool"] == "naptime"]
n_sleeps = int(nap[0]["text"].split()[0]) if nap and nap[0]["text"].split()[0].isdigit() else 0
check(nap and n_sleeps > 1000 and "by 1 process" in nap[0]["text"],
      "host-b: naptime counts the workload's sleeps (~2800/s): %s" % (nap[0]["text"][:80] if nap else None))

# --- 4. the index ---------------------------------------------------------------------------
idx = os.path.join(rundir, "index.html")
ix = parse_index(idx) if os.path.exists(idx) else Rows()
check(ix.order == ["host-a", "host-b", "host-c", "host-d"]
      and [ix.rows[h]["status"] for h in ix.order] == ["ok", "ok", "failed", "failed"],
      "index.html lists the four hosts in inventory order with their status (%s)"
      % [(h, ix.rows[h]["status"]) for h in ix.order])
for h in ("host-a", "host-b"):
    links = ix.rows.get(h, {}).get("links", [])
    check(links == [h + "/report.html", h + "/run.json"] and all(os.path.isfile(os.path.join(rundir, l)) for l in links),
          "%s: index links its report.html and run.json, both exist (%s)" % (h, links))
check(any("cache_lock" in t and "(lockstat)" in t for t in ix.rows.get("host-a", {}).get("findings", [])[:1]),
      "index: host-a's top finding is the cache_lock one (%s)" % ix.rows.get("host-a", {}).get("findings", [])[:1])
c = ix.rows.get("host-c", {}).get("text", "")
check("bpfdiag runs" in c and "no bpfdiag at /nonexistent/bpfdiag" in c,
      "index: host-c failed at finding bpfdiag, saying where it looked (%r)" % c[:200])
d = ix.rows.get("host-d", {}).get("text", "")
check("runbook ran" in d and "did not finish within bpfdiag_timeout (3 s)" in d,
      "index: host-d failed at running the runbook: its time limit (%r)" % d[:200])
fj = json.load(open(os.path.join(rundir, "fleet.json"))) if os.path.exists(os.path.join(rundir, "fleet.json")) else {}
check([(h["host"], h["status"]) for h in fj.get("hosts", [])] ==
      [("host-a", "ok"), ("host-b", "ok"), ("host-c", "failed"), ("host-d", "failed")],
      "fleet.json has the same hosts and status")

# --- 5. nothing left behind ---------------------------------------------------------------


def another_tests(pid):
    """pid descends from another integration test running beside this one (ctest -j runs
    the robustness tests side by side: test_cli_hardening's tools are not this run's)."""
    me = os.path.basename(__file__)
    for _ in range(64):
        try:
            argv = open("/proc/%d/cmdline" % pid, "rb").read().split(b"\0")
            ppid = int(open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        name = os.path.basename(argv[1].decode(errors="replace")) if len(argv) > 1 else ""
        if name.startswith("test_") and name.endswith(".py") and name != me:
            return True
        if ppid <= 1:
            return False
        pid = ppid
    return False


def ours():
    """Processes still running a program of this build tree (but another test's), or
    host-d's hung runbook."""
    left = []
    for p in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            argv = open(p, "rb").read().split(b"\0")
        except OSError:
            continue
        argv0 = argv[0].decode(errors="replace")
        if argv[:2] == [b"sleep", HUNG_SECS.encode()]:
            left.append(argv0)
        elif (argv0.startswith(os.path.realpath(BIN) + "/") or argv0.startswith(BIN + "/")) and \
                not another_tests(int(p.split("/")[2])):
            left.append(argv0)
    return left


wait_for(lambda: not ours(), 10, "no process of the run is left (host-d's hung runbook was killed)")
left = sorted(set(glob.glob("/tmp/bpfdiag-fleet-*")) - REMOTE_TMP_BEFORE)
check(not left, "every host's temporary directory is removed (%s)" % left)
left = [p for d in ("ansible-async", "ansible-remote") for p in glob.glob(os.path.join(TMP, d, "*"))]
check(not left, "no async job file or module left on the hosts (%s)" % left)
check(all(os.path.exists(p) == was for p, was in LEFT_BEFORE.items()),
      "ansible wrote nothing in %s (~/.ansible, ~/.ansible_async)" % ROOT_HOME)

shutil.rmtree(TMP, ignore_errors=True)
finish()
