#!/usr/bin/env python3
"""flamegraph reads anyone's folded file: its input is bounded (issue 19 item 7).

An endless line (300 MB without a newline, as `yes | tr -d '\\n'` gives) used to be held
whole (the old reader copied all of stdin into memory, then split it): peak RSS grew
with the input. Now a line over 1 MiB is skipped as it streams past, so the peak RSS
stays near the program's own size; the stacks around it still render, and one warning
line says what was skipped. Peak RSS from GNU time (%M).
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from harness import check, finish, need, require_built, tool  # noqa: E402

FG = tool("flamegraph")
require_built(FG)
TIME = need("time", "time")
if not os.access("/usr/bin/time", os.X_OK):
    check(False, "GNU time at /usr/bin/time")
    finish()

ENDLESS_MB = 300
RSS_LIMIT_KB = 100 * 1024  # flamegraph alone peaks near 10 MB; the old reader: > 300 MB


def feed():
    """a;good 5, then one 300 MB line, then a;after 7: streamed, never in our memory."""
    yield b"a;good 5\n"
    chunk = b"x" * (1 << 20)
    for _ in range(ENDLESS_MB):
        yield chunk
    yield b" 1\na;after 7\n"


p = subprocess.Popen(["/usr/bin/time", "-f", "maxrss_kb=%M", FG], stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
import threading  # noqa: E402
out = {}
reader = threading.Thread(target=lambda: out.update(svg=p.stdout.read()))
reader.start()
err_box = {}
err_reader = threading.Thread(target=lambda: err_box.update(err=p.stderr.read()))
err_reader.start()
try:
    for part in feed():
        p.stdin.write(part)
    p.stdin.close()
except BrokenPipeError:
    pass
rc = p.wait(timeout=120)
reader.join()
err_reader.join()
err = err_box["err"].decode(errors="replace")
svg = out["svg"].decode(errors="replace")
rss = [int(l.split("=")[1]) for l in err.splitlines() if l.startswith("maxrss_kb=")]
warn = [l for l in err.splitlines() if l.startswith("flamegraph: warning:")]
check(rc == 0, "flamegraph on a %d MB line exits 0 (rc %d, %r)" % (ENDLESS_MB, rc, err.strip()[-300:]))
check(rss and rss[0] < RSS_LIMIT_KB, "peak RSS %s kB < %d kB with a %d MB line" % (rss, RSS_LIMIT_KB, ENDLESS_MB))
check(len(warn) == 1 and "skipped 1 lines longer than 1048576 bytes" in warn[0],
      "one warning line names the skipped line: %r" % warn)
check(">good<" in svg and ">after<" in svg, "the stacks before and after the long line are drawn")
finish()
