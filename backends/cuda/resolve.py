"""Resolve a value to a strided read of a buffer: peel views (composing their strides exactly)
and lossless up-casts (f16/bf16 -> f32), so a template can load the buffer directly.

`resolve(x, is_buffer)` -> Access(buffer, strides per axis of x, offset) or None when x is not
such a read (a mask, a view whose composition is not strided, a rounding cast, compute).
"""
from __future__ import annotations

from dataclasses import dataclass

from ir.dtypes import DType, HALVES
from ir.node import Node
from ir.ops import Op
from ir.view import View, contiguous_strides


@dataclass(frozen=True)
class Access:
    buffer: Node                 # INPUT or materialized node (its contiguous layout)
    strides: tuple[int, ...]     # element strides, one per axis of the resolved value
    offset: int

    @property
    def dtype(self) -> DType:
        return self.buffer.dtype


def _compose(outer: View, inner_shape: tuple[int, ...], inner: tuple[tuple[int, ...], int]):
    """Strides/offset of `outer` (indexing the contiguous layout of inner_shape) followed by
    the strided map `inner` (strides, offset) of that shape; None unless exactly strided."""
    if outer.mask is not None:
        return None
    t, t_off = inner
    # inner axes the map keeps contiguous with each other are one axis (so that a reshape which
    # merged them, e.g. an image's h and w into one axis, moves along it without a carry);
    # axes of size 1 hold no digit
    merged: list[list[int]] = []
    for d, s in zip(inner_shape, t):
        if d == 1:
            continue
        if merged and merged[-1][1] == s * d:
            merged[-1] = [merged[-1][0] * d, s]
        else:
            merged.append([d, s])
    dims, t = [d for d, _ in merged], [s for _, s in merged]
    cs = [1] * len(dims)
    for a in range(len(dims) - 2, -1, -1):
        cs[a] = cs[a + 1] * dims[a + 1]
    total = cs[0] * dims[0] if dims else 1
    if total == 0:          # an empty buffer: its unmasked views are empty too, and nothing is read
        return tuple(0 for _ in outer.shape), t_off
    o = outer.offset
    if not 0 <= o < max(total, 1):
        return None
    digit0 = [(o // cs[a]) % dims[a] for a in range(len(dims))]
    reach = list(digit0)          # the largest digit each inner axis can reach
    strides = []
    for n_i, s_i in zip(outer.shape, outer.strides):
        if n_i == 1 or s_i == 0:
            strides.append(0)
            continue
        if s_i < 0:
            return None
        # the inner axis whose digit this stride moves, without carry
        for a in range(len(dims)):
            if s_i % cs[a] == 0 and (a == 0 or s_i < cs[a - 1]):
                break
        else:
            return None
        step = s_i // cs[a]
        reach[a] += step * (n_i - 1)
        strides.append(t[a] * step)
    if any(r >= d for r, d in zip(reach, dims)):
        return None
    off = t_off + sum(t[a] * digit0[a] for a in range(len(dims)))
    return tuple(strides), off


def resolve(x: Node, is_buffer) -> Access | None:
    chain = []
    n = x
    while not is_buffer(n):
        if n.op == Op.VIEW:
            chain.append(n)
            n = n.srcs[0]
        elif n.op == Op.CAST and n.dtype == DType.f32 and n.srcs[0].dtype in HALVES | {DType.f32}:
            n = n.srcs[0]
        else:
            return None
    strides, off = contiguous_strides(n.shape), 0
    shape = n.shape
    # views apply from the buffer outwards
    for v in reversed(chain):
        st = v.arg
        for view in st.views:
            r = _compose(view, shape, (strides, off))
            if r is None:
                return None
            strides, off = r
            shape = view.shape
    return Access(n, tuple(strides), off)
