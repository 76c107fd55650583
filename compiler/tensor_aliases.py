"""PyTorch's names for what `Tensor` already computes, mixed into `Tensor`: method forms of the
operators (`add(other, alpha)`, `eq`, `pow`, ...), the matrix-product variants (`mm`, `bmm`,
`addmm`, ...), shape helpers (`t`, `expand_as`, `view_as`, ...) and small compositions
(`diff`, `trace`, `rot90`, `cross`, `norm`, `isclose`, ...). Nothing here is a new primitive;
docs/ir.md lists each one and where it differs from PyTorch.

`torch_style_arguments` makes every method that takes `axis` also take PyTorch's `dim` (and each
that takes `dim` also `axis`), as torch.sum and friends do, and reports a call that does not fit
a method's parameters as an OptionError at the user's line."""
from __future__ import annotations

import functools
import inspect
import math

from compiler.errors import DTypeError, OptionError, ShapeError, UnsupportedError
from compiler.tensor_args import as_scalar, is_int, norm_axis
from ir.dtypes import DType


def _tensor(x, op: str):
    from compiler.tensor import Tensor
    if not isinstance(x, Tensor):
        raise DTypeError(f"expected a Tensor, got {type(x).__name__}", op)
    return x


def _ranks(op: str, want: tuple[int, ...], *xs) -> None:
    if tuple(getattr(x, "ndim", None) for x in xs) != want:
        shapes = ", ".join(str(getattr(x, "shape", type(x).__name__)) for x in xs)
        raise ShapeError(f"{op} takes tensors of ranks {want}, got shapes {shapes}", op)


def _scaled(x, factor):
    """factor * x, skipping the multiply when factor is 1 (so an integer x stays integer)."""
    return x if (isinstance(factor, (int, float)) and not isinstance(factor, bool) and factor == 1) else x * factor


def _data_dependent(name: str, instead: str):
    """A method PyTorch has whose result's shape depends on the data: a clear error instead."""
    def method(self, *args, **kwargs):
        raise UnsupportedError(f"{name} returns a tensor whose shape depends on the data, and Saturn compiles "
                               f"static shapes; {instead}", name)
    method.__name__ = name
    method.__doc__ = f"Not available ({name}'s shape depends on the data): {instead}."
    return method


class AliasOps:
    """Methods of `Tensor` under PyTorch's names (see the module docstring)."""

    # --- the operators as methods ---------------------------------------------------------
    def add(self, other, alpha=1):
        return self + _scaled(other, alpha)

    def sub(self, other, alpha=1):
        return self - _scaled(other, alpha)

    subtract = sub

    def mul(self, other):
        return self * other

    multiply = mul

    def div(self, other, rounding_mode=None):
        """self / other; rounding_mode 'trunc' rounds toward zero, 'floor' down (like torch.div)."""
        if rounding_mode is None:
            return self / other
        if rounding_mode == "floor":
            return self // other
        if rounding_mode != "trunc":
            raise DTypeError(f"rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}", "div")
        a, b = self._coerce(other, "div")
        if a.dtype.is_float:
            return (a / b).trunc()
        # floor, then one up where the remainder is nonzero and the signs differ
        q, r = a // b, a.fmod(b)
        up = r.__ne__(0).logical_and((a < 0).logical_xor(b < 0))
        return up.where(q + 1, q).astype(q.dtype)

    divide = div

    def true_divide(self, other):
        return self / other

    def pow(self, exponent):
        return self ** exponent

    def neg(self):
        return -self

    negative = neg

    def eq(self, other):
        return self == other

    def ne(self, other):
        return self != other

    def lt(self, other):
        return self < other

    def le(self, other):
        return self <= other

    def gt(self, other):
        return self > other

    def ge(self, other):
        return self >= other

    not_equal, less, less_equal, greater, greater_equal = ne, lt, le, gt, ge

    # --- matrix products ------------------------------------------------------------------
    def mm(self, mat2):
        _ranks("mm", (2, 2), self, mat2)
        return self @ mat2

    def bmm(self, mat2):
        _ranks("bmm", (3, 3), self, mat2)
        if self.shape[0] != mat2.shape[0]:
            raise ShapeError(f"bmm needs one batch size, got shapes {self.shape} and {mat2.shape}", "bmm")
        return self @ mat2

    def mv(self, vec):
        _ranks("mv", (2, 1), self, vec)
        return self @ vec

    def inner(self, other):
        """Sum over the last axes of both (torch.inner): shape self.shape[:-1] + other.shape[:-1]."""
        other = _tensor(other, "inner")
        if self.ndim == 0 or other.ndim == 0:
            return self * other
        if self.shape[-1] != other.shape[-1]:
            raise ShapeError(f"inner needs one last-axis size, got shapes {self.shape} and {other.shape}", "inner")
        k = self.shape[-1]
        a = self.reshape(self.shape[:-1] + (1,) * (other.ndim - 1) + (k,))
        return (a * other).sum(-1)

    def addmm(self, mat1, mat2, beta=1, alpha=1):
        """beta * self + alpha * (mat1 @ mat2); beta 0 ignores self (NaN included), like torch."""
        p = _scaled(_tensor(mat1, "addmm").mm(mat2), alpha)
        return p if beta == 0 else _scaled(self, beta) + p

    def baddbmm(self, batch1, batch2, beta=1, alpha=1):
        p = _scaled(_tensor(batch1, "baddbmm").bmm(batch2), alpha)
        return p if beta == 0 else _scaled(self, beta) + p

    def addmv(self, mat, vec, beta=1, alpha=1):
        p = _scaled(_tensor(mat, "addmv").mv(vec), alpha)
        return p if beta == 0 else _scaled(self, beta) + p

    def addcmul(self, tensor1, tensor2, value=1):
        return self + _scaled(tensor1 * tensor2, value)

    def addcdiv(self, tensor1, tensor2, value=1):
        return self + _scaled(tensor1 / tensor2, value)

    def kron(self, other):
        """The Kronecker product (torch.kron): ranks padded with leading 1s, each axis a * b long."""
        other = _tensor(other, "kron")
        n = max(self.ndim, other.ndim)
        a = self.reshape((1,) * (n - self.ndim) + self.shape)
        b = other.reshape((1,) * (n - other.ndim) + other.shape)
        inter_a = sum(((s, 1) for s in a.shape), ())
        inter_b = sum(((1, s) for s in b.shape), ())
        return (a.reshape(inter_a) * b.reshape(inter_b)).reshape(tuple(x * y for x, y in zip(a.shape, b.shape)))

    # --- shapes ---------------------------------------------------------------------------
    def t(self):
        """The transpose of a 2-d tensor; 0-d and 1-d tensors are themselves (like torch.t)."""
        if self.ndim > 2:
            raise ShapeError(f"t() takes a tensor of at most 2 axes, got shape {self.shape}; use transpose", "t")
        return self.transpose(0, 1) if self.ndim == 2 else self

    def expand_as(self, other):
        return self.expand(_tensor(other, "expand_as").shape)

    def view_as(self, other):
        return self.reshape(_tensor(other, "view_as").shape)

    def broadcast_to(self, shape):
        return self.expand(tuple(shape))

    def fliplr(self):
        if self.ndim < 2:
            raise ShapeError(f"fliplr needs at least 2 axes, got shape {self.shape}", "fliplr")
        return self.flip(1)

    def flipud(self):
        if self.ndim < 1:
            raise ShapeError("flipud needs at least 1 axis, got a 0-d tensor", "flipud")
        return self.flip(0)

    def rot90(self, k: int = 1, dims=(0, 1)):
        """Rotate by 90 degrees k times in the plane of `dims`, from the first axis toward the
        second (like torch.rot90)."""
        if not is_int(k) or len(tuple(dims)) != 2:
            raise ShapeError(f"rot90 takes an int k and two dims, got k={k!r}, dims={dims!r}", "rot90")
        a, b = (norm_axis("rot90", d, self.ndim, self.shape) for d in dims)
        if a == b:
            raise ShapeError(f"rot90 needs two different dims, got {tuple(dims)}", "rot90")
        k %= 4
        if k == 0:
            return self
        if k == 2:
            return self.flip(a, b)
        return self.flip(b).transpose(a, b) if k == 1 else self.transpose(a, b).flip(b)

    def diff(self, n: int = 1, dim: int = -1, prepend=None, append=None):
        """The n-th forward difference along dim (torch.diff); bool gives xor, like torch."""
        if not is_int(n) or n < 0:
            raise ShapeError(f"n must be a non-negative int, got {n!r}", "diff")
        from compiler.tensor import cat
        if self.ndim == 0:
            raise ShapeError("diff needs at least 1 axis, got a 0-d tensor", "diff")
        dim = norm_axis("diff", dim, self.ndim, self.shape)
        if n == 0:
            return self     # prepend and append unused, as in torch and numpy
        x = cat([t for t in (prepend, self, append) if t is not None], dim) if (prepend is not None or append is not None) \
            else self
        for _ in range(n):
            if x.shape[dim] == 0:
                break
            hi = x.narrow(dim, 1, x.shape[dim] - 1)
            lo = x.narrow(dim, 0, x.shape[dim] - 1)
            x = hi.logical_xor(lo) if x.dtype == DType.bool else hi - lo
        return x

    def trace(self):
        """The sum of the main diagonal of a 2-d tensor (torch.trace)."""
        if self.ndim != 2:
            raise ShapeError(f"trace takes a 2-d tensor, got shape {self.shape}", "trace")
        return self.diagonal().sum()

    def cross(self, other, dim=None):
        """The cross product of 3-vectors along dim (torch.cross; dim None: the first axis of size 3)."""
        other = _tensor(other, "cross")
        a, b = self._coerce(other, "cross")
        shape = tuple(max(x, y) for x, y in zip((1,) * (b.ndim - a.ndim) + a.shape, (1,) * (a.ndim - b.ndim) + b.shape))
        a, b = a.expand(shape), b.expand(shape)
        if dim is None:
            dim = next((i for i, s in enumerate(shape) if s == 3), None)
            if dim is None:
                raise ShapeError(f"cross needs an axis of size 3, got shape {shape}", "cross")
        dim = norm_axis("cross", dim, len(shape), shape)
        if shape[dim] != 3:
            raise ShapeError(f"cross needs axis {dim} of size 3, got shape {shape}", "cross")

        def c(x, i):
            return x.narrow(dim, i, 1)
        from compiler.tensor import cat
        return cat([c(a, 1) * c(b, 2) - c(a, 2) * c(b, 1), c(a, 2) * c(b, 0) - c(a, 0) * c(b, 2),
                    c(a, 0) * c(b, 1) - c(a, 1) * c(b, 0)], dim)

    # --- elementwise ----------------------------------------------------------------------
    def clip(self, min=None, max=None):  # noqa: A002 (torch's names)
        return self.clamp(min, max)

    def sgn(self):
        return self.sign()

    def signbit(self):
        """True where the sign bit is set: below zero, and -0.0 (not NaN's sign: see docs/ir.md)."""
        if not self.dtype.is_float:
            return self < 0 if self.dtype != DType.bool else self._const(False, DType.bool)
        x = self._float()
        return (x < 0).logical_or((x == 0).logical_and(x.reciprocal() < 0))

    def copysign(self, other):
        """|self| with the sign bit of other (torch.copysign: a float result)."""
        a, b = self._coerce(other, "copysign")
        a = a._float()
        return b.signbit().where(-a.abs(), a.abs())

    def heaviside(self, values):
        """`values` at zero, 1 above, 0 below and at NaN, like torch.heaviside (numpy's gives
        NaN at NaN)."""
        x, v = self._coerce(values, "heaviside")
        one, zero = x._const(1), x._const(0)
        return (x == 0).where(v, (x > 0).where(one, zero))

    def isposinf(self):
        return self == math.inf if self.dtype.is_float else self._const(False, DType.bool)

    def isneginf(self):
        return self == -math.inf if self.dtype.is_float else self._const(False, DType.bool)

    def fmax(self, other):
        """The larger of the two, ignoring a NaN (NaN only where both are), like torch.fmax."""
        a, b = self._coerce(other, "fmax")
        m = a.maximum(b)
        return m if not a.dtype.is_float else a.isnan().where(b, b.isnan().where(a, m))

    def fmin(self, other):
        a, b = self._coerce(other, "fmin")
        m = a.minimum(b)
        return m if not a.dtype.is_float else a.isnan().where(b, b.isnan().where(a, m))

    def deg2rad(self):
        return self._float() * (math.pi / 180.0)

    def rad2deg(self):
        return self._float() * (180.0 / math.pi)

    def logit(self, eps=None):
        """log(p / (1 - p)); with eps, p is clamped to [eps, 1 - eps] first (like torch.logit)."""
        p = self._float()
        if eps is not None:
            e = as_scalar(eps)
            if e is None:
                raise DTypeError(f"eps must be a number, got {eps!r}", "logit")
            p = p.clamp(e, 1 - e)
        return (p / (1 - p)).log()

    def logaddexp2(self, other):
        """log2(2^self + 2^other) without overflow, like torch.logaddexp2."""
        a, b = self._coerce(other, "logaddexp2")
        a, b = a._float(), b._float()
        if a.dtype != b.dtype:
            a, b = a.astype(DType.f32), b.astype(DType.f32)
        ln2 = math.log(2.0)
        return (a * ln2).logaddexp(b * ln2) * (1.0 / ln2)

    def sinc(self):
        """sin(pi x) / (pi x), 1 at 0 (torch.sinc)."""
        x = self._float()
        px = x * math.pi
        return (x == 0).where(x._const(1.0), px.sin() / px)

    def isclose(self, other, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False):
        """|self - other| <= atol + rtol * |other|, equal infinities close (like torch.isclose)."""
        a, b = self._coerce(other, "isclose")
        if not a.dtype.is_float:
            a, b = a.astype(DType.f32), b.astype(DType.f32)
        close = (a == b).logical_or((a - b).abs() <= atol + rtol * b.abs())
        if equal_nan:
            close = close.logical_or(a.isnan().logical_and(b.isnan()))
        return close

    def dist(self, other, p=2):
        """The p-norm of self - other (torch.dist)."""
        return (self - other).norm(p)

    def norm(self, p="fro", dim=None, keepdim: bool = False):
        """The p-norm over dim (all axes by default): 'fro' and 2 the Euclidean norm, inf / -inf
        the largest / smallest magnitude, 0 the count of nonzeros, others (sum |x|^p)^(1/p)."""
        x = self._float()
        a = x.abs()
        if p in ("fro", 2, 2.0):
            return (a * a).sum(dim, keepdim).sqrt()
        if p == math.inf:
            return a.max(dim, keepdim) if a.ndim else a
        if p == -math.inf:
            return a.min(dim, keepdim) if a.ndim else a
        if p == 0:
            return a.__ne__(0).astype(x.dtype).sum(dim, keepdim)
        if p == 1:
            return a.sum(dim, keepdim)
        if not isinstance(p, (int, float)) or isinstance(p, bool):
            raise DTypeError(f"p must be a number, 'fro', inf or -inf, got {p!r}", "norm")
        return (a ** float(p)).sum(dim, keepdim) ** (1.0 / p)

    def searchsorted(self, values, right: bool = False, side: str | None = None):
        """Where `values` would go in self, sorted along its last axis (torch.searchsorted): per
        value, how many of self's elements are below it (`right` or side='right': at or below).
        self is 1-D, or has values' sizes but the last. i32 (torch: int64). O(n) per value."""
        from compiler.tensor import Tensor
        if side is not None:
            if side not in ("left", "right"):
                raise OptionError(f"side must be 'left' or 'right', got {side!r}", "searchsorted")
            right = side == "right"
        if self.ndim == 0:
            raise ShapeError("searchsorted needs a sorted sequence of rank >= 1, got a 0-d tensor", "searchsorted")
        if not isinstance(values, Tensor):
            if as_scalar(values) is None:
                raise DTypeError(f"searchsorted values must be a Tensor or a number, got {type(values).__name__}",
                                 "searchsorted")
            values = Tensor.full((), as_scalar(values), self.dtype)
        v = values
        if self.ndim > 1 and (v.ndim != self.ndim or v.shape[:-1] != self.shape[:-1]):
            raise ShapeError(f"searchsorted of values {v.shape} into {self.shape}: all but the last sizes must "
                             f"match (or the sorted sequence be 1-D)", "searchsorted")
        s = self if self.ndim == 1 else self.unsqueeze(-2)      # (..., 1, n) against values (..., m, 1)
        v = v.unsqueeze(-1)
        below = s.__le__(v) if right else s.__lt__(v)
        return below.astype(DType.i32).sum(-1)

    def bucketize(self, boundaries, right: bool = False):
        """The bucket of each element among 1-D sorted `boundaries` (torch.bucketize):
        boundaries.searchsorted(self, right)."""
        b = _tensor(boundaries, "bucketize")
        _ranks("bucketize", (1,), b)
        return b.searchsorted(self, right=right)

    nonzero = _data_dependent("nonzero", "keep the shape with the mask x != 0 (and (x != 0).sum() to count)")
    argwhere = _data_dependent("argwhere", "keep the shape with the mask x != 0 (and (x != 0).sum() to count)")
    masked_select = _data_dependent("masked_select", "keep the shape with x.where(mask, 0)")
    unique = _data_dependent("unique", "sort (x.sort()) keeps the shape")
    unique_consecutive = _data_dependent("unique_consecutive", "sort (x.sort()) keeps the shape")
    bincount = _data_dependent("bincount", "count against a fixed range: x.one_hot(n).sum(0)")

    def var_mean(self, dim=None, correction: int = 1, keepdim: bool = False):
        return self.var(dim, keepdim, correction), self.mean(dim, keepdim)

    def std_mean(self, dim=None, correction: int = 1, keepdim: bool = False):
        return self.std(dim, keepdim, correction), self.mean(dim, keepdim)


def _checked(fn, have: str | None, also: str | None):
    """fn taking `also` as another name of its parameter `have`; a call that does not fit fn's
    parameters (an unknown keyword, too many arguments) is an OptionError naming the method and
    the user's line, not Python's bare TypeError."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def call(self, *args, **kwargs):
        if also is not None and also in kwargs:
            if have in kwargs:
                raise OptionError(f"give {have} or {also}, not both", fn.__name__)
            kwargs[have] = kwargs.pop(also)
        try:
            return fn(self, *args, **kwargs)
        except TypeError:
            try:
                signature.bind(self, *args, **kwargs)
            except TypeError as e:
                raise OptionError(f"{e} (its parameters: {str(signature).replace('(self, ', '(', 1)})",
                                  fn.__name__) from None
            raise
    return call


def torch_style_arguments(cls):
    """Let each public method of `cls` that names its axis argument `axis` also take `dim`
    (PyTorch's name), and each that names it `dim` also take `axis` (as torch.sum does); report
    calls that do not fit a method's parameters as OptionError."""
    for name in dir(cls):
        if name.startswith("_"):
            continue
        fn = inspect.getattr_static(cls, name)
        if not inspect.isfunction(fn):
            continue
        params = inspect.signature(fn).parameters
        have, also = next(((h, a) for h, a in (("axis", "dim"), ("dim", "axis")) if h in params and a not in params),
                          (None, None))
        setattr(cls, name, _checked(fn, have, also))
    return cls
