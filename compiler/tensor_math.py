"""Elementwise math beyond the primitives, mixed into `Tensor`: rounding, sign, tan/atan,
log1p/expm1, the activation functions, floor division and integer bitwise ops.

Everything is a composition of primitives; rounding is built on the exact `mod` (fmod), and
integer division and bitwise ops on exact i32 arithmetic (wrapping, like the hardware)."""
from __future__ import annotations

import math

from compiler.errors import DTypeError, ShapeError
from compiler.tensor_args import as_scalar, half_in_f32, is_int
from ir.dtypes import SMALL_INTS, DType

# atan(t) ~ t + t^3 P(t^2) on |t| <= tan(pi/8): a weighted least-squares fit (relative error
# at most 2.2e-8 in exact arithmetic), evaluated after reducing |x| to that range
ATAN_P = (-0.3333297321, 0.1997848855, -0.1388507983, 0.08075327106)
TAN_PI_8 = math.sqrt(2.0) - 1.0
TAN_3PI_8 = math.sqrt(2.0) + 1.0
I32_MIN = -2 ** 31
LARGEST_F32_BELOW_2_31 = 2147483520.0


class MathOps:
    """Elementwise methods of `Tensor` (see docs/ir.md for each one's primitives)."""

    # --- rounding: trunc is x - fmod(x, 1), exact for every finite float -------------------
    def trunc(self):
        return self if not self.dtype.is_float else self._trunc()

    @half_in_f32
    def _trunc(self):
        # |x| < 1 gives a zero with x's sign (x * 0), like torch; inf and NaN stay themselves
        t = self.isfinite().where(self - self.fmod(1.0), self)
        return (self.abs() < 1).where(self * 0.0, t)

    def floor(self):
        if not self.dtype.is_float:
            return self
        t = self.trunc()
        return (t > self).where(t - 1, t)

    def ceil(self):
        if not self.dtype.is_float:
            return self
        t = self.trunc()
        return (t < self).where(t + 1, t)

    def frac(self):
        """x - trunc(x), like torch.frac."""
        return self - self.trunc()

    def round(self, decimals: int = 0):
        """Round half to even (like torch.round); `decimals` scales by 10**decimals first."""
        if not is_int(decimals):
            raise DTypeError(f"decimals must be an int, got {decimals!r}", "round")
        if not self.dtype.is_float:
            return self
        return self._round(int(decimals))

    @half_in_f32
    def _round(self, decimals: int):
        if decimals:
            scale = 10.0 ** abs(decimals)
            x = self * scale if decimals > 0 else self / scale
            r = x._round(0)
            return r / scale if decimals > 0 else r * scale
        t = self.trunc()
        f = (self - t).abs()   # exact; NaN for inf (then t is already the answer)
        up = (f > 0.5).logical_or((f == 0.5).logical_and(t.fmod(2.0) != 0))
        return up.where(t + (self < 0).where(-1.0, 1.0), t)

    def sign(self):
        """-1, 0 or 1 (NaN gives 0, like torch.sign); bool stays bool."""
        if self.dtype == DType.bool:
            return self
        return (self > 0).where(self._const(1), (self < 0).where(self._const(-1), self._const(0)))

    # --- transcendental composites ------------------------------------------------------------
    def tan(self):
        return self._float()._tan()

    @half_in_f32
    def _tan(self):
        return self.sin() / self.cos()

    def atan(self):
        return self._float()._atan()

    @half_in_f32
    def _atan(self):
        a = self.abs()
        big, mid = a > TAN_3PI_8, a > TAN_PI_8
        # atan(a) = pi/2 - atan(1/a) = pi/4 + atan((a-1)/(a+1)): reduce to |t| <= tan(pi/8)
        t = big.where(-a.reciprocal(), mid.where((a - 1) / (a + 1), a))
        base = big.where(math.pi / 2, mid.where(math.pi / 4, 0.0))
        z = t * t
        poly = ATAN_P[-1]
        for c in reversed(ATAN_P[:-1]):
            poly = poly * z + c
        r = base + (t + t * z * poly)
        return (self == 0).where(self, (self < 0).where(-r, r))   # keeps -0.0; NaN stays NaN

    def atan2(self, other):
        """The angle of (other, self) in [-pi, pi], like torch.atan2(self, other): signed zeros and
        infinities as in C (atan2(+-0, -0) = +-pi, atan2(+-inf, +-inf) = +-pi/4 or +-3pi/4)."""
        y, x = self._coerce(other, "atan2")
        y, x = y._float(), x._float()
        if y.dtype != x.dtype:
            y, x = y.astype(DType.f32), x.astype(DType.f32)
        return y._atan2(x)

    @half_in_f32
    def _atan2(self, x):
        y = self
        neg_y = (y < 0).logical_or((y == 0).logical_and(y.reciprocal() < 0))   # -0.0 included
        neg_x = (x < 0).logical_or((x == 0).logical_and(x.reciprocal() < 0))
        # both tiny (subnormal): scaled up by 2^64 first, as 1 / x overflows (see _hypot)
        tiny = y.abs().maximum(x.abs()) < 2.0 ** -64
        y, x = tiny.where(y * 2.0 ** 64, y), tiny.where(x * 2.0 ** 64, x)
        both_inf = y.isinf().logical_and(x.isinf())
        # |y / x| in [0, inf]; both infinite: 1, then the quadrant's pi/4 below
        q = both_inf.where(1.0, (y / x).abs())
        a = (y == 0).logical_and(x == 0).where(0.0, q.atan())    # 0 / 0: the angle is 0 or pi
        a = neg_x.where(math.pi - a, a)
        return neg_y.where(-a, a)

    def hypot(self, other):
        """sqrt(self^2 + other^2) without overflow or underflow in the squares, like torch.hypot:
        inf if either is infinite (NaN in the other too), NaN if either is NaN otherwise."""
        a, b = self._coerce(other, "hypot")
        a, b = a._float(), b._float()
        if a.dtype != b.dtype:
            a, b = a.astype(DType.f32), b.astype(DType.f32)
        return a._hypot(b)

    @half_in_f32
    def _hypot(self, other):
        a, b = self.abs(), other.abs()
        # a tiny (subnormal) max is scaled up by 2^64 first: a division is a product with the
        # reciprocal, and 1 / 1e-45 overflows
        tiny = a.maximum(b) < 2.0 ** -64
        a, b = tiny.where(a * 2.0 ** 64, a), tiny.where(b * 2.0 ** 64, b)
        big, small = a.maximum(b), a.minimum(b)
        r = (big == 0).logical_or(big.isinf()).where(0.0, small / big)
        h = big * (r * r + 1).sqrt()
        h = tiny.where(h * 2.0 ** -64, h)
        return a.isinf().logical_or(b.isinf()).where(math.inf, h)

    def nan_to_num(self, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None):
        """NaN, +inf and -inf replaced by `nan`, `posinf` and `neginf` (default: the dtype's
        largest and lowest finite values), like torch.nan_to_num; integers unchanged."""
        if not self.dtype.is_float:
            return self
        from ir.numerics import MAX_FINITE
        top = MAX_FINITE[self.dtype]
        hi = self._const(top if posinf is None else posinf)
        lo = self._const(-top if neginf is None else neginf)
        out = (self == math.inf).where(hi, (self == -math.inf).where(lo, self))
        return self.isnan().where(self._const(nan), out)

    # --- the gamma function's logarithm and derivative ---------------------------------------------
    def lgamma(self):
        """log |Gamma(x)|, like torch.lgamma (inf at 0, the negative integers and +-inf)."""
        return self._float()._lgamma()

    @half_in_f32
    def _lgamma(self):
        # x >= 0.5: shifted to z = x + 8 where x < 8, less log(x (x+1) ... (x+7)), then
        # Stirling's series to 1/z^7 (error below 1e-11 at z >= 8); below 0.5 the reflection
        # log(pi / |sin(pi x)|) - lgamma(1 - x), with sin(pi x) taken of x less its nearest
        # integer (exact), so large negative x keep their accuracy
        reflect, x, z, shift, r = self._gamma_parts()
        prod = x
        for k in range(1, 8):
            prod = prod * (x + k)
        zi = 1 / z
        zi2 = zi * zi
        series = zi * (1 / 12 - zi2 * (1 / 360 - zi2 * (1 / 1260 - zi2 / 1680)))
        lg = (z - 0.5) * z.log() - z + 0.5 * math.log(2 * math.pi) + series - shift.where(prod.log(), 0.0)
        out = reflect.where((math.pi / (r * math.pi).sin().abs()).log() - lg, lg)
        return self.isinf().where(math.inf, out)

    def digamma(self):
        """psi(x) = d/dx log Gamma(x), like torch.digamma: -inf at +0, inf at -0, NaN at the
        negative integers and -inf."""
        return self._float()._digamma()

    @half_in_f32
    def _digamma(self):
        # x >= 0.5: shifted to z = x + 8 where x < 8, less the sum of 1 / (x + k), then the
        # asymptotic series log z - 1/(2z) - 1/(12z^2) + 1/(120z^4) - 1/(252z^6) + 1/(240z^8);
        # below 0.5 the reflection psi(1 - x) - pi / tan(pi x), tan of x less its nearest integer
        reflect, x, z, shift, r = self._gamma_parts()
        acc = 1 / x
        for k in range(1, 8):
            acc = acc + 1 / (x + k)
        zi = 1 / z
        zi2 = zi * zi
        psi = z.log() - 0.5 * zi - zi2 * (1 / 12 - zi2 * (1 / 120 - zi2 * (1 / 252 - zi2 / 240)))
        psi = psi - shift.where(acc, 0.0)
        out = reflect.where(psi - math.pi / (r * math.pi).tan(), psi)
        pole = (self < 0) & (r == 0)                      # the negative integers (and -inf: r is NaN)
        out = pole.where(math.nan, out)
        return (self == 0).where((1 / self > 0).where(-math.inf, math.inf), out)

    def _gamma_parts(self):
        """What lgamma and digamma share: where the reflection applies (x < 0.5), the argument
        the series sees before its shift (1 - x there), that shifted to z >= 8 (x + 8 where it
        is below 8), where it was, and x less its nearest integer (for sin / tan of pi x)."""
        reflect = self < 0.5
        x = reflect.where(1 - self, self)
        shift = x < 8
        return reflect, x, shift.where(x + 8, x), shift, self - self.round()

    # --- hyperbolic functions and logs ----------------------------------------------------------
    def sinh(self):
        return self._float()._sinh()

    @half_in_f32
    def _sinh(self):
        # (expm1(x) - expm1(-x)) / 2 keeps x's relative accuracy near 0; far out, the half
        # exp(|x| / 2) / 2 * exp(|x| / 2) (exact halving) overflows only where sinh does (exp(x)
        # does at 88.7, sinh at 89.4; exp(|x| - ln 2) would lose |x| ulps to the shift's rounding)
        a = self.abs()
        half = (a * 0.5).exp()
        far = half * 0.5 * half
        near = (self.expm1() - (-self).expm1()) * 0.5
        return (a > 20).where((self < 0).where(-far, far), near)

    def cosh(self):
        return self._float()._cosh()

    @half_in_f32
    def _cosh(self):
        a = self.abs()
        half = (a * 0.5).exp()       # (as in _sinh)
        return (a > 20).where(half * 0.5 * half, (a.exp() + (-a).exp()) * 0.5)

    def asinh(self):
        return self._float()._asinh()

    @half_in_f32
    def _asinh(self):
        # sign(x) log1p(|x| + x^2 / (1 + sqrt(1 + x^2))): accurate near 0; far out log(2|x|)
        a = self.abs()
        near = (a + a * a / ((a * a + 1).sqrt() + 1)).log1p()
        r = (a > 2.0 ** 28).where(a.log() + math.log(2.0), near)
        return (self < 0).where(-r, r)

    def acosh(self):
        return self._float()._acosh()

    @half_in_f32
    def _acosh(self):
        # log1p(t + sqrt(2t + t^2)), t = x - 1 (exact near 1); beyond 2^28 log(2x); below 1 NaN
        t = self - 1
        r = (self > 2.0 ** 28).where(self.log() + math.log(2.0), (t + (t * 2 + t * t).sqrt()).log1p())
        return (self < 1).where(math.nan, r)

    def asin(self):
        return self._float()._asin()

    @half_in_f32
    def _asin(self):
        # atan2(x, sqrt((1 - x)(1 + x))): the factored 1 - x^2 is exact near +-1; |x| > 1 NaN
        return self.atan2(((1 - self) * (1 + self)).sqrt())

    def acos(self):
        return self._float()._acos()

    @half_in_f32
    def _acos(self):
        return ((1 - self) * (1 + self)).sqrt().atan2(self)

    def atanh(self):
        return self._float()._atanh()

    @half_in_f32
    def _atanh(self):
        # log1p(2x / (1 - x)) / 2: accurate near 0; +-1 gives +-inf, |x| > 1 NaN
        return (self * 2 / (1 - self)).log1p() * 0.5

    def log10(self):
        return self._float()._log10()

    @half_in_f32
    def _log10(self):
        return self.log() * (1.0 / math.log(10.0))

    def logaddexp(self, other):
        """log(exp(self) + exp(other)) without overflow, like torch.logaddexp."""
        a, b = self._coerce(other, "logaddexp")
        a, b = a._float(), b._float()
        if a.dtype != b.dtype:
            a, b = a.astype(DType.f32), b.astype(DType.f32)
        return a._logaddexp(b)

    @half_in_f32
    def _logaddexp(self, other):
        m = self.maximum(other)
        r = m + (-(self - other).abs()).exp().log1p()
        return (self == other).where(self + math.log(2.0), r)   # equal infinities: themselves

    def xlogy(self, other):
        """self * log(other), 0 where self is 0 (unless other is NaN), like torch.xlogy."""
        x, y = self._coerce(other, "xlogy")
        x, y = x._float(), y._float()
        return (x == 0).logical_and(y.isnan().logical_not()).where(0.0, x * y.log())

    def lerp(self, end, weight):
        """self + weight * (end - self), from the nearer end (torch.lerp's form: exact at both)."""
        s, e = self._coerce(end, "lerp")
        d = e - s
        w = weight if not isinstance(weight, (int, float)) else s._const(float(weight))
        return (w < 0.5).where(s + w * d, e - d * (1 - w))

    def outer(self, other):
        """The outer product of two 1-d tensors (torch.outer)."""
        if self.ndim != 1 or getattr(other, "ndim", None) != 1:
            raise ShapeError(f"outer takes two 1-d tensors, got shapes {self.shape} and "
                             f"{getattr(other, 'shape', type(other).__name__)}", "outer")
        return self.unsqueeze(1) * other.unsqueeze(0)

    def dot(self, other):
        """The inner product of two 1-d tensors of one length (torch.dot)."""
        if self.ndim != 1 or getattr(other, "ndim", None) != 1 or self.shape != other.shape:
            raise ShapeError(f"dot takes two 1-d tensors of one length, got shapes {self.shape} and "
                             f"{getattr(other, 'shape', type(other).__name__)}", "dot")
        return (self * other).sum()

    def clamp_min(self, lo):
        return self.clamp(lo, None)

    def clamp_max(self, hi):
        return self.clamp(None, hi)

    def log1p(self):
        return self._float()._log1p()

    @half_in_f32
    def _log1p(self):
        # log(u) * x / (u - 1) with u = 1 + x cancels u's rounding error (exact near 0)
        u = self + 1
        r = (u == 1).where(self, u.log() * (self / (u - 1)))
        return (self == math.inf).where(math.inf, r)

    def expm1(self):
        return self._float()._expm1()

    @half_in_f32
    def _expm1(self):
        # (u - 1) * x / log(u) with u = exp(x), exact near 0 (Kahan)
        u = self.exp()
        um1 = u - 1
        r = (u == 1).where(self, (um1 == -1).where(-1.0, um1 * (self / u.log())))
        return (u == math.inf).where(math.inf, r)

    # --- activations (torch.nn.functional names) -------------------------------------------------
    def softplus(self, beta: float = 1.0, threshold: float = 20.0):
        return self._float()._softplus(float(beta), float(threshold))

    @half_in_f32
    def _softplus(self, beta, threshold):
        bx = self * beta
        return (bx > threshold).where(self, (bx.exp().log1p()) * (1.0 / beta))

    def leaky_relu(self, negative_slope: float = 0.01):
        return (self > 0).where(self, self * negative_slope)

    def elu(self, alpha: float = 1.0):
        return self._float()._elu(float(alpha))

    @half_in_f32
    def _elu(self, alpha):
        return (self > 0).where(self, self.expm1() * alpha)

    def selu(self):
        return self.elu(1.6732632423543772) * 1.0507009873554805

    def hardtanh(self, min_val: float = -1.0, max_val: float = 1.0):
        return self.clamp(min_val, max_val)

    def relu6(self):
        return self.clamp(0.0, 6.0)

    def hardsigmoid(self):
        return self._float()._hardsigmoid()

    @half_in_f32
    def _hardsigmoid(self):
        return (self + 3).clamp(0.0, 6.0) / 6

    def hardswish(self):
        return self._float()._hardswish()

    @half_in_f32
    def _hardswish(self):
        return self * (self + 3).clamp(0.0, 6.0) / 6

    def mish(self):
        return self._float()._mish()

    @half_in_f32
    def _mish(self):
        return self * self.softplus().tanh()

    # --- floor division ---------------------------------------------------------------------------
    def __floordiv__(self, o): return self._floordiv(o, False)
    def __rfloordiv__(self, o): return self._floordiv(o, True)

    def floor_divide(self, o):
        return self._floordiv(o, False)

    def _floordiv(self, o, reverse: bool):
        a, b = self._coerce(o, "floordiv")
        if reverse:
            a, b = b, a
        if a.dtype == DType.bool:
            raise DTypeError("floor division is not defined on bool", "floordiv")
        if a.dtype in SMALL_INTS:   # exact in i32; -128 // -1 wraps back to -128, as in torch
            return a.astype(DType.i32)._int_floordiv(b.astype(DType.i32)).astype(a.dtype)
        return a._int_floordiv(b) if a.dtype.is_int else a._float_floordiv(b)

    @half_in_f32
    def _float_floordiv(self, b):
        # Python's float floor division (which torch follows): from fmod, with the quotient
        # rounded to the nearest integer to undo the division's rounding
        a = self
        m = a.fmod(b)
        div = (a - m) / b
        div = (m != 0).logical_and((b < 0).logical_xor(m < 0)).where(div - 1, div)
        fl = div.floor()
        fl = (div - fl > 0.5).where(fl + 1, fl)
        q = a / b
        out = (div == 0).where(q * 0.0, fl)   # a zero quotient takes a / b's sign
        return (b == 0).where(q, out)

    def _int_floordiv(self, b):
        # exact i32 (i64) floor division: d = a - fmod(a, b) = b * trunc(a / b) cannot overflow;
        # its quotient is estimated in f32 (f64) and corrected once from the (small, exact) residual
        a = self
        wide = DType.f64 if a.dtype == DType.i64 else DType.f32
        bs = (b == 0).logical_or(b == -1).where(1, b)   # both give remainder 0; keeps the estimate finite
        r = a.fmod(bs)
        d = a - r
        fb = bs.astype(wide)
        q0 = _round_to_int(d.astype(wide) * fb.reciprocal(), a.dtype)
        q1 = q0 + _round_to_int((d - q0 * bs).astype(wide) * fb.reciprocal(), a.dtype)
        q1 = (b == -1).where(-a, q1)   # fmod(a, -1) is computed as fmod(a, 1): same value
        q = (r != 0).logical_and((r < 0).logical_xor(b < 0)).where(q1 - 1, q1)
        return (b == 0).where(0, q)    # numpy's value; torch raises (a runtime check Saturn lacks)

    # --- bitwise ops: bool is logical, i32 is exact bit arithmetic (i8 and u8 through i32) -----------
    def _bitwise_operands(self, o, op: str):
        a, b = self._coerce(o, op)
        if a.dtype.is_float or a.dtype == DType.i64:
            raise DTypeError(f"{op} needs bool, u8, i8 or i32 operands, got {a.dtype.value}"
                             + (" (cast i64 to i32 where the values fit)" if a.dtype == DType.i64 else ""), op)
        return a, b

    def __and__(self, o):
        a, b = self._bitwise_operands(o, "bitwise_and")
        return a.logical_and(b) if a.dtype == DType.bool else _int_bits(_i32_and, a, b)

    def __or__(self, o):
        a, b = self._bitwise_operands(o, "bitwise_or")
        return a.logical_or(b) if a.dtype == DType.bool else _int_bits(lambda x, y: x + y - _i32_and(x, y), a, b)

    def __xor__(self, o):
        a, b = self._bitwise_operands(o, "bitwise_xor")
        return a.logical_xor(b) if a.dtype == DType.bool else \
            _int_bits(lambda x, y: x + y - _i32_and(x, y) * 2, a, b)

    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__

    def __invert__(self):
        if self.dtype == DType.bool:
            return self.logical_not()
        if not self.dtype.is_int:
            raise DTypeError(f"~ needs bool or integer operands, got {self.dtype.value}", "bitwise_not")
        return -1 - self   # exact in wrapping arithmetic

    bitwise_and, bitwise_or, bitwise_xor, bitwise_not = __and__, __or__, __xor__, __invert__

    def _shift_amount(self, k, op: str) -> int:
        k = as_scalar(k)
        bits = 8 * self.dtype.itemsize
        if not self.dtype.is_int or not is_int(k) or not 0 <= k < bits:
            raise DTypeError(f"{op} takes an integer tensor and a Python int shift in [0, bits), got "
                             f"{self.dtype.value} and {k!r} (tensor shift amounts are not supported)", op)
        return int(k)

    def __lshift__(self, k):
        return self * self.dtype.wrap(1 << self._shift_amount(k, "lshift"))

    def __rshift__(self, k):
        k = self._shift_amount(k, "rshift")   # arithmetic shift (u8: logical): floor division by 2**k
        if k == 8 * self.dtype.itemsize - 1 and self.dtype.is_signed:
            return (self < 0).where(-1, 0)
        return self // (1 << k) if k else self


def _wrap_i32(v: int) -> int:
    return (v + 2 ** 31) % 2 ** 32 - 2 ** 31


def _round_to_int(x, dtype: DType):
    """An f32 (f64) tensor to the nearest i32 (i64), half away from zero; i32: clamped to its range."""
    if dtype == DType.i32:
        x = x.clamp(float(I32_MIN), LARGEST_F32_BELOW_2_31)
    return (x + (x < 0).where(-0.5, 0.5)).astype(dtype)


def _int_bits(op, a, b):
    """A bitwise op on i32, i8 or u8 operands: the narrow ones widened to i32 (sign- or
    zero-extended, so the low bits are the same) and the result cast back."""
    if a.dtype == DType.i32:
        return op(a, b)
    return op(a.astype(DType.i32), b.astype(DType.i32)).astype(a.dtype)


def _powers_of_two(like):
    """An i32 vector [1, 2, 4, ..., 2**30] built from one constant by doubling with cat."""
    from compiler.tensor import Tensor, cat
    v = Tensor.full((1,), 1, DType.i32)
    while v.shape[0] < 31:
        v = cat([v, v * _wrap_i32(1 << v.shape[0])])
    return v[:31]


def _i32_and(a, b):
    """a & b on i32: bit k of a non-negative v is fmod(v, 2**(k+1)) >= 2**k (for k = 30 the
    divisor wraps to INT_MIN, and fmod(v, INT_MIN) = v); the sign bit is v < 0."""
    p = _powers_of_two(a)
    two_p = p * 2   # the last entry wraps to INT_MIN

    def low_bits(v):   # v without its sign bit (v + 2**31 for negative v), on a new last axis
        low = (v < 0).where(v + I32_MIN, v)
        x = low.unsqueeze(-1).expand(low.shape + (31,))
        return x.fmod(two_p) >= p

    both = low_bits(a).logical_and(low_bits(b))
    low = both.where(p, 0).sum(-1)
    return low + (a < 0).logical_and(b < 0).where(I32_MIN, 0)
