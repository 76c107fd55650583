"""exp2 and log2 in plain LLVM IR (polynomials + exponent bit tricks), so loops that call them
still vectorize; libm calls would be scalarized. Both are accurate to about 1-2 ulp in f32."""
from __future__ import annotations

import math

from llvmlite import ir

F32, I32 = ir.FloatType(), ir.IntType(32)

# 2**f on |f| <= 0.5: degree 6, fitted in relative error at Chebyshev nodes (max relative error
# 1.9e-9, below f32 rounding; the degree-7 Taylor series it replaces was within 1e-8 and one
# multiply-add longer)
EXP2_COEFFS = [1.0000000005920207, 0.6931472056005101, 0.24022646608714063, 0.055503289975174924,
               0.009618519534348455, 0.001339986036319861, 0.00015337576833985325]
# ln(m) = 2 atanh(s), s = (m-1)/(m+1), |s| <= 0.172: 2 * s^(2k+1) / (2k+1), k = 0..5
LOG_COEFFS = [2.0 / (2 * k + 1) for k in range(6)]


def _fn(module: ir.Module, name: str) -> tuple[ir.Function, ir.IRBuilder]:
    fn = ir.Function(module, ir.FunctionType(F32, [F32]), name)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    fn.attributes.add("nounwind")
    return fn, ir.IRBuilder(fn.append_basic_block("entry"))


def _poly(b: ir.IRBuilder, x, coeffs):
    # Horner; `contract` lets each step become one FMA (the order stays fixed)
    acc = ir.Constant(F32, coeffs[-1])
    for c in reversed(coeffs[:-1]):
        acc = b.fadd(b.fmul(acc, x, flags=("contract",)), ir.Constant(F32, c), flags=("contract",))
    return acc


def _intrinsic(module: ir.Module, name: str, ty=F32) -> ir.Function:
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    return ir.Function(module, ir.FunctionType(ty, [ty]), name)


def define_exp2(module: ir.Module) -> ir.Function:
    if "saturn.exp2" in module.globals:
        return module.globals["saturn.exp2"]
    fn, b = _fn(module, "saturn.exp2")
    x = fn.args[0]
    rint = _intrinsic(module, "llvm.rint.f32")
    # clamp to [-200, 200]: beyond it the result is 0 or inf anyway. Ordered compares keep a
    # NaN: it passes the clamp and the polynomial as NaN. Its integer part is taken as 0: fptosi
    # of NaN is poison, which lets the optimizer fold the whole result to any value
    xc = b.select(b.fcmp_ordered("<", x, ir.Constant(F32, -200.0)), ir.Constant(F32, -200.0), x)
    xc = b.select(b.fcmp_ordered(">", xc, ir.Constant(F32, 200.0)), ir.Constant(F32, 200.0), xc)
    n = b.select(b.fcmp_unordered("uno", xc, xc), ir.Constant(F32, 0.0), b.call(rint, [xc]))
    f = b.fsub(xc, n)
    p = _poly(b, f, EXP2_COEFFS)
    ni = b.fptosi(n, I32)
    # 2**n as two factors so each stays a normal float for n in [-200, 200]
    n1 = b.ashr(ni, ir.Constant(I32, 1))
    n2 = b.sub(ni, n1)
    s1 = b.bitcast(b.shl(b.add(n1, ir.Constant(I32, 127)), ir.Constant(I32, 23)), F32)
    s2 = b.bitcast(b.shl(b.add(n2, ir.Constant(I32, 127)), ir.Constant(I32, 23)), F32)
    b.ret(b.fmul(b.fmul(p, s1), s2))
    return fn


def define_log2(module: ir.Module) -> ir.Function:
    if "saturn.log2" in module.globals:
        return module.globals["saturn.log2"]
    fn, b = _fn(module, "saturn.log2")
    x = fn.args[0]
    # scale denormals into the normal range first
    tiny = b.fcmp_ordered("<", x, ir.Constant(F32, 1.1754944e-38))
    xs = b.select(tiny, b.fmul(x, ir.Constant(F32, 8388608.0)), x)
    bias = b.select(tiny, ir.Constant(I32, 23), ir.Constant(I32, 0))
    bits = b.bitcast(xs, I32)
    # m in [sqrt(1/2), sqrt(2)): take the mantissa relative to 0x3f3504f3 (= sqrt(1/2))
    adj = b.sub(bits, ir.Constant(I32, 0x3F3504F3))
    e = b.ashr(adj, ir.Constant(I32, 23))
    mbits = b.sub(bits, b.shl(e, ir.Constant(I32, 23)))
    m = b.bitcast(mbits, F32)
    s = b.fdiv(b.fsub(m, ir.Constant(F32, 1.0)), b.fadd(m, ir.Constant(F32, 1.0)))
    s2 = b.fmul(s, s)
    ln_m = b.fmul(s, _poly(b, s2, LOG_COEFFS))
    ef = b.sitofp(b.sub(e, bias), F32)
    r = b.fadd(ef, b.fmul(ln_m, ir.Constant(F32, 1.0 / math.log(2))))
    # special cases: x == 0 -> -inf, x < 0 or NaN -> NaN, x == inf -> inf
    r = b.select(b.fcmp_ordered("==", x, ir.Constant(F32, 0.0)), ir.Constant(F32, float("-inf")), r)
    r = b.select(b.fcmp_ordered("==", x, ir.Constant(F32, float("inf"))), x, r)
    r = b.select(b.fcmp_unordered("uno", x, x), x, r)
    r = b.select(b.fcmp_ordered("<", x, ir.Constant(F32, 0.0)), ir.Constant(F32, float("nan")), r)
    b.ret(r)
    return fn
