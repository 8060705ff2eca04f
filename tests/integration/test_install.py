#!/usr/bin/env python3
"""Install layout and the bpfdiag command (issues 12 and 24).

- `cmake --install` into a staging prefix puts every program named in CMakeLists.txt
  (set(TOOLS ...) and set(UTILS ...)) in libexec/bpfdiag; sbin holds only relative
  symbolic links to bpfdiag and the BCC-style tool names (never profile, doctor,
  runbook or flamegraph); one gzip -9n man page per program in share/man/man8 that
  `man 8 <program>` renders; the JSON Schemas, the runbooks, the copyright file and
  changelog.Debian.gz.
- Every program answers --version with "NAME (bpfdiag) VERSION" (CMake's
  BPFDIAG_VERSION), staged and in the build tree.
- bpfdiag, in the build tree and staged (through its sbin link): `help` lists every
  program with the summary its own --help starts with; an unknown command or option is
  one line on stderr and exit 2; `bpfdiag TOOL ARGS` is the tool itself (its exit
  status and messages, its process: /proc/PID/exe of `bpfdiag runqlen` is runqlen);
  the staged bpfdiag runs the staged runqlen for real and the staged runbook finds the
  staged runbooks. The .deb itself is tests/integration/test_deb.py.
"""
import gzip
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (BIN, SRC, check, end_process, finish, require_root, run, start, stop,  # noqa: E402
                     wait_attached, wait_for)
from runbook_util import safe_tmpdir  # noqa: E402

require_root()
BUILD = os.path.dirname(os.path.abspath(BIN))
# not under /tmp: the staged bpfdiag and runbook trust programs and runbooks only in
# directories that only root can write, every one from / down (runbook_util.safe_tmpdir)
TMP = safe_tmpdir("bpfdiag-install-test-")
CMAKE = open(os.path.join(SRC, "CMakeLists.txt")).read()
VERSION = re.search(r"set\(BPFDIAG_VERSION (\S+)\)", CMAKE).group(1)
SBIN = {"bpfdiag", "offcputime", "lockstat", "pmheld", "naptime", "runqlen", "threadpool"}


def programs():
    """Every tool and utility CMakeLists.txt builds (the lists a new tool joins)."""
    names = []
    for var in ("TOOLS", "UTILS"):
        m = re.search(r"set\(%s ([^)]*)\)" % var, CMAKE)
        names += m.group(1).split() if m else []
    return [n for n in names if os.path.exists(os.path.join(SRC, "tools", n, "main.cpp"))]


def man_renders(manpath, name):
    r = subprocess.run(["man", "-P", "cat", "8", name], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, MANPATH=manpath, MANWIDTH="80", LC_ALL="C.UTF-8"))
    return r.returncode == 0 and name in r.stdout and "SYNOPSIS" in r.stdout, r.stderr.strip()[:200]


def files_under(root):
    out = set()
    for d, _, fs in os.walk(root):
        for f in fs:
            out.add(os.path.relpath(os.path.join(d, f), root))
    return out


def check_bpfdiag(exe, where):
    """bpfdiag's listing, errors and pass-through, run as `exe`."""
    h = run([exe, "help"])
    block = h.stdout.split("\nCOMMANDS:\n", 1)[-1].split("\n\n")[0]
    block = re.sub(r"\n {5,}", " ", block)  # a long summary continues on the next line
    listed = dict(re.findall(r"^  (\S+)  +(.*)$", block, re.M))
    for p in PROGS:
        if p == "bpfdiag":
            continue
        own = run([os.path.join(BIN, p), "--help"]).stdout.split("\n", 1)[0]
        check(own == "%s - %s" % (p, listed.get(p)), "%s bpfdiag help lists %s as its --help does (%r)" % (where, p, listed.get(p)))
    check(h.returncode == 0 and run([exe]).stdout == h.stdout, "%s bpfdiag alone prints the same list, exit 0" % where)
    for bad, what in ((["nosuchtool"], "unknown command"), (["--frobnicate"], "unknown option"),
                      (["../bin/runqlen"], "unknown command"), (["help", "sh"], "unknown command")):
        r = run([exe] + bad)
        check(r.returncode == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1 and what in r.stderr,
              "%s bpfdiag %s: exit 2, one line on stderr (%d, %r)" % (where, " ".join(bad), r.returncode, r.stderr))
    r = run([exe, "runqlen", "-F", "0"])
    own = run([os.path.join(BIN, "runqlen"), "-F", "0"])
    check(r.returncode == own.returncode == 2 and r.stderr == own.stderr,
          "%s bpfdiag runqlen -F 0 is runqlen's own usage error (%d, %r)" % (where, r.returncode, r.stderr))
    r = run([exe, "help", "offcputime"])
    check(r.returncode == 0 and r.stdout.startswith("offcputime - "), "%s bpfdiag help offcputime is offcputime --help" % where)


PROGS = programs()
check(len(PROGS) >= 8 and "bpfdiag" in PROGS, "programs from CMakeLists.txt: %s" % " ".join(PROGS))

# --- 1. the build tree -------------------------------------------------------------------
for p in PROGS:
    v = run([os.path.join(BIN, p), "--version"])
    check(v.returncode == 0 and v.stdout == "%s (bpfdiag) %s\n" % (p, VERSION) and v.stderr == "",
          "build tree: %s --version (%r)" % (p, v.stdout))
v = run([os.path.join(BIN, "offcputime"), "-p", "not-a-pid", "--version"])
check(v.returncode == 0 and v.stdout == "offcputime (bpfdiag) %s\n" % VERSION, "--version wins over the rest of the line")
check_bpfdiag(os.path.join(BIN, "bpfdiag"), "build tree:")
# exec, not a child: the process bpfdiag started is the tool, and a signal reaches it
p = start([os.path.join(BIN, "bpfdiag"), "runqlen", "-j", "10"])
try:
    wait_for(lambda: os.path.basename(os.readlink("/proc/%d/exe" % p.pid)) == "runqlen", 10,
             "bpfdiag runqlen: the same process becomes runqlen (exec)")
    wait_attached(p)  # so that SIGINT asks for its report
    out, err, rc = stop(p)
    check(rc == 0 and '"type":"runqlen.summary"' in out,
          "SIGINT to bpfdiag's PID ends runqlen with its report, exit 0 (%d, %r)" % (rc, err[-200:]))
finally:
    end_process(p)

# a program in a directory others can write is not run (the same copy is, once it is not)
ww = os.path.join(TMP, "ww")
os.mkdir(ww)
for n in ("bpfdiag", "runqlen"):
    shutil.copy2(os.path.join(BIN, n), ww)
os.chmod(ww, 0o777)
r = run([os.path.join(ww, "bpfdiag"), "runqlen", "--version"])
check(r.returncode == 1 and r.stdout == "" and len(r.stderr.splitlines()) == 1 and "world-writable" in r.stderr,
      "bpfdiag refuses a tool in a world-writable directory: exit 1, one line (%d, %r)" % (r.returncode, r.stderr[:120]))
os.chmod(ww, 0o755)
r = run([os.path.join(ww, "bpfdiag"), "runqlen", "--version"])
check(r.returncode == 0 and r.stdout.startswith("runqlen (bpfdiag) "), "... and runs it once only root can write there")

# --- 2. cmake --install into a staging prefix ----------------------------------------------
stage = os.path.join(TMP, "stage")
r = run(["cmake", "--install", BUILD, "--prefix", "/usr"], timeout=300, env=dict(os.environ, DESTDIR=stage))
check(r.returncode == 0, "cmake --install (DESTDIR) exits 0 (%s)" % r.stderr.strip()[-200:])
usr = os.path.join(stage, "usr")
got = files_under(stage)
want = {"usr/libexec/bpfdiag/" + p for p in PROGS} | {"usr/share/man/man8/%s.8.gz" % p for p in PROGS}
check(want <= got, "installed: every program in libexec/bpfdiag, its man page in man8 (missing %s)" % sorted(want - got))
sbin = set(os.listdir(os.path.join(usr, "sbin")))
check(sbin == SBIN, "sbin holds bpfdiag and the BCC-style names only: %s" % sorted(sbin))
for n in sorted(sbin):
    link = os.readlink(os.path.join(usr, "sbin", n)) if os.path.islink(os.path.join(usr, "sbin", n)) else None
    check(link == "../libexec/bpfdiag/" + n and os.path.isfile(os.path.join(usr, "sbin", n)),
          "sbin/%s is a relative link into libexec/bpfdiag (%s)" % (n, link))
for p in PROGS:
    gz = os.path.join(usr, "share/man/man8/%s.8.gz" % p)
    if not os.path.exists(gz):
        continue
    head = open(gz, "rb").read(10)
    same = gzip.open(gz).read() == open(os.path.join(SRC, "man/man8/%s.8" % p), "rb").read()
    # gzip -9n: no file name (FLG bit 3) and no time stamp (MTIME 0) in the header
    check(same and head[3] & 0x08 == 0 and head[4:8] == b"\0\0\0\0",
          "%s.8.gz: the page, gzip -n (no name, no time stamp)" % p)
schemas = {"usr/share/bpfdiag/schema/" + f for f in os.listdir(os.path.join(SRC, "docs/schema"))}
check(schemas <= got, "installed: the JSON Schemas in share/bpfdiag/schema (missing %s)" % sorted(schemas - got))
runbooks = {"usr/share/bpfdiag/runbooks/" + f for f in os.listdir(os.path.join(SRC, "runbooks"))}
check(len(runbooks) >= 5 and runbooks <= got,
      "installed: the runbooks in share/bpfdiag/runbooks (missing %s)" % sorted(runbooks - got))
docs = {"usr/share/doc/bpfdiag/copyright", "usr/share/doc/bpfdiag/changelog.Debian.gz"}
check(docs <= got, "installed: copyright and changelog.Debian.gz in share/doc/bpfdiag (missing %s)" % sorted(docs - got))
cl = gzip.open(os.path.join(usr, "share/doc/bpfdiag/changelog.Debian.gz")).read().decode() if docs <= got else ""
check(cl.startswith("bpfdiag (%s-1) " % VERSION), "changelog.Debian names this version: %r" % cl[:40])
for p in PROGS:
    ok, err = man_renders(os.path.join(usr, "share/man"), p)
    check(ok, "man 8 %s renders from the installed man8 (%s)" % (p, err))

# the staged programs: --version, bpfdiag through its sbin link, a real run, the runbooks
for p in PROGS:
    v = run([os.path.join(usr, "libexec/bpfdiag", p), "--version"])
    check(v.returncode == 0 and v.stdout == "%s (bpfdiag) %s\n" % (p, VERSION), "installed %s --version" % p)
staged = os.path.join(usr, "sbin/bpfdiag")
check_bpfdiag(staged, "installed:")
q = run([staged, "runqlen", "-j", "1", "1"], timeout=60)
check(q.returncode == 0 and '"type":"runqlen.summary"' in q.stdout,
      "installed bpfdiag runqlen loads its BPF program and reports (rc %d, %r)" % (q.returncode, q.stderr.strip()[-200:]))
env = {k: v for k, v in os.environ.items() if k != "BPFDIAG_RUNBOOKS"}
lst = run([staged, "runbook", "--list"], timeout=30, env=env)
names = [l.split()[0] for l in lst.stdout.splitlines() if l and not l[0].isspace()]
check(lst.returncode == 0 and sorted(names) == sorted(os.path.basename(f)[:-8] for f in runbooks),
      "installed runbook --list finds the installed runbooks (libexec/bpfdiag/../../share): %s" % names)

shutil.rmtree(TMP, ignore_errors=True)
finish()
