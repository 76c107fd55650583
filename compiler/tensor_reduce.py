"""Reductions beyond sum/max/min/mean/var, mixed into `Tensor`: prod, std, all/any,
count_nonzero, logsumexp; and the row-scaled forms of var, std, layer_norm and rms_norm for
bf16, whose squares overflow the f32 it computes in."""
from __future__ import annotations

import math

import numpy as np

from compiler.tensor_args import half_in_f32, norm_axes
from ir import numerics
from ir.dtypes import HALVES, DType

# Rows whose largest magnitude m is 2^48 or more are divided by a power of two s with
# m / s in [2^32, 2^48) before squaring: squares of x / s stay below 2^96 and their sums (up to
# 2^32 terms) inside f32; 1 / s >= 2^-112 is a normal f32 (a flush-to-zero target keeps it).
SCALED_BELOW = 2.0 ** 48
_F32_MAX = float(np.finfo(np.float32).max)
_F32_TINY = float(np.finfo(np.float32).tiny)   # the smallest normal f32


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
        f32 and round once, so the std of f16 values near 3e4 is finite though their variance is
        not; bf16 takes the row-scaled form, s * std(x / s), finite where s^2 * var(x / s) is not."""
        x = self._float()
        axes = norm_axes("std", axis, x.ndim, x.shape)
        if x._squares_overflow_f32(axes):
            s, v = x._scale_and_scaled_var(axes, correction)
            return x._drop_axes(s * v.sqrt(), axes, keepdim).astype(x.dtype)
        if x.dtype in HALVES:
            return x.astype(DType.f32).var(axes, keepdim, correction).sqrt().astype(x.dtype)
        return x.var(axes, keepdim, correction).sqrt()

    # --- row-scaled square-based forms ------------------------------------------------------
    # bf16 has f32's range and computes in f32, so the squares of its values above 2^64 (and the
    # sums of its values near its max) overflow. Each form below equals the plain one over the
    # reals with x / s in place of x (var = s^2 * var(x / s), rms = s * rms(x / s), eps / s^2),
    # for s from _row_scale. f16 squares fit in f32 and keep the plain forms; so do f32 inputs,
    # whose values above 2^64 overflow as before (no wider type to compute in).

    def _squares_overflow_f32(self, axes) -> bool:
        """Whether var, std, layer_norm and rms_norm over `axes` take the row-scaled form: a half
        type (computing in f32) whose largest squares overflow f32, over non-empty axes."""
        return (self.dtype in HALVES and numerics.MAX_FINITE[self.dtype] ** 2 > _F32_MAX
                and self.ndim > 0 and bool(axes) and all(self.shape[a] > 0 for a in axes))

    def _row_scale(self, axes):
        """(s, 1 / s) per row over `axes` (kept): powers of two such that max|x| / s is below
        SCALED_BELOW, chosen by comparisons (exact on every target, no exp2 or log2); 1 for rows
        below it and for rows with an inf or NaN, which so compute exactly the plain form. A
        power of two divides exactly: the scaled form adds no rounding of its own."""
        m = self.abs().max(axes, keepdim=True)
        m = (m < math.inf).where(m, 0.0)          # inf rows keep s = 1 (NaN compares false anyway)
        s, r = 1.0, 1.0
        for k in (64, 32, 16):                    # after step k, m * r < 2^(32 + k)
            big = (m * r < 2.0 ** (32 + k)).logical_not()
            s, r = big.where(s * 2.0 ** k, s), big.where(r * 2.0 ** -k, r)
        return s, r

    def _drop_axes(self, out, axes, keepdim: bool):
        """`out`, reduced with kept axes, without them unless `keepdim`."""
        return out if keepdim else out.reshape(tuple(s for a, s in enumerate(self.shape) if a not in axes))

    def _scale_and_scaled_var(self, axes, correction):
        """(s, var(x / s)) in f32 with kept axes."""
        x = self.astype(DType.f32)
        s, r = x._row_scale(axes)
        return s, (x * r)._var(axes, True, correction)

    def _scaled_var(self, axes, keepdim, correction):
        s, v = self._scale_and_scaled_var(axes, correction)
        # s * (s * v), not s * s * v: a zero variance stays 0 where s * s overflows
        return self._drop_axes(s * (s * v), axes, keepdim).astype(self.dtype)

    def _scaled_rows_and_eps(self, axes, eps):
        """(x / s, eps / s^2) in f32 for layer_norm and rms_norm. eps / s^2 is (eps / s) / s,
        never through s^2, which overflows f32 (an intermediate overflow would also leave the
        verifier's error bound infinite for the row); where it underflows it is floored at the
        smallest normal f32 (or eps, if smaller): at 0 a constant row (variance 0) would give
        0 * rsqrt(0) = NaN instead of 0, and the floor is far below any nonzero variance of a
        scaled row (its largest magnitude is at least 2^32)."""
        x = self.astype(DType.f32)
        _, r = x._row_scale(axes)
        e, floor = eps * r * r, min(eps, _F32_TINY)
        return x * r, (e < floor).where(floor, e)

    def _scaled_layer_norm(self, axes, weight, bias, eps):
        y, e = self._scaled_rows_and_eps(axes, eps)
        return y._layer_norm(axes, weight, bias, e).astype(self.dtype)

    def _scaled_rms_norm(self, axes, weight, eps):
        y, e = self._scaled_rows_and_eps(axes, eps)
        return y._rms_norm(axes, weight, e).astype(self.dtype)

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

    def nansum(self, axis=None, keepdim: bool = False):
        """sum with NaN counted as 0, like torch.nansum."""
        x = self.isnan().where(self._const(0), self) if self.dtype.is_float else self
        return x.sum(axis, keepdim)

    def nanmean(self, axis=None, keepdim: bool = False):
        """mean over the elements that are not NaN (NaN where there are none), like torch.nanmean."""
        if not self.dtype.is_float:
            return self.mean(axis, keepdim)
        keep = self.isnan().logical_not()
        return self.nansum(axis, keepdim) / keep.astype(self.dtype).sum(axis, keepdim)

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
