#!/usr/bin/env bash
# Long-run memory of every tool under a fork storm (issue 19; replaces offcputime_soak.sh).
#
# The load (tests/workloads/fork_storm): FORKS_PER_S short-lived processes a second, each
# sleeping 1 ms and then contending for a pthread mutex with a second thread (so naptime,
# offcputime, lockstat, profile and runqlen see events from ever-new PIDs), 1 in 4 of them
# exec'd afresh; and one long-lived process starting THREADS_PER_S short-lived threads a
# second that contend for a shared mutex (thread churn for the -p tools: threadpool and
# pmheld). All seven tools run at once, each reporting every INTERVAL (JSON kept in a
# temporary directory); every SAMPLE seconds each tool's VmRSS is printed. At the end,
# per tool: RSS at the end of the warm-up, at the end, and the drift (goal: within
# +-5%), then the load average and the fork rate actually reached.
#
# USAGE: bench/soak.sh [SECONDS (1800)] [INTERVAL (30)] [WARMUP (300)]
# Env: BIN (build/bin), WORKLOADS (build/workloads), FORKS_PER_S (500),
#      THREADS_PER_S (200), SAMPLE (INTERVAL), TOOLS (all seven, space-separated),
#      KEEP=DIR keeps the tools' output and stderr in DIR, CHURN_PID=PID uses the load
#      of a soak already running (its thread-churn target's PID) instead of starting
#      another one. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-1800}
INTERVAL=${2:-30}
WARMUP=${3:-300}
BIN=${BIN:-build/bin}
WORKLOADS=${WORKLOADS:-build/workloads}
FORKS_PER_S=${FORKS_PER_S:-500}
THREADS_PER_S=${THREADS_PER_S:-200}
SAMPLE=${SAMPLE:-$INTERVAL}
TOOLS=${TOOLS:-"runqlen naptime offcputime lockstat profile threadpool pmheld"}
[[ $EUID -eq 0 ]] || { echo "soak: must run as root" >&2; exit 1; }
[[ -x $WORKLOADS/fork_storm ]] || { echo "soak: $WORKLOADS/fork_storm not built" >&2; exit 1; }
if [[ -n ${KEEP:-} ]]; then OUT=$KEEP; mkdir -p "$OUT"; else OUT=$(mktemp -d); fi
declare -A PID
STORM="" CHURN=""
cleanup() {
  for p in "${PID[@]}" $STORM $CHURN; do kill -INT "$p" 2>/dev/null || true; done
  sleep 1
  for p in "${PID[@]}" $STORM $CHURN; do kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [[ -n ${KEEP:-} ]] || rm -rf "$OUT"
}
trap cleanup EXIT

# the thread churn target first (the -p tools need its PID), then the fork storm
if [[ -n ${CHURN_PID:-} ]]; then
  TARGET=$CHURN_PID
else
  "$WORKLOADS/fork_storm" --threads "$THREADS_PER_S" --steady 2 > "$OUT/churn.out" &  # -p tools refuse 1 thread
  CHURN=$!
  TARGET=$CHURN
  "$WORKLOADS/fork_storm" --forks "$FORKS_PER_S" > "$OUT/storm.out" &
  STORM=$!
fi

# every tool stops by itself after SECS (+ a little, so the last sample is taken while
# it still runs); the script also stops them when it ends
DUR=$((SECS + 2 * SAMPLE + 30))
for t in $TOOLS; do
  case $t in
    offcputime) args=(-f -i "$INTERVAL" --duration "$DUR") ;;
    threadpool|pmheld) args=(-p "$TARGET" -j -i "$INTERVAL" -d "$DUR") ;;
    *) args=(-j -i "$INTERVAL" -d "$DUR") ;;
  esac
  "$BIN/$t" "${args[@]}" > "$OUT/$t.out" 2> "$OUT/$t.err" &
  PID[$t]=$!
done

rss() { awk '/^VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || echo -; }
printf "%8s" elapsed
for t in $TOOLS; do printf " %10s" "$t"; done
printf " %9s\n" forks/s
start=$(date +%s)
forks0=$(awk '/^processes/ {print $2}' /proc/stat)
prev_forks=$forks0 prev_t=$start
while :; do
  sleep "$SAMPLE"
  now=$(date +%s)
  el=$((now - start))
  forks=$(awk '/^processes/ {print $2}' /proc/stat)
  printf "%8d" "$el"
  alive=0
  for t in $TOOLS; do
    r=$(rss "${PID[$t]}")
    printf " %10s" "$r"
    if [[ $r != - ]]; then
      alive=1
      echo "$el $r" >> "$OUT/$t.rss"
    fi
  done
  printf " %9d\n" $(( (forks - prev_forks) / (now - prev_t > 0 ? now - prev_t : 1) ))
  prev_forks=$forks prev_t=$now
  [[ $alive -eq 1 && $el -lt $SECS ]] || break
done
end=$(date +%s)
forks_end=$(awk '/^processes/ {print $2}' /proc/stat)

echo
# A sample falls anywhere in a report interval (a report's tables and JSON come and go:
# naptime read 67-91 MB between samples with no trend), so each end is the median of 5
# samples: the first 5 after the warm-up and the last 5.
printf "%-11s %12s %12s %8s %20s  %s\n" tool warm_rss_kb end_rss_kb drift "min..max after warm" verdict
fail=0
for t in $TOOLS; do
  awk -v t="$t" -v warm="$WARMUP" '
    function median(a, n,   i, j, x) { for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j > 0 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x } return a[int((n + 1) / 2)] }
    $1 >= warm { v[++n] = $2; if (!mn || $2 < mn) mn = $2; if ($2 > mx) mx = $2 }
    END {
      if (n < 10) { printf "%-11s %12s %12s %8s %20s  NO DATA (%d samples after the warm-up; exited early? see %s.err)\n", t, "-", "-", "-", "-", n, t; exit 1 }
      for (i = 1; i <= 5; i++) { a[i] = v[i]; b[i] = v[n - 5 + i] }
      w = median(a, 5); l = median(b, 5); d = 100 * (l - w) / w
      printf "%-11s %12d %12d %+7.1f%% %9d..%-10d  %s\n", t, w, l, d, mn, mx, (d <= 5 && d >= -5) ? "PASS" : "FAIL"
      exit (d <= 5 && d >= -5) ? 0 : 1 }' "$OUT/$t.rss" 2>/dev/null || fail=1
done
echo
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "forks: $(( (forks_end - forks0) / (end - start > 0 ? end - start : 1) ))/s system-wide" \
     "over $((end - start)) s (asked for $FORKS_PER_S/s + $THREADS_PER_S threads/s)"
for t in $TOOLS; do
  if grep -qi "warning\|error" "$OUT/$t.err" 2>/dev/null; then
    echo "$t stderr:"; grep -i "warning\|error" "$OUT/$t.err" | sort | uniq -c | head -5
  fi
done
exit $fail
