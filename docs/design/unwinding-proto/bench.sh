#!/bin/sh
# bench.sh: per-event BPF cost, loss and user-space unwind cost of the three modes on
# pingpong (RATE switches/s, 0 = max). Run under flock -x /tmp/bpfdiag-quiet.lock.
cd "$(dirname "$0")"
for rate in ${RATES:-0 10000}; do
  for mode in ${MODES:-none fp table copy}; do
    ./pingpong $rate 9 > /tmp/uw_pp.json & P=$!
    sleep 0.2
    ./uwproto $mode $P 3 ${COPY:-8192} 2>/dev/null | head -1 | sed "s/^{/{\"rate\":$rate,/"
    wait $P
    echo "  pingpong: $(cat /tmp/uw_pp.json)"
  done
done
