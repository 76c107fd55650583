#!/usr/bin/env bash
# One device call that checks what changed in the CUDA kernels and measures it, within a time
# limit (a device lease is short): the GPU tests of the flash kernels, cuBLAS products and
# convolutions, decoders, device tensors and the search, four pytest processes side by side;
# every attention schedule against SDPA (benchmarks/attention_kernels.py); then `saturn bench`
# of WORKLOADS with what is left. Everything is written under OUT_DIR; a short summary is
# printed last. With FUZZ_SEED set, CUDA fuzz batches (10 jobs) run beside the tests until they end;
# ATTENTION_KERNELS=0 skips the attention schedules, PRODUCT_KERNELS=1 adds every generated
# product schedule against cuBLAS (benchmarks/product_kernels.py), each with a third of the time,
# then the TMA tiles not yet searched (a sixth). LANES=1 adds the concurrent-streams GPU test and
# their A/B on the decoder (benchmarks/lanes_ab.py; the lanes are off by default until measured).
# usage: [FUZZ_SEED=S] [ATTENTION_KERNELS=0] [PRODUCT_KERNELS=1] [LANES=1] benchmarks/device_session.sh TREE SECONDS OUT_DIR [WORKLOADS...]
set -u
tree=$1 total=$2 out=$3; shift 3
workloads=${*:-attention decoder gpt2 conv2d}
mkdir -p "$out/tests"
t0=$(date +%s)
elapsed() { echo $(( $(date +%s) - t0 )); }
T="python3 -m pytest -q -m gpu -p no:cacheprovider -x"
cap=$(( total / 3 ))
if [ -n "${FUZZ_SEED:-}" ]; then
  ( SATURN_TREE=$tree bash benchmarks/fuzz_batches.sh cuda "$FUZZ_SEED" 25 10 $(( cap - 40 )) "$out/fuzz" \
      > "$out/fuzz.log" 2>&1 ) &
fi
( timeout $cap $T tests/test_flash_attention.py \
    "tests/test_cuda_gpu.py::test_attend_term_runs_as_one_flash_kernel_under_every_attention_schedule" \
    > "$out/tests/attention.log" 2>&1 ) &
( timeout $cap $T tests/test_library_cuda.py tests/test_gemm_tma.py > "$out/tests/library_cuda.log" 2>&1 ) &
( timeout $cap $T tests/test_decoder_gpu.py > "$out/tests/decoder_gpu.log" 2>&1 ) &
( timeout $cap $T tests/test_device_tensors_gpu.py tests/test_search_gpu.py > "$out/tests/device_search.log" 2>&1 ) &
wait
[ -n "${FUZZ_SEED:-}" ] && { echo "fuzz beside the tests:"; cat "$out/fuzz.log"; }
for f in "$out"/tests/*.log; do echo "$(basename "$f"): $(tail -n 1 "$f")"; done
echo "tests took $(elapsed) s"
grep -h -B3 -A25 "^E " "$out"/tests/*.log | head -80
if [ "${ATTENTION_KERNELS:-1}" = 1 ]; then
  timeout $(( total / 3 )) python3 -m benchmarks.attention_kernels --repeat 20 \
    --json "$out/attention-kernels-$tree.json" > "$out/attention-kernels-$tree.txt" 2>&1
  tail -60 "$out/attention-kernels-$tree.txt"
fi
if [ "${PRODUCT_KERNELS:-0}" = 1 ]; then
  timeout $(( total / 3 )) python3 -m benchmarks.product_kernels --repeat 20 \
    --json "$out/product-kernels-$tree.json" > "$out/product-kernels-$tree.txt" 2>&1
  tail -24 "$out/product-kernels-$tree.txt"
  # the TMA tiles not yet searched, apart: a kernel that never finishes loses only these
  timeout $(( total / 6 )) python3 -m benchmarks.product_kernels --repeat 20 --experimental --only tma \
    --json "$out/product-kernels-tma-experimental-$tree.json" > "$out/product-kernels-tma-experimental-$tree.txt" 2>&1
  tail -24 "$out/product-kernels-tma-experimental-$tree.txt"
fi
if [ "${LANES:-0}" = 1 ]; then
  timeout 90 $T tests/test_cuda_lanes_gpu.py > "$out/tests/lanes.log" 2>&1
  echo "lanes tests: $(tail -n 1 "$out/tests/lanes.log")"
  timeout $(( total / 6 )) python3 -m benchmarks.lanes_ab --workloads decoder --rounds 7 \
    --json "$out/lanes-ab-$tree.json" > "$out/lanes-ab-$tree.txt" 2>&1
  tail -4 "$out/lanes-ab-$tree.txt"
fi
left=$(( total - $(elapsed) ))
if [ $left -gt 90 ]; then
  echo "bench of $workloads with $left s left"
  SATURN_TREE=$tree timeout $left python3 -m benchmarks.cli --target cuda --budget 10 --cold --workloads $workloads \
    --time-limit $(( left - 60 )) --json "$out/bench-$tree.json" --md "$out/bench-$tree.md" > "$out/bench.log" 2>&1
  tail -3 "$out/bench.log"; head -30 "$out/bench-$tree.md"
fi
echo "total $(elapsed) s"
