"""Check a candidate against a float64 evaluation of the program before it may be timed.

A candidate (a program plus a backend schedule) is built and run on fresh, seeded random
inputs from several families (`ir.numerics`: normal, large logits, a mean-1e4 offset,
cancelling signs, values near a half type's max, and specials: +-inf, NaN, +-0, subnormals,
rows that start with -inf). Each output element must lie within its propagated error bound
of the float64 reference (`ir.bounds`): the bound scales with the condition of the original
program, so correct kernels pass on outputs that are zero up to rounding, integer casts
must match where the cast is not on a rounding edge, and a numerically unstable rewrite
fails on the inputs that expose it. NaN must meet NaN, inf the same inf; results must be
bit-identical when run twice. Generated native code can crash or hang, so untrusted
candidates run in worker processes (`compiler.workers`); this module holds the checks
themselves and the handlers those workers execute.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ir import bounds, numerics
from ir.dtypes import DType
from ir.graph import Graph, toposort
from ir.interpreter import evaluate, perturbed_roundings
from ir.lean import evaluate_lean
from ir.node import Node
from ir.ops import Op

# Allowed error relative to the largest magnitude, for references without a bound (the
# original program under the default schedule, for programs too big for the interpreter).
TOLERANCE = numerics.OUTPUT_TOLERANCE


def random_inputs(graph: Graph, seed: int, scale: float = 1.0, shift: float = 0.0) -> list[np.ndarray]:
    """Seeded random arguments for `graph`: scaled normals for floats, never all zeros."""
    return numerics.random_inputs(graph.inputs, seed, numerics.Family("scaled", scale, shift))


def verification_inputs(graph: Graph, seed: int, bounded: bool = True) -> list[list[np.ndarray]]:
    """The input sets every candidate of `graph` is checked on, one per family (fewer families
    where the reference has no bound: `numerics.verification_families`)."""
    families = numerics.verification_families((n.dtype for n in graph.inputs), bounded)
    sets = [numerics.random_inputs(graph.inputs, seed * 1000 + k, f) for k, f in enumerate(families)]
    weights = weight_fan_ins(graph)
    for f, args in zip(families, sets):
        if f in (numerics.NORMAL, numerics.LOGITS):
            for i, k in weights.items():
                # N(0, 1/k): the family's scale stays on the activations
                _divide_in_place(args[i], f.scale * np.sqrt(k))
    return sets


def _divide_in_place(a: np.ndarray, c: float, block: int = 1 << 20) -> None:
    """a = a / c, divided in float64 and rounded once to a's type, a block at a time (a float64
    copy of a 4e7-element embedding table took longer than drawing it)."""
    flat = a.reshape(-1)
    for start in range(0, flat.size, block):
        part = flat[start:start + block]
        part[...] = part.astype(np.float64) / c


def weight_fan_ins(graph: Graph) -> dict[int, int]:
    """Float inputs that weight a computed value in a sum of products (a matrix product's
    operand, read through views and casts, whose other operand is not an input): input
    position -> the longest sum they enter. Random weights of unit size make every layer
    multiply its activations by sqrt(fan-in): after two layers of a decoder on N(0, 1) inputs
    the scores reach thousands, f32 and float64 differ past any output tolerance, and the
    error bound outgrows the values; models draw weights from N(0, 1/fan-in)."""
    from ir.ops import Op

    def source(n):
        while n.op in (Op.VIEW, Op.CAST) and n.srcs:
            n = n.srcs[0]
        return n
    readers: dict = {}
    for n in graph.nodes:
        for s in n.srcs:
            readers.setdefault(s, []).append(n)
    position = {n: i for i, n in enumerate(graph.inputs)}
    fan_in: dict[int, int] = {}
    for n in graph.nodes:
        if n.op == Op.CONTRACT:
            sums = [(n.srcs, n.arg)]
        elif n.op == Op.MUL and n.dtype.is_float and readers.get(n) and all(r.op == Op.SUM for r in readers[n]):
            sums = [(n.srcs, r.arg) for r in readers[n]]
        else:
            continue
        for (a, b), axes in sums:
            k = int(np.prod([a.shape[i] for i in axes]))
            ends = [source(a), source(b)]
            for mine, other in (ends, ends[::-1]):
                if mine.op == Op.INPUT and other.op != Op.INPUT and mine.dtype.is_float and k > 1:
                    i = position[mine]
                    fan_in[i] = max(fan_in.get(i, 1), k)
    return fan_in


def reference(graph: Graph, args, product_limit: float = np.inf, calibrate: bool = False) -> list[np.ndarray]:
    """The expected outputs of `graph` on `args`: per output, its float64 value and error
    bound packed as one array (`ir.bounds.pack`), which `compare` recognizes; an integer output
    known exactly, its own values (compared exactly: float64 cannot hold every i64). With
    `calibrate` (the normal family), elements whose bound is free or looser than the output
    tolerance get that tolerance where the program's own run agrees with the value, and so do
    its runs with other roundings and, for a half program, its run in f32 (`_calibrated`),
    unless a discrete step of the program is unsure on these inputs."""
    out, native, own, probe, promoted, rounded = [], None, None, None, None, None
    jumps: list = []
    outs = bounds.evaluate_bounded(graph, args, product_limit=product_limit, jumps=jumps)
    # a step (an integer cast near a step, `evaluate_bounded`'s jumps) that correct
    # implementations may take either way on these inputs: the program's own run took one side,
    # a correct kernel may take the other, so no element is held to the own run's value
    calibrate = calibrate and not jumps
    run = _own_run(graph)
    for i, b in enumerate(outs):
        if b.value.dtype.kind in "iu" and not np.any(b.bound):
            out.append(b.value)
            continue
        dtype = graph.outputs[i].dtype
        free = ~(b.bound < np.inf)
        soft = None
        tol = _tolerance(graph, args, b.value) if calibrate and dtype.is_float else None
        if tol is not None and np.any(~(b.bound <= tol)) and run is not None:
            own = run(graph, args, wide=False) if own is None else own
            probe = run(graph, _nudged(args), wide=False) if probe is None else probe
            own_i = np.asarray(own[i]).astype(np.float64)
            margin = _calibration_margin(graph)
            runs = [own_i]
            if margin != CALIBRATION_MARGIN:   # a half program: also as kernels that keep f32 values
                promoted = run(promoted_to_f32(graph), args, wide=False) if promoted is None else promoted
                runs.append(np.asarray(promoted[i]).astype(np.float64))
            # as other correct implementations round it: where that moves the output past the
            # tolerance, the element is ill-conditioned and stays free (several patterns: two
            # values equal in the own run escape one pattern when both move alike)
            rounded = [run(graph, args, wide=False, after=perturbed_roundings(seed=k)) for k in range(ROUNDING_RUNS)] \
                if rounded is None else rounded
            runs += [np.asarray(r[i]).astype(np.float64) for r in rounded]
            soft, bound = _calibrated(b, runs, tol, margin)
            soft = np.where(soft, np.where(_sensitive(own_i, np.asarray(probe[i]).astype(np.float64), tol, margin),
                                           bounds.SOFT_MAY_MISS, bounds.SOFT_HELD), 0.0)
            b = bounds.Bounded(b.value, bound, b.nan)
            free = ~(bound < np.inf)
        nan_ok = None
        free_inf = free & np.isinf(b.value)
        if dtype.is_float and (np.any(b.nan) or np.any(free_inf)):
            # NaN is accepted where a correct implementation may give it (`Bounded.nan`) and where
            # the value is free and finite; where the free value is infinite, only where the
            # program as written, run in its own types, gives NaN too
            nan_ok = b.nan | (free & ~free_inf)
            if np.any(free_inf & ~b.nan):
                native = (run or evaluate_lean)(graph, args) if native is None else native
                with np.errstate(invalid="ignore"):
                    nan_ok = nan_ok | (free & np.isnan(np.asarray(native[i]).astype(np.float64)))
            if soft is not None:
                nan_ok = nan_ok & (soft == 0)   # a NaN there is a miss
        out.append(bounds.pack(b, nan_ok, soft if soft is not None and soft.any() else None))
    return out


# Calibration (programs in f32 and f64 only). A finite float64 value whose first-order bound
# is infinite or looser than the output tolerance (a deep program's bound outgrows its values on
# random inputs: every output of a transformer block at s64 d128 was free on every family, and
# where a decoder's bound was finite it was 15 times the value) is held, on the normal family,
# to the output tolerance relative to the output's largest magnitude wherever the program run
# in its own types (the interpreter, its f32 sums accumulated in f32: accumulated in float64 it
# met the float64 value of a cancelling f32 program, seed 132173, exactly where every target
# errs by an f32 rounding) meets that tolerance CALIBRATION_MARGIN times over: a
# correct implementation errs like that run there. Such elements are `soft`: a few of them
# (bounds.SOFT_MISSES) may miss, since an element next to a discontinuity (a comparison at a
# tie) may round either way. Elsewhere they stay free.
CALIBRATION_MARGIN = 16
# Element-ops of that run (the interpreter, without bounds: about a fifth of the bounded
# evaluation's cost per element-op; 0.2 s for a 1-layer decoder at s64 d128 on 2 cores)
NATIVE_LIMIT = 1e8


def _own_run(graph: Graph):
    """How to run `graph` in its own types for calibration: the interpreter itself, or for a
    program too big for it the same ops without materialized broadcasts (`ir.lean`: a decoder
    layer at s250 d384 is 1.5e9 element-ops there, 3e7 here; its references bounded no output
    element, so verification accepted any value); None where even that is too costly."""
    if reference_work(graph) <= NATIVE_LIMIT:
        return evaluate
    return evaluate_lean if reference_work(graph, matmul=True) <= NATIVE_LIMIT else None


def _calibration_margin(graph: Graph) -> float:
    """How many times closer than the tolerance the program's own run must come to the float64
    value for an element to be held: CALIBRATION_MARGIN, or HALF_CALIBRATION_MARGIN where some
    float of the program is narrower than f32. Its kernel terms may skip a half program's
    roundings (an attention computed in f32 whose program rounds the probabilities to bf16),
    so a correct result differs from the own run by several ulps of the half type: held at
    the f32 margin, three fuzz programs (seeds 129437, 129502, 129563: bf16 and f16 attention)
    had every candidate rejected. Not held at all, an f16 decoder's outputs were all free at
    its odd shapes (a NaN everywhere passed), where its own run is within 2e-3 of the largest
    output and the half tolerance is 1e-2."""
    if all(n.dtype in (DType.f32, DType.f64) for n in graph.nodes if n.dtype.is_float):
        return CALIBRATION_MARGIN
    return HALF_CALIBRATION_MARGIN


HALF_CALIBRATION_MARGIN = 4
ROUNDING_RUNS = 3     # runs with other roundings (`perturbed_roundings`) an element must stay within


def promoted_to_f32(graph: Graph) -> Graph:
    """`graph` with every f16/bf16 value computed and kept in f32 (its inputs read exactly): how
    a kernel that skips the program's half roundings computes it. Held to the tolerance only
    where this run and the program's own both meet it: a softmax rounded to f16 then layer
    normalized over near-equal values (fuzz seed 129502) moved 10 % when kernels kept f32."""
    half = (DType.f16, DType.bf16)
    memo: dict[Node, Node] = {}
    for n in toposort(graph.outputs):
        if n.op == Op.INPUT:
            memo[n] = Node(Op.CAST, DType.f32, n.shape, (n,)) if n.dtype in half else n
            continue
        dt = DType.f32 if n.dtype in half else n.dtype
        memo[n] = Node(n.op, dt, n.shape, tuple(memo[s] for s in n.srcs), n.arg)
    return Graph(graph.inputs, tuple(memo[o] for o in graph.outputs))


def _tolerance(graph: Graph, args, value: np.ndarray) -> float:
    """The output tolerance of the program's narrowest float type (an f32 program cast to f64
    rounds like f32), as an absolute error relative to the output's largest finite magnitude;
    at least CALIBRATION_MARGIN roundings of that type at the inputs' largest magnitude: an
    output that is zero up to rounding (a log-sum-exp of a log-softmax, fuzz seed 132173) has
    no largest value to be relative to."""
    narrow = max((n.dtype for n in graph.nodes if n.dtype.is_float), key=numerics.rounding)
    scale = max((float(np.max(np.abs(a[np.isfinite(a)]), initial=0.0)) for a, n in zip(args, graph.inputs)
                 if n.dtype.is_float), default=0.0)
    top = float(np.max(np.abs(value[np.isfinite(value)]), initial=0.0))
    return max(numerics.OUTPUT_TOLERANCE[narrow] * top, CALIBRATION_MARGIN * numerics.rounding(narrow) * scale)


# The sensitivity probe: the program's own run again on float inputs moved by up to NUDGE_ULPS
# units in the last place (a fixed pattern). A calibrated element that moves by more than
# tol / CALIBRATION_MARGIN there sits near a discontinuity or on a steep slope, and a correct
# kernel's rounding may put it past the tolerance: only such elements may miss
# (`bounds.SOFT_MISSES`). A calibrated element that does not move is held to the tolerance
# without exception: a kernel wrong on one element of a transformer layer's output used to pass.
NUDGE_ULPS = 8


def _nudged(args) -> list[np.ndarray]:
    rng = np.random.default_rng(0x5A7)
    out = []
    for a in args:
        a = np.asarray(a)
        if a.dtype.kind == "f" and a.size:
            ulps = rng.integers(-NUDGE_ULPS, NUDGE_ULPS + 1, a.shape)
            a = (a * (1 + ulps * np.finfo(a.dtype).eps)).astype(a.dtype)
        out.append(a)
    return out


def _sensitive(own: np.ndarray, probe: np.ndarray, tol: float, margin: float = CALIBRATION_MARGIN) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return ~(np.abs(probe - own) * margin <= tol)


def _calibrated(b: bounds.Bounded, runs: list[np.ndarray], tol: float, margin: float = CALIBRATION_MARGIN):
    """(the elements held to `tol`, the bound with them set to it): where every run agrees."""
    v = b.value
    bound = np.broadcast_to(b.bound, v.shape)
    agree = ~(bound <= tol) & np.isfinite(v)
    with np.errstate(invalid="ignore"):
        for native in runs:
            agree &= np.isfinite(native) & (np.abs(native - v) * margin <= tol)
    return agree, np.where(agree, tol, bound)


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
    """None when `got` matches `expected` for an output of `dtype`, else the reason it does not.
    `expected` is a packed float64 reference with bounds (`reference`), or plain values of
    the output's dtype compared relative to their largest magnitude."""
    got = np.asarray(got)
    if bounds.is_packed(expected, got.shape):
        if got.dtype != dtype.np:
            return f"wrong dtype {got.dtype}, expected {dtype.np}"
        value, bound, nan_ok, soft = bounds.unpack(expected)
        return bounds.describe(value, bound, got, dtype, nan_ok, soft)
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
    whole_code: bool = False    # the hash covers all a call runs (else the schedule may add to it)


# Element-ops the numpy interpreter may spend on one input set (~0.5-1 s). Above it (a matmul
# of 1024^3 broadcasts a billion elements) candidates are checked differently: see search.py.
REFERENCE_LIMIT = 2.5e7
# An odd-shape variant's bounded reference runs on every family (five for f32 programs): a
# program without matrix products, whose variant needs no room for a product's tiles, gets a
# variant of half the work (a 4096x4096 elementwise chain: 1025x1025, not 2049x2049; its five
# references took 4 of the 17 s of a compile at budget 1 on two loaded cores).
PRODUCT_FREE_VARIANT_SHARE = 0.5


def variant_fits(g: Graph, limit: float) -> bool:
    """Whether `g`, an odd-shape variant, is small enough for its references (see above)."""
    work = reference_work(g)
    if reference_work(g, matmul=True) == work:    # nothing counted as a matrix product
        limit *= PRODUCT_FREE_VARIANT_SHARE
    return work <= limit


def reference_work(graph: Graph, matmul: bool = False) -> int:
    """Elements the interpreter materializes to run `graph` once (views included). With
    `matmul`, the cost of the bounded float64 reference when its sums of products run as
    matrix products (`ir.bounds`: finite operands, no overflow), in the same unit: a float
    product that only sums read is never formed, nor the views it reads, and each of its
    multiply-adds costs 1 / MATMUL_SPEEDUP of an element; a program without products costs
    what it did."""
    from ir.ops import Op
    if not matmul:
        return sum(n.numel for n in graph.nodes if n.op not in (Op.INPUT, Op.CONST))
    readers: dict = {}
    for n in graph.nodes:
        for s in n.srcs:
            readers.setdefault(s, []).append(n)
    outputs = set(graph.outputs)

    def distinct(n) -> int:   # elements a view chain reads
        while n.op == Op.VIEW and all(v.mask is None for v in n.arg.views):
            n = n.srcs[0]
        return n.numel

    def product(n) -> bool:   # as `ir.bounds` takes it: only sums read it, and it broadcasts
        return (n.op == Op.MUL and n.dtype.is_float and n not in outputs
                and all(r.op == Op.SUM for r in readers.get(n, ()))
                and n.numel >= 4 * sum(distinct(s) for s in n.srcs))
    def operand(n) -> bool:   # a view read only as a product's operand: never materialized
        return (n.op == Op.VIEW and all(v.mask is None for v in n.arg.views) and
                all(product(r) or r.op in (Op.CONTRACT, Op.ATTEND) for r in readers.get(n, ())))
    work = 0
    for n in graph.nodes:
        if n.op in (Op.INPUT, Op.CONST) or product(n) or operand(n):
            continue
        if n.op in (Op.CONTRACT, Op.ATTEND) or (n.op == Op.SUM and product(n.srcs[0])):
            work += n.numel + n.srcs[0].numel // MATMUL_SPEEDUP
        else:
            work += n.numel
    return work


# Multiply-adds of a bounded sum of products, as matrix products, per element-op of the
# elementwise evaluation (2 cores: a 1024^3 f32 product's reference, 1.7e7 units, took 0.1 s;
# elementwise work runs at about 2e-8 s a unit)
MATMUL_SPEEDUP = 64


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


SHRINK_FACTORS = (2, 4, 8, 16, 32, 64, 128)


def odd_variant_graph(trace_fn, specs, limit: float = REFERENCE_LIMIT, max_traces: int = 40):
    """`trace_fn(*specs)` at other sizes, odd where the function allows (n -> n + 1, one
    mapping for all inputs, so sizes that must agree, like a matmul's inner axis, still
    agree), shrunk until the interpreter can afford it; None if it traces at no other sizes.
    Where the function couples sizes (a model width = heads x head size, a hard-coded
    normalized size), not every size can change: the sizes are then shrunk by a common factor
    (which keeps such products where it divides them), or else one at a time, and each size,
    largest first, is made odd if the function still traces with it and the ones already
    changed, then each input axis still even, alone (a size that coincides with a coupled
    one); at most `max_traces` traces."""
    traces = 0

    def attempt(mapped):
        nonlocal traces
        if traces >= max_traces:
            return None
        traces += 1
        try:
            return trace_fn(*(mapped if isinstance(mapped, list) else _mapped(specs, mapped)))
        except Exception:  # coupled or hard-coded sizes: a reshape or normalized_shape no longer fits
            return None
    same = [s.shape for s in specs]
    for odd in [odd_specs(specs)] + [shrink_specs(specs, f) for f in SHRINK_FACTORS]:
        if [s.shape for s in odd] == same:
            continue
        g = attempt(odd)
        if g is None:
            break
        if variant_fits(g, limit):
            return g
    sizes = sorted({n for s in specs for n in s.shape}, reverse=True)
    for factor in (1,) + SHRINK_FACTORS:
        base = {n: n // factor if n >= 32 else n for n in sizes}
        g = attempt(base)
        if g is None:   # shrink the sizes one at a time, largest first, where the function allows
            base = {n: n for n in sizes}
            for n in sizes:
                if n >= 32 and (trial := attempt({**base, n: n // factor})) is not None:
                    base[n], g = n // factor, trial
        if g is None or not variant_fits(g, limit):
            continue
        g = g if factor > 1 else None     # (the compiled sizes themselves are no variant)
        made_odd = {}
        for n in sizes:
            if base[n] % 2 == 0 and base[n] >= 2:
                trial = attempt({**base, **made_odd, n: base[n] + 1})
                if trial is not None:
                    made_odd[n], g = base[n] + 1, trial
        # sizes that stayed even may coincide with a coupled one (a layer norm over 1024 of a
        # 1024x1024 input: the rows can change, the normalized size cannot): one input axis at
        # a time, largest first, each kept where the function still traces
        current = _mapped(specs, {**base, **made_odd})
        even = sorted(((i, a) for i, sp in enumerate(current) for a, m in enumerate(sp.shape) if m >= 2 and m % 2 == 0),
                      key=lambda p: -current[p[0]].shape[p[1]])
        for i, a in even[:MAX_AXIS_TRIES]:
            trial_specs = [_with_size(sp, a, sp.shape[a] + 1) if j == i else sp for j, sp in enumerate(current)]
            if (trial := attempt(trial_specs)) is not None:
                current, g = trial_specs, trial
        if g is not None and variant_fits(g, limit):
            return g
    return None


MAX_AXIS_TRIES = 12   # axis-by-axis odd sizes tried per shrink factor (each a trace of ~10 ms)


def _with_size(spec, axis: int, n: int):
    from compiler.trace import Spec
    return Spec(tuple(n if k == axis else m for k, m in enumerate(spec.shape)), spec.dtype, spec.name)


def _mapped(specs, mapping: dict[int, int]):
    """`specs` with every size n replaced by mapping.get(n, n)."""
    from compiler.trace import Spec
    return [Spec(tuple(mapping.get(n, n) for n in s.shape), s.dtype, s.name) for s in specs]


def _as_list(outs) -> list:
    return list(outs) if isinstance(outs, (list, tuple)) else [outs]


def _is_float(a: np.ndarray) -> bool:
    return a.dtype.kind == "f" or a.dtype == DType.bf16.np   # bf16's numpy kind is "V"


def max_relative_error(expected: list[np.ndarray], got: list) -> float:
    """The largest error relative to the largest reference magnitude, over float outputs."""
    out = 0.0
    for e, g in zip(expected, got):
        g = np.asarray(g)
        if bounds.is_packed(e, g.shape):
            if _is_float(g):
                out = max(out, relative_error(e[0], g.astype(np.float64))[0])
        elif _is_float(g) or _is_float(e):
            out = max(out, relative_error(e, g)[0])
    return out


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
