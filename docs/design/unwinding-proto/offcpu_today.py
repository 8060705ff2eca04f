#!/usr/bin/env python3
"""offcpu_today.py OFFCPUTIME WORKLOAD [args]: runs the workload (with a start delay as
its 5th argument), attaches `offcputime -U -f -p PID`, and prints, per thread of the
workload's own report, its measured blocked time and what offcputime attributes to
the blocking function and to its callers (sum of folded lines containing the name)."""
import json, subprocess, sys, time
tool, wl = sys.argv[1], sys.argv[2]
w = subprocess.Popen([wl, *sys.argv[3:]], stdout=subprocess.PIPE, text=True)
time.sleep(0.3)
o = subprocess.Popen([tool, "-U", "-f", "-p", str(w.pid), "--duration", "6"], stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True)
truth = json.loads(w.communicate()[0])
folded = o.communicate()[0]
lines = [l.rsplit(" ", 1) for l in folded.splitlines() if " " in l]
for t in truth["threads"]:
    res = {"thread": t["name"], "truth_ms": round(t["blocked_ns"] / 1e6, 1)}
    for fn in t["callers"] + [t["function"]]:
        us = sum(int(v) for s, v in lines if fn in s.split(";"))
        res[fn + "_ms"] = round(us / 1e3, 1)
    # the thread's own lines (comm is the first frame), largest first
    mine = sorted(((int(v), s) for s, v in lines if s.startswith(t["name"] + ";")), reverse=True)[:2]
    res["top_lines"] = [f"{s} {v}" for v, s in mine]
    print(json.dumps(res))
