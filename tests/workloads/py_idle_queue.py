#!/usr/bin/python3
"""py_idle_queue: a mostly idle CPython concurrent.futures.ThreadPoolExecutor whose
workers wait on their work queue and time those waits themselves, for lockstat's
CPython test (run with Debian's /usr/bin/python3; not built by CMake).

USAGE: py_idle_queue.py [--workers N] [--rate R] [--batch K] [--task-ms MS]

The main thread submits --rate tasks per second, K at a time (a batch every K/R s;
nobody waits for their results); each task only sleeps --task-ms (time.sleep: no
lock, no futex). Nobody holds a lock for the workers: between tasks they wait in the
executor's work queue (queue.SimpleQueue: its get() waits on a semaphore, a
FUTEX_WAIT_BITSET wait). A put() into the empty queue posts the semaphore (it wakes a
worker); a get() that took the semaphore posts it again after taking its item (it
wakes the next waiting worker, which takes the next item or, finding none, waits
again). So a batch of K tasks wakes one worker from the main thread and K more from
fellow waiters. The queue is a SimpleQueue subclass whose get() is timed:
pool._work_queue is replaced before the first submit, so the workers call the same C
code on the same semaphore, and the workload knows its address (the
PyThread_type_lock at offset 16 of CPython 3.11's simplequeueobject, a sem_t whose
first word is the futex).

Prints {"pid":.., "queue_addr":"0x..", "workers":[tid..]} once every worker has
started, then reads stdin until it ends (then exits). "window T0 T1" (CLOCK_REALTIME
ns, e.g. a tracer's window: its end time_ns and time_ns - interval_ns) prints one JSON
line of truth for that window, from the workers' own clock readings: per worker
thread (native tid) get_ns, the time inside the queue's get() that falls in the window
(a get still running counts up to now), gets and tasks (ended in the window), task_ns;
window_ns; submitted (tasks submitted in the window: --rate x the window unless the
main thread was starved of CPU).
"""
import argparse
import concurrent.futures
import ctypes
import json
import os
import queue
import sys
import threading
import time

# native tid -> {"get": [(start, end)], "task": [(start, end)], "in_get": start or 0}
stats = {}
stats_lock = threading.Lock()  # taken once per thread, at its first get
submits = []  # CLOCK_REALTIME ns of each submit


def me():
    tid = threading.get_native_id()
    s = stats.get(tid)
    if s is None:
        with stats_lock:
            s = stats.setdefault(tid, {"get": [], "task": [], "in_get": 0})
    return s


class TimedQueue(queue.SimpleQueue):
    """The executor's work queue, its get() timed by the calling thread."""

    def get(self, block=True, timeout=None):
        s = me()
        t0 = s["in_get"] = time.time_ns()
        try:
            return super().get(block, timeout)
        finally:
            s["get"].append((t0, time.time_ns()))
            s["in_get"] = 0


def task(seconds):
    s = stats[threading.get_native_id()]
    t0 = time.time_ns()
    time.sleep(seconds)
    s["task"].append((t0, time.time_ns()))


def overlap(spans, t0, t1):
    return sum(max(0, min(e, t1) - max(b, t0)) for b, e in spans)


def truth(t0, t1):
    now = time.time_ns()
    per = {}
    for tid, s in list(stats.items()):
        gets = list(s["get"])
        if s["in_get"]:
            gets.append((s["in_get"], now))
        tasks = list(s["task"])
        per[str(tid)] = {"get_ns": overlap(gets, t0, t1),
                         "gets": sum(1 for b, e in s["get"] if t0 <= e <= t1),
                         "task_ns": overlap(tasks, t0, t1),
                         "tasks": sum(1 for b, e in tasks if t0 <= e <= t1)}
    return {"window_ns": t1 - t0, "submitted": sum(1 for t in list(submits) if t0 <= t <= t1),
            "workers": per}


def commands():
    for line in sys.stdin:
        f = line.split()
        if len(f) == 3 and f[0] == "window":
            print(json.dumps(truth(int(f[1]), int(f[2]))), flush=True)
    os._exit(0)  # stdin ended


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--task-ms", type=float, default=12.0)
    a = ap.parse_args()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=a.workers)
    pool._work_queue = TimedQueue()  # before the first submit starts a worker
    sem = ctypes.c_void_p.from_address(id(pool._work_queue) + 16).value
    # start every worker (N tasks at once) before anyone traces the pool
    for f in [pool.submit(task, 0.05) for _ in range(a.workers)]:
        f.result()
    workers = sorted(stats)
    print(json.dumps({"pid": os.getpid(), "queue_addr": "0x%x" % sem, "workers": workers}), flush=True)
    threading.Thread(target=commands, daemon=True).start()
    period = a.batch / a.rate
    nxt = time.monotonic()
    while True:
        for _ in range(a.batch):
            pool.submit(task, a.task_ms / 1000)  # the future is dropped: nobody waits for it
            submits.append(time.time_ns())
        nxt += period
        time.sleep(max(0.0, nxt - time.monotonic()))


if __name__ == "__main__":
    main()
