#!/usr/bin/env python3
"""threadpool on MariaDB with its own thread pool (issue 20: "MariaDB
thread_handling=pool-of-threads, thread_pool_size=2, 32 clients: '162 requests (6/s)'
against 34k queries/s"). sysbench's 32 clients connect before threadpool starts, so
their connections' accepts are never seen: threadpool now finds the connections the
pool's processes accepted before tracing (/proc/PID/fd and /proc/PID/net/{tcp,tcp6,unix}:
a UNIX stream socket bearing the path mariadbd listens on) and counts each read ->
response turn on them as a request.

Truth: MariaDB's own counter of client statements, SHOW GLOBAL STATUS 'Questions',
sampled every 50 ms through one client session (wall clock at each answer) and
interpolated at threadpool's window (the summary's time_ns - interval_ns .. time_ns),
minus the sampling statements themselves. (Read only at the start record and summary,
the counts missed the half second between threadpool's own start and its start record
at 7-15k statements/s: 1.1-1.2x.) sysbench runs with --db-ps-mode=disable: every
statement is one COM_QUERY turn.

The pool itself (issue 20: "loaded machine: blocked-on-locks, 11.5 of 18 threads busy
(standby workers woken by a pool peer counted as lock); quiet machine: idle while
requests queue 100% of the time"). Truth: information_schema.THREAD_POOL_GROUPS sampled
through the same session every 50 ms: SUM(ACTIVE_THREADS) / SUM(THREADS) is the pool's
utilisation, SUM(QUEUE_LENGTH) > 0 says requests queue. sysbench oltp_read_only (no
lock waits), 32 clients, thread_pool_size=2 (measured here: 2.0 active of 10-15
threads, requests queued in 92-99% of the samples, quiet or beside stress-ng).

1. threadpool -p mariadbd -j -d 5: the start record's connections_seeded >= 32 (the
   clients' connections; the test's own mariadb client comes and goes);
2. the summary's request_count within 10% of the Questions delta over the same window;
3. the mariadbd group's utilisation within 0.10 of THREAD_POOL_GROUPS' over the window;
4. its verdict, while requests queue in most samples: pool-too-small or cpu-starved,
   never blocked-on-locks (standby workers sleep on words of their own and are woken by
   a peer with work: a wait for work, known by the wait site or the hand-off) nor idle;
5. 3 and 4 again with stress-ng --cpu 2 beside it (a second threadpool run, -d 4).
"""
import bisect
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import services  # noqa: E402
from harness import (CI, check, finish, is_type, ndjson, require_built, require_root, schema_verdict, skip,  # noqa: E402
                     tool)

THREADPOOL = tool("threadpool")
CLIENTS = 32


POOL_SQL = ("SELECT SUM(THREADS), SUM(ACTIVE_THREADS), SUM(QUEUE_LENGTH) "
            "FROM information_schema.THREAD_POOL_GROUPS;\n")


class Questions(threading.Thread):
    """MariaDB's Questions counter sampled through one session: [(wall ns, value)];
    THREAD_POOL_GROUPS' sums alongside: [(wall ns, (threads, active, queue))]."""

    def __init__(self, db):
        super().__init__(daemon=True)
        self.p = subprocess.Popen(["mariadb", "--no-defaults", "-S", db.sock, "-u", "root", "-N", "-B", "-n"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.samples, self.pool, self.done = [], [], False

    def run(self):
        while not self.done:
            self.p.stdin.write("SHOW GLOBAL STATUS LIKE 'Questions';\n")
            self.p.stdin.flush()
            line = self.p.stdout.readline()
            if not line:
                return
            self.samples.append((time.time_ns(), int(line.split()[1])))
            self.p.stdin.write(POOL_SQL)
            self.p.stdin.flush()
            line = self.p.stdout.readline()
            if not line:
                return
            try:
                self.pool.append((time.time_ns(), tuple(float(x) for x in line.split())))
            except ValueError:
                pass  # NULL sums: the pool not reported
            time.sleep(0.05)

    def stop(self):
        self.done = True
        self.join(timeout=5)
        self.p.stdin.close()
        self.p.wait(timeout=10)

    def pool_over(self, t0, t1):
        """(utilisation = mean active / mean threads, share of samples with a queue, n)."""
        w = [v for t, v in self.pool if t0 <= t <= t1]
        if not w:
            return None, None, 0
        threads = sum(v[0] for v in w) / len(w)
        active = sum(v[1] for v in w) / len(w)
        return active / max(threads, 1), sum(1 for v in w if v[2] > 0) / len(w), len(w)

    def sample_count(self):
        return len(self.samples)

    def at(self, t):
        """(interpolated value at wall time t, samples taken before t)."""
        i = bisect.bisect_left(self.samples, (t, -1))
        if i == 0 or i == len(self.samples):
            return None, i
        (ta, qa), (tb, qb) = self.samples[i - 1], self.samples[i]
        return qa + (qb - qa) * (t - ta) / max(tb - ta, 1), i


def pool_groups(db):
    try:
        return db.sql("SELECT GROUP_ID, CONNECTIONS, THREADS, ACTIVE_THREADS, STANDBY_THREADS, QUEUE_LENGTH "
                      "FROM information_schema.THREAD_POOL_GROUPS")
    except RuntimeError as e:
        return [["(unavailable: %s)" % e]]


def run_threadpool(db, secs):
    """threadpool -p mariadbd -j -d secs: (start, first summary, group records, stderr, rc)."""
    tp = subprocess.Popen([THREADPOOL, "-p", str(db.pid), "-j", "-d", str(secs)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    start = summary = None
    groups = []
    for line in tp.stdout:
        rec = ndjson(line, "threadpool")[0]
        if is_type(rec, "threadpool", "start"):
            start = rec
        elif is_type(rec, "threadpool", "summary") and summary is None:
            summary = rec
        elif is_type(rec, "threadpool", "group") and summary is None:
            groups.append(rec)
    err = tp.stderr.read()
    return start, summary, groups, err, tp.wait(timeout=60)


def judge_pool(q, label, summary, groups):
    """The mariadbd group's utilisation and verdict against THREAD_POOL_GROUPS over the
    summary's window."""
    t1 = summary["time_ns"]
    util, queued, n = q.pool_over(t1 - summary["interval_ns"], t1)
    if not check(n >= 10, "%s: THREAD_POOL_GROUPS sampled across the window (%d samples)" % (label, n)):
        return
    main = max(groups, key=lambda g: len(g.get("threads", [])), default=None)
    if not check(main is not None, "%s: a group reported" % label):
        return
    got = main.get("utilization", 0)
    check(abs(got - util) <= 0.10, "%s: utilisation %.2f within 0.10 of THREAD_POOL_GROUPS' %.2f (active/threads)"
          % (label, got, util))
    v = main.get("verdict")
    if queued >= 0.5:
        check(v in ("pool-too-small", "cpu-starved"),
              "%s: requests queued in %.0f%% of the samples: verdict %s is pool-too-small or cpu-starved (%s)"
              % (label, 100 * queued, v, main.get("verdict_reason", "")[:200]))
    check(v not in ("blocked-on-locks", "idle") or queued < 0.5,
          "%s: verdict %s is neither blocked-on-locks nor idle (no lock waits; queued %.0f%%)"
          % (label, v, 100 * queued))


def main():
    require_root()
    require_built(THREADPOOL)
    gone = services.missing(*services.MARIADB_PROGRAMS)
    if gone:
        skip("not installed: %s (scripts/install-deps installs mariadb-server, sysbench)" % gone)
    db = services.MariaDB(port=services.free_port(3351, 3370), prefix="bpfdiag-tp-mariadb-",
                          extra=["--thread-handling=pool-of-threads", "--thread-pool-size=2"])
    try:
        db.start()
        db.prepare()
        load = subprocess.Popen(["sysbench", "oltp_read_only", "--db-driver=mysql", "--mysql-socket=" + db.sock,
                                 "--mysql-user=root", "--mysql-db=sbtest", "--tables=4", "--table-size=2000",
                                 "--threads=%d" % CLIENTS, "--time=120", "--report-interval=0",
                                 "--db-ps-mode=disable", "run"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        db.loads.append(load)  # stopped by db.stop()
        q = Questions(db)
        q.start()
        time.sleep(2)  # every client connected
        start, summary, groups, err, rc = run_threadpool(db, 5)
        time.sleep(0.2)  # a sample after the window's end
        truth_pool = pool_groups(db)
        stressed = None
        if not services.missing("stress-ng"):
            stress = subprocess.Popen(["stress-ng", "--cpu", "2", "-t", "30"], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
            db.loads.append(stress)
            time.sleep(1)
            stressed = run_threadpool(db, 4)
            time.sleep(0.2)
            stress.kill()
        q.stop()
        check(load.poll() is None, "sysbench ran through the windows")
    finally:
        db.stop()
    if not check(rc == 0 and start and summary, "threadpool ran (rc %s: %s)" % (rc, err.strip()[-300:])):
        finish()
    seeded = start.get("connections_seeded", 0)
    check(seeded >= CLIENTS, "the %d clients' connections, accepted before tracing, are tracked (%d seeded)"
          % (CLIENTS, seeded))
    t1 = summary["time_ns"]
    (q0, i0), (q1, i1) = q.at(t1 - summary["interval_ns"]), q.at(t1)
    if not check(q0 is not None and q1 is not None, "Questions sampled across the window (%d samples)" % len(q.samples)):
        finish()
    want = q1 - q0 - 2 * (i1 - i0)  # less the sampling statements themselves (two a sample)
    got = summary["request_count"]
    check(want > 0 and abs(got - want) <= 0.1 * want,
          "requests %d within 10%% of MariaDB's Questions %.0f over the window (%.3fx)" % (got, want, got / max(want, 1)))
    for g in groups:
        print("     group %s: %d threads, utilization %.2f, verdict %s (%s), %d requests" % (
            g.get("group"), len(g.get("threads", [])), g.get("utilization", 0), g.get("verdict"),
            g.get("verdict_reason", "")[:160], g.get("request_count", 0)))
    print("     THREAD_POOL_GROUPS at the end (group, connections, threads, active, standby, queue): %s"
          % json.dumps(truth_pool))
    judge_pool(q, "quiet", summary, groups)
    if stressed is None:
        check(not CI, "stress-ng installed (scripts/install-deps)")
    else:
        s_start, s_summary, s_groups, s_err, s_rc = stressed
        if check(s_rc == 0 and s_summary, "threadpool ran beside stress-ng (rc %s: %s)" % (s_rc, s_err.strip()[-300:])):
            judge_pool(q, "beside stress-ng --cpu 2", s_summary, s_groups)
    schema_verdict("threadpool")
    finish()


if __name__ == "__main__":
    main()
