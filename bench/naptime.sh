#!/usr/bin/env bash
# Benchmark naptime against a bpftrace script that traces the same four tracepoints
# and prints the same per-sleep facts (parent, pid, comm, requested, slept, ret):
#   - startup: process start -> attached (naptime's banner; bpftrace's BEGIN line,
#     which runs once every probe is attached), median of RUNS
#   - peak RSS of the tracer process (ru_maxrss), median of RUNS
#   - cost per traced sleep: N zero-length clock_nanosleep calls (sleepers --storm)
#     untraced vs traced by each tool (output to a pipe that is drained)
# Prints each measurement and the ratio naptime / bpftrace from the same run.
# Needs root. Env: BIN (default build/bin), WORKLOADS (default build/workloads),
# RUNS (default 5), STORM (default 50000).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/bin}
WORKLOADS=${WORKLOADS:-build/workloads}
RUNS=${RUNS:-5}
STORM=${STORM:-50000}

if [[ $EUID -ne 0 ]]; then
  echo "bench/naptime.sh: needs root (loads BPF programs)" >&2
  exit 1
fi
for f in "$BIN/naptime" "$WORKLOADS/sleepers"; do
  [[ -x $f ]] || { echo "bench/naptime.sh: $f not built (cmake --build build --target naptime sleepers)" >&2; exit 1; }
done
if ! command -v bpftrace >/dev/null; then
  echo "installing bpftrace (peer)..." >&2
  apt-get install -y bpftrace >/dev/null 2>&1 || echo "bench/naptime.sh: could not install bpftrace; peer results will be missing" >&2
fi

BT_SCRIPT=$(mktemp /tmp/naptime-bench-XXXXXX.bt)
trap 'rm -f "$BT_SCRIPT"' EXIT
cat >"$BT_SCRIPT" <<'EOF'
BEGIN { printf("READY\n"); }
tracepoint:syscalls:sys_enter_nanosleep, tracepoint:syscalls:sys_enter_clock_nanosleep
{
  @start[tid] = nsecs;
  @req[tid] = args->rqtp->tv_sec * 1000000000 + args->rqtp->tv_nsec;
}
tracepoint:syscalls:sys_exit_nanosleep, tracepoint:syscalls:sys_exit_clock_nanosleep
/@start[tid]/
{
  time("%H:%M:%S ");
  printf("%-6d %-16s %-6d %-16s %d %d %d\n", curtask->real_parent->tgid,
         curtask->real_parent->comm, pid, comm, @req[tid], nsecs - @start[tid], args->ret);
  delete(@start[tid]);
  delete(@req[tid]);
}
EOF

python3 - "$BIN/naptime" "$WORKLOADS/sleepers" "$BT_SCRIPT" "$RUNS" "$STORM" <<'PYEOF'
import json, os, select, shutil, signal, statistics, subprocess, sys, threading, time

naptime, sleepers, bt_script, runs, storm_n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])

# bpftrace needs tracefs; naptime mounts it privately itself when it is missing, so
# give bpftrace the same: a private mount namespace with tracefs, only if needed.
bt_cmd = ["unshare", "-m", "sh", "-c",
          "mount --make-rprivate / && "
          "{ [ -d /sys/kernel/tracing/events ] || [ -d /sys/kernel/debug/tracing/events ] || "
          "mount -t tracefs nodev /sys/kernel/tracing; } && exec bpftrace \"$0\"", bt_script]
tools = {"naptime": ([naptime, "-j"], "naptime.start"), "bpftrace": (bt_cmd, "READY")}


def run_tracer(cmd, marker, during=None):
    """Start -> marker line on stdout = startup; then `during()`; SIGINT; ru_maxrss."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    fd = p.stdout.fileno()
    buf, startup = b"", None
    deadline = t0 + 60
    while startup is None and time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 1)
        if r:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buf += chunk
            if marker.encode() in buf:
                startup = time.monotonic() - t0
    lines = [0]
    stop = threading.Event()

    def drain():  # keep the tracer's output flowing, as a terminal would
        while not stop.is_set():
            r, _, _ = select.select([fd], [], [], 0.2)
            if r:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    return
                lines[0] += chunk.count(b"\n")
    th = threading.Thread(target=drain)
    th.start()
    result = during() if (during and startup is not None) else None
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    try:
        _, status, ru = os.wait4(p.pid, 0)
    except ChildProcessError:
        ru = None
    stop.set()
    th.join()
    err = p.stderr.read().decode(errors="replace").strip().splitlines()
    p.returncode = 0
    return startup, (ru.ru_maxrss if ru else None), result, lines[0], err


def storm():
    out = subprocess.run([sleepers, "--storm", str(storm_n)], capture_output=True, text=True).stdout
    return json.loads(out)["elapsed_ns"]


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


print(f"naptime benchmark: {runs} runs each, storm of {storm_n} zero-length sleeps, "
      f"{os.cpu_count()} CPUs, kernel {os.uname().release}")
res = {}
for name, (cmd, marker) in tools.items():
    if name == "bpftrace" and not shutil.which("bpftrace"):
        print("bpftrace: not installed")
        continue
    starts, rss, storms, errs = [], [], [], []
    for i in range(runs):
        s, m, st, n, err = run_tracer(cmd, marker, storm if i == 0 else None)
        starts.append(s)
        rss.append(m)
        if st is not None:
            storms.append(st)
        if s is None:
            errs.append(err[-1] if err else "no output")
    res[name] = {"startup_s": med(starts), "rss_kb": med(rss), "storm_ns": med(storms)}
    if errs:
        print(f"{name}: failed to attach in {len(errs)}/{runs} runs: {errs[0]}")
base = statistics.median([storm() for _ in range(3)])

print(f"\n{'metric':<28} {'naptime':>12} {'bpftrace':>12} {'ratio':>8}")


def row(label, key, fmt, scale=1.0):
    a = res.get("naptime", {}).get(key)
    b = res.get("bpftrace", {}).get(key)
    fa = fmt.format(a * scale) if a is not None else "n/a"
    fb = fmt.format(b * scale) if b is not None else "n/a"
    ratio = f"{a / b:.2f}x" if a is not None and b else "n/a"
    print(f"{label:<28} {fa:>12} {fb:>12} {ratio:>8}")


row("startup to attached (s)", "startup_s", "{:.3f}")
row("peak RSS (MB)", "rss_kb", "{:.1f}", 1 / 1024)
for name in res:
    st = res[name]["storm_ns"]
    res[name]["per_sleep_ns"] = (st - base) / storm_n if st is not None else None
print(f"{'untraced sleep (ns)':<28} {base / storm_n:>12.0f}")
row("added cost per sleep (ns)", "per_sleep_ns", "{:.0f}")
PYEOF
