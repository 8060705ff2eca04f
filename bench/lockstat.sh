#!/usr/bin/env bash
# Slowdown of a lock-heavy workload under lockstat's futex mode, lockstat --uprobes,
# and a bpftrace pmlock.bt-style script (uprobe + uretprobe on pthread_mutex_lock,
# latency histogram keyed by lock address and user stack), side by side, measured in
# the same run. The workload is tests/workloads/mutex_contention in a tight loop
# (--hold-us 0 --gap-us 0), in two shapes:
#   uncontended: --private, each thread locks its own mutex (no futex syscalls)
#   contended:   all threads on one mutex (many futex waits/wakes)
# For each arm it prints lock acquisitions per second (wall clock) and the workers'
# own CPU time per lock call (CLOCK_THREAD_CPUTIME_ID: probe costs are charged to the
# traced threads, time lost to other load on the machine is not), the slowdowns vs
# untraced by both measures (1.00 = no cost), and the CPU time added per lock call.
# The goals are judged on CPU time per call, which stays meaningful on a busy machine.
#
#   bench/lockstat.sh [BUILD_DIR]    (default: build; needs root; installs bpftrace
#                                     with apt-get if missing)
# Env: THREADS (default 2), DURATION_MS (per run, default 2000), REPS (default 3;
# the median ops/s of the repetitions is used).
set -u
BUILD=${1:-build}
LOCKSTAT=$BUILD/bin/lockstat
WL=$BUILD/workloads/mutex_contention
THREADS=${THREADS:-2}
DURATION_MS=${DURATION_MS:-2000}
REPS=${REPS:-3}
[ "$(id -u)" = 0 ] || { echo "bench/lockstat.sh: must run as root" >&2; exit 1; }
[ -x "$LOCKSTAT" ] && [ -x "$WL" ] || { echo "bench/lockstat.sh: build lockstat and mutex_contention in $BUILD first" >&2; exit 1; }
if ! command -v bpftrace >/dev/null; then
  apt-get install -y bpftrace >/dev/null 2>&1 || echo "note: could not install bpftrace; its column is skipped"
fi
TMP=$(mktemp -d /tmp/lockstat-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
LIBC=$(awk '$6 ~ /\/libc\.so/ {print $6; exit}' /proc/self/maps)

# pmlock.bt-style script, written for this benchmark. $1 = PID.
cat > "$TMP/pmlock.bt" <<BT
uprobe:$LIBC:pthread_mutex_lock /pid == \$1/ { @start[tid] = nsecs; @lock[tid] = arg0; }
uretprobe:$LIBC:pthread_mutex_lock /pid == \$1 && @start[tid]/ {
  @lock_latency_ns[@lock[tid], ustack(5), comm] = hist(nsecs - @start[tid]);
  delete(@start[tid]); delete(@lock[tid]);
}
BT

ops() { sed -n 's/.*"ops_per_sec":\([0-9.]*\).*"cpu_ns_per_op":\([0-9.]*\).*/\1 \2/p' "$1"; }

# one_run SHAPE_ARGS TRACER: prints ops/s. TRACER: none | futex | uprobes | bpftrace
one_run() {
  local shape=$1 tracer=$2 go="$TMP/go"
  rm -f "$go" "$TMP/wl.err" "$TMP/wl.out"
  "$WL" --go-file "$go" --threads "$THREADS" --hold-us 0 --gap-us 0 --duration-ms "$DURATION_MS" \
    $shape > "$TMP/wl.out" 2> "$TMP/wl.err" &
  local wpid=$!
  local pid=""
  for _ in $(seq 1 200); do
    pid=$(sed -n 's/^ready \([0-9]*\)$/\1/p' "$TMP/wl.err" 2>/dev/null)
    [ -n "$pid" ] && break
    sleep 0.01
  done
  local tpid="" ready=""
  : > "$TMP/tool.out"; : > "$TMP/tool.err"
  case $tracer in
    futex) "$LOCKSTAT" -U -p "$pid" > "$TMP/tool.out" 2> "$TMP/tool.err" & tpid=$!; ready="Tracing" ;;
    uprobes) "$LOCKSTAT" --uprobes -U -p "$pid" > "$TMP/tool.out" 2> "$TMP/tool.err" & tpid=$!; ready="Tracing" ;;
    bpftrace)
      if [ -d /sys/kernel/tracing/events ]; then
        bpftrace "$TMP/pmlock.bt" "$pid" > "$TMP/tool.out" 2> "$TMP/tool.err" & tpid=$!
      else  # bpftrace needs tracefs; mount it in a private mount namespace
        unshare -m --propagation private sh -c '{ mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing; } && exec "$@"' \
          sh bpftrace "$TMP/pmlock.bt" "$pid" > "$TMP/tool.out" 2> "$TMP/tool.err" & tpid=$!
      fi
      ready="Attaching" ;;
  esac
  if [ -n "$tpid" ]; then
    local ok=0
    for _ in $(seq 1 300); do
      if grep -q "$ready" "$TMP/tool.out" "$TMP/tool.err" 2>/dev/null; then ok=1; break; fi
      kill -0 "$tpid" 2>/dev/null || break
      sleep 0.05
    done
    if [ $ok = 0 ]; then
      echo "bench/lockstat.sh: $tracer did not attach: $(head -c 300 "$TMP/tool.err")" >&2
      kill "$wpid" 2>/dev/null; touch "$go"; wait "$wpid" 2>/dev/null
      kill -INT "$tpid" 2>/dev/null; wait "$tpid" 2>/dev/null
      echo 0 0; return
    fi
    [ "$tracer" = bpftrace ] && sleep 0.5  # "Attaching" is printed before the last probe
  fi
  touch "$go"
  wait "$wpid"
  if [ -n "$tpid" ]; then kill -INT "$tpid" 2>/dev/null; wait "$tpid" 2>/dev/null; fi
  ops "$TMP/wl.out"
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR ? a[int((NR+1)/2)] : 0)}'; }

TRACERS="none futex uprobes"
command -v bpftrace >/dev/null && TRACERS="$TRACERS bpftrace"
printf "lockstat benchmark: %s threads, %d ms per run, median of %d; libc %s\n" "$THREADS" "$DURATION_MS" "$REPS" "$LIBC"
# Repetitions are interleaved (every tracer once per round) so that load from other
# processes drifting during the run affects every arm alike.
for shape in uncontended contended; do
  args=""; [ $shape = uncontended ] && args="--private"
  for rep in $(seq 1 "$REPS"); do
    for t in $TRACERS; do one_run "$args" "$t" >> "$TMP/$shape.$t"; done
  done
done
printf "%-12s %-9s %11s %7s %12s %8s %13s\n" shape tracer "locks/s" "wall x" "cpu ns/lock" "cpu x" "ns/lock added"
for shape in uncontended contended; do
  bo=""; bc=""
  for t in $TRACERS; do
    o=$(awk '{print $1}' "$TMP/$shape.$t" | median)
    c=$(awk '{print $2}' "$TMP/$shape.$t" | median)
    [ -z "$bo" ] && { bo=$o; bc=$c; }
    awk -v s=$shape -v t=$t -v o="$o" -v c="$c" -v bo="$bo" -v bc="$bc" 'BEGIN {
      if (o <= 0 || c <= 0) { printf "%-12s %-9s %11s\n", s, t, "failed"; exit }
      printf "%-12s %-9s %11.0f %6.2fx %12.1f %7.3fx %13.1f\n", s, t, o, bo / o, c, c / bc, c - bc }'
    eval "cpu_${shape}_${t}=$c"
  done
done
echo
awk -v b="${cpu_uncontended_none:-0}" -v f="${cpu_uncontended_futex:-0}" 'BEGIN {
  if (b > 0 && f > 0) printf "goal: futex mode within 2%% of untraced on uncontended locks: %+.2f%% CPU per lock call -> %s\n",
    (f / b - 1) * 100, (f / b - 1 <= 0.02 ? "met" : "NOT met") }'
if [ -n "${cpu_uncontended_bpftrace:-}" ]; then
  awk -v b="$cpu_uncontended_none" -v u="$cpu_uncontended_uprobes" -v t="$cpu_uncontended_bpftrace" 'BEGIN {
    if (u <= 0 || t <= 0) exit
    printf "goal: uprobe mode cheaper per lock call than bpftrace: +%.0f ns vs +%.0f ns (bpftrace/lockstat %.2fx) -> %s\n",
      u - b, t - b, (t - b) / (u - b), (u < t ? "met" : "NOT met") }'
fi
