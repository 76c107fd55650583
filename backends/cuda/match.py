"""Reading the primitive graph for the planner: the axes of a contraction term, which
product chains are attention, which views are per-row broadcasts.

A contraction (a CONTRACT term, expanded by the planner to SUM over one axis of MUL(a, b))
runs as a GEMM; `contraction_axes` says which of its axes are m (a varies, b is constant
along them), n (the other way round), k and batch. Only contraction terms are read this way:
whether a sum of products runs as a GEMM is the e-graph's choice (rewrites/kernels.py), not
this module's. Flash attention is an online-contraction term (ATTEND, `attention_term`), whose
score expression the flash kernel computes when it is a scaled product plus a mask; the
online-softmax form the e-graph's reduction rules produce is still recognized op by op
(`match_flash`). A softmax(c * Q K^T) V without the term lowers to its products and a row kernel.
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


def peel_casts(n: Node) -> Node:
    """Skip float-to-float casts (they change rounding only; the fused kernels compute in f32)."""
    while n.op == Op.CAST and n.dtype.is_float and n.srcs[0].dtype.is_float:
        n = n.srcs[0]
    return n


def peel(n: Node) -> Node:
    """Skip views and float-to-float casts."""
    while n.op == Op.VIEW or (n.op == Op.CAST and n.dtype.is_float and n.srcs[0].dtype.is_float):
        n = n.srcs[0]
    return n


def _exp2_of_difference(n: Node):
    """n = exp2((a - b) * c) or exp2(a * c + (b * -1) * c), views and float casts anywhere in
    between -> (a, b, c) with views/casts peeled off a and b; else None."""
    n = peel(n)
    if n.op != Op.EXP2:
        return None
    x = peel_casts(n.srcs[0])
    mc = _mul_const(x)
    if mc is not None and peel_casts(mc[0]).op == Op.ADD:           # (a + b * -1) * c
        a, nb = peel_casts(mc[0]).srcs
        for a, nb in ((a, nb), (nb, a)):
            neg = _mul_const(peel(nb))
            if neg is not None and neg[1] == -1.0:
                return peel(a), peel(neg[0]), mc[1]
        return None
    if x.op == Op.ADD:                                              # a * c + (b * -1) * c
        for ac, bc in (x.srcs, x.srcs[::-1]):
            ma, mb = _mul_const(peel_casts(ac)), _mul_const(peel_casts(bc))
            if ma is None or mb is None or ma[1] != mb[1]:
                continue
            neg = _mul_const(peel(mb[0]))
            if neg is not None and neg[1] == -1.0:
                return peel(ma[0]), peel(neg[0]), ma[1]
    return None


@dataclass(frozen=True)
class FlashMatch:
    """Flash attention as the online-softmax rules leave it (axes batch..., q, B, t, d with the
    key axis split into B tiles of t):

        S_b  = c_s * (Q K^T) viewed as (.., q, B, t)          (c_s: constant factors, casts)
        m_b  = max_t S_b;   m = max_B m_b;   r_b = exp2(c (m_b - m));   P_b = exp2(c (S_b - m_b))
        O    = (sum_B r_b * sum_t P_b V_b) * recip(sum_B r_b * sum_t P_b)

    The flash kernel is the lowering of that form: its loop over key tiles carries (m, l, acc)
    and applies the same rescale r_b as the tiles arrive, so S and P never reach memory."""
    qk: GemmMatch          # Q @ K^T (its SUM is the unsplit score row)
    v: Node                # V as read by the accumulator: (.., q, B, t, d), views/up-casts of a buffer
    tiles: int             # B
    scale_log2: float      # exp2(scale_log2 * (Q K^T) + mask_log2 * mask - m) is the kernel's P
    internal: frozenset    # nodes computed inside the kernel (never materialized)
    mask: Node | None = None   # an additive score term read from memory (S's shape), or None
    mask_log2: float = 0.0


def _tile_sum(n: Node, axis: int) -> Node | None:
    n = peel(n)
    return n if n.op == Op.SUM and n.arg == (axis,) else None


def match_flash(out: Node) -> FlashMatch | None:
    """out = MUL(O_num, recip(l)) (either order, views between) in the form above."""
    if out.op != Op.MUL:
        return None
    for num, den in (out.srcs, out.srcs[::-1]):
        rc = peel(den)
        if rc.op != Op.RECIP:
            continue
        acc, l = peel(num), peel(rc.srcs[0])
        if acc.op != Op.SUM or l.op != Op.SUM or len(acc.arg) != 1 or acc.arg != l.arg:
            continue
        found = _match_combines(acc, l)
        if found is not None:
            qk, v, tiles, scale, stop = found
            internal, stack = set(), [out]
            while stack:
                n = stack.pop()
                if n in internal or n in stop:
                    continue
                internal.add(n)
                if n is not qk.reduce:
                    stack.extend(x for x in n.srcs if x.op != Op.CONST)
            return FlashMatch(qk, v, tiles, scale, frozenset(internal))
    return None


def _match_combines(acc: Node, l: Node):
    a = acc.arg[0]
    # l = sum_B (l_b * r_b), l_b = sum_t P_b ; acc = sum_B (r_b * acc_b), acc_b = sum_t P_b * V_b
    def split_rb(prod: Node, inner_ok):
        prod = peel_casts(prod)
        if prod.op != Op.MUL:
            return None
        for x, y in (prod.srcs, prod.srcs[::-1]):
            inner = _tile_sum(y, a + 1)
            rb = _exp2_of_difference(x)
            if inner is not None and rb is not None and inner_ok(inner):
                return rb, inner
        return None

    got_l = split_rb(l.srcs[0], lambda s: peel(s.srcs[0]).op == Op.EXP2)
    got_acc = split_rb(acc.srcs[0], lambda s: peel_casts(s.srcs[0]).op == Op.MUL)
    if got_l is None or got_acc is None:
        return None
    (mb, m, c), lb = got_l
    if got_acc[0] != (mb, m, c) or c <= 0:
        return None
    if m.op != Op.MAX or m.arg != (a,) or peel(m.srcs[0]) is not mb:
        return None
    if mb.op != Op.MAX or mb.arg != (a + 1,):
        return None
    s_b = mb.srcs[0]
    p_b = _exp2_of_difference(lb.srcs[0])
    if p_b is None or p_b[1] is not mb or p_b[2] != c or p_b[0] is not peel(s_b):
        return None
    # acc_b = sum_t (view(P_b) * V)
    prod = peel_casts(got_acc[1].srcs[0])
    v = None
    for x, y in (prod.srcs, prod.srcs[::-1]):
        px = _exp2_of_difference(x)
        if px is not None and px == p_b:
            v = y
    if v is None:
        return None
    # S_b = (constant factors and casts of) a split view of Q @ K^T
    scale, x = 1.0, s_b
    while True:
        x = peel_casts(x)
        mc = _mul_const(x)
        if mc is None:
            break
        scale *= mc[1]
        x = mc[0]
    if x.op != Op.VIEW or len(x.arg.views) != 1 or x.arg.views[0] != View.contiguous(x.shape):
        return None
    qk = contraction_axes(x.srcs[0])
    if qk is None:
        return None
    r1 = qk.reduce
    nd = len(r1.shape)
    if qk.k_axis != nd - 2 or not _query_axes(qk.m_axes, nd) or qk.n_axes != (nd - 1,) or nd < 3:
        return None
    # the split: (.., q, 1, skv) -> (.., q, B, t) with B * t = skv; acc over (.., q, B, t, d)
    if a != nd - 2 or x.shape != r1.shape[:nd - 2] + (x.shape[a], x.shape[a + 1]) \
            or x.shape[a] * x.shape[a + 1] != r1.shape[nd - 1] or len(v.shape) != nd + 1 \
            or v.shape[:nd] != x.shape or scale <= 0:
        return None
    return qk, v, x.shape[a], scale * c, {v}


def _query_axes(m_axes: tuple[int, ...], nd: int) -> bool:
    """A product's m axes are attention's query rows: the axis before the reduced one, plus
    leading (batch) axes along which the other operand is broadcast: the query heads sharing
    one key/value head (GQA), which the flash kernel treats as batch axes with K/V stride 0."""
    return bool(m_axes) and m_axes[-1] == nd - 3 and all(a < nd - 3 for a in m_axes[:-1])


def _linear_scores(n: Node, products):
    """n = alpha * (Q @ K^T) + beta * mask, through float casts, constant factors and one
    ADD, with Q @ K^T a reshape of a product in `products` -> (product SUM, alpha, mask or
    None, beta); else None. This is the flash kernel's limit on its score expression (it
    computes the scores in f32: the casts between are roundings it skips)."""
    n = peel_casts(n)
    mc = _mul_const(n)
    if mc is not None:
        got = _linear_scores(mc[0], products)
        return None if got is None else (got[0], got[1] * mc[1], got[2], got[3] * mc[1])
    if is_pure_reshape(n) and n.srcs[0] in products:
        return n.srcs[0], 1.0, None, 0.0
    if n.op == Op.ADD:
        for sc, m in (n.srcs, n.srcs[::-1]):
            got = _linear_scores(sc, products)
            if got is not None and got[2] is None and m.shape == n.shape:
                return got[0], got[1], m, 1.0
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
    r1, alpha, mask, beta = got
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
        if m in internal or m is mask:
            continue
        internal.add(m)
        stack.extend(s for s in m.srcs if s.op != Op.CONST)
    return FlashMatch(qk, v, 1, alpha, frozenset(internal), mask, beta if mask is not None else 0.0)


def is_row_broadcast_after(v: Node) -> bool:
    """v = src (.., q, key) read as (.., q, key, d): a new last axis along which it is broadcast."""
    if v.op != Op.VIEW or len(v.arg.views) != 1:
        return False
    src = v.srcs[0]
    if len(v.shape) != len(src.shape) + 1 or v.shape[:-1] != src.shape:
        return False
    want = View(v.shape, contiguous_strides(src.shape) + (0,), 0, None).canonical()
    return v.arg.views[0].canonical() == want
