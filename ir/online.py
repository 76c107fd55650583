"""Turn the online-softmax rules' two-level reductions into one tuple-accumulator loop.

The rules (rewrites/online_softmax.py + the algebra family) rewrite a softmax-style reduction
over a row into a reduction over tiles whose per-tile part is rescaled by the row max:

    m = max_b m_b                                 (a Let: Reduce(MAX, [b], m_b))
    L = sum_b  G_b * exp2(c * (m_b - m))          (a Let: Reduce(SUM, [b], ...), G_b a per-tile sum)

Lowered as written, m and L are two passes over the tiles and each m_b is computed (or stored)
twice. Since L depends on m only through one factor exp2(A) with A affine in m (coefficient
-c < 0), it can run in the same pass as m with a rescaled running sum (ir.kernel.Online):

    m' = max(m, m_b);  L = L * exp2(c * (m - m')) + G_b * exp2(c * (m_b - m'))

This module finds such Lets in a kernel built by ir.lower and replaces them. It checks the
structure on kernel-IR values (so it does not care which of the equivalent forms the extractor
chose) and changes only the evaluation order: the meaning of every Let is kept (the Online's
max is the same max; each sum is the same sum, evaluated at the final max).
"""
from __future__ import annotations

from ir.dtypes import DType
from ir.kernel import (Compute, Const, Let, Online, Reduce, Ref, Value, Var, as_lin, canonical, rename_refs,
                       substitute, value_vars, walk)
from ir.ops import Op


def _refs(e: Value) -> set[str]:
    return {x.name for x in walk(e) if isinstance(x, Ref)}


def _peel_float_casts(e: Value) -> Value:
    while isinstance(e, Compute) and e.op == Op.CAST and e.dtype.is_float and e.srcs[0].dtype.is_float:
        e = e.srcs[0]
    return e


def _factors(e: Value) -> list[Value]:
    """The operands of a tree of multiplies (float-to-float casts between them only round)."""
    e = _peel_float_casts(e)
    if isinstance(e, Compute) and e.op == Op.MUL:
        return _factors(e.srcs[0]) + _factors(e.srcs[1])
    return [e]


def affine_coefficient(e: Value, name: str) -> float | None:
    """k when e = k * Ref(name) + (terms without it), built from adds and multiplies by
    constants; 0 when e does not read Ref(name); None otherwise."""
    if isinstance(e, Ref) and e.name == name:
        return 1.0
    if name not in _refs(e):
        return 0.0
    if not isinstance(e, Compute) or not e.dtype.is_float:
        return None
    if e.op == Op.CAST and e.srcs[0].dtype.is_float:      # rounding only
        return affine_coefficient(e.srcs[0], name)
    if e.op == Op.ADD:
        a, b = (affine_coefficient(s, name) for s in e.srcs)
        return None if a is None or b is None else a + b
    if e.op == Op.MUL:
        x, y = e.srcs
        if isinstance(x, Const):
            x, y = y, x
        if isinstance(y, Const):
            k = affine_coefficient(x, name)
            return None if k is None else k * float(y.value)
    return None


def rescaled_by(body: Value, max_lets: dict[str, Let]) -> tuple[str, float, Value | None] | None:
    """(max Let name, c, m_b or None) when body = (factors without it) * exp2(A) with A affine in
    one max Let's Ref with coefficient -c < 0; m_b is read off A = (m_b - m) * c when it has
    that form."""
    factors = _factors(body)
    for i, f in enumerate(factors):
        if not (isinstance(f, Compute) and f.op == Op.EXP2):
            continue
        for name in _refs(f) & set(max_lets):
            if any(name in _refs(g) for j, g in enumerate(factors) if j != i):
                continue
            k = affine_coefficient(f.srcs[0], name)
            if k is None or not k < 0:
                continue
            return name, -k, _tile_max_of(f.srcs[0], name)
    return None


def _tile_max_of(a: Value, name: str) -> Value | None:
    # (m_b + m * -1) * c
    a = _peel_float_casts(a)
    if isinstance(a, Compute) and a.op == Op.MUL and isinstance(a.srcs[1], Const):
        d = a.srcs[0]
        d = _peel_float_casts(d)
        if isinstance(d, Compute) and d.op == Op.ADD:
            y, neg = d.srcs
            if (isinstance(neg, Compute) and neg.op == Op.MUL and neg.srcs[0] == Ref(name, neg.srcs[0].dtype)
                    and isinstance(neg.srcs[1], Const) and float(neg.srcs[1].value) == -1.0):
                return y
    return None


def gemv_form(term: Value, lane: Var):
    """(outer, r, a, b) with term == prod(outer) * sum over r of prod(a) * prod(b), where only
    the b factors read `lane` (flash attention's P_b V_b, rescaled by r_b); or (outer, None, (), b)
    with term == prod(outer) * prod(b) when the lane factors are read directly (one key per step:
    P_j V_j); else None. The lane-free factors are what a renderer computes once per step."""
    outer, inner, direct = [], None, []
    for f in _factors(term):
        if lane not in value_vars(f):
            outer.append(f)
        elif isinstance(f, Reduce) and f.op == Op.SUM and len(f.vars) == 1 and inner is None:
            inner = f
        else:
            direct.append(f)
    if direct:
        if inner is not None or any(isinstance(x, Reduce) for f in direct for x in walk(f)):
            return None
        return tuple(outer), None, (), tuple(direct)
    if inner is None:
        return None
    a, b = [], []
    for f in _factors(inner.body):
        (b if lane in value_vars(f) else a).append(f)
    if not b:
        return None
    return tuple(outer), inner.vars[0], tuple(a), tuple(b)


def _replacer(target: Value):
    """A function that replaces, inside a value, every reduction equal to `target` up to the
    names of its bound variables by `target` itself (so a tile's max is computed once)."""
    key, memo = canonical(target), {}

    def go(e: Value) -> Value:
        if e in memo:
            return memo[e]
        if isinstance(e, Reduce) and e.op == target.op and canonical(e) == key:
            r = target
        elif isinstance(e, Compute):
            r = Compute(e.op, e.dtype, tuple(go(x) for x in e.srcs))
        elif isinstance(e, Reduce):
            r = Reduce(e.op, e.dtype, e.vars, go(e.body), e.contraction)
        else:
            r = e
        memo[e] = r
        return r
    return go if isinstance(target, Reduce) else (lambda e: e)


def fuse_online(lets: list[Let], axes=()) -> tuple[list, list[Value], dict[str, str]]:
    """lets with every group of rescaled sums over the same max (and depth) replaced by one
    Online; also the tile-max values the Onlines compute (their producers need no buffer),
    and the name of each Online that keeps a running max of its own -> the max Let it tracks.
    A sum one axis deeper than a group (free in that axis, e.g. attention's accumulator over
    the head dim) joins the group as a lane sum when it has the gemv form."""
    max_lets = {l.name: l for l in lets if isinstance(l, Let) and isinstance(l.value, Reduce)
                and l.value.op == Op.MAX and len(l.value.vars) == 1
                and l.value.dtype.compute == DType.f32}   # (the Online renderers run in f32)
    position = {l.name: i for i, l in enumerate(lets)}
    groups: dict[tuple[str, int], list] = {}
    for i, l in enumerate(lets):
        red = l.value if isinstance(l, Let) else None
        if not (isinstance(red, Reduce) and red.op == Op.SUM and len(red.vars) == 1
                and red.dtype.compute == DType.f32):
            continue
        if not any(isinstance(x, Reduce) for x in walk(red.body)):
            continue        # one level only (no per-tile sum): a plain row reduction stays as it is
        found = rescaled_by(red.body, max_lets)
        if found is None:
            continue
        name, c, y = found
        m = max_lets[name]
        if position[name] > i or m.depth > l.depth or m.value.vars[0].extent != red.vars[0].extent:
            continue
        groups.setdefault((name, l.depth), []).append((i, l, c, y))
    # lane sums: a group one axis deeper joins the group above it (same max)
    for (name, depth) in sorted(groups, key=lambda k: -k[1]):
        upper = (name, depth - 1)
        if depth < 1 or depth > len(axes) or upper not in groups:
            continue
        lane = axes[depth - 1]
        joined = [mb for mb in groups[(name, depth)]
                  if gemv_form(mb[1].value.body, lane) is not None]
        if len(joined) == len(groups[(name, depth)]):
            groups[upper] += [(i, l, c, y, lane) for i, l, c, y in joined]
            del groups[(name, depth)]
    if not groups:
        return lets, [], {}
    out: list = list(lets)
    removed: set[int] = set()
    tiles: list[Value] = []
    runs: dict[str, str] = {}
    for (name, depth), members in groups.items():
        m = max_lets[name]
        members = sorted(members, key=lambda mb: mb[0])
        first_i, first, c, y = members[0][:4]
        var = first.value.vars[0]
        # every member runs in the first one's loop, rescaled by the same factor, and reads
        # only Lets that exist before that loop
        members = [mb for mb in members if mb[2] == c and all(position.get(r, -1) < first_i or r == name
                                                              for r in _refs(mb[1].value))]
        lane = next((mb[4] for mb in members if len(mb) > 4), None)   # (one per group: axes[depth])
        tile_max = substitute(m.value.body, {m.value.vars[0]: as_lin(var)})
        if y is not None and canonical(y) == canonical(tile_max):
            tile_max = y          # the same value the first term reads: computed once per tile
        merged = m.depth == depth and not any(
            name in _refs(l.value) for j, l in enumerate(lets)
            if position[name] < j < first_i and isinstance(l, Let) and j not in {mb[0] for mb in members})
        run = name if merged else f"{name}_run"
        if not merged:
            runs[run] = name
        terms, gemv = [], []
        same_as_tile_max = _replacer(tile_max)
        for mb in members:
            l = mb[1]
            t = same_as_tile_max(substitute(l.value.body, {l.value.vars[0]: as_lin(var)}))
            t = t if merged else rename_refs(t, {name: run})
            terms.append(t)
            gemv.append(gemv_form(t, lane) if len(mb) > 4 else None)
        online = Online(run, depth, var, tile_max, tuple(mb[1].name for mb in members), tuple(terms), c,
                        lane, tuple(gemv) if lane is not None else ())
        out[first_i] = online
        removed |= {mb[0] for mb in members[1:]}
        if merged:
            removed.add(position[name])
        tiles.append(tile_max)
    return [l for i, l in enumerate(out) if i not in removed], tiles, runs
