"""The lazy `Tensor`: a PyTorch-like API whose every method builds primitive IR nodes.

Nothing here computes. High-level ops (softmax, layer_norm, gelu, matmul, ...) are plain
compositions of the primitives in `ir.ops`, so the e-graph sees and can rewrite all of them.
"""
from __future__ import annotations

import math
import operator
from typing import Sequence

from compiler.errors import DTypeError, ShapeError, UnsupportedError
from compiler.tensor_aliases import AliasOps, torch_style_arguments
from compiler.tensor_args import Scalar, as_scalar, broadcast_shapes, half_in_f32, norm_axes, norm_axis
from compiler.tensor_index import IndexOps
from compiler.tensor_math import MathOps
from compiler.tensor_movement import PAD_MODES, MovementOps
from compiler.tensor_reduce import ReduceOps
from ir import node as N
from ir.dtypes import HALVES, SMALL_INTS, DType, as_dtype, promote
from ir.node import Node
from ir.ops import Op

LOG2E = 1.0 / math.log(2.0)
LN2 = math.log(2.0)
_as_scalar, _half_in_f32, _norm_axis, _norm_axes = as_scalar, half_in_f32, norm_axis, norm_axes


def _no_bool_sub(a: "Tensor") -> None:
    # operands already share a dtype: bool - bool is rejected as in PyTorch and numpy
    if a.dtype == DType.bool:
        raise DTypeError("subtraction (-) is not defined on bool; use logical_xor()", "sub")


@torch_style_arguments
class Tensor(MathOps, ReduceOps, MovementOps, IndexOps, AliasOps):
    """A lazy tensor. Build programs with it inside a function passed to `compiler.trace`.
    The methods in this file are the core; `MathOps`, `ReduceOps`, `MovementOps` and `IndexOps`
    add the rest."""
    __slots__ = ("node",)
    __array_priority__ = 1000  # numpy scalars on the left defer to our operators

    def __init__(self, node: Node):
        self.node = node

    # --- properties -----------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self.node.shape

    @property
    def dtype(self) -> DType:
        return self.node.dtype

    @property
    def ndim(self) -> int:
        return len(self.node.shape)

    @property
    def numel(self) -> int:
        return self.node.numel

    def size(self, axis: int | None = None):
        return self.shape if axis is None else self.shape[_norm_axis("size", axis, self.ndim, self.shape)]

    def __repr__(self) -> str:
        return f"Tensor(shape={self.shape}, dtype={self.dtype.value})"

    def __bool__(self):
        raise TypeError("a lazy Tensor has no truth value while tracing; use Tensor.where for data-dependent choices")

    def _no_value(self, what: str):
        from compiler.errors import UnsupportedError
        raise UnsupportedError(f"{what} of a lazy Tensor: it has no value while the function is traced; "
                               "return the tensor and read the compiled function's output (a numpy array) "
                               "instead", what)

    def item(self):
        self._no_value("item()")

    def tolist(self):
        self._no_value("tolist()")

    def __float__(self):
        self._no_value("float()")

    def __int__(self):
        self._no_value("int()")

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    # --- construction helpers -------------------------------------------------------------
    @staticmethod
    def full(shape, value: Scalar, dtype="f32") -> "Tensor":
        try:
            dt = as_dtype(dtype)
        except TypeError as e:
            raise DTypeError(str(e), "full") from None
        if _as_scalar(value) is None:
            raise DTypeError(f"fill value must be a scalar, got {type(value).__name__}", "full")
        return Tensor(N.const(_as_scalar(value), tuple(shape), dt))

    def _const(self, value: Scalar, dtype: DType | None = None) -> "Tensor":
        return Tensor.full(self.shape, value, dtype or self.dtype)

    def _coerce(self, other, op: str) -> tuple["Tensor", "Tensor"]:
        """Broadcast and promote two operands to one shape and dtype."""
        if isinstance(other, Tensor):
            a, b = self, other
        elif _as_scalar(other) is not None:
            value = _as_scalar(other)
            dt = self.dtype
            if isinstance(value, float) and not dt.is_float:
                dt = DType.f32
            elif isinstance(value, int) and not isinstance(value, bool) and dt == DType.bool:
                dt = DType.i32
            # an int scalar must fit i32 and i64 tensors; it wraps to i8 and u8 (as in PyTorch)
            if dt in (DType.i32, DType.i64) and not isinstance(value, bool) and not dt.lowest <= value <= dt.highest:
                raise DTypeError(f"{value} does not fit in {dt.value} (the tensor's dtype)", op)
            return self.astype(dt), Tensor(N.const(value, self.shape, dt))
        else:
            raise DTypeError(f"cannot combine a Tensor with {type(other).__name__}; "
                             "pass arrays as compile inputs instead", op)
        shape = broadcast_shapes(op, a.shape, b.shape)
        dt = promote(a.dtype, b.dtype)
        return a.astype(dt).expand(shape), b.astype(dt).expand(shape)

    def _float(self) -> "Tensor":
        return self if self.dtype.is_float else self.astype(DType.f32)

    # --- elementwise primitives -----------------------------------------------------------
    def _binary(self, op: Op, other, name: str, reverse: bool = False) -> "Tensor":
        a, b = self._coerce(other, name)
        if reverse:
            a, b = b, a
        if op == Op.MOD and a.dtype == DType.bool:
            raise DTypeError("mod is not defined on bool", name)
        return Tensor(N.binary(op, a.node, b.node))

    def __add__(self, o): return self._binary(Op.ADD, o, "add")
    def __radd__(self, o): return self._binary(Op.ADD, o, "add", True)
    def __mul__(self, o): return self._binary(Op.MUL, o, "mul")
    def __rmul__(self, o): return self._binary(Op.MUL, o, "mul", True)

    def fmod(self, o) -> "Tensor":
        """C-style remainder (sign follows the dividend), the primitive MOD: like torch.fmod."""
        return self._binary(Op.MOD, o, "fmod")

    def _remainder(self, o, reverse: bool) -> "Tensor":
        # Python-style remainder (sign follows the divisor), like torch.remainder and numpy's %
        a, b = self._coerce(o, "mod")
        if reverse:
            a, b = b, a
        if a.dtype == DType.bool:
            raise DTypeError("mod is not defined on bool", "mod")
        r = a.fmod(b)
        fix = (r.__ne__(0)).logical_and((r < 0).logical_xor(b < 0))
        return fix.where(r + b, r)

    def __mod__(self, o): return self._remainder(o, False)
    def remainder(self, o): return self._remainder(o, False)
    def __rmod__(self, o): return self._remainder(o, True)

    def __lt__(self, o): return self._binary(Op.CMPLT, o, "lt")
    def __gt__(self, o): return self._binary(Op.CMPLT, o, "gt", True)

    def __le__(self, o):
        a, b = self._coerce(o, "le")
        # "not b < a" is wrong only for NaN, which integers do not have
        return (a < b).logical_or(a == b) if a.dtype.is_float else (b < a).logical_not()

    def __ge__(self, o):
        a, b = self._coerce(o, "ge")
        return (b < a).logical_or(a == b) if a.dtype.is_float else (a < b).logical_not()

    def __eq__(self, o):  # noqa: D105 - elementwise, like PyTorch
        a, b = self._coerce(o, "eq")
        differ = (a < b).logical_or(b < a)
        if a.dtype.is_float:  # NaN compares unequal to everything, itself included
            differ = differ.logical_or(a.isnan()).logical_or(b.isnan())
        return differ.logical_not()

    def __ne__(self, o):
        return (self == o).logical_not()

    __hash__ = object.__hash__

    def __neg__(self):
        if self.dtype == DType.bool:   # as in PyTorch and numpy (it would silently become i32)
            raise DTypeError("negation (-) is not defined on bool; use logical_not()", "neg")
        return self * -1

    def isnan(self) -> "Tensor":
        """True where NaN: the only value that is neither below +inf nor above -inf."""
        if not self.dtype.is_float:
            return self._const(False, DType.bool)
        return ((self < math.inf).logical_or(self > -math.inf)).logical_not()

    def isinf(self) -> "Tensor":
        if not self.dtype.is_float:
            return self._const(False, DType.bool)
        # neither finite nor NaN
        return self.isfinite().logical_not().logical_and((self < math.inf).logical_or(self > -math.inf))

    def isfinite(self) -> "Tensor":
        if not self.dtype.is_float:
            return self._const(True, DType.bool)
        return (self > -math.inf).logical_and(self < math.inf)

    def __sub__(self, o):
        a, b = self._coerce(o, "sub")
        _no_bool_sub(a)
        return a + (-b)

    def __rsub__(self, o):
        a, b = self._coerce(o, "sub")
        _no_bool_sub(a)
        return b + (-a)

    def __truediv__(self, o):
        a, b = self._coerce(o, "div")
        return a._float()._divide(b._float(), _as_scalar(o))

    def __rtruediv__(self, o):
        a, b = self._coerce(o, "div")
        return b._float()._divide(a._float(), None)

    @_half_in_f32
    def _divide(self, b: "Tensor", scalar) -> "Tensor":
        # a / b = a * (1 / b); a nonzero scalar divisor folds to one multiply
        if isinstance(scalar, (int, float)) and not isinstance(scalar, bool) and scalar != 0:
            return self * (1.0 / scalar)
        return self * b.reciprocal()

    def __pow__(self, exponent):
        e = _as_scalar(exponent)
        x = self.astype(DType.i32) if self.dtype == DType.bool else self   # bool ** n counts, like torch
        if e is not None and not isinstance(e, bool):
            if isinstance(e, float) and not x.dtype.is_float:
                x = x._float()   # an int tensor to a float power is a float, like torch
            if float(e).is_integer() and 0 <= e <= 64:
                # exact for every sign of the base: square-and-multiply
                out, power, n = None, x, int(e)
                while n:
                    if n & 1:
                        out = power if out is None else out * power
                    n >>= 1
                    if n:
                        power = power * power
                return x._const(1) if out is None else out
            if not x.dtype.is_float:
                raise DTypeError(f"an integer tensor to the negative power {e} (PyTorch refuses it too); "
                                 "cast the base to float first", "pow")
            if e == 0.5:
                return x.sqrt()
            if e == -0.5:
                return x.rsqrt()
            if float(e).is_integer() and -64 <= e < 0:
                return (x ** -e).reciprocal()
            if math.isfinite(e):
                return x._pow_scalar(float(e))
        a, b = x._coerce(exponent, "pow")
        if not a.dtype.is_float:
            raise DTypeError("an integer tensor to an integer tensor power is not supported; cast to float first",
                             "pow")
        return a._pow(b)

    def __rpow__(self, base):
        a, b = self._coerce(base, "pow")
        if not a.dtype.is_float:
            raise DTypeError("an integer base to an integer tensor power is not supported; use a float base",
                             "pow")
        return b._pow(a)

    @_half_in_f32
    def _pow_scalar(self, e: float) -> "Tensor":
        # x ** e for a finite, non-integral e: exp2(e * log2(x)), NaN for negative x except -inf
        # (C's pow: (-inf) ** e is inf for e > 0, 0 for e < 0)
        return (self == -math.inf).where(math.inf if e > 0 else 0.0, (self.log2() * e).exp2())

    @_half_in_f32
    def _pow(self, e: "Tensor") -> "Tensor":
        # C's pow: |x| ** e = exp2(e * log2|x|), negated for a negative base and an odd integral e;
        # NaN for a negative finite base and a non-integral finite e; 1 for e == 0, x == 1 and
        # x == -1 with e = +-inf
        ax = self._magnitude()   # (log2 of -0.0 and +0.0 are both -inf)
        r = (ax.log2() * e).exp2()
        integral = e.fmod(1.0) == 0   # false for inf and NaN
        odd = integral.logical_and(e.fmod(2.0).abs() == 1)
        neg = self < 0
        r = neg.logical_and(odd).where(-r, r)
        bad = neg.logical_and(integral.logical_not()).logical_and(e.isfinite()).logical_and(self > -math.inf)
        r = bad.where(math.nan, r)
        one = (e == 0).logical_or(self == 1).logical_or((ax == 1).logical_and(e.isinf()))
        return one.where(1.0, r)

    def __matmul__(self, o): return self.matmul(o)

    def __rmatmul__(self, o):
        raise DTypeError(f"matmul needs two Tensors, got {type(o).__name__} @ Tensor", "matmul")

    def _unary(self, op: Op) -> "Tensor":
        return Tensor(N.unary(op, self._float().node))

    def exp2(self): return self._unary(Op.EXP2)
    def log2(self): return self._unary(Op.LOG2)
    def sin(self): return self._unary(Op.SIN)
    def sqrt(self): return self._unary(Op.SQRT)
    def reciprocal(self): return self._unary(Op.RECIP)

    # composites: halves compute in f32 and round once (see _half_in_f32)
    def exp(self): return self._float()._exp()
    def log(self): return self._float()._log()
    def rsqrt(self): return self._float()._rsqrt()
    def cos(self): return self._float()._cos()
    def sigmoid(self): return self._float()._sigmoid()
    def tanh(self): return self._float()._tanh()
    def silu(self): return self._float()._silu()
    def relu(self): return (self < 0).where(0, self)
    def abs(self):
        if not self.dtype.is_float:
            return (self < 0).where(-self, self)
        # neither below nor above zero: +-0.0 and NaN, where x * x gives +0.0 and NaN (-0.0 is
        # not below zero, and where(x < 0, -x, x) kept it: 1 / abs(-0.0) gave -inf)
        return (self < 0).where(-self, (self > 0).where(self, self * self))

    def _magnitude(self):
        """|x| up to the sign of zero (-0.0 stays -0.0): one select, for compositions that only
        compare it or feed it to an even function (erf's and tanh's cases, pow's log2)."""
        return (self < 0).where(-self, self)
    def square(self): return self * self

    @_half_in_f32
    def _exp(self): return (self * LOG2E).exp2()
    @_half_in_f32
    def _log(self): return self.log2() * LN2
    @_half_in_f32
    def _rsqrt(self): return self.sqrt().reciprocal()
    @_half_in_f32
    def _cos(self): return (self + math.pi / 2).sin()
    @_half_in_f32
    def _sigmoid(self): return ((-self).exp() + 1).reciprocal()
    @_half_in_f32
    def _tanh(self):
        # 2 sigmoid(2x) - 1 cancels near 0 (relative error 1e-2 at x = 1e-5; a tiny negative x
        # gave +0): there the odd series x - x^3/3, within f32 rounding for |x| < 0.025 (f64: to
        # x^9, within f64 rounding; two terms were 1e-9 off at x = 0.02, CPU fuzz seed 119334)
        x2 = self * self
        if self.dtype == DType.f64:
            series = self * (1 + x2 * (-1 / 3 + x2 * (2 / 15 + x2 * (-17 / 315 + x2 * (62 / 2835)))))
        else:
            series = self * (1 - x2 * (1 / 3))
        return (self._magnitude() < 0.025).where(series, (self * 2).sigmoid() * 2 - 1)
    @_half_in_f32
    def _silu(self): return self * self.sigmoid()

    def erf(self):
        return self._float()._erf()

    @_half_in_f32
    def _erf(self):
        # Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7), built from primitives
        x = self
        sign = (x < 0).where(-1.0, 1.0)
        a = x._magnitude()   # (only a * a and a * c + 1 read it)
        t = (a * 0.3275911 + 1).reciprocal()
        poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
        return sign * (1 - poly * (-(a * a)).exp())

    def gelu(self, approximate: str = "none"):
        if approximate not in ("none", "tanh"):
            raise ShapeError(f"approximate must be 'none' or 'tanh', got {approximate!r}", "gelu")
        return self._float()._gelu(approximate)

    @_half_in_f32
    def _gelu(self, approximate: str):
        x = self
        if approximate == "tanh":
            return 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh())
        if approximate != "none":
            raise ShapeError(f"approximate must be 'none' or 'tanh', got {approximate!r}", "gelu")
        return 0.5 * x * (1 + (x * (1 / math.sqrt(2))).erf())

    def logical_not(self):
        if self.dtype != DType.bool:
            raise DTypeError(f"logical_not needs bool, got {self.dtype.value}", "logical_not")
        return self.where(False, True)

    def _check_bools(self, o, op: str) -> None:
        for t in (self, o):
            dt = t.dtype if isinstance(t, Tensor) else DType.bool if isinstance(t, bool) else None
            if dt != DType.bool:
                got = dt.value if dt is not None else type(t).__name__
                raise DTypeError(f"{op} needs bool operands, got {got}", op)

    def logical_or(self, o):
        self._check_bools(o, "logical_or")
        return self.where(True, o)

    def logical_and(self, o):
        self._check_bools(o, "logical_and")
        return self.where(o, False)

    def logical_xor(self, o):
        self._check_bools(o, "logical_xor")
        return self.where(o.logical_not() if isinstance(o, Tensor) else not o, o)

    def where(self, a, b) -> "Tensor":
        """`self ? a : b` elementwise, self a bool tensor (like torch.where(self, a, b))."""
        if self.dtype != DType.bool:
            raise DTypeError(f"condition must be bool, got {self.dtype.value}", "where")
        if isinstance(a, Tensor):
            a_t, b_t = a._coerce(b, "where")
        elif isinstance(b, Tensor):
            b_t, a_t = b._coerce(a, "where")
        else:
            a, b = _as_scalar(a), _as_scalar(b)
            if a is None or b is None:
                raise DTypeError("where takes Tensors or scalars for its two values", "where")
            dt = DType.f32 if isinstance(a, float) or isinstance(b, float) else \
                (DType.bool if isinstance(a, bool) and isinstance(b, bool) else DType.i32)
            a_t, b_t = self._const(a, dt), self._const(b, dt)
        shape = broadcast_shapes("where", self.shape, a_t.shape, b_t.shape)
        return Tensor(N.where(self.expand(shape).node, a_t.expand(shape).node, b_t.expand(shape).node))

    def masked_fill(self, mask, value) -> "Tensor":
        """`value` (a number or a 0-d tensor, cast to this dtype) where the bool `mask` holds,
        this tensor elsewhere; both broadcast, like torch.masked_fill."""
        if not isinstance(mask, Tensor) or mask.dtype != DType.bool:
            got = mask.dtype.value if isinstance(mask, Tensor) else type(mask).__name__
            raise DTypeError(f"masked_fill needs a bool mask tensor, got {got}", "masked_fill")
        if isinstance(value, Tensor):
            if value.ndim != 0:
                raise ShapeError(f"masked_fill's value must be a number or a 0-d tensor, got shape {value.shape}",
                                 "masked_fill")
            fill = value.astype(self.dtype)
        elif _as_scalar(value) is not None:
            fill = self._const(_as_scalar(value))
        else:
            raise DTypeError(f"masked_fill's value must be a number or a 0-d tensor, got {type(value).__name__}",
                             "masked_fill")
        return mask.where(fill, self)

    def maximum(self, o):
        """Elementwise max; NaN in either operand gives NaN (like torch.maximum, np.maximum)."""
        a, b = self._coerce(o, "maximum")
        return (a < b).logical_or(b.isnan()).where(b, a)

    def minimum(self, o):
        """Elementwise min; NaN in either operand gives NaN (like torch.minimum, np.minimum)."""
        a, b = self._coerce(o, "minimum")
        return (b < a).logical_or(b.isnan()).where(b, a)

    def clamp(self, lo=None, hi=None):
        out = self
        if lo is not None:
            out = out.maximum(lo)
        if hi is not None:
            out = out.minimum(hi)
        return out

    def astype(self, dtype) -> "Tensor":
        try:
            dt = as_dtype(dtype)
        except TypeError as e:
            raise DTypeError(str(e), "astype") from None
        return Tensor(N.cast(self.node, dt))

    cast = astype
    to = astype

    # --- reductions -----------------------------------------------------------------------
    def _reduce(self, op: Op, axis, keepdim: bool, name: str) -> "Tensor":
        axes = _norm_axes(name, axis, self.ndim, self.shape)
        # bool sums count (i32); bool max is "any" (stays bool); i8 and u8 sum in i32 (torch: int64)
        small = self.dtype == DType.bool or (op == Op.SUM and self.dtype in SMALL_INTS)
        x = self.astype(DType.i32) if small else self
        if not self.ndim or not axes:
            out = x
        elif op == Op.MAX and any(self.shape[a] == 0 for a in axes):
            raise ShapeError(f"max over an empty axis of shape {self.shape}", name)
        else:
            out = Tensor(N.reduce(op, x.node, axes))
            if not keepdim:
                out = out.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))
        return out.astype(DType.bool) if op == Op.MAX and self.dtype == DType.bool else out

    def sum(self, axis=None, keepdim: bool = False):
        return self._reduce(Op.SUM, axis, keepdim, "sum")

    def max(self, axis=None, keepdim: bool = False):
        return self._reduce(Op.MAX, axis, keepdim, "max")

    def min(self, axis=None, keepdim: bool = False):
        if self.dtype == DType.bool:  # "all"
            return self.logical_not()._reduce(Op.MAX, axis, keepdim, "min").logical_not()
        if self.dtype.is_int:
            # -x wraps at the minimum (u8: everywhere); ~x = -1 - x maps the range onto itself in reverse
            return -1 - (-1 - self)._reduce(Op.MAX, axis, keepdim, "min")
        return -((-self)._reduce(Op.MAX, axis, keepdim, "min"))

    def mean(self, axis=None, keepdim: bool = False):
        axes = _norm_axes("mean", axis, self.ndim, self.shape)
        return self._float()._mean(axes, keepdim)

    @_half_in_f32
    def _mean(self, axes, keepdim):
        n = math.prod(self.shape[a] for a in axes)
        return self.sum(axes, keepdim) * (1.0 / n if n else float("nan"))

    def var(self, axis=None, keepdim: bool = False, correction: int = 1):
        """Variance with `correction` (1: unbiased, like torch.var; 0: like np.var)."""
        axes = _norm_axes("var", axis, self.ndim, self.shape)
        x = self._float()
        if x._squares_overflow_f32(axes):
            return x._scaled_var(axes, keepdim, correction)
        return x._var(axes, keepdim, correction)

    @_half_in_f32
    def _var(self, axes, keepdim, correction):
        n = math.prod(self.shape[a] for a in axes)
        d = self - self.mean(axes, keepdim=True)
        denom = max(n - correction, 0)
        # like PyTorch, no degrees of freedom divides by zero: inf, or NaN where the sum is 0
        return (d * d).sum(axes, keepdim) * (1.0 / denom if denom else math.inf)

    def softmax(self, axis: int = -1):
        return self._float()._softmax(_norm_axis("softmax", axis, self.ndim, self.shape))

    @_half_in_f32
    def _softmax(self, axis):
        e = (self - self.max(axis, keepdim=True)).exp()
        return e / e.sum(axis, keepdim=True)

    def log_softmax(self, axis: int = -1):
        return self._float()._log_softmax(_norm_axis("log_softmax", axis, self.ndim, self.shape))

    @_half_in_f32
    def _log_softmax(self, axis):
        s = self - self.max(axis, keepdim=True)
        return s - s.exp().sum(axis, keepdim=True).log()

    def _norm_axes_of(self, op: str, normalized_shape, *params) -> tuple[int, ...]:
        """The trailing axes that `normalized_shape` names, checked against self and params."""
        if normalized_shape is None:
            want = self.shape[-1:]
        elif isinstance(normalized_shape, int):
            want = (normalized_shape,)
        else:
            want = tuple(normalized_shape)
        n = len(want)
        if n > self.ndim or self.shape[self.ndim - n:] != want:
            raise ShapeError(f"normalized_shape {want} does not match the trailing axes of {self.shape}", op)
        for name, p in params:
            if p is not None and (not isinstance(p, Tensor) or p.shape != want):
                got = p.shape if isinstance(p, Tensor) else type(p).__name__
                raise ShapeError(f"{name} must have shape {want} (normalized_shape), got {got}", op)
        return tuple(range(self.ndim - n, self.ndim))

    def layer_norm(self, normalized_shape=None, weight=None, bias=None, eps: float = 1e-5):
        """(x - mean) / sqrt(biased var + eps) * weight + bias over the trailing `normalized_shape`."""
        axes = self._norm_axes_of("layer_norm", normalized_shape, ("weight", weight), ("bias", bias))
        x = self._float()
        if x._squares_overflow_f32(axes):
            return x._scaled_layer_norm(axes, weight, bias, eps)
        return x._layer_norm(axes, weight, bias, eps)

    @_half_in_f32
    def _layer_norm(self, axes, weight, bias, eps):
        d = self - self.mean(axes, keepdim=True)
        out = d * ((d * d).mean(axes, keepdim=True) + eps).rsqrt()
        if weight is not None:
            out = out * weight
        if bias is not None:
            out = out + bias
        return out

    def rms_norm(self, normalized_shape=None, weight=None, eps: float = 1e-6):
        """x / sqrt(mean(x^2) + eps) * weight over the trailing `normalized_shape`."""
        axes = self._norm_axes_of("rms_norm", normalized_shape, ("weight", weight))
        x = self._float()
        if x._squares_overflow_f32(axes):
            return x._scaled_rms_norm(axes, weight, eps)
        return x._rms_norm(axes, weight, eps)

    @_half_in_f32
    def _rms_norm(self, axes, weight, eps):
        out = self * ((self * self).mean(axes, keepdim=True) + eps).rsqrt()
        return out * weight if weight is not None else out

    def matmul(self, other: "Tensor") -> "Tensor":
        if not isinstance(other, Tensor):
            raise DTypeError(f"matmul needs two Tensors, got {type(other).__name__}", "matmul")
        a, b = self, other
        if a.ndim == 0 or b.ndim == 0:
            raise ShapeError("matmul does not take 0-d tensors; use *", "matmul")
        squeeze_a, squeeze_b = a.ndim == 1, b.ndim == 1
        if squeeze_a:
            a = a.reshape((1,) + a.shape)
        if squeeze_b:
            b = b.reshape(b.shape + (1,))
        if a.shape[-1] != b.shape[-2]:
            raise ShapeError(f"inner dimensions differ: {self.shape} @ {other.shape} "
                             f"({a.shape[-1]} != {b.shape[-2]})", "matmul")
        try:
            batch = broadcast_shapes("matmul", a.shape[:-2], b.shape[:-2])
        except ShapeError:
            raise ShapeError(f"batch axes of {self.shape} @ {other.shape} do not broadcast "
                             f"({a.shape[:-2]} vs {b.shape[:-2]})", "matmul") from None
        m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
        dt = promote(a.dtype, b.dtype)
        # halves multiply and accumulate in f32 and round once, like PyTorch
        cdt = DType.f32 if dt in HALVES else dt
        a3 = a.astype(cdt).reshape(a.shape[:-2] + (m, k, 1)).expand(batch + (m, k, n))
        b3 = b.astype(cdt).reshape(b.shape[:-2] + (1, k, n)).expand(batch + (m, k, n))
        out = (a3 * b3).sum(-2).astype(dt)
        if squeeze_a:
            out = out.reshape(out.shape[:-2] + (n,))
        if squeeze_b:
            out = out.reshape(out.shape[:-1])
        return out

    def linear(self, weight: "Tensor", bias: "Tensor | None" = None) -> "Tensor":
        """x @ weight.T + bias, weight of shape (out, in) like torch.nn.functional.linear."""
        out = self @ weight.transpose(-1, -2)
        return out + bias if bias is not None else out

    # --- movement (views; nothing is copied) ----------------------------------------------
    def _move(self, fn, fill: float | None = None) -> "Tensor":
        return Tensor(N.move(self.node, fn, fill))

    def reshape(self, *shape) -> "Tensor":
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)
        if any(not isinstance(s, int) or isinstance(s, bool) for s in shape):
            raise ShapeError(f"shape entries must be ints, got {shape}", "reshape")
        if shape.count(-1) > 1 or any(s < -1 for s in shape):
            raise ShapeError(f"bad shape {shape}", "reshape")
        if -1 in shape:
            known = math.prod(s for s in shape if s != -1)
            if known == 0 or self.numel % known:
                raise ShapeError(f"cannot reshape {self.shape} ({self.numel} elements) to {shape}", "reshape")
            shape = tuple(self.numel // known if s == -1 else s for s in shape)
        if math.prod(shape) != self.numel:
            raise ShapeError(f"cannot reshape {self.shape} ({self.numel} elements) to {shape} "
                             f"({math.prod(shape)} elements)", "reshape")
        if shape == self.shape:
            return self
        return self._move(lambda st: st.reshape(shape))

    view = reshape

    def flatten(self, start: int = 0, end: int = -1) -> "Tensor":
        if not self.ndim:
            return self.reshape(1)
        s, e = _norm_axis("flatten", start, self.ndim, self.shape), _norm_axis("flatten", end, self.ndim, self.shape)
        return self.reshape(self.shape[:s] + (math.prod(self.shape[s:e + 1]),) + self.shape[e + 1:])

    def unsqueeze(self, axis: int) -> "Tensor":
        axis = _norm_axis("unsqueeze", axis, self.ndim + 1)
        return self.reshape(self.shape[:axis] + (1,) + self.shape[axis:])

    def squeeze(self, axis=None) -> "Tensor":
        axes = _norm_axes("squeeze", axis, self.ndim, self.shape) if axis is not None else \
            tuple(i for i, s in enumerate(self.shape) if s == 1)
        return self.reshape(tuple(s for i, s in enumerate(self.shape) if not (i in axes and s == 1)))

    def permute(self, *order) -> "Tensor":
        order = tuple(order[0]) if len(order) == 1 and isinstance(order[0], (tuple, list)) else tuple(order)
        norm = tuple(_norm_axis("permute", a, self.ndim, self.shape) for a in order)
        if sorted(norm) != list(range(self.ndim)):
            raise ShapeError(f"{order} is not a permutation of the {self.ndim} axes of {self.shape}", "permute")
        if norm == tuple(range(self.ndim)):
            return self
        return self._move(lambda st: st.permute(norm))

    def transpose(self, a: int = -2, b: int = -1) -> "Tensor":
        a, b = _norm_axis("transpose", a, self.ndim, self.shape), _norm_axis("transpose", b, self.ndim, self.shape)
        order = list(range(self.ndim))
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> "Tensor":
        return self.permute(tuple(reversed(range(self.ndim))))

    def expand(self, *shape) -> "Tensor":
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)
        if len(shape) < self.ndim:
            raise ShapeError(f"cannot expand {self.shape} to fewer axes {shape}", "expand")
        if any(not isinstance(n, int) or isinstance(n, bool) or n < -1 for n in shape):
            raise ShapeError(f"expand sizes must be ints >= 0 (or -1 to keep), got {shape}", "expand")
        src = (1,) * (len(shape) - self.ndim) + self.shape
        shape = tuple(s if n == -1 else n for s, n in zip(src, shape))
        for s, n in zip(src, shape):
            if s != n and s != 1:
                raise ShapeError(f"cannot expand {self.shape} to {shape}: only size-1 axes expand", "expand")
        x = self.reshape(src) if src != self.shape else self
        if shape == x.shape:
            return x
        return x._move(lambda st: st.expand(shape))

    def slice(self, axis: int, start: int | None = None, stop: int | None = None, step: int = 1) -> "Tensor":
        axis = _norm_axis("slice", axis, self.ndim, self.shape)
        index = [slice(None)] * self.ndim
        index[axis] = slice(start, stop, step)
        return self[tuple(index)]

    def __getitem__(self, index) -> "Tensor":
        if not isinstance(index, tuple):
            index = (index,)
        for i in index:
            if isinstance(i, Tensor) and i.dtype == DType.bool:
                raise UnsupportedError("boolean-mask indexing x[mask] has a data-dependent shape; keep the "
                                       "shape with mask.where(x, 0) (where) instead", "getitem")
        if sum(1 for i in index if i is Ellipsis) > 1:
            raise ShapeError("only one ... allowed in an index", "getitem")
        n_real = sum(1 for i in index if i is not None and i is not Ellipsis)
        if n_real > self.ndim:
            raise ShapeError(f"too many indices ({n_real}) for shape {self.shape}", "getitem")
        k = next((p for p, i in enumerate(index) if i is Ellipsis), None)
        if k is not None:
            index = index[:k] + (slice(None),) * (self.ndim - n_real) + index[k + 1:]
        else:
            index = index + (slice(None),) * (self.ndim - n_real)
        if any(isinstance(i, Tensor) for i in index):
            return self._tensor_index(index)
        picks = [(p, i) for p, i in enumerate(index) if isinstance(i, list)]
        if picks:   # a static list of positions: basic indexing first, then the picks
            if len(picks) > 1:
                raise UnsupportedError("more than one list index (numpy's zipped fancy indexing)", "getitem")
            return self._pick(index, *picks[0])
        bounds, steps, flips, out_shape, dim = [], [], [], [], 0
        for i in index:
            if i is None:
                out_shape.append(("new", 1))
                continue
            size = self.shape[dim]
            if not isinstance(i, (bool, slice)) and hasattr(i, "__index__"):
                i = operator.index(i)
            if isinstance(i, int) and not isinstance(i, bool):
                if not -size <= i < size:
                    raise ShapeError(f"index {i} is out of range for axis {dim} of size {size}", "getitem")
                i %= size
                bounds.append((i, i + 1))
                steps.append(1)
                out_shape.append(("drop", 1))
            elif isinstance(i, slice):
                if i.step == 0:
                    raise ShapeError("slice step cannot be zero", "getitem")
                start, stop, step = i.indices(size)
                n = len(range(start, stop, step))
                if step > 0:
                    bounds.append((start, max(stop, start)))
                else:   # the elements start, start-|step|, ...: a reversed view of their span
                    bounds.append((start + (n - 1) * step, start + 1) if n else (0, 0))
                    flips.append(dim)
                steps.append(abs(step))
                out_shape.append(("keep", n))
            else:
                raise ShapeError(f"unsupported index {i!r}; use ints, slices, lists of ints, None or ...",
                                 "getitem")
            dim += 1
        x = self
        if any(b != (0, s) for b, s in zip(bounds, self.shape)):
            x = x._move(lambda st: st.shrink(tuple(bounds)))
        if flips:
            x = x._move(lambda st: st.flip(tuple(flips)))
        if any(k != 1 for k in steps):
            x = x._move(lambda st: st.step(tuple(steps)))
        return x.reshape(tuple(s for kind, s in out_shape if kind != "drop"))

    def _tensor_index(self, index: tuple) -> "Tensor":
        """x[index] (one entry per axis, `...` expanded) with integer tensors among the indices
        (torch's advanced indexing): ints and
        slices apply first; the tensors broadcast to one shape B and pick elements of their axes
        together, one gather over those axes flattened; B takes the place of those axes when
        they are adjacent, else it comes first. Negative positions count from the end; positions
        still outside an axis read 0 (torch raises)."""
        if any(i is None for i in index):
            raise UnsupportedError("None (a new axis) beside a tensor index; unsqueeze first", "getitem")
        for i in index:
            if isinstance(i, Tensor) and i.dtype.is_float:
                raise DTypeError(f"a tensor index must hold integers, got {i.dtype.value}", "getitem")
            if isinstance(i, list):
                raise UnsupportedError("a list index beside a tensor index; make the list a tensor", "getitem")
        # ints and slices first (basic indexing, as torch does: an int is no advanced index), then
        # the tensors over the axes that remain
        x = self[tuple(slice(None) if isinstance(i, Tensor) else i for i in index)]
        kept = [i for i in index if isinstance(i, (Tensor, slice))]
        picks = [a for a, i in enumerate(kept) if isinstance(i, Tensor)]
        idx = [kept[a].astype(DType.i32) for a in picks]
        if len(picks) == 1:
            a, i = picks[0], idx[0]
            out = x.index_select(a, i.reshape(i.numel))
            return out.reshape(x.shape[:a] + i.shape + x.shape[a + 1:])
        shape = broadcast_shapes("getitem", *(i.shape for i in idx))
        rest = [a for a in range(x.ndim) if a not in picks]
        sizes = [x.shape[a] for a in picks]
        total = math.prod(sizes)
        if total >= 2 ** 29:
            raise UnsupportedError(f"tensor indices over axes of {total} elements together (i32 positions)", "getitem")
        flat = None
        for k, (i, n) in enumerate(zip(idx, sizes)):
            i = (i < 0).where(i + n, i)
            # a position outside its axis reads 0 (as one tensor index does), never another element
            i = ((i < 0).logical_or(i >= n)).where(-2 * total - 1, i)
            term = i * math.prod(sizes[k + 1:])
            flat = term if flat is None else flat + term
        flat = flat.expand(shape) if flat.shape != shape else flat
        y = x.permute(rest + picks).reshape(tuple(x.shape[a] for a in rest) + (math.prod(sizes),))
        out = y.index_select(len(rest), flat.reshape(flat.numel) if flat.ndim else flat.reshape(1))
        out = out.reshape(tuple(x.shape[a] for a in rest) + shape)
        # B in place of the picked axes when they are adjacent (numpy), else first
        at = picks[0] if picks == list(range(picks[0], picks[0] + len(picks))) else 0
        order = list(range(len(rest)))
        b_axes = list(range(len(rest), len(rest) + len(shape)))
        return out.permute(order[:at] + b_axes + order[at:]) if out.ndim else out

    def _pick(self, index: tuple, pos: int, picks: list) -> "Tensor":
        """self[index] where index[pos] is a list of positions (or of bools, a static mask)."""
        dim = sum(1 for i in index[:pos] if i is not None)
        size = self.shape[dim]
        if picks and all(isinstance(p, bool) for p in picks):
            if len(picks) != size:
                raise ShapeError(f"a boolean list of length {len(picks)} for axis {dim} of size {size}", "getitem")
            picks = [j for j, p in enumerate(picks) if p]
        if not all(isinstance(p, int) or hasattr(p, "__index__") for p in picks):
            raise ShapeError(f"a list index holds ints, got {picks!r}", "getitem")
        picks = [operator.index(p) for p in picks]
        for p in picks:
            if not -size <= p < size:
                raise ShapeError(f"index {p} is out of range for axis {dim} of size {size}", "getitem")
        base = self[index[:pos] + (slice(None),) + index[pos + 1:]]
        out_axis = sum(1 for i in index[:pos] if i is None or isinstance(i, slice))
        if not picks:
            return base.slice(out_axis, 0, 0)
        return cat([base.slice(out_axis, p % size, p % size + 1) for p in picks], out_axis)

    def pad(self, pads: Sequence[tuple[int, int]], value: float = 0.0, mode: str = "constant") -> "Tensor":
        """Pad each axis by (before, after) elements (numpy order, first axis first): of `value`,
        or for mode reflect / replicate / circular of the tensor's own edge values."""
        pads = tuple(tuple(p) for p in pads)
        if len(pads) != self.ndim or any(len(p) != 2 or p[0] < 0 or p[1] < 0 for p in pads):
            raise ShapeError(f"pads must be one non-negative (before, after) pair per axis of {self.shape}, got {pads}", "pad")
        if mode not in PAD_MODES:
            raise ShapeError(f"mode must be one of {PAD_MODES}, got {mode!r}", "pad")
        if all(p == (0, 0) for p in pads):
            return self
        if mode != "constant":
            return self._pad_mode(pads, mode)
        return self._move(lambda st: st.pad(pads, float(value)), float(value))

    def contiguous(self) -> "Tensor":
        return Tensor(N.contiguous(self.node))

    def __iter__(self):
        raise TypeError("iterating over a lazy Tensor is not supported; index it explicitly")


def cat(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Concatenate along `axis`: each piece is padded into place and selected with `where`."""
    tensors = list(tensors)
    if not tensors:
        raise ShapeError("cat of no tensors", "cat")
    ref = tensors[0]
    axis = _norm_axis("cat", axis, ref.ndim, ref.shape)
    for t in tensors[1:]:
        if t.ndim != ref.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, ref.shape)) if i != axis):
            raise ShapeError(f"shapes {[x.shape for x in tensors]} differ outside axis {axis}", "cat")
    dt = ref.dtype
    for t in tensors[1:]:
        dt = promote(dt, t.dtype)
    total = sum(t.shape[axis] for t in tensors)
    out, offset = None, 0
    for t in tensors:
        pads = [(0, 0)] * ref.ndim
        pads[axis] = (offset, total - offset - t.shape[axis])
        placed = t.astype(dt).pad(pads)
        mask = Tensor.full(t.shape, True, DType.bool).pad(pads, 0.0)
        out = placed if out is None else mask.where(placed, out)
        offset += t.shape[axis]
    return out


def stack(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Join tensors of one shape along a new axis (each unsqueezed, then `cat`)."""
    tensors = list(tensors)
    if not tensors:
        raise ShapeError("stack of no tensors", "stack")
    if any(t.shape != tensors[0].shape for t in tensors):
        raise ShapeError(f"stack needs tensors of one shape, got {[t.shape for t in tensors]}", "stack")
    axis = _norm_axis("stack", axis, tensors[0].ndim + 1)
    return cat([t.unsqueeze(axis) for t in tensors], axis)


def where(cond: Tensor, a, b) -> Tensor:
    """`cond ? a : b` elementwise (like torch.where); cond a bool Tensor."""
    if not isinstance(cond, Tensor):
        raise DTypeError(f"condition must be a bool Tensor, got {type(cond).__name__}", "where")
    return cond.where(a, b)


def maximum(a: Tensor, b) -> Tensor:
    return a.maximum(b)
