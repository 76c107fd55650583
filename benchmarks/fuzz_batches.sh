#!/usr/bin/env bash
# Fuzz in batches of seeds, one log per batch, until a time limit: what a long fuzz campaign
# (or a device lease of fixed length) needs so that a stopped run loses at most one batch.
# usage: benchmarks/fuzz_batches.sh TARGET FIRST_SEED BATCH JOBS SECONDS LOG_DIR
# A new batch starts only while less than SECONDS have passed; each log ends with the
# `saturn fuzz:` summary line (seeds, counts, rate) and the commit it ran on.
set -u
target=$1 seed=$2 batch=$3 jobs=$4 seconds=$5 dir=$6
mkdir -p "$dir"
start=$(date +%s)
commit=${SATURN_TREE:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}   # the device copy's git metadata can be stale
while [ $(( $(date +%s) - start )) -lt "$seconds" ]; do
  last=$((seed + batch - 1))
  log="$dir/fuzz-$target-seeds-$seed-$last.log"
  { echo "# tree $commit, started $(date -u +%FT%TZ)"
    python3 -m compiler.cli fuzz --target "$target" --jobs "$jobs" --budget 1 --n "$batch" \
      --seed "$seed" --out "$dir/repro-$seed" 2>&1
    echo "# finished $(date -u +%FT%TZ)"; } > "$log"
  grep "^saturn fuzz:" "$log" || tail -3 "$log"
  seed=$((last + 1))
done
