"""Setup shared by the CLI hardening tests (test_cli_hardening.py,
test_compile_interrupt.py; two files so that ctest runs them side by side): the tool
registry's tracers, a private TMPDIR outside /tmp, and two helper processes to target
(a python3 with 3 idle threads for threadpool, a sleeper for pmheld)."""
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from harness import check, ndjson, require_built, require_root, tool  # noqa: E402

require_root()
require_built(tool("doctor"))  # the tool registry: every tracer but doctor (a checker)
TOOLS = [r["tool"] for r in ndjson(subprocess.run([tool("doctor"), "--list", "-j"], stdout=subprocess.PIPE,
                                                  text=True).stdout) if r["tool"] != "doctor"]
require_built(*[tool(t) for t in TOOLS])

# outside /tmp: one check below makes /tmp read-only
TMP = tempfile.mkdtemp(prefix="hard-cli-tmpdir-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None)
T_START = time.time()
ENV = dict(os.environ, TMPDIR=TMP)
PY_THREADS = ("import threading,time\n"
              "for _ in range(3): threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()\n"
              "print('ready', flush=True)\n"
              "while True: time.sleep(0.05)\n")
SLEEPER = "import time\nprint('ready', flush=True)\nwhile True: time.sleep(0.05)\n"


def tmp_left():
    return sorted(os.listdir(TMP))


def run(args, timeout=20, stdout=subprocess.PIPE, env=ENV):
    return subprocess.run(args, stdout=stdout, stderr=subprocess.PIPE, text=True,
                          timeout=timeout, env=env)


def ready_process(code):
    """A python process that has run its setup (it says "ready")."""
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    check(p.stdout.readline().strip() == "ready", "helper process %d ready" % p.pid)
    return p


pool = ready_process(PY_THREADS)
sleeper = ready_process(SLEEPER)


def target_args(t):
    """What tool t needs to start tracing (a target for the tools that require one)."""
    return {"pmheld": ["-p", str(sleeper.pid)], "threadpool": ["-p", str(pool.pid)]}.get(t, [])


def end():
    """Stops the helper processes; nothing may be left in TMPDIR."""
    pool.kill()
    sleeper.kill()
    check(tmp_left() == [], "nothing left in TMPDIR at the end: %s" % tmp_left())
    shutil.rmtree(TMP, ignore_errors=True)
    print("took %.0f s" % (time.time() - T_START))
