"""What a kernel program costs to run, as counts a cost model weighs (no timing here).

    bytes      every buffer a kernel reads, once, plus what it writes
    mm_half    multiply-accumulates of f16/bf16 matrix products (tensor cores / wide FMA units)
    mm_f32     multiply-accumulates of f32 matrix products
    scalar     other arithmetic (transcendental ops weigh 4)
    kernels    launches (a fixed cost each)
    strided    element loads in an innermost loop that do not step one element per iteration
               (a stride, a div/mod index, a gather): the loop runs at scalar speed and reads a
               cache line per element (a two-level reduction whose inner loop strides by the
               tile ran 3-5x slower than the one-level original on the CPU)
    loops      times an innermost loop is entered (its setup and the vector remainder: a
               reduction split into short tiles pays them per tile)

`program_features` counts them on the kernel IR; a backend with its own plan (CUDA) counts the
same vocabulary on its plan. `compiler/cost_model.py` turns them into predicted seconds.
`kernel_counts` counts one kernel, with one more count a schedule's prior needs (`reduce_steps`:
steps of reductions that are not matrix products, which run in order when a schedule forbids
reassociating them).
"""
from __future__ import annotations

import math

from ir.kernel import Compute, Gather, KernelProgram, Lin, Load, Online, Reduce, Var, children, walk
from ir.ops import Op

FEATURES = ("bytes", "mm_half", "mm_f32", "scalar", "kernels", "strided", "loops")
HEAVY = {Op.EXP2: 4, Op.LOG2: 4, Op.SIN: 4, Op.SQRT: 4, Op.RECIP: 4}
PRODUCT_MIN = 16        # a sum of products at least this long counts as a matrix product


def _is_product(r: Reduce) -> bool:
    body = r.body
    while isinstance(body, Compute) and body.op == Op.CAST:
        body = body.srcs[0]
    extent = math.prod(v.extent for v in r.vars)
    # (a sum of squares, a row's x * x, is a row reduction, not a product of two operands)
    return (r.contraction and extent >= PRODUCT_MIN and isinstance(body, Compute) and body.op == Op.MUL
            and len(set(body.srcs)) > 1)


def _count_value(e, times: float, acc: dict, seen: set | None = None, inner: Var | None = None) -> None:
    """Add the arithmetic of evaluating `e` `times` times inside the loop over `inner` (None:
    not in a loop), and its loads that loop cannot step through one element at a time
    (sub-expressions in `seen` are already counted: a kernel computes a shared value once)."""
    seen = set() if seen is None else seen
    stack = [(e, times, False, inner)]
    while stack:
        x, n, in_product, var = stack.pop()
        if x in seen:
            continue
        seen.add(x)
        if isinstance(x, Reduce):
            inner_n = n * math.prod(v.extent for v in x.vars)
            product = _is_product(x)
            if not (product and len(x.vars) == 1):   # (a one-level product runs as a blocked GEMM)
                acc["loops"] += n * math.prod(v.extent for v in x.vars[:-1])
            if product:
                acc["mm_half" if _half_operands(x) else "mm_f32"] += inner_n
                stack.extend((c, inner_n, True, x.vars[-1]) for c in children(x.body))
            else:
                acc["scalar"] += inner_n
                acc["reduce_steps"] += inner_n
                stack.append((x.body, inner_n, False, x.vars[-1]))
            continue
        if not in_product and ((isinstance(x, Load) and _strided(x.index, var)) or
                               (isinstance(x, Gather) and var is not None)):
            acc["strided"] += n     # (a product kernel packs its operands: strides cost it nothing)
        if isinstance(x, Compute) and not (in_product and x.op == Op.CAST):
            acc["scalar"] += n * HEAVY.get(x.op, 1)
        stack.extend((c, n, in_product and isinstance(x, Compute) and x.op == Op.CAST, var) for c in children(x))


def _strided(index: Lin, var: Var | None) -> bool:
    """The index does not move by 0 or 1 element per step of `var` as a plain term."""
    if var is None:
        return False
    for atom, coeff in index.terms:
        if atom == var:
            if coeff not in (0, 1):
                return True
        elif not isinstance(atom, Var) and var in atom.arg.vars():
            return True
    return False


def _loads(e) -> list[Load]:
    return [x for x in walk(e) if isinstance(x, Load)]


def _half_operands(r: Reduce) -> bool:
    loads = _loads(r.body)
    return bool(loads) and all(x.dtype.itemsize == 2 for x in loads)


def kernel_counts(k, sizes: dict[str, int]) -> dict[str, float]:
    """FEATURES and `reduce_steps` of one kernel; `sizes`: bytes per buffer name."""
    acc = dict.fromkeys(FEATURES + ("reduce_steps",), 0.0)
    acc["kernels"] = 1
    acc["bytes"] = sum(sizes.get(b, 0) for b in k.reads() | k.writes())
    extents = [v.extent for v in k.axes]
    acc["loops"] += math.prod(extents[:-1])
    for let in k.lets:
        outer = math.prod(extents[:let.depth])
        if isinstance(let, Online):
            # one step per tile: the score (tile max) once, shared with the terms; a lane
            # sum (flash attention's P V) adds one multiply-accumulate per lane
            steps, seen = outer * let.var.extent, set()
            acc["loops"] += outer
            _count_value(let.tile_max, steps, acc, seen, let.var)
            for term in let.terms:
                _count_value(term, steps, acc, seen, let.var)
                if let.lane is not None:
                    half = any(x.dtype.itemsize == 2 for x in _loads(term))
                    acc["mm_half" if half else "mm_f32"] += steps * let.lane.extent
        else:
            _count_value(let.value, outer, acc)
    for s in k.stores:
        _count_value(s.value, math.prod(extents), acc, None, k.axes[-1] if k.axes else None)
    return acc


def buffer_bytes(program: KernelProgram) -> dict[str, int]:
    return {b.name: b.size * b.dtype.itemsize for b in program.buffers}


def program_features(program: KernelProgram) -> tuple[float, ...]:
    sizes = buffer_bytes(program)
    counts = [kernel_counts(k, sizes) for k in program.kernels]
    return tuple(float(sum(c[f] for c in counts)) for f in FEATURES)
