"""lockstat -K against an independent pairing of the same tracepoints, shared by
tests/integration/test_lockstat.py and bench/lockstat_kernel.py.

Ground truth: perf record of lock:contention_begin/end (near-zero in-window cost),
paired here per task (idle: per CPU), an end closing the innermost open wait on its
address. lockstat and perf take turns on the same load (attached at once, each one's
waits contain the other's probe, and not alike)."""
import os
import re
import subprocess

from harness import ndjson, run, start, with_private_tracefs, workload

LCB = {"SPIN": 1, "READ": 2, "WRITE": 4, "RT": 8, "PERCPU": 16, "MUTEX": 32}
PERF_LINE = re.compile(r"^\s*(.*?)\s+(\d+)\s+\[(\d+)\]\s+(\d+)\.(\d+):\s+lock:contention_(begin|end):"
                       r"\s+(0x[0-9a-f]+)\s+\((\w+)=([^)]*)\)")


def perf_pairing(text):
    """Spinlock waits (flags == SPIN) from `perf script` text: {addr (int): [wait ns, ...]}."""
    open_ = {}
    waits = {}
    for line in text.splitlines():
        m = PERF_LINE.match(line)
        if not m:
            continue
        comm, tid, cpu, sec, frac, ev, addr, _, val = m.groups()
        if comm == "perf" and tid != "0":
            continue  # the recorder itself (lockstat never traces itself either)
        ts = int(sec) * 10**9 + int(frac.ljust(9, "0")[:9])
        st = open_.setdefault(int(tid) if tid != "0" else -1 - int(cpu), [])
        if ev == "begin":
            flags = sum(LCB.get(f, 0) for f in val.split("|"))
            if st and st[-1][0] == addr and flags & 32 and st[-1][2] & 32:
                continue  # a mutex begins again after each sleep
            st.append((addr, ts, flags))
            continue
        for i in range(len(st) - 1, -1, -1):
            if st[i][0] == addr:
                if st[i][2] == 1:
                    waits.setdefault(int(addr, 16), []).append(ts - st[i][1])
                del st[i:]
                break
    return waits


def quantile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0


def perf_window(secs, tmp):
    """perf records `secs` s alone (no lockstat attached), then its events are paired."""
    def in_tracefs(cmd):  # perf needs tracefs (event formats); mounted privately
        return subprocess.run(with_private_tracefs(["sh", "-c", cmd]), capture_output=True, text=True,
                              timeout=secs + 120)

    in_tracefs("perf record -q -a -e lock:contention_begin,lock:contention_end -o %s/k.data -- sleep %d "
               ">/dev/null 2>&1" % (tmp, secs))
    r = in_tracefs("perf script --ns -i %s/k.data -F comm,tid,cpu,time,event,trace 2>/dev/null" % tmp)
    os.unlink(os.path.join(tmp, "k.data")) if os.path.exists(os.path.join(tmp, "k.data")) else None
    return perf_pairing(r.stdout)



def start_load(secs=120):
    """Futex wake storms (run-queue and futex-bucket spinlocks) plus mmap_lock and
    page-table work for up to `secs` s (longer than the caller needs: a load that ran
    out before test_lockstat's last window left perf 5 waits to pair); returns the
    processes (stop_load ends them)."""
    crowd = start([workload("mutex_crowd"), "--threads", "64", "--hold-us", "5", "--duration-ms", str(secs * 1000)])
    storm = start([workload("mmap_storm"), "--threads", "2", "--duration-ms", str(secs * 1000)])
    crowd.stderr.readline()
    return [crowd, storm]


def stop_load(procs):
    for p in procs:
        p.kill()
        p.wait()


def lockstat_window(lockstat, secs):
    """lockstat -K for `secs` s: (spinlock records, data quality)."""
    r = run([lockstat, "-K", "-j", "-n", "0", "-d", str(secs)], timeout=secs + 120)
    recs = ndjson(r.stdout, "lockstat")
    spins = [x for x in recs if x.get("type") == "lockstat.lock" and x.get("kind") == "spinlock"]
    dq = next((x["data_quality"] for x in recs if x.get("type") == "lockstat.lock"), {})
    return spins, dq


def compare_turn(spins, waits, label, min_waits=1000, max_count_ratio=2):
    """Spinlocks with >= min_waits in both windows of one turn and counts within
    max_count_ratio (else the load differed too much between the windows): [(name, n_ls, n_perf,
    {"p50": (lockstat, perf), "p90": ...})], and the names of the others with >= 300."""
    rows, out, skipped = {}, [], []
    for x in spins:
        rows.setdefault(int(x["addr"], 16), []).append(x)
    for a, xs in rows.items():
        got_n = sum(x["wait_count"] for x in xs)
        ws = waits.get(a, [])
        big = max(xs, key=lambda x: x["wait_count"])
        name = "%s (%s)" % (big.get("symbol") or hex(a), label)
        if (got_n < min_waits or len(ws) < min_waits or big["wait_count"] < 0.9 * got_n
                or not 1 / max_count_ratio <= got_n / len(ws) <= max_count_ratio):
            if got_n >= 300 and len(ws) >= 300:
                skipped.append("%s %d vs %d waits" % (name, got_n, len(ws)))
            continue
        out.append((name, got_n, len(ws), {s: (big["wait_%s_ns" % s], quantile(ws, q))
                                           for s, q in (("p50", 0.5), ("p90", 0.9))}))
    return out, skipped
