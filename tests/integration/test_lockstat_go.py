#!/usr/bin/env python3
"""lockstat on a Go program (issue 20): goroutines wait in the Go runtime (gopark), not
on a futex each; lockstat -p times each park inside runtime.gopark (common/go_runtime.h)
and names it as the runtime does.

Workload: tests/workloads/go_waits/main.go, built here with the Debian Go toolchain
(GOCACHE/GOPATH in a temp dir, no network), GOMAXPROCS=2. Its truth: every Lock and
channel receive timed with time.Now/time.Since around it (own_wait_ns), and the
runtime's block profile, over lockstat's window (opened by its start record, closed by
its summary).

1. mutex (20 goroutines, one sync.Mutex held 200 us): lockstat -p -j -d 4 ranks first a
   row of kind go-park, class contention, named in Go's words (the lock column is the
   waitReason: "semacquire" in Go < 1.20, "sync.Mutex.Lock" since; the rule's words
   say sync.Mutex.Lock), at the workload's own function (main.lockedWork); its 20
   waiters are the goroutines; its wait within 20% of the program's own timing.
   No futex row (the Go scheduler's idle OS threads, runtime.lock2) is ranked as
   contention.
2. chan, the idle counterpart (20 goroutines receive from a channel fed every 2 ms):
   nothing the goroutines waited in is contention; their row is "chan receive",
   class idle, at main.takeWork, within 20% of the program's own timing.
   The same on a stripped copy (strip as Debian's dh_strip does: no .symtab; Go keeps
   .gopclntab for its own runtime): gopark, runtime.mcall, the frames (main.lockedWork)
   and the waitReason strings are found without a symbol, from .gopclntab and by the
   table's shape (common/go_pclntab.h), with the same results.
3. pingpong (every operation parks): the rate guard stops goroutine tracing, says so
   on stderr and in data_quality (go_rate_guard 1); lockstat exits 0, the program is
   still running, and no BPF program is left behind.
Every NDJSON record is validated against docs/schema/lockstat.schema.json.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (SRC, check, finish, measure_against_truth, ndjson, need, require_built,  # noqa: E402
                     require_root, schema_verdict, tool)
from harness_bpf import leftover_bpf_programs  # noqa: E402

LOCKSTAT = tool("lockstat")
GO_SRC = os.path.join(SRC, "tests/workloads/go_waits/main.go")


def build(d):
    env = dict(os.environ, GOCACHE=os.path.join(d, "cache"), GOPATH=os.path.join(d, "gopath"), GO111MODULE="off",
               GOFLAGS="", CGO_ENABLED="0", GOPROXY="off")
    out = os.path.join(d, "go_waits")
    subprocess.run(["go", "build", "-o", out, GO_SRC], check=True, capture_output=True, timeout=180, env=env, cwd=d)
    stripped = out + ".stripped"
    subprocess.run(["strip", "--remove-section=.comment", "--remove-section=.note", "--strip-unneeded", "-o",
                    stripped, out], check=True, capture_output=True, timeout=60)
    sections = subprocess.run(["readelf", "-SW", stripped], capture_output=True, text=True).stdout
    check(".symtab" not in sections and ".gopclntab" in sections,
          "the stripped copy has no .symtab, and its .gopclntab")
    return out, stripped


def start(binary, mode, hold="200us"):
    env = dict(os.environ, GOMAXPROCS="2")
    p = subprocess.Popen([binary, "-mode", mode, "-n", "20", "-hold", hold], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, env=env)
    ready = p.stdout.readline()
    check(ready.startswith("{"), "%s: workload ready (%s)" % (mode, ready.strip()))
    return p


def run(binary, mode, hold):
    wl = start(binary, mode, hold)
    try:
        return measure_against_truth(wl, wl.pid, [LOCKSTAT, "-j", "-n", "0", "-d", "4"], "lockstat")
    finally:
        wl.kill()
        wl.wait()


def describe(r):
    site = r["sites"][0]["site"] if r.get("sites") else "-"
    return "%s %s '%s' [%s] at %s: %d waiters, %.1f ms" % (
        r["class"], r["kind"], r["lock"], r["wait_site_what"], site, r["thread_count"], r["wait_total_ns"] / 1e6)


def rows(records):
    locks = [r for r in records if r.get("type") == "lockstat.lock"]
    summ = [r for r in records if r.get("type") == "lockstat.summary"]
    return locks, (summ[0] if summ else None)


def within_truth(label, r, summ, truth):
    got = r["wait_total_ns"] / summ["interval_ns"]
    want = truth["own_wait_ns"] / truth["window_ns"]
    check(abs(got - want) <= 0.2 * want,
          "%s: wait %.2f s per s of window within 20%% of the program's own timing %.2f s/s (%.3fx; block "
          "profile %.2f s/s; truth %s)" % (label, got, want, got / max(want, 1e-9),
                                           truth["block_prof_ns"] / truth["window_ns"], truth))


def check_mutex(rc, err, records, truth, label="mutex"):
    locks, summ = rows(records)
    if not check(rc == 0 and summ and truth and locks, "%s: lockstat ran (rc %d %s)" % (label, rc, err.strip()[-300:])):
        return
    for r in locks[:5]:
        print("     %s: %s" % (label, describe(r)))
    top = locks[0]
    check(top["kind"] == "go-park" and top["class"] == "contention",
          "%s: the first row is the goroutines' wait, ranked as contention (%s)" % (label, describe(top)))
    check(top["lock"] in ("semacquire", "sync.Mutex.Lock") and "sync.Mutex.Lock" in top["wait_site_what"] and
          top["wait_site_decided"],
          "%s: named in Go's words: the waitReason %r, the rule's %r" % (label, top["lock"], top["wait_site_what"]))
    site = top["sites"][0]["site"] if top["sites"] else ""
    check(site.startswith("main.lockedWork"), "%s: at the workload's own function main.lockedWork (%r)" % (label, site))
    if top["lock"] == "semacquire":
        check(any(f.startswith("sync.(*Mutex).lockSlow") for f in top["sites"][0].get("user_stack", [])),
              "%s: semacquire under sync.(*Mutex).lockSlow (%s)" % (label, top["sites"][0].get("user_stack", [])[:6]))
    check(top["thread_count"] == 20, "%s: its waiters are the 20 goroutines (%d)" % (label, top["thread_count"]))
    within_truth(label, top, summ, truth)
    futex_cont = [r for r in locks if r["class"] == "contention" and r["kind"] != "go-park"]
    check(not futex_cont, "%s: no futex wait of the Go runtime's OS threads ranked as contention (%s)"
          % (label, [describe(r) for r in futex_cont[:3]]))
    check(summ["data_quality"]["go_rate_guard"] == 0, "%s: the rate guard did not trip (%s)" % (label, summ["data_quality"]))


def check_chan(rc, err, records, truth):
    locks, summ = rows(records)
    if not check(rc == 0 and summ and truth and locks, "chan: lockstat ran (rc %d %s)" % (rc, err.strip()[-300:])):
        return
    for r in locks[:5]:
        print("     chan: " + describe(r))
    go = sorted((r for r in locks if r["kind"] == "go-park"), key=lambda r: -r["wait_total_ns"])
    if not check(go, "chan: goroutine waits seen"):
        return
    cont = [r for r in locks if r["class"] == "contention"]
    check(not cont, "chan: nothing is ranked as contention (%s)" % [describe(r) for r in cont[:3]])
    top = go[0]
    site = top["sites"][0]["site"] if top["sites"] else ""
    check(top["lock"] == "chan receive" and top["class"] == "idle" and site.startswith("main.takeWork"),
          "chan: the goroutines wait in a channel receive, idle, at main.takeWork (%s)" % describe(top))
    within_truth("chan", top, summ, truth)


def check_pingpong(binary):
    wl = start(binary, "pingpong")
    try:
        before = set()
        lp = subprocess.run([LOCKSTAT, "-j", "-p", str(wl.pid), "-d", "3"], capture_output=True, text=True, timeout=90)
        recs = ndjson(lp.stdout, "lockstat")
        summ = [r for r in recs if r.get("type") == "lockstat.summary"]
        check(lp.returncode == 0 and summ, "pingpong: lockstat exits cleanly (rc %d %s)"
              % (lp.returncode, lp.stderr.strip()[-300:]))
        check(summ and summ[-1]["data_quality"]["go_rate_guard"] == 1,
              "pingpong: the rate guard is in data_quality (%s)" % (summ[-1]["data_quality"] if summ else None))
        check("goroutine wait tracing stopped" in lp.stderr, "pingpong: and said on stderr (%s)" % lp.stderr.strip()[-300:])
        check(wl.poll() is None, "pingpong: the program is still running")
        # the program runs at full speed again once the probes are gone
        wl.stdin.write("ops\n")
        wl.stdin.flush()
        o1 = int(__import__("json").loads(wl.stdout.readline())["ops"])
        time.sleep(0.5)
        wl.stdin.write("ops\n")
        wl.stdin.flush()
        o2 = int(__import__("json").loads(wl.stdout.readline())["ops"])
        check((o2 - o1) / 0.5 > 100000, "pingpong: after lockstat, %.0f ops/s (not slowed down)" % ((o2 - o1) / 0.5))
        del before
    finally:
        wl.kill()
        wl.wait()


def main():
    require_root()
    require_built(LOCKSTAT)
    need("go", "golang-go")
    d = tempfile.mkdtemp(prefix="ls-go-")
    try:
        binary, stripped = build(d)
        check_mutex(*run(binary, "mutex", "200us"))
        check_mutex(*run(stripped, "mutex", "200us"), label="stripped mutex")
        check_chan(*run(binary, "chan", "2ms"))
        check_pingpong(binary)
        left = leftover_bpf_programs()
        check(left == [] or left is None, "no BPF program left behind (%s)" % left)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    schema_verdict("lockstat")
    finish()


if __name__ == "__main__":
    main()
