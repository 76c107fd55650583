"""Views: how a node reads its source's memory, without copying (a shape tracker).

A `View` maps an index of its `shape` to a flat element offset `offset + sum(i*stride)`
(strides may be negative: a flipped axis; or overlap: sliding windows);
positions outside `mask` (a box of per-axis [lo, hi) ranges) read the tracker's `fill` value
(pad). A `ShapeTracker` is a stack of views: `views[0]` indexes the source buffer, and each
later view indexes the contiguous realization of the view before it; a new view is pushed
only when a reshape cannot be expressed on strides.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass, replace

Shape = tuple[int, ...]


def contiguous_strides(shape: Shape) -> tuple[int, ...]:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc if s != 1 else 0)
        acc *= s
    return tuple(reversed(strides))


def prod(xs) -> int:
    return math.prod(xs)


@dataclass(frozen=True)
class View:
    shape: Shape
    strides: tuple[int, ...]
    offset: int = 0
    mask: tuple[tuple[int, int], ...] | None = None

    @staticmethod
    def contiguous(shape: Shape) -> "View":
        return View(tuple(shape), contiguous_strides(shape), 0, None)

    @property
    def is_contiguous(self) -> bool:
        return self.offset == 0 and self.mask is None and self.strides == contiguous_strides(self.shape)

    def canonical(self) -> "View":
        # size-1 axes never move the offset; an empty mask range is always spelled (0, 0) (so
        # later movement ops can recognize it); masks covering everything are dropped
        strides = tuple(0 if s == 1 else st for s, st in zip(self.shape, self.strides))
        mask = self.mask
        if mask is not None:
            mask = tuple((lo, hi) if lo < hi else (0, 0) for lo, hi in mask)
            if all(lo == 0 and hi == s for (lo, hi), s in zip(mask, self.shape)):
                mask = None
        return View(self.shape, strides, self.offset, mask)

    # --- movement ops that stay inside one view ---------------------------------------------
    def permute(self, order: tuple[int, ...]) -> "View":
        return View(tuple(self.shape[o] for o in order), tuple(self.strides[o] for o in order),
                    self.offset, None if self.mask is None else tuple(self.mask[o] for o in order))

    def expand(self, shape: Shape) -> "View":
        mask = None
        if self.mask is not None:
            mask = tuple(m if s == n else ((0, n) if m[0] < m[1] else (0, 0))
                         for m, s, n in zip(self.mask, self.shape, shape))
        strides = tuple(st if s == n else 0 for st, s, n in zip(self.strides, self.shape, shape))
        return View(tuple(shape), strides, self.offset, mask).canonical()

    def shrink(self, bounds: tuple[tuple[int, int], ...]) -> "View":
        offset = self.offset + sum(b * st for (b, _), st in zip(bounds, self.strides))
        mask = None
        if self.mask is not None:
            mask = tuple((min(max(lo - b, 0), e - b), min(max(hi - b, 0), e - b))
                         for (lo, hi), (b, e) in zip(self.mask, bounds))
        return View(tuple(e - b for b, e in bounds), self.strides, offset, mask).canonical()

    def step(self, steps: tuple[int, ...]) -> "View | None":
        """Take every k-th element per axis (k >= 1); a mask [lo, hi) becomes [ceil(lo/k), ceil(hi/k))."""
        shape = tuple((s + k - 1) // k for s, k in zip(self.shape, steps))
        mask = None
        if self.mask is not None:
            mask = tuple((-(-lo // k), -(-hi // k)) for (lo, hi), k in zip(self.mask, steps))
        return View(shape, tuple(st * k for st, k in zip(self.strides, steps)), self.offset, mask).canonical()

    def flip(self, axes: tuple[int, ...]) -> "View":
        """Reverse the given axes: a negative stride, the offset moved to the last element."""
        strides, offset = list(self.strides), self.offset
        mask = list(self.mask) if self.mask is not None else None
        for a in axes:
            s = self.shape[a]
            if s <= 1:
                continue
            offset += (s - 1) * strides[a]
            strides[a] = -strides[a]
            if mask is not None:
                lo, hi = mask[a]
                mask[a] = (s - hi, s - lo) if lo < hi else (0, 0)
        return View(self.shape, tuple(strides), offset, None if mask is None else tuple(mask)).canonical()

    def windows(self, kernel: Shape, stride: Shape, dilation: Shape) -> "View | None":
        """Sliding windows over the trailing len(kernel) axes: (..., S) becomes (..., O, K) with
        O = (S - dilation*(K-1) - 1) // stride + 1; window o, tap k reads element o*stride +
        k*dilation. Windows overlap where stride < K: one element is read by several (o, k).
        None when those axes are masked (the caller pushes a view)."""
        lead = len(self.shape) - len(kernel)
        if self.mask is not None and any(m != (0, s) for m, s in zip(self.mask[lead:], self.shape[lead:])):
            return None
        spatial = self.shape[lead:]
        out = tuple((s - d * (k - 1) - 1) // st + 1 for s, k, st, d in zip(spatial, kernel, stride, dilation))
        strides = self.strides[lead:]
        mask = None if self.mask is None else self.mask[:lead] + tuple((0, n) for n in out + tuple(kernel))
        return View(self.shape[:lead] + out + tuple(kernel),
                    self.strides[:lead] + tuple(x * st for x, st in zip(strides, stride))
                    + tuple(x * d for x, d in zip(strides, dilation)), self.offset, mask).canonical()

    def pad(self, pads: tuple[tuple[int, int], ...]) -> "View":
        shape = tuple(s + b + a for s, (b, a) in zip(self.shape, pads))
        offset = self.offset - sum(b * st for (b, _), st in zip(pads, self.strides))
        old = self.mask or tuple((0, s) for s in self.shape)
        mask = tuple((lo + b, hi + b) for (lo, hi), (b, _) in zip(old, pads))
        return View(shape, self.strides, offset, mask).canonical()

    def reshape(self, shape: Shape) -> "View | None":
        """Reshape on strides alone; None when that is impossible (the caller pushes a view)."""
        shape = tuple(shape)
        if shape == self.shape:
            return self
        if self.is_contiguous:
            return View.contiguous(shape)
        # drop size-1 axes, then merge runs of old axes that are contiguous with each other
        old = [(s, st, m) for s, st, m in zip(self.shape, self.strides, self.mask or [None] * len(self.shape)) if s != 1]
        if self.mask is not None:
            # masks survive only a reshape that inserts or removes size-1 axes
            if [s for s in shape if s != 1] != [s for s, _, _ in old]:
                return None
            it = iter(old)
            strides, mask = [], []
            for s in shape:
                if s == 1:
                    strides.append(0)
                    mask.append((0, 1))
                else:
                    _, st, m = next(it)
                    strides.append(st)
                    mask.append(m)
            # a size-1 axis that was fully masked out must stay masked
            if any(lo >= hi for s, (lo, hi) in zip(self.shape, self.mask) if s == 1):
                return None
            return View(shape, tuple(strides), self.offset, tuple(mask)).canonical()
        new_strides: list[int] = []
        oi, ni = 0, 0
        new_nz = [s for s in shape]
        old_sizes = [s for s, _, _ in old]
        old_strides = [st for _, st, _ in old]
        while ni < len(new_nz):
            if new_nz[ni] == 1:
                new_strides.append(0)
                ni += 1
                continue
            if oi >= len(old_sizes):
                return None
            # grow a group of old axes and a group of new axes until their sizes match
            o_end, n_end = oi + 1, ni + 1
            o_size, n_size = old_sizes[oi], new_nz[ni]
            while o_size != n_size:
                if o_size < n_size:
                    if o_end >= len(old_sizes):
                        return None
                    o_size *= old_sizes[o_end]
                    o_end += 1
                else:
                    if n_end >= len(new_nz):
                        return None
                    n_size *= new_nz[n_end]
                    n_end += 1
            # the old group must be contiguous among itself
            for k in range(oi, o_end - 1):
                if old_strides[k] != old_strides[k + 1] * old_sizes[k + 1]:
                    return None
            st = old_strides[o_end - 1]
            group = []
            for k in range(n_end - 1, ni - 1, -1):
                group.append(st if new_nz[k] != 1 else 0)
                st *= new_nz[k]
            new_strides.extend(reversed(group))
            oi, ni = o_end, n_end
        if oi != len(old_sizes):
            return None
        return View(shape, tuple(new_strides), self.offset).canonical()


def same_float(a: float, b: float) -> bool:
    """Bitwise equality of two floats: -0.0 and 0.0 differ, NaN equals NaN."""
    return struct.pack("<d", float(a)) == struct.pack("<d", float(b))


@dataclass(frozen=True)
class ShapeTracker:
    views: tuple[View, ...]
    fill: float = 0.0   # value read at masked-out (padded) positions

    def __eq__(self, other) -> bool:
        # compare the fill by its bits so that hash-consing keeps -0.0 / 0.0 pads apart and
        # NaN pads equal to each other
        return isinstance(other, ShapeTracker) and self.views == other.views and same_float(self.fill, other.fill)

    def __hash__(self) -> int:
        return hash((self.views, struct.pack("<d", float(self.fill))))

    @staticmethod
    def from_shape(shape: Shape) -> "ShapeTracker":
        return ShapeTracker((View.contiguous(tuple(shape)),))

    @property
    def shape(self) -> Shape:
        return self.views[-1].shape

    @property
    def is_identity(self) -> bool:
        return len(self.views) == 1 and self.views[0].is_contiguous

    @property
    def has_mask(self) -> bool:
        return any(v.mask is not None for v in self.views)

    def _last(self, v: View) -> "ShapeTracker":
        return replace(self, views=self.views[:-1] + (v,))

    def permute(self, order) -> "ShapeTracker":
        return self._last(self.views[-1].permute(tuple(order)))

    def expand(self, shape) -> "ShapeTracker":
        return self._last(self.views[-1].expand(tuple(shape)))

    def shrink(self, bounds) -> "ShapeTracker":
        return self._last(self.views[-1].shrink(tuple(map(tuple, bounds))))

    def pad(self, pads, fill: float = 0.0) -> "ShapeTracker":
        if self.has_mask and not same_float(fill, self.fill):
            raise ValueError("cannot combine pads with different fill values in one view")
        return replace(self._last(self.views[-1].pad(tuple(map(tuple, pads)))), fill=fill)

    def step(self, steps) -> "ShapeTracker":
        v = self.views[-1].step(tuple(steps))
        if v is None:
            return replace(self, views=self.views + (View.contiguous(self.shape),)).step(steps)
        return self._last(v)

    def flip(self, axes) -> "ShapeTracker":
        return self._last(self.views[-1].flip(tuple(axes)))

    def windows(self, kernel, stride, dilation) -> "ShapeTracker":
        v = self.views[-1].windows(tuple(kernel), tuple(stride), tuple(dilation))
        if v is None:
            return replace(self, views=self.views + (View.contiguous(self.shape),)).windows(kernel, stride, dilation)
        return self._last(v)

    def reshape(self, shape) -> "ShapeTracker":
        v = self.views[-1].reshape(tuple(shape))
        if v is None:
            return replace(self, views=self.views + (View.contiguous(tuple(shape)),))
        return self._last(v)

    def __str__(self) -> str:
        parts = []
        for v in self.views:
            s = f"shape={v.shape} strides={v.strides}"
            if v.offset:
                s += f" offset={v.offset}"
            if v.mask is not None:
                s += f" mask={v.mask}"
            parts.append(s)
        fill = f" fill={self.fill}" if self.has_mask else ""
        return " | ".join(parts) + fill
