#!/usr/bin/env python3
"""perfcheck.py PERF_DATA TRUTH_JSON: for each thread in the workload's report, the
share of its sched_switch samples in `perf script` whose user stack contains
callers[0] ... function in order (outermost first)."""
import json, subprocess, sys
data, truth = sys.argv[1], json.load(open(sys.argv[2]))
out = subprocess.run(["perf", "script", "-i", data, "-F", "tid,ip,sym"], capture_output=True, text=True).stdout
samples, cur = [], None
for line in out.splitlines():
    if not line.strip():
        cur = None
        continue
    if not line.startswith("\t"):
        cur = {"tid": int(line.split()[0]), "frames": []}
        samples.append(cur)
    elif cur is not None:
        parts = line.split(None, 1)
        if len(parts) == 2:
            cur["frames"].append(parts[1].split(" (")[0].strip())
for t in truth["threads"]:
    want = t["callers"] + [t["function"]]
    mine = [s for s in samples if s["tid"] == t["tid"]]
    ok = 0
    for s in mine:
        fr = list(reversed(s["frames"]))  # outermost first
        pos = 0
        for f in fr:
            if pos < len(want) and f == want[pos]:
                pos += 1
        ok += pos == len(want)
    depth = sum(len(s["frames"]) for s in mine) / max(1, len(mine))
    print(json.dumps({"thread": t["name"], "samples": len(mine), "with_full_chain": ok, "mean_frames_incl_kernel": round(depth, 1)}))
