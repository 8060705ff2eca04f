#!/bin/bash
# Overhead of offcputime on a context-switch-heavy load, next to bpftrace running an
# equivalent off-CPU script (sched_switch tracepoint, stacks saved at switch-out,
# time summed by stack at switch-in), both measured in the same run.
#
# Load: `perf bench sched pipe` (Debian's linux-perf): two tasks ping-pong over a
# pipe, two context switches per op. Reported: usecs/op (median of REPS runs),
# context switches/s (from /proc/stat), slowdown vs no tracing, and offcputime's
# data quality (lost stacks, map-full drops) and peak RSS under that load.
#
# Usage: sudo bench/offcputime.sh        (env: BIN=build/bin LOOPS=200000 REPS=5)
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-build/bin}
LOOPS=${LOOPS:-200000}
REPS=${REPS:-5}
OC="$BIN/offcputime"

[ "$(id -u)" = 0 ] || { echo "offcputime bench: must run as root" >&2; exit 1; }
[ -x "$OC" ] || { echo "offcputime bench: $OC not built (set BIN=)" >&2; exit 1; }
if ! command -v perf >/dev/null; then
  apt-get install -y linux-perf >/dev/null 2>&1 || { echo "offcputime bench: needs perf (apt-get install linux-perf)" >&2; exit 1; }
fi
command -v bpftrace >/dev/null || apt-get install -y bpftrace >/dev/null 2>&1

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

ctxt() { awk '/^ctxt/ {print $2}' /proc/stat; }

# median usecs/op over REPS runs; context switches/s (whole box) go to $TMP/csw
measure() {
  local vals=() c0 c1 t0 t1
  c0=$(ctxt); t0=$(date +%s.%N)
  for _ in $(seq "$REPS"); do
    vals+=("$(perf bench sched pipe -l "$LOOPS" 2>/dev/null | awk '/usecs\/op/ {print $1}')")
  done
  c1=$(ctxt); t1=$(date +%s.%N)
  echo "($c1 - $c0) / ($t1 - $t0)" | bc -l | xargs printf "%.0f" >"$TMP/csw"
  printf "%s\n" "${vals[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}

wait_for() {  # file pattern timeout_s
  for _ in $(seq $(( $3 * 10 ))); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

echo "load: perf bench sched pipe -l $LOOPS, median of $REPS runs"; echo
BASE=$(measure); BASE_CSW=$(cat "$TMP/csw")
printf "%-28s %10s usecs/op  %8s switches/s\n" "no tracing" "$BASE" "$BASE_CSW"

# --- offcputime (system-wide, folded output discarded at the end) --------------------------
"$OC" 3600 >"$TMP/oc.out" 2>"$TMP/oc.err" &
OCPID=$!
if wait_for "$TMP/oc.err" "Tracing off-CPU" 30; then  # banner: stderr, after attach
  OCT=$(measure); OC_CSW=$(cat "$TMP/csw")
  OC_RSS=$(awk '/VmHWM/ {print $2" "$3}' /proc/$OCPID/status)
  kill -INT $OCPID; wait $OCPID
  OC_DQ=$(grep "data quality" "$TMP/oc.out")
  printf "%-28s %10s usecs/op  %8s switches/s  slowdown %.2fx\n" "offcputime" "$OCT" "$OC_CSW" \
    "$(echo "$OCT / $BASE" | bc -l)"
  echo "  offcputime $OC_DQ"
  echo "  offcputime peak RSS $OC_RSS; stacks reported: $(grep -c '^    -  ' "$TMP/oc.out")"
  grep WARNING "$TMP/oc.err" | sed 's/^/  /'
else
  echo "offcputime failed to start: $(cat "$TMP/oc.err")"; kill $OCPID 2>/dev/null; OCT=""
fi

# --- bpftrace equivalent ----------------------------------------------------------------------
cat >"$TMP/offcpu.bt" <<'BT'
tracepoint:sched:sched_switch
{
  if (args->prev_pid != 0) {
    @start[args->prev_pid] = nsecs;
    @ks[args->prev_pid] = kstack;
    @us[args->prev_pid] = ustack;
  }
  $s = @start[args->next_pid];
  if ($s != 0) {
    @[@ks[args->next_pid], @us[args->next_pid], args->next_comm] = sum((nsecs - $s) / 1000);
    delete(@start[args->next_pid]);
  }
}
BT
if command -v bpftrace >/dev/null; then
  # bpftrace needs tracefs for tracepoints; mount it in a private namespace if absent
  if [ -d /sys/kernel/tracing/events ]; then BTCMD=(bpftrace "$TMP/offcpu.bt")
  else BTCMD=(unshare -m --propagation private sh -c "{ mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing; } && exec bpftrace $TMP/offcpu.bt"); fi
  "${BTCMD[@]}" >"$TMP/bt.out" 2>&1 &
  BTPID=$!
  if wait_for "$TMP/bt.out" "Attaching" 60; then
    sleep 1
    BTT=$(measure); BT_CSW=$(cat "$TMP/csw")
    pkill -INT -P $BTPID bpftrace 2>/dev/null; kill -INT $BTPID 2>/dev/null
    wait $BTPID
    printf "%-28s %10s usecs/op  %8s switches/s  slowdown %.2fx\n" "bpftrace (equivalent)" "$BTT" "$BT_CSW" \
      "$(echo "$BTT / $BASE" | bc -l)"
    grep -m3 -i "error" "$TMP/bt.out" | sed 's/^/  bpftrace: /'
    if [ -n "$OCT" ]; then
      printf "offcputime added %.2f us/op, bpftrace %.2f us/op: offcputime overhead = %.2f x bpftrace's\n" \
        "$(echo "$OCT - $BASE" | bc -l)" "$(echo "$BTT - $BASE" | bc -l)" \
        "$(echo "($OCT - $BASE) / ($BTT - $BASE)" | bc -l)"
    fi
  else
    echo "bpftrace failed here: $(head -5 "$TMP/bt.out" | tr '\n' ' ')"; kill $BTPID 2>/dev/null
  fi
else
  echo "bpftrace not available (apt-get install bpftrace failed)"
fi
