"""The numpy reference interpreter: the definition of what every primitive op means.

Half types (f16, bf16) compute in f32 and round to storage after every op; reductions
accumulate in f32 (or wider) whatever the storage type; f64 computes in f64. Integers wrap. Every backend and every rewrite
rule is checked against this file.
"""
from __future__ import annotations

import numpy as np

from ir.broadcast_product import BroadcastProduct, distinct, varying_axes
from ir.dtypes import DType
from ir.graph import Graph, toposort
from ir.node import IRError, Node
from ir.ops import Op
from ir.view import ShapeTracker, View


def typed_fill(fill: float, dtype: np.dtype):
    """`fill` (a float) as a value of `dtype`: for integers, +-inf saturate to the type's range and NaN
    is 0; for bool, nonzero (NaN included) is True."""
    if dtype == np.bool_:
        return bool(fill != 0)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if np.isnan(fill):
            return 0
        return int(min(max(fill, info.min), info.max))
    return fill


def apply_view(v: View, flat: np.ndarray, fill) -> np.ndarray:
    """Read `flat` (a 1-D contiguous buffer) through one view."""
    shape = v.shape
    if v.mask is None:
        box, lo = shape, (0,) * len(shape)
    else:
        lo = tuple(m[0] for m in v.mask)
        box = tuple(max(m[1] - m[0], 0) for m in v.mask)
    item = flat.itemsize
    offset = v.offset + sum(l * st for l, st in zip(lo, v.strides))
    if min(box, default=1) == 0:
        inner = np.empty(box, flat.dtype)
    else:
        # as_strided reads raw memory: refuse a view that points outside its source
        first = offset + sum(min(0, (b - 1) * st) for b, st in zip(box, v.strides))
        last = offset + sum(max(0, (b - 1) * st) for b, st in zip(box, v.strides))
        if first < 0 or last >= flat.size:
            raise IRError(f"view {v} reads elements {first}..{last} of a source of {flat.size}")
        inner = np.lib.stride_tricks.as_strided(flat[offset:], shape=box,
                                                strides=tuple(st * item for st in v.strides))
    if v.mask is None:
        return inner
    out = np.full(shape, typed_fill(fill, flat.dtype), dtype=flat.dtype)
    out[tuple(slice(l, l + b) for l, b in zip(lo, box))] = inner
    return out


def _read_views(st: ShapeTracker, x: np.ndarray) -> np.ndarray:
    """`x` read through each of the tracker's views in turn (a view of `x` where no view masks)."""
    for v in st.views:
        x = apply_view(v, np.ascontiguousarray(x).reshape(-1), st.fill)
    return x


def apply_tracker(st: ShapeTracker, x: np.ndarray) -> np.ndarray:
    arr = _read_views(st, x)
    # a fresh C-ordered array: never an alias of the source, and 0-d stays 0-d
    # (np.ascontiguousarray would turn a 0-d result into shape (1,))
    return np.array(arr, order="C", copy=True)


def view_of(st: ShapeTracker, x: np.ndarray) -> np.ndarray:
    """`apply_tracker` without its copy where the views read `x` in place: a read-only numpy
    view (a broadcast keeps its zero strides, so a product over it is not materialized)."""
    arr = _read_views(st, x)
    if np.shares_memory(arr, x):
        arr = arr.view()
        arr.flags.writeable = False
        return arr
    return arr


def contract(a: np.ndarray, b: np.ndarray, axes, acc) -> np.ndarray:
    """sum(a * b) over `axes` (kept as length 1) of a and b broadcast against each other, in
    `acc`: a `BroadcastProduct` (a matrix product of the elements each side varies along), so
    neither the broadcast operands nor their products are materialized. Factors that are inf
    or NaN are left out of that product and their terms counted by products of indicator
    arrays instead (a matrix library may skip zero factors, where inf * 0 must give NaN): a
    NaN term, or +inf and -inf terms together, give NaN; +inf or -inf terms alone, that
    infinity."""
    shape = np.broadcast_shapes(a.shape, b.shape)
    axes = tuple(sorted({ax % len(shape) for ax in axes})) if shape else ()
    out_shape = tuple(1 if i in axes else n for i, n in enumerate(shape))
    if 0 in shape:
        return np.zeros(out_shape, acc)
    a, b = distinct(a).astype(acc), distinct(b).astype(acc)
    product = BroadcastProduct(shape, axes, varying_axes([a], shape), varying_axes([b], shape))
    fa, fb = np.isfinite(a), np.isfinite(b)
    if fa.all() and fb.all():
        return np.array(product(a, b), order="C")
    with np.errstate(all="ignore"):
        out = product(np.where(fa, a, 0), np.where(fb, b, 0))
        terms = lambda *pairs: sum(product(x.astype(acc), y.astype(acc)) for x, y in pairs)
        inf_a, inf_b, one_a, one_b = ~fa & ~np.isnan(a), ~fb & ~np.isnan(b), np.ones_like(fa), np.ones_like(fb)
        nan = terms((np.isnan(a), one_b), (one_a, np.isnan(b)), (inf_a, b == 0), (a == 0, inf_b))
        plus = terms((a == np.inf, b > 0), (a == -np.inf, b < 0), (fa & (a > 0), b == np.inf), (fa & (a < 0), b == -np.inf))
        minus = terms((a == np.inf, b < 0), (a == -np.inf, b > 0), (fa & (a > 0), b == -np.inf), (fa & (a < 0), b == np.inf))
        out = np.where(plus > 0, acc(np.inf), np.where(minus > 0, acc(-np.inf), out))
        out = np.where((nan > 0) | ((plus > 0) & (minus > 0)), acc(np.nan), out)
    return np.array(np.broadcast_to(out, out_shape), order="C")


def attend(a: np.ndarray, b: np.ndarray, axis, acc, out_shape) -> np.ndarray:
    """softmax2 of the scores `a` over `axis`, then the sum of its products with `b` over it
    (a and b broadcast against each other), in `acc`. The softmax is taken over the scores'
    distinct elements (a score repeated along the values' axes is exponentiated once) and the
    sum is a `contract`."""
    shape = np.broadcast_shapes(a.shape, b.shape)
    axes = tuple(sorted({x % len(shape) for x in (axis if isinstance(axis, (tuple, list)) else (axis,))}))
    if 0 in shape:
        a, b = a.astype(acc), b.astype(acc)
        m = a.max(axis=axes, keepdims=True) if a.size else np.full(out_shape, -np.inf, acc)
        p = np.exp2(a - m)
        return (p * b).sum(axis=axes, keepdims=True) / p.sum(axis=axes, keepdims=True)
    # the scores at their distinct elements, but every key present (each counts in the sums)
    a = distinct(a).astype(acc)
    a = np.broadcast_to(a, tuple(shape[i] if i in axes else n for i, n in enumerate(a.shape)))
    p = np.exp2(a - a.max(axis=axes, keepdims=True))
    ratio = contract(p, distinct(b), axes, acc) / p.sum(axis=axes, keepdims=True)
    return np.array(np.broadcast_to(ratio, out_shape), order="C")


def accumulator(dt: DType, wide: bool = True):
    """What a float sum or contraction of type `dt` accumulates in: f64 in f64, f32 in f64
    (a reference; `wide=False`: in f32, as a target's do), halves in f32."""
    if dt == DType.f64:
        return np.float64
    return np.float64 if wide and dt == DType.f32 else np.float32


def _compute(x: np.ndarray, dtype: DType) -> np.ndarray:
    return x.astype(np.float32) if dtype.compute != dtype else x


def _eval_node(n: Node, vals: list[np.ndarray], wide: bool = True) -> np.ndarray:
    op, dt = n.op, n.dtype
    with np.errstate(all="ignore"):
        if op == Op.CONST:
            return np.full(n.shape, n.arg, dtype=dt.np)
        if op == Op.IOTA:
            return np.arange(n.numel, dtype=np.int32).reshape(n.shape)
        if op == Op.GATHER:
            return gather(vals[0], vals[1], n.arg)
        if op == Op.VIEW:
            return view_of(n.arg, vals[0])
        if op == Op.CONTIGUOUS:
            return vals[0].copy()
        if op == Op.CONTRACT:   # products and sums of halves in f32, of f32 and f64 in f64 (like SUM)
            return contract(vals[0], vals[1], n.arg, accumulator(dt, wide)).astype(dt.np)
        if op == Op.ATTEND:     # softmax2 over the axis, then the weighted sum (f32; f64 for f32 and f64)
            return attend(vals[0], vals[1], n.arg, accumulator(dt, wide), n.shape).astype(dt.np)
        if op in (Op.SUM, Op.MAX):
            x = vals[0]
            if op == Op.SUM:
                acc = accumulator(dt, wide) if dt.is_float else x.dtype
                r = x.astype(acc).sum(axis=n.arg, keepdims=True) if dt.is_float else \
                    x.sum(axis=n.arg, keepdims=True, dtype=acc)
            else:
                r = x.max(axis=n.arg, keepdims=True) if x.size else \
                    np.full(n.shape, typed_fill(-np.inf, dt.np), dt.np)
            return r.astype(dt.np)
        return elementwise(op, dt, n.srcs[0].dtype, vals)


def gather(x: np.ndarray, idx: np.ndarray, axis: int) -> np.ndarray:
    """take_along_axis, reading 0 (False for bool) where an index is outside [0, n): no target
    ever reads outside its buffer, and the frontend wraps negative indices before this."""
    n = x.shape[axis]
    ok = (idx >= 0) & (idx < n)
    if n == 0 or idx.size == 0:
        return np.zeros(idx.shape, x.dtype)
    got = np.take_along_axis(x, np.where(ok, idx, 0).astype(np.intp), axis)
    return np.where(ok, got, np.zeros((), x.dtype)).astype(x.dtype)


def float_to_int(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """A float cast to an integer type: truncated toward zero; to i64 directly, to i32 and
    narrower through i32 and then wrapped (C's `(T)(int)x`; PyTorch's CPU casts agree in range).
    Past the intermediate's range it saturates and NaN gives 0, on every target (the CPU's
    saturating conversion, CUDA's `cvt.rzi`): C leaves those undefined, and LLVM treats them
    as poison that the optimizer may fold to anything."""
    t = np.trunc(x.astype(np.float64))
    wide = np.int64 if dtype == np.int64 else np.int32
    lo, hi = np.iinfo(wide).min, np.iinfo(wide).max
    top = -float(lo)            # 2^31 or 2^63: exact in float64, where float(hi) is not for i64
    with np.errstate(invalid="ignore"):
        v = np.where((t >= lo) & (t < top), t, 0.0).astype(wide)       # NaN: 0
    v = np.where(t >= top, hi, np.where(t < lo, lo, v)).astype(wide)
    return v if dtype == wide else v.astype(dtype)


def int_mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer `mod` as every target computes it, never trapping: C's truncated remainder, with
    a % 0 = 0 and a % -1 = 0 (INT_MIN % -1 too, as in PyTorch; x86's idiv would fault on both)."""
    trap = (b == 0) | (b == -1)
    return np.where(trap, 0, np.fmod(a, np.where(trap, 1, b))).astype(a.dtype)


def _mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return int_mod(a, b) if a.dtype.kind in "iu" else np.fmod(a, b)


_MATH = {
    Op.EXP2: np.exp2, Op.LOG2: np.log2, Op.SIN: np.sin, Op.SQRT: np.sqrt,
    Op.RECIP: lambda a: np.float32(1) / a, Op.ADD: np.add, Op.MUL: np.multiply, Op.MOD: _mod,
}


def elementwise(op: Op, dtype: DType, src_dtype: DType, vals) -> np.ndarray:
    """The numpy meaning of one elementwise primitive (`dtype`: the result's, `src_dtype`: the
    first operand's). The kernel-IR evaluator calls this too, so both share one definition."""
    with np.errstate(all="ignore"):
        if op == Op.CAST:
            src = vals[0]
            if dtype == DType.bool:
                return src != 0
            if dtype.is_int and src_dtype.is_float:
                return float_to_int(src, dtype.np)
            return src.astype(dtype.np)
        if op == Op.WHERE:
            return np.where(vals[0], vals[1], vals[2])
        xs = [_compute(v, src_dtype) for v in vals]
        if op == Op.CMPLT:
            return xs[0] < xs[1]
        return np.asarray(_MATH[op](*xs)).astype(dtype.np)


def evaluate(graph: Graph, args, wide: bool = True, after=None) -> list[np.ndarray]:
    """Run `graph` on numpy arrays `args` (one per graph input, in order). f32 sums accumulate
    in float64 (a reference); `wide=False`: in f32, as a target's do. `after(node, value)`, if
    given, replaces each computed value (e.g. moved by a few ulps: `perturbed_roundings`)."""
    env: dict[Node, np.ndarray] = {}
    for node, a in zip(graph.inputs, args):
        env[node] = np.ascontiguousarray(a, dtype=node.dtype.np).reshape(node.shape)
    for n in toposort(graph.outputs):
        if n in env:
            continue
        if n.op == Op.INPUT:
            raise KeyError(f"no value given for input {n.arg}")
        env[n] = _eval_node(n, [env[s] for s in n.srcs], wide)
        if after is not None:
            env[n] = after(n, env[n])
    # an output that is an input (or a view of one, read-only) is returned as a copy, never as
    # the caller's own array
    return [env[o].copy() if o.op == Op.INPUT or not env[o].flags.writeable else env[o] for o in graph.outputs]


def evaluate_nodes(outputs, env: dict[Node, np.ndarray]) -> list[np.ndarray]:
    """Evaluate arbitrary nodes given values for their INPUT leaves (used by rule checks)."""
    env = dict(env)
    for n in toposort(outputs):
        if n not in env:
            env[n] = _eval_node(n, [env[s] for s in n.srcs])
    return [env[o] for o in outputs]


def perturbed_roundings(ulps: int = 4, seed: int = 0):
    """An `after` for `evaluate`: each computed f32 or f64 value (not a view of one) moved by up
    to `ulps` units in the last place, in a fixed pattern: the program as another correct
    implementation may round it (sums in another order, another exp2). Half values are left as
    they are: implementations round them at the same points."""
    rng = np.random.default_rng(seed)

    def after(n: Node, value):
        if n.op == Op.VIEW or n.dtype not in (DType.f32, DType.f64) or not isinstance(value, np.ndarray) \
                or not value.size:
            return value
        k = rng.integers(-ulps, ulps + 1, value.shape)
        with np.errstate(all="ignore"):
            return (value * (1 + k * np.finfo(value.dtype).eps)).astype(value.dtype)
    return after
