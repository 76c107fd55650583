"""Structural matchers on the primitive graph: which reductions are matrix products, which
matrix-product chains are attention, which views are per-row broadcasts.

A matrix product in primitive form is SUM over one axis of MUL(a, b) where a is constant
along some output axes ("n") and b along others ("m"). Attention is the naive form
softmax(c * (Q K^T)) V that the frontend builds, recognized op by op.
"""
from __future__ import annotations

from dataclasses import dataclass

from ir.node import Node
from ir.ops import Op
from ir.view import View, contiguous_strides


@dataclass(frozen=True)
class GemmMatch:
    reduce: Node        # the SUM node (its output is the product)
    mul: Node
    a: Node             # operand varying along m (constant along n)
    b: Node             # operand varying along n (constant along m)
    k_axis: int
    m_axes: tuple[int, ...]
    n_axes: tuple[int, ...]
    batch_axes: tuple[int, ...]


def _const_axes(x: Node) -> set[int]:
    """Axes along which x's value cannot change (size 1, or stride 0 in its last view)."""
    axes = {i for i, s in enumerate(x.shape) if s == 1}
    if x.op == Op.VIEW:
        v = x.arg.views[-1]
        for i, st in enumerate(v.strides):
            full = v.mask is None or v.mask[i] == (0, v.shape[i])
            if st == 0 and full:
                axes.add(i)
    elif x.op == Op.CONST:
        axes |= set(range(len(x.shape)))
    return axes


def match_gemm(r: Node) -> GemmMatch | None:
    if r.op != Op.SUM or len(r.arg) != 1 or not r.dtype.is_float:
        return None
    x = r.srcs[0]
    if x.op != Op.MUL:
        return None
    k = r.arg[0]
    if x.shape[k] < 2:
        return None
    ca, cb = _const_axes(x.srcs[0]), _const_axes(x.srcs[1])
    m_axes, n_axes, batch = [], [], []
    for i, s in enumerate(x.shape):
        if i == k or s == 1:
            continue
        in_a, in_b = i in ca, i in cb
        if in_b and not in_a:
            m_axes.append(i)
        elif in_a and not in_b:
            n_axes.append(i)
        else:
            batch.append(i)
    if not m_axes and not n_axes:
        return None
    a, b = x.srcs
    if not m_axes:               # orient so that the operand varying along n is b
        a, b, m_axes, n_axes = b, a, n_axes, m_axes
    return GemmMatch(r, x, a, b, k, tuple(m_axes), tuple(n_axes), tuple(batch))


def is_pure_reshape(v: Node) -> bool:
    """v reads its source's contiguous layout in order (a reshape, nothing else)."""
    return v.op == Op.VIEW and len(v.arg.views) == 1 and v.arg.views[0] == View.contiguous(v.shape) \
        and v.numel == v.srcs[0].numel


def is_row_broadcast(v: Node) -> bool:
    """v = src of shape (..., 1) broadcast along the last axis to v.shape (same leading axes)."""
    if v.op != Op.VIEW or len(v.arg.views) != 1:
        return False
    src = v.srcs[0]
    if len(src.shape) != len(v.shape) or src.shape[:-1] != v.shape[:-1] or src.shape[-1] != 1:
        return False
    want = View(v.shape, contiguous_strides(src.shape)[:-1] + (0,), 0, None).canonical()
    return v.arg.views[0].canonical() == want


def _mul_const(n: Node):
    """n = MUL(x, CONST c) in either order -> (x, c); else None."""
    if n.op != Op.MUL:
        return None
    a, b = n.srcs
    if b.op == Op.CONST:
        return a, float(b.arg)
    if a.op == Op.CONST:
        return b, float(a.arg)
    return None


@dataclass(frozen=True)
class AttentionMatch:
    out: GemmMatch       # P @ V
    qk: GemmMatch        # Q @ K^T
    scale_log2: float    # softmax(Q K^T * s) == exp2(Q K^T * scale_log2 - m) / sum
    internal: frozenset  # nodes computed inside the fused kernel (never materialized)


def peel_casts(n: Node) -> Node:
    """Skip float-to-float casts (they change rounding only; the fused kernels compute in f32)."""
    while n.op == Op.CAST and n.dtype.is_float and n.srcs[0].dtype.is_float:
        n = n.srcs[0]
    return n


def match_attention(pv: GemmMatch) -> AttentionMatch | None:
    """softmax(c * (Q @ K^T)) @ V in the frontend's primitive form, axes batch..., m, k, n."""
    r2 = pv.reduce
    nd = len(r2.shape)
    if nd < 3 or pv.k_axis != nd - 2 or pv.m_axes != (nd - 3,) or pv.n_axes != (nd - 1,):
        return None
    pview = pv.a
    if pview.op != Op.VIEW or len(pview.arg.views) != 1:
        return None
    p = peel_casts(pview.srcs[0])
    # P = E * bcast(recip(sum(E)))
    if p.op != Op.MUL:
        return None
    def recip_of_sum(x: Node):   # bcast(recip(sum)) or recip(bcast(sum)) -> the sum
        if x.op == Op.VIEW and is_row_broadcast(x) and x.srcs[0].op == Op.RECIP:
            return x.srcs[0].srcs[0]
        if x.op == Op.RECIP and x.srcs[0].op == Op.VIEW and is_row_broadcast(x.srcs[0]):
            return x.srcs[0].srcs[0]
        return None
    e, rb = p.srcs
    if recip_of_sum(rb) is None:
        e, rb = rb, e
    ssum = recip_of_sum(rb)
    if ssum is None:
        return None
    if ssum.op != Op.SUM or ssum.srcs[0] is not e or ssum.arg != (len(e.shape) - 1,):
        return None
    # E = exp2((S + bcast(max(S)) * -1) * c)
    if e.op != Op.EXP2:
        return None
    mc = _mul_const(e.srcs[0])
    if mc is None:
        return None
    diff, c = mc
    if diff.op != Op.ADD:
        return None
    s, negmax = diff.srcs
    if _mul_const(negmax) is None:
        s, negmax = negmax, s
    nm = _mul_const(negmax)
    if nm is None or nm[1] != -1.0 or not is_row_broadcast(nm[0]):
        return None
    smax = nm[0].srcs[0]
    if smax.op != Op.MAX or smax.srcs[0] is not s or smax.arg != (len(s.shape) - 1,):
        return None
    # S = reshape(QK) * scale   (or reshape(QK)), casts between float types allowed anywhere
    scale = 1.0
    inner = peel_casts(s)
    sc = _mul_const(inner)
    if sc is not None:
        inner, scale = peel_casts(sc[0]), sc[1]
    if not is_pure_reshape(inner):
        return None
    qk = match_gemm(inner.srcs[0])
    if qk is None:
        return None
    r1 = qk.reduce
    if len(r1.shape) != nd or qk.k_axis != nd - 2 or qk.m_axes != (nd - 3,) or qk.n_axes != (nd - 1,):
        return None
    if r1.shape[:nd - 2] != r2.shape[:nd - 2]:
        return None
    if p.shape != s.shape or s.shape[-1] != r1.shape[-1] or pv.mul.shape[nd - 2] != s.shape[-1]:
        return None
    # every node from P@V's left operand down to Q@K^T is computed inside the fused kernel
    internal, stack = {pv.mul}, [pview]
    while stack:
        n = stack.pop()
        if n in internal:
            continue
        internal.add(n)
        if n is not r1:
            stack.extend(x for x in n.srcs if x.op != Op.CONST)
    return AttentionMatch(pv, qk, scale * c, frozenset(internal))
