"""A float64 evaluation of a program with a propagated error bound on every element.

`evaluate_bounded` runs the program like `ir.interpreter` but in float64 (integers and bools
in their own type, with the interpreter's exact meaning) and carries, per element, a bound on
how far a correct implementation in the program's own types may be from that value: every
float op adds BOUND_SAFETY roundings of its result (its dtype's unit roundoff), errors of the
operands propagate through each op's derivative (first order, exact intervals for sqrt,
recip, log2 and exp2), and a sum of n terms adds 2 sqrt(n) roundings of the terms' total
magnitude (`ir.numerics`). So the bound measures the condition of the computation: an output
that is zero up to rounding of large terms has a bound of those terms' size, not zero, and an
unstable rewrite (E[x^2] - E[x]^2 at mean 1e4) exceeds the bound of the stable original.

A bound of inf marks an element whose value a correct implementation cannot pin down (the
operands of a comparison, cast or overflow are within their bounds of the threshold); anything
is accepted there. A float result past the type's largest finite value is +-inf, as in the
program's types; exact specials (inf, NaN) must be matched.

`Bounded.nan` marks where a correct implementation may give NaN although float64 does not:
the operand of sqrt / log2 within its bound of a negative value, inf - inf or 0 * inf between
operands that may be infinite, a sum whose f32 partial sums may overflow both ways (a split
reduction then adds +inf to -inf); it propagates to what depends on it, and a comparison or an
integer cast of a maybe-NaN is unsure.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ir.broadcast_product import BroadcastProduct, distinct, varying_axes
from ir.dtypes import DType
from ir.graph import Graph, toposort
from ir.interpreter import apply_view, elementwise, float_to_int, gather, typed_fill
from ir.node import Node
from ir.numerics import BOUND_SAFETY, MAX_FINITE, SMALLEST_NORMAL, UNIT_ROUNDOFF
from ir.ops import Op
from ir.view import contiguous_strides

K = BOUND_SAFETY
F64 = np.float64
LN2 = float(np.log(2.0))


@dataclass
class Bounded:
    """A node's float64 value (integers, bools: their own type), per-element error bound, and
    where a correct implementation may give NaN (False: nowhere; else a bool array)."""
    value: np.ndarray
    bound: np.ndarray
    nan: np.ndarray | bool = False


class TooCostly(RuntimeError):
    """A sum of products had to be formed elementwise past the evaluation's `product_limit`."""


def evaluate_bounded(graph: Graph, args, matmul: bool = True, product_limit: float = np.inf,
                     jumps: list | None = None) -> list[Bounded]:
    """Evaluate `graph` on `args` (one array per input) in float64 with error bounds; sums of
    products as matrix products where they can (`matmul`; False: always elementwise). A sum
    of more than `product_limit` products that must be formed elementwise (operands with
    infinities or NaN, or near overflow) raises TooCostly instead. `jumps`, when given, receives
    each step whose side is unsure somewhere (a cast to an integer or bool type near a step, an
    unsure integer or bool cast back to a float, a gather at an unsure index): correct
    implementations may take either side there, so nothing downstream can be held to one run's
    values. (A select on an unsure condition is not counted: most are the seams of piecewise
    formulas, sign(x) * f(|x|) with f(0) = 0, continuous across them.)"""
    env = {}
    for node, a in zip(graph.inputs, args):
        env[node] = np.ascontiguousarray(a, dtype=node.dtype.np).reshape(node.shape)
    return evaluate_nodes_bounded(graph.outputs, env, _Mode(matmul, product_limit, jumps))


@dataclass(frozen=True)
class _Mode:
    matmul: bool = True                 # sums of products as matrix products where they can
    product_limit: float = np.inf       # elementwise products formed past this: TooCostly
    jumps: list | None = None           # receives the discrete steps that are unsure somewhere

    def jumped(self, n: Node, unsure) -> None:
        if self.jumps is not None and np.any(unsure):
            self.jumps.append(n)

    def elementwise(self, n: Node) -> None:
        if self.matmul and n.numel > self.product_limit:
            raise TooCostly(f"{n.numel:.3g} products formed elementwise ({n.op.value} of {n.shape})")


def evaluate_nodes_bounded(outputs, env: dict[Node, np.ndarray], mode: "_Mode | None" = None) -> list[Bounded]:
    """Evaluate arbitrary nodes given values for their INPUT leaves (rule checks)."""
    vals: dict[Node, Bounded] = {}
    finals = set(outputs)
    for n, a in env.items():
        a = np.asarray(a, dtype=n.dtype.np).reshape(n.shape)
        vals[n] = Bounded(a.astype(F64) if n.dtype.is_float else a, EXACT)
    with np.errstate(all="ignore"):
        _evaluate(outputs, vals, finals, mode or _Mode())
        outs = [_materialize(vals[o], o) for o in outputs]
    return [Bounded(np.array(b.value, copy=True), np.broadcast_to(b.bound, o.shape).astype(F64),
                    np.broadcast_to(b.nan, o.shape).copy() if o.dtype.is_float else False)
            for b, o in zip(outs, outputs)]


def _evaluate(outputs, vals: dict[Node, Bounded], finals, mode: _Mode) -> None:
    """Fill `vals` (which holds every INPUT leaf) for the nodes below `outputs`. A float
    product that only sums read (a matrix product as the program writes it) waits for them:
    they take it as matrix products where they can (`_sum_of_products`)."""
    order = toposort(outputs)
    readers: dict[Node, list[Node]] = {}
    for n in order:
        for s in n.srcs:
            readers.setdefault(s, []).append(n)
    waiting: dict[Node, list[Bounded]] = {}
    for n in order:
        if n in vals:
            continue
        if n.op == Op.INPUT:
            raise KeyError(f"no value given for input {n.arg}")
        if (mode.matmul and n.op == Op.MUL and n.dtype.is_float and n not in finals
                and all(r.op == Op.SUM for r in readers.get(n, ()))):
            waiting[n] = [vals[s] for s in n.srcs]
            continue
        if n.op == Op.SUM and n.srcs[0] in waiting and n.srcs[0] not in vals:
            b = _sum_of_products(n, n.srcs[0], waiting[n.srcs[0]], n in finals)
            if b is not None:
                vals[n] = b
                continue
        for s in n.srcs:
            if s in waiting and s not in vals:
                mode.elementwise(s)
                _evaluate_one(s, waiting[s], vals, finals, mode)
        _evaluate_one(n, [vals[s] for s in n.srcs], vals, finals, mode)


def _evaluate_one(n: Node, srcs: list[Bounded], vals, finals, mode: _Mode) -> None:
    if n.op not in (Op.SUM, Op.CONTIGUOUS, Op.CONTRACT) and not (n.op == Op.VIEW and _unmasked(n)):
        srcs = [_materialize(b, s) for b, s in zip(srcs, n.srcs)]
    axes = _shared_broadcast_axes(n, srcs, n.arg if n.op in (Op.SUM, Op.MAX) else ()) \
        if n.op in ELEMENTWISE or n.op in (Op.SUM, Op.MAX) else ()
    if axes:
        # every operand repeats along `axes` (a broadcast view): compute once per distinct
        # element and broadcast the result (attention's definition softmaxes its scores
        # broadcast over the head dimension: 64x the work, 2.5 of a GPT-2 layer's 6 s)
        shape = tuple(1 if i in axes else d for i, d in enumerate(n.shape))
        small = Node(n.op, n.dtype, shape, n.srcs, n.arg)    # (an op reads its sources' dtypes only)
        b = _step(small, [_once(s, axes) for s in srcs], n in finals, mode)
        b = Bounded(np.broadcast_to(b.value, n.shape), _spread(b.bound, n.shape),
                    b.nan if b.nan is False else np.broadcast_to(b.nan, n.shape))
    else:
        b = _step(n, srcs, n in finals, mode)
    vals[n] = Bounded(np.asarray(b.value), b.bound, b.nan)   # numpy returns 0-d results as scalars


ELEMENTWISE = frozenset({Op.ADD, Op.MUL, Op.MOD, Op.EXP2, Op.LOG2, Op.SIN, Op.SQRT, Op.RECIP, Op.CAST, Op.CMPLT,
                         Op.WHERE})


def _repeats(x, axis: int, ndim: int) -> bool:
    """`x` (a value, bound or NaN plane) is the same at every position along `axis`."""
    if not isinstance(x, np.ndarray) or x.ndim == 0:
        return True                 # a scalar (EXACT, Rel, False) is the same everywhere
    return x.ndim == ndim and (x.shape[axis] == 1 or x.strides[axis] == 0)


def _shared_broadcast_axes(n: Node, srcs: list[Bounded], reduced=()) -> tuple[int, ...]:
    """The axes along which every operand repeats (a reduction's own axes excepted)."""
    if not n.shape or not srcs:
        return ()
    ndim = len(n.shape)

    def repeats(s: Bounded, i: int) -> bool:
        return (isinstance(s.value, np.ndarray) and s.value.ndim == ndim and _repeats(s.value, i, ndim)
                and _repeats(s.bound, i, ndim) and _repeats(s.nan, i, ndim))
    return tuple(i for i, d in enumerate(n.shape) if d > 1 and i not in reduced and all(repeats(s, i) for s in srcs))


def _once(b: Bounded, axes) -> Bounded:
    def cut(x):
        if not isinstance(x, np.ndarray) or x.ndim == 0:
            return x
        return x[tuple(slice(0, 1) if i in axes else slice(None) for i in range(x.ndim))]
    return Bounded(cut(b.value), cut(b.bound), cut(b.nan))


def _spread(bound, shape):
    return np.broadcast_to(bound, shape) if isinstance(bound, np.ndarray) and bound.ndim else bound


def _attend(n: Node, srcs: list[Bounded], final: bool, mode: _Mode) -> Bounded:
    from ir.terms import attend_primitives
    a, b = (Node(Op.INPUT, s.dtype, s.shape, (), (-1 - i, "attend")) for i, s in enumerate(n.srcs))
    out = attend_primitives(a, b, n.arg[0])
    vals = {a: srcs[0], b: srcs[1]}
    _evaluate([out], vals, {out} if final else set(), mode)
    return vals[out]


def _unmasked(n: Node) -> bool:
    return all(v.mask is None for v in n.arg.views)


# An exact value's bound: the scalar 0.0 (broadcasts in every formula, costs nothing in views)
EXACT = 0.0


def _exact(e) -> bool:
    return isinstance(e, float) and not isinstance(e, Rel) and e == 0.0


def _relative(e):
    """c when the bound `e` is c * |value| (EXACT: 0), else None."""
    if isinstance(e, Rel):
        return float(e)
    return 0.0 if _exact(e) else None


class Rel(float):
    """A bound of exactly this many times |value| per element (a product or sum of exact
    operands): a sum over it needs only the sum of |value|, not a bound array as large as a
    matmul's broadcast product. Other ops materialize it (`_materialize`)."""


def _materialize(b: Bounded, n: Node) -> Bounded:
    if not isinstance(b.bound, Rel):
        return b
    mag = np.abs(distinct(b.value))     # once per distinct element of a broadcast value
    tiny = SMALLEST_NORMAL.get(n.dtype, 0.0)
    bound = np.where(mag < tiny, tiny, float(b.bound) * mag)
    if bound.shape != np.shape(b.value):
        bound = np.broadcast_to(bound, np.shape(b.value))
    return Bounded(b.value, bound, b.nan)


# --- one op ----------------------------------------------------------------------------------

def _finite(x):
    return np.where(np.isfinite(x), x, 0.0)


def _scaled(mag, err):
    """mag * err, with 0 where err is exactly 0 (an exact operand times an infinite one)."""
    if _exact(err):
        return EXACT
    return np.where(err == 0, 0.0, mag * err)


def _view(st, x, fill, bound: bool = False):
    if bound and (_exact(x) or isinstance(x, Rel)):
        return x
    x = np.asarray(x)
    for v in st.views:
        if _expands(v, x):      # (keeps what x repeats along: broadcast arrays stay broadcast)
            x = np.broadcast_to(x, v.shape)
            continue
        x = apply_view(v, np.ascontiguousarray(x).reshape(-1), fill)
    # a read-only strided view (no copy: a matmul's broadcast operands stay views)
    x = x.view()
    x.flags.writeable = False
    return x


def _expands(v, x: np.ndarray) -> bool:
    """The view reads `x` in place, only repeating its size-1 axes (a reduction's result
    spread back over the reduced axis): the same as broadcasting x to the view's shape."""
    if v.mask is not None or v.offset or len(v.shape) != x.ndim:
        return False
    natural = contiguous_strides(x.shape)
    return all((d == s and st == nat) or (s == 1 and st == 0) or (d == 1 and s == 1)
               for d, s, st, nat in zip(v.shape, x.shape, v.strides, natural))


def _step(n: Node, srcs: list[Bounded], final: bool, mode: _Mode = _Mode()) -> Bounded:
    op, dt = n.op, n.dtype
    if op == Op.CONST:      # one element, broadcast (what reads it is computed once per distinct element)
        v = np.array(n.arg, dtype=dt.np)
        return Bounded(np.broadcast_to(v.astype(F64) if dt.is_float else v, n.shape), EXACT)
    if op == Op.IOTA:
        return Bounded(np.arange(n.numel, dtype=np.int32).reshape(n.shape), EXACT)
    if op == Op.GATHER:   # each element keeps its source's bound; an unsure index, any value
        x, idx = srcs
        bound = x.bound if _exact(x.bound) else gather(np.broadcast_to(x.bound, x.value.shape), idx.value, n.arg)
        nan = x.nan if x.nan is False else gather(np.broadcast_to(x.nan, x.value.shape), idx.value, n.arg)
        if not _exact(idx.bound):
            unsure = np.broadcast_to(idx.bound, idx.value.shape) > 0
            mode.jumped(n, unsure)
            bound = np.where(unsure, np.inf, bound)
            nan = nan if x.nan is False else nan | (unsure & bool(np.any(x.nan)))
        return Bounded(gather(x.value, idx.value, n.arg), bound, nan)
    if op == Op.VIEW:
        s = srcs[0]
        fill = n.arg.fill if dt.is_float else typed_fill(n.arg.fill, dt.np)
        nan = s.nan if s.nan is False else _view(n.arg, np.broadcast_to(s.nan, n.srcs[0].shape), False)
        return Bounded(_view(n.arg, s.value, fill), _view(n.arg, s.bound, 0.0, bound=True), nan)
    if op == Op.CONTIGUOUS:
        return Bounded(srcs[0].value.copy(), srcs[0].bound, srcs[0].nan)
    if op in (Op.SUM, Op.MAX):
        return _reduce(n, srcs[0], final)
    if op == Op.CONTRACT:   # the product rounds in the compute type, then the f32-or-wider sum
        prod = Node(Op.MUL, dt.compute, n.srcs[0].shape, n.srcs)
        total = Node(Op.SUM, dt, n.shape, (prod,), n.arg)
        fast = _sum_of_products(total, prod, srcs, final) if mode.matmul else None
        if fast is not None:
            return fast
        mode.elementwise(prod)
        srcs = [_materialize(b, s) for b, s in zip(srcs, n.srcs)]
        return _reduce(total, _float(prod, srcs, False), final)
    if op == Op.ATTEND:     # the bound of its primitive definition (computed in f32, one rounding)
        return _attend(n, srcs, final, mode)
    if op == Op.CAST:
        out = _cast(n, srcs[0], final)
        if not n.srcs[0].dtype.is_float and not _exact(srcs[0].bound):
            mode.jumped(n, np.asarray(srcs[0].bound) > 0)    # an unsure count or flag enters arithmetic
        elif not n.dtype.is_float and not _exact(out.bound):
            mode.jumped(n, np.asarray(out.bound) > 0)        # a value near a step of the cast
        return out
    if op == Op.CMPLT:
        a, b = srcs
        maybe_nan = _or(a.nan, b.nan)                # NaN < x is false, whatever x is
        if _exact(a.bound) and _exact(b.bound) and maybe_nan is False:
            return Bounded(np.asarray(a.value < b.value), EXACT)
        diff = np.abs(a.value.astype(F64, copy=False) - b.value.astype(F64, copy=False))
        width = a.bound + b.bound
        unsure = (width > 0) & ~(diff > width)      # NaN differences (NaN < x) are certain
        return Bounded(np.asarray(a.value < b.value), _or(unsure, maybe_nan).astype(F64))
    if op == Op.WHERE:
        c, a, b = srcs
        cond = c.value.astype(bool)
        nan = False
        if a.nan is not False or b.nan is not False:
            nan = np.where(c.bound > 0, _or(a.nan, b.nan), np.where(cond, a.nan, b.nan))
        if _exact(c.bound) and _exact(a.bound) and _exact(b.bound):
            return Bounded(np.where(cond, a.value, b.value), EXACT, nan)
        either = np.maximum(a.bound, b.bound) + np.abs(a.value.astype(F64, copy=False) - b.value.astype(F64, copy=False))
        e = np.where(c.bound > 0, either, np.where(cond, a.bound, b.bound))
        e = np.where(np.isnan(e), np.inf, e)
        return Bounded(np.where(cond, a.value, b.value), e, nan)
    if not dt.is_float:
        return _integer(n, srcs)
    return _float(n, srcs, final)


def _sum_of_products(total: Node, prod: Node, srcs: list[Bounded], final: bool) -> Bounded | None:
    """`total` (a float SUM of the float MUL `prod` of operands `srcs`) computed as matrix
    products of the operands' distinct elements (`ir.broadcast_product`) instead of
    materializing every product, for finite operand values that broadcast and cannot
    overflow; None where that does not apply (the elementwise path then runs). The bound is
    the elementwise path's (`_float_value`'s product, then `_reduce`) summed over the axes:
    the sums of |a| eb, ea |b| and ea eb are matrix products too, and products that may fall
    under the subnormal floor are counted from operands under its square root, so it is never
    below that path's. Free operand elements (an infinite bound) make the sums they reach free
    and, with another free term or a factor that may be 0, maybe NaN, as there."""
    shape, axes = prod.shape, total.arg
    if not (prod.dtype.is_float and total.dtype.is_float) or 0 in shape:
        return None
    count = int(np.prod([shape[i] for i in axes]))
    full = [(np.broadcast_to(s.value, shape), None if _exact(s.bound) else s.bound) for s in srcs]
    own = [varying_axes([x] + ([] if e is None or isinstance(e, Rel) else [e]) + ([] if s.nan is False else [s.nan]),
                        shape) for (x, e), s in zip(full, srcs)]
    sizes = [int(np.prod([shape[i] for i in o])) for o in own]
    if np.prod(shape, dtype=float) < 4 * sum(sizes):   # little broadcast: nothing to save
        return None
    plan = BroadcastProduct(shape, axes, *own)
    # per operand, at the axes it varies along: value, |value|, finite bound (None: exact),
    # free elements and maybe-NaN elements (None: none), elements that may be 0
    sides = []
    for (x, e), o, src, b in zip(full, own, prod.srcs, srcs):
        idx = tuple(slice(None) if i in o else slice(0, 1) for i in range(len(shape)))
        x = x[idx]
        ax = np.abs(x)
        if not np.isfinite(ax).all():
            return None
        if isinstance(e, Rel):   # as `_materialize` gives it
            tiny = SMALLEST_NORMAL.get(src.dtype, 0.0)
            e = np.where(ax < tiny, tiny, float(e) * ax)
        elif e is not None:
            e = np.broadcast_to(e, shape)[idx]
        free = None if e is None else ~(e < np.inf)
        if free is not None and free.any():
            e = np.where(free, 0.0, e)
        else:
            free = None
        zero = (ax == 0) if e is None else ~(ax > e)
        if free is not None:
            zero = zero | free
        nan = None if b.nan is False else np.broadcast_to(b.nan, shape)[idx]
        sides.append((x, ax, e, free, nan, zero))
    (xa, aa, ea, fa, na, za), (xb, ab, eb, fb, nb, zb) = sides
    peak = [float(np.max(ax, initial=0.0)) + (0.0 if e is None else float(np.max(e, initial=0.0)))
            for _, ax, e, *_ in sides]
    top = min(MAX_FINITE[prod.dtype], MAX_FINITE[total.dtype.compute])
    if peak[0] * peak[1] * count >= top / 4:   # a product or a partial sum near overflow
        return None
    ones = (np.ones_like(aa), np.ones_like(ab))

    def hits(p, q):   # over the axes, the terms where both indicators hold (None: none, True: all)
        if p is None or q is None:
            return 0.0
        return plan(ones[0] if p is True else p.astype(F64), ones[1] if q is True else q.astype(F64))
    v, mag = plan(xa, xb), plan(aa, ab)
    terms = min(count - 1, 2.0 * np.sqrt(count)) if count > 1 else 0.0
    u, up = UNIT_ROUNDOFF[total.dtype], UNIT_ROUNDOFF[prod.dtype]
    if ea is None and eb is None:   # exact operands: the product's bound is relative (`_float_value`)
        e = (K * u * terms + K * up) * mag
    else:
        spread = sum(plan(p, q) for p, q in ((aa, eb), (ea, ab), (ea, eb)) if p is not None and q is not None)
        # each product's own rounding (relative to |p| + its error), and its subnormal floor
        # where |p| may be under it: |a| or |b| under the floor's square root
        tiny = SMALLEST_NORMAL[prod.dtype]
        root = np.sqrt(tiny)
        drift = (1 + K * up) * spread + K * up * mag + tiny * (hits(aa < root, True) + hits(True, ab < root))
        e = (K * u * terms) * (mag + drift) + drift
    nan = None   # NaN in any product of a row may reach its sum
    if na is not None or nb is not None:
        nan = hits(na, True) + hits(True, nb) > 0
    unsure = False
    if fa is not None or fb is not None:
        # terms with a free factor; such a term times a factor that may be 0 may be NaN (0 * inf),
        # and two of them may be infinities of opposite signs
        unknown = hits(fa, True) + hits(True, fb) - hits(fa, fb)
        maybe = (unknown >= 2) | (hits(fa, zb) + hits(za, fb) > 0)
        unsure = np.broadcast_to(unknown > 0, total.shape)
        e = np.where(unknown > 0, np.inf, e)
        nan = maybe if nan is None else nan | maybe
    out = _finish(total, np.array(v), np.broadcast_to(e, total.shape), unsure, final)
    return Bounded(out.value, out.bound, False if nan is None else np.broadcast_to(nan, total.shape).copy())


def _finish(n: Node, v: np.ndarray, e: np.ndarray, unsure, final: bool, overflow64=False) -> Bounded:
    """Add the result's own rounding, map overflow to +-inf as the program's type does, and
    mark elements whose value is not pinned down (`unsure`, NaN bounds, near overflow). An
    output that overflows must be inf; an intermediate that overflows may become finite in
    a rewritten program (log2(exp2(x)) -> x), so what depends on it is left unchecked."""
    dt = n.dtype
    u, top, tiny = UNIT_ROUNDOFF[dt], MAX_FINITE[dt] * (1 + UNIT_ROUNDOFF[dt]), SMALLEST_NORMAL[dt]
    mag = np.abs(v)
    e_in = e
    # (the computed value may be as large as |v| + e: its own rounding is relative to that)
    e = e + (K * u) * (mag + np.where(np.isfinite(e_in), e_in, 0.0))
    e = np.where(mag < tiny, np.maximum(e, tiny), e)   # results that are subnormal (or flushed to 0)
    if not np.isfinite(e).all() or np.any(unsure) or float(np.nanmax(mag + e, initial=0.0)) >= top:
        fin = np.isfinite(v)
        # past the type's range; `overflow64`: even float64 overflowed, from finite operands
        over = (fin & (mag - e >= top)) | overflow64
        near = fin & ~over & (mag + e >= top)
        v = np.where(over, np.copysign(np.inf, v), v)
        # a NaN result is certain unless its op marked it unsure (a NaN bound there is the
        # formula meeting NaN operands, not doubt)
        bad = unsure | (~(e_in < np.inf) & ~np.isnan(v)) | (~(e < np.inf) & np.isfinite(v)) | near \
            | (over if not final else False)
        e = np.where(np.isfinite(v), e, 0.0)       # specials are exact unless marked unsure
        e = np.where(bad, np.inf, e)
    return Bounded(v, e)


def _float(n: Node, srcs: list[Bounded], final: bool) -> Bounded:
    b = _float_value(n, srcs, final)
    nan = False
    for s in srcs:
        nan = _or(nan, s.nan)
    return Bounded(b.value, b.bound, _or(nan, _op_may_give_nan(n.op, srcs)))


def _op_may_give_nan(op: Op, srcs: list[Bounded]):
    """Where `op` may give NaN on operands within their bounds although float64 does not:
    inf - inf, 0 * inf, the root or log of a value that may be negative, sin or fmod of a
    value that may be infinite, fmod by a value that may be 0 (False: nowhere)."""
    xs, es = [s.value for s in srcs], [s.bound for s in srcs]
    if op in (Op.SQRT, Op.LOG2):
        may = xs[0] - es[0] < 0
        return may if may.any() else False
    if op not in (Op.ADD, Op.MUL, Op.MOD, Op.SIN) or all(_all_finite(x, e) for x, e in zip(xs, es)):
        return False
    inf = [np.isinf(x) | ~(np.asarray(e) < np.inf) for x, e in zip(xs, es)]
    if op == Op.SIN:
        may = inf[0]
    elif op == Op.ADD:   # infinities that may have opposite signs
        a, b = xs
        same = np.isinf(a) & (a == b) & (np.asarray(es[0]) == 0) & (np.asarray(es[1]) == 0)
        may = inf[0] & inf[1] & ~same
    else:
        zero = [~(np.abs(x) > e) for x, e in zip(xs, es)]
        may = (inf[0] & zero[1]) | (inf[1] & zero[0]) if op == Op.MUL else inf[0] | zero[1]
    return may if may.any() else False


def _all_finite(x, e) -> bool:
    """Every value and bound finite (broadcast operands checked once per distinct element)."""
    return bool(np.isfinite(distinct(x)).all()) and (np.ndim(e) == 0 and np.isfinite(e) or bool(np.isfinite(distinct(e)).all()))


def _or(a, b):
    """Union of two maybe-NaN planes (False: empty)."""
    if a is False:
        return b
    if b is False:
        return a
    return np.logical_or(a, b)


def _float_value(n: Node, srcs: list[Bounded], final: bool) -> Bounded:
    op = n.op
    xs = [s.value.astype(F64, copy=False) for s in srcs]
    es = [s.bound for s in srcs]
    unsure = False
    for e in es:
        if not _exact(e):
            unsure = unsure | np.isinf(e)
    a, ea = xs[0], es[0]
    u = UNIT_ROUNDOFF[n.dtype]
    if op == Op.ADD:
        v, e = a + xs[1], ea + es[1]
    elif op == Op.MUL and _relative(ea) is not None and _relative(es[1]) is not None:
        ca, cb = _relative(ea), _relative(es[1])
        v = a * xs[1]
        c = ca + cb + ca * cb + K * u
        top = MAX_FINITE[n.dtype] / (1 + c)
        if float(np.nanmax(np.abs(v), initial=0.0)) < top and not np.isnan(v).any():
            return Bounded(v, Rel(c))                   # the common case: no overflow, no NaN
        e = (ca + cb + ca * cb) * _finite(np.abs(v))
    elif op == Op.MUL:
        b, eb = xs[1], es[1]
        v = a * b
        e = _scaled(np.abs(a), eb) + _scaled(np.abs(b), ea) + _scaled(ea, eb)
        # inf times a finite factor whose sign is certain is a certain inf; inf times a zero
        # that may not be zero is not a certain NaN
        sure = (np.isinf(a) & (eb < np.abs(b))) | (np.isinf(b) & (ea < np.abs(a)))
        e = np.where(~np.isfinite(v) & sure, 0.0, e)
        unsure = unsure | (np.isnan(v) & ((np.isinf(a) & (eb > 0)) | (np.isinf(b) & (ea > 0))))
    elif op == Op.MOD:
        b, eb = xs[1], es[1]
        v = np.fmod(a, b)
        q = np.abs(np.trunc(a / b))
        drift = ea + _scaled(q, eb)
        wraps = (np.abs(v) <= drift) | (np.abs(b) - np.abs(v) <= drift)
        e = np.where((ea == 0) & (eb == 0), 0.0, np.where(wraps, np.abs(b) + eb + ea, drift))
        unsure = unsure | ((eb > 0) & (eb >= np.abs(b)))              # a divisor that may be 0
    elif op == Op.EXP2:
        # the argument is (almost always) computed: its own rounding, amplified by exp2's
        # condition |a| ln 2, is part of the bound (exp2(x) * exp2(y) -> exp2(x + y) is fine)
        v = np.exp2(a)
        e = _scaled(v, np.expm1((ea + u * _finite(np.abs(a))) * LN2)) + K * u * _finite(np.abs(v))
    elif op == Op.LOG2:
        v = np.log2(a)
        rel = ea / np.abs(a)
        e = np.where(ea == 0, 0.0, np.where(rel < 1, -np.log2(1 - rel), np.inf)) + K * u * np.fmax(_finite(np.abs(v)), 1.0)
        unsure = unsure | ((a < 0) & (a + ea >= 0) & (ea > 0))   # NaN, or the log of a tiny value
    elif op == Op.SIN:
        v = np.sin(a)
        e = np.minimum(ea, 2.0) + K * u * (1 + _finite(np.abs(a)))  # range reduction loses |a| ulps
    elif op == Op.SQRT:
        v = np.sqrt(a)
        lo = np.sqrt(np.maximum(a - ea, 0.0))
        e = np.where(ea == 0, 0.0, np.maximum(v - lo, np.sqrt(np.maximum(a, 0.0) + ea) - v))
        unsure = unsure | ((a < 0) & (a + ea >= 0) & (ea > 0))   # NaN, or the root of a tiny value
    elif op == Op.RECIP:
        v = 1.0 / a
        m = np.abs(a)
        # (ea / m) / (m - ea): m * (m - ea) overflows float64 past 1e154 and made the bound 0
        e = np.where(ea == 0, 0.0, np.where(ea < m, ea / m / (m - ea), np.inf))
    else:
        raise NotImplementedError(f"no error bound for {op}")
    overflow64 = False
    if op in (Op.ADD, Op.MUL, Op.EXP2):
        overflow64 = np.isinf(v) & np.logical_and.reduce([np.isfinite(x) for x in xs])
    elif op == Op.RECIP:    # 1 / a past float64's range: a subnormal divisor (1 / 0 is an exact inf)
        overflow64 = np.isinf(v) & np.isfinite(xs[0]) & (xs[0] != 0)
    return _finish(n, v, e, unsure, final, overflow64)


def _integer(n: Node, srcs: list[Bounded]) -> Bounded:
    """Integer and bool results of add, mul, mod: the interpreter's values, bounds from uncertain operands."""
    v = elementwise(n.op, n.dtype, n.srcs[0].dtype, [s.value for s in srcs])
    ea, eb = srcs[0].bound, srcs[1].bound
    a, b = (np.abs(s.value.astype(F64, copy=False)) for s in srcs)
    if n.op == Op.ADD:
        e = ea + eb
    elif n.op == Op.MUL:
        e = _scaled(a, eb) + _scaled(b, ea) + _scaled(ea, eb)
    else:
        e = np.where((ea == 0) & (eb == 0), 0.0, b + eb)
    return Bounded(v, e)


def _cast(n: Node, s: Bounded, final: bool) -> Bounded:
    dt, src = n.dtype, n.srcs[0].dtype
    if dt == DType.bool:
        x = s.value.astype(F64, copy=False)
        unsure = (s.bound > 0) & (s.bound >= np.abs(x))
        return Bounded(s.value != 0, _or(unsure, s.nan).astype(F64))   # NaN is true
    if dt.is_int:
        if not src.is_float:   # exact (wrapping); an unsure source wraps anywhere
            narrows = dt.itemsize < src.itemsize
            return Bounded(s.value.astype(dt.np), s.bound if _exact(s.bound) or not narrows
                           else np.where(s.bound > 0, np.inf, s.bound))
        x = s.value
        lo, hi = np.trunc(x - s.bound), np.trunc(x + s.bound)
        e = np.maximum(np.abs(hi - np.trunc(x)), np.abs(np.trunc(x) - lo))
        # NaN and out of range (of i64, or of the i32 that narrower casts go through): implementation-defined
        inside = np.abs(x) + s.bound < (2.0 ** 63 if dt == DType.i64 else 2.0 ** 31)
        if s.nan is not False:
            inside = inside & ~s.nan
        v = float_to_int(np.where(inside, x, 0.0), dt.np)
        if dt.itemsize < 4:    # the bound is on the i32 value: an unsure one may wrap anywhere
            e = np.where(e > 0, np.inf, e)
        return Bounded(v, np.where(inside & np.isfinite(e), e, np.inf))
    # to a float type: the value rounds to it (overflow included), as the program's does
    x = s.value.astype(F64, copy=False)
    out = _finish(n, x, np.zeros(n.shape) + s.bound, np.isinf(s.bound), final)
    v = np.where(np.isfinite(out.value), out.value.astype(dt.np).astype(F64), out.value)
    return Bounded(v, out.bound, s.nan if src.is_float else False)


def _reduce(n: Node, s: Bounded, final: bool) -> Bounded:
    axes, dt = n.arg, n.dtype
    count = int(np.prod([n.srcs[0].shape[a] for a in axes])) if axes else 1
    if n.op == Op.MAX:
        if s.value.size == 0:
            fill = -np.inf if dt.is_float else typed_fill(-np.inf, dt.np)
            return Bounded(np.full(n.shape, fill, F64 if dt.is_float else dt.np), EXACT)
        e = s.bound if _exact(s.bound) else s.bound.max(axis=axes, keepdims=True)
        return Bounded(s.value.max(axis=axes, keepdims=True), e, _any(s.nan, s.value.shape, axes))
    if not dt.is_float:
        v = s.value.sum(axis=axes, keepdims=True, dtype=s.value.dtype)
        return Bounded(v, s.bound if _exact(s.bound) else s.bound.sum(axis=axes, keepdims=True))
    x = s.value
    v = x.sum(axis=axes, keepdims=True)
    ax = np.abs(x)
    mag = ax.sum(axis=axes, keepdims=True)
    if not np.isfinite(mag).all():
        mag = np.where(np.isfinite(ax), ax, 0.0).sum(axis=axes, keepdims=True)
    terms = min(count - 1, 2.0 * np.sqrt(count)) if count > 1 else 0.0
    # a half-typed sum may run in blocks whose partial sums are stored in the half type
    # (a split reduction): its accumulation is bounded in that type's rounding
    u = UNIT_ROUNDOFF[dt]
    if isinstance(s.bound, Rel):
        e = (K * u * terms + float(s.bound)) * mag      # sum of c |x_i| over the axis
    elif not _exact(s.bound):
        drift = s.bound.sum(axis=axes, keepdims=True)
        # the accumulation rounds relative to the computed terms, which may be as large as
        # |x_i| + e_i (a term whose value is 0 but may be 1e4, e.g. a flipped bool times a weight)
        e = (K * u * terms) * (mag + np.where(np.isfinite(drift), drift, 0.0)) + drift
    else:
        e = (K * u * terms) * mag
    # partial sums of an f32 accumulation may overflow where the total does not
    top = MAX_FINITE[dt.compute]
    unsure = np.isinf(e) | (mag >= top)
    overflow64 = np.isinf(v) & np.isfinite(x).all(axis=axes, keepdims=True)
    out = _finish(n, v, e, unsure, final, overflow64)
    nan = _any(s.nan, x.shape, axes)
    if np.any(unsure) or not _all_finite(x, 0.0):
        nan = _or(nan, _sum_may_give_nan(x, s.bound, axes, top))
    return Bounded(out.value, out.bound, nan)


def _any(nan, shape, axes):
    """A maybe-NaN plane reduced over `axes` (NaN anywhere in a row may reach its result)."""
    return nan if nan is False else np.broadcast_to(nan, shape).any(axis=axes, keepdims=True)


def _sum_may_give_nan(x, bound, axes, top):
    """Where partial sums of the terms, each within its bound, may reach both +inf and -inf
    (past `top`, the accumulation type's range): a split sum then adds +inf to -inf. A term of
    unknown value (an infinite bound) may be an infinity of either sign."""
    e = float(bound) * np.abs(x) if isinstance(bound, Rel) else np.broadcast_to(bound, x.shape)
    free = ~(e < np.inf)
    fin = np.isfinite(x)
    slack = np.where(free, 0.0, e)
    up = (np.where(fin, np.maximum(x, 0.0), 0.0) + slack).sum(axis=axes, keepdims=True)
    down = (np.where(fin, np.maximum(-x, 0.0), 0.0) + slack).sum(axis=axes, keepdims=True)
    pos = (up >= top) | ((x == np.inf) & ~free).any(axis=axes, keepdims=True)
    neg = (down >= top) | ((x == -np.inf) & ~free).any(axis=axes, keepdims=True)
    unknown = free.sum(axis=axes, keepdims=True)
    may = (pos & neg) | ((unknown >= 1) & (pos | neg)) | (unknown >= 2)
    return may if may.any() else False


# --- transport and comparison ----------------------------------------------------------------

def pack(b: Bounded, nan_ok: np.ndarray | None = None, soft: np.ndarray | None = None) -> np.ndarray:
    """value and bound stacked as one float64 array of shape (2, *shape), for sending to workers;
    with `nan_ok` (where a NaN result is acceptable) a third plane, shape (3, *shape); with
    `soft` (elements of which a few may miss: `describe`) a fourth, shape (4, *shape)."""
    planes = [b.value.astype(F64), np.broadcast_to(b.bound, np.shape(b.value)).astype(F64)]
    if soft is not None and nan_ok is None:
        nan_ok = ~(planes[1] < np.inf)     # the meaning of no plane: NaN where the bound is infinite
    planes += [np.asarray(nan_ok, F64)] if nan_ok is not None else []
    planes += [np.asarray(soft, F64)] if soft is not None else []
    return np.stack(planes)


def is_packed(expected: np.ndarray, got_shape) -> bool:
    return expected.dtype == F64 and expected.shape[:1] in ((2,), (3,), (4,)) and expected.shape[1:] == tuple(got_shape)


def unpack(expected: np.ndarray):
    """(value, bound, nan_ok or None, soft or None) of a packed reference; soft holds 0, SOFT_HELD
    or SOFT_MAY_MISS per element."""
    return (expected[0], expected[1], (expected[2] != 0 if len(expected) >= 3 else None),
            (expected[3] if len(expected) == 4 else None))


# Of the `soft` elements of a packed reference (bounds calibrated on the program's own run,
# `compiler.verify._calibrated`), this fraction (at least one) may miss, among those marked
# SOFT_MAY_MISS (the program's own run moved there when its inputs moved by a few ulps: a
# comparison or a saturated softmax near a tie may round either way); those marked SOFT_HELD
# may not. A wrong kernel misses far more, or where nothing is near a tie.
SOFT_MISSES = 0.01
SOFT_HELD, SOFT_MAY_MISS = 1.0, 2.0


def allowed(value: np.ndarray, bound: np.ndarray, dtype: DType) -> np.ndarray:
    """The largest |got - value| accepted per element (inf: anything)."""
    if not dtype.is_float:
        return bound
    mag = np.where(np.isfinite(value), np.abs(value), 0.0)
    return bound + UNIT_ROUNDOFF[dtype] * mag + SMALLEST_NORMAL[dtype]


def mismatches(value: np.ndarray, bound: np.ndarray, got: np.ndarray, dtype: DType, nan_ok=None):
    """(mask of elements that differ beyond their bound, |got - value| / allowed per element).
    `nan_ok`: where a NaN is acceptable, also where the bound is finite (`Bounded.nan`); elsewhere
    a NaN differs even where the bound is infinite (past the type's range the value is free, but
    NaN is not a value a correct implementation gives there). Without it, NaN is accepted only
    where the bound is infinite."""
    g = np.asarray(got).astype(F64)
    tol = allowed(value, bound, dtype)
    with np.errstate(all="ignore"):
        if dtype == DType.bool:
            bad = (g != value) & (bound == 0)
            return bad, bad.astype(F64)
        diff = np.abs(g - value)
        ratio = np.where(tol > 0, diff / tol, np.where(diff > 0, np.inf, 0.0))
        free = ~(tol < np.inf)
        if not dtype.is_float:
            bad = (diff > tol) & ~free
        else:
            nan, inf = np.isnan(value), np.isinf(value)
            bad = np.where(nan, ~np.isnan(g), np.where(inf, g != value, ~np.isfinite(g) | (diff > tol)))
            bad = bad & ~free
            if nan_ok is not None:
                got_nan = np.isnan(g) & ~nan
                bad = np.where(got_nan, ~nan_ok, bad)
                free = (free | got_nan) & ~bad
        ratio = np.where(free | np.isnan(ratio), 0.0, ratio)
        ratio = np.where(bad & ~np.isfinite(ratio), np.inf, ratio)
    return bad, ratio


def describe(value: np.ndarray, bound: np.ndarray, got: np.ndarray, dtype: DType, nan_ok=None,
             soft=None) -> str | None:
    """None when every element of `got` is within its bound (of the `soft` ones marked
    SOFT_MAY_MISS, all but a SOFT_MISSES fraction of the soft ones), else what differs and where."""
    bad, ratio = mismatches(value, bound, got, dtype, nan_ok)
    if soft is not None:
        soft = np.asarray(soft, F64)
        held, may_miss = soft != 0, soft == SOFT_MAY_MISS
        missed = int(np.count_nonzero(bad & may_miss))
        if missed <= max(1, int(SOFT_MISSES * np.count_nonzero(held))):
            bad = bad & ~may_miss
    count = int(np.count_nonzero(bad))
    if not count:
        return None
    g = np.asarray(got).astype(F64)
    kinds = []
    if dtype.is_float:
        for what, mask in (("NaN where the reference has none", np.isnan(g) & ~np.isnan(value)),
                           ("finite values where the reference has NaN", ~np.isnan(g) & np.isnan(value)),
                           ("infinities differ from the reference", (np.isinf(g) | np.isinf(value)) & ~np.isnan(g) & ~np.isnan(value))):
            k = int(np.count_nonzero(bad & mask))
            if k:
                kinds.append(f"{k} {what}")
    worst = np.unravel_index(int(np.argmax(np.where(bad, ratio, -1.0))), bad.shape) if bad.ndim else ()
    tol = allowed(value, bound, dtype)[worst]
    where = f" at {tuple(int(i) for i in worst)}" if worst else ""
    kind = f" ({'; '.join(kinds)})" if kinds else ""
    return (f"{count} of {bad.size} elements outside their error bound{kind}; worst{where}: got {g[worst]:.6g}, "
            f"float64 reference {value[worst]:.6g} +- {tol:.3g}")
