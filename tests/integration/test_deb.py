#!/usr/bin/env python3
"""The Debian package, installed for real (issue 24).

`cpack -G DEB` from the build tree builds one .deb; lintian reports no error and no
warning on it (informational and pedantic tags are printed, not failed); `dpkg -i`
installs it into this system: `bpfdiag --version` and `/usr/sbin/offcputime
--version` answer with the suite's version, /usr/sbin has bpfdiag and the BCC-style
names from the package but no profile, doctor, runbook or flamegraph, the man pages
are gzip-compressed, the installed runqlen (through bpfdiag, as root) traces for a
second and reports valid JSON, and `dpkg --purge bpfdiag` removes /usr/libexec/bpfdiag
and the compiled-object cache /var/cache/bpfdiag the tools created. The package is
purged (and a cache that was there before put back) even when a check fails.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import BIN, SRC, check, finish, need, require_root, run, skip  # noqa: E402

require_root()
for b, pkg in (("cpack", "cmake"), ("lintian", "lintian"), ("dpkg-shlibdeps", "dpkg-dev"), ("file", "file")):
    need(b, pkg)
BUILD = os.path.dirname(os.path.abspath(BIN))
VERSION = re.search(r"set\(BPFDIAG_VERSION (\S+)\)", open(os.path.join(SRC, "CMakeLists.txt")).read()).group(1)
TOOLDIR = "/usr/libexec/bpfdiag"
CACHE = "/var/cache/bpfdiag"
GENERIC = ("profile", "doctor", "runbook", "flamegraph")
BCC_NAMES = ("offcputime", "lockstat", "pmheld", "naptime", "runqlen", "threadpool")

status = run(["dpkg-query", "-W", "-f=${Status}", "bpfdiag"]).stdout
if "installed" in status and "not-installed" not in status:
    skip("a bpfdiag package is installed on this system already (%s); not replacing it" % status.strip())
clash = [n for n in BCC_NAMES + ("bpfdiag",) if os.path.lexists("/usr/sbin/" + n)]
if clash:
    skip("/usr/sbin already has %s from elsewhere; not overwriting" % ", ".join(clash))

tmp = tempfile.mkdtemp(prefix="bpfdiag-deb-test-")
saved_cache = None
installed = False
try:
    # --- build and lint ---------------------------------------------------------------------
    r = run(["cpack", "-G", "DEB", "-B", tmp, "--config", os.path.join(BUILD, "CPackConfig.cmake")], timeout=600)
    debs = [os.path.join(tmp, f) for f in os.listdir(tmp) if f.endswith(".deb")]
    check(r.returncode == 0 and len(debs) == 1, "cpack -G DEB builds one package (%s)" % (r.stderr.strip()[-300:] or debs))
    if len(debs) != 1:
        raise SystemExit
    deb = debs[0]
    check(os.path.basename(deb).startswith("bpfdiag_%s-1_" % VERSION), "package file name %s" % os.path.basename(deb))
    fields = run(["dpkg-deb", "-f", deb, "Version", "Depends", "Recommends"]).stdout
    check("Version: %s-1" % VERSION in fields, "Version %s-1 (%s)" % (VERSION, fields.splitlines()[:1]))
    depends = re.search(r"^Depends: (.*)$", fields, re.M)
    deps = depends.group(1) if depends else ""
    check(all(re.search(r"\b%s\b" % re.escape(lib), deps) for lib in ("libbpfcc", "libbpf1", "libc6", "libstdc++6")),
          "Depends computed by dpkg-shlibdeps, with versions: %s" % deps)
    # libdebuginfod is dlopen'ed only with DEBUGINFOD_URLS (common/debuginfod.h): recommended,
    # so the tools install without it and the libcurl it brings
    recommends = re.search(r"^Recommends: (.*)$", fields, re.M)
    check(not re.search(r"\blibdebuginfod|\blibcurl", deps) and recommends and "libdebuginfod1" in recommends.group(1),
          "libdebuginfod1 recommended, not a dependency (Recommends: %s)" % (recommends.group(1) if recommends else None))
    # (E: and W: lines fail the check below; --fail-on warning would count overridden ones)
    lint = run(["lintian", "--allow-root", "--no-cfg", "--display-info", "--pedantic", "--show-overrides", deb],
               timeout=300)
    tags = [l for l in lint.stdout.splitlines() if re.match(r"^[EWIPXO]: ", l)]
    bad = [l for l in tags if l[0] in "EW"]
    print("lintian:\n  " + "\n  ".join(tags or ["(no tags)"]))
    # the overrides (packaging/deb/lintian-overrides) are the ones reviewed there, no more
    overridden = sorted(set(l.split()[2] for l in tags if l.startswith("O: ")))
    check(overridden == ["initial-upload-closes-no-bugs", "uses-dpkg-database-directly"],
          "lintian overrides used: %s" % overridden)
    check(lint.returncode == 0 and not bad,
          "lintian: no errors, no warnings (exit %d; %s)" % (lint.returncode, bad[:5] or lint.stderr.strip()[-200:]
                                                             or "%d info/pedantic tags" % len(tags)))
    contents = run(["dpkg-deb", "-c", deb]).stdout.splitlines()
    man = [l.split()[-1] for l in contents if "/usr/share/man/" in l and not l.startswith("d")]
    check(man and all(m.endswith(".8.gz") for m in man), "man pages in the package are .8.gz (%s)" % man[:3])
    modes = {l.split()[-1]: l.split()[0] for l in contents}
    progs = [p for p in modes if p.startswith("." + TOOLDIR + "/") and not modes[p].startswith("d")]
    check(progs and all(modes[p] == "-rwxr-xr-x" for p in progs),
          "programs in %s, mode 0755 (%s)" % (TOOLDIR, sorted((p, modes[p]) for p in progs)[:2]))

    # --- install into this system -------------------------------------------------------------
    if os.path.lexists(CACHE):  # the build tree's tools' cache: put back afterwards
        saved_cache = tempfile.mkdtemp(prefix="bpfdiag-cache-saved-", dir="/var/cache")
        os.rename(CACHE, os.path.join(saved_cache, "bpfdiag"))
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    env.pop("BPFDIAG_CACHE", None)
    env.pop("BPFDIAG_CACHE_DIR", None)
    r = run(["dpkg", "-i", deb], timeout=300, env=env)
    installed = True
    check(r.returncode == 0, "dpkg -i installs (%s)" % r.stderr.strip()[-300:])
    v = run(["bpfdiag", "--version"], env=dict(env, PATH="/usr/sbin:/usr/bin:/sbin:/bin"))
    check(v.returncode == 0 and v.stdout == "bpfdiag (bpfdiag) %s\n" % VERSION, "bpfdiag --version: %r" % v.stdout)
    v = run(["/usr/sbin/offcputime", "--version"])
    check(v.returncode == 0 and v.stdout == "offcputime (bpfdiag) %s\n" % VERSION,
          "/usr/sbin/offcputime --version: %r" % v.stdout)
    owned = set(run(["dpkg", "-L", "bpfdiag"]).stdout.split())
    ours_in_sbin = sorted(os.path.basename(p) for p in owned if p.startswith("/usr/sbin/"))
    check(ours_in_sbin == sorted(BCC_NAMES + ("bpfdiag",)), "/usr/sbin from the package: %s" % ours_in_sbin)
    generic = [g for g in GENERIC if "/usr/sbin/" + g in owned or os.path.lexists("/usr/sbin/" + g)]
    check(not generic, "no profile, doctor, runbook or flamegraph in /usr/sbin (%s)" % generic)
    for n in BCC_NAMES + ("bpfdiag",):
        link = os.readlink("/usr/sbin/" + n) if os.path.islink("/usr/sbin/" + n) else None
        check(link == "../libexec/bpfdiag/" + n, "/usr/sbin/%s -> %s" % (n, link))
    sys_man = sorted(p for p in owned if p.startswith("/usr/share/man/") and os.path.isfile(p))
    check(sys_man and all(p.endswith(".8.gz") and open(p, "rb").read(2) == b"\x1f\x8b" for p in sys_man),
          "installed man pages are gzip files (%d, e.g. %s)" % (len(sys_man), sys_man[:1]))
    check(os.path.isfile("/usr/share/doc/bpfdiag/copyright") and os.path.isfile("/usr/share/doc/bpfdiag/changelog.Debian.gz"),
          "/usr/share/doc/bpfdiag has copyright and changelog.Debian.gz")

    q = run(["/usr/sbin/bpfdiag", "runqlen", "-j", "1", "1"], timeout=60, env=env)
    recs = []
    for line in q.stdout.splitlines():
        try:
            recs.append(json.loads(line))
        except ValueError:
            check(False, "installed runqlen: a JSON line (%r)" % line[:100])
    summary = [x for x in recs if x.get("type") == "runqlen.summary"]
    check(q.returncode == 0 and summary and "data_quality" in summary[-1],
          "bpfdiag runqlen -j 1 1 (installed, as root): exit %d, runqlen.summary with data_quality (%r)"
          % (q.returncode, q.stderr.strip()[-200:]))
    lst = run(["/usr/sbin/bpfdiag", "runbook", "--list"], env={k: v for k, v in env.items() if k != "BPFDIAG_RUNBOOKS"})
    names = sorted(l.split()[0] for l in lst.stdout.splitlines() if l and not l[0].isspace())
    want = sorted(f[:-len(".runbook")] for f in os.listdir(os.path.join(SRC, "runbooks")))
    check(lst.returncode == 0 and names == want, "bpfdiag runbook --list finds /usr/share/bpfdiag/runbooks: %s" % names)
    check(os.path.isdir(CACHE), "the installed tool created its cache %s (purge must remove it)" % CACHE)

    # --- purge --------------------------------------------------------------------------------
    r = run(["dpkg", "--purge", "bpfdiag"], timeout=300, env=env)
    installed = r.returncode != 0
    check(r.returncode == 0, "dpkg --purge bpfdiag (%s)" % r.stderr.strip()[-200:])
    left = [p for p in (TOOLDIR, CACHE, "/usr/sbin/bpfdiag", "/usr/sbin/offcputime", "/usr/share/bpfdiag",
                        "/usr/share/doc/bpfdiag") if os.path.lexists(p)]
    check(not left, "after purge none of these is left: %s" % left)
except SystemExit:
    pass
finally:
    if installed:
        subprocess.run(["dpkg", "--purge", "bpfdiag"], capture_output=True, timeout=300)
    if saved_cache:
        if os.path.lexists(CACHE):
            shutil.rmtree(CACHE, ignore_errors=True)
        os.rename(os.path.join(saved_cache, "bpfdiag"), CACHE)
        os.rmdir(saved_cache)
    shutil.rmtree(tmp, ignore_errors=True)
finish()
