"""BPF objects a process holds (from /proc/PID/fd and fdinfo) and the BPF programs
that outlive the process that loaded them (BPF_PROG_GET_NEXT_ID). Part of harness.py."""
import ctypes
import errno
import json
import os
import re
import shutil
import subprocess
import time

_FD_KINDS = {"anon_inode:bpf-link": "link", "anon_inode:[perf_event]": "perf_event",
             "anon_inode:bpf-prog": "prog", "anon_inode:bpf-map": "map"}


def bpf_fds(pid):
    """BPF objects process `pid` holds, from /proc/PID/fd and fdinfo: counts of
    link, perf_event, prog and map fds, and the ids of the programs behind its prog and
    link fds ("prog_ids"). Empty counts when the process is gone."""
    out = {"link": 0, "perf_event": 0, "prog": 0, "map": 0, "prog_ids": set()}
    try:
        fds = os.listdir("/proc/%d/fd" % pid)
    except OSError:
        return out
    for fd in fds:
        try:
            kind = _FD_KINDS.get(os.readlink("/proc/%d/fd/%s" % (pid, fd)))
            if kind is None:
                continue
            out[kind] += 1
            if kind in ("prog", "link"):
                with open("/proc/%d/fdinfo/%s" % (pid, fd)) as f:
                    m = re.search(r"^prog_id:\s*(\d+)", f.read(), re.M)
                if m:
                    out["prog_ids"].add(int(m.group(1)))
        except OSError:
            continue  # closed meanwhile
    return out


_BPF_PROG_GET_NEXT_ID = 11
_NR_BPF = {"x86_64": 321, "aarch64": 280}.get(os.uname().machine)


def bpf_prog_ids():
    """Ids of every BPF program loaded in the kernel (BPF_PROG_GET_NEXT_ID; needs root).
    None when they cannot be listed."""
    if _NR_BPF is None or os.geteuid() != 0:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    attr = (ctypes.c_uint32 * 4)()  # start_id, next_id, open_flags
    ids = set()
    while True:
        if libc.syscall(_NR_BPF, _BPF_PROG_GET_NEXT_ID, ctypes.byref(attr), ctypes.sizeof(attr)) != 0:
            return ids if ctypes.get_errno() == errno.ENOENT else None
        ids.add(attr[1])
        attr[0] = attr[1]


def held_prog_ids():
    """Program ids some live process holds a prog or link fd for."""
    held = set()
    for d in os.listdir("/proc"):
        if d.isdigit():
            held |= bpf_fds(int(d))["prog_ids"]
    return held


def _describe(ids):
    if shutil.which("bpftool"):
        r = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True)
        try:
            names = {p["id"]: "%s %s" % (p.get("type"), p.get("name", "?")) for p in json.loads(r.stdout)}
            return ["prog %d (%s)" % (i, names.get(i, "gone")) for i in sorted(ids)]
        except (ValueError, KeyError, TypeError):
            pass
    return ["prog %d" % i for i in sorted(ids)]


BASELINE_PROGS = bpf_prog_ids()  # when the test started


def leftover_bpf_programs(ours=None, timeout=3.0):
    """BPF programs that outlived their process: of `ours` (prog ids seen in a tool's
    fds while it ran), those still loaded; without `ours`, programs loaded since this
    test started that no live process holds. The kernel frees a program shortly after
    its last fd closes, so this waits up to `timeout` s for them to go. Returns a list
    of descriptions (empty: nothing left); None when programs cannot be listed."""
    deadline = time.monotonic() + timeout
    while True:
        now = bpf_prog_ids()
        if now is None or BASELINE_PROGS is None:
            return None
        left = (now & set(ours)) if ours is not None else (now - BASELINE_PROGS - held_prog_ids())
        if not left or time.monotonic() >= deadline:
            return _describe(left) if left else []
        time.sleep(0.05)


def leftover_probe_events():
    """Old name (it read uprobe_events, which libbcc's perf-PMU uprobes never touch):
    BPF programs loaded since the test started that no live process holds."""
    left = leftover_bpf_programs()
    return left or []
