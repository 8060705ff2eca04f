"""Real services for the integration tests, each a private instance on loopback (or a
unix socket) with its own configuration and data directory in a temp dir, stopped by
stop() whatever happened (nothing a test starts outlives it):

- MariaDB (mariadbd + mariadb-install-db, performance_schema with every wait/synch
  instrument timed) loaded by sysbench; map_to_ps() maps lockstat's futex words to
  performance_schema's instruments through mariadbd's memory (test_mariadb.py's
  docstring has the layouts).
- PostgreSQL (Debian's cluster binaries, initdb as user postgres, unix socket only)
  loaded by pgbench.
- redis-server (no persistence) loaded by redis-benchmark.
- A JVM workload compiled with javac (tests/workloads/*.java).

missing() names the programs a service needs that are not installed (scripts/install-deps
installs them); the caller skips, or under CI=true fails (harness.skip).
"""
import ctypes
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from harness import end_process, run

# --- common ------------------------------------------------------------------------------


def missing(*programs):
    """The programs (name, or absolute path) that are not installed."""
    return [p for p in programs if not (os.access(p, os.X_OK) if os.path.isabs(p) else
                                        shutil.which(p) or os.path.exists("/usr/sbin/" + p))]


def _die_with_parent():
    """preexec_fn: the child gets SIGKILL when the test process dies, even by SIGKILL
    (PR_SET_PDEATHSIG), so a server never outlives a test that was killed."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def as_user(user):
    """argv prefix that runs a program as `user` (exec, no intermediate process) with
    SIGKILL as its parent-death signal (set after the credentials change)."""
    return ["setpriv", "--reuid=" + user, "--regid=" + user, "--init-groups", "--pdeathsig", "SIGKILL"]


def free_port(lo, hi):
    """A loopback TCP port in [lo, hi) that nothing listens on now."""
    for p in range(lo, hi):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
                return p
            except OSError:
                continue
    raise RuntimeError("no free port in %d-%d" % (lo, hi - 1))


# --- MariaDB -------------------------------------------------------------------------------
MARIADBD = shutil.which("mariadbd") or "/usr/sbin/mariadbd"
MARIADB_PROGRAMS = ["mariadbd", "mariadb-install-db", "mariadb", "sysbench"]


class MariaDB:
    """A private mariadbd: datadir, socket, pid file and error log in `tmp` (a new temp
    dir by default), TCP on 127.0.0.1:port, performance_schema ON with every wait/synch
    instrument. The buffer pool is one mapping of 2*bp_mb, the first bp_mb read-write
    (buffer_pool())."""

    def __init__(self, port=3307, bp_mb=128, tmp=None, prefix="lockstat-mariadb-", extra=()):
        self.port, self.bp_mb, self.extra = port, bp_mb, list(extra)
        self.tmp = tmp or tempfile.mkdtemp(prefix=prefix)
        self.data = os.path.join(self.tmp, "data")
        self.sock = os.path.join(self.tmp, "mysqld.sock")
        self.server = None
        self.loads = []

    @property
    def pid(self):
        return int(open(os.path.join(self.tmp, "pid")).read())

    def sql(self, query, db=None):
        args = ["mariadb", "--no-defaults", "-S", self.sock, "-u", "root", "-N", "-B", "-e", query]
        if db:
            args[1:1] = ["-D", db]
        r = run(args, timeout=30)
        if r.returncode != 0:
            raise RuntimeError("mariadb: %s" % r.stderr.strip())
        return [line.split("\t") for line in r.stdout.splitlines()]

    def start(self):
        r = run(["mariadb-install-db", "--no-defaults", "--datadir=" + self.data, "--user=root",
                 "--auth-root-authentication-method=socket", "--skip-test-db"], timeout=120)
        if r.returncode != 0:
            raise RuntimeError("mariadb-install-db failed: %s" % r.stderr.strip()[-500:])
        self.server = subprocess.Popen(
            [MARIADBD, "--no-defaults", "--user=root", "--datadir=" + self.data, "--socket=" + self.sock,
             "--port=%d" % self.port, "--bind-address=127.0.0.1", "--pid-file=" + os.path.join(self.tmp, "pid"),
             "--log-error=" + os.path.join(self.tmp, "err.log"), "--skip-log-bin",
             "--innodb-buffer-pool-size=%dM" % self.bp_mb, "--innodb-buffer-pool-size-max=%dM" % (2 * self.bp_mb),
             "--max-connections=64",
             "--performance-schema=ON", "--performance-schema-instrument=wait/synch/%=ON",
             "--performance-schema-consumer-events-waits-current=ON"] + self.extra,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.server.poll() is not None:
                raise RuntimeError("mariadbd exited: %s" % open(os.path.join(self.tmp, "err.log")).read()[-800:])
            try:
                self.sql("SELECT 1")
                if os.path.exists(os.path.join(self.tmp, "pid")):
                    return
            except RuntimeError:
                pass
            time.sleep(0.3)
        raise RuntimeError("mariadbd did not come up in 60 s")

    def sysbench(self, cmd, secs=0, threads=16, tables=4, table_size=2000):
        """sysbench oltp_read_write `cmd` (prepare, run) against db sbtest; a Popen,
        stopped by stop() if still running."""
        args = ["sysbench", "oltp_read_write", "--db-driver=mysql", "--mysql-socket=" + self.sock,
                "--mysql-user=root", "--mysql-db=sbtest", "--tables=%d" % tables, "--table-size=%d" % table_size,
                "--threads=%d" % threads, "--time=%d" % secs, "--report-interval=0", cmd]
        p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=_die_with_parent)
        self.loads.append(p)
        return p

    def prepare(self):
        """Database sbtest with sysbench's tables."""
        self.sql("CREATE DATABASE sbtest")
        p = self.sysbench("prepare")
        out, err = p.communicate(timeout=120)
        if p.returncode != 0:
            raise RuntimeError("sysbench prepare failed: %s" % err.strip()[-300:])

    def ps_hot(self):
        """performance_schema's wait summary since its last truncate: {event: (count, ns)}."""
        rows = self.sql("SELECT EVENT_NAME, COUNT_STAR, SUM_TIMER_WAIT FROM performance_schema."
                        "events_waits_summary_global_by_event_name WHERE EVENT_NAME LIKE 'wait/synch/%' "
                        "AND COUNT_STAR > 0")
        # SUM_TIMER_WAIT is in picoseconds
        return {r[0]: (int(r[1]), int(r[2]) // 1000) for r in rows}

    def ps_truncate(self):
        self.sql("TRUNCATE TABLE performance_schema.events_waits_summary_global_by_event_name")

    def ps_instances(self):
        """performance_schema's instruments: {identity: name} over mutex_instances,
        rwlock_instances and cond_instances, and {identity: COUNT_STAR} since the truncate."""
        names = {}
        for table in ("mutex_instances", "rwlock_instances", "cond_instances"):
            for name, ident in self.sql("SELECT NAME, OBJECT_INSTANCE_BEGIN FROM performance_schema.%s" % table):
                names[int(ident)] = name
        counts = {int(i): int(c) for i, c in self.sql(
            "SELECT OBJECT_INSTANCE_BEGIN, COUNT_STAR FROM performance_schema.events_waits_summary_by_instance "
            "WHERE EVENT_NAME LIKE 'wait/synch/%'")}
        return names, counts

    def buffer_pool(self, pid=None):
        """InnoDB's buffer pool [lo, hi) in mariadbd: MariaDB 10.11 reserves
        innodb-buffer-pool-size-max of address space in one mapping and makes the first
        innodb-buffer-pool-size of it read-write, so the pool ends where an anonymous
        PROT_NONE mapping of at least (max - size) bytes begins right after a read-write
        one of at least size bytes (the kernel merges neighbouring anonymous mappings with
        the same protection, so either can be larger). Returns (pool or None, the anonymous
        mappings of 64 MB or more, for the failure message)."""
        size = self.bp_mb << 20
        prev, big = None, []
        for line in open("/proc/%d/maps" % (pid or self.pid)):
            f = line.split()
            lo, hi = (int(x, 16) for x in f[0].split("-"))
            anon = len(f) == 5
            if anon and hi - lo >= 64 << 20:
                big.append("%s %s" % (f[0], f[1]))
            if (anon and f[1] == "---p" and hi - lo >= size and prev and prev[2] == "rw-p"
                    and prev[1] == lo and prev[1] - prev[0] >= size):
                return (lo - size, lo), big
            prev = (lo, hi, f[1]) if anon else None
        return None, big

    def stop(self, remove=True):
        for p in self.loads:
            if p.poll() is None:
                p.kill()
            p.communicate()
        if self.server:
            end_process(self.server, signal.SIGTERM, 60)
        if remove:
            shutil.rmtree(self.tmp, ignore_errors=True)


# Where lockstat's futex word sits in each instrumented object, and where that object's
# pointer to its performance_schema instance is (test_mariadb.py's docstring): (layout,
# futex word offsets, PSI pointer offset). The layout of a performance_schema name is
# layout_of(name).
PSI_LAYOUTS = [
    ("mutex", (0,), 40),
    ("cond", (40, 44, 16, 20, 32, 36), 48),
    ("rwlock", (0, 4, 8, 12), 56),
    ("prlock", (0, 80, 84), 104),
    ("innodb-rw", (8, 12), 0),
]
COND_WAIT_WORDS = (40, 44)  # __g_signals: where pthread_cond_wait sleeps


def layout_of(name):
    """wait/synch/<type>/<component>/<name> -> the object layout it is instrumented in."""
    f = name.split("/")
    typ, comp = (f[2], f[3]) if len(f) > 3 else ("", "")
    if typ in ("rwlock", "sxlock") and comp == "innodb":
        return "innodb-rw"
    return typ


# --uprobes rows are pthread_mutex_t addresses: a mysql_mutex_t, or the mutex at the
# start of a rw_pr_lock_t (mysql_prlock_t, PSI pointer at +104), which MariaDB names
# prlock/* or, for MDL_lock::rwlock, rwlock/sql/* (its P_S wait is the whole prlock
# acquisition, lockstat's only the inner mutex's)
PTHREAD_LAYOUTS = [("mutex", (0,), 40), ("prlock", (0,), 104)]


def pthread_layout_of(name):
    f = name.split("/")
    return "prlock" if len(f) > 3 and (f[2] == "prlock" or (f[2] == "rwlock" and f[3] != "innodb")) else layout_of(name)


def map_to_ps(pid, rows, names, layouts=PSI_LAYOUTS, layout_of=layout_of):
    """Maps each lockstat row (by its futex word, or with PTHREAD_LAYOUTS its
    pthread_mutex_t) to a performance_schema instance: {addr: (name, offset of the word
    in the object, identity)} for rows that map through exactly one instance, and the
    rows that map ambiguously."""
    fd = os.open("/proc/%d/mem" % pid, os.O_RDONLY)

    def qword(addr):
        try:
            b = os.pread(fd, 8, addr)
        except (OSError, OverflowError):  # unmapped, or not a user address
            return None
        return int.from_bytes(b, "little") if len(b) == 8 else None

    mapped, ambiguous = {}, {}
    try:
        for r in rows:
            addr = int(r["addr"], 16)
            found = set()
            for layout, offsets, psi_at in layouts:
                for off in offsets:
                    psi = qword(addr - off + psi_at)
                    if not psi or psi < 1 << 16 or psi >= 1 << 47:
                        continue
                    for i in range(8):  # the instance's identity (at +16 in 10.11)
                        ident = qword(psi + 8 * i)
                        if ident in names and layout_of(names[ident]) == layout:
                            found.add((names[ident], off, ident))
            if len(found) == 1:
                mapped[r["addr"]] = found.pop()
            elif found:
                ambiguous[r["addr"]] = sorted(found)
    finally:
        os.close(fd)
    return mapped, ambiguous


# --- PostgreSQL ----------------------------------------------------------------------------


def pg_bindir():
    """Debian's newest PostgreSQL server binaries (/usr/lib/postgresql/N/bin), or None."""
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    return os.path.dirname(bins[-1]) if bins else None


def as_pg(args, **kw):
    return subprocess.run(["runuser", "-u", "postgres", "--"] + args, capture_output=True, text=True, **kw)


class Postgres:
    """A cluster of Debian's PostgreSQL: initdb (as postgres, trust) in a new temp dir,
    the postmaster a child of the test (as postgres, SIGKILL when the test dies), unix
    socket in that dir only (no TCP), database `bench` initialised by pgbench -i -s
    `scale`. `settings` are extra -c options. check(cond, msg) reports each setup step;
    `started` says whether the server answers."""

    def __init__(self, bindir, check, port=54329, scale=1, settings=(), prefix="bpfdiag-pg-"):
        self.bin, self.port = bindir, port
        self.dir = tempfile.mkdtemp(prefix=prefix)
        os.chmod(self.dir, 0o755)
        shutil.chown(self.dir, "postgres")
        self.data, self.sock = os.path.join(self.dir, "data"), self.dir
        self.loads, self.server, self.started = [], None, False
        r = as_pg([os.path.join(bindir, "initdb"), "-D", self.data, "-A", "trust"], timeout=120)
        if not check(r.returncode == 0, "initdb (%s)" % r.stderr.strip()[-200:]):
            return
        try:
            self._start(check, scale, settings)
        except BaseException:  # a timeout, an interrupt: nothing outlives the failed setup
            self.stop()
            raise

    def _start(self, check, scale, settings):
        bindir, port = self.bin, self.port
        log = open(os.path.join(self.dir, "log"), "w")
        shutil.chown(log.name, "postgres")
        args = ["-p", str(port), "-k", self.sock, "-c", "listen_addresses=", "-c", "max_connections=40",
                "-c", "fsync=on"]
        for setting in settings:
            args += ["-c", setting]
        self.server = subprocess.Popen(as_user("postgres") + [os.path.join(bindir, "postgres"), "-D", self.data] + args,
                                       stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.time() + 60
        while time.time() < deadline and self.server.poll() is None and not self.started:
            self.started = as_pg([os.path.join(bindir, "pg_isready"), "-q", "-h", self.sock, "-p", str(port)],
                                 timeout=30).returncode == 0
            if not self.started:
                time.sleep(0.2)
        if not check(self.started, "postgres started%s" % (
                "" if self.started else " (%s)" % open(os.path.join(self.dir, "log")).read()[-300:])):
            return
        as_pg([os.path.join(bindir, "createdb"), "-h", self.sock, "-p", str(port), "bench"], timeout=60)
        r = as_pg([os.path.join(bindir, "pgbench"), "-h", self.sock, "-p", str(port), "-i", "-s", str(scale),
                   "bench"], timeout=120)
        check(r.returncode == 0, "pgbench -i (%s)" % r.stderr.strip()[-200:])

    @property
    def pid(self):
        """The postmaster's PID."""
        return self.server.pid

    def psql(self, sql, timeout=60):
        return as_pg([os.path.join(self.bin, "psql"), "-h", self.sock, "-p", str(self.port), "-At", "-c", sql,
                      "bench"], timeout=timeout).stdout

    def pgbench(self, args):
        """pgbench ARGS against `bench` (a Popen, stopped by stop() if still running)."""
        p = subprocess.Popen(as_user("postgres") + [os.path.join(self.bin, "pgbench"), "-h", self.sock,
                                                    "-p", str(self.port)] + list(args) + ["bench"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.loads.append(p)
        return p

    def stop(self):
        for p in self.loads:
            if p.poll() is None:
                p.kill()
            p.communicate()
        if self.server:  # SIGQUIT: immediate shutdown (pg_ctl -m immediate)
            end_process(self.server, signal.SIGQUIT, 60)
        shutil.rmtree(self.dir, ignore_errors=True)


# --- redis ---------------------------------------------------------------------------------
REDIS_PROGRAMS = ["redis-server", "redis-benchmark", "redis-cli"]


class Redis:
    """A private redis-server on 127.0.0.1:port: no persistence, its directory and log
    in a new temp dir, `hz` background ticks per second."""

    def __init__(self, port=6390, hz=100, prefix="bpfdiag-redis-"):
        self.port = port
        self.tmp = tempfile.mkdtemp(prefix=prefix)
        self.conf = os.path.join(self.tmp, "redis.conf")
        with open(self.conf, "w") as f:
            f.write("port %d\nbind 127.0.0.1\nprotected-mode yes\ndaemonize no\nsave \"\"\nappendonly no\n"
                    "dir %s\nlogfile %s\nhz %d\n" % (port, self.tmp, os.path.join(self.tmp, "redis.log"), hz))
        self.server = None
        self.loads = []

    @property
    def pid(self):
        return self.server.pid

    def start(self):
        self.server = subprocess.Popen(["redis-server", self.conf], stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        for _ in range(100):
            if self.cli("ping").strip() == "PONG":
                return
            if self.server.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError("redis-server did not answer on port %d" % self.port)

    def cli(self, *args):
        return run(["redis-cli", "-p", str(self.port)] + list(args), timeout=10).stdout

    def info(self, section=""):
        """INFO [section] as {key: value}."""
        out = {}
        for line in self.cli("info", *([section] if section else [])).splitlines():
            k, sep, v = line.strip().partition(":")
            if sep and not k.startswith("#"):
                out[k] = v
        return out

    def benchmark(self, args):
        """redis-benchmark -p PORT ARGS (a Popen, stopped by stop() if still running)."""
        p = subprocess.Popen(["redis-benchmark", "-p", str(self.port)] + list(args), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, preexec_fn=_die_with_parent)
        self.loads.append(p)
        return p

    def stop(self):
        for p in self.loads:
            if p.poll() is None:
                p.kill()
            p.communicate()
        if self.server and self.server.poll() is None:
            end_process(self.server, signal.SIGTERM, 10)
        shutil.rmtree(self.tmp, ignore_errors=True)


# --- JVM workloads -------------------------------------------------------------------------


def javac(src, d):
    """Compiles tests/workloads/X.java into directory d (raises on failure)."""
    subprocess.run(["javac", "-d", d, src], check=True, capture_output=True, timeout=120)


def kill_jvm(jvm):
    """Stops a JVM started by a test and removes what its attach mechanism left in /tmp."""
    if jvm.poll() is None:
        jvm.kill()
    jvm.wait()
    for f in ("/tmp/perf-%d.map", "/tmp/.java_pid%d", "/tmp/.attach_pid%d"):
        if os.path.lexists(f % jvm.pid):
            os.unlink(f % jvm.pid)


# pg_stat_activity sampled every 50 ms (%d samples) for pgbench's client backends:
# "wait_event_type:wait_event count" lines, CPU for no wait
PG_WAIT_SAMPLER = """
CREATE TEMP TABLE samp(w text);
DO $$ BEGIN
  FOR i IN 1..%d LOOP
    PERFORM pg_stat_clear_snapshot();
    INSERT INTO samp SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') FROM pg_stat_activity
      WHERE application_name = 'pgbench' AND backend_type = 'client backend';
    PERFORM pg_sleep(0.05);
  END LOOP;
END $$;
SELECT w || ' ' || count(*) FROM samp GROUP BY w;
"""
