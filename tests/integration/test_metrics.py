#!/usr/bin/env python3
"""Continuous mode's metrics (issue 24): --prometheus FILE and --listen ADDR:PORT.

1. Ground truth: naptime -p <sleepers> --summary -j -i 1 --prometheus F --listen P while
   the sleepers workload issues its sleeps (it reports each one's length itself):
   - every scrape (urllib, while it runs) and the file pass `promtool check metrics`
     (Prometheus's own parser and linter);
   - every counter and histogram series is monotonic between the scrapes;
   - bpfdiag_sleeps_total and bpfdiag_sleep_seconds_total equal the sleeps the workload
     issued (count exact; time within 1% + 1 ms per sleep), and equal the tool's own
     JSON for the same run (the naptime.process records of every report: exact count,
     time within 1 us);
   - the final file says bpfdiag_up 0, the port is closed after exit, no temp file.
2. Bounded: while a storm of short-lived threads with distinct names (STORM_RATE a
   second, each named anew, each sleeping 2 ms) runs for STORM_S seconds, naptime and
   offcputime (system-wide) run with -i 1 --listen and are scraped every second:
   promtool accepts the scrapes, each family holds at most 100 series + "other",
   counter families' sums never go down, naptime folded label sets past the cap
   (bpfdiag_metric_series_folded_total > 0), and RSS at the end is within 15% + 8 MB of
   RSS after the warm-up. Then profile, runqlen, lockstat (system-wide), threadpool and
   pmheld (-p fork_storm) for 4 s: promtool, bounded families, monotonic counters.
3. Bad input: a FILE in a missing directory or under a regular file, FILE a symlink (its
   target untouched), a directory others can write (not sticky), a host name, port 0,
   a port in use (exit 1), an address no interface has (exit 1): one line each, exit 2
   unless said, nothing left loaded.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (check, end_process, finish, need, require_built, require_root, run, start, stop,  # noqa: E402
                     tool, usage_error, wait_attached, workload)
from harness_bpf import leftover_bpf_programs  # noqa: E402

CAP = 100          # series per family (common/metrics.h kMaxSeries), "other" not counted
STORM_RATE = 40    # new process names a second
STORM_S = 10


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text):
    """Exposition text -> ({(name, labels tuple): value}, {family: type})."""
    series, types = {}, {}
    for l in text.splitlines():
        if l.startswith("# TYPE "):
            _, _, fam, typ = l.split(" ", 3)
            types[fam] = typ
            continue
        if not l or l.startswith("#"):
            continue
        m = LINE.match(l)
        if not m:
            check(False, "exposition line parses: %r" % l)
            continue
        labels = tuple(sorted(LABEL.findall(m.group(2) or "")))
        series[(m.group(1), labels)] = float(m.group(3))
    return series, types


def family_of(name, types):
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and types.get(name[: -len(suffix)]) == "histogram":
            return name[: -len(suffix)]
    return name


def cumulative(name, types):
    return types.get(family_of(name, types)) in ("counter", "histogram")


def promtool_ok(promtool, text, what):
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    return check(r.returncode == 0, "promtool check metrics accepts %s (rc %d %s)" % (
        what, r.returncode, (r.stdout + r.stderr).strip()[:300]))


def scrape(port, timeout=5):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=timeout) as r:
        return r.status, r.headers.get("Content-Type", ""), r.read().decode()


def total(series, name, **want):
    return sum(v for (n, labels), v in series.items()
               if n == name and all(dict(labels).get(k) == x for k, x in want.items()))


def read_json_line(stream, timeout, what):
    """One line from a text pipe read with a deadline (a thread: readline blocks)."""
    out = []
    t = threading.Thread(target=lambda: out.append(stream.readline()), daemon=True)
    t.start()
    t.join(timeout)
    if not out or not out[0]:
        raise RuntimeError("no %s within %.0f s" % (what, timeout))
    return json.loads(out[0])


# --- 1. ground truth -------------------------------------------------------------------
def ground_truth(promtool):
    d = tempfile.mkdtemp(prefix="metrics_")
    prom = os.path.join(d, "naptime.prom")
    port = free_port()
    wl = subprocess.Popen([workload("sleepers")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        pid = read_json_line(wl.stdout, 10, "sleepers ready")["pid"]
        nap = start([tool("naptime"), "-p", str(pid), "--summary", "-j", "-i", "1", "--prometheus", prom,
                     "--listen", "127.0.0.1:%d" % port])
        wait_attached(nap, timeout=60)
        scrapes = []
        status, ctype, text = scrape(port)
        check(status == 200 and ctype.startswith("text/plain; version=0.0.4"),
              "GET /metrics: 200, text/plain; version=0.0.4 (got %s %r)" % (status, ctype))
        scrapes.append(text)
        wl.stdin.write("go\n")
        wl.stdin.flush()
        time.sleep(0.7)  # inside the workload's sleep(1): a scrape while it sleeps
        scrapes.append(scrape(port)[2])
        truth = read_json_line(wl.stdout, 30, "the sleepers' ground truth")
        # -p: the target's exit ends the run with the final report (and the last write)
        out, err, rc = stop(nap, sig=None, timeout=30)
    finally:
        end_process(wl, signal.SIGKILL)
    check(rc == 0, "naptime with --prometheus/--listen exits 0 (rc %s, %r)" % (rc, err.strip()[-300:]))
    for i, t in enumerate(scrapes):
        promtool_ok(promtool, t, "scrape %d of naptime" % (i + 1))
    text = open(prom).read() if os.path.exists(prom) else ""
    promtool_ok(promtool, text, "naptime's textfile")
    # monotonic between the scrapes and the last write
    parsed = [parse(t) for t in scrapes + [text]]
    bad = []
    for (a, ta), (b, _) in zip(parsed, parsed[1:]):
        for k, v in a.items():
            if cumulative(k[0], ta) and k in b and b[k] < v:
                bad.append((k, v, b[k]))
    check(not bad, "counters and histograms never go down between scrapes (%s)" % bad[:3])
    check(total(parsed[0][0], "bpfdiag_up", tool="naptime") == 1 and
          total(parsed[0][0], "bpfdiag_build_info", tool="naptime") == 1,
          "bpfdiag_up 1 and bpfdiag_build_info while running")
    final, _ = parse(text)
    check(total(final, "bpfdiag_up", tool="naptime") == 0, "the file's last write says bpfdiag_up 0")
    # ground truth
    n_truth = len(truth["sleeps"])
    slept_truth = sum(s["slept_ns"] for s in truth["sleeps"]) / 1e9
    n_metric = total(final, "bpfdiag_sleeps_total")
    slept_metric = total(final, "bpfdiag_sleep_seconds_total")
    check(n_metric == n_truth, "bpfdiag_sleeps_total %d == sleeps issued %d" % (n_metric, n_truth))
    tol = 0.01 * slept_truth + 0.001 * n_truth
    check(abs(slept_metric - slept_truth) <= tol, "bpfdiag_sleep_seconds_total %.6f == slept %.6f (+-%.4f)" % (
        slept_metric, slept_truth, tol))
    check(total(final, "bpfdiag_sleep_duration_seconds_count") == n_truth,
          "the sleep histogram counts every sleep (%d)" % total(final, "bpfdiag_sleep_duration_seconds_count"))
    # the tool's own JSON over the same run
    recs = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    procs = [r for r in recs if r.get("type") == "naptime.process"]
    n_json = sum(r["sleep_count"] for r in procs)
    ns_json = sum(r["sleep_total_ns"] for r in procs)
    reports = sum(1 for r in recs if r.get("type") == "naptime.summary")
    check(n_json == n_metric, "JSON sleep_count %d == metrics %d" % (n_json, n_metric))
    check(abs(ns_json / 1e9 - slept_metric) < 1e-6, "JSON sleep_total_ns %.9f s == metrics %.9f s" % (
        ns_json / 1e9, slept_metric))
    check(total(final, "bpfdiag_reports_total") == reports, "bpfdiag_reports_total %d == reports printed %d" % (
        total(final, "bpfdiag_reports_total"), reports))
    by_comm_json = {}
    for r in procs:
        by_comm_json[r["comm"]] = by_comm_json.get(r["comm"], 0) + r["sleep_count"]
    check(all(total(final, "bpfdiag_sleeps_total", comm=c) == n for c, n in by_comm_json.items()),
          "per comm, metrics == JSON (%s)" % by_comm_json)
    # nothing left behind
    left = [f for f in os.listdir(d) if f != "naptime.prom"]
    check(not left, "no temporary file left next to FILE (%s)" % left)
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        closed = False
    except OSError:
        closed = True
    check(closed, "the port is closed once the tool exits")
    shutil.rmtree(d, ignore_errors=True)


# --- 2. bounded under churn ----------------------------------------------------------------
STORM = r"""
import os, sys, threading, time
rate, secs = int(sys.argv[1]), float(sys.argv[2])
def one(i):
    with open("/proc/self/task/%d/comm" % threading.get_native_id(), "w") as f:
        f.write("mstorm%d" % i)
    time.sleep(0.002)
end = time.monotonic() + secs
i = 0
print("ready", flush=True)
while time.monotonic() < end:
    t = threading.Thread(target=one, args=(i,))
    t.start()
    t.join()
    i += 1
    time.sleep(max(0.0, 1.0 / rate - 0.003))
print(i, flush=True)
"""


def rss_kb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            return int(re.search(r"^VmRSS:\s+(\d+)", f.read(), re.M).group(1))
    except (OSError, AttributeError):
        return None


def run_scraped(promtool, specs, seconds, during=None):
    """Starts each tool of `specs` ({name: extra args}) with -i 1 --listen, waits until
    each answers, runs `during` (a callable returning a Popen, or None) and scrapes every
    tool about once a second for `seconds`; returns {name: tool state} once all ended."""
    tools = {}
    for name, extra in specs.items():
        port = free_port()
        err = tempfile.TemporaryFile(mode="w+")  # not a pipe: nothing blocks a long run
        p = subprocess.Popen([tool(name), "-i", "1", "--listen", "127.0.0.1:%d" % port] + extra,
                             stdout=subprocess.DEVNULL, stderr=err, text=True)
        tools[name] = {"proc": p, "port": port, "scrapes": [], "rss": [], "err": err}
    extra_proc = None
    try:
        for name, t in tools.items():  # attached: the endpoint answers with the start snapshot
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and t["proc"].poll() is None:
                try:
                    if "bpfdiag_up" in scrape(t["port"], timeout=2)[2]:
                        break
                except OSError:
                    pass
                time.sleep(0.2)
            check(t["proc"].poll() is None, "%s runs with --listen (rc %s)" % (name, t["proc"].poll()))
        extra_proc = during() if during else None
        t_end = time.monotonic() + seconds
        while time.monotonic() < t_end:
            for name, t in tools.items():
                if t["proc"].poll() is not None:
                    continue
                try:
                    t["scrapes"].append(scrape(t["port"])[2])
                    t["rss"].append(rss_kb(t["proc"].pid))
                except OSError as e:
                    check(False, "%s answers a scrape (%s)" % (name, e))
            time.sleep(1.0)
    finally:
        for t in tools.values():
            end_process(t["proc"])
    for name, t in tools.items():
        t["err"].seek(0)
        err = t["err"].read()
        check(t["proc"].returncode == 0, "%s exits 0 (rc %s, %r)" % (name, t["proc"].returncode, err.strip()[-300:]))
        sc = t["scrapes"]
        check(len(sc) >= 2, "%s: %d scrapes" % (name, len(sc)))
        if not sc:
            continue
        promtool_ok(promtool, sc[len(sc) // 2], "%s's scrape mid-run" % name)
        promtool_ok(promtool, sc[-1], "%s's last scrape" % name)
        parsed = [parse(x) for x in sc]
        worst, drops = 0, []
        for i, (s, types) in enumerate(parsed):
            fams = {}
            for (n, labels) in s:
                if n.endswith("_bucket"):
                    continue
                fams.setdefault(family_of(n, types), set()).add(labels)
            worst = max([worst] + [len(v) for v in fams.values()])
            if i:
                prev, _ = parsed[i - 1]
                for fam, typ in types.items():
                    if typ == "counter" and total(s, fam) + 1e-9 < total(prev, fam):
                        drops.append((fam, total(prev, fam), total(s, fam)))
        check(worst <= CAP + 1, "%s: every family holds at most %d series + other (most: %d)" % (name, CAP, worst))
        check(not drops, "%s: counter families' sums never go down (%s)" % (name, drops[:2]))
        t["parsed"] = parsed
    return tools, extra_proc


def bounded(promtool):
    """naptime and offcputime system-wide under a storm of distinct process names."""
    def storm():
        p = subprocess.Popen([sys.executable, "-c", STORM, str(STORM_RATE), str(STORM_S)],
                             stdout=subprocess.PIPE, text=True)
        p.stdout.readline()
        return p
    tools, st = run_scraped(promtool, {"naptime": ["--summary"], "offcputime": []}, STORM_S + 1.5, storm)
    made = int(st.stdout.readline() or 0) if st else 0
    if st:
        end_process(st, signal.SIGKILL)
    check(made > 2 * CAP, "the storm made %d distinct process names (> %d)" % (made, 2 * CAP))
    for name, t in tools.items():
        rss = [r for r in t["rss"] if r]
        if len(rss) >= 6:
            warm, last = max(rss[2:4]), rss[-1]
            check(last <= warm * 1.15 + 8192, "%s: RSS %d kB at the end vs %d kB after warm-up" % (name, last, warm))
    nap = tools["naptime"].get("parsed")
    if nap:
        last = nap[-1][0]
        names = {dict(l).get("comm") for (n, l) in last if n == "bpfdiag_sleeps_total"}
        check(len(names) <= CAP + 1 and "other" in names,
              "naptime: %d comm series incl. other for %d names" % (len(names), made))
        check(total(last, "bpfdiag_metric_series_folded_total", metric="bpfdiag_sleeps_total") > 0,
              "naptime: label sets past the cap are counted (bpfdiag_metric_series_folded_total)")


def every_tool(promtool):
    """The other tools' output: promtool, bounded families, monotonic counters."""
    pool = start([workload("fork_storm"), "--steady", "4", "--threads", "10"])
    try:
        pid = json.loads(pool.stdout.readline())["pid"]
        tools, _ = run_scraped(promtool, {"profile": [], "runqlen": [], "lockstat": [],
                                          "threadpool": ["-p", str(pid)], "pmheld": ["-p", str(pid)]}, 4)
    finally:
        end_process(pool, signal.SIGKILL)
    rq = tools["runqlen"].get("parsed")
    if rq:
        check(total(rq[-1][0], "bpfdiag_runqueue_length_count") > 0, "runqlen: the histogram has samples")
    tp = tools["threadpool"].get("parsed")
    if tp:
        check(total(tp[-1][0], "bpfdiag_pool_thread_seconds_total") > 0, "threadpool: thread time by state")


# --- 3. bad input --------------------------------------------------------------------------
def bad_input():
    nap = tool("naptime")
    d = tempfile.mkdtemp(prefix="metrics_bad_")
    usage_error([nap, "-d", "1", "--prometheus", "/nonexistent-dir/x.prom"])
    usage_error([nap, "-d", "1", "--prometheus", "/etc/passwd/x.prom"])
    usage_error([nap, "-d", "1", "--prometheus", d + "/"])
    victim = os.path.join(d, "victim")
    with open(victim, "w") as f:
        f.write("keep")
    os.symlink(victim, os.path.join(d, "link.prom"))
    usage_error([nap, "-d", "1", "--prometheus", os.path.join(d, "link.prom")])
    check(open(victim).read() == "keep", "a symlink at FILE: its target is untouched")
    open_dir = os.path.join(d, "open")
    os.mkdir(open_dir)
    os.chmod(open_dir, 0o777)
    usage_error([nap, "-d", "1", "--prometheus", os.path.join(open_dir, "x.prom")])
    check(os.listdir(open_dir) == [], "nothing written in a directory others can write")
    usage_error([nap, "-d", "1", "--listen", "example.com:9464"])
    usage_error([nap, "-d", "1", "--listen", "127.0.0.1:0"])
    usage_error([nap, "-d", "1", "--listen", "::1:9464"])
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    r = run([nap, "-d", "5", "--listen", "127.0.0.1:%d" % port], timeout=30)
    check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "in use" in r.stderr,
          "a port in use: exit 1, one line (rc %d, %r)" % (r.returncode, r.stderr.strip()))
    busy.close()
    r = run([nap, "-d", "5", "--listen", "192.0.2.1:9464"], timeout=30)
    check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1,
          "an address no interface has: exit 1, one line (rc %d, %r)" % (r.returncode, r.stderr.strip()))
    left = leftover_bpf_programs()
    check(not left, "nothing left loaded after the refused runs (%s)" % left)
    shutil.rmtree(d, ignore_errors=True)


def main():
    require_root()
    names = ["naptime", "offcputime", "profile", "runqlen", "lockstat", "threadpool", "pmheld"]
    require_built(*[tool(n) for n in names], workload("sleepers"), workload("fork_storm"))
    promtool = need("promtool", "prometheus")
    bad_input()
    ground_truth(promtool)
    every_tool(promtool)
    bounded(promtool)
    finish()


if __name__ == "__main__":
    main()
