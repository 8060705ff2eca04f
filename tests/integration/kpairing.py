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
PERF_LOST = re.compile(r"PERF_RECORD_LOST lost (\d+)")


class PerfWaits(dict):
    """Spinlock waits paired from perf's events, {addr (int): [wait ns, ...]}; .lost:
    events perf's ring buffers dropped (its reader was not scheduled in time)."""
    lost = 0


def perf_pairing(text):
    """Spinlock waits (flags == SPIN) from `perf script --show-lost-events` text. A lost
    chunk may hold any open wait's end, so every wait open at a loss is dropped (an end
    after it must not close a begin from before it)."""
    open_ = {}
    waits = PerfWaits()
    for line in text.splitlines():
        m = PERF_LINE.match(line)
        if not m:
            lost = PERF_LOST.search(line)
            if lost:
                waits.lost += int(lost.group(1))
                open_.clear()
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
    """perf records `secs` s alone (no lockstat attached), then its events are paired
    (PerfWaits). 8 MiB of ring buffer per CPU (perf's default is 512 KiB): this load
    writes up to ~4.5 MB/s of these events, so perf's reader may be descheduled (or its
    vCPU stolen) for seconds without losing any; losses are counted, not hidden."""
    def in_tracefs(cmd):  # perf needs tracefs (event formats); mounted privately
        return subprocess.run(with_private_tracefs(["sh", "-c", cmd]), capture_output=True, text=True,
                              timeout=secs + 120)

    in_tracefs("perf record -q -m 2048 -a -e lock:contention_begin,lock:contention_end -o %s/k.data -- sleep %d "
               ">/dev/null 2>&1" % (tmp, secs))
    r = in_tracefs("perf script --ns --show-lost-events -i %s/k.data -F comm,tid,cpu,time,event,trace 2>/dev/null"
                   % tmp)
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


def compare_turn(spins, waits, label, min_waits=1000, max_count_ratio=2, min_perf_waits=None, rate_scale=1.0,
                 max_share_ratio=None):
    """Spinlocks with >= min_waits in lockstat's window of one turn and >= min_perf_waits
    (default: min_waits) in perf's, and counts within max_count_ratio (else the load
    differed too much between the windows). The count ratio (lockstat's / perf's) is
    multiplied by rate_scale: perf's window's non-steal time over lockstat's makes it a
    ratio of rates per second of non-steal time. max_share_ratio: each lock's share of
    its window's spin waits must also be within it (the load's mix).
    Returns [(name, n_ls, n_perf, {"p50": (lockstat, perf), "p90": ..., "p20_p80": (perf
    p20, perf p80), "mean": (lockstat, perf) without each side's longest wait (one
    stalled vCPU's), "rate": rate ratio, "share": share ratio})], and the others with
    >= 300 waits on both sides as text."""
    min_perf_waits = min_waits if min_perf_waits is None else min_perf_waits
    rows, out, skipped = {}, [], []
    for x in spins:
        rows.setdefault(int(x["addr"], 16), []).append(x)
    n_ls_all = sum(x["wait_count"] for x in spins)
    n_pf_all = sum(len(ws) for ws in waits.values())
    for a, xs in rows.items():
        got_n = sum(x["wait_count"] for x in xs)
        ws = waits.get(a, [])
        big = max(xs, key=lambda x: x["wait_count"])
        name = "%s (%s)" % (big.get("symbol") or hex(a), label)
        rate = got_n / max(len(ws), 1) * rate_scale
        share = got_n / max(len(ws), 1) * n_pf_all / max(n_ls_all, 1)
        if (got_n < min_waits or len(ws) < min_perf_waits or big["wait_count"] < 0.9 * got_n
                or not 1 / max_count_ratio <= rate <= max_count_ratio
                or (max_share_ratio and not 1 / max_share_ratio <= share <= max_share_ratio)):
            if got_n >= 300 and len(ws) >= 300:
                skipped.append("%s %d vs %d waits (rate %.2fx, share %.2fx)" % (name, got_n, len(ws), rate, share))
            continue
        q = {s: (big["wait_%s_ns" % s], quantile(ws, p)) for s, p in (("p50", 0.5), ("p90", 0.9))}
        q["p20_p80"] = (quantile(ws, 0.2), quantile(ws, 0.8))
        q["mean"] = ((sum(x["wait_total_ns"] - x["wait_max_ns"] for x in xs)) / max(got_n - len(xs), 1),
                     (sum(ws) - max(ws)) / max(len(ws) - 1, 1))
        q["rate"], q["share"] = rate, share
        out.append((name, got_n, len(ws), q))
    return out, skipped
