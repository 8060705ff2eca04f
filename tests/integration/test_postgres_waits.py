#!/usr/bin/env python3
"""offcputime and lockstat on PostgreSQL under pgbench, pg_stat_activity as the truth
(issue 20: "row-lock waits invisible (PG sleeps in WaitLatch -> epoll_wait); LWLock
semaphore waits 'idle ... not lock contention'; every backend's sites merged into
PGSemaphoreLock").

A cluster of Debian's PostgreSQL (initdb in a temp dir, unix socket only, no TCP),
pgbench scale 1 with 16 clients: tpcb-like (every transaction updates one of 10
tellers and the one branch: row-lock waits dominate) and its idle counterpart, -S
select-only (no locks). The truth is the backends' own wait_event_type, sampled every
50 ms by a backend of its own (pg_stat_clear_snapshot each time) while the tools run
in the same window over the 16 pgbench backends (-p PID list):
1. tpcb-like: offcputime's largest wait class+words is pg_stat_activity's most sampled
   lock wait_event, "PostgreSQL Lock:transactionid" (PostgreSQL's own USDT probes, the
   declared wait in flight at each switch-out; without them the wait-site rule at
   ProcSleep says "PostgreSQL heavyweight lock"), the Lock waits' share of the
   backends' off-CPU time within 10 points of pg_stat_activity's Lock share of the
   samples not on CPU (here 83.8% vs 85.8%); its LWLock share within 5 points.
2. tpcb-like: lockstat reads PostgreSQL's own USDT probes (lock__wait__start/done,
   lwlock__wait__start/done: the `usdt:` wait rules): its #1 row is pg_stat_activity's
   most sampled Lock/LWLock wait_event, named in its words ("PostgreSQL
   Lock:transactionid"), one row over every backend (pid 0), its wait per
   backend-second within 20% of that event's share of the samples (here 77.7% vs
   75.4%); the Lock rows together within 20% of the Lock share; the LWLock waits
   (LockManager, re-taken inside the heavyweight wait, counted as the inner wait as
   pg_stat_activity does) within 20% plus 3 standard errors of the sampled LWLock share (2.3% vs 2.5%),
   never idle or condition.
3. select-only: no heavyweight lock waits in either (offcputime's lock share < 5%,
   lockstat's contention rows under 2% of backend time), like the truth.
Every NDJSON record is validated against its schema.
"""
import glob
import os
import subprocess
import sys
import threading
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import check, finish, ndjson, need, require_built, require_root, schema_verdict, tool  # noqa: E402
from services import PG_WAIT_SAMPLER, Postgres  # noqa: E402  (the cluster: initdb in a temp dir, unix socket, port 54329)

OFFCPU = tool("offcputime")
LOCKSTAT = tool("lockstat")
WINDOW_S = 8
CLIENTS = 16




def run_window(pg, select_only):
    bench = subprocess.Popen(["runuser", "-u", "postgres", "--", os.path.join(pg.bin, "pgbench"), "-h", pg.sock,
                              "-p", "54329", "-c", str(CLIENTS), "-j", "2", "-T", str(WINDOW_S + 12)]
                             + (["-S"] if select_only else []) + ["bench"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3)
    pids = pg.psql("select string_agg(pid::text, ',') from pg_stat_activity where application_name='pgbench' "
                   "and backend_type='client backend'").strip()
    check(pids.count(",") == CLIENTS - 1, "%s: %d pgbench backends (%s)" % (
        "select-only" if select_only else "tpcb-like", pids.count(",") + 1, pids))
    truth = {}

    def sample():
        for line in pg.psql(PG_WAIT_SAMPLER % (WINDOW_S * 1000 // 60), timeout=60).splitlines():
            k, _, n = line.rpartition(" ")  # "Lock 123"; psql also echoes "CREATE TABLE", "DO"
            if k and n.isdigit():
                truth[k] = int(n)
    oc = subprocess.Popen([OFFCPU, "-p", pids, "-j", str(WINDOW_S)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    ls = subprocess.Popen([LOCKSTAT, "-p", pids, "-j", "-n", "0", "-d", str(WINDOW_S)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)  # both attached (their start records are read below)
    th = threading.Thread(target=sample)
    th.start()
    oc_out, oc_err = oc.communicate(timeout=120)
    ls_out, ls_err = ls.communicate(timeout=120)
    th.join()
    bench.communicate(timeout=120)
    check(oc.returncode == 0 and ls.returncode == 0, "offcputime and lockstat ran (rc %d %d; %s %s)"
          % (oc.returncode, ls.returncode, oc_err.strip()[-150:], ls_err.strip()[-150:]))
    return ndjson(oc_out, "offcputime"), ndjson(ls_out, "lockstat"), Counter(truth)


def shares(truth):
    total = sum(truth.values())
    off = total - truth.get("CPU", 0)
    return total, off


def of_type(truth, typ):
    """Samples whose wait_event_type is `typ` (the truth is keyed TYPE:EVENT)."""
    return sum(n for k, n in truth.items() if k.split(":")[0] == typ)


def check_tpcb(oc, ls, truth):
    total, off = shares(truth)
    print("     pg_stat_activity: %d samples: %s" % (total, dict(truth)))
    if not check(off > 100, "tpcb-like: the backends waited in %d of %d samples" % (off, total)):
        return
    by = Counter()
    for r in oc:
        if r.get("type") == "offcputime.stack":
            by[(r["wait_class"], r["wait_site_what"])] += r["offcpu_total_ns"]
    oc_total = sum(by.values())
    for (k, w), ns in by.most_common(6):
        print("     offcputime: %5.1f%% %-12s %s" % (100.0 * ns / max(oc_total, 1), k, w))
    # runnable time (class cpu: preempted) is no wait to pg_stat_activity, which shows
    # no wait_event for a backend on or waiting for a CPU
    waits = Counter({kw: ns for kw, ns in by.items() if kw[0] != "cpu"})
    top = waits.most_common(1)[0][0] if waits else ("", "")
    hw = sum(ns for (k, w), ns in by.items() if w.startswith("PostgreSQL Lock:")) / max(oc_total, 1)
    lw = sum(ns for (k, w), ns in by.items() if w.startswith("PostgreSQL LWLock")) / max(oc_total, 1)
    want_hw, want_lw = of_type(truth, "Lock") / off, of_type(truth, "LWLock") / off
    named = Counter({k: n for k, n in truth.items() if k.split(":")[0] in ("Lock", "LWLock")})
    event = named.most_common(1)[0][0] if named else "?"
    check(top == ("lock", "PostgreSQL " + event),
          "tpcb-like: offcputime's largest wait is pg_stat_activity's top lock wait %s, named by PostgreSQL's "
          "own probes (%s)" % (event, top,))
    check(abs(hw - want_hw) <= 0.10, "tpcb-like: heavyweight lock %.1f%% of off-CPU time vs pg_stat_activity's "
          "Lock %.1f%% of the samples off CPU (10 points)" % (100 * hw, 100 * want_hw))
    check(abs(lw - want_lw) <= 0.05, "tpcb-like: LWLock %.1f%% of off-CPU time vs pg_stat_activity's %.1f%% "
          "(5 points)" % (100 * lw, 100 * want_lw))
    rows = [r for r in ls if r.get("type") == "lockstat.lock"]
    summ = [r for r in ls if r.get("type") == "lockstat.summary"]
    window = summ[0]["interval_ns"] if summ else 0
    for r in rows[:5]:
        print("     lockstat: %s %s %s pid %d: %d threads, %.1f ms, %s" % (
            r["class"], r["kind"], r["lock"], r["pid"], r["thread_count"], r["wait_total_ns"] / 1e6, r["reading"][:60]))
    backend_ns = max(window * CLIENTS, 1)
    named = Counter({k: n for k, n in truth.items() if k.split(":")[0] in ("Lock", "LWLock")})
    if not check(rows and named, "tpcb-like: lockstat ranked rows (%d) and the backends waited on locks (%s)"
                 % (len(rows), dict(named))):
        return
    event, n = named.most_common(1)[0]
    top_ls = rows[0]
    check(top_ls["lock"] == "PostgreSQL " + event and top_ls["kind"] == "declared" and top_ls["class"] == "contention"
          and top_ls["pid"] == 0 and top_ls["thread_count"] >= CLIENTS // 2,
          "tpcb-like: lockstat's #1 row is pg_stat_activity's top lock wait %s, from its USDT probes, over the "
          "backends (%s %s, pid %d, %d threads)" % (event, top_ls["kind"], top_ls["lock"], top_ls["pid"],
                                                  top_ls["thread_count"]))
    got, want = top_ls["wait_total_ns"] / backend_ns, n / total
    check(0.8 <= got / max(want, 1e-9) <= 1.2, "tpcb-like: lockstat's %s %.1f%% of backend time vs pg_stat_activity's "
          "%.1f%% of the samples (20%%)" % (event, 100 * got, 100 * want))
    locks = sum(r["wait_total_ns"] for r in rows if r["lock"].startswith("PostgreSQL Lock:")) / backend_ns
    want = of_type(truth, "Lock") / total
    check(0.8 <= locks / max(want, 1e-9) <= 1.2, "tpcb-like: lockstat's heavyweight lock waits %.1f%% of backend "
          "time vs Lock %.1f%% of the samples (20%%)" % (100 * locks, 100 * want))
    lwl = [r for r in rows if r["wait_site_what"].startswith("PostgreSQL LWLock")]
    bad = [r["class"] for r in lwl if r["class"] in ("idle", "condition")]
    check(not bad, "tpcb-like: lockstat never calls an LWLock wait idle or condition (%d rows; %s)" % (len(lwl), bad))
    # PostgreSQL reports the LWLock waits it declares (lwlock__wait__start/done around
    # LWLockReportWaitStart/End); its other semaphore waits in LWLockAcquire (absorbing
    # a wake-up already under way) have no wait_event, so they are left out here
    # (a loaded fresh run: 4.1% with them vs 2.6%)
    got = sum(r["wait_total_ns"] for r in lwl if r["kind"] == "declared") / backend_ns
    want = of_type(truth, "LWLock") / total
    # the truth is a share of ~2,000 samples: 20% plus three standard errors of that
    # sampled share (at 2.4%: 0.5 + 1.0 points; a run under a build read 3.3% vs 2.4%)
    tol = 0.2 * want + 3 * (want * (1 - want) / max(total, 1)) ** 0.5
    check(abs(got - want) <= tol, "tpcb-like: lockstat's LWLock waits %.1f%% of backend time vs "
          "pg_stat_activity's %.1f%% (+-%.1f points: 20%% and 3 standard errors of the sampled share)"
          % (100 * got, 100 * want, 100 * tol))


def check_select(oc, ls, truth):
    total, off = shares(truth)
    print("     select-only pg_stat_activity: %d samples: %s" % (total, dict(truth)))
    by = Counter()
    for r in oc:
        if r.get("type") == "offcputime.stack":
            by[r["wait_class"]] += r["offcpu_total_ns"]
    oc_total = sum(by.values())
    print("     select-only offcputime: %s" % {k: "%.1f%%" % (100.0 * v / max(oc_total, 1)) for k, v in by.items()})
    check(by["lock"] / max(oc_total, 1) < 0.05 and of_type(truth, "Lock") / max(total, 1) < 0.02,
          "select-only: offcputime's lock share %.1f%% < 5%% (pg_stat_activity: Lock in %d of %d samples)"
          % (100.0 * by["lock"] / max(oc_total, 1), of_type(truth, "Lock"), total))
    summ = [r for r in ls if r.get("type") == "lockstat.summary"]
    window = summ[0]["interval_ns"] if summ else 0
    cont = sum(r["wait_total_ns"] for r in ls if r.get("type") == "lockstat.lock" and r["class"] == "contention")
    check(summ and cont < 0.02 * window * CLIENTS, "select-only: lockstat's contention %.1f ms < 2%% of the "
          "backends' time" % (cont / 1e6))


def main():
    require_root()
    require_built(OFFCPU)
    require_built(LOCKSTAT)
    need("runuser", "util-linux")
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    if not check(bins, "PostgreSQL installed (package postgresql)"):
        finish()
    pg = Postgres(os.path.dirname(bins[-1]), check)
    try:
        check_tpcb(*run_window(pg, False))
        check_select(*run_window(pg, True))
    finally:
        pg.stop()
    schema_verdict("offcputime")
    schema_verdict("lockstat")
    finish()


if __name__ == "__main__":
    main()
