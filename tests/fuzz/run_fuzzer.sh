#!/usr/bin/env bash
# One time-boxed libFuzzer run (a ctest test per target, tests/fuzz/CMakeLists.txt):
#   run_fuzzer.sh FUZZER SEED_DIR WORK_DIR [SEED_FILE...]
# Runs every seed first (a committed reproducer fails at once), then fuzzes for
# $FUZZ_SECONDS (default 10). New inputs go to WORK_DIR/corpus (never the source tree);
# a crash leaves WORK_DIR/crash-* : fix the parser, then commit that file to SEED_DIR.
set -euo pipefail
fuzzer=$1 seeds=$2 work=$3
shift 3
mkdir -p "$work/corpus"
for f in "$@"; do  # real inputs from the build (an ELF file), copied, not committed
  [[ -f $f ]] || { echo "run_fuzzer: seed $f missing (build/ must be built first)" >&2; exit 1; }
  cp -f "$f" "$work/corpus/"
done
exec "$fuzzer" -max_total_time="${FUZZ_SECONDS:-10}" -rss_limit_mb=1024 -timeout=10 -max_len=65536 \
  -print_final_stats=1 -artifact_prefix="$work/" "$work/corpus" "$seeds"
