"""Sums of products of broadcast arrays as batched matrix products.

A CONTRACT's operands are views of one shape that broadcast their sources (a 256x512 by
512x512 product is the sum over k of a[i, k, -] * b[-, k, j]): multiplying them elementwise
materializes every product (67M elements there), which made float64 references of
transformer-sized programs cost seconds to minutes. `BroadcastProduct` reads each side at
the axes it varies along only and computes the sum with `np.matmul` on those distinct
elements: the same sum of the same products, in another order.
"""
from __future__ import annotations

import math

import numpy as np


def distinct(x) -> np.ndarray:
    """One slice along every axis `x` repeats (stride 0): its distinct elements, broadcastable back."""
    x = np.asarray(x)
    return x[tuple(slice(0, 1) if st == 0 else slice(None) for st in x.strides)] if x.ndim else x


def varying_axes(arrays, shape) -> frozenset[int]:
    """The axes of `shape` (size > 1) along which any of `arrays` (broadcastable to it) varies."""
    out = set()
    for a in arrays:
        a = np.broadcast_to(a, shape)
        out.update(i for i, (s, st) in enumerate(zip(a.shape, a.strides)) if s > 1 and st != 0)
    return frozenset(out)


class BroadcastProduct:
    """sum over `axes` of x * y, where every x varies along `a_axes` only and every y along
    `b_axes` only (other axes broadcast), for arrays broadcastable to `shape`; the result
    has `shape` with the reduced axes kept as size 1."""

    def __init__(self, shape, axes, a_axes, b_axes):
        self.shape = tuple(shape)
        red = {i for i in axes if self.shape[i] > 1}
        self.a_axes, self.b_axes = a_axes, b_axes
        self.a_only = sorted(red & (a_axes - b_axes))     # summed on x's side first
        self.b_only = sorted(red & (b_axes - a_axes))
        self.inner = sorted(red & a_axes & b_axes)         # the matrix products' inner axes
        # reduced axes neither side varies along: identical terms, counted
        self.repeat = math.prod(self.shape[i] for i in red - a_axes - b_axes)
        kept = [i for i in range(len(self.shape)) if i not in red and self.shape[i] > 1]
        self.batch = [i for i in kept if i in a_axes and i in b_axes]
        self.rows = [i for i in kept if i in a_axes and i not in b_axes]
        self.cols = [i for i in kept if i in b_axes and i not in a_axes]
        self.out_shape = tuple(1 if i in axes else s for i, s in enumerate(self.shape))

    def _side(self, x, axes, summed, order):
        """x read at its varying axes, summed over `summed`, arranged as `order`."""
        x = np.broadcast_to(x, self.shape)
        own = sorted(axes)
        x = x[tuple(slice(None) if i in axes else 0 for i in range(len(self.shape)))]
        if summed:
            x = x.sum(axis=tuple(own.index(i) for i in summed))
            own = [i for i in own if i not in summed]
        return np.transpose(x, [own.index(i) for i in order])

    def __call__(self, x, y) -> np.ndarray:
        sizes = self.shape
        xs = self._side(x, self.a_axes, self.a_only, self.batch + self.rows + self.inner)
        ys = self._side(y, self.b_axes, self.b_only, self.batch + self.inner + self.cols)
        nb = math.prod(sizes[i] for i in self.batch)
        m, k, n = (math.prod(sizes[i] for i in g) for g in (self.rows, self.inner, self.cols))
        z = np.matmul(np.reshape(xs, (nb, m, k)), np.reshape(ys, (nb, k, n)))
        if self.repeat != 1:
            z = z * self.repeat
        placed = self.batch + self.rows + self.cols
        z = z.reshape([sizes[i] for i in placed])
        # back to the program's axis order, with size 1 where the result does not vary
        z = np.transpose(z, np.argsort(placed)) if placed else z
        present = [sizes[i] if i in placed else 1 for i in range(len(sizes))]
        return np.broadcast_to(z.reshape(present), self.out_shape)
