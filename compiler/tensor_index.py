"""Ops that read positions, mixed into `Tensor`: tril/triu, argmax/argmin, gather,
index_select, take_along_dim, take, cumsum/cumprod/cummax/cummin, sort/argsort/topk.

Positions come from the IOTA primitive and data-dependent reads from GATHER (`ir/ops.py`);
triangles (tril, triu, the scans' masks) are constants read through views. Scans are
compositions: element i of a cumsum is the sum over j of x[j] where j <= i, a triangular mask
read by an ordinary reduction (see docs/ir.md).
"""
from __future__ import annotations

import math

from compiler.creation import positions, triangle
from compiler.errors import DTypeError, ShapeError, UnsupportedError
from compiler.tensor_args import broadcast_shapes, norm_axis
from ir import node as N
from ir.dtypes import DType


def _index_tensor(t, name: str, op: str):
    """An integer index tensor as i32."""
    if not hasattr(t, "node"):
        raise DTypeError(f"{name} must be a Tensor of integers, got {type(t).__name__}", op)
    if t.dtype.is_float or t.dtype == DType.bool:
        raise DTypeError(f"{name} must hold integers, got {t.dtype.value}", op)
    return t


class IndexOps:
    """Position-reading methods of `Tensor`."""

    # --- triangles --------------------------------------------------------------------------
    def _triangle(self, k: int, keep: str, op: str):
        if self.ndim < 2:
            raise ShapeError(f"needs at least 2 dimensions, got shape {self.shape}", op)
        if isinstance(k, bool) or not isinstance(k, int):
            raise ShapeError(f"diagonal must be an int, got {k!r}", op)
        rows, cols = self.shape[-2:]
        mask = triangle(rows, cols, k, keep).expand(*self.shape)
        return mask.where(self, False if self.dtype == DType.bool else 0)

    def tril(self, diagonal: int = 0):
        """Elements on and below the `diagonal`-th diagonal of the last two axes, 0 elsewhere."""
        return self._triangle(diagonal, "lower", "tril")

    def triu(self, diagonal: int = 0):
        """Elements on and above the `diagonal`-th diagonal of the last two axes, 0 elsewhere."""
        return self._triangle(diagonal, "upper", "triu")

    # --- arg reductions ---------------------------------------------------------------------
    def _along(self, axis, op: str):
        """(self with the axis last, the axis) or (flattened, 0) for axis None."""
        if axis is None:
            return self.reshape(self.numel), 0
        return self, norm_axis(op, axis, self.ndim, self.shape)

    def _first_index(self, extreme, axis, keepdim: bool, op: str):
        x, a = self._along(axis, op)
        if not x.ndim:
            return type(self).full((), 0, DType.i32)
        n = x.shape[a]
        if n == 0:
            raise ShapeError(f"{op} of an empty axis (shape {self.shape})", op)
        m = extreme(x, a)
        hit = x == m
        if x.dtype.is_float:   # NaN counts as the extreme, like torch
            hit = hit.logical_or(x.isnan())
        shape = [1] * x.ndim
        shape[a] = n
        at = positions(n).reshape(*shape).expand(*x.shape)
        first = hit.where(at, n).min(a, keepdim=True)
        if axis is None:
            return first.reshape((1,) * self.ndim) if keepdim else first.reshape(())
        return first if keepdim else first.reshape(tuple(s for i, s in enumerate(x.shape) if i != a))

    def argmax(self, axis=None, keepdim: bool = False):
        """The first position of the maximum (of the first NaN, if any); i32 (torch: int64)."""
        x = self.astype(DType.i32) if self.dtype == DType.bool else self
        return x._first_index(lambda t, a: t.max(a, keepdim=True).expand(*t.shape), axis, keepdim, "argmax")

    def argmin(self, axis=None, keepdim: bool = False):
        """The first position of the minimum (of the first NaN, if any); i32 (torch: int64)."""
        x = self.astype(DType.i32) if self.dtype == DType.bool else self
        return x._first_index(lambda t, a: t.min(a, keepdim=True).expand(*t.shape), axis, keepdim, "argmin")

    # --- gathers ----------------------------------------------------------------------------
    def _gather_axis(self, axis: int, index):
        """self read along `axis` at `index` (i32, self's sizes elsewhere); negative positions
        count from the end, positions still outside the axis read 0 (torch raises)."""
        n = self.shape[axis]
        index = index.astype(DType.i32)
        index = (index < 0).where(index + n, index)
        return type(self)(N.gather(self.node, index.node, axis))

    def gather(self, dim: int, index):
        """torch.gather: out[..., j, ...] = self[..., index[..., j, ...], ...] along `dim`; index
        has self's rank and sizes no larger than self's on the other axes."""
        index = _index_tensor(index, "index", "gather")
        if self.ndim == 0:   # torch takes a 0-d (or 1-element) index of a 0-d input
            return self.reshape(1)._gather_axis(0, index.reshape(1)).reshape(index.shape)
        a = norm_axis("gather", dim, self.ndim, self.shape)
        if index.ndim != self.ndim:
            raise ShapeError(f"index of shape {index.shape} must have the input's rank {self.ndim}", "gather")
        if any(i != a and index.shape[i] > self.shape[i] for i in range(self.ndim)):
            raise ShapeError(f"index of shape {index.shape} is larger than the input {self.shape} "
                             f"outside dim {a}", "gather")
        x = self
        if any(i != a and index.shape[i] != self.shape[i] for i in range(self.ndim)):
            x = self[tuple(slice(None) if i == a else slice(0, index.shape[i]) for i in range(self.ndim))]
        return x._gather_axis(a, index)

    def take_along_dim(self, indices, dim=None):
        """torch.take_along_dim: gather with the input and indices broadcast outside `dim`
        (dim None: over the flattened input)."""
        indices = _index_tensor(indices, "indices", "take_along_dim")
        if dim is None:
            return self.reshape(self.numel)._gather_axis(0, indices.reshape(indices.numel))
        a = norm_axis("take_along_dim", dim, self.ndim, self.shape)
        if indices.ndim != self.ndim:
            raise ShapeError(f"indices of shape {indices.shape} must have the input's rank {self.ndim}",
                             "take_along_dim")
        outer = broadcast_shapes("take_along_dim", tuple(1 if i == a else s for i, s in enumerate(self.shape)),
                                 tuple(1 if i == a else s for i, s in enumerate(indices.shape)))
        x = self.expand(*(self.shape[a] if i == a else s for i, s in enumerate(outer)))
        idx = indices.expand(*(indices.shape[a] if i == a else s for i, s in enumerate(outer)))
        return x._gather_axis(a, idx)

    def index_select(self, dim: int, index):
        """torch.index_select: the slices at the positions of a 1-D `index` along `dim`."""
        index = _index_tensor(index, "index", "index_select")
        if index.ndim > 1:
            raise ShapeError(f"index must be 1-D, got shape {index.shape}", "index_select")
        x = self if self.ndim else self.reshape(1)
        a = norm_axis("index_select", dim, x.ndim, x.shape)
        m = index.numel
        shape = [1] * x.ndim
        shape[a] = m
        out = tuple(m if i == a else s for i, s in enumerate(x.shape))
        r = x._gather_axis(a, index.reshape(*shape).expand(*out))
        return r if self.ndim else r.reshape(index.shape)

    def scatter(self, dim: int, index, src=None, value=None, reduce=None):
        """torch.scatter: self with self[..., index[..., j, ...], ...] = src[..., j, ...] along
        `dim` (or `value` there). Where `index` names one position twice, the last j wins (torch
        leaves that case unspecified). A composition: position i of the output looks for the
        last j with index[j] == i (a comparison and a max over j), then gathers src there."""
        if reduce is not None:
            raise UnsupportedError(f"scatter's reduce={reduce!r} is not supported; use scatter_add for sums", "scatter")
        return self._scatter("scatter", dim, index, src, value)

    def scatter_add(self, dim: int, index, src):
        """torch.scatter_add: self plus, at each position, the sum of the src values whose
        index names it (a comparison and a sum over j)."""
        return self._scatter("scatter_add", dim, index, src, None)

    def _scatter(self, op: str, dim, index, src, value):
        from compiler.tensor import Tensor, where
        index = _index_tensor(index, "index", op)
        if self.ndim == 0:
            return self.reshape(1)._scatter(op, 0, index.reshape(1), src if not isinstance(src, Tensor)
                                            else src.reshape(1), value).reshape(())
        a = norm_axis(op, dim, self.ndim, self.shape)
        if index.ndim != self.ndim:
            raise ShapeError(f"index of shape {index.shape} must have the input's rank {self.ndim}", op)
        if any(i != a and index.shape[i] > self.shape[i] for i in range(self.ndim)):
            raise ShapeError(f"index of shape {index.shape} is larger than the input {self.shape} outside dim {a}", op)
        if (src is None) == (value is None):
            raise ShapeError("pass either src or value", op)
        if isinstance(src, Tensor):
            if src.ndim != self.ndim or any(src.shape[i] < index.shape[i] for i in range(self.ndim)):
                raise ShapeError(f"src of shape {src.shape} must have the input's rank and cover index {index.shape}", op)
            src = src[tuple(slice(0, m) for m in index.shape)].astype(self.dtype)
        else:
            src = Tensor.full(index.shape, value if value is not None else src, self.dtype)
        n, m = self.shape[a], index.shape[a]
        # positions i (a new axis at a) against each j (at a + 1)
        pos_i = positions(n).reshape(*[n if k == a else 1 for k in range(self.ndim + 1)])
        idx = index.unsqueeze(a)
        match = idx == pos_i
        region = tuple(n if k == a else index.shape[k] for k in range(self.ndim))
        here = self[tuple(slice(0, r) for r in region)]
        if op == "scatter_add":
            got = here + where(match, src.unsqueeze(a), 0).astype(self.dtype).sum(a + 1)
        else:
            pos_j = positions(m).reshape(*[m if k == a + 1 else 1 for k in range(self.ndim + 1)])
            last = where(match, pos_j, -1).max(a + 1)
            got = where(last >= 0, src.gather(a, last.clamp(0, None)), here)
        if region == self.shape:
            return got
        pads = tuple((0, self.shape[k] - region[k]) for k in range(self.ndim))
        inside = Tensor.full(region, True, DType.bool)
        return where(inside.pad(pads, 0.0), got.pad(pads, 0.0), self)

    def take(self, index):
        """torch.take: the flattened input at `index`, in index's shape."""
        index = _index_tensor(index, "index", "take")
        flat = index.reshape(index.numel)
        return self.reshape(self.numel)._gather_axis(0, flat).reshape(index.shape)

    # --- scans ------------------------------------------------------------------------------
    def _scan(self, axis, fill, combine, op: str):
        """combine over j <= i along `axis` of self read as (..., i, j): a triangular mask, the
        masked-out terms `fill` (the reduction's identity)."""
        if self.ndim == 0:
            return combine(self.reshape(1, 1), -1).reshape(())
        a = norm_axis(op, axis, self.ndim, self.shape)
        n = self.shape[a]
        x = self.movedim(a, -1)
        lead = x.shape[:-1]
        terms = x.unsqueeze(-2).expand(*lead, n, n)
        mask = triangle(n, n, 0, "lower").expand(*lead, n, n)
        out = combine(mask.where(terms, fill), -1)
        return out.movedim(-1, a)

    def cumsum(self, dim: int, dtype=None):
        """Running sums along `dim` (bool counts as i32, like torch's integer result)."""
        x = self.astype(dtype) if dtype is not None else (self.astype(DType.i32) if self.dtype == DType.bool else self)
        return x._scan(dim, 0, lambda t, a: t.sum(a), "cumsum")

    def cumprod(self, dim: int, dtype=None):
        """Running products along `dim`, each an exact halving tree of multiplies (prod)."""
        x = self.astype(dtype) if dtype is not None else (self.astype(DType.i32) if self.dtype == DType.bool else self)
        return x._scan(dim, 1, lambda t, a: t.prod(a), "cumprod")

    def logcumsumexp(self, dim: int):
        """Running log(sum(exp)) along `dim`: each prefix's max-shifted logsumexp (stable for any
        offset; -inf prefixes stay -inf), like torch.logcumsumexp."""
        return self._float()._scan(dim, -math.inf, lambda t, a: t.logsumexp(a), "logcumsumexp")

    def cummax(self, dim: int):
        """Running maxima along `dim` (values only: torch also returns their positions)."""
        low = self.dtype.lowest
        return self._scan(dim, low, lambda t, a: t.max(a), "cummax")

    def cummin(self, dim: int):
        """Running minima along `dim` (values only)."""
        high = self.dtype.highest
        return self._scan(dim, high, lambda t, a: t.min(a), "cummin")

    # --- sorting ----------------------------------------------------------------------------
    def _sorted_last(self, descending: bool):
        """(values, positions) of self sorted along its last axis, stably, NaN as the largest
        value: each element's rank is the number of elements ordered before it (an (n, n)
        compare summed), and output slot r takes the element of rank r (a max over the ones of
        rank r, so -0.0 and NaN come through unchanged). O(n^2) per row."""
        n = self.shape[-1]
        lead = self.shape[:-1]
        mine = self.unsqueeze(-1).expand(*lead, n, n)      # [..., i, j] = x_i
        other = self.unsqueeze(-2).expand(*lead, n, n)     # [..., i, j] = x_j
        if descending:
            first, second = mine, other
        else:
            first, second = other, mine
        before = first < second                            # x_j before x_i
        if self.dtype.is_float:
            before = before.logical_or(second.isnan().logical_and(first.isnan().logical_not()))
            same = (first == second).logical_or(first.isnan().logical_and(second.isnan()))
        else:
            same = first == second
        i = positions(n).reshape(n, 1).expand(n, n)
        j = positions(n).reshape(1, n).expand(n, n)
        ties = same.logical_and((j < i).expand(*lead, n, n))
        rank = before.logical_or(ties).astype(DType.i32).sum(-1)     # [..., i]
        slot = rank.unsqueeze(-2).expand(*lead, n, n) == positions(n).reshape(n, 1).expand(*lead, n, n)
        low = self.dtype.lowest
        values = slot.where(self.unsqueeze(-2).expand(*lead, n, n), low).max(-1)
        where_from = slot.where(positions(n).reshape(1, n).expand(*lead, n, n), 0).sum(-1)
        return values, where_from

    def sort(self, dim: int = -1, descending: bool = False, stable: bool = True):
        """(values, indices) along `dim`, like torch.sort (always stable; NaN sorts as the
        largest value); indices are i32 (torch: int64). O(n^2) work per sorted row."""
        if self.ndim == 0:
            return self, type(self).full((), 0, DType.i32)
        a = norm_axis("sort", dim, self.ndim, self.shape)
        if self.shape[a] == 0:
            return self, type(self).full(self.shape, 0, DType.i32)
        values, idx = self.movedim(a, -1)._sorted_last(descending)
        return values.movedim(-1, a), idx.movedim(-1, a)

    def argsort(self, dim: int = -1, descending: bool = False, stable: bool = True):
        return self.sort(dim, descending)[1]

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):
        """(values, indices) of the k largest (smallest) along `dim`, in order; ties keep the
        earlier position first."""
        a = norm_axis("topk", dim, self.ndim, self.shape) if self.ndim else 0
        n = self.shape[a] if self.ndim else 1
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= n:
            raise ShapeError(f"k={k!r} is out of range for a dimension of size {n}", "topk")
        values, idx = self.sort(dim, descending=largest)
        if not self.ndim:
            return values, idx
        return values.narrow(a, 0, k), idx.narrow(a, 0, k)

    def kthvalue(self, k: int, dim: int = -1, keepdim: bool = False):
        """(values, indices) of the k-th smallest (k from 1) along `dim`, like torch.kthvalue:
        NaN sorts as the largest, ties give the earliest position."""
        a = norm_axis("kthvalue", dim, self.ndim, self.shape) if self.ndim else 0
        n = self.shape[a] if self.ndim else 1
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n:
            raise ShapeError(f"k={k!r} is out of range for a dimension of size {n} (k counts from 1)", "kthvalue")
        values, idx = self.sort(dim)
        if not self.ndim:
            return values, idx
        values, idx = values.narrow(a, k - 1, 1), idx.narrow(a, k - 1, 1)
        return (values, idx) if keepdim else (values.squeeze(a), idx.squeeze(a))

    def median(self, dim: int | None = None, keepdim: bool = False):
        """The lower median, like torch.median: of all elements (0-d) without `dim`, else
        (values, indices) along it; NaN where there is one (with the first NaN's index)."""
        if dim is None:
            if self.numel == 0:
                raise ShapeError("median of an empty tensor", "median")
            return self.reshape(self.numel).median(0)[0]
        a = norm_axis("median", dim, self.ndim, self.shape) if self.ndim else 0
        n = self.shape[a] if self.ndim else 1
        if n == 0:
            raise ShapeError(f"median of an empty axis (shape {self.shape})", "median")
        values, idx = self.kthvalue((n + 1) // 2, dim, keepdim=True)
        if self.dtype.is_float and self.ndim:
            nan = self.isnan()
            has = nan.any(a, keepdim=True)
            values = has.where(values._const(math.nan), values)
            idx = has.where(nan.argmax(a, keepdim=True), idx)
        if not self.ndim or keepdim:
            return values, idx
        return values.squeeze(a), idx.squeeze(a)
