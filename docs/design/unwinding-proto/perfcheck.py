#!/usr/bin/env python3
"""perfcheck.py PERF_DATA TRUTH_JSON: for each thread in the workload's report, the
share of its sched_switch samples in `perf script` whose user stack contains
callers[0] ... function in order (outermost first)."""
import json, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../tests/integration"))
from harness import perf_script_stacks  # noqa: E402
data, truth = sys.argv[1], json.load(open(sys.argv[2]))
samples = perf_script_stacks("perf", data)
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
