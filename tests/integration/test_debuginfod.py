#!/usr/bin/env python3
"""Debug files by build-id from a debuginfod server (DEBUGINFOD_URLS, issue 24).

A test program with a known function (bpfdiag_debuginfod_spin, the leaf it spins in)
is built here, its debug file kept (objcopy --only-keep-debug) and the program
stripped (strip --strip-all: .dynsym and the build-id note only). Servers run in a
network namespace of their own (nothing outside can reach them, no port can clash,
and no lookup can leave the machine): Debian's debuginfod scanning a directory that
holds only the debug file, a liar that answers every request with the debug file of
another build (a decoy whose same function is named decoy_debuginfod_spin), and one
that accepts connections and never answers. profile -j -U -p runs in that namespace
on the stripped program:
  * without DEBUGINFOD_URLS: the function is not named (its frames are
    "[unknown] (prog+0x...)"), and nothing is looked up;
  * with the debuginfod server and an empty cache: the function is named, data_quality
    counts debuginfod_files, stderr says where the names came from, and the cache
    (created by the tool, mode 0700) holds the file;
  * the same cache with no server listening: named from the cache;
  * the silent server and an empty cache: the report comes within the run's wait
    budget (4 s) of a run without lookups, the function is not named, the lookup is
    counted in debuginfod_failed and said on stderr, and the tool exits at once;
  * the liar: its file is refused (build-id), no decoy name appears, the cache entry
    is removed, the failure counted;
  * a cache directory others can write: refused, not used, said once.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F401

require_root()
PR = tool("profile")
require_built(PR)
DEBUGINFOD = need("debuginfod", "debuginfod")
CC = need("gcc", "g++")
OBJCOPY = need("objcopy", "binutils")
STRIP = need("strip", "binutils")
UNSHARE = need("unshare", "util-linux")
NSENTER = need("nsenter", "util-linux")

FN, DECOY = "bpfdiag_debuginfod_spin", "decoy_debuginfod_spin"
PORT_GOOD, PORT_LIAR, PORT_HANG, PORT_NONE = 8002, 8003, 8004, 8005
WAIT_BUDGET_S = 4.0   # kDebuginfodWaitNs
DURATION = "1"

PROGRAM = r"""
#include <stdint.h>
#include <stdio.h>
__attribute__((noinline)) void SPIN(volatile uint64_t* x) {
  for (;;)
    for (int i = 0; i < 1000000; ++i) *x += (uint64_t)i;
}
int main(void) {
  volatile uint64_t x = 0;
  printf("ready\n");
  fflush(stdout);
  SPIN(&x);
  return 0;
}
"""
# brings lo up in the new namespace (SIOCSIFFLAGS: IFF_UP|IFF_LOOPBACK|IFF_RUNNING), then
# becomes the server (same PID: unshare and python exec)
LO_UP_EXEC = ("import fcntl,os,socket,struct,sys;"
              "fcntl.ioctl(socket.socket(),0x8914,struct.pack('16sH22x',b'lo',0x49));"
              "os.execvp(sys.argv[1],sys.argv[1:])")
LIAR = r"""
import http.server, sys
data = open(sys.argv[1], "rb").read()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[2])), H).serve_forever()
"""
HANG = r"""
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(64)
held = []
while True:
    held.append(s.accept()[0])
"""
# exit 0 when URL answers 200 (GET), 3 when a TCP connection to its port is accepted
PROBE = r"""
import socket, sys, urllib.request
try:
    sys.exit(0 if urllib.request.urlopen(sys.argv[1], timeout=1).status == 200 else 1)
except Exception:
    pass
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=1).close()
    sys.exit(3)
except Exception:
    sys.exit(1)
"""

tmp = tempfile.mkdtemp(prefix="bpfdiag-debuginfod-")
procs = []


def sh(args, what):
    r = run(args, timeout=60)
    check(r.returncode == 0, "%s (%s)" % (what, (r.stderr or r.stdout).strip()[-200:]))
    return r


def build_id(path):
    out = run(["readelf", "-n", path]).stdout
    m = re.search(r"Build ID: ([0-9a-f]+)", out)
    return m.group(1) if m else ""


def build(name, fn):
    src = os.path.join(tmp, name + ".c")
    with open(src, "w") as f:
        f.write(PROGRAM.replace("SPIN", fn))
    exe = os.path.join(tmp, name)
    sh([CC, "-O1", "-g", "-fno-omit-frame-pointer", "-Wl,--build-id", "-o", exe, src], "gcc builds %s" % name)
    dbg = exe + ".debug"
    sh([OBJCOPY, "--only-keep-debug", exe, dbg], "objcopy --only-keep-debug %s" % name)
    sh([STRIP, "--strip-all", exe], "strip --strip-all %s" % name)
    return exe, dbg


def in_netns(netns_pid, argv):
    return [NSENTER, "--net=/proc/%d/ns/net" % netns_pid, "--"] + argv


def spawn(argv, log):
    with open(log, "w") as f:
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    p.group = True
    procs.append(p)
    return p


def probe(netns_pid, url, port):
    return run(in_netns(netns_pid, [sys.executable, "-c", PROBE, url, str(port)]), timeout=30).returncode


def frames(recs):
    return [f for r in recs if is_type(r, "profile", "stack") for f in r.get("user_stack", [])]


def summary_dq(recs):
    s = [r for r in recs if is_type(r, "profile", "summary") and r.get("final")]
    return s[-1]["data_quality"] if s else {}


def profile(netns_pid, target, urls, cache, what):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEBUGINFOD_")}
    if urls:
        env["DEBUGINFOD_URLS"] = urls
    if cache:
        env["DEBUGINFOD_CACHE_PATH"] = cache
    t0 = time.monotonic()
    r = run(in_netns(netns_pid, [PR, "-j", "-U", "-p", str(target), DURATION]), timeout=60, env=env)
    elapsed = time.monotonic() - t0
    recs = ndjson(r.stdout, "profile")
    check(r.returncode == 0, "%s: profile exits 0 (rc %d, %s)" % (what, r.returncode, r.stderr.strip()[-300:]))
    fr = frames(recs)
    print("  %s: %.1f s, frames %s, stderr %r" % (what, elapsed, sorted(set(fr))[:8], r.stderr.strip()[-400:]))
    return fr, summary_dq(recs), r.stderr, elapsed


try:
    exe, dbg = build("prog", FN)
    _, decoy_dbg = build("decoy", DECOY)
    bid, decoy_bid = build_id(exe), build_id(decoy_dbg)
    check(len(bid) >= 16 and bid == build_id(dbg) and decoy_bid and decoy_bid != bid,
          "the stripped program and its debug file share build-id %s; the decoy's differs (%s)" % (bid, decoy_bid))
    syms = run(["readelf", "-S", "-W", exe]).stdout
    check(".symtab" not in syms and ".gnu_debuglink" not in syms, "the program is stripped: no .symtab")
    srv_dir = os.path.join(tmp, "srv")
    os.mkdir(srv_dir)
    shutil.move(dbg, os.path.join(srv_dir, "prog.debug"))

    # --- the servers, in a network namespace of their own -----------------------------------
    good = spawn([UNSHARE, "-n", "--", sys.executable, "-c", LO_UP_EXEC, DEBUGINFOD, "-F", "-p", str(PORT_GOOD),
                  "-d", os.path.join(tmp, "debuginfod.sqlite"), "-c", "1", "-g", "0", srv_dir],
                 os.path.join(tmp, "debuginfod.log"))
    ns = good.pid
    wait_for(lambda: os.path.exists("/proc/%d/ns/net" % ns) and os.readlink("/proc/%d/ns/net" % ns)
             != os.readlink("/proc/self/ns/net"), 10, "debuginfod runs in a network namespace of its own")
    spawn(in_netns(ns, [sys.executable, "-c", LIAR, decoy_dbg, str(PORT_LIAR)]), os.path.join(tmp, "liar.log"))
    spawn(in_netns(ns, [sys.executable, "-c", HANG, str(PORT_HANG)]), os.path.join(tmp, "hang.log"))
    url = "http://127.0.0.1:%d" % PORT_GOOD
    wait_for(lambda: probe(ns, "%s/buildid/%s/debuginfo" % (url, bid), PORT_GOOD) == 0, 25,
             "debuginfod has scanned %s and serves the debug file" % srv_dir, step=0.2)
    wait_for(lambda: probe(ns, "http://127.0.0.1:%d/buildid/%s/debuginfo" % (PORT_LIAR, bid), PORT_LIAR) == 0, 10,
             "the liar answers", step=0.1)
    wait_for(lambda: probe(ns, "http://127.0.0.1:%d/x" % PORT_HANG, PORT_HANG) == 3, 10,
             "the silent server accepts and never answers", step=0.1)

    target = subprocess.Popen([exe], stdout=subprocess.PIPE, text=True)
    procs.append(target)
    check(target.stdout.readline().strip() == "ready", "the stripped program runs (PID %d)" % target.pid)

    # --- without DEBUGINFOD_URLS --------------------------------------------------------------
    fr, dq, err, base_s = profile(ns, target.pid, None, None, "no DEBUGINFOD_URLS")
    check(fr and FN not in fr, "no DEBUGINFOD_URLS: %s is not named" % FN)
    check(any(f.startswith("[unknown] (prog+0x") for f in fr), "no DEBUGINFOD_URLS: its frames are addresses")
    check(dq.get("debuginfod_files") == 0 and dq.get("debuginfod_failed") == 0 and "debuginfod" not in err,
          "no DEBUGINFOD_URLS: nothing looked up (%s)" % {k: v for k, v in dq.items() if "debuginfod" in k})

    # --- the debuginfod server, empty cache -------------------------------------------------
    cache = os.path.join(tmp, "cache")
    fr, dq, err, _ = profile(ns, target.pid, url, cache, "debuginfod")
    check(FN in fr, "debuginfod: %s is named from the server's debug file" % FN)
    check(dq.get("debuginfod_files", 0) >= 1, "debuginfod: data_quality debuginfod_files %s" % dq.get("debuginfod_files"))
    check(re.search(r"debuginfod: symbols for prog \(build-id %s" % bid[:16], err) is not None,
          "debuginfod: stderr says where prog's names came from")
    st = os.stat(cache)
    check(st.st_uid == 0 and (st.st_mode & 0o777) == 0o700, "the cache was created root's, mode %o" % (st.st_mode & 0o777))
    check(os.path.isfile(os.path.join(cache, bid, "debuginfo")), "the cache holds %s/debuginfo" % bid[:16])

    # --- the same cache, no server listening: from the cache ---------------------------------
    fr, dq, err, _ = profile(ns, target.pid, "http://127.0.0.1:%d" % PORT_NONE, cache, "cached")
    check(FN in fr and dq.get("debuginfod_files", 0) >= 1, "cached: %s is named from the cache, no server up" % FN)

    # --- the silent server, empty cache: within the wait budget -----------------------------
    fr, dq, err, hang_s = profile(ns, target.pid, "http://127.0.0.1:%d" % PORT_HANG, os.path.join(tmp, "c2"),
                                  "silent server")
    check(fr and FN not in fr, "silent server: %s is not named" % FN)
    check(dq.get("debuginfod_failed", 0) >= 1, "silent server: data_quality debuginfod_failed %s"
          % dq.get("debuginfod_failed"))
    check("debuginfod: no answer for prog" in err, "silent server: stderr says prog's lookup had no answer")
    check(hang_s < base_s + WAIT_BUDGET_S + 2.0,
          "silent server: the report and exit came within the %.0f s budget (%.1f s vs %.1f s without lookups)"
          % (WAIT_BUDGET_S, hang_s, base_s))

    # --- the liar: a debug file of another build ---------------------------------------------
    liar_cache = os.path.join(tmp, "c3")
    fr, dq, err, _ = profile(ns, target.pid, "http://127.0.0.1:%d" % PORT_LIAR, liar_cache, "liar")
    check(fr and FN not in fr and not any(DECOY in f for f in fr),
          "liar: neither %s nor the decoy's %s is named" % (FN, DECOY))
    check(re.search(r"no symbols for prog .*build-id is %s" % decoy_bid[:16], err) is not None,
          "liar: stderr says the file was refused for its build-id")
    check(dq.get("debuginfod_failed", 0) >= 1 and dq.get("debuginfod_files") == 0,
          "liar: counted as failed (%s)" % {k: v for k, v in dq.items() if "debuginfod" in k})
    check(not os.path.exists(os.path.join(liar_cache, bid, "debuginfo")), "liar: the refused cache entry is removed")

    # --- a cache others can write -------------------------------------------------------------
    open_cache = os.path.join(tmp, "open")
    os.mkdir(open_cache)
    os.chmod(open_cache, 0o777)
    fr, dq, err, _ = profile(ns, target.pid, url, open_cache, "open cache")
    check(fr and FN not in fr, "open cache: %s is not named" % FN)
    check("not used: its cache %s has mode 0777" % open_cache in err, "open cache: refused, and said so")
    check(os.listdir(open_cache) == [], "open cache: nothing written there")
finally:
    for p in procs:  # the servers each lead a process group (nsenter and its child)
        try:
            os.killpg(p.pid, signal.SIGKILL) if getattr(p, "group", False) else p.kill()
        except (ProcessLookupError, PermissionError):
            pass
        p.wait()
    shutil.rmtree(tmp, ignore_errors=True)
finish()
