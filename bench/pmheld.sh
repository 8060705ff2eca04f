#!/usr/bin/env bash
# Overhead of pmheld vs a bpftrace pmheld.bt-style script (uprobe on
# pthread_mutex_lock entry+return and pthread_mutex_unlock, hold histogram keyed by
# lock and stack), measured in the same run on a lock-heavy workload: mutex_loop
# (THREADS threads doing lock; tiny work; unlock). Prints ns per lock+unlock pair
# untraced and under each tracer, the added cost per pair, and pmheld/bpftrace.
#
#   bench/pmheld.sh [BUILD_DIR]     (default: build; needs root; installs bpftrace
#                                    with apt-get if missing)
# Env: ITERS (pairs per thread, default 40000), THREADS (default 2), REPS (default 3).
set -u
BUILD=${1:-build}
PMHELD=$BUILD/bin/pmheld
LOOP=$BUILD/workloads/mutex_loop
ITERS=${ITERS:-40000}
THREADS=${THREADS:-2}
REPS=${REPS:-3}
[ "$(id -u)" = 0 ] || { echo "bench/pmheld.sh: must run as root" >&2; exit 1; }
[ -x "$PMHELD" ] && [ -x "$LOOP" ] || { echo "bench/pmheld.sh: build pmheld and mutex_loop in $BUILD first" >&2; exit 1; }
if ! command -v bpftrace >/dev/null; then
  apt-get install -y bpftrace >/dev/null 2>&1 || echo "note: could not install bpftrace"
fi
TMP=$(mktemp -d /tmp/pmheld-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
LIBC=$(awk '$6 ~ /\/libc\.so/ {print $6; exit}' /proc/self/maps)

# A pmheld.bt-style script (written for this benchmark).
cat > "$TMP/pmheld.bt" <<BT
uprobe:$LIBC:pthread_mutex_lock { @locking[tid] = arg0; }
uretprobe:$LIBC:pthread_mutex_lock /@locking[tid]/ {
  if (retval == 0) { @since[pid, @locking[tid]] = nsecs; }
  delete(@locking[tid]);
}
uprobe:$LIBC:pthread_mutex_unlock /@since[pid, arg0]/ {
  @hold_ns[usym(arg0), ustack(5), comm] = hist(nsecs - @since[pid, arg0]);
  delete(@since[pid, arg0]);
}
BT

ns_per_pair() { sed -n 's/.*"ns_per_pair":\([0-9.]*\).*/\1/p' "$1"; }

# run_traced NAME CMD...: the loop starts after a delay; the tracer attaches to its PID
# (substituted for the word PID in CMD) and must print READY_RE before the delay ends.
run_traced() {
  local name=$1; shift
  local ready_re=$1; shift
  "$LOOP" --threads "$THREADS" --iters "$ITERS" --start-delay-ms 6000 > "$TMP/loop.out" &
  local lpid=$!
  local cmd=("${@//PID/$lpid}")
  if [ "$name" = bpftrace ] && [ ! -d /sys/kernel/tracing/events ]; then
    # bpftrace needs tracefs to detach cleanly; mount it in a private namespace
    unshare -m sh -c '{ mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing; } && exec "$@"' sh "${cmd[@]}" \
      > "$TMP/tool.out" 2> "$TMP/tool.err" &
  else
    "${cmd[@]}" > "$TMP/tool.out" 2> "$TMP/tool.err" &
  fi
  local tpid=$!
  local ok=0
  for _ in $(seq 1 55); do
    if grep -qE "$ready_re" "$TMP/tool.out" "$TMP/tool.err" 2>/dev/null; then ok=1; break; fi
    kill -0 $tpid 2>/dev/null || break
    sleep 0.1
  done
  wait $lpid
  kill -INT $tpid 2>/dev/null; wait $tpid 2>/dev/null
  if [ $ok = 0 ]; then
    echo "FAILED: $name did not attach: $(grep -v '^$' "$TMP/tool.err" | head -3 | tr '\n' ' ')" >&2
    echo ""
    return
  fi
  ns_per_pair "$TMP/loop.out"
}

median() { sort -n | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}'; }

declare -A R
for rep in $(seq 1 "$REPS"); do
  "$LOOP" --threads "$THREADS" --iters "$ITERS" > "$TMP/base.out"; R[base]+="$(ns_per_pair "$TMP/base.out") "
  R[pmheld]+="$(run_traced pmheld 'Tracing' "$PMHELD" -p PID) "
  R[pmheld_s0]+="$(run_traced pmheld 'Tracing' "$PMHELD" -s 0 -p PID) "
  R[pmheld_sym]+="$(run_traced pmheld 'Tracing' "$PMHELD" --probe-at-symbol -p PID) "
  if command -v bpftrace >/dev/null; then
    R[bpftrace]+="$(run_traced bpftrace 'Attaching' bpftrace -p PID "$TMP/pmheld.bt") "
  fi
done

med() { echo ${R[$1]:-} | tr ' ' '\n' | grep -v '^$' | median; }
base=$(med base)
printf "workload: mutex_loop, %s threads x %s lock+unlock pairs, median of %s runs\n" "$THREADS" "$ITERS" "$REPS"
printf "%-36s %12s %12s %10s\n" "configuration" "ns/pair" "added ns" "slowdown"
for k in base pmheld pmheld_s0 pmheld_sym bpftrace; do
  v=$(med $k)
  case $k in
    base) label="untraced";; pmheld) label="pmheld -p (stacks)";;
    pmheld_s0) label="pmheld -p -s 0 (no stacks)";; pmheld_sym) label="pmheld -p --probe-at-symbol";;
    bpftrace) label="bpftrace pmheld.bt-style -p";;
  esac
  if [ -z "$v" ]; then printf "%-36s %12s\n" "$label" "failed"; continue; fi
  awk -v l="$label" -v v="$v" -v b="$base" 'BEGIN {printf "%-36s %12.1f %12.1f %9.1fx\n", l, v, v-b, v/b}'
  eval "v_$k=$v"
done
if [ -n "${v_bpftrace:-}" ] && [ -n "${v_pmheld:-}" ]; then
  awk -v p="$v_pmheld" -v s="${v_pmheld_s0:-0}" -v t="$v_bpftrace" -v b="$base" 'BEGIN {
    printf "pmheld added cost per pair / bpftrace added cost: %.2f (stacks), %.2f (-s 0)\n", (p-b)/(t-b), (s-b)/(t-b) }'
else
  echo "no bpftrace comparison (bpftrace missing or failed; see messages above)"
fi
