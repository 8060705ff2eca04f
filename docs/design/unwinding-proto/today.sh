#!/bin/sh
cd "$(dirname "$0")"
for f in /lib/x86_64-linux-gnu/libc.so.6 /lib/x86_64-linux-gnu/libstdc++.so.6 /usr/sbin/mariadbd /usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so ../../../build/workloads/libunwind_blk.so; do ./ehtab $f; done
for w in unwind_io_nofp unwind_lock_nofp unwind_solib_nofp; do echo "== $w"; ./offcpu_today.py ../../../build/bin/offcputime ../../../build/workloads/$w 9 100 4 100 1500 2>&1; done
