#!/usr/bin/env bash
# Long-run memory of system-wide offcputime under a fork-heavy load (issue 9, item 10):
# short-lived processes keep appearing (each sleeps a little, so it leaves stacks), and
# offcputime reports every interval, after which the symbolizer must forget the exited
# ones. Prints VmRSS every SAMPLE seconds and the drift between the end of the warm-up
# and the end of the run; the goal is a flat RSS (within +-5%).
#
# USAGE: bench/offcputime_soak.sh [SECONDS (1800)] [INTERVAL (30)] [WARMUP (300)]
# Env: BIN (build/bin), FORKS_PER_S (100). Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-1800}
INTERVAL=${2:-30}
WARMUP=${3:-300}
BIN=${BIN:-build/bin}
FORKS_PER_S=${FORKS_PER_S:-100}
[[ $EUID -eq 0 ]] || { echo "offcputime_soak: must run as root" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'kill $LOAD $OC 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$TMP"' EXIT

# the load: FORKS_PER_S short-lived processes a second, each off-CPU for 20 ms
python3 - "$FORKS_PER_S" > "$TMP/load.out" 2>&1 <<'EOF' &
import subprocess, sys, time
rate = int(sys.argv[1])
n = 0
t0 = time.monotonic()
procs = []
while True:
    procs.append(subprocess.Popen(["sleep", "0.02"]))
    n += 1
    procs = [p for p in procs if p.poll() is None]
    delay = t0 + n / rate - time.monotonic()
    if delay > 0:
        time.sleep(delay)
EOF
LOAD=$!

"$BIN/offcputime" -f -i "$INTERVAL" --duration "$SECS" > /dev/null 2> "$TMP/oc.err" &
OC=$!
printf "%8s %10s %10s %12s\n" elapsed_s rss_kb hwm_kb forks_total
start=$(date +%s)
warm_rss=""
while kill -0 $OC 2>/dev/null; do
  sleep "$INTERVAL"
  el=$(( $(date +%s) - start ))
  rss=$(awk '/^VmRSS/ {print $2}' /proc/$OC/status 2>/dev/null || true)
  hwm=$(awk '/^VmHWM/ {print $2}' /proc/$OC/status 2>/dev/null || true)
  [[ -n $rss ]] || break
  forks=$(awk '/^processes/ {print $2}' /proc/stat)
  printf "%8d %10s %10s %12s\n" "$el" "$rss" "$hwm" "$forks"
  if [[ -z $warm_rss && $el -ge $WARMUP ]]; then warm_rss=$rss; fi
  last_rss=$rss
done
wait $OC || true
grep -i "warning\|error" "$TMP/oc.err" | head -5 || true
if [[ -n $warm_rss ]]; then
  awk -v a="$warm_rss" -v b="$last_rss" 'BEGIN {
    d = 100 * (b - a) / a
    printf "RSS after warm-up %d kB, at the end %d kB: drift %+.1f%% (%s, goal within +-5%%)\n",
      a, b, d, (d <= 5 && d >= -5) ? "PASS" : "FAIL" }'
fi
