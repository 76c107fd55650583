"""The kernel terms' meanings as primitive programs (and contraction terms).

A backend that has no kernel for a term runs this definition instead (the same primitives the
frontend builds for softmax and a matrix product), and the error bounds of a term are those of
this definition computed in f32 (the kernels compute in f32 and round only the result).
"""
from __future__ import annotations

from ir import node as N
from ir.dtypes import DType
from ir.graph import Graph, toposort
from ir.node import Node
from ir.ops import ELEMENTWISE, Op


def _bcast(x: Node, shape) -> Node:
    return N.move(x, lambda st: st.expand(tuple(shape)))


def softmax2(x: Node, axis: int) -> Node:
    """exp2(x - max x) / sum exp2(x - max x) along `axis`, in x's dtype."""
    shape = x.shape
    row_max = _bcast(N.reduce(Op.MAX, x, (axis,)), shape)
    p = N.unary(Op.EXP2, N.binary(Op.ADD, x, N.binary(Op.MUL, row_max, N.const(-1.0, shape, x.dtype))))
    return N.binary(Op.MUL, p, N.unary(Op.RECIP, _bcast(N.reduce(Op.SUM, p, (axis,)), shape)))


def constant_axes(n: Node, depth: int = 32) -> set[int]:
    """Axes of size > 1 along which n cannot change: stride-0 axes of a view, kept through
    elementwise ops (a scaled or masked broadcast). A cheap local analysis: it looks `depth`
    ops deep and no further (an empty set is always a safe answer)."""
    if n.op == Op.CONST:
        return {i for i, s in enumerate(n.shape) if s > 1}
    if depth == 0:
        return set()
    if n.op == Op.VIEW:
        v = n.arg.views[-1]
        return {i for i, (s, st) in enumerate(zip(v.shape, v.strides))
                if st == 0 and s > 1 and (v.mask is None or v.mask[i] == (0, s))}
    if n.op in ELEMENTWISE and all(s.shape == n.shape for s in n.srcs):
        out = None
        for src in n.srcs:
            axes = constant_axes(src, depth - 1)
            out = axes if out is None else out & axes
            if not out:
                return set()
        return out or set()
    return set()


def attend_primitives(a: Node, b: Node, axis: int) -> Node:
    """sum(softmax2(a, axis) * b, axis) as the softmax and a contraction, computed in f32 (f64
    for f64) and rounded once to a's dtype. Where a only broadcasts its source (attention's
    scores), the softmax is computed once per distinct row and broadcast, as a program would
    write it: `a` read at index 0 of its constant axes, those axes dropped."""
    work = a.dtype if a.dtype in (DType.f32, DType.f64) else DType.f32
    y = b if b.dtype == work else N.cast(b, work)
    const = constant_axes(a) - {axis}
    x = a if a.dtype == work else N.cast(a, work)
    if const:
        rows = tuple(s for i, s in enumerate(a.shape) if i not in const)
        x = N.move(x, lambda st: st.shrink(tuple((0, 1) if i in const else (0, s) for i, s in enumerate(a.shape)))
                   .reshape(rows))
        p = softmax2(x, axis - sum(1 for i in const if i < axis))
        p = N.move(p, lambda st: st.reshape(tuple(1 if i in const else s for i, s in enumerate(a.shape)))
                   .expand(a.shape))
    else:
        p = softmax2(x, axis)
    out = N.contract(p, y, (axis,))
    return out if out.dtype == a.dtype else N.cast(out, a.dtype)


def expand_terms(graph: Graph, which=None) -> Graph:
    """`graph` with its online-contraction terms (those `which(node)` picks; default all)
    written as their primitive definition (iterative, any depth; inputs and output order kept)."""
    chosen = {n for n in graph.nodes if n.op == Op.ATTEND and (which is None or which(n))}
    if not chosen:
        return graph
    new: dict[Node, Node] = {}
    for n in toposort(graph.outputs):
        srcs = tuple(new[s] for s in n.srcs)
        if n in chosen:
            new[n] = attend_primitives(srcs[0], srcs[1], n.arg[0])
        else:
            new[n] = n if srcs == n.srcs else Node(n.op, n.dtype, n.shape, srcs, n.arg)
    return Graph(graph.inputs, tuple(new[o] for o in graph.outputs))
