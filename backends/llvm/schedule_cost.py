"""What a CPU schedule does to a program's time, from counts, before anything is measured.

The cost model (compiler/cost_model.py) predicts a program's time from its counts; what a
schedule changes (one thread, reductions kept in order, narrower vectors, the BLAS for the
products) it learns per device from measured ratios. Until it has measured a schedule, this is
its prior: the program's kernels counted one by one (ir/kernel_cost.kernel_counts), each
priced with the model's coefficients (rates of the whole machine) and adjusted for what the
schedule does to that kernel:

- a kernel the runtime splits over the cores (runtime._Launch: enough work, an outer extent)
  pays a hand-off to the pool; one that runs on one core runs at one core's share of the rate;
- `fast_math=False` (strict): reductions that are not products run in order, one dependent add
  after another, instead of across vector lanes;
- a vector width below the native one: the compute runs on half-width units;
- `library="blas"`: each product the library takes runs at the f32 product rate (slower for half
  operands, converted to f32 copies first), its epilogue in a kernel of its own, and the generated kernels after it
  share the cores with the library's threads, which keep spinning after a call (runtime.py).

The constants are this module's; the model's measured factors replace the prior as they come in.
"""
from __future__ import annotations

import math

from ir.kernel import KernelProgram, Schedule
from ir.kernel_cost import FEATURES, buffer_bytes, kernel_counts

CORE_SHARE = 0.9              # parallel speedup per core (one thread measured 1.6-1.9x slower on 2 cores)
HANDOFF_S = 8e-6              # handing one kernel's chunks to the pool (spin_pool.py: 6-10 us)
STRICT_STEPS_PER_S = 1e9      # in-order reduction steps per second and core (a dependent add)
NARROW_VECTORS = 1.1          # compute on half-width vectors (vec256 on an AVX-512 host)
LIBRARY_CONTENTION = 2.0      # a generated kernel beside the library's spinning threads (runtime.py)
LIBRARY_HALF = 3.0            # a product of half operands (converted copies, then f32): measured 1.8-3.7x
                              # the generated product on 2 cores (f16 512^3 and 500x511x513)


def seconds(program: KernelProgram, schedule: Schedule, coefficients, cores: int, native_width: int,
            library_calls: dict | None = None) -> float:
    """Predicted seconds of `program` (already split for the library when `library_calls` is
    given: backends/llvm/blas.split_epilogues) under `schedule` on `cores` cores."""
    from backends.llvm.runtime import MIN_CHUNK_WORK, _work
    sizes = buffer_bytes(program)
    threads = schedule.threads or cores
    rate = dict(zip(FEATURES, coefficients))
    calls = library_calls or {}
    total, after_library = 0.0, False
    for k in program.kernels:
        counts = kernel_counts(k, sizes)
        ks = schedule.for_kernel(k.name)
        if k.name in calls:
            product = counts["mm_f32"] * rate["mm_f32"] + counts["mm_half"] * rate["mm_f32"] * LIBRARY_HALF
            total += product + counts["bytes"] * rate["bytes"] + rate["kernels"]
            after_library = True
            continue
        t = sum(rate[f] * counts[f] for f in FEATURES)
        parallel = threads > 1 and k.axes and k.axes[0].extent > 1 and _work(k) >= MIN_CHUNK_WORK
        if parallel:
            t += HANDOFF_S
            if after_library:
                t *= LIBRARY_CONTENTION
        else:
            t *= max(1.0, CORE_SHARE * cores)
        if not ks.fast_math:
            t += counts["reduce_steps"] / (STRICT_STEPS_PER_S * (threads if parallel else 1))
        if ks.vector_width and ks.vector_width < native_width:
            t *= NARROW_VECTORS
        total += t
    return total


def relative(program: KernelProgram, schedule: Schedule, first: Schedule, coefficients, cores: int,
             native_width: int) -> float | None:
    """`schedule`'s predicted time over `first`'s (None: nothing to compare)."""
    from backends.llvm import blas

    def under(s: Schedule) -> float:
        split, calls = blas.split_epilogues(program, s) if s.default.library or s.overrides else (program, {})
        return seconds(split, s, coefficients, cores, native_width, calls)

    a, b = under(schedule), under(first)
    return a / b if a > 0 and b > 0 and math.isfinite(a) and math.isfinite(b) else None
