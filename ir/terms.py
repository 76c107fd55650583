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
from ir.ops import Op


def _bcast(x: Node, shape) -> Node:
    return N.move(x, lambda st: st.expand(tuple(shape)))


def softmax2(x: Node, axis: int) -> Node:
    """exp2(x - max x) / sum exp2(x - max x) along `axis`, in x's dtype."""
    shape = x.shape
    row_max = _bcast(N.reduce(Op.MAX, x, (axis,)), shape)
    p = N.unary(Op.EXP2, N.binary(Op.ADD, x, N.binary(Op.MUL, row_max, N.const(-1.0, shape, x.dtype))))
    return N.binary(Op.MUL, p, N.unary(Op.RECIP, _bcast(N.reduce(Op.SUM, p, (axis,)), shape)))


def _broadcast_source(a: Node, axis: int):
    """(source, its axis) when a only broadcasts its source along new axes other than `axis`
    (attention's scores read along the value axis), else None."""
    if a.op != Op.VIEW or len(a.arg.views) != 1:
        return None
    v, src = a.arg.views[0], a.srcs[0]
    if v.mask is not None or v.offset != 0:
        return None
    new = [i for i, (s, st) in enumerate(zip(v.shape, v.strides)) if st == 0 and s > 1]
    kept = [i for i in range(len(v.shape)) if i not in new]
    if axis in new or tuple(v.shape[i] for i in kept) != src.shape:
        return None
    want = N.move(src, lambda st: st.reshape(tuple(1 if i in new else s for i, s in enumerate(v.shape)))
                  .expand(v.shape))
    if want is not a and (want.op != Op.VIEW or want.arg.views[0].canonical() != v.canonical()):
        return None
    return src, kept.index(axis)


def attend_primitives(a: Node, b: Node, axis: int) -> Node:
    """sum(softmax2(a, axis) * b, axis) as the softmax and a contraction, computed in f32 (f64
    for f64) and rounded once to a's dtype. Where a only broadcasts its source (attention's
    scores), the softmax is computed on the source and broadcast, as a program would write it."""
    work = a.dtype if a.dtype in (DType.f32, DType.f64) else DType.f32
    y = b if b.dtype == work else N.cast(b, work)
    found = _broadcast_source(a, axis)
    if found is not None:
        src, src_axis = found
        s = src if src.dtype == work else N.cast(src, work)
        p = N.view(softmax2(s, src_axis), a.arg)
    else:
        p = softmax2(a if a.dtype == work else N.cast(a, work), axis)
    out = N.contract(p, y, (axis,))
    return out if out.dtype == a.dtype else N.cast(out, a.dtype)


def expand_terms(graph: Graph, ops=frozenset({Op.ATTEND})) -> Graph:
    """`graph` with every kernel term whose op is in `ops` written as its primitive definition
    (iterative, any depth; inputs and output order kept)."""
    if not any(n.op in ops for n in graph.nodes):
        return graph
    new: dict[Node, Node] = {}
    for n in toposort(graph.outputs):
        srcs = tuple(new[s] for s in n.srcs)
        if n.op == Op.ATTEND and Op.ATTEND in ops:
            new[n] = attend_primitives(srcs[0], srcs[1], n.arg[0])
        else:
            new[n] = n if srcs == n.srcs else Node(n.op, n.dtype, n.shape, srcs, n.arg)
    return Graph(graph.inputs, tuple(new[o] for o in graph.outputs))
