#!/usr/bin/env python3
"""doctor reports what is true of this machine: each verdict is compared with an
independent probe made here (files the kernel exports, bpftrace trying the feature for
real, readelf on the target), the live check counts every event it generated, -p tells a
workload built with frame pointers from the same workload built without, nothing is left
attached or mounted, and misuse / non-root give one line with exit 2 / 1.

-p's advice per runtime (issue 21) is checked on real targets, and its commands are run
verbatim: a native binary without frame pointers is covered by the default
--unwind dwarf, and one without unwind tables loses exactly the callers doctor says it
will; Debian's python3 shows interpreter frames (-X perf advised from 3.12; a CPython
3.12+ with -X perf, when one is installed, gets its Python functions named); HotSpot
JVMs run as nobody get --jvm-perfmap (default flags: the map it writes is then reported
as used; -Xrs: through the listener HotSpot starts at startup, no signal) or not
(-XX:+DisableAttachMechanism, where it indeed fails); Node.js when installed."""
import glob
import json
import pwd
import re
import stat
import subprocess
import tempfile
import time

from harness import *

DOCTOR = tool("doctor")
require_built(DOCTOR, workload("sleepers"), workload("sleepers_nofp"))

# --- misuse needs no root --------------------------------------------------------------
usage_error([DOCTOR, "-p", "abc"])
usage_error([DOCTOR, "--bogus"])
usage_error([DOCTOR, "5"])
usage_error([DOCTOR, "-p", "999999999"])  # no such process
usage_error([DOCTOR, "--ebpf", "--no-live"])
usage_error([DOCTOR, "--list", "-p", "1"])

# --- doctor --list -j: the tool registry (needs no root) --------------------------------
r = run([DOCTOR, "--list", "-j"])
registry = ndjson(r.stdout, "doctor")
validate("doctor", registry)
MODES = {m["mode"]: m for rec in registry for m in rec["modes"]}
check(r.returncode == 0 and [rec["tool"] for rec in registry] ==
      ["runqlen", "naptime", "offcputime", "lockstat", "pmheld", "threadpool", "doctor", "profile"],
      "doctor --list -j: a doctor.tool record per tool of the suite (%s)" % [rec.get("tool") for rec in registry])
check(MODES.get("profile", {}).get("perf_cpu_clock") and
      "sched:sched_waking" in MODES.get("lockstat", {}).get("tracepoints", []) and
      "sched:sched_waking" in MODES.get("lockstat -U", {}).get("tracepoints", []) and
      "sched:sched_waking" not in MODES.get("lockstat -K", {}).get("tracepoints", ["sched:sched_waking"]),
      "registry: profile samples perf cpu-clock, lockstat and -U attach sched:sched_waking, -K does not")
r = run([DOCTOR, "--list"])
check(r.returncode == 0 and all(re.search(r"^%s: " % re.escape(m), r.stdout, re.M) for m in MODES),
      "doctor --list: a line per mode (%d modes)" % len(MODES))
r = run([DOCTOR, "--help"])
check(r.returncode == 0 and "EXAMPLES:" in r.stdout, "--help exits 0 with examples")

require_root()


def host_mounts():
    with open("/proc/self/mounts") as f:
        return [l.split()[2] for l in f]


def in_private_tracefs(cmd, timeout=30):
    """Runs a shell command with tracefs (and securityfs) mounted in a private mount
    namespace, as the GUIDE says for bpftrace."""
    return subprocess.run(
        ["unshare", "-m", "sh", "-c",
         "mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing; "
         "mountpoint -q /sys/kernel/security || mount -t securityfs none /sys/kernel/security; " + cmd],
        capture_output=True, text=True, timeout=timeout)


def bpftrace_attaches(probe):
    """bpftrace tries the probe for real; True when it attached (it exits after 1 s)."""
    r = in_private_tracefs("exec bpftrace -e '%s { exit(); } interval:s:1 { exit(); }'" % probe, timeout=60)
    print("bpftrace %s -> rc %d %s" % (probe, r.returncode, r.stderr.strip().splitlines()[-1:] if r.stderr else ""))
    return r.returncode == 0


mounts_before = host_mounts()
progs_before = BASELINE_PROGS

# --- doctor -j without arguments (what the doctor runbook runs) --------------------------
t0 = time.monotonic()
r = run([DOCTOR, "-j"], timeout=60)
wall = time.monotonic() - t0
recs = ndjson(r.stdout, "doctor")
validate("doctor", recs)
check(r.returncode == 0, "doctor -j exits 0 on this machine (rc %d, stderr %r)" % (r.returncode, r.stderr.strip()))
check(r.stderr.strip() == "", "nothing on stderr when ready (%r)" % r.stderr.strip()[:300])
check(recs and recs[0]["type"] == "doctor.start" and recs[-1]["type"] == "doctor.summary" and recs[-1]["final"],
      "records: doctor.start first, doctor.summary (final) last")
checks = {c["name"]: c for c in recs if c["type"] == "doctor.check"}
for c in checks.values():
    print("  %-5s %-22s %s%s" % (c["status"], c["name"], c["detail"], ("; fix: " + c["fix"]) if c["fix"] else ""))
summary = recs[-1]
check(summary["verdict"] == "ready" and summary["fail_count"] == 0 and summary["required_failed"] == [],
      "summary: ready, no failure (%s)" % summary)
check(summary["ok_count"] + summary["warn_count"] + summary["fail_count"] + summary["skip_count"] == len(checks),
      "summary counts add up to the %d checks" % len(checks))
for c in checks.values():
    check(c["status"] == "ok" or c["fix"], "%s: a %s has a fix" % (c["name"], c["status"]))


def status(name):
    return checks.get(name, {}).get("status")


# root: we are root with every capability
with open("/proc/self/status") as f:
    capeff = int(re.search(r"^CapEff:\s*([0-9a-f]+)", f.read(), re.M).group(1), 16)
have_caps = all(capeff & (1 << b) for b in (21, 38, 39))
check(status("privileges") == ("ok" if have_caps else "fail"),
      "privileges %s: we are root with CAP_BPF/PERFMON/SYS_ADMIN = %s" % (status("privileges"), have_caps))

# BTF present
btf = os.path.exists("/sys/kernel/btf/vmlinux")
check(status("btf") == ("ok" if btf else "fail"), "btf %s vs /sys/kernel/btf/vmlinux exists = %s" % (status("btf"), btf))

# switch recovery: the fields it needs, as bpftool reads the kernel's BTF
if btf and shutil.which("bpftool"):
    raw = subprocess.run(["bpftool", "btf", "dump", "file", "/sys/kernel/btf/vmlinux", "format", "raw"],
                         capture_output=True, text=True).stdout
    has = all("'%s'" % f in raw for f in ("last_arrival", "pcount", "clock_idle"))
    check(status("switch_recovery") == ("ok" if has else "warn"),
          "switch_recovery %s vs bpftool finds sched_info.last_arrival, pcount and rq.clock_idle = %s"
          % (status("switch_recovery"), has))

# kprobes: the PMU, kallsyms and bpftrace agree; doctor must too
kprobe_pmu = os.path.exists("/sys/bus/event_source/devices/kprobe")
with open("/proc/kallsyms") as f:
    kallsyms_kprobes = any(l.rstrip().endswith(" register_kprobe") for l in f)
kprobes_work = bpftrace_attaches("kprobe:do_nanosleep")
print("independent: kprobe PMU %s, register_kprobe in kallsyms %s, bpftrace kprobe attaches %s" % (
    kprobe_pmu, kallsyms_kprobes, kprobes_work))
check(status("kprobes") == ("ok" if kprobes_work else "warn"),
      "kprobes %s vs bpftrace kprobe:do_nanosleep attaches = %s" % (status("kprobes"), kprobes_work))
check((status("kprobes") == "ok") == (kprobe_pmu or kallsyms_kprobes),
      "kprobes %s vs kprobe PMU or register_kprobe in /proc/kallsyms = %s" % (
          status("kprobes"), kprobe_pmu or kallsyms_kprobes))

# lockdown: the mode from securityfs (mounted privately here), and fentry refused by it
lk = in_private_tracefs("cat /sys/kernel/security/lockdown")
mode = re.search(r"\[(\w+)\]", lk.stdout).group(1) if "[" in lk.stdout else "none"
print("independent: lockdown %r" % lk.stdout.strip())
check(("mode " + mode) in checks["lockdown"]["detail"], "lockdown detail names mode %s (%r)" % (
    mode, checks["lockdown"]["detail"]))
check(status("lockdown") == {"none": "ok", "integrity": "warn", "confidentiality": "fail"}[mode],
      "lockdown status %s for mode %s" % (status("lockdown"), mode))
fentry_works = bpftrace_attaches("kfunc:do_nanosleep")
check(status("fentry") == ("ok" if fentry_works else "warn"),
      "fentry %s vs bpftrace kfunc:do_nanosleep attaches = %s" % (status("fentry"), fentry_works))
if not fentry_works:
    check("refused" in checks["fentry"]["detail"] and "EPERM" in checks["fentry"]["detail"],
          "fentry refusal names the kernel's errno (%r)" % checks["fentry"]["detail"])
# tp_btf is tried for real too (on this kernel it loads and attaches under lockdown=integrity)
check(status("tp_btf") == "ok" and "loaded and attached" in checks["tp_btf"]["detail"] or
      status("tp_btf") == "warn" and re.search(r"E[A-Z]+ \(", checks["tp_btf"]["detail"]),
      "tp_btf: attached, or refused naming the errno (%r)" % checks["tp_btf"]["detail"])

# uprobes: the PMU exists, and the live check's uprobe counted every call
uprobe_pmu = os.path.exists("/sys/bus/event_source/devices/uprobe/type")
check(status("uprobes") == ("ok" if uprobe_pmu else "warn"),
      "uprobes %s vs uprobe PMU exists = %s" % (status("uprobes"), uprobe_pmu))

# tracefs: the host's state is reported, and doctor left nothing mounted
host_tracefs = "tracefs" in mounts_before
check(("not mounted on the host" in checks["tracefs"]["detail"]) == (not host_tracefs) and status("tracefs") == "ok",
      "tracefs detail matches the host (host has tracefs: %s; %r)" % (host_tracefs, checks["tracefs"]["detail"]))
check(sorted(host_mounts()) == sorted(mounts_before), "doctor left no mount on the host")

# tools: lockstat -K needs lock:contention_begin, offcputime sched_switch
ls = in_private_tracefs("ls -d /sys/kernel/tracing/events/lock/contention_begin "
                        "/sys/kernel/tracing/events/sched/sched_switch 2>/dev/null")
have_lock_tp = "contention_begin" in ls.stdout
check(status("lockstat -K") == ("ok" if have_lock_tp else "warn"),
      "tool lockstat -K %s vs lock:contention_begin exists = %s" % (status("lockstat -K"), have_lock_tp))
check(status("offcputime") == ("ok" if "sched_switch" in ls.stdout else "warn"),
      "tool offcputime %s vs sched:sched_switch exists" % status("offcputime"))
# one row per mode of the registry; profile needs the cpu-clock event the perf_events
# check opened, lockstat -U the sched_waking tracepoint its wakers come from
rows = {c["name"] for c in recs if c["type"] == "doctor.check" and c["category"] == "tools"}
check(rows == set(MODES), "tool rows are the registry's modes (missing %s, extra %s)" % (
    sorted(set(MODES) - rows), sorted(rows - set(MODES))))
check(status("profile") == ("ok" if status("perf_events") == "ok" else "warn"),
      "tool profile %s vs perf_events %s" % (status("profile"), status("perf_events")))
waking = in_private_tracefs("ls -d /sys/kernel/tracing/events/sched/sched_waking "
                            "/sys/kernel/tracing/events/syscalls/sys_enter_futex 2>/dev/null").stdout.split()
check(status("lockstat -U") == ("ok" if len(waking) == 2 else "warn"),
      "tool lockstat -U %s vs sched_waking and sys_enter_futex exist (%s)" % (status("lockstat -U"), waking))

# the live check counted exactly the events it generated
def numbers(name):
    return [int(x) for x in re.findall(r"\d+", checks[name]["detail"])]


n = numbers("tracepoint_events")  # [counted, made] (after "sys_enter_getppid")
counted, made = n[-2], n[-1]
check(status("tracepoint_events") == "ok" and counted == made == 1000,
      "live: tracepoint counted %d of %d getppid() calls (1000 made)" % (counted, made))
d = numbers("event_delivery")  # delivered, of, lost, duplicated
check(status("event_delivery") == "ok" and d[0] == d[1] == 1000 and d[2] == 0 and d[3] == 0,
      "live: perf buffer delivered %d of %d, lost %d, duplicated %d" % tuple(d[:4]))
s = numbers("raw_tracepoint_events")  # counted, the kernel's count, sleeps
check(status("raw_tracepoint_events") == "ok" and s[2] == 50 and s[0] == s[1] and s[1] >= 25,
      "live: sched_switch counted %d of the kernel's %d switches for %d sleeps" % tuple(s[:3]))
if uprobe_pmu:
    u = numbers("uprobe_events")
    check(status("uprobe_events") == "ok" and u[-2] == u[-1] == 1000,
          "live: uprobe counted %d of %d libc getppid() calls" % (u[-2], u[-1]))
check(summary["data_quality"]["lost_events"] == 0, "data quality: no lost events")
ms = numbers("live_check_time")  # compile, attach and events, whole
print("live check: compile %d ms, attach and events %d ms, whole %d ms; doctor -j wall %.2f s" % (
    ms[0], ms[1], ms[2], wall))
check(ms[1] < 1000, "live check: attach and events took under 1 s (%d ms)" % ms[1])
check(ms[0] + ms[1] <= ms[2] + 1, "live check: the parts add up to the whole (%s)" % ms)
left = leftover_bpf_programs()
check(left == [] or left is None, "no BPF program outlived doctor (%s)" % left)

# text mode: one line per check, the summary line
r = run([DOCTOR, "--no-live"])
lines = r.stdout.splitlines()
check(r.returncode == 0 and lines[-2].endswith("this machine can be traced"),
      "text: summary line says the machine can be traced (%r)" % lines[-2:])
check(all(re.match(r"^(ok|warn|fail|skip)\s+\S", l) for l in lines[:-2]),
      "text: every check line starts with its status")
check(any(l.startswith("skip  live_check") for l in lines), "text: --no-live skips the live check")


# --- the compiled-object cache: what it holds, and why it is not used ---------------------
def cache_check(env):
    r = subprocess.run([DOCTOR, "-j", "--no-live"], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, **env))
    found = [c for c in ndjson(r.stdout, "doctor") if c["type"] == "doctor.check" and c["name"] == "object_cache"]
    return found[0] if found else {"status": None, "detail": r.stderr.strip()}


with tempfile.TemporaryDirectory() as tmp:
    cdir = os.path.join(tmp, "cache")
    primed = subprocess.run([tool("runqlen"), "-d", "0.2"], capture_output=True, text=True, timeout=60,
                            env=dict(os.environ, BPFDIAG_CACHE_DIR=cdir))
    files = [f for f in os.listdir(cdir) if f.endswith(".bpfobj")] if os.path.isdir(cdir) else []
    size = sum(os.path.getsize(os.path.join(cdir, f)) for f in files)
    c = cache_check({"BPFDIAG_CACHE_DIR": cdir})
    check(primed.returncode == 0 and len(files) == 1 and c["status"] == "ok" and
          ("%s: 1 compiled program, %d kB" % (cdir, (size + 999) // 1000)) in c["detail"],
          "object_cache: one runqlen start left 1 object (%d bytes) in a fresh cache dir, doctor says so (%r)"
          % (size, c["detail"]))
    os.chmod(cdir, 0o777)
    c = cache_check({"BPFDIAG_CACHE_DIR": cdir})
    check(c["status"] == "warn" and "writable by group or others" in c["detail"] and c.get("fix"),
          "object_cache: a world-writable cache dir is a warning with a fix (%r)" % c["detail"])
    c = cache_check({"BPFDIAG_CACHE_DIR": cdir, "BPFDIAG_CACHE": "0"})
    check(c["status"] == "skip" and "BPFDIAG_CACHE=0" in c["detail"],
          "object_cache: BPFDIAG_CACHE=0 is reported as off (%r)" % c["detail"])


# --- -p: frame pointers and symbols of a target --------------------------------------------
def readelf_has_symtab(path):
    r = run(["readelf", "-S", "-W", path])
    return " .symtab " in r.stdout


def target_checks(name):
    wl = start([workload(name)], stdin=subprocess.PIPE)
    ready = wl.stdout.readline()
    check('"ready"' in ready, "%s is ready (%r)" % (name, ready.strip()))
    try:
        r = run([DOCTOR, "-j", "--no-live", "-p", str(wl.pid)], timeout=60)
    finally:
        wl.kill()
        wl.communicate()
    recs = ndjson(r.stdout, "doctor")
    check(r.returncode == 0, "doctor -p %s exits 0 (rc %d, %r)" % (name, r.returncode, r.stderr.strip()))
    t = {c["name"]: c for c in recs if c["type"] == "doctor.check" and c["category"] == "target"}
    check(all(c["pid"] == wl.pid for c in t.values()), "%s: target checks carry its pid" % name)
    for c in t.values():
        print("  %-5s %-22s %s" % (c["status"], c["name"], c["detail"]))
    return t


fp = target_checks("sleepers")
nofp = target_checks("sleepers_nofp")
check(fp["exe_frame_pointers"]["status"] == "ok" and "frame pointers yes" in fp["exe_frame_pointers"]["detail"],
      "-fno-omit-frame-pointer build: frame pointers yes (%r)" % fp["exe_frame_pointers"]["detail"])
# no frame pointers, but .eh_frame: our stack tools' default with -p (--unwind dwarf) covers it
check(nofp["exe_frame_pointers"]["status"] == "ok" and "frame pointers no" in nofp["exe_frame_pointers"]["detail"] and
      "default --unwind dwarf" in nofp["exe_frame_pointers"]["detail"],
      "-fomit-frame-pointer build: frame pointers no, covered by the default --unwind dwarf (%r)"
      % nofp["exe_frame_pointers"]["detail"])
# symbols: as readelf sees them
for label, t, path in (("exe", fp, workload("sleepers")),):
    has = readelf_has_symtab(path)
    check((t["exe_symbols"]["status"] == "ok") == has,
          "%s symbols %s vs readelf .symtab = %s" % (label, t["exe_symbols"]["status"], has))
libc_path = re.match(r"(\S+):", fp["libc_symbols"]["detail"]).group(1)
libc_symtab = readelf_has_symtab(libc_path)
print("independent: %s has .symtab = %s" % (libc_path, libc_symtab))
if libc_symtab:
    check(fp["libc_symbols"]["status"] == "ok", "libc symbols ok with a .symtab")
else:
    check("stripped" in fp["libc_symbols"]["detail"], "libc reported stripped, as readelf sees it (%r)" % (
        fp["libc_symbols"]["detail"]))
# Debian's libc has no frame pointers (GUIDE); objdump says the same of its functions
check(fp["libc_frame_pointers"]["status"] in ("warn", "ok"), "libc frame pointer verdict given")

# --- -p: what to run, per runtime (issue 21) ---------------------------------------------
# Each target's advice is compared with what is true of it (readelf, the interpreter's own
# version, /proc/PID/status, the JVM's /tmp), and its commands are run verbatim (the
# suite's tool from BIN, stopped with SIGINT as a user's Ctrl-C) to see that they do
# what doctor says they will.
def doctor_p(pid, what):
    """doctor -j --no-live -p PID: its target checks by name (every record validated)."""
    r = run([DOCTOR, "-j", "--no-live", "-p", str(pid)], timeout=60)
    recs = ndjson(r.stdout, "doctor")
    check(r.returncode == 0, "%s: doctor -p exits 0 (rc %d, %r)" % (what, r.returncode, r.stderr.strip()[-300:]))
    t = {c["name"]: c for c in recs if c["type"] == "doctor.check" and c["category"] == "target"}
    print("doctor -p %d (%s):" % (pid, what))
    for c in t.values():
        print("  %-5s %-24s %s%s" % (c["status"], c["name"], c["detail"], ("; fix: " + c["fix"]) if c["fix"] else ""))
        for cmd in c.get("commands", []):
            print("        run: " + cmd)
    unfixed = [c["name"] for c in t.values() if c["status"] in ("warn", "fail") and not c["fix"]]
    check(t and not unfixed, "%s: %d target checks, every warning with a fix (none: %s)" % (what, len(t), unfixed))
    return t


def text_of(t):
    return " ".join(c["detail"] + " " + c["fix"] for c in t.values())


def runtime_of(t):
    return t.get("runtime", {"status": None, "detail": "", "fix": "", "commands": []})


def stack_cmds(pid, extra=""):
    return ["offcputime -p %d%s" % (pid, extra), "profile -p %d%s" % (pid, extra)]


def run_advised(cmd, secs, poke=None):
    """Runs a command doctor gave, verbatim, for `secs` s after it attached; poke() is
    called every 50 ms meanwhile. Returns (stdout, stderr, rc)."""
    argv = cmd.split()
    p = start([tool(argv[0])] + argv[1:])
    wait_attached(p, timeout=30)
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline and p.poll() is None:
        if poke:
            poke()
        time.sleep(0.05)
    return stop(p, timeout=60)


def in_syscall(pid, nr):
    """True while thread `pid` is blocked in system call `nr` (/proc/PID/syscall)."""
    try:
        with open("/proc/%d/syscall" % pid) as f:
            return f.read().split()[0] == str(nr)
    except (OSError, IndexError):
        return False


def readelf_sections(path):
    return run(["readelf", "-S", "-W", path]).stdout


def remove_jvm_files(pid):
    for f in ("/tmp/perf-%d.map", "/tmp/.java_pid%d", "/tmp/.attach_pid%d"):
        if os.path.lexists(f % pid):
            os.unlink(f % pid)


# A native workload built without frame pointers (build/workloads): covered by .eh_frame.
wl = subprocess.Popen([workload("unwind_cpu_nofp"), "1", "1", "-1"], stdin=subprocess.PIPE,
                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    wait_for(lambda: in_syscall(wl.pid, 0), 10, "unwind_cpu_nofp waits at its start gate (read on stdin)")
    t = doctor_p(wl.pid, "unwind_cpu_nofp")
finally:
    wl.kill()
    wl.wait()
has_eh = " .eh_frame " in readelf_sections(workload("unwind_cpu_nofp"))
fp = t.get("exe_frame_pointers", {"status": None, "detail": ""})
rt = runtime_of(t)
check(rt["status"] == "ok" and "native code" in rt["detail"] and rt["commands"] == stack_cmds(wl.pid),
      "unwind_cpu_nofp: native code, run %s (%s %r)" % (rt["commands"], rt["status"], rt["detail"][:80]))
check(has_eh and fp["status"] == "ok" and "frame pointers no" in fp["detail"] and
      "default --unwind dwarf" in fp["detail"] and "no rebuild needed" in fp["detail"],
      "unwind_cpu_nofp (-fomit-frame-pointer, .eh_frame per readelf: %s): covered by the default --unwind dwarf "
      "(%s %r)" % (has_eh, fp["status"], fp["detail"]))
check("-fno-omit-frame-pointer" not in text_of(t), "unwind_cpu_nofp: nobody is told to rebuild with frame pointers")

# The same chain of C functions without frame pointers, built with and without unwind
# tables: doctor says the first is covered and the second loses the callers of its
# functions; offcputime, run as doctor says, shows exactly that.
CHAIN_C = r'''
#include <unistd.h>
#define LEVEL(name, next) __attribute__((noinline)) long name(char* up) { char buf[64]; buf[0] = up ? up[0] : 1; \
  long r = next(buf); __asm__ volatile("" ::"r"(buf) : "memory"); return r + buf[1]; }
__attribute__((noinline)) long blocker(char* up) { char buf[64]; buf[0] = up[0]; long r = read(0, buf, 1);
  __asm__ volatile("" ::"r"(buf) : "memory"); return r + buf[1]; }
LEVEL(level1, blocker) LEVEL(level2, level1) LEVEL(level3, level2) LEVEL(level4, level3) LEVEL(level5, level4)
LEVEL(level6, level5)
int main(void) { long s = 0; for (int i = 0; i < 1000000; i++) s += level6(0); return (int)s; }
'''
cc = need("gcc", "gcc")
CHAIN = ["level%d" % i for i in range(1, 7)] + ["main"]
with tempfile.TemporaryDirectory() as d:
    with open(os.path.join(d, "chain.c"), "w") as f:
        f.write(CHAIN_C)
    for name, flags in (("chain_cfi", []), ("chain_nocfi", ["-fno-asynchronous-unwind-tables", "-fno-unwind-tables"])):
        path = os.path.join(d, name)
        subprocess.run([cc, "-O2", "-fomit-frame-pointer", *flags, "-o", path, os.path.join(d, "chain.c")],
                       check=True, capture_output=True, timeout=60)
        proc = subprocess.Popen([path], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def poke():
            proc.stdin.write(b"x")
            proc.stdin.flush()

        try:
            wait_for(lambda: in_syscall(proc.pid, 0), 10, "%s blocks in read()" % name)
            t = doctor_p(proc.pid, name)
            cmds = runtime_of(t)["commands"]
            out, err, rc = run_advised(cmds[0], 1.5, poke) if cmds else ("", "", None)
        finally:
            proc.kill()
            proc.wait()
        fp = t.get("exe_frame_pointers", {"status": None, "detail": "", "fix": ""})
        frames = set(l.strip() for l in out.splitlines())
        print("%s: %s run verbatim: blocker %s, callers named %s, [no CFI] %s" % (
            name, cmds[:1], "blocker" in frames, [c for c in CHAIN if c in frames], "[no CFI]" in frames))
        check(rc == 0 and "blocker" in frames, "%s: `%s` (doctor's command) ran and saw blocker() wait (rc %s, %r)"
              % (name, cmds[:1], rc, err.strip()[-200:]))
        if name == "chain_cfi":
            check(fp["status"] == "ok" and "no rebuild needed" in fp["detail"],
                  "%s: no frame pointers, unwind tables: covered (%s %r)" % (name, fp["status"], fp["detail"]))
            check(all(c in frames for c in CHAIN), "%s: as doctor says, the whole chain is there: %s"
                  % (name, [c for c in CHAIN if c not in frames] or "all"))
        else:
            check(fp["status"] == "warn" and "[no CFI]" in fp["fix"] and "up to main" in fp["fix"],
                  "%s: no frame pointers, no unwind tables: warned that callers are lost (%s %r)"
                  % (name, fp["status"], fp["fix"]))
            check("[no CFI]" in frames and not any(c in frames for c in CHAIN),
                  "%s: as doctor says, the stack ends at [no CFI] after blocker, no caller named (%s)"
                  % (name, [c for c in CHAIN if c in frames]))

# CPython: Debian's python3, and a CPython 3.12+ with perf support when one is installed.
PY_PROG = "import time\ndef napper():\n    while True:\n        time.sleep(0.05)\nprint('ready', flush=True)\nnapper()\n"


def python_version(exe, *flags):
    r = run([exe, *flags, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"], timeout=30)
    return tuple(int(x) for x in r.stdout.split(".")) if r.returncode == 0 and r.stdout.strip() else None


def start_python(exe, *flags):
    p = subprocess.Popen([exe, *flags, "-c", PY_PROG], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         cwd="/")
    check("ready" in p.stdout.readline(), "%s %s is running" % (exe, " ".join(flags)))
    return p


def python_target(exe, *flags):
    p = start_python(exe, *flags)
    try:
        if "perf" in flags:
            wait_for(lambda: os.path.exists("/tmp/perf-%d.map" % p.pid), 10, "%s -X perf wrote its perf map" % exe)
        t = doctor_p(p.pid, "%s %s" % (exe, " ".join(flags)))
        cmds = runtime_of(t)["commands"]
        out, err, rc = run_advised(cmds[0], 1.0) if cmds else ("", "", None)
        return p.pid, t, out
    finally:
        p.kill()
        p.wait()
        if os.path.exists("/tmp/perf-%d.map" % p.pid):
            os.unlink("/tmp/perf-%d.map" % p.pid)


if os.path.exists("/usr/bin/python3"):
    v = python_version("/usr/bin/python3")
    pid, t, out = python_target("/usr/bin/python3")
    rt = runtime_of(t)
    vs = "%d.%d.%d" % v
    check(rt["commands"] == stack_cmds(pid) and ("CPython " + vs) in rt["detail"],
          "Debian's python3 %s: CPython %s named, run %s (%r)" % (vs, vs, rt["commands"], rt["detail"][:90]))
    if v >= (3, 12):
        check(rt["status"] == "warn" and "-X perf" in rt["fix"], "python3 %s: -X perf advised (%r)" % (vs, rt["fix"]))
    else:
        check(rt["status"] == "warn" and "_PyEval_EvalFrameDefault" in rt["detail"] and "3.12+" in rt["fix"],
              "python3 %s: Python code shows as interpreter frames, names need 3.12+ (%r; %r)"
              % (vs, rt["detail"], rt["fix"]))
        check("_PyEval_EvalFrameDefault" in out and "napper" not in out,
              "python3 %s: `%s` (doctor's command) shows the interpreter's frames, as doctor says"
              % (vs, rt["commands"][:1]))
    # stripped (no .symtab per readelf): its static functions show as [unknown] (python3.11+0x...)
    exe_name = os.path.basename(os.path.realpath("/usr/bin/python3"))
    if " .symtab " not in readelf_sections(os.path.realpath("/usr/bin/python3")):
        es = t.get("exe_symbols", {"status": None, "fix": ""})
        check(es["status"] in ("warn", "ok") and
              (es["status"] == "ok" or ("[unknown] (%s+0x...)" % exe_name) in es["fix"]),
              "python3 stripped: doctor names the dbgsym way or a debug file is there (%r)" % es["fix"])
        if es["status"] == "warn":
            check(("[unknown] (%s+0x" % exe_name) in out, "python3 stripped: its unexported functions show as "
                  "[unknown] (%s+0x...) in `%s`, as doctor says" % (exe_name, rt["commands"][0]))
    check("-fno-omit-frame-pointer" not in text_of(t), "python3: nobody is told to rebuild with frame pointers")
    efp = t.get("exe_frame_pointers", {})
    check(efp.get("status") == "ok" and " .eh_frame " in readelf_sections(os.path.realpath("/usr/bin/python3")),
          "python3's interpreter (no frame pointers) is covered by its .eh_frame (%r)" % efp.get("detail"))
else:
    print("note: no /usr/bin/python3: Debian's python3 not checked")

def perf_trampoline_works(exe):
    """`exe -X perf` activates its perf trampoline (it writes a perf map, removed here)."""
    p = subprocess.Popen([exe, "-X", "perf", "-c", "import sys; print(sys.is_stack_trampoline_active())"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    out = p.communicate(timeout=30)[0]
    if os.path.exists("/tmp/perf-%d.map" % p.pid):
        os.unlink("/tmp/perf-%d.map" % p.pid)
    return out.strip() == "True"


py312 = None
for cand in sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[2-9]*/bin/python3.1[2-9]")) +
                   glob.glob("/usr/bin/python3.1[2-9]") + glob.glob("/usr/local/bin/python3.1[2-9]")):
    if (python_version(cand) or (0,)) >= (3, 12) and perf_trampoline_works(cand):
        py312 = cand
        break
if py312:
    v = python_version(py312)
    pid, t, out = python_target(py312)
    rt = runtime_of(t)
    check(rt["status"] == "warn" and ("`%s -X perf" % os.path.basename(py312)) in rt["fix"] and
          "PYTHONPERFSUPPORT=1" in rt["fix"] and ("CPython %d.%d.%d" % v) in rt["detail"],
          "%s (%d.%d.%d, perf trampoline): -X perf advised (%r)" % ((py312,) + v + (rt["fix"],)))
    pid, t, out = python_target(py312, "-X", "perf")
    rt = runtime_of(t)
    check(rt["status"] == "ok" and ("/tmp/perf-%d.map" % pid) in rt["detail"] and "Python functions (py::" in rt["detail"]
          and rt["commands"] == stack_cmds(pid),
          "%s -X perf: its perf map is used (%s %r)" % (py312, rt["status"], rt["detail"]))
    check("py::napper" in out, "%s -X perf: `%s` (doctor's command) names the Python function napper"
          % (py312, rt["commands"][:1]))
else:
    print("note: no CPython 3.12+ with perf support installed: -X perf not checked on a real interpreter")

# HotSpot JVMs as nobody, as test_threadpool_jvm runs them: default flags, -Xrs, and
# -XX:+DisableAttachMechanism.
if shutil.which("java") and shutil.which("javac"):
    jver = re.search(r'version "([^"]+)"', run(["java", "-version"]).stderr)
    jver = jver.group(1) if jver else "?"
    jd = tempfile.mkdtemp(prefix="doctor-jvm-")
    os.chmod(jd, 0o755)
    subprocess.run(["javac", "-d", jd, os.path.join(SRC, "tests/workloads/JvmPool.java")], check=True,
                   capture_output=True, timeout=120)

    def start_jvm(*flags):
        j = subprocess.Popen(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "java", "-Xmx64m",
                              *flags, "-cp", jd, "JvmPool", "--port", "0", "--workers", "2"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        ready = json.loads(j.stdout.readline())
        return j, ready["pid"]

    def sigquit_caught(pid):
        with open("/proc/%d/status" % pid) as f:
            return bool((int(re.search(r"^SigCgt:\s*([0-9a-f]+)", f.read(), re.M).group(1), 16) >> 2) & 1)

    def attach_socket(pid):
        try:
            st = os.lstat("/tmp/.java_pid%d" % pid)
        except OSError:
            return False
        return stat.S_ISSOCK(st.st_mode) and st.st_uid == pwd.getpwnam("nobody").pw_uid

    try:
        # default flags: it handles SIGQUIT, so --jvm-perfmap starts its attach listener
        j, pid = start_jvm()
        try:
            caught = sigquit_caught(pid)
            t = doctor_p(pid, "JVM, default flags")
            rt = runtime_of(t)
            check(caught and rt["status"] == "warn" and ("JDK " + jver) in rt["detail"] and
                  "it handles SIGQUIT" in rt["detail"] and rt["commands"] == stack_cmds(pid, " --jvm-perfmap"),
                  "JVM (JDK %s, SIGQUIT caught per SigCgt: %s): run %s (%r)" % (jver, caught, rt["commands"], rt["detail"]))
            es = t.get("exe_symbols", {})
            check(es.get("status") == "ok" and "dbgsym" not in es.get("fix", "") + es.get("detail", ""),
                  "JVM: the launcher's -dbgsym package is not recommended (%r)" % es.get("detail"))
            check(t.get("libjvm_symbols", {}).get("status") == "ok" and
                  t.get("libjvm_frame_pointers", {}).get("status") == "ok",
                  "JVM: libjvm.so checked: symbols and unwind rows (%s, %s)" % (
                      t.get("libjvm_symbols", {}).get("detail"), t.get("libjvm_frame_pointers", {}).get("detail")))
            out, err, rc = run_advised(rt["commands"][0], 0.5)
            check(rc == 0 and "--jvm-perfmap" not in err and os.path.exists("/tmp/perf-%d.map" % pid),
                  "JVM: `%s` (doctor's command) got its perf map (rc %s, %r)" % (rt["commands"][0], rc, err.strip()[-200:]))
            rt = runtime_of(doctor_p(pid, "JVM after --jvm-perfmap"))
            check(rt["status"] == "ok" and ("/tmp/perf-%d.map (" % pid) in rt["detail"] and
                  "our tools read it" in rt["detail"] and "attach listener is up" in rt["detail"],
                  "JVM: doctor now reports its perf map as used and its listener up (%s %r)" % (rt["status"], rt["detail"]))
        finally:
            j.kill()
            j.wait()
            remove_jvm_files(pid)
        # -Xrs: no SIGQUIT handler, but HotSpot then starts its attach listener at startup
        j, pid = start_jvm("-Xrs")
        try:
            caught, sock = sigquit_caught(pid), attach_socket(pid)
            rt = runtime_of(doctor_p(pid, "JVM -Xrs"))
            check(not caught and sock and rt["commands"] == stack_cmds(pid, " --jvm-perfmap") and
                  "attach listener is up" in rt["detail"] and "no signal sent" in rt["detail"],
                  "JVM -Xrs (SIGQUIT caught: %s, socket: %s): --jvm-perfmap through the listener (%r)"
                  % (caught, sock, rt["detail"]))
            out, err, rc = run_advised(rt["commands"][0], 0.5)
            check(rc == 0 and os.path.exists("/tmp/perf-%d.map" % pid) and j.poll() is None,
                  "JVM -Xrs: `%s` got its perf map and the JVM lives (rc %s, %r)" % (rt["commands"][0], rc, err.strip()[-200:]))
        finally:
            j.kill()
            j.wait()
            remove_jvm_files(pid)
        # -XX:+DisableAttachMechanism: --jvm-perfmap is not advised, and would fail
        j, pid = start_jvm("-XX:+DisableAttachMechanism")
        try:
            rt = runtime_of(doctor_p(pid, "JVM -XX:+DisableAttachMechanism"))
            check(rt["status"] == "warn" and rt["commands"] == stack_cmds(pid) and
                  "-XX:+DisableAttachMechanism" in rt["fix"],
                  "JVM -XX:+DisableAttachMechanism: no --jvm-perfmap advised (%s; %r)" % (rt["commands"], rt["fix"]))
            out, err, rc = run_advised("offcputime -p %d --jvm-perfmap" % pid, 0.2)
            check("warning: --jvm-perfmap" in err and not os.path.exists("/tmp/perf-%d.map" % pid),
                  "JVM -XX:+DisableAttachMechanism: --jvm-perfmap indeed fails (%r)" % err.strip()[-200:])
        finally:
            j.kill()
            j.wait()
            remove_jvm_files(pid)
    finally:
        shutil.rmtree(jd, ignore_errors=True)
else:
    skip_reason = "java/javac not installed (scripts/install-deps installs openjdk-17-jdk-headless)"
    check(not CI, "JVM advice: " + skip_reason)
    print("note: " + skip_reason)

# Node.js, when installed (scripts/install-deps does not install it)
if shutil.which("node"):
    for flags in ([], ["--perf-basic-prof"]):
        n = subprocess.Popen(["node", *flags, "-e", "setInterval(() => {}, 1000); console.log('ready')"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd="/")
        try:
            check("ready" in n.stdout.readline(), "node %s is running" % " ".join(flags))
            if flags:
                wait_for(lambda: os.path.exists("/tmp/perf-%d.map" % n.pid), 10, "node --perf-basic-prof wrote its map")
            rt = runtime_of(doctor_p(n.pid, "node " + " ".join(flags)))
        finally:
            n.kill()
            n.wait()
            if os.path.exists("/tmp/perf-%d.map" % n.pid):
                os.unlink("/tmp/perf-%d.map" % n.pid)
        if flags:
            check(rt["status"] == "ok" and ("/tmp/perf-%d.map" % n.pid) in rt["detail"],
                  "node --perf-basic-prof: its perf map is used (%r)" % rt["detail"])
        else:
            check(rt["status"] == "warn" and "node --perf-basic-prof" in rt["fix"] and
                  rt["commands"] == stack_cmds(n.pid), "node: --perf-basic-prof advised (%r)" % rt["fix"])
else:
    check(not CI, "Node.js advice: node not installed (scripts/install-deps installs nodejs)")
    print("note: node not installed: Node.js advice not checked")

# --- without root: one line, exit 1 ----------------------------------------------------------
not_root_error([DOCTOR, "--no-live"])
not_root_error([DOCTOR, "-j"])
finish()
