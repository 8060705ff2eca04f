#!/usr/bin/env python3
"""runbook runs as root; another user must not be able to steer it (issue 19, items 1, 2, 6).
`nobody` plays the attacker (setpriv --reuid=65534).

(a) Runbooks are code. Each case has a makefile that would create a marker file if
    root ran it; the marker must not exist afterwards and runbook exits 2 with one line:
    - a nobody-owned world-writable directory in $BPFDIAG_RUNBOOKS holding
      `tool: make --file=EVIL.mk` (before: root ran the makefile);
    - the same runbook given by path, in a directory nobody made under /tmp;
    - a root-owned runbook in a safe directory naming `make` (not a tool of the suite);
    - `tool: lockstat --bogus`, `tool: lockstat --svg FILE`, `tool: offcputime 5`
      (unknown option, an option naming a file, a positional): refused naming
      FILE:LINE, and no report directory is created.
(b) Report directories. A root-only file (0600, in a 0700 directory) must be unchanged:
    - nobody pre-creates -o DIR holding report.html, runqlen.ndjson and
      runqlen.stderr.txt as symbolic links to it: refused (before: overwritten);
    - -o naming a symbolic link (made by nobody) to an empty root directory: refused,
      the directory stays empty (before: the report was written into it);
    - -o naming a non-empty directory: refused, its file unchanged;
    - the default directory name ends in a random suffix and is mode 0700 (before:
      ./runbook-NAME-DATE-TIME, predictable to the second).
(c) Children die with their runbook: `runbook cpu-saturation -d 60` is killed with
    SIGKILL once every tool has attached; every tool must be gone within 10 s and none
    of the BPF programs they held may still be loaded (before: runqlen, profile and
    offcputime ran on until signalled by hand).
"""
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import check, finish, need, require_built, require_root, run, tool, wait_for  # noqa: E402
from harness_bpf import bpf_fds, leftover_bpf_programs  # noqa: E402
from runbook_util import RUNBOOK, safe_tmpdir, wait_all_attached  # noqa: E402

require_root()
require_built(RUNBOOK, tool("runqlen"), tool("offcputime"), tool("lockstat"))
need("make", "make")
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
SAFE = safe_tmpdir("bpfdiag-rbsec-")
ATTACK = subprocess.run(NOBODY + ["mktemp", "-d", "/tmp/bpfdiag-rbsec-nobody-XXXXXX"],
                        check=True, capture_output=True, text=True).stdout.strip()


def as_nobody(cmd):
    subprocess.run(NOBODY + ["sh", "-c", cmd], check=True)


def nobody_writes(path, text):
    subprocess.run(NOBODY + ["sh", "-c", 'cat > "$0"', path], input=text, text=True, check=True)


def refused(r, label, *want):
    """Exit 2, one line on stderr, containing every string of `want`."""
    lines = r.stderr.strip().splitlines()
    return check(r.returncode == 2 and len(lines) == 1 and all(w in r.stderr for w in want),
                 "%s: refused with exit 2 and one line (rc %d: %r)" % (label, r.returncode, r.stderr.strip()[:300]))


def makefile(marker):
    """A makefile that creates `marker` when run."""
    return "all:\n\ttouch %s\n" % marker


# --- (a) runbooks are code --------------------------------------------------------------
# 1. nobody's world-writable directory in $BPFDIAG_RUNBOOKS (under a safe root-owned one,
# so it is refused for its own owner and mode, not for /tmp's)
evil = os.path.join(SAFE, "evil")
os.mkdir(evil)
os.chown(evil, 65534, 65534)
os.chmod(evil, 0o777)
marker = os.path.join(evil, "MARKER")
nobody_writes(evil + "/evil.mk", makefile(marker))
nobody_writes(evil + "/evil.runbook", "tool: make --file=%s/evil.mk\n" % evil)
out = os.path.join(SAFE, "out-a1")
r = run([RUNBOOK, "evil", "-d", "1", "-o", out], env=dict(os.environ, BPFDIAG_RUNBOOKS=evil))
refused(r, "nobody's $BPFDIAG_RUNBOOKS directory", "owned by uid 65534")
check(not os.path.exists(marker), "nobody's $BPFDIAG_RUNBOOKS directory: the makefile did not run (no %s)" % marker)
check(not os.path.exists(out), "nobody's $BPFDIAG_RUNBOOKS directory: no report directory")
lst = run([RUNBOOK, "--list"], env=dict(os.environ, BPFDIAG_RUNBOOKS=evil))
check(lst.returncode == 0 and "evil" not in lst.stdout and "cpu-saturation" in lst.stdout and
      len([l for l in lst.stderr.splitlines() if l.startswith("runbook: warning:") and evil in l]) == 1,
      "--list skips nobody's directory with one warning line (%r)" % lst.stderr.strip()[:200])

# 2. the same by path, in a directory nobody made under /tmp
marker2 = os.path.join(ATTACK, "MARKER")
nobody_writes(ATTACK + "/evil.mk", makefile(marker2))
nobody_writes(ATTACK + "/evil.runbook", "tool: make --file=%s/evil.mk\n" % ATTACK)
r = run([RUNBOOK, os.path.join(ATTACK, "evil.runbook"), "-d", "1", "-o", os.path.join(SAFE, "out-a2")])
refused(r, "runbook /tmp/.../evil.runbook (nobody's)", "refused", "is owned by uid 65534")
check(not os.path.exists(marker2), "runbook PATH: the makefile did not run")
# /tmp is root's sticky directory: nobody cannot rename or replace root's entries in it,
# so a root-owned runbook there is as safe as its own owner and mode (a checkout or build
# tree under /tmp keeps working), but a hard link nobody made to a root file is refused
rootbook = os.path.join("/tmp", os.path.basename(SAFE) + ".runbook")
with open(rootbook, "w") as f:
    f.write("tool: naptime\n")
os.chmod(rootbook, 0o644)
r = run([RUNBOOK, rootbook, "-d", "0.5", "-o", os.path.join(SAFE, "out-a2b")])
check(r.returncode == 0 and os.path.exists(os.path.join(SAFE, "out-a2b", "report.md")),
      "a root-owned runbook directly in sticky /tmp runs (rc %d: %r)" % (r.returncode, r.stderr.strip()[-300:]))
linked = os.path.join(ATTACK, "linked.runbook")
ln = subprocess.run(NOBODY + ["ln", rootbook, linked], capture_output=True, text=True)
if ln.returncode == 0:  # fs.protected_hardlinks=0 lets nobody link root's file
    r = run([RUNBOOK, linked, "-d", "0.5", "-o", os.path.join(SAFE, "out-a2c")])
    refused(r, "nobody's hard link to a root runbook", "refused")
    rootlink = os.path.join("/tmp", os.path.basename(SAFE) + "-hl.runbook")
    subprocess.run(NOBODY + ["ln", rootbook, rootlink], check=True)
    r = run([RUNBOOK, rootlink, "-d", "0.5", "-o", os.path.join(SAFE, "out-a2d")])
    refused(r, "a hard link nobody made in /tmp to a root runbook", "hard links in a shared directory")
    os.unlink(rootlink)
else:
    check("Operation not permitted" in ln.stderr,
          "nobody cannot hard-link root's runbook (fs.protected_hardlinks): %r" % ln.stderr.strip())
os.unlink(rootbook)

# 3. a root-owned runbook in a safe directory naming a program that is not the suite's
books = os.path.join(SAFE, "books")
os.mkdir(books, 0o755)
marker3 = os.path.join(SAFE, "MARKER3")
with open(os.path.join(books, "mk.mk"), "w") as f:
    f.write(makefile(marker3))


def book(name, text):
    with open(os.path.join(books, name + ".runbook"), "w") as f:
        f.write(text)
    os.chmod(os.path.join(books, name + ".runbook"), 0o644)


ENV = dict(os.environ, BPFDIAG_RUNBOOKS=books)
book("mk", "title: make\ntool: naptime\ntool: make --file=%s/mk.mk\n" % books)
r = run([RUNBOOK, "mk", "-d", "1", "-o", os.path.join(SAFE, "out-a3")], env=ENV)
refused(r, "tool: make (root's runbook)", "mk.runbook:3:", "'make' is not a tool of the suite")
check(not os.path.exists(marker3), "tool: make: the makefile did not run")

# 4. arguments are checked by the tool's own option table and parser
for name, line, want in (("bogus", "lockstat --bogus", "'bogus' does not exist"),
                         ("svg", "lockstat --svg /etc/bpfdiag-rbsec", "--svg is not allowed"),
                         ("pprof", "pmheld --pprof /etc/bpfdiag-rbsec", "--pprof is not allowed"),
                         ("prom", "naptime --prometheus /etc/bpfdiag-rbsec", "--prometheus is not allowed"),
                         ("listen", "naptime --listen 9464", "--listen is not allowed"),
                         ("pos", "offcputime 5", "'5': no positional"),
                         ("bad", "lockstat -s abc", "lockstat:")):
    book(name, "tool: naptime\n# comment\ntool: %s\n" % line)
    out = os.path.join(SAFE, "out-" + name)
    r = run([RUNBOOK, name, "-d", "1", "-o", out], env=ENV, timeout=90)
    refused(r, "tool: %s" % line, "%s.runbook:3: " % name, want)
    check(not os.path.exists(out), "tool: %s: refused before anything ran (no report directory)" % line)
check(not os.path.exists("/etc/bpfdiag-rbsec"), "no file written where a runbook's --svg or --pprof pointed")

# --- (b) report directories ----------------------------------------------------------------
secret_dir = os.path.join(SAFE, "rootonly")
os.mkdir(secret_dir, 0o700)
secret = os.path.join(secret_dir, "file")
with open(secret, "w") as f:
    f.write("root's own data\n")
os.chmod(secret, 0o600)
os.chmod(SAFE, 0o755)
before = os.stat(secret)
book("quick", "title: quick\ntool: runqlen\n")

# 1. nobody's DIR with links to the root file
trap = os.path.join(ATTACK, "out")
as_nobody("mkdir %s && for f in report.html runqlen.ndjson runqlen.stderr.txt; do ln -s %s %s/$f; done"
          % (trap, secret, trap))
r = run([RUNBOOK, "quick", "-d", "1", "-o", trap], env=ENV, timeout=90)
refused(r, "-o nobody's directory", "owned by uid 65534")
after = os.stat(secret)
check(open(secret).read() == "root's own data\n" and (after.st_mtime_ns, after.st_size) == (before.st_mtime_ns, before.st_size),
      "-o nobody's directory: the root-only file behind its links is unchanged")

# 2. -o naming nobody's symbolic link to an empty root directory
empty = os.path.join(SAFE, "emptyroot")
os.mkdir(empty, 0o700)
link = os.path.join(ATTACK, "link")
as_nobody("ln -s %s %s" % (empty, link))
r = run([RUNBOOK, "quick", "-d", "1", "-o", link], env=ENV, timeout=90)
refused(r, "-o a symbolic link", "symbolic link")
r2 = run([RUNBOOK, "quick", "-d", "1", "-o", link + "/"], env=ENV, timeout=90)
refused(r2, "-o a symbolic link, with a trailing /", "symbolic link")
check(os.listdir(empty) == [], "-o a symbolic link: the directory it points to is still empty")

# 3. a non-empty directory
full = os.path.join(SAFE, "full")
os.mkdir(full, 0o700)
with open(os.path.join(full, "keep"), "w") as f:
    f.write("keep\n")
r = run([RUNBOOK, "quick", "-d", "1", "-o", full], env=ENV, timeout=90)
refused(r, "-o a non-empty directory", "not empty")
check(os.listdir(full) == ["keep"] and open(os.path.join(full, "keep")).read() == "keep\n",
      "-o a non-empty directory: its file is unchanged, nothing added")

# 4. the default name: unpredictable, created 0700
cwd = os.path.join(SAFE, "cwd")
os.mkdir(cwd, 0o755)
r = run([RUNBOOK, "quick", "-d", "1"], env=ENV, cwd=cwd, timeout=120)
made = os.listdir(cwd)
name_ok = len(made) == 1 and re.fullmatch(r"runbook-quick-\d{8}-\d{6}-[a-z0-9]{8}", made[0])
check(r.returncode == 0 and name_ok, "default report directory %s: runbook-NAME-DATE-TIME-RANDOM (rc %d %r)"
      % (made, r.returncode, r.stderr.strip()[-200:]))
if name_ok:
    st = os.lstat(os.path.join(cwd, made[0]))
    check(stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) & 0o077 == 0 and
          "report.html" in os.listdir(os.path.join(cwd, made[0])),
          "default report directory is mode %o (no group/other access) and holds the report" % stat.S_IMODE(st.st_mode))


# --- (c) children die with their runbook ------------------------------------------------------
def children(pid):
    """{child pid: its start time} of `pid`."""
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids[int(d)] = fields[19]
    return kids


def alive(pid, start):
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[19] == start and fields[0] != "Z"
    except OSError:
        return False


p = subprocess.Popen([RUNBOOK, "cpu-saturation", "-d", "60", "-o", os.path.join(SAFE, "out-kill")],
                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
kids, progs = {}, set()
try:
    attached, err = wait_all_attached(p)
    kids = children(p.pid)
    for k in kids:
        progs |= bpf_fds(k)["prog_ids"]
    check(attached and len(kids) >= 2 and progs,
          "cpu-saturation: every tool attached: %d tools, %d BPF programs (%r)" % (len(kids), len(progs), err[-200:]))
    p.kill()
    p.wait()
    t0 = time.monotonic()
    wait_for(lambda: not any(alive(k, s) for k, s in kids.items()), 10.0,
             "kill -9 runbook: its %d tools exit (SIGTERM from the parent-death signal)" % len(kids), step=0.05)
    print("     tools gone %.2f s after the kill" % (time.monotonic() - t0))
    left = leftover_bpf_programs(ours=progs)
    check(left == [], "kill -9 runbook: none of the tools' %d BPF programs is still loaded (%s)" % (len(progs), left))
finally:
    if p.poll() is None:
        p.kill()
        p.wait()
    for k, s in kids.items():  # the old code leaves them running: end them here
        if alive(k, s):
            os.kill(k, signal.SIGKILL)

shutil.rmtree(SAFE, ignore_errors=True)
shutil.rmtree(ATTACK, ignore_errors=True)
finish()
