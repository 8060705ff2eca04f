#!/usr/bin/env python3
"""runbook on real services under load (issue 21): each report's first finding is checked
against what the service's own instrumentation ranks first, and no idle wait is among
the findings. Each service is a private instance (tests/integration/services.py: own
config and data in a temp dir, loopback or a unix socket), stopped afterwards, also on
failure; runbook's window is WINDOW_S (8 s). For each: check_report_dir (run.json,
sections, every NDJSON line against its schema), runbook_util.check_ranking (no
idle/sleep/condition wait among the findings, problems ranked by share, losses said),
and the findings printed.

1. MariaDB + sysbench oltp_read_write (16 threads), `runbook lock-contention -p mariadbd`.
   Truth: performance_schema's events_waits_summary_global_by_event_name, truncated when
   the window opens and read when it closes: the top lock event (mutex, rwlock, sxlock,
   prlock; condition waits are idle waits, context in the report) by SUM_TIMER_WAIT.
   The first finding is lockstat's own record (its wait), names its call site ("at
   SITE", not an instrumentation wrapper) and is that lock: mariadbd is stripped, so the
   record's futex word is mapped to its performance_schema instrument through
   mariadbd's memory (services.map_to_ps, as test_mariadb does).
2. PostgreSQL + pgbench tpcb-like (scale 1: one branch, 16 clients),
   `runbook lock-contention -p postmaster --children`. Truth: pg_stat_activity sampled
   every 50 ms over the window (test_postgres_waits' sampler): the most sampled Lock or
   LWLock wait_event. The first finding names it ("PostgreSQL Lock:transactionid"), its
   wait per backend-second within 20% of that event's share of the samples.
3. redis + redis-benchmark (20 clients), `runbook slow-service -p redis`. Truth: redis's
   INFO cpu over the window (read when it opens and closes): used_cpu_*_main_thread is
   the event loop's CPU, the rest (used_cpu_* minus the main thread's) the background
   threads' (bio_*, jemalloc_bg_thd), ~0 with no persistence. So redis ranks its main
   thread's work first and everything else nowhere: the first finding is about the
   main thread's CPU (its pool, its on-CPU stack, its waits for a CPU, the run queue),
   CPU-related when the main thread ran 90%+ of the window; no background pool that
   INFO shows idle is a finding or called busy; no event-loop wait is a finding;
   threadpool's on-CPU time for the main thread within 15% (+50 ms) of INFO's.
4. JVM: tests/workloads/JvmLocks.java (8 workers, one shared lock held 500 us of every
   700 us task; test_lockstat_jvm's workload), `runbook slow-service -p JAVA`, --mode
   monitor (synchronized) and --mode reentrant (ReentrantLock). Truth: the JVM's own
   accounting (ThreadMXBean with contention monitoring): the workers' BLOCKED (monitor)
   or WAITING (parked acquire) time per second, from the window's start to runbook's
   end (the workload ends when asked for its figures). The first finding is that lock
   wait: lockstat's row (its wait per second within 20%) or threadpool's worker pool
   blocked-on-locks (its lock share of busy time within 0.15 of the truth's); the Locks
   section shows the lock (monitor: lockstat's "Java monitor enter" row, contention,
   within 20%; reentrant: the ReentrantLock row the JVM's park blocker names) or says why it cannot, and what it says agrees with lockstat's records
   (when lockstat's rows of the workers' threads hold their waits, it does not say the
   waits are ones lockstat does not see); no pool of JVM service threads sleeping in
   timed waits (on CPU under 1% of the window by their own CPU clocks,
   /proc/PID/task/TID/schedstat) is a finding.
RUNBOOK_SERVICES_KEEP=1 keeps the report directories (printed at the end).
A missing service (package) is a skip by hand, a failure under CI=true. The whole test
takes ~3 minutes here (each runbook 15-40 s: tools attach, 8 s window, report).
"""
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import CI, SKIP, SRC, check, finish, require_built, require_root, tool  # noqa: E402
from runbook_util import RUNBOOK, check_ranking, check_report_dir, findings, wait_all_attached  # noqa: E402
import services  # noqa: E402

WINDOW_S = int(os.environ.get("RUNBOOK_SERVICES_S", "8"))
SLOW = ["threadpool", "offcputime", "lockstat", "runqlen", "profile"]
LOCKS = ["lockstat", "pmheld", "offcputime"]
WRAPPERS = ("psi_", "inline_mysql_", "my_mutex_", "my_rw_", "safe_mutex_", "[unknown]")
TMP = tempfile.mkdtemp(prefix="bpfdiag-rbsvc-")
skipped, ran = [], []


def _terminate(signum, frame):  # ctest's timeout, Ctrl-C: the finally blocks stop every service
    raise SystemExit(128 + signum)


for _sig in (signal.SIGTERM, signal.SIGHUP):
    signal.signal(_sig, _terminate)


def unavailable(service, reason):
    """A service whose prerequisite is missing: a failure under CI, else a skip of it."""
    if CI:
        check(False, "%s: CI=true, yet %s" % (service, reason))
    else:
        print("SKIP %s: %s" % (service, reason))
        skipped.append(service)


def show(name, fs):
    print("     %s findings:" % name)
    for f in fs:
        print("       %s[%s] %s — %s (%s)" % ("(context) " if f["context"] else "", "x" if f["fine"] else " ",
                                             f["text"], f["number"], f["tool"]))


def run_window(book, args, out, at_start=None, at_end=None):
    """`runbook BOOK ARGS -d WINDOW_S -o OUT`: at_start() when runbook says every tool
    attached (its window opens: the SIGUSR1 boundary), at_end() WINDOW_S later (the
    window closes). runbook is killed if it is still running at the end (its tools end
    with it). Prints how long it took to attach and in all; returns (rc, stderr, attached)."""
    t = time.monotonic()
    p = subprocess.Popen([RUNBOOK, book] + args + ["-d", str(WINDOW_S), "-o", out], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    err, attached, t_att = "", False, None
    try:
        attached, err = wait_all_attached(p)
        t_att = time.monotonic() - t
        if attached:
            t0 = time.monotonic()
            if at_start:
                at_start()
            time.sleep(max(0.0, t0 + WINDOW_S - time.monotonic()))
            if at_end:
                at_end()
        _, rest = p.communicate(timeout=240)
        err += rest.decode(errors="replace")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    print("     runbook %s: rc %s, attached in %.1f s, %.1f s in all" % (book, p.returncode, t_att or -1,
                                                                     time.monotonic() - t))
    return p.returncode, err, attached


def real(fs):
    return [f for f in fs if not f["context"]]


def final(recs, tool_name, kind):
    return [r for r in recs.get(tool_name, []) if r.get("type") == "%s.%s" % (tool_name, kind) and r.get("final")]


def window_s(rj):
    return (rj["window_end_ns"] - rj["window_start_ns"]) / 1e9


def lock_record(f, locks):
    """lockstat's record a lockstat finding says: 'lock NAME in ...', its wait in ms."""
    for r in locks:
        if f["text"].startswith("lock %s in " % r["lock"]) and \
                "%.1f ms waited" % (r["wait_total_ns"] / 1e6) in f["number"]:
            return r
    return None


def ms_in(s, what):
    m = re.search(r"([\d.]+) ms %s" % what, s)
    return float(m.group(1)) if m else None


def task_cpu(pid):
    """{tid: (comm, ns on CPU)} of every thread of pid: each thread's own CPU clock
    (schedstat; what ThreadMXBean.getThreadCpuTime and RUSAGE_THREAD read)."""
    got = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            comm = open("/proc/%d/task/%s/comm" % (pid, tid)).read().strip()
            got[int(tid)] = (comm, int(open("/proc/%d/task/%s/schedstat" % (pid, tid)).read().split()[0]))
        except (OSError, ValueError, IndexError):
            pass
    return got


def cpu_delta(c0, c1, tids):
    return sum(c1[t][1] - c0.get(t, ("", 0))[1] for t in tids if t in c1)


def print_groups(label, groups, cpu=None):
    for g in groups:
        tids = [t["tid"] for t in g["threads"]]
        print("     %s threadpool group %-16s %2d threads verdict %-16s util %.2f busy %.2f on-CPU %.1f ms runnable "
              "%.1f ms idle %.1f ms blocked %s dispatches %d%s; %s" % (
                  label, "'%s'" % g["group"], g["thread_count"], g["verdict"], g["utilization"], g["busy_avg"],
                  g["oncpu_total_ns"] / 1e6, g["runnable_total_ns"] / 1e6, g["idle_total_ns"] / 1e6,
                  {k: round(v / 1e6, 1) for k, v in g["blocked_total_ns"].items() if v}, g["dispatch_count"],
                  "; own CPU clocks %.1f ms" % (cpu(tids) / 1e6) if cpu else "", g["verdict_reason"]))


def print_lockstat(label, locks, n=6, mapped=None):
    for r in locks[:n]:
        print("     %s lockstat %-14s %-12s %-40s %8.1f ms %5d waits %2d thr %s | %s | sites %s%s" % (
            label, r["class"], r["kind"], r["lock"][:40], r["wait_total_ns"] / 1e6, r["wait_count"],
            r["thread_count"], r.get("wait_site_what", ""), r["reading"][:110],
            [s["site"][:50] for s in r["sites"][:3]],
            " | P_S %s" % (mapped.get(r["addr"], ("-",))[0],) if mapped is not None else ""))


def print_offcpu(label, recs, n=6, comm=None):
    stacks = [r for r in recs.get("offcputime", []) if r.get("type") == "offcputime.stack" and
              (comm is None or r["comm"] == comm)]
    stacks.sort(key=lambda r: -r["offcpu_total_ns"])
    for r in stacks[:n]:
        us = [f for f in r.get("user_stack", []) if not f.startswith("[unknown]")][:3]
        print("     %s offcputime %8.1f ms %-16s tid %s %-12s %s | %s" % (
            label, r["offcpu_total_ns"] / 1e6, r["comm"], r.get("tid", "-"), r.get("wait_class"),
            r.get("wait_site_what"), " <- ".join(us)))


def sleeping_idle_pools(label, fs, groups, cpu):
    """No pool of threads that sleep in timed waits and barely run (under 1% of the
    window on CPU by their own CPU clocks) is a finding: they are timers and background
    threads, waiting for nothing (the report's own rule: timed sleeps are context)."""
    idle = []
    for g in groups:
        tids = [t["tid"] for t in g["threads"]]
        ran_ns = cpu(tids)
        if g["verdict"] == "sleeping" and ran_ns < 0.01 * g["interval_ns"] * g["thread_count"]:
            idle.append((g["group"], ran_ns))
    flagged = [f["text"] for f in real(fs) for name, _ in idle if f["tool"] == "threadpool" and
               f["text"].startswith("pool '%s' of" % name)]
    check(not flagged, "%s: no pool of timer or background threads (verdict sleeping, on CPU under 1%% of the "
          "window: %s) among the findings%s" % (label, ", ".join("%s %.1f ms" % (n, ns / 1e6) for n, ns in idle)
                                                or "none", "; found: %s" % flagged if flagged else ""))


# --- 1. MariaDB ------------------------------------------------------------------------------
def mariadb():
    gone = services.missing(*services.MARIADB_PROGRAMS)
    if gone:
        return unavailable("mariadb", "not installed: %s (scripts/install-deps installs mariadb-server, "
                                      "sysbench)" % gone)
    ran.append("mariadb")
    db = services.MariaDB(port=services.free_port(3330, 3350), prefix="bpfdiag-rbsvc-mariadb-")
    out = os.path.join(TMP, "mariadb")
    try:
        db.start()
        db.prepare()
        load = db.sysbench("run", 200)  # stopped by db.stop()
        time.sleep(2)  # connections up, tables warm
        got = {}
        rc, err, attached = run_window("lock-contention", ["-p", str(db.pid)], out, at_start=db.ps_truncate,
                                       at_end=lambda: got.update(ps=db.ps_hot()))
        check(rc == 0 and attached and "ps" in got, "mariadb: runbook lock-contention exits 0 after every tool "
              "attached (rc %s; %s)" % (rc, err.strip()[-300:]))
        rj, recs = check_report_dir(out, "lock-contention", LOCKS, db.pid)
        locks = final(recs, "lockstat", "lock")
        # the instruments and mariadbd's memory while sysbench's connections exist
        names, _ = db.ps_instances()
        mapped, ambiguous = services.map_to_ps(db.pid, locks, names)
        check(load.poll() is None, "mariadb: sysbench ran through the window")
    finally:
        db.stop()
    fs = findings(out)
    show("mariadb", fs)
    check_ranking("mariadb", out, recs)
    ps = got.get("ps", {})
    lock_events = sorted(((ns, n) for n, (c, ns) in ps.items() if services.layout_of(n) != "cond"), reverse=True)
    print("     mariadb truth: performance_schema over the window, lock events by SUM_TIMER_WAIT:")
    for ns, n in lock_events[:6]:
        print("       %-52s %8d waits %9.1f ms" % (n, ps[n][0], ns / 1e6))
    for ns, n in sorted(((ns, n) for n, (c, ns) in ps.items() if services.layout_of(n) == "cond"), reverse=True)[:3]:
        print("       %-52s %8d waits %9.1f ms (condition: idle waits)" % (n, ps[n][0], ns / 1e6))
    print_lockstat("mariadb", locks, 8, mapped)
    print_offcpu("mariadb", recs, 4)
    if not check(lock_events and real(fs), "mariadb: performance_schema timed lock waits (%d events) and the report "
                 "has findings (%d)" % (len(lock_events), len(real(fs)))):
        return
    top = lock_events[0][1]
    f0 = real(fs)[0]
    r = lock_record(f0, locks) if f0["tool"] == "lockstat" else None
    check(r is not None, "mariadb: the first finding is lockstat's, one of its records (%s: %s)"
          % (f0["tool"], f0["text"][:120]))
    if r is None:
        return
    name = mapped.get(r["addr"], (None,))[0]
    check(name == top, "mariadb: the first finding's lock %s is performance_schema's top lock event %s (%.1f ms; "
          "mapped by address through mariadbd's memory: %s%s)" % (r["addr"], top, ps[top][1] / 1e6, name,
                                                               "; ambiguous: %s" % ambiguous.get(r["addr"])
                                                               if r["addr"] in ambiguous else ""))
    site = r["sites"][0]["site"] if r["sites"] else ""
    check(site and not site.startswith(WRAPPERS) and (" at %s" % site) in f0["text"],
          "mariadb: the first finding names the lock's call site, past the wrappers (at %s)" % site[:80])


# --- 2. PostgreSQL ---------------------------------------------------------------------------
PG_CLIENTS = 16


def postgres():
    bindir = services.pg_bindir()
    gone = services.missing("runuser", "setpriv") + ([] if bindir else ["postgresql"])
    if gone:
        return unavailable("postgresql", "not installed: %s (scripts/install-deps installs postgresql)" % gone)
    ran.append("postgresql")
    out = os.path.join(TMP, "postgres")
    pg = services.Postgres(bindir, check, port=54339, prefix="bpfdiag-rbsvc-pg-")
    truth, recs = Counter(), {}
    try:
        if not pg.started:
            return
        load = pg.pgbench(["-c", str(PG_CLIENTS), "-j", "2", "-T", "200"])  # stopped by pg.stop()
        deadline = time.time() + 30
        while time.time() < deadline and load.poll() is None:
            n = pg.psql("select count(*) from pg_stat_activity where application_name='pgbench' and "
                        "backend_type='client backend'").strip()
            if n == str(PG_CLIENTS):
                break
            time.sleep(0.2)
        time.sleep(1)  # pgbench's transactions under way

        def sample():
            for line in pg.psql(services.PG_WAIT_SAMPLER % (WINDOW_S * 1000 // 60), timeout=120).splitlines():
                k, _, n = line.rpartition(" ")
                if k and n.isdigit():
                    truth[k] = int(n)
        th = threading.Thread(target=sample)
        rc, err, attached = run_window("lock-contention", ["-p", str(pg.pid), "--children"], out, at_start=th.start)
        if attached:  # the sampler started with the window
            th.join(timeout=120)
        check(rc == 0 and attached, "postgresql: runbook lock-contention --children exits 0 after every tool "
              "attached (rc %s; %s)" % (rc, err.strip()[-300:]))
        check(load.poll() is None, "postgresql: pgbench ran through the window")
        rj, recs = check_report_dir(out, "lock-contention", LOCKS)
        check(rj["options"]["pid"] == [pg.pid] and rj["options"]["children"],
              "postgresql: run.json options: pid %s, children %s" % (rj["options"]["pid"], rj["options"]["children"]))
    finally:
        pg.stop()
    fs = findings(out)
    show("postgresql", fs)
    check_ranking("postgresql", out, recs)
    total = sum(truth.values())
    named = Counter({k: n for k, n in truth.items() if k.split(":")[0] in ("Lock", "LWLock")})
    print("     postgresql truth: pg_stat_activity, %d samples of the %d backends: %s" % (total, PG_CLIENTS,
                                                                                       truth.most_common()))
    print_lockstat("postgresql", final(recs, "lockstat", "lock"), 5)
    print_offcpu("postgresql", recs, 6)
    if not check(named and real(fs), "postgresql: the backends waited on locks (%s) and the report has findings "
                 "(%d)" % (dict(named), len(real(fs)))):
        return
    event, n = named.most_common(1)[0]
    f0 = real(fs)[0]
    check(("PostgreSQL " + event) in f0["text"], "postgresql: the first finding names pg_stat_activity's top lock "
          "wait %s (%d of %d samples): %s (%s)" % (event, n, total, f0["text"][:110], f0["tool"]))
    window_ms = window_s(rj) * 1e3
    ms = ms_in(f0["number"], "waited") if f0["tool"] == "lockstat" else ms_in(f0["number"], "off-CPU")
    got, want = (ms or 0) / (PG_CLIENTS * window_ms), n / max(total, 1)
    check(0.8 <= got / max(want, 1e-9) <= 1.2, "postgresql: the first finding's %s ms is %.1f%% of the backends' "
          "time vs %s in %.1f%% of pg_stat_activity's samples (20%%)" % (ms, 100 * got, event, 100 * want))


# --- 3. redis --------------------------------------------------------------------------------
def redis():
    gone = services.missing(*services.REDIS_PROGRAMS)
    if gone:
        return unavailable("redis", "not installed: %s (scripts/install-deps installs redis-server, "
                                    "redis-tools)" % gone)
    ran.append("redis")
    out = os.path.join(TMP, "redis")
    r = services.Redis(port=services.free_port(6400, 6420), prefix="bpfdiag-rbsvc-redis-")
    snap = {}
    try:
        r.start()
        load = r.benchmark(["-c", "20", "-n", "20000000", "-t", "set,get,lpush,lpop", "-q"])  # stopped by r.stop()
        time.sleep(1)
        pid = r.pid

        def at(k):
            snap[k] = (r.info("cpu"), time.monotonic(), task_cpu(pid), r.info("stats"))
        rc, err, attached = run_window("slow-service", ["-p", str(pid)], out, at_start=lambda: at(0),
                                       at_end=lambda: at(1))
        check(rc == 0 and attached and len(snap) == 2, "redis: runbook slow-service exits 0 after every tool attached "
              "(rc %s; %s)" % (rc, err.strip()[-300:]))
        check(load.poll() is None, "redis: redis-benchmark ran through the window")
        rj, recs = check_report_dir(out, "slow-service", SLOW, pid)
    finally:
        r.stop()
    fs = findings(out)
    show("redis", fs)
    check_ranking("redis", out, recs)
    if len(snap) < 2:
        return
    (i0, t0, c0, s0), (i1, t1, c1, s1) = snap[0], snap[1]
    secs = t1 - t0

    def d(k):
        return float(i1[k]) - float(i0[k])
    main = d("used_cpu_sys_main_thread") + d("used_cpu_user_main_thread")
    other = d("used_cpu_sys") + d("used_cpu_user") - main
    cmds = int(s1["total_commands_processed"]) - int(s0["total_commands_processed"])
    print("     redis truth: INFO over %.2f s: main thread %.3f s CPU (%.0f%% of the window), other threads %.3f s; "
          "%d commands (%.0f/s)" % (secs, main, 100 * main / secs, other, cmds, cmds / secs))
    groups = final(recs, "threadpool", "group")
    cpu = lambda tids: cpu_delta(c0, c1, tids)  # noqa: E731
    for tid, (comm, ns) in sorted(c1.items()):
        print("     redis thread %d %-16s own CPU clock %.1f ms in the window" % (tid, comm, cpu([tid]) / 1e6))
    print_groups("redis", groups, cpu)
    print_offcpu("redis", recs, 5)
    print_lockstat("redis", final(recs, "lockstat", "lock"), 3)
    main_g = [g for g in groups if any(t["tid"] == pid for t in g["threads"])]
    bg = [g for g in groups if g not in main_g]
    rl = real(fs)
    # no event-loop wait among the findings (offcputime's epoll_wait in aeMain is context)
    loop = [f["text"] for f in rl if "[idle" in f["text"] or "event loop" in f["text"]]
    check(not loop, "redis: no idle or event-loop wait among the findings%s" % ("; found: %s" % loop if loop else ""))
    # background threads: redis's INFO shows them idle, so no pool of them is a finding or busy
    if other < 0.01 * secs:
        flagged = [f["text"][:100] for f in rl for g in bg if f["tool"] == "threadpool" and
                   f["text"].startswith("pool '%s' of" % g["group"])]
        check(not flagged, "redis: INFO shows the background threads idle (%.3f s CPU in %.1f s): none of their "
              "pools is a finding%s" % (other, secs, "; found: %s" % flagged if flagged else ""))
        busy = ["%s %s util %.2f" % (g["group"], g["verdict"], g["utilization"]) for g in bg if g["utilization"] >= 0.5]
        check(not busy, "redis: no background pool called busy when INFO shows it idle (%s)%s"
              % (", ".join("%s %s %.2f" % (g["group"], g["verdict"], g["utilization"]) for g in bg),
                 "; busy: %s" % busy if busy else ""))
    else:
        print("     (redis's background threads ran %.3f s: the idle-background checks do not apply)" % other)
    # the first finding: the main thread's CPU (redis ranks nothing else)
    if not check(rl, "redis: the report has findings (%d)" % len(rl)):
        return
    f0 = rl[0]
    mg = main_g[0]["group"] if main_g else "redis-server"
    who = f0["text"].split(" (")[0]  # "top off-CPU stack: redis-server", "pool 'redis-server' of redis-server"
    main_pool = f0["tool"] == "threadpool" and f0["text"].startswith("pool '%s' of" % mg)
    about_main = main_pool or f0["tool"] == "runqlen" or \
        (f0["tool"] == "profile" and who.endswith(mg)) or \
        (f0["tool"] == "offcputime" and "[cpu:" in f0["text"] and who.endswith(mg))
    check(about_main, "redis: the first finding is about the main thread's CPU, which is all redis's INFO shows "
          "working (main thread %.0f%% of the window on CPU, background threads %.3f s): %s (%s)"
          % (100 * main / secs, other, f0["text"][:110], f0["tool"]))
    if main >= 0.9 * secs:
        # one thread on CPU 90%+ of the time: the event loop is saturated
        cpu_related = f0["tool"] in ("profile", "runqlen") or "[cpu:" in f0["text"] or \
            (main_pool and main_g[0]["verdict"] in ("cpu-starved", "pool-too-small"))
        check(cpu_related, "redis: CPU-bound by INFO (main thread on CPU %.0f%% of the window): the first finding is "
              "CPU-related (%s)" % (100 * main / secs, f0["text"][:100]))
    if main_g:
        g = main_g[0]
        check(abs(g["oncpu_total_ns"] / 1e9 - main) <= 0.15 * main + 0.05,
              "redis: threadpool's main-thread on-CPU %.3f s vs INFO's used_cpu_*_main_thread %.3f s (15%% + 50 ms)"
              % (g["oncpu_total_ns"] / 1e9, main))
        check(g["utilization"] >= main / secs - 0.05, "redis: the main thread's utilisation %.2f is at least its CPU "
              "share by INFO %.2f" % (g["utilization"], main / secs))
    else:
        check(False, "redis: threadpool has a group for the main thread %d (%s)" % (pid, [g["group"] for g in groups]))


# --- 4. JVM ----------------------------------------------------------------------------------
def jvm():
    gone = services.missing("java", "javac")
    if gone:
        return unavailable("jvm", "not installed: %s (scripts/install-deps installs openjdk-17-jdk-headless)" % gone)
    ran.append("jvm")
    d = tempfile.mkdtemp(prefix="bpfdiag-rbsvc-jvm-")
    try:
        services.javac(os.path.join(SRC, "tests/workloads/JvmLocks.java"), d)
        for mode in ("monitor", "reentrant"):
            jvm_mode(d, mode)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def jvm_mode(d, mode):
    label = "jvm %s" % mode
    out = os.path.join(TMP, "jvm-" + mode)
    java = subprocess.Popen(["java", "-Xmx64m", "-XX:+UseSerialGC", "-cp", d, "JvmLocks", "--mode", mode,
                             "--workers", "8", "--hold-us", "500", "--free-us", "200"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            preexec_fn=services._die_with_parent)
    snap, truth, recs = {}, None, {}
    try:
        ready = java.stdout.readline()
        if not check(ready.startswith("{"), "%s: JVM ready (%s)" % (label, ready.strip())):
            return

        def at_start():
            java.stdin.write("start\n")
            java.stdin.flush()
            snap[0] = task_cpu(java.pid)

        rc, err, attached = run_window("slow-service", ["-p", str(java.pid)], out, at_start=at_start,
                                       at_end=lambda: snap.update({1: task_cpu(java.pid)}))
        check(rc == 0 and attached, "%s: runbook slow-service exits 0 after every tool attached (rc %s; %s)"
              % (label, rc, err.strip()[-300:]))
        if 0 in snap:
            java.stdin.write("stop\n")
            java.stdin.flush()
            # its one line of figures (nothing else is written after the ready line)
            line = java.stdout.readline() if select.select([java.stdout], [], [], 60)[0] else ""
            truth = json.loads(line) if line.startswith("{") else None
        rj, recs = check_report_dir(out, "slow-service", SLOW, java.pid)
    finally:
        services.kill_jvm(java)
    fs = findings(out)
    show(label, fs)
    check_ranking(label, out, recs)
    if not check(truth and len(snap) == 2, "%s: the JVM's own figures for the window (%s)" % (label, truth)):
        return
    key = "blocked_ns" if mode == "monitor" else "waited_ns"
    rate = truth[key] / truth["window_ns"]  # workers blocked on the lock, on average
    share = rate / 8
    print("     %s truth: the JVM's %s %.1f s over %.2f s: %.2f of 8 workers waiting for the lock on average "
          "(%.0f%% of their time); %d tasks" % (label, "BLOCKED" if mode == "monitor" else "WAITING (parked)",
                                                truth[key] / 1e9, truth["window_ns"] / 1e9, rate, 100 * share,
                                                truth["tasks"]))
    groups = final(recs, "threadpool", "group")
    cpu = lambda tids: cpu_delta(snap[0], snap[1], tids)  # noqa: E731
    print_groups(label, groups, cpu)
    locks = final(recs, "lockstat", "lock")
    print_lockstat(label, locks, 6)
    print_offcpu(label, recs, 4)
    win = window_s(rj)
    workers = [g for g in groups if g["group"].startswith("worker")]
    rl = real(fs)
    if not check(rl and workers, "%s: findings (%d) and threadpool's worker pool (%s)"
                 % (label, len(rl), [g["group"] for g in groups])):
        return
    wg = workers[0]
    wtids = {t["tid"] for t in wg["threads"]}
    busy = max(wg["accounted_total_ns"] - wg["idle_total_ns"], 1)
    tp_share = wg["blocked_total_ns"]["lock"] / busy
    f0 = rl[0]
    ok, why = False, ""
    if f0["tool"] == "lockstat":
        r = lock_record(f0, locks)
        got = r["wait_total_ns"] / 1e9 / win if r else 0
        ok = bool(r) and r["class"] == "contention" and set(t["tid"] for t in r.get("threads", [])) <= wtids and \
            0.8 <= got / rate <= 1.2
        why = "lockstat %s: %.2f workers waiting on average" % (r and r["lock"], got)
    elif f0["tool"] == "threadpool" and f0["text"].startswith("pool '%s' of" % wg["group"]):
        ok = wg["verdict"] == "blocked-on-locks" and abs(tp_share - share) <= 0.15
        why = "threadpool %s, lock %.0f%% of busy time" % (wg["verdict"], 100 * tp_share)
    check(ok, "%s: the first finding is the workers' lock wait the JVM ranks first (%.2f workers, %.0f%%): %s (%s)"
          % (label, rate, 100 * share, why or f0["text"][:100], f0["tool"]))
    # the Locks section: the locks, or why not (and that agrees with lockstat's records)
    md = open(os.path.join(out, "report.md")).read()
    sec = md.split("\n## Locks", 1)[1].split("\n## ", 1)[0] if "\n## Locks" in md else ""
    story = [l for l in sec.splitlines() if l.startswith("- threadpool counts")]
    cont = [r for r in locks if r["class"] == "contention" and set(t["tid"] for t in r.get("threads", [])) & wtids]
    cont_rate = sum(r["wait_total_ns"] for r in cont) / 1e9 / win
    shown = [r for r in cont if "lockstat: lock %s in " % r["lock"] in sec]
    if mode == "monitor":
        mon = [r for r in shown if r.get("wait_site_what", "").startswith("Java monitor enter")]
        got = mon[0]["wait_total_ns"] / 1e9 / win if mon else 0
        check(mon and 0.8 <= got / rate <= 1.2, "%s: the Locks section shows lockstat's Java monitor enter row, "
              "contention, %.2f workers waiting on average vs the JVM's %.2f (20%%)" % (label, got, rate))
    else:
        check((bool(shown) and 0.8 <= cont_rate / rate <= 1.2) or bool(story),
              "%s: the Locks section shows the lock (contended rows of the workers: %.2f waiting on average vs the "
              "JVM's %.2f) or says why it cannot (%s)" % (label, cont_rate, rate, story[0][:100] if story else None))
    if story:
        other = [r for r in locks if r["class"] != "contention" and set(t["tid"] for t in r.get("threads", [])) & wtids]
        other_ns = sum(t["wait_total_ns"] for r in other for t in r.get("threads", []) if t["tid"] in wtids)
        blocked = wg["blocked_total_ns"]["lock"]
        print("     %s Locks says: %s" % (label, story[0]))
        print("     %s lockstat's rows of the workers not classed contention: %.1f ms (%s)" % (
            label, other_ns / 1e6, "; ".join("%s %s %.1f ms" % (r["class"], r["lock"][:50], r["wait_total_ns"] / 1e6)
                                             for r in other[:3])))
        check(other_ns < 0.5 * blocked or "lockstat does not see" not in story[0],
              "%s: what Locks says agrees with lockstat's records: lockstat's rows of the workers' threads hold "
              "%.1f ms of waits (classed %s) against threadpool's %.1f ms blocked on locks, so they are not 'waits "
              "lockstat does not see'" % (label, other_ns / 1e6, sorted({r["class"] for r in other}), blocked / 1e6))
    sleeping_idle_pools(label, fs, groups, cpu)


def main():
    require_root()
    require_built(RUNBOOK, *[tool(t) for t in set(SLOW + LOCKS)])
    t0 = time.monotonic()
    try:
        for service in (mariadb, postgres, redis, jvm):
            ts = time.monotonic()
            try:
                service()
            except Exception as e:  # a failure to set up is a failure, never a skip
                check(False, "%s ran (%s: %s)" % (service.__name__, type(e).__name__, e))
            print("     (%s took %.0f s)" % (service.__name__, time.monotonic() - ts))
    finally:
        if os.environ.get("RUNBOOK_SERVICES_KEEP"):
            print("     report directories kept in %s" % TMP)
        else:
            shutil.rmtree(TMP, ignore_errors=True)
    print("     test took %.0f s" % (time.monotonic() - t0))
    if skipped and not ran:
        print("SKIP: %s" % ", ".join(skipped))
        sys.exit(SKIP)
    finish()


if __name__ == "__main__":
    main()
