#!/usr/bin/env python3
"""Startup time (exec -> probes attached) and peak memory of every bpfdiag tool next to
bpftrace running a comparable program (same probe kinds and counts), measured in the
same run, interleaved (ours, bpftrace, ours, ...), median of RUNS.

Attached, ours: the first line carrying the tool's "<tool>.start" JSON record or its
banner, both written after the last probe is attached. bpftrace 0.17 prints
"Attaching N probes..." BEFORE it attaches (and runs BEGIN before attaching the rest),
so its time is a lower bound: the ratios are conservative (they favour bpftrace).
Peak memory: VmHWM from /proc/PID/status at the moment the tool says it is attached.
Our tools are measured twice: cold (BPFDIAG_CACHE=0: libbcc compiles the program, as on
the first start with given options) and warm (the compiled object from the cache, a
directory of this run primed by one start per tool; common/bpf_object.h).
Goal (issue 10): every tool <= 0.25 s, <= 2x bpftrace, <= 110 MB (judged warm; cold is
printed next to it).

usage: bench/startup.py [RUNS]   (root; BIN defaults to build/bin; BENCH_TOOLS=a,b limits)
With BPFDIAG_TIMING=1 in the environment our tools' phase times are printed too
(one extra run each, not counted).
"""
import os
import selectors
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
BIN = os.environ.get("BIN", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "bin"))
GOAL_S, GOAL_RATIO, GOAL_MB = 0.25, 2.0, 110
ATTACH_TIMEOUT_S = 30


def libc_path(pid):
    with open("/proc/%d/maps" % pid) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and os.path.basename(parts[5]).startswith("libc.so"):
                return parts[5]
    return "/lib/x86_64-linux-gnu/libc.so.6"


def tracepoint_exists(tp):
    # bpftrace runs in a private mount namespace with tracefs; ask it the same way
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                        "mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing; "
                        "test -d /sys/kernel/tracing/events/" + tp.replace(":", "/")])
    return r.returncode == 0


def cases(target_pid):
    libc = libc_path(target_pid)
    futex_calls = ["futex"] + [c for c in ("futex_wait", "futex_waitv")
                               if tracepoint_exists("syscalls:sys_enter_" + c)]
    lockstat_bt = "".join(
        "tracepoint:syscalls:sys_enter_%s { @s[tid] = nsecs; } "
        "tracepoint:syscalls:sys_exit_%s /@s[tid]/ { @u[ustack, comm] = hist(nsecs - @s[tid]); "
        "delete(@s[tid]); } " % (c, c) for c in futex_calls)
    lockstat_bt += ("tracepoint:lock:contention_begin { @k[tid] = nsecs; } "
                    "tracepoint:lock:contention_end /@k[tid]/ { @kh[kstack] = hist(nsecs - @k[tid]); "
                    "delete(@k[tid]); }")
    lock_fns = ["pthread_mutex_lock", "pthread_mutex_trylock", "pthread_mutex_timedlock",
                "pthread_mutex_clocklock"]
    cond_fns = ["pthread_cond_wait", "pthread_cond_timedwait", "pthread_cond_clockwait"]
    pmheld_bt = "".join("uprobe:%s:%s { @a[tid] = arg0; } uretprobe:%s:%s /@a[tid]/ "
                        "{ @h[@a[tid], tid] = nsecs; delete(@a[tid]); } " % (libc, f, libc, f)
                        for f in lock_fns + cond_fns)
    pmheld_bt += ("uprobe:%s:pthread_mutex_unlock /@h[arg0, tid]/ { @[ustack] = hist(nsecs - @h[arg0, tid]); "
                  "delete(@h[arg0, tid]); }" % libc)
    p = str(target_pid)
    return [
        # (tool, our argv, bpftrace program)
        ("runqlen", ["runqlen", "-j"],
         "profile:hz:99 { $t = (struct task_struct *)curtask; "
         "@q = lhist($t->se.cfs_rq->rq->nr_running, 0, 100, 1); } "
         "tracepoint:sched:sched_switch { @idle[cpu] = nsecs; }"),
        ("naptime", ["naptime", "-j"],
         "tracepoint:syscalls:sys_enter_nanosleep, tracepoint:syscalls:sys_enter_clock_nanosleep "
         "{ @start[tid] = nsecs; } tracepoint:syscalls:sys_exit_nanosleep, "
         "tracepoint:syscalls:sys_exit_clock_nanosleep /@start[tid]/ "
         "{ @[comm] = hist(nsecs - @start[tid]); delete(@start[tid]); }"),
        ("offcputime", ["offcputime", "-j"],
         "tracepoint:sched:sched_switch { @start[args->prev_pid] = nsecs; "
         "$s = @start[args->next_pid]; if ($s) { @[kstack, ustack, comm] = sum(nsecs - $s); "
         "delete(@start[args->next_pid]); } } "
         "tracepoint:sched:sched_process_exec { @e = count(); } "
         "tracepoint:sched:sched_process_exit { delete(@start[tid]); }"),
        ("lockstat", ["lockstat", "-j"], lockstat_bt),
        ("pmheld", ["pmheld", "-j"], pmheld_bt),
        ("threadpool", ["threadpool", "-j", "-p", p],
         "tracepoint:sched:sched_switch /pid == %s/ { @sw[tid] = nsecs; } "
         "tracepoint:sched:sched_waking /pid == %s/ { @wk[args->pid] = nsecs; } "
         "tracepoint:sched:sched_wakeup_new /pid == %s/ { @n = count(); } "
         "tracepoint:sched:sched_process_fork /pid == %s/ { @f = count(); } "
         "tracepoint:raw_syscalls:sys_enter /pid == %s/ { @sc[tid] = nsecs; } "
         "tracepoint:raw_syscalls:sys_exit /pid == %s && @sc[tid]/ "
         "{ @[ustack] = hist(nsecs - @sc[tid]); delete(@sc[tid]); }" % ((p,) * 6)),
        ("profile", ["profile", "-j"],
         "profile:hz:49 { @[kstack, ustack, comm] = count(); }"),
    ]


def cpu_seconds(pid):
    """On-CPU time of every thread of `pid` so far (schedstat, ns precision): unlike
    wall time it hardly depends on what else the machine is running."""
    total = 0
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[0])
    except OSError:
        pass
    return total / 1e9


def measure(cmd, markers, env=None, stop_sig=signal.SIGINT):
    """Seconds from exec to the first output line holding a marker, VmHWM (MB) and
    CPU seconds used by then. Then `stop_sig` ends it (bpftrace is killed: on SIGINT it
    prints its maps, symbolizing every stack, which took it tens of seconds here)."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    attached, hwm, cpu, lines, buf = None, 0, 0.0, [], b""
    sel = selectors.DefaultSelector()
    sel.register(p.stdout, selectors.EVENT_READ)
    while attached is None:
        # a side that never attaches (and never exits) must not hang the bench
        if not sel.select(timeout=max(0.0, t0 + ATTACH_TIMEOUT_S - time.monotonic())):
            lines.append("no attach within %d s" % ATTACH_TIMEOUT_S)
            break
        chunk = os.read(p.stdout.fileno(), 65536)
        if not chunk:
            break
        buf += chunk
        *done, buf = buf.split(b"\n")
        for raw in done:
            line = raw.decode(errors="replace")
            if any(m in line for m in markers):
                attached = time.monotonic() - t0
                cpu = cpu_seconds(p.pid)
                try:
                    with open("/proc/%d/status" % p.pid) as f:
                        for l in f:
                            if l.startswith("VmHWM:"):
                                hwm = int(l.split()[1]) / 1024.0
                except OSError:
                    pass
                break
            lines.append(line.rstrip())
    p.send_signal(stop_sig)
    try:
        p.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
    if attached is None:
        print("    %s failed: %s" % (" ".join(cmd)[:60], " | ".join(lines[-3:])), flush=True)
    return attached, hwm, cpu, lines


def peer_cmd(program):
    # bpftrace needs tracefs; give it a private mount namespace with tracefs, as our
    # tools make for themselves, so it is measured working rather than failing.
    return ["unshare", "-m", "--propagation", "private", "sh", "-c",
            "mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing; "
            "exec bpftrace -e \"$0\"", program]


def main():
    if os.geteuid() != 0:
        sys.exit("startup.py: must run as root")
    if shutil.which("bpftrace") is None:
        sys.exit("startup.py: bpftrace not found (apt-get install bpftrace; scripts/install-deps does)")
    # a multi-threaded target for threadpool (and a libc to name in pmheld's program)
    target = subprocess.Popen([sys.executable, "-c",
                               "import threading, time\n"
                               "for _ in range(4): threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()\n"
                               "time.sleep(3600)\n"])
    time.sleep(0.3)
    cache_dir = tempfile.TemporaryDirectory(prefix="bpfdiag-bench-cache-")
    try:
        only = set(filter(None, os.environ.get("BENCH_TOOLS", "").split(",")))
        todo = []
        for tool, argv, bt in cases(target.pid):
            if only and tool not in only:
                continue
            exe = os.path.join(BIN, argv[0])
            if not os.path.exists(exe):
                print("%-10s (not built, skipped)" % tool)
                continue
            todo.append((tool, [exe] + argv[1:], bt))
        env = dict(os.environ)
        env.pop("BPFDIAG_TIMING", None)
        cold_env = dict(env, BPFDIAG_CACHE="0")
        warm_env = dict(env, BPFDIAG_CACHE_DIR=cache_dir.name)
        env_of = {"cold": cold_env, "warm": warm_env, "peer": env}
        sides = ("cold", "warm", "peer")
        res = {t: {k + sfx: [] for k in sides for sfx in ("", "_mb", "_cpu")} for t, _, _ in todo}
        for tool, cmd, bt in todo:  # prime the cache: one start per tool
            measure(cmd, ['"%s.start"' % tool], warm_env, signal.SIGINT)
        for run in range(RUNS):
            for tool, cmd, bt in todo:
                order = [("cold", cmd, ['"%s.start"' % tool], signal.SIGINT),
                         ("warm", cmd, ['"%s.start"' % tool], signal.SIGINT),
                         ("peer", peer_cmd(bt), ["Attaching"], signal.SIGKILL)]
                k = run % 3  # no side always runs right after another
                order = order[k:] + order[:k]
                for side, c, markers, sig in order:
                    t, mb, cpu, _ = measure(c, markers, env_of[side], sig)
                    print("  run %d %-10s %-4s %s" % (run + 1, tool, side, "%.3f s" % t if t is not None else "failed"),
                          file=sys.stderr, flush=True)
                    if t is not None:
                        res[tool][side].append(t)
                        res[tool][side + "_mb"].append(mb)
                        res[tool][side + "_cpu"].append(cpu)
        print("load average: %s" % open("/proc/loadavg").read().split()[0])
        print("%-10s %6s %6s %6s %6s %6s %7s %7s %6s %6s %6s  %s" % (
            "tool", "cold_s", "warm_s", "bt_s", "cold/bt", "warm/bt", "warm_cpu", "bt_cpu", "ratio",
            "warmMB", "bt_MB", "goal (warm: <=%.2fs, <=%.1fx, <=%dMB)" % (GOAL_S, GOAL_RATIO, GOAL_MB)))
        failed = False
        results = []
        for tool, cmd, bt in todo:
            r = res[tool]
            if not r["cold"] or not r["warm"] or not r["peer"]:
                print("%-10s %s" % (tool, "FAILED (cold %d/%d runs, warm %d/%d, bpftrace %d/%d)"
                                    % (len(r["cold"]), RUNS, len(r["warm"]), RUNS, len(r["peer"]), RUNS)))
                results.append("RESULT tool=%s failed=1" % tool)
                failed = True
                continue
            c, w, b = (statistics.median(r[k]) for k in sides)
            wm, bm = max(r["warm_mb"]), max(r["peer_mb"])
            wc, bc = statistics.median(r["warm_cpu"]), statistics.median(r["peer_cpu"])
            ok = w <= GOAL_S and w / b <= GOAL_RATIO and wm <= GOAL_MB
            failed |= not ok
            print("%-10s %6.3f %6.3f %6.3f %6.2fx %6.2fx %7.3f %7.3f %5.2fx %6.0f %6.0f  %s" % (
                tool, c, w, b, c / b, w / b, wc, bc, wc / max(bc, 1e-9), wm, bm, "ok" if ok else "MISSED"))
            results.append("RESULT tool=%s cold_s=%.4f warm_s=%.4f bt_s=%.4f warm_mb=%.1f bt_mb=%.1f" % (
                tool, c, w, b, wm, bm))
        for line in results:  # machine-readable, one line per tool (bench/compare reads them)
            print(line)
        if os.environ.get("BPFDIAG_TIMING"):
            for tool, cmd, bt in todo:
                print("\n%s phases (one extra run):" % tool)
                p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                seen = False
                for line in p.stderr:
                    if line.startswith("bpfdiag-timing:"):
                        seen = True
                        print("  " + line.rstrip()[len("bpfdiag-timing: "):])
                    elif seen:
                        break  # the banner: attached
                p.send_signal(signal.SIGINT)
                p.communicate(timeout=20)
        return 1 if failed else 0
    finally:
        target.kill()
        target.wait()
        cache_dir.cleanup()


if __name__ == "__main__":
    sys.exit(main())
