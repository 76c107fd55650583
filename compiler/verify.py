"""Check a candidate against the reference interpreter before it may be timed.

A candidate (a program plus a backend schedule) is built and run on fresh, seeded random
inputs; its outputs must match the interpreter's within a per-dtype tolerance, contain no NaN
where the reference has none, and be bit-identical when run twice. Generated native code can
crash or hang, so untrusted candidates run in worker processes (`compiler.workers`); this
module holds the checks themselves and the handlers those workers execute.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ir.dtypes import DType
from ir.graph import Graph

# Allowed error, relative to the largest magnitude in the reference output.
TOLERANCE = {DType.f32: 1e-4, DType.f16: 1e-2, DType.bf16: 3e-2}

# Input distributions (seed offset, scale, shift): a standard normal; a shifted one that exposes
# cancellation (E[x^2] - E[x]^2); and, for f32, a wide one whose attention-style logits reach
# hundreds, which exposes rewrites that drop softmax's max shift (exp(a - m) -> exp(a) * exp(-m)
# overflows there). Half-precision programs get milder sets: their reference itself overflows early.
INPUT_SETS = ((0, 1.0, 0.0), (1, 3.0, 2.0), (2, 8.0, 0.0))
HALF_INPUT_SETS = ((0, 1.0, 0.0), (1, 2.0, 0.5))


def random_inputs(graph: Graph, seed: int, scale: float = 1.0, shift: float = 0.0) -> list[np.ndarray]:
    """Seeded random arguments for `graph`: scaled normals for floats, never all zeros."""
    rng = np.random.default_rng(seed)
    out = []
    for node in graph.inputs:
        dt = node.dtype
        if dt.is_float:
            a = rng.standard_normal(node.shape, dtype=np.float32) * np.float32(scale) + np.float32(shift)
        elif dt == DType.i32:
            # nonzero (inputs may be divisors), both signs
            a = rng.integers(1, 9, size=node.shape) * rng.choice([-1, 1], size=node.shape)
        else:
            a = rng.random(node.shape) < 0.5
        out.append(np.ascontiguousarray(np.asarray(a).astype(dt.np)))
    return out


def verification_inputs(graph: Graph, seed: int) -> list[list[np.ndarray]]:
    """The input sets every candidate of `graph` is checked on."""
    halves = any(n.dtype in (DType.f16, DType.bf16) for n in graph.inputs)
    sets = HALF_INPUT_SETS if halves else INPUT_SETS
    return [random_inputs(graph, seed * 1000 + k, scale, shift) for k, scale, shift in sets]


def relative_error(expected: np.ndarray, got: np.ndarray) -> tuple[float, float, float]:
    """(max |got - expected| / max |expected|, max abs error, max |expected|) over the elements
    where both are finite; in f32 for f32/halves (enough for tolerances >= 1e-4), f64 for f64."""
    work = np.float64 if expected.dtype == np.float64 else np.float32
    e, g = expected.astype(work, copy=False), got.astype(work, copy=False)
    fin = np.isfinite(e) & np.isfinite(g)
    if not fin.all():
        e, g = e[fin], g[fin]
    if e.size == 0:
        return 0.0, 0.0, 0.0
    err = float(np.max(np.abs(g - e)))
    ref_max = float(np.max(np.abs(e)))
    return err / max(ref_max, float(np.finfo(np.float32).tiny)), err, ref_max


def compare(expected: np.ndarray, got, dtype: DType) -> str | None:
    """None when `got` matches `expected` for an output of `dtype`, else the reason it does not."""
    got = np.asarray(got)
    if got.shape != expected.shape:
        return f"wrong shape {got.shape}, expected {expected.shape}"
    if got.dtype != expected.dtype:
        return f"wrong dtype {got.dtype}, expected {expected.dtype}"
    if not dtype.is_float:
        bad = int(np.count_nonzero(got != expected))
        return f"{bad} of {got.size} elements differ" if bad else None
    e, g = expected.astype(np.float32, copy=False), got.astype(np.float32, copy=False)
    e_fin, g_fin = np.isfinite(e), np.isfinite(g)
    if not (e_fin.all() and g_fin.all()):  # the slow path only where something is not finite
        e_nan, g_nan = np.isnan(e), np.isnan(g)
        if np.any(g_nan & ~e_nan):
            return f"NaN in {int(np.count_nonzero(g_nan & ~e_nan))} of {g.size} elements where the reference has none"
        if np.any(e_nan & ~g_nan):
            return "finite values where the reference has NaN"
        e_inf, g_inf = np.isinf(e), np.isinf(g)
        if np.any(e_inf != g_inf) or np.any(e[e_inf] != g[e_inf]):
            return "infinities differ from the reference"
    rel, err, ref_max = relative_error(e, g)
    tol = TOLERANCE[dtype]
    if rel > tol:
        return f"error {rel:.2e} (max abs {err:.3g} vs reference max {ref_max:.3g}) exceeds tolerance {tol:.0e}"
    return None


@dataclass
class CheckResult:
    """What a worker reports about one candidate."""
    ok: bool
    reason: str = ""
    build_s: float = 0.0
    run_s: float = 0.0          # fastest verification run but the first (a rough hint for pruning)
    note: str = ""
    source_hash: str = ""       # of the generated code: equal programs lower to equal kernels


# Element-ops the numpy interpreter may spend on one input set (~0.5-1 s). Above it (a matmul
# of 1024^3 broadcasts a billion elements) candidates are checked differently: see search.py.
REFERENCE_LIMIT = 2.5e7


def reference_work(graph: Graph) -> int:
    """Elements the interpreter materializes to run `graph` once (views included)."""
    from ir.ops import Op
    return sum(n.numel for n in graph.nodes if n.op not in (Op.INPUT, Op.CONST))


def odd_shape(n: int) -> int:
    """A size near n that is no multiple of any power-of-two tile (1 and odd sizes stay)."""
    return n + 1 if n >= 2 and n % 2 == 0 else n


def odd_specs(specs):
    """The same inputs with every even size n mapped to n + 1, consistently across inputs
    (so sizes that must agree, like a matmul's inner axis, still agree)."""
    from compiler.trace import Spec
    return [Spec(tuple(odd_shape(n) for n in s.shape), s.dtype, s.name) for s in specs]


def shrink_specs(specs, factor: int):
    """Every size n >= 32 divided by `factor` (at least 17), then made odd, one mapping for all inputs."""
    from compiler.trace import Spec
    def size(n):
        return odd_shape(max(17, n // factor)) if n >= 32 else odd_shape(n)
    return [Spec(tuple(size(n) for n in s.shape), s.dtype, s.name) for s in specs]


def odd_variant_graph(trace_fn, specs, limit: float = REFERENCE_LIMIT):
    """`trace_fn(*specs)` at odd sizes (n -> n + 1), shrunk until the interpreter can afford it;
    None if the function does not trace there (it is not shape-generic)."""
    candidates = [odd_specs(specs)] + [shrink_specs(specs, f) for f in (2, 4, 8, 16, 32, 64, 128)]
    for odd in candidates:
        if [s.shape for s in odd] == [s.shape for s in specs]:
            continue
        try:
            g = trace_fn(*odd)
        except Exception:  # hard-coded sizes: a reshape or normalized_shape that no longer fits
            return None
        if reference_work(g) <= limit:
            return g
    return None


def _as_list(outs) -> list:
    return list(outs) if isinstance(outs, (list, tuple)) else [outs]


def _is_float(a: np.ndarray) -> bool:
    return a.dtype.kind == "f" or a.dtype == DType.bf16.np   # bf16's numpy kind is "V"


def max_relative_error(expected: list[np.ndarray], got: list) -> float:
    return max((relative_error(e, np.asarray(g))[0] for e, g in zip(expected, got)
                if _is_float(np.asarray(g)) or _is_float(e)), default=0.0)


def check_executable(exe, input_sets, expected_sets, out_dtypes) -> CheckResult:
    """Run `exe` on every input set; compare with the reference; re-run the first for determinism."""
    first = None
    times = []
    for k, (args, expected) in enumerate(zip(input_sets, expected_sets)):
        t0 = time.perf_counter()
        outs = _as_list(exe(*args))
        times.append(time.perf_counter() - t0)
        run_s = min(times[1:] or times)  # the first call may pay one-time set-up costs
        if k == 0:
            first = [np.array(o, copy=True) for o in outs]
        if len(outs) != len(expected):
            return CheckResult(False, f"returned {len(outs)} outputs, expected {len(expected)}", run_s=run_s)
        for i, (e, g, dt) in enumerate(zip(expected, outs, out_dtypes)):
            reason = compare(e, g, dt)
            if reason:
                label = f"output {i}, " if len(expected) > 1 else ""
                return CheckResult(False, f"mismatch ({label}input set {k}): {reason}", run_s=run_s)
    t0 = time.perf_counter()
    again = _as_list(exe(*input_sets[0]))
    run_s = min(times[1:] + [time.perf_counter() - t0])
    for a, b in zip(first, again):
        if np.asarray(a).tobytes() != np.asarray(b).tobytes():
            return CheckResult(False, "nondeterministic: two runs on the same inputs differ", run_s=run_s)
    return CheckResult(True, run_s=run_s)
