"""Numerics in one place: per-dtype rounding units and tolerances, and the random input
families that verification, rule checks, tests and benchmarks draw from.

Two kinds of comparison use these tables:
- against a float64 evaluation with a propagated error bound (`ir.bounds`): an element may
  differ by BOUND_SAFETY times its bound plus one rounding of its output type;
- against plain arrays (a reference that is itself a compiled program, or a test's numpy
  formula): `OUTPUT_TOLERANCE` relative to the largest magnitude, or `ELEMENT_TOLERANCE`
  (rtol, atol) per element.

Input families are named so failures can say which one exposed them. Besides the standard
normal they include the distributions that expose numerically unsound programs: a large
offset (mean 1e4, std 1: E[x^2] - E[x]^2 cancels), wide dynamic range, values near the
type's largest finite value, cancellation-prone sums (large values of both signs), and
special values (+-inf, NaN, +-0, subnormals, rows that start with -inf).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ir.dtypes import DType

# unit roundoff (half an ulp of 1) of each float type; halves compute in f32 (ir.interpreter)
UNIT_ROUNDOFF = {DType.f64: 2.0 ** -53, DType.f32: 2.0 ** -24, DType.f16: 2.0 ** -11, DType.bf16: 2.0 ** -8}
# largest finite value and smallest normal of each float type
# (bf16 from its format, 8 exponent and 7 fraction bits, so that no bf16 type is imported here)
_NP = {DType.f64: np.float64, DType.f32: np.float32, DType.f16: np.float16}
MAX_FINITE = {**{d: float(np.finfo(t).max) for d, t in _NP.items()}, DType.bf16: (2 - 2.0 ** -7) * 2.0 ** 127}
SMALLEST_NORMAL = {**{d: float(np.finfo(t).smallest_normal) for d, t in _NP.items()}, DType.bf16: 2.0 ** -126}
SMALLEST_SUBNORMAL = {**{d: float(np.finfo(t).smallest_subnormal) for d, t in _NP.items()}, DType.bf16: 2.0 ** -133}

# An element passes when |got - reference| <= BOUND_SAFETY * bound + one rounding of its type.
# The bound (ir.bounds) models a summation of n terms as 4 sqrt(n) roundings of the terms'
# magnitude, a probabilistic model: a worst-case (n - 1) bound would pass E[x^2] - E[x]^2 on
# mean-1e4 inputs; the safety factor covers transcendental implementations (a few ulp) and
# orderings whose rounding errors do not cancel.
BOUND_SAFETY = 4.0

# Allowed error relative to the largest magnitude in a reference output, where the reference
# is plain values without a bound (a compiled program standing in for the interpreter).
OUTPUT_TOLERANCE = {DType.f64: 1e-12, DType.f32: 1e-4, DType.f16: 1e-2, DType.bf16: 3e-2}

# (rtol, atol) per element for one rounded op, in the style of JAX's test utilities; composite
# ops widen both by a scale (tests/tolerances.py).
ELEMENT_TOLERANCE = {
    DType.f64: (1e-13, 1e-14),
    DType.f32: (1e-5, 1e-6),
    DType.f16: (2e-3, 1e-3),
    DType.bf16: (1.6e-2, 1e-2),
    **{d: (0.0, 0.0) for d in (DType.i64, DType.i32, DType.i8, DType.u8, DType.bool)},   # exact
}


def rounding(dtype: DType) -> float:
    """The unit roundoff of `dtype` (0 for integers and bool)."""
    return UNIT_ROUNDOFF.get(dtype, 0.0)


# --- input families --------------------------------------------------------------------------

@dataclass(frozen=True)
class Family:
    """A distribution of random inputs. `scale`/`shift` apply to the standard normal family."""
    name: str
    scale: float = 1.0
    shift: float = 0.0

    def __str__(self) -> str:
        return self.name


NORMAL = Family("normal")
SHIFTED = Family("shifted", 3.0, 2.0)           # mild offset: mean 2, std 3
LOGITS = Family("logits", 8.0)                  # attention logits reach hundreds: exp overflow
OFFSET = Family("offset", 1.0, 1e4)             # mean 1e4, std 1: catastrophic cancellation
DYNAMIC = Family("dynamic")                     # magnitudes 1e-6 .. 1e6, both signs
NEAR_MAX = Family("near_max")                   # |x| in [1/8, 1/2] of the type's max (parameters: normal)
CANCEL = Family("cancel")                       # +-1e4 + N(0, 1): sums of both signs cancel
SPECIAL = Family("special")                     # normal, sprinkled with inf/NaN/0/subnormals
MASKED = Family("masked")                       # normal, -inf past a cut per row (and per column): a mask's -inf tiles
FAMILIES = {f.name: f for f in (NORMAL, SHIFTED, LOGITS, OFFSET, DYNAMIC, NEAR_MAX, CANCEL, SPECIAL, MASKED)}


def random_array(rng: np.random.Generator, shape, dtype: DType, family: Family = NORMAL,
                 mild: bool = False) -> np.ndarray:
    """One seeded random array of `dtype` from `family` (integers: nonzero, both signs; bool: fair).
    `mild` arrays (parameters broadcast into every row) get zeros and subnormals only as
    specials, and normal values instead of near-max ones: near-max weights would overflow every
    product with a near-max row, and a bound that is inf everywhere checks nothing."""
    shape = tuple(shape)
    if dtype == DType.bool:
        return rng.random(shape) < 0.5
    if dtype == DType.u8:
        return rng.integers(1, 9, size=shape).astype(np.uint8)     # nonzero (inputs may be divisors)
    if dtype.is_int:
        # nonzero (inputs may be divisors), both signs
        return (rng.integers(1, 9, size=shape) * rng.choice([-1, 1], size=shape)).astype(dtype.np)
    if family.name == "dynamic":
        a = 10.0 ** rng.uniform(-6, 6, shape) * rng.choice([-1.0, 1.0], shape)
    elif family.name == "near_max" and not mild:
        a = MAX_FINITE[dtype] * rng.uniform(0.125, 0.5, shape) * rng.choice([-1.0, 1.0], shape)
    elif family.name == "cancel":
        a = 1e4 * rng.choice([-1.0, 1.0], shape) + rng.standard_normal(shape)
    else:
        # f64 inputs are drawn in f64: f32 draws would hide a target that computes in f32
        wide = np.float64 if dtype == DType.f64 else np.float32
        a = np.asarray(rng.standard_normal(shape, dtype=wide))
        # in place (the same roundings as a * scale + shift): an embedding table is 4e7
        # elements, and every fresh array of that size costs more than drawing it
        if family.scale != 1:
            a *= wide(family.scale)
        if family.shift != 0:
            a += wide(family.shift)
    if family.name == "special":
        a = _sprinkle(rng, a.astype(np.float64), dtype, mild)
    elif family.name == "masked" and not mild:
        a = _masked(rng, a.astype(np.float64))
    with np.errstate(over="ignore"):    # (a fresh array here: copied only to change its type; 0-d stays 0-d)
        return np.require(np.asarray(a).astype(dtype.np, copy=False), requirements="C")


def _sprinkle(rng: np.random.Generator, a: np.ndarray, dtype: DType, mild: bool) -> np.ndarray:
    """Rows (along the last axis) by kind, so that one NaN does not hide the rest: every 5th
    row starts with a run of -inf (a running max starting at -inf must not compute
    -inf - (-inf)), or, every other such row, ends with one (a tile of -inf after finite
    values); the next gets zeros, signed zeros and subnormals; the next one inf or NaN
    each; the fourth stays as drawn; the fifth is positive and starts with a run of zeros (a row
    computed from it by log starts with -inf, which the other kinds' negative values hide: the
    e-graph's tiled softmax once subtracted a tile's max of -inf from itself)."""
    if a.size == 0:
        return a
    rows = a.reshape(-1, a.shape[-1] if a.ndim else 1).copy()
    width = rows.shape[1]
    tiny = SMALLEST_SUBNORMAL[dtype]
    small = np.array([0.0, -0.0, tiny, -3 * tiny, 7 * tiny])
    for r in range(rows.shape[0]):
        kind = 1 if mild else r % 5
        if kind == 0 and r // 5 % 2 == 0:
            rows[r, :int(rng.integers(1, width + 1))] = -np.inf
        elif kind == 0:     # a mask's shape: finite, then -inf to the end (whole trailing tiles)
            rows[r, int(rng.integers(1, width + 1)) - 1:] = -np.inf
        elif kind == 1:
            at = rng.random(width) < 0.25
            rows[r, at] = small[rng.integers(0, len(small), int(at.sum()))]
        elif kind == 2:
            rows[r, int(rng.integers(0, width))] = (np.inf, -np.inf, np.nan)[r // 5 % 3]
        elif kind == 4:   # positive, starting with a run of zeros: log(0) computes a run of -inf
            rows[r] = np.abs(rows[r])
            rows[r, :int(rng.integers(1, width + 1))] = 0.0
    return rows.reshape(a.shape)


def _masked(rng: np.random.Generator, a: np.ndarray) -> np.ndarray:
    """-inf past a random cut in each row along the last axis (what a causal mask adds to a
    score row: whole trailing tiles of -inf after finite values; some rows all -inf), and on
    2-d and larger arrays past a cut along one other axis too, so a split of any axis meets
    tiles that are -inf throughout."""
    if a.size == 0 or a.ndim == 0:
        return a
    a = a.copy()
    width = a.shape[-1]
    cuts = rng.integers(0, width + 1, a.shape[:-1])
    a[np.arange(width) >= cuts[..., None]] = -np.inf
    if a.ndim >= 2:
        axis = int(rng.integers(0, a.ndim - 1))
        n = a.shape[axis]
        keep = np.arange(n) < int(rng.integers(n // 2, n + 1))
        a[(slice(None),) * axis + (~keep,)] = -np.inf
    return a


def random_inputs(specs, seed: int, family: Family = NORMAL) -> list[np.ndarray]:
    """Seeded random arguments for inputs given as (shape, dtype) pairs or nodes/specs with
    `.shape` and `.dtype`. Inputs of lower rank than the highest (weights, biases) get only
    the mild specials, so an inf in a weight does not reach every row."""
    rng = np.random.default_rng(seed)
    pairs = [(tuple(s.shape), s.dtype) if hasattr(s, "shape") else (tuple(s[0]), s[1]) for s in specs]
    top = max((len(shape) for shape, _ in pairs), default=0)
    return [random_array(rng, shape, dtype, family, mild=len(shape) < top) for shape, dtype in pairs]


def verification_families(dtypes, bounded: bool = True) -> tuple[Family, ...]:
    """The families a candidate over inputs of `dtypes` is verified on: the normal set, large
    logits (f32: a dropped max shift overflows), the large offset, cancellation (f32), values
    near the type's max (halves) and specials. Without a bounded float64 reference (`bounded`
    False: the reference is the original program's own f32 result) only the families on which
    two correct evaluations agree to a fixed relative tolerance: on ill-conditioned inputs
    (attention scores of mean-1e4 queries and keys) any two evaluation orders differ, and
    stability is judged where a bound exists."""
    halves = any(d in (DType.f16, DType.bf16) for d in dtypes)
    if not bounded:
        return (NORMAL,) if halves else (NORMAL, LOGITS)
    if halves:
        return (NORMAL, OFFSET, NEAR_MAX, SPECIAL)
    return (NORMAL, LOGITS, OFFSET, CANCEL, SPECIAL)
