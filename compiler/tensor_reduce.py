"""Reductions beyond sum/max/min/mean/var, mixed into `Tensor`: prod, std, all/any,
count_nonzero, logsumexp."""
from __future__ import annotations

import math

from compiler.tensor_args import half_in_f32, norm_axes
from ir.dtypes import HALVES, DType


class ReduceOps:
    """Reduction methods of `Tensor`."""

    def _to_last_axis(self, axes):
        """self with `axes` moved to the end and merged into one axis (a view)."""
        keep = [a for a in range(self.ndim) if a not in axes]
        x = self.permute(keep + list(axes))
        return x.reshape(tuple(self.shape[a] for a in keep) + (math.prod(self.shape[a] for a in axes),))

    def _keep_shape(self, out, axes, keepdim: bool):
        if keepdim:
            return out.reshape(tuple(1 if a in axes else s for a, s in enumerate(self.shape)))
        return out

    def prod(self, axis=None, keepdim: bool = False):
        """Product over `axis`: exact elementwise multiplies in a halving tree of views (there is
        no product reduction primitive, and exp(sum(log)) is not exact). bool counts as i32;
        i32 wraps (torch returns int64)."""
        axes = norm_axes("prod", axis, self.ndim, self.shape)
        x = self.astype(DType.i32) if self.dtype == DType.bool else self
        if not self.ndim or not axes:
            return x
        return x._prod(axes, keepdim)

    @half_in_f32
    def _prod(self, axes, keepdim):
        x = self._to_last_axis(axes)
        n = x.shape[-1]
        width = 1 << max(n - 1, 0).bit_length()   # the next power of two (1 for n <= 1)
        if width != n:
            x = x.pad([(0, 0)] * (x.ndim - 1) + [(0, width - n)], 1.0)
        while x.shape[-1] > 1:
            h = x.shape[-1] // 2
            x = x[..., :h] * x[..., h:]
        return self._keep_shape(x.reshape(x.shape[:-1]), axes, keepdim)

    def std(self, axis=None, keepdim: bool = False, correction: int = 1):
        """sqrt(var): `correction` 1 is the unbiased estimate, like torch.std. Halves compute in
        f32 and round once, so the std of f16 values near 3e4 is finite though their variance is not."""
        x = self._float()
        if x.dtype in HALVES:
            return x.astype(DType.f32).var(axis, keepdim, correction).sqrt().astype(x.dtype)
        return x.var(axis, keepdim, correction).sqrt()

    def _truth(self):
        return self if self.dtype == DType.bool else self != 0   # NaN is true, as in torch

    def all(self, axis=None, keepdim: bool = False):
        return self._truth()._bool_reduce(axis, keepdim, True, "all")

    def any(self, axis=None, keepdim: bool = False):
        return self._truth()._bool_reduce(axis, keepdim, False, "any")

    def _bool_reduce(self, axis, keepdim, empty: bool, name: str):
        """all (min) or any (max) of a bool tensor; `empty` over an empty axis, like torch."""
        axes = norm_axes(name, axis, self.ndim, self.shape)
        if self.ndim and any(self.shape[a] == 0 for a in axes):
            shape = tuple(1 if a in axes else s for a, s in enumerate(self.shape)) if keepdim else \
                tuple(s for a, s in enumerate(self.shape) if a not in axes)
            return type(self).full(shape, empty, DType.bool)
        return self.min(axes, keepdim) if empty else self.max(axes, keepdim)

    def count_nonzero(self, axis=None, keepdim: bool = False):
        """The number of nonzero elements (i32; torch returns int64)."""
        return self._truth().sum(axis, keepdim)

    def amax(self, axis=None, keepdim: bool = False):
        return self.max(axis, keepdim)

    def amin(self, axis=None, keepdim: bool = False):
        return self.min(axis, keepdim)

    def logsumexp(self, axis, keepdim: bool = False):
        """log(sum(exp(x))) over `axis`, max-shifted; -inf over an empty axis, like torch."""
        axes = norm_axes("logsumexp", axis, self.ndim, self.shape)
        return self._float()._logsumexp(axes, keepdim)

    @half_in_f32
    def _logsumexp(self, axes, keepdim):
        if any(self.shape[a] == 0 for a in axes):
            shape = tuple(1 if a in axes else s for a, s in enumerate(self.shape)) if keepdim else \
                tuple(s for a, s in enumerate(self.shape) if a not in axes)
            return type(self).full(shape, -math.inf, self.dtype)
        m = self.max(axes, keepdim=True)
        m = m.isinf().where(0.0, m)   # an infinite max would give inf - inf: shift by 0 instead
        out = (self - m).exp().sum(axes, keepdim=True).log() + m
        return out if keepdim else out.reshape(tuple(s for a, s in enumerate(self.shape) if a not in axes))
