#!/usr/bin/env bash
# Every gpu-marked test, in SHARDS pytest processes side by side (a device lease is short and
# the tests spend most of their time compiling on the host's cores).
# usage: benchmarks/gpu_tests_sharded.sh SHARDS LOG_DIR    (one log per shard, the ids in ids.txt)
set -u
shards=$1 dir=$2
mkdir -p "$dir"
python3 -m pytest --collect-only -q -m gpu -p no:cacheprovider 2>/dev/null | grep "::" > "$dir/ids.txt"
echo "$(wc -l < "$dir/ids.txt") gpu tests in $shards shards"
for i in $(seq 0 $((shards - 1))); do
  awk -v n="$shards" -v i="$i" 'NR % n == i' "$dir/ids.txt" | tr '\n' '\0' \
    | xargs -0 python3 -m pytest -q -m gpu -p no:cacheprovider > "$dir/gpu-tests-shard-$i.log" 2>&1 &
done
wait
for f in "$dir"/gpu-tests-shard-*.log; do echo "$f: $(tail -n 1 "$f")"; done
