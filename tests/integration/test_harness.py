#!/usr/bin/env python3
"""The harness's own checks can fail: each helper is shown a case it must reject.

- leftover_bpf_programs: a BPF program pinned in a private bpffs outlives the process
  that loaded it and is reported; once unpinned, nothing is;
- bpf_fds: counts the prog fd this process holds and names its program id;
- wait_attached: accepts a JSON start record or a banner (stdout or stderr) and keeps
  what it read for stop(); a tool that stays silent is a failure;
- validate_ndjson / ndjson: a record that breaks its tool's schema is a failure;
- check_golden: a changed line is a failure; UPDATE_GOLDEN=1 rewrites the file.
"""
import contextlib
import ctypes
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, finish, require_root  # noqa: E402

require_root()
WORK = tempfile.mkdtemp(prefix="harness-selftest-")


def expect_failure(fn, *args, **kw):
    """Runs a harness helper that should record a failed check; returns what it
    recorded (and takes it back off the failure list)."""
    before = len(harness._failures)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        ret = fn(*args, **kw)
    print("".join("     (expected) " + l for l in buf.getvalue().splitlines(True)), end="")
    recorded = harness._failures[before:]
    del harness._failures[before:]
    return recorded, ret


# --- BPF objects ----------------------------------------------------------------------
libc = ctypes.CDLL(None, use_errno=True)
NR_BPF = 321


def bpf(cmd, attr):
    return libc.syscall(NR_BPF, cmd, ctypes.byref(attr), ctypes.sizeof(attr))


insns = (ctypes.c_uint64 * 2)(0x00000000000000b7, 0x0000000000000095)  # r0 = 0; exit
license_ = ctypes.create_string_buffer(b"GPL")
load = (ctypes.c_uint32 * 36)()  # union bpf_attr, BPF_PROG_LOAD view
load[0] = 1  # BPF_PROG_TYPE_SOCKET_FILTER
load[1] = 2  # insn_cnt
ctypes.memmove(ctypes.byref(load, 8), ctypes.byref(ctypes.c_uint64(ctypes.addressof(insns))), 8)
ctypes.memmove(ctypes.byref(load, 16), ctypes.byref(ctypes.c_uint64(ctypes.addressof(license_))), 8)
prog_fd = bpf(5, load)  # BPF_PROG_LOAD
if check(prog_fd >= 0, "loaded a socket-filter program (%s)" % (
        "fd %d" % prog_fd if prog_fd >= 0 else os.strerror(ctypes.get_errno()))):
    mine = harness.bpf_fds(os.getpid())
    check(mine["prog"] == 1 and len(mine["prog_ids"]) == 1,
          "bpf_fds sees our one prog fd: %s" % mine)
    ids = mine["prog_ids"]
    # others' programs may come and go meanwhile (scripts/test runs the BPF variants check
    # beside the suite: a program between its load and its holder's fd table reads as
    # unheld): the check is about ours
    left = harness.leftover_bpf_programs(timeout=0.5) or []
    check(not any(re.match(r"prog %d\b" % i, l) for l in left for i in ids),
          "a program a live process holds is not a leftover (%s)" % left)
    fs = os.path.join(WORK, "bpffs")
    os.mkdir(fs)
    mounted = subprocess.run(["mount", "-t", "bpf", "bpf", fs]).returncode == 0
    if check(mounted, "mounted a private bpffs at %s" % fs):
        pin = ctypes.create_string_buffer(os.path.join(fs, "selftest").encode())
        pattr = (ctypes.c_uint64 * 2)(ctypes.addressof(pin), prog_fd)
        check(bpf(6, pattr) == 0, "pinned it (BPF_OBJ_PIN)")  # BPF_OBJ_PIN
        os.close(prog_fd)
        left = harness.leftover_bpf_programs(timeout=0.5)
        check(left is not None and any(re.match(r"prog %d\b" % min(ids), l) for l in left),
              "a pinned program nobody holds is reported as left over: %s" % left)
        check(harness.leftover_bpf_programs(ours=ids, timeout=0.5),
              "and as one of `ours` still loaded")
        subprocess.run(["umount", fs])
        check(harness.leftover_bpf_programs(ours=ids) == [] and harness.leftover_bpf_programs() == [],
              "after the bpffs is gone nothing is left")
    else:
        os.close(prog_fd)

# --- wait_attached ------------------------------------------------------------------------
# like a tool: output before the start record, the final report on SIGINT
p = harness.start(["sh", "-c", "trap 'echo after; exit 0' INT; echo noise; sleep 0.2; "
                   "echo '{\"type\":\"fake.start\"}'; while :; do sleep 0.05; done"])
seen = harness.wait_attached(p, timeout=5)
out, err, rc = harness.stop(p)
check(seen == "start record fake.start" and rc == 0 and out.startswith("noise\n") and out.endswith("after\n"),
      "wait_attached takes a start record and stop() returns all stdout: %r, %r" % (seen, out))
p = harness.start(["sh", "-c", 'echo "fake: tracing things for 5 s." >&2; exec sleep 30'])
seen = harness.wait_attached(p, timeout=5)
out, err, rc = harness.stop(p)
check(seen and "tracing things" in seen and "tracing things" in err,
      "wait_attached takes a banner on stderr: %r" % seen)
recorded, seen = expect_failure(harness.wait_attached,
                                harness.start(["sh", "-c", "echo working; exec sleep 30"]), timeout=1)
check(seen is None and len(recorded) == 1, "a silent tool fails wait_attached: %s" % recorded)
recorded, seen = expect_failure(harness.wait_attached, harness.start(["sh", "-c", "exit 3"]), timeout=5)
check(seen is None and len(recorded) == 1 and "rc 3" in recorded[0], "a tool that exits fails it: %s" % recorded)

# --- schemas ------------------------------------------------------------------------------
harness.SCHEMA_DIR = os.path.join(WORK, "schema")
os.mkdir(harness.SCHEMA_DIR)
with open(os.path.join(harness.SCHEMA_DIR, "fake.schema.json"), "w") as f:
    json.dump({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
               "required": ["type", "time_ns"],
               "properties": {"type": {"enum": ["fake.start", "fake.report"]},
                              "time_ns": {"type": "integer", "minimum": 0}}}, f)
good = '{"type":"fake.start","time_ns":1}\n{"type":"fake.report","time_ns":2}\n'
recorded, recs = expect_failure(harness.ndjson, good)
check(not recorded and len(recs) == 2 and harness._validated.get("fake") == 2,
      "ndjson validates records by their type's tool: %s" % recorded)
recorded, n = expect_failure(harness.ndjson, '{"type":"fake.report","time_ns":-5}\n{"type":"fake.bogus","time_ns":1}')
check(len(recorded) == 2, "two records breaking the schema, two failures: %s" % recorded)
recorded, n = expect_failure(harness.validate_ndjson, "noschema", ['{"type":"x"}'])
check(not recorded and n == 0, "no schema file: nothing validated, no failure")

# --- golden files -------------------------------------------------------------------------
harness.GOLDEN_DIR = os.path.join(WORK, "golden")
os.environ["UPDATE_GOLDEN"] = "1"
harness.check_golden("report.txt", "line 1\nline 2\n")
del os.environ["UPDATE_GOLDEN"]
recorded, ok = expect_failure(harness.check_golden, "report.txt", "line 1\nline 2\n")
check(ok and not recorded, "golden matches what UPDATE_GOLDEN=1 wrote")
recorded, ok = expect_failure(harness.check_golden, "report.txt", "line 1\nline two\n")
check(not ok and len(recorded) == 1, "a changed line fails the golden check")
recorded, ok = expect_failure(harness.check_golden, "absent.txt", "x")
check(not ok and "UPDATE_GOLDEN" in recorded[0], "a missing golden file fails, naming UPDATE_GOLDEN")

shutil.rmtree(WORK, ignore_errors=True)
finish()
