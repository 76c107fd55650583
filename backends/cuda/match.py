"""Reading the primitive graph for the planner: the axes of a contraction term, which
product chains are attention, which views are per-row broadcasts.

A contraction (a CONTRACT term, expanded by the planner to SUM over one axis of MUL(a, b))
runs as a GEMM; `contraction_axes` says which of its axes are m (a varies, b is constant
along them), n (the other way round), k and batch. Only contraction terms are read this way:
whether a sum of products runs as a GEMM is the e-graph's choice (rewrites/kernels.py), not
this module's. Flash attention is an online-contraction term (ATTEND, `attention_term`), whose
score expression the flash kernel computes when it is a scaled product plus a mask; nothing
else reaches the flash kernel (a softmax(c * Q K^T) V without the term, or the online-softmax
rules' tiled form of it, lowers to its products, row and generic kernels).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ir.node import Node, is_pure_reshape, move  # noqa: F401 (is_pure_reshape: read by the planner through this module)
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


def contraction_axes(r: Node) -> GemmMatch | None:
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
    # orient by the output's axes, not by the operands' order (a product is the same whichever
    # operand comes first): m holds the earlier axes (the rows), b is the operand along n
    if not m_axes or (n_axes and max(m_axes) > max(n_axes)):
        a, b, m_axes, n_axes = b, a, n_axes, m_axes
    return GemmMatch(r, x, a, b, k, tuple(m_axes), tuple(n_axes), tuple(batch))


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


def peel_casts(n: Node) -> Node:
    """Skip float-to-float casts (they change rounding only; the fused kernels compute in f32)."""
    while n.op == Op.CAST and n.dtype.is_float and n.srcs[0].dtype.is_float:
        n = n.srcs[0]
    return n


@dataclass(frozen=True)
class FlashMatch:
    """The flash kernel's parameters, read off an attend term (`attention_term`): O =
    softmax2(scale_log2 * (Q K^T) + mask_log2 * mask) V over the key axis, computed by a loop
    over key tiles carrying (m, l, acc), so the scores never reach memory."""
    qk: GemmMatch          # Q @ K^T (its SUM is the unsplit score row)
    v: Node                # V as the term reads it: (.., q, key, d), views/up-casts of a buffer
    scale_log2: float      # exp2(scale_log2 * (Q K^T) + mask_log2 * mask - m) is the kernel's P
    internal: frozenset    # nodes computed inside the kernel (never materialized)
    mask: Node | None = None   # an additive score term read from memory (S's shape), or None
    mask_log2: float = 0.0
    keep: Node | None = None   # a bool of S's shape: scores where it is False are -inf (a causal
                               # or padding mask as where(keep, s, -inf)), computed in the kernel
    keep_negated: bool = False  # where(drop, -inf, s): keep is the negation of the node

    @property
    def head_dims(self) -> tuple[int, int]:
        """(d of Q and K, d of V)."""
        return self.qk.mul.shape[len(self.qk.reduce.shape) - 2], self.v.shape[-1]


# ops a kept-position predicate may use: the kernel computes it per score (cexpr.Emitter)
KEEP_OPS = frozenset({Op.CONST, Op.VIEW, Op.INPUT, Op.CAST, Op.WHERE, Op.CMPLT, Op.ADD, Op.MUL,
                      Op.CONTIGUOUS})


def _is_neg_inf(n: Node) -> bool:
    return n.op == Op.CONST and n.dtype.is_float and float(n.arg) == float("-inf")


def _keep_computable(keep: Node) -> bool:
    """keep's value is a cheap per-element expression (no reductions, products or heavy math)."""
    seen, stack = set(), [keep]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op not in KEEP_OPS:
            return False
        if n.op != Op.INPUT:
            stack.extend(n.srcs)
    return True


def _query_axes(m_axes: tuple[int, ...], nd: int) -> bool:
    """A product's m axes are attention's query rows: the axis before the reduced one, plus
    leading (batch) axes along which the other operand is broadcast: the query heads sharing
    one key/value head (GQA), which the flash kernel treats as batch axes with K/V stride 0."""
    return bool(m_axes) and m_axes[-1] == nd - 3 and all(a < nd - 3 for a in m_axes[:-1])


@dataclass(frozen=True)
class _Scores:
    product: Node             # the SUM of Q @ K^T
    alpha: float
    mask: Node | None = None  # the additive term, in the outer expression's shape
    beta: float = 0.0
    keep: Node | None = None  # the kept-score predicate, in the outer expression's shape
    negated: bool = False
    stop: frozenset = frozenset()   # the mask's own node in the graph (not computed by the kernel)

    def scaled(self, c: float) -> "_Scores":
        return replace(self, alpha=self.alpha * c, beta=self.beta * c)

    def reshaped(self, shape) -> "_Scores":
        def re(m):
            return None if m is None else move(m, lambda st: st.reshape(shape))
        return replace(self, mask=re(self.mask), keep=re(self.keep))


def _linear_scores(n: Node, products) -> _Scores | None:
    """n = alpha * (Q @ K^T) + beta * mask, through float casts, constant factors, reshapes and
    one ADD, with Q @ K^T a reshape of a product in `products`, optionally inside one
    where(keep, s, -inf) (or where(drop, -inf, s)); else None. This is the flash kernel's limit
    on its score expression (it computes the scores in f32: the casts between are roundings
    it skips; a positive factor of -inf is -inf)."""
    n = peel_casts(n)
    mc = _mul_const(n)
    if mc is not None:
        got = _linear_scores(mc[0], products)
        return None if got is None else got.scaled(mc[1])
    if is_pure_reshape(n):
        if n.srcs[0] in products:
            return _Scores(n.srcs[0], 1.0)
        got = _linear_scores(n.srcs[0], products)   # (grouped heads: scores reshaped around a mask)
        return None if got is None else got.reshaped(n.shape)
    if n.op == Op.ADD:
        for sc, m in (n.srcs, n.srcs[::-1]):
            got = _linear_scores(sc, products)
            if got is not None and got.mask is None and got.keep is None and m.shape == n.shape:
                return replace(got, mask=m, beta=1.0, stop=frozenset({m}))
    if n.op == Op.WHERE and n.srcs[0].shape == n.shape:
        c, a, b = n.srcs
        for inner, other, negated in ((a, b, False), (b, a, True)):
            if not _is_neg_inf(peel_casts(other)) or not _keep_computable(c):
                continue
            got = _linear_scores(inner, products)
            if got is not None and got.keep is None:
                return replace(got, keep=c, negated=negated)
    return None


def attention_term(n: Node, products) -> FlashMatch | None:
    """An online-contraction term attend(x, y, a) (rewrites/kernels.py) read as the flash kernel's
    parameters: x = the scores (.., q, key) broadcast along the value axis, y = V read as
    (.., q, key, d), a the key axis. The scores must be alpha * (Q @ K^T) + beta * mask (see
    `_linear_scores`) with alpha > 0; anything else is not this kernel's (None), and the
    planner runs the term as its primitive definition."""
    if n.op != Op.ATTEND:
        return None
    x, v = n.srcs
    nd = len(n.shape)
    if nd < 3 or n.arg != (nd - 2,) or x.op != Op.VIEW or not is_row_broadcast_after(x):
        return None
    got = _linear_scores(x.srcs[0], products)
    if got is None:
        return None
    r1, alpha, mask, beta, keep, negated = got.product, got.alpha, got.mask, got.beta, got.keep, got.negated
    qk = contraction_axes(r1)
    if qk is None or alpha <= 0 or len(r1.shape) != nd or qk.k_axis != nd - 2 \
            or not _query_axes(qk.m_axes, nd) or qk.n_axes != (nd - 1,):
        return None
    scores = x.srcs[0]
    if scores.shape != r1.shape[:nd - 2] + (r1.shape[nd - 1],) or scores.shape[:nd - 2] != n.shape[:nd - 2]:
        return None
    # the kernel computes the term, its score expression and Q @ K^T (not the operands' reads)
    internal, stack = {n, r1}, [x]
    while stack:
        m = stack.pop()
        if m in internal or m in got.stop or m.op == Op.INPUT:
            continue
        internal.add(m)
        stack.extend(s for s in m.srcs if s.op != Op.CONST)
    return FlashMatch(qk, v, alpha, frozenset(internal), mask, beta if mask is not None else 0.0, keep, negated)


def is_row_broadcast_after(v: Node) -> bool:
    """v = src (.., q, key) read as (.., q, key, d): a new last axis along which it is broadcast."""
    if v.op != Op.VIEW or len(v.arg.views) != 1:
        return False
    src = v.srcs[0]
    if len(v.shape) != len(src.shape) + 1 or v.shape[:-1] != src.shape:
        return False
    want = View(v.shape, contiguous_strides(src.shape) + (0,), 0, None).canonical()
    return v.arg.views[0].canonical() == want
