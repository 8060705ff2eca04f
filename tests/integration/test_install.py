#!/usr/bin/env python3
"""Install and package (issue 12 item 5).

- `cmake --install` into a staging prefix puts every tool and utility named in
  CMakeLists.txt (set(TOOLS ...) and set(UTILS ...)) in sbin, one man page per program
  in share/man/man8, and the JSON Schemas in share/bpfdiag/schema; `man 8 <program>`
  finds and renders each page from there (MANPATH).
- `cpack -G DEB` builds a package whose contents are exactly those files; it installs
  into a clean root (`dpkg --root`, an empty dpkg database), the installed programs run
  (`--help`), `man 8` finds their pages, and `dpkg --root -r` removes every file again.
"""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import BIN, SRC, check, finish, require_root, run  # noqa: E402
from runbook_util import safe_tmpdir  # noqa: E402

require_root()
BUILD = os.path.dirname(os.path.abspath(BIN))
# not under /tmp: the installed runbook trusts runbooks only in directories that only
# root can write, every one from / down (runbook_util.safe_tmpdir)
TMP = safe_tmpdir("bpfdiag-install-test-")


def programs():
    """Every tool and utility CMakeLists.txt builds (the lists a new tool joins)."""
    text = open(os.path.join(SRC, "CMakeLists.txt")).read()
    names = []
    for var in ("TOOLS", "UTILS"):
        m = re.search(r"set\(%s ([^)]*)\)" % var, text)
        names += m.group(1).split() if m else []
    return [n for n in names if os.path.exists(os.path.join(SRC, "tools", n, "main.cpp"))]


def man_renders(manpath, name):
    r = subprocess.run(["man", "-P", "cat", "8", name], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, MANPATH=manpath, MANWIDTH="80", LC_ALL="C.UTF-8"))
    return r.returncode == 0 and name in r.stdout and "SYNOPSIS" in r.stdout, r.stderr.strip()[:200]


def program_files(root, progs):
    return {"usr/sbin/" + p for p in progs} | {"usr/share/man/man8/%s.8" % p for p in progs}


def files_under(root):
    out = set()
    for d, _, fs in os.walk(root):
        for f in fs:
            out.add(os.path.relpath(os.path.join(d, f), root))
    return out


PROGS = programs()
check(len(PROGS) >= 7, "programs from CMakeLists.txt: %s" % " ".join(PROGS))

# --- 1. cmake --install into a staging prefix -----------------------------------------------
stage = os.path.join(TMP, "stage")
r = run(["cmake", "--install", BUILD, "--prefix", "/usr"], timeout=300, env=dict(os.environ, DESTDIR=stage))
check(r.returncode == 0, "cmake --install (DESTDIR) exits 0 (%s)" % r.stderr.strip()[-200:])
got = files_under(stage)
want = program_files(stage, PROGS)
check(want <= got, "installed: every program in sbin and its man page in man8 (missing %s)" % sorted(want - got))
schemas = {"usr/share/bpfdiag/schema/" + f for f in os.listdir(os.path.join(SRC, "docs/schema"))}
check(schemas <= got, "installed: the JSON Schemas in share/bpfdiag/schema (missing %s)" % sorted(schemas - got))
runbooks = {"usr/share/bpfdiag/runbooks/" + f for f in os.listdir(os.path.join(SRC, "runbooks"))}
check(len(runbooks) >= 5 and runbooks <= got,
      "installed: the runbooks in share/bpfdiag/runbooks (missing %s)" % sorted(runbooks - got))
for p in PROGS:
    ok, err = man_renders(os.path.join(stage, "usr/share/man"), p)
    check(ok, "man 8 %s renders from the installed man8 (%s)" % (p, err))

# --- 2. cpack -G DEB, installed into and removed from a clean root -------------------------
pkgdir = os.path.join(TMP, "pkg")
r = run(["cpack", "-G", "DEB", "-B", pkgdir, "--config", os.path.join(BUILD, "CPackConfig.cmake")], timeout=600)
debs = [os.path.join(pkgdir, f) for f in os.listdir(pkgdir) if f.endswith(".deb")] if os.path.isdir(pkgdir) else []
check(r.returncode == 0 and len(debs) == 1, "cpack -G DEB builds one package (%s)" % (r.stderr.strip()[-200:] or debs))
if debs:
    deb = debs[0]
    info = run(["dpkg-deb", "-f", deb, "Package", "Version", "Depends"]).stdout
    check("Package: bpfdiag" in info and "libbpfcc" in info, "package metadata: %s" % info.strip().replace("\n", "; "))
    contents = {l.split()[-1].lstrip("./") for l in run(["dpkg-deb", "-c", deb]).stdout.splitlines()
                if not l.startswith("d")}
    check(want <= contents and schemas <= contents and runbooks <= contents,
          "the package holds every program, man page, schema and runbook (missing %s)"
          % sorted((want | schemas | runbooks) - contents))
    extra = {c for c in contents if not (c.startswith("usr/sbin/") or c.startswith("usr/share/"))}
    check(not extra, "nothing outside /usr/sbin and /usr/share (%s)" % sorted(extra)[:5])

    root = os.path.join(TMP, "root")
    admin = os.path.join(root, "var/lib/dpkg")
    for d in ("info", "updates", "triggers"):
        os.makedirs(os.path.join(admin, d))
    open(os.path.join(admin, "status"), "w").close()
    # the clean root has no libbpfcc of its own: the dependency is the host's (checked above)
    # (path-include: a minimised image may exclude man pages in its dpkg.cfg.d)
    dpkg = ["dpkg", "--root", root, "--force-not-root", "--force-depends", "--force-script-chrootless",
            "--path-include=/usr/share/man/man8/*"]
    r = run(dpkg + ["-i", deb], timeout=120)
    check(r.returncode == 0, "dpkg --root -i installs (%s)" % r.stderr.strip()[-300:])
    for p in PROGS:
        exe = os.path.join(root, "usr/sbin", p)
        h = run([exe, "--help"], timeout=30)
        check(h.returncode == 0 and ("USAGE: " + p) in h.stdout, "installed %s --help runs" % p)
        ok, err = man_renders(os.path.join(root, "usr/share/man"), p)
        check(ok, "after dpkg -i: man 8 %s (%s)" % (p, err))
    q = run([os.path.join(root, "usr/sbin/runqlen"), "-j", "1", "1"], timeout=60)
    check(q.returncode == 0 and '"type":"runqlen.summary"' in q.stdout,
          "the installed runqlen loads its BPF program and reports (rc %d, %r)" % (q.returncode, q.stderr.strip()[-200:]))
    if "runbook" in PROGS:
        env = {k: v for k, v in os.environ.items() if k != "BPFDIAG_RUNBOOKS"}
        lst = run([os.path.join(root, "usr/sbin/runbook"), "--list"], timeout=30, env=env)
        names = [l.split()[0] for l in lst.stdout.splitlines() if l and not l[0].isspace()]
        check(lst.returncode == 0 and sorted(names) == sorted(os.path.basename(f)[:-8] for f in runbooks),
              "installed runbook --list finds the installed runbooks: %s" % names)
    r = run(dpkg + ["-r", "bpfdiag"], timeout=120)
    left = {f for f in files_under(root) if not f.startswith("var/lib/dpkg/")}
    check(r.returncode == 0 and not left, "dpkg --root -r removes every file (left %s)" % sorted(left)[:5])

shutil.rmtree(TMP, ignore_errors=True)
finish()
