#!/usr/bin/env bash
# Benchmark threadpool's cost on a thread-pool server (tests/workloads/pool_server,
# 4 workers, no per-request work: the worst case, every request is pure syscalls and
# context switches) driven by pool_load over loopback, one connection per request.
# Baseline = the same server untraced, measured in the same run, alternating rounds:
#   - saturated: max throughput (CLIENTS closed-loop clients), traced / untraced
#   - paced at RATE req/s (default 10000): achieved rate, mean latency and the whole
#     CPU time of server + load generator per request (where the BPF programs run;
#     other processes on the machine do not count), traced / untraced
#   - threadpool's own CPU use (utime+stime of the tool / wall time) while paced
# Prints each round and the medians with ratios. Needs root.
# Env: BIN (default build/bin), WORKLOADS (default build/workloads), ROUNDS (3),
#      SECS (5 per run), RATE (10000), CLIENTS (4), APACHE (1: also Apache httpd serving
#      a static file under ab, untraced vs traced, installed if missing; 0: skip).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/bin}
WORKLOADS=${WORKLOADS:-build/workloads}
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-5}
RATE=${RATE:-10000}
CLIENTS=${CLIENTS:-4}

if [[ $EUID -ne 0 ]]; then
  echo "bench/threadpool.sh: needs root (loads BPF programs)" >&2
  exit 1
fi
for f in "$BIN/threadpool" "$WORKLOADS/pool_server" "$WORKLOADS/pool_load"; do
  [[ -x $f ]] || { echo "bench/threadpool.sh: $f not built (cmake --build build --target threadpool pool_server pool_load)" >&2; exit 1; }
done

python3 - "$BIN/threadpool" "$WORKLOADS/pool_server" "$WORKLOADS/pool_load" "$ROUNDS" "$SECS" "$RATE" "$CLIENTS" <<'PYEOF'
import json, os, resource, signal, statistics, subprocess, sys, time

tool, server, load, rounds, secs, rate, clients = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
HZ = os.sysconf("SC_CLK_TCK")

def proc_cpu(pid):
    with open("/proc/%d/stat" % pid) as f:
        s = f.read()
    fields = s[s.rfind(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / HZ

srv = subprocess.Popen([server, "--workers", "4"], stdout=subprocess.PIPE, text=True)
ready = json.loads(srv.stdout.readline())
port = str(ready["port"])

def run_load(paced):
    args = [load, "--port", port, "--clients", str(clients if not paced else 8), "--duration", str(secs)]
    if paced:
        args += ["--rate", str(rate)]
    r0, s0 = resource.getrusage(resource.RUSAGE_CHILDREN), proc_cpu(srv.pid)
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    r1, s1 = resource.getrusage(resource.RUSAGE_CHILDREN), proc_cpu(srv.pid)
    rec = json.loads(out)
    rec["cpu_s"] = (s1 - s0) + (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return rec

def traced(paced):
    t = subprocess.Popen([tool, "-p", str(ready["pid"]), "-j"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    line = t.stdout.readline()
    if not line or json.loads(line)["type"] != "threadpool.start":
        print("threadpool failed to start: " + t.stderr.read(), file=sys.stderr)
        sys.exit(1)
    c0, w0 = proc_cpu(t.pid), time.monotonic()
    rec = run_load(paced)
    c1, w1 = proc_cpu(t.pid), time.monotonic()
    rec["tool_cpu_pct"] = 100.0 * (c1 - c0) / (w1 - w0)
    t.send_signal(signal.SIGINT)
    out, err = t.communicate(timeout=30)
    summ = [json.loads(l) for l in out.splitlines() if '"threadpool.group"' in l]
    w = [s for s in summ if s["final"] and s["group"] == "worker"]
    rec["seen_requests"] = w[0]["request_count"] if w else 0
    rec["lost_events"] = w[0]["data_quality"]["lost_events"] if w else -1
    return rec

res = {"sat_base": [], "sat_traced": [], "pace_base": [], "pace_traced": []}
try:
    run_load(False)  # warm-up
    for r in range(rounds):
        for key, fn in (("sat_base", lambda: run_load(False)), ("sat_traced", lambda: traced(False)),
                        ("pace_base", lambda: run_load(True)), ("pace_traced", lambda: traced(True))):
            rec = fn()
            res[key].append(rec)
            extra = ""
            if "tool_cpu_pct" in rec:
                extra = "  threadpool CPU %.1f%%  requests seen %d  lost events %d" % (
                    rec["tool_cpu_pct"], rec["seen_requests"], rec["lost_events"])
            print("round %d %-11s %8.0f req/s  latency %6.1f us  workload CPU %5.1f us/req%s" % (
                r + 1, key, rec["rps"], rec["latency_avg_ns"] / 1e3,
                1e6 * rec["cpu_s"] / max(rec["requests"], 1), extra), flush=True)
finally:
    srv.send_signal(signal.SIGTERM)
    srv.wait()

med = lambda key, f: statistics.median(f(r) for r in res[key])
rps = lambda r: r["rps"]
lat = lambda r: r["latency_avg_ns"]
cpu = lambda r: r["cpu_s"] / max(r["requests"], 1) * 1e6
print()
print("saturated throughput: untraced %.0f req/s, traced %.0f req/s, ratio %.3f (loss %.1f%%)" % (
    med("sat_base", rps), med("sat_traced", rps), med("sat_traced", rps) / med("sat_base", rps),
    100 * (1 - med("sat_traced", rps) / med("sat_base", rps))))
print("paced at %d req/s: achieved untraced %.0f, traced %.0f, ratio %.3f (loss %.1f%%)" % (
    rate, med("pace_base", rps), med("pace_traced", rps), med("pace_traced", rps) / med("pace_base", rps),
    100 * (1 - med("pace_traced", rps) / med("pace_base", rps))))
print("paced latency: untraced %.1f us, traced %.1f us, ratio %.3f" % (
    med("pace_base", lat) / 1e3, med("pace_traced", lat) / 1e3, med("pace_traced", lat) / med("pace_base", lat)))
print("paced workload CPU per request: untraced %.1f us, traced %.1f us, ratio %.3f" % (
    med("pace_base", cpu), med("pace_traced", cpu), med("pace_traced", cpu) / med("pace_base", cpu)))
print("threadpool's own CPU at %d req/s: %.1f%% of one CPU (median)" % (
    rate, med("pace_traced", lambda r: r["tool_cpu_pct"])))
PYEOF

# A real server: Debian's Apache httpd (worker MPM, one child of 16 threads) serving a
# static file to ab -c 8, untraced vs traced, alternating rounds. Installed if missing.
if [[ ${APACHE:-1} == 1 ]]; then
  if ! [[ -x /usr/sbin/apache2 ]] || ! command -v ab >/dev/null; then
    echo "installing apache2 and apache2-utils (peer server)..." >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends apache2 apache2-utils >/dev/null 2>&1 ||
      { echo "bench/threadpool.sh: could not install apache2; Apache part skipped" >&2; exit 0; }
  fi
  D=$(mktemp -d /tmp/tp-bench-apache-XXXXXX)
  chmod 755 "$D"
  trap '/usr/sbin/apache2 -f "$D/httpd.conf" -k stop >/dev/null 2>&1; sleep 1; rm -rf "$D"' EXIT
  PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  head -c 1024 /dev/zero | tr '\0' x >"$D/index.html"
  cat >"$D/httpd.conf" <<CONF
ServerRoot $D
Listen 127.0.0.1:$PORT
PidFile $D/httpd.pid
ErrorLog $D/error.log
LoadModule mpm_worker_module /usr/lib/apache2/modules/mod_mpm_worker.so
LoadModule authz_core_module /usr/lib/apache2/modules/mod_authz_core.so
User www-data
Group www-data
ServerName localhost
DocumentRoot $D
ServerLimit 1
StartServers 1
ThreadLimit 16
ThreadsPerChild 16
MaxRequestWorkers 16
MinSpareThreads 1
MaxSpareThreads 16
KeepAlive Off
<Directory $D>
  Require all granted
</Directory>
CONF
  /usr/sbin/apache2 -f "$D/httpd.conf" -k start
  sleep 1
  CHILD=""
  for p in $(pgrep -f "$D/httpd.conf"); do
    if [[ $(ls /proc/$p/task | wc -l) -gt 10 ]]; then CHILD=$p; fi
  done
  [[ -n $CHILD ]] || { echo "bench/threadpool.sh: apache worker child not found" >&2; exit 1; }
  python3 - "$BIN/threadpool" "$CHILD" "http://127.0.0.1:$PORT/index.html" "$ROUNDS" "$SECS" <<'PYEOF'
import re, signal, statistics, subprocess, sys
tool, child, url, rounds, secs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
def ab():
    out = subprocess.run(["ab", "-q", "-c", "8", "-t", secs, "-n", "10000000", url],
                         capture_output=True, text=True).stdout
    return float(re.search(r"Requests per second:\s+([\d.]+)", out).group(1))
base, traced = [], []
ab()  # warm-up
for r in range(rounds):
    base.append(ab())
    t = subprocess.Popen([tool, "-p", child, "-j"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t.stdout.readline()
    traced.append(ab())
    t.send_signal(signal.SIGINT)
    t.communicate(timeout=30)
    print("apache round %d: untraced %.0f req/s, traced %.0f req/s" % (r + 1, base[-1], traced[-1]), flush=True)
b, t = statistics.median(base), statistics.median(traced)
print("apache static file, ab -c 8: untraced %.0f req/s, traced %.0f req/s, ratio %.3f (loss %.1f%%)" % (
    b, t, t / b, 100 * (1 - t / b)))
PYEOF
fi
