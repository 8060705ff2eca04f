#!/usr/bin/python3
"""py_pool: a CPython concurrent.futures.ThreadPoolExecutor workload that times itself,
for threadpool's CPython test (run with Debian's /usr/bin/python3; not built by CMake).

USAGE: py_pool.py --phase sleep|gil [--workers N] [--rate R] [--sleep-ms MS] [--cpu-ms MS]
                  [--monitor] [--second-pool N]

  sleep  the main thread submits --rate tasks per second (in batches every 10 ms);
         each burns a little CPU, then time.sleep(--sleep-ms): sleep-bound workers
  gil    the main thread keeps 4*N tasks queued (a semaphore bounds the backlog); each
         runs a pure-Python loop of about --cpu-ms: every worker always has work but
         only the one holding the GIL runs (GIL-bound)

--monitor adds a thread outside the pool, also named "python3", that wakes every 20 ms
to look at the pool's queue length (a stats/health thread): not a worker, not in the
truth. Its TID is in the ready line ("monitor").
--second-pool N adds another ThreadPoolExecutor(N) (threads also "python3", its own
queue) fed 200 tasks/s that sleep 3 ms: another pool, not in the truth. The ready
line lists both pools' TIDs ("worker_tids", "second_tids").

Prints {"pid":..} when ready, then reads stdin: "start" opens the measurement window,
"stop" closes it and prints one JSON line of truth for the window, then exits.
Truth per worker, from the workers themselves: CPU time (the thread's CPU clock, read
at the window's edges), sleep time (timed around time.sleep), task wall time, and
busy = CPU + sleep (time a worker runs Python or sleeps in its task, i.e. neither
waits for work nor for the GIL), and runnable (time waiting for a CPU, from
/proc/self/task/TID/schedstat: on a busy machine a tracer may count it as busy or not).
gil_wait = task wall - CPU - sleep (an upper bound:
it includes waiting for a CPU).
"""
import argparse
import concurrent.futures
import json
import os
import select
import sys
import threading
import time

stats = {}  # thread ident -> [task_wall_ns, sleep_ns, tasks, cur_start_ns, native tid]
lock = threading.Lock()


def me():
    ident = threading.get_ident()
    s = stats.get(ident)
    if s is None:
        with lock:
            s = stats.setdefault(ident, [0, 0, 0, 0, threading.get_native_id()])
    return s


def spin_cpu(seconds):
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        for i in range(200):
            x += i
    return x


def sleep_task(cpu_s, sleep_s):
    s = me()
    t0 = time.monotonic_ns()
    s[3] = t0
    spin_cpu(cpu_s)
    a = time.monotonic_ns()
    time.sleep(sleep_s)
    s[1] += time.monotonic_ns() - a
    s[0] += time.monotonic_ns() - t0
    s[2] += 1
    s[3] = 0


def gil_task(loops):
    s = me()
    t0 = time.monotonic_ns()
    s[3] = t0
    x = 0
    for i in range(loops):
        x += i * i
    s[0] += time.monotonic_ns() - t0
    s[2] += 1
    s[3] = 0
    return x


def run_delay_ns(tid):
    """Time the thread spent runnable, waiting for a CPU (/proc schedstat's 2nd field)."""
    try:
        with open("/proc/self/task/%d/schedstat" % tid) as f:
            return int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def snapshot():
    now = time.monotonic_ns()
    out = {}
    for ident, s in list(stats.items()):
        try:
            cpu = time.clock_gettime_ns(time.pthread_getcpuclockid(ident))
        except OSError:
            continue
        wall = s[0] + (now - s[3] if s[3] else 0)
        out[ident] = (cpu, s[1], wall, s[2], run_delay_ns(s[4]))
    return now, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--phase", choices=("sleep", "gil"), required=True)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--rate", type=float, default=700.0)
    ap.add_argument("--sleep-ms", type=float, default=5.0)
    ap.add_argument("--cpu-ms", type=float, default=5.0)
    ap.add_argument("--monitor", action="store_true")
    ap.add_argument("--second-pool", type=int, default=0)
    a = ap.parse_args()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=a.workers)
    monitor = []
    if a.monitor:
        def watch():
            monitor.append(threading.get_native_id())
            while True:
                time.sleep(0.02)
                _ = pool._work_queue.qsize()
        threading.Thread(target=watch, daemon=True).start()
        while not monitor:
            time.sleep(0.001)
    # calibrate the GIL task's loop count to about --cpu-ms of CPU
    t = time.thread_time()
    gil_task(200000)
    per_loop = max((time.thread_time() - t) / 200000, 1e-9)
    stats.clear()
    loops = int(a.cpu_ms / 1000 / per_loop)
    backlog = threading.Semaphore(4 * a.workers)
    # start every worker before anyone traces the pool
    for f in [pool.submit(sleep_task, 0, 0.05) for _ in range(a.workers)]:
        f.result()
    second, second_tids = None, []
    if a.second_pool:
        second = concurrent.futures.ThreadPoolExecutor(max_workers=a.second_pool)

        def native_id():
            time.sleep(0.05)
            return threading.get_native_id()
        second_tids = sorted({f.result() for f in [second.submit(native_id)
                                                   for _ in range(a.second_pool)]})
    print(json.dumps({"pid": os.getpid(), "workers": a.workers, "phase": a.phase,
                      "monitor": monitor[0] if monitor else None,
                      "worker_tids": sorted(s[4] for s in stats.values()),
                      "second_tids": second_tids}), flush=True)
    win = None
    credit, nxt = 0.0, time.monotonic()
    while True:
        r, _, _ = select.select([sys.stdin], [], [], 0)
        if r:
            cmd = sys.stdin.readline().strip()
            if cmd == "start":
                win = snapshot()
            elif cmd == "stop" and win or not cmd:
                break
        if a.phase == "sleep":
            credit += a.rate * 0.01
            while credit >= 1:
                pool.submit(sleep_task, 0.0002, a.sleep_ms / 1000)
                credit -= 1
            if second:
                for _ in range(2):
                    second.submit(time.sleep, 0.003)
            nxt += 0.01
            time.sleep(max(0.0, nxt - time.monotonic()))
        else:
            for _ in range(4 * a.workers):
                if not backlog.acquire(timeout=0.01):
                    break
                f = pool.submit(gil_task, loops)
                f.add_done_callback(lambda _f: backlog.release())
    if win:
        t1, end = snapshot()
        t0, beg = win
        w = t1 - t0
        cpu = sleep = wall = tasks = runnable = 0
        for ident, e in end.items():
            b = beg.get(ident, (0, 0, 0, 0, 0))
            cpu += e[0] - b[0]
            sleep += e[1] - b[1]
            wall += e[2] - b[2]
            tasks += e[3] - b[3]
            runnable += e[4] - b[4]
        busy = (cpu + sleep) / w
        # waiting for a CPU is neither work nor a wait for work: whether it counts as
        # busy is the tracer's definition; this is the most it can add
        print(json.dumps({"window_ns": w, "workers": len(end), "busy_avg": busy,
                          "runnable_avg": runnable / w,
                          "utilization": busy / a.workers, "cpu_avg": cpu / w,
                          "sleep_avg": sleep / w, "task_avg": wall / w,
                          "gil_wait_avg": max(0, wall - cpu - sleep) / w, "tasks": tasks}),
              flush=True)
    pool.shutdown(wait=False, cancel_futures=True)
    if second:
        second.shutdown(wait=False, cancel_futures=True)
    os._exit(0)


if __name__ == "__main__":
    main()
