#!/usr/bin/env python3
"""lockstat on a real JVM whose 8 pool threads contend one lock (issue 20: "JVM pool of
8, tasks enter one synchronized block: monitor not ranked; 8 per-thread rows 'idle: 1
thread wait for work, woken by 7 producers; not lock contention' at
ObjectMonitor::EnterI"). HotSpot parks each contender on its own ParkEvent/Parker
word, so the futex words say nothing about the lock: the wait-site rules
(common/wait_sites.rules) read where the threads wait.

Workload: tests/workloads/JvmLocks.java (compiled here with javac), 8 workers that each
take one shared lock for 500 us, then run 200 us outside it. The JVM's own accounting
is the truth: ThreadMXBean with thread contention monitoring, summed over the workers,
over lockstat's window (opened by its start record, closed by its summary):
BLOCKED time for a monitor, WAITING time for a parked ReentrantLock acquire.

The JVM says what each blocked thread waits for (what jstack prints: the pending monitor,
the park blocker); lockstat reads it at each wait (common/jvm_state, bpf_sources/jvm.h)
and keys the wait by that Java object, named by its class.

1. --mode monitor (synchronized): lockstat -p JVM -j -d 5 ranks first one row, kind
   java-monitor, "Java monitor enter (waiting to lock a java.lang.Object)", one object,
   its 8 waiters the 8 workers; its wait per second of window within 20% of the JVM's
   BLOCKED time per second; contention among the JVM's own threads (VM Thread, VM
   Periodic Task, Monitor Deflation, C1/C2 compilers) is under 5% of the monitor's.
2. --mode reentrant (ReentrantLock): the #1 contention row is kind java-park, the lock
   java.util.concurrent.locks.ReentrantLock$NonfairSync by its java: rule, 8 workers,
   within 20% of the JVM's WAITING time per second (before the JVM's state was read,
   nothing could tell this park from any other: it was one unclassified row).
3. --mode semaphore (a one-permit Semaphore as the lock; no rule says whether a
   Semaphore is a lock or a signal): the workers' row is unclassified, named
   "parking to wait for a java.util.concurrent.Semaphore$NonfairSync", never ranked
   as contention, within 20% of WAITING time.
4. --mode queue, the idle counterpart (workers take tasks from a slowly filled
   LinkedBlockingQueue, no shared lock): no contention row holds more than 5% of the
   workers' waits; their row is a condition ("Condition.await", the queue's
   ConditionObject), within 20% of WAITING time.
5. offcputime -p JVM -j -d 4 on the ReentrantLock pool: the workers' off-CPU waits
   (class cpu aside) are >= 90% class lock named "...ReentrantLock$NonfairSync", and
   their time per second within 20% of the JVM's WAITING time.
6. When another HotSpot (JDK 21+, whose field descriptions are a compressed stream)
   is installed under /usr/lib/jvm, case 2 again on it.
Every NDJSON record is validated against docs/schema/lockstat.schema.json.
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (SRC, check, finish, measure_against_truth, need, require_built, require_root,  # noqa: E402
                     schema_verdict, tool)

LOCKSTAT = tool("lockstat")
OFFCPUTIME = tool("offcputime")
JAVA_SRC = os.path.join(SRC, "tests/workloads/JvmLocks.java")
SERVICE = ("VM Thread", "VM Periodic Tas", "Monitor Deflati", "C1 CompilerThre", "C2 CompilerThre", "Signal Dispatch",
           "Service Thread", "Finalizer", "Reference Handl", "Common-Cleaner", "Notification Th")


def run(d, mode, java="java", cmd=None):
    jvm = subprocess.Popen([java, "-Xmx64m", "-XX:+UseSerialGC", "-cp", d, "JvmLocks", "--mode", mode,
                            "--workers", "8", "--hold-us", "500", "--free-us", "200"],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        ready = jvm.stdout.readline()
        check(ready.startswith("{"), "%s: JVM ready (%s)" % (mode, ready.strip()))
        cmd = cmd or [LOCKSTAT, "-j", "-n", "0", "-d", "5"]
        rc, err, records, truth = measure_against_truth(jvm, jvm.pid, cmd, os.path.basename(cmd[0]))
        return rc, err, records, truth
    finally:
        jvm.kill()
        jvm.wait()


def rows_of(records):
    locks = [r for r in records if r.get("type") == "lockstat.lock"]
    summ = [r for r in records if r.get("type") == "lockstat.summary"]
    return locks, (summ[0] if summ else None)


def describe(r):
    return "%s %s %s: %d threads, %d words, %.1f ms, %s; %s" % (
        r["class"], r["kind"], r["lock"], r["thread_count"], r["word_count"], r["wait_total_ns"] / 1e6,
        r["wait_site_what"], r["reading"][:70])


def check_monitor(rc, err, records, truth):
    locks, summ = rows_of(records)
    if not check(rc == 0 and summ and truth, "monitor: lockstat ran (rc %d %s)" % (rc, err.strip()[-200:])):
        return
    window = summ["interval_ns"]
    for r in locks[:6]:
        print("     monitor: " + describe(r))
    cont = [r for r in locks if r["class"] == "contention"]
    if not check(cont, "monitor: some lock contention ranked (rows: %s)" % [describe(r) for r in locks[:4]]):
        return
    top = cont[0]
    check(top["kind"] == "java-monitor" and top["wait_site_decided"] and
          top["wait_site_what"] == "Java monitor enter (waiting to lock a java.lang.Object)",
          "monitor: the #1 contention row is the Java monitor enter of a java.lang.Object, as the JVM states it "
          "(%s; rule %s)" % (describe(top), top["wait_site_rule"]))
    workers = {t["comm"] for t in top["threads"]}
    check(top["thread_count"] == 8 and all(c.startswith("worker-") for c in workers),
          "monitor: its waiters are the 8 workers (%d: %s)" % (top["thread_count"], sorted(workers)))
    check(top["word_count"] == 1, "monitor: one monitor, not the workers' own park words (word_count %d)"
          % top["word_count"])
    got = top["wait_total_ns"] / window
    want = truth["blocked_ns"] / truth["window_ns"]
    check(abs(got - want) <= 0.2 * want,
          "monitor: wait %.2f s per s of window within 20%% of the JVM's BLOCKED time %.2f s/s (%.2fx; truth %s)"
          % (got, want, got / max(want, 1e-9), truth))
    # the JVM's own threads may really contend a VM mutex (C1 and C2 on the compile
    # queue's pthread mutex: a glibc lock word), but that is small next to the monitor
    service = [r for r in cont if any(t["comm"].startswith(SERVICE) for t in r["threads"])]
    small = sum(r["wait_total_ns"] for r in service)
    check(small < 0.05 * top["wait_total_ns"],
          "monitor: JVM service threads' contention %.1f ms < 5%% of the monitor's %.1f ms (%s)"
          % (small / 1e6, top["wait_total_ns"] / 1e6, [describe(r) for r in service]))


def workers_rows(records, label):
    """The rows the workers waited in, largest first, and their total."""
    locks, summ = rows_of(records)
    for r in locks[:6]:
        print("     %s: %s" % (label, describe(r)))
    mine = sorted((r for r in locks if any(t["comm"].startswith("worker-") for t in r["threads"])),
                  key=lambda r: -r["wait_total_ns"])
    return locks, summ, mine, sum(r["wait_total_ns"] for r in mine)


def check_waiting(label, r, summ, truth):
    got = r["wait_total_ns"] / summ["interval_ns"]
    want = truth["waited_ns"] / truth["window_ns"]
    check(abs(got - want) <= 0.2 * want,
          "%s: wait %.2f s per s of window within 20%% of the JVM's WAITING time %.2f s/s (%.2fx; truth %s)"
          % (label, got, want, got / max(want, 1e-9), truth))


def check_reentrant(rc, err, records, truth, label="reentrant"):
    locks, summ, mine, total = workers_rows(records, label)
    if not check(rc == 0 and summ and truth and mine, "%s: lockstat ran (rc %d %s)" % (label, rc, err.strip()[-200:])):
        return
    cont = [r for r in locks if r["class"] == "contention"]
    top = cont[0] if cont else mine[0]
    check(top["kind"] == "java-park" and top["lock"] == "java.util.concurrent.locks.ReentrantLock$NonfairSync" and
          "ReentrantLock" in top["wait_site_what"] and top["class"] == "contention",
          "%s: the #1 contention row is the ReentrantLock the JVM says the workers park for (%s)"
          % (label, describe(top)))
    check(top is mine[0] and top["wait_total_ns"] >= 0.95 * total,
          "%s: it holds >= 95%% of the workers' waits (%s)" % (label, [describe(r) for r in mine[:3]]))
    check(top["thread_count"] == 8, "%s: 8 workers wait in it (%d)" % (label, top["thread_count"]))
    check_waiting(label, top, summ, truth)


def check_semaphore(rc, err, records, truth):
    locks, summ, mine, total = workers_rows(records, "semaphore")
    if not check(rc == 0 and summ and truth and mine, "semaphore: lockstat ran (rc %d %s)" % (rc, err.strip()[-200:])):
        return
    r = mine[0]
    check(r["class"] == "unclassified" and r["kind"] == "java-park" and
          r["wait_site_what"] == "Java LockSupport.park (parking to wait for a java.util.concurrent.Semaphore$NonfairSync)",
          "semaphore: a design no rule describes is unclassified and named by its blocker (%s)" % describe(r))
    check(not any(x["class"] == "contention" and x["wait_total_ns"] > 0.05 * total for x in mine),
          "semaphore: nothing the workers waited in is ranked as contention (%s)" % [describe(x) for x in mine[:3]])
    check_waiting("semaphore", r, summ, truth)


def check_queue(rc, err, records, truth):
    locks, summ, mine, total = workers_rows(records, "queue")
    if not check(rc == 0 and summ and truth and mine, "queue: lockstat ran (rc %d %s)" % (rc, err.strip()[-200:])):
        return
    cont = sum(x["wait_total_ns"] for x in mine if x["class"] == "contention")
    check(cont <= 0.05 * total, "queue: contention %.1f ms <= 5%% of the workers' %.1f ms of waits (%s)"
          % (cont / 1e6, total / 1e6, [describe(x) for x in mine[:3]]))
    r = mine[0]
    check(r["class"] == "condition" and r["kind"] == "java-park" and "Condition.await" in r["wait_site_what"] and
          r["lock"].endswith("AbstractQueuedSynchronizer$ConditionObject"),
          "queue: the workers wait on the queue's Condition, as the JVM says (%s)" % describe(r))
    check_waiting("queue", r, summ, truth)


def check_offcputime(rc, err, records, truth):
    """offcputime on the ReentrantLock pool: the workers' off-CPU time the JVM says is
    for the lock is class lock, named by the blocker's class, within 20% of WAITING."""
    stacks = [r for r in records if r.get("type") == "offcputime.stack" and r.get("comm", "").startswith("worker-")]
    summ = [r for r in records if r.get("type") == "offcputime.summary"]
    if not check(rc == 0 and stacks and summ and truth, "offcputime: ran (rc %d %s)" % (rc, err.strip()[-200:])):
        return
    waits = [r for r in stacks if r["wait_class"] != "cpu"]
    total = sum(r["offcpu_total_ns"] for r in waits)
    lock = [r for r in waits if r["wait_class"] == "lock" and "ReentrantLock$NonfairSync" in r["wait_site_what"]]
    got = sum(r["offcpu_total_ns"] for r in lock)
    classes = {}
    for r in waits:
        k = "%s %s" % (r["wait_class"], r["wait_site_what"][:80])
        classes[k] = classes.get(k, 0) + r["offcpu_total_ns"]
    print("     offcputime: workers' waits by class: %s" % sorted(((round(v / 1e6), k) for k, v in classes.items()),
                                                                  reverse=True)[:4])
    check(got >= 0.9 * total, "offcputime: the ReentrantLock (as the JVM names the blocker) holds >= 90%% of the "
          "workers' off-CPU waits (%.1f of %.1f ms)" % (got / 1e6, total / 1e6))
    rate, want = got / summ[0]["interval_ns"], truth["waited_ns"] / truth["window_ns"]
    check(abs(rate - want) <= 0.2 * want, "offcputime: lock wait %.2f s/s within 20%% of the JVM's WAITING %.2f s/s"
          % (rate, want))


def other_jdk():
    """A HotSpot of another major version than the default java (JDK 21+), if installed."""
    default = os.path.realpath(shutil.which("java") or "")
    for d in sorted(glob.glob("/usr/lib/jvm/*")):
        java = os.path.join(d, "bin", "java")
        if os.path.isfile(java) and os.path.realpath(java) != default and os.path.exists(os.path.join(d, "bin", "javac")):
            out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
            if any('version "%d' % v in out for v in range(21, 40)):
                return d
    return None


def main():
    require_root()
    require_built(LOCKSTAT)
    require_built(OFFCPUTIME)
    need("javac", "openjdk-17-jdk-headless")
    d = tempfile.mkdtemp(prefix="ls-jvm-")
    try:
        subprocess.run(["javac", "-d", d, JAVA_SRC], check=True, capture_output=True, timeout=120)
        check_monitor(*run(d, "monitor"))
        check_reentrant(*run(d, "reentrant"))
        check_offcputime(*run(d, "reentrant", cmd=[OFFCPUTIME, "-j", "-d", "4"]))
        check_semaphore(*run(d, "semaphore"))
        check_queue(*run(d, "queue"))
        jdk = other_jdk()
        if jdk:
            d2 = tempfile.mkdtemp(prefix="ls-jvm2-", dir=d)
            subprocess.run([os.path.join(jdk, "bin", "javac"), "-d", d2, JAVA_SRC], check=True, capture_output=True,
                           timeout=120)
            check_reentrant(*run(d2, "reentrant", os.path.join(jdk, "bin", "java")), label="reentrant on " + jdk)
        else:
            print("note: no other HotSpot (JDK 21+) under /usr/lib/jvm; its field-stream layout is not checked")
    finally:
        shutil.rmtree(d, ignore_errors=True)
    schema_verdict("lockstat")
    finish()


if __name__ == "__main__":
    main()
