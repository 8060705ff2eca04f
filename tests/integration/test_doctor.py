#!/usr/bin/env python3
"""doctor reports what is true of this machine: each verdict is compared with an
independent probe made here (files the kernel exports, bpftrace trying the feature for
real, readelf on the target), the live check counts every event it generated, -p tells a
workload built with frame pointers from the same workload built without, nothing is left
attached or mounted, and misuse / non-root give one line with exit 2 / 1."""
import re
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
check(nofp["exe_frame_pointers"]["status"] == "warn" and "frame pointers no" in nofp["exe_frame_pointers"]["detail"],
      "-fomit-frame-pointer build: frame pointers no (%r)" % nofp["exe_frame_pointers"]["detail"])
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

# --- without root: one line, exit 1 ----------------------------------------------------------
not_root_error([DOCTOR, "--no-live"])
not_root_error([DOCTOR, "-j"])
finish()
