#!/usr/bin/env python3
"""threadpool on a real JVM pool: tests/workloads/JvmPool.java (compiled here with
javac) is an HTTP server whose handlers run on Executors.newFixedThreadPool(8)
("pool-1-thread-N"), each burning 200 us of CPU, then Thread.sleep(5 ms); ab -c 4
drives it. Ground truth comes from the workers' own timing over the same window (the
window opens when threadpool has attached and closes when its summary arrives).
Checks: utilisation within 0.1 absolute and busy workers within 15% of the JVM's own
figures, the verdict (sleeping workers are not blocked on locks), the pool is the 8
workers, request rate and service time still right, and the default text report
shows the pools that matter instead of every JVM thread group. Then offcputime -p on
the same busy JVM with its default tables (issue 8): no stack lost, none of its maps
full, and the pool's sleeps found under Thread.sleep's futex wait; with --jvm-perfmap the
JVM (run as nobody, default flags) writes its perf map and the pool's stacks name
JvmPool's methods.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (SRC, check, compare_pool, finish, measure_against_truth, ndjson, need,  # noqa: E402
                     require_built, require_root, tool)
import services  # noqa: E402

TOOL = tool("threadpool")
OFFCPU = tool("offcputime")
OFFCPU_S = int(os.environ.get("JVM_OFFCPU_S", "10"))
JAVA_SRC = os.path.join(SRC, "tests/workloads/JvmPool.java")
PORTS = range(8081, 8090)


def free_port():
    return services.free_port(PORTS.start, PORTS.stop)


def start_jvm(d, port):
    # as an unprivileged user, as a JVM usually runs (--jvm-perfmap's attach files are its)
    os.chmod(d, 0o755)
    jvm = subprocess.Popen(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                            "java", "-Xmx128m", "-cp", d, "JvmPool",
                            "--port", str(port), "--workers", "8", "--cpu-us", "200",
                            "--sleep-ms", "5"],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    ready = json.loads(jvm.stdout.readline())
    return jvm, ready


def ab(abbin, port, secs):
    return subprocess.Popen([abbin, "-q", "-c", "4", "-t", str(secs), "-n", "100000000",
                             "http://127.0.0.1:%d/" % port],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def measured_run(abbin, d):
    port = free_port()
    jvm, ready = start_jvm(d, port)
    try:
        warm = ab(abbin, port, 3)  # JIT warm-up
        warm.communicate()
        load = ab(abbin, port, 22 + OFFCPU_S)
        time.sleep(0.5)
        # the default text report on the JVM under load: the pools that matter only
        tp2 = subprocess.run([TOOL, "-p", str(ready["pid"]), "-d", "2"], capture_output=True,
                             text=True, timeout=60)
        # offcputime on the same busy JVM (before the truth window: that ends the JVM)
        # --jvm-perfmap: the JVM (default flags) writes its perf map when asked
        oc = subprocess.run([OFFCPU, "-p", str(ready["pid"]), "-j", "--jvm-perfmap", "--duration", str(OFFCPU_S)],
                            capture_output=True, text=True, timeout=OFFCPU_S + 60)
        rc, err, records, truth = measure_against_truth(jvm, ready["pid"], [TOOL, "-j", "-d", "6"],
                                                        "threadpool")
        summaries = [r for r in records if r["type"] == "threadpool.group" and r["final"]]
        load.terminate()
        load.communicate()
        return rc, err, summaries, truth, tp2, ready, oc
    finally:
        services.kill_jvm(jvm)  # and what its attach mechanism left in /tmp


def main():
    require_root()
    require_built(TOOL)
    need("javac", "openjdk-17-jdk-headless")
    abbin = need("ab", "apache2-utils")
    d = tempfile.mkdtemp(prefix="tp-jvm-")
    try:
        services.javac(JAVA_SRC, d)
        rc, err, summaries, truth, text, ready, oc = measured_run(abbin, d)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    if not check(rc == 0 and summaries and truth, "threadpool ran: rc %d %s" % (rc, err.strip())):
        finish()
    pool = [s for s in summaries if s["group"].startswith("pool-1-thread")]
    if not check(len(pool) == 1, "one pool-1-thread group among %s" % [s["group"] for s in summaries]):
        finish()
    s = pool[0]
    compare_pool("jvm", s, truth)
    check(s["thread_count"] == 8, "pool threads %d == 8" % s["thread_count"])
    check(s["verdict"] == "sleeping",
          "verdict %s (want sleeping, never blocked-on-locks): %s" % (s["verdict"], s["verdict_reason"]))
    busy_ns = s["accounted_total_ns"] - s["idle_total_ns"]
    check(s["blocked_total_ns"]["lock"] < 0.1 * busy_ns,
          "lock share %.1f%% of busy time < 10%%" % (100.0 * s["blocked_total_ns"]["lock"] / max(busy_ns, 1)))
    secs = s["interval_ns"] / 1e9
    rate = s["request_count"] / secs
    check(abs(rate - truth["req_per_s"]) <= 0.05 * truth["req_per_s"],
          "request rate %.1f/s vs the JVM's %.1f/s" % (rate, truth["req_per_s"]))
    p50 = s["service_p50_ns"] / 1e6
    check(5.0 <= p50 <= 6.5, "service p50 %.2f ms (handler: 200 us CPU + 5 ms sleep)" % p50)
    out = text.stdout
    lines = out[out.find("=== summary"):].splitlines()  # the summary section
    groups = [l for l in lines if l.startswith("summary \"")]
    check(text.returncode == 0 and any("pool-1-thread" in g for g in groups) and
          1 <= len(groups) <= 4 and len(lines) <= 45,
          "default text report: %d groups, %d lines: %s" % (len(groups), len(lines), groups))
    check_offcputime(oc)
    finish()


def check_offcputime(oc):
    recs = ndjson(oc.stdout, "offcputime") if oc.returncode == 0 else []
    summary = [r for r in recs if r["type"] == "offcputime.summary"]
    if not check(summary, "offcputime -p JVM --duration %d ran: rc %d %s" % (OFFCPU_S, oc.returncode,
                                                                          oc.stderr.strip()[-300:])):
        return
    dq = summary[-1]["data_quality"]
    stacks = [r for r in recs if r["type"] == "offcputime.stack"]
    check(dq["lost_stacks"] == 0 and dq["map_full"] == 0 and dq["lost_events"] == 0,
          "offcputime on the busy JVM, default tables, %d s: no stack lost, no map full (%d stacks; %s)"
          % (OFFCPU_S, len(stacks), dq))
    pool = [r for r in stacks if r["comm"].startswith("pool-1-thread")]
    total = sum(r["offcpu_total_ns"] for r in pool)
    # 8 workers sleeping 5 ms of each ~5.4 ms request for OFFCPU_S: most of their time
    check(total >= 0.5 * 8 * OFFCPU_S * 1e9,
          "pool-1-thread-* off-CPU %.1f s of %d thread-seconds" % (total / 1e9, 8 * OFFCPU_S))
    sleeping = sum(r["offcpu_total_ns"] for r in pool if any("futex" in f for f in r.get("kernel_stack", [])))
    check(sleeping >= 0.8 * total, "the pool's off-CPU time is under a futex wait (Thread.sleep): %.1f of %.1f s"
          % (sleeping / 1e9, total / 1e9))
    # --jvm-perfmap: Java methods named (JIT code is in no ELF file), asked without a restart
    # (HotSpot's perf map names a method "RETURN_TYPE CLASS.METHOD(ARGS)"): the handlers'
    # sleeps under JvmPool's lambda, the idle workers' under the queue's park
    java = re.compile(r"^\S+ [\w$.]+\.[\w$<>]+\(")
    named = sum(r["offcpu_total_ns"] for r in pool if any(java.match(f) for f in r.get("user_stack", [])))
    handlers = sum(r["offcpu_total_ns"] for r in pool if any("JvmPool" in f for f in r.get("user_stack", [])))
    check("--jvm-perfmap" not in oc.stderr and named >= 0.8 * total and handlers > 0,
          "--jvm-perfmap: the pool's off-CPU time under a named Java method %.1f of %.1f s, under JvmPool's %.1f s (%s)"
          % (named / 1e9, total / 1e9, handlers / 1e9, oc.stderr.strip()[-200:]))


if __name__ == "__main__":
    sys.exit(main())
