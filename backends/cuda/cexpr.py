"""Render primitive-IR expressions to CUDA C, with the interpreter's exact semantics.

Values are held in their compute type (float for f32/f16/bf16, double for f64, long long, int,
signed char, unsigned char for i64, i32, i8, u8, bool for bool);
half types round to storage after every op (as `ir.interpreter` does). Views become index
arithmetic on the source: a ShapeTracker's views are applied last to first, masks become a
validity test that selects the fill value.

`Emitter.value(node, idx)` returns the name of a C variable holding `node` at the multi-index
`idx` (a tuple of C integer expressions), emitting the statements that compute it. Nodes held
in buffers are loaded; `hooks` lets a template supply a node's value itself (an accumulator,
a per-row reduction result, a register-cached element).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ir.dtypes import DType
from ir.kernel import Div, Lin, Var, as_lin, lin_range
from ir.interpreter import typed_fill
from ir.node import Node
from ir.ops import Op
from ir.view import ShapeTracker, contiguous_strides

# the types with a C type of their own; f16 and bf16 compute in float
_C_TYPES = {DType.f32: "float", DType.f64: "double", DType.i32: "int", DType.i64: "long long",
            DType.i8: "signed char", DType.u8: "unsigned char", DType.bool: "bool"}
C_STORAGE = {**_C_TYPES, DType.f16: "__half", DType.bf16: "__nv_bfloat16"}
C_COMPUTE = {**_C_TYPES, DType.f16: "float", DType.bf16: "float"}
# a float storage type's conversion to float (the templates' half, bfloat16 and float values)
TO_FLOAT = {"__half": "__half2float", "__nv_bfloat16": "__bfloat162float", "float": ""}


def c_literal(value, dtype: DType) -> str:
    """An exact C literal of `value` stored as `dtype`, in its compute type."""
    if dtype == DType.bool:
        return "true" if value else "false"
    if dtype.is_int:
        v = dtype.wrap(value)
        if dtype == DType.i64:   # -2**63 is no literal: its negation overflows
            return "(-9223372036854775807LL - 1)" if v == dtype.lowest else f"({v}LL)"
        return f"({v})" if dtype == DType.i32 else f"(({C_COMPUTE[dtype]}){v})"
    if dtype == DType.f64:
        v = float(value)
        if math.isnan(v) or math.isinf(v):   # float's NaN and infinities convert exactly
            return f"((double){c_literal(v, DType.f32)})"
        return f"({v.hex()})"
    v = float(np.asarray(value, dtype=dtype.np).astype(np.float32))
    if math.isnan(v):
        return "__int_as_float(0x7fc00000)"
    if math.isinf(v):
        return "__int_as_float(0x7f800000)" if v > 0 else "__int_as_float(0xff800000)"
    return f"{v.hex()}f"


def reduce_identity(op: Op, dtype: DType) -> str:
    """The starting value of a SUM or MAX accumulator."""
    if op == Op.SUM:
        return "0.f" if dtype.is_float else "0"
    return "-__int_as_float(0x7f800000)" if dtype.is_float else c_literal(dtype.lowest, dtype)


def reduce_combine(op: Op, acc: str, v: str, dtype: DType | None = None) -> str:
    """acc combined with v (C variables): a sum, or numpy's NaN-propagating max (the prelude's
    max_nan for float and int; written out for `dtype` f64 and the other integers)."""
    if op == Op.SUM:
        if dtype in (DType.i8, DType.u8, DType.i64):   # wrapping, as the interpreter's
            return Emitter.math(Op.ADD, [acc, v], dtype)
        return f"{acc} + {v}"
    if dtype == DType.f64:
        return f"(({acc} != {acc}) ? {acc} : (({v} != {v} || {v} > {acc}) ? {v} : {acc}))"
    if dtype is not None and dtype.is_int and dtype != DType.i32:
        return f"(({v} > {acc}) ? {v} : {acc})"
    return f"max_nan({acc}, {v})"


def round_to(expr: str, dtype: DType) -> str:
    """Round a float compute value to `dtype`'s precision (identity for f32)."""
    if dtype == DType.f16:
        return f"__half2float(__float2half_rn({expr}))"
    if dtype == DType.bf16:
        return f"__bfloat162float(__float2bfloat16_rn({expr}))"
    return expr


def load_expr(buf: str, offset: str, dtype: DType) -> str:
    """Read element `offset` of buffer `buf` (storage type) as the compute type."""
    if dtype == DType.f16:
        return f"__half2float({buf}[{offset}])"
    if dtype == DType.bf16:
        return f"__bfloat162float({buf}[{offset}])"
    return f"{buf}[{offset}]"


def store_value(expr: str, dtype: DType) -> str:
    """Convert a compute value to its storage type for a store."""
    if dtype == DType.f16:
        return f"__float2half_rn({expr})"
    if dtype == DType.bf16:
        return f"__float2bfloat16_rn({expr})"
    return expr


def unflatten(flat: str, shape: tuple[int, ...]) -> tuple[str, ...]:
    """C expressions for the multi-index of the contiguous flat index `flat` in `shape`."""
    out = []
    for i, s in enumerate(shape):
        if s == 1:
            out.append("0")
            continue
        inner = math.prod(shape[i + 1:])
        e = flat if inner == 1 else f"({flat} / {inner})"
        if math.prod(shape[:i]) > 1:   # a leading axis needs no modulo
            e = f"({e} % {s})"
        out.append(e)
    return tuple(out)


INT_MAX = 2**31 - 1


def flat_offset(idx: tuple[str, ...], strides: tuple[int, ...], offset: int = 0, extent: int = 0) -> str:
    """sum(idx * strides) + offset. `extent`: the size of the layout indexed; from 2^31 the sum
    is formed in 64 bits (index expressions are 32-bit where the kernel's own range fits:
    a view of a broadcast product's 2^32-element layout overflowed into wild addresses)."""
    wide = extent > INT_MAX
    terms = [(f"(long long){i} * {st}" if wide else f"{i} * {st}") if st != 1 else (f"(long long){i}" if wide else i)
             for i, st in zip(idx, strides) if st != 0 and i != "0"]
    if offset:
        terms.append(str(offset))
    return "(" + " + ".join(terms) + ")" if terms else "0"


def c_index(e: Lin) -> str:
    """An index expression (ir.kernel.Lin) as C: in 32 bits where every partial sum fits (a
    64-bit division by a constant costs several times the instructions), else each term cast
    to 64 bits. Div / Mod operands are non-negative over their ranges (ir/kernel.py), so C's
    truncating `/` and `%` compute them."""
    wide = _magnitude(e) > INT_MAX
    parts = []
    for atom, c in e.terms:
        a = _c_atom(atom)
        if wide:
            a = f"(long long){a}"
        parts.append(a if c == 1 else f"{a} * {c}")
    if e.const or not parts:
        parts.append(f"{e.const}LL" if wide and not parts else str(e.const))
    return parts[0] if len(parts) == 1 else "(" + " + ".join(parts) + ")"


def _magnitude(e: Lin) -> int:
    """A bound on |any partial sum| of `e` as rendered."""
    total = abs(e.const)
    for atom, c in e.terms:
        lo, hi = lin_range(as_lin(atom))
        total += abs(c) * max(abs(lo), abs(hi))
    return total


def _c_atom(a) -> str:
    if isinstance(a, Var):
        return a.name if a.name.isidentifier() else f"({a.name})"
    arg = a.arg
    cast = "(long long)" if _magnitude(arg) > INT_MAX else "(int)"
    op = "/" if isinstance(a, Div) else "%"
    return f"({cast}{c_index(arg)} {op} {a.divisor})"


def _index_vars(idx: tuple[str, ...], shape: tuple[int, ...]) -> tuple[Lin, ...]:
    """C index expressions (each within its axis of `shape`) as index variables."""
    out = []
    for i, s in zip(idx, shape):
        try:
            out.append(Lin((), int(i)))
        except ValueError:
            out.append(as_lin(Var(i, s)) if s > 1 else Lin())
    return tuple(out)


def _bound_tests(valid) -> list[str]:
    tests = []
    for b in valid:
        lo, hi = lin_range(b.expr)
        e = c_index(b.expr)
        if lo < b.lo:
            tests.append(f"({e} >= {b.lo})")
        if hi >= b.hi:
            tests.append(f"({e} < {b.hi})")
    return tests


def tracker_offset(st: ShapeTracker, idx: tuple[str, ...]):
    """(flat offset into the source's row-major layout as a Lin, validity tests in C) for
    output index idx (each index within the tracker's shape); None when no index is valid."""
    from ir.lower import view_index
    if any(0 in v.shape for v in st.views):
        return None         # an empty layout: nothing is ever read
    got = view_index(st, _index_vars(idx, st.views[-1].shape))
    if got is None:
        return None
    return got[0], _bound_tests(dict.fromkeys(got[1]))


def apply_tracker(st: ShapeTracker, idx: tuple[str, ...]) -> tuple[str, list[str]]:
    """(flat offset into the source's contiguous layout, validity tests) for output index idx
    (each index within the tracker's shape); ["false"] when no index is valid."""
    got = tracker_offset(st, idx)
    if got is None:
        return "0", ["false"]
    return c_index(got[0]), got[1]


class Emitter:
    """Emits C statements computing node values; common sub-expressions are shared per scope."""

    def __init__(self, buffers: dict[Node, str], hooks: dict[Node, Callable[[tuple[str, ...]], str]] | None = None,
                 indent: str = "    ", prefix: str = "v"):
        self.buffers = buffers          # node -> C name of the buffer holding it (contiguous, row-major)
        self.hooks = dict(hooks or {})
        self.lines: list[str] = []
        self.indent = indent
        self.prefix = prefix
        self._n = 0
        self._memo: list[dict] = [{}]

    # --- statement helpers ----------------------------------------------------------------
    def emit(self, line: str) -> None:
        self.lines.append(self.indent + line)

    def tmp(self, ctype: str, expr: str) -> str:
        name = f"{self.prefix}{self._n}"
        self._n += 1
        self.emit(f"{ctype} {name} = {expr};")
        return name

    def push(self, extra_indent: str = "    ") -> None:
        self._memo.append(dict(self._memo[-1]))
        self.indent += extra_indent

    def pop(self, extra_indent: str = "    ") -> None:
        self._memo.pop()
        self.indent = self.indent[: len(self.indent) - len(extra_indent)]

    def code(self) -> str:
        return "\n".join(self.lines)

    # --- values ---------------------------------------------------------------------------
    def value(self, n: Node, idx: tuple[str, ...]) -> str:
        key = (n, idx)
        for memo in reversed(self._memo):
            if key in memo:
                return memo[key]
            break
        name = self._value(n, idx)
        self._memo[-1][key] = name
        return name

    def _value(self, n: Node, idx: tuple[str, ...]) -> str:
        ct = C_COMPUTE[n.dtype]
        if n in self.hooks:
            return self.hooks[n](idx)
        if n in self.buffers:
            off = flat_offset(idx, contiguous_strides(n.shape), 0, n.numel)
            return self.tmp(ct, load_expr(self.buffers[n], off, n.dtype))
        op = n.op
        if op == Op.CONST:
            return c_literal(n.arg, n.dtype)
        if op == Op.INPUT:
            raise KeyError(f"input {n.arg} has no buffer")
        if op == Op.VIEW:
            return self._view(n, idx)
        if op == Op.CONTIGUOUS:
            return self.value(n.srcs[0], idx)
        if op in (Op.SUM, Op.MAX):
            raise ValueError(f"a {op.value} reduction must be materialized or supplied by a hook")
        if op == Op.CAST:
            return self.tmp(ct, self._cast(self.value(n.srcs[0], idx), n.srcs[0].dtype, n.dtype))
        if op == Op.WHERE:
            c, a, b = (self.value(s, idx) for s in n.srcs)
            return self.tmp(ct, f"({c} ? {a} : {b})")
        if op == Op.CMPLT:
            a, b = (self.value(s, idx) for s in n.srcs)
            return self.tmp("bool", f"({a} < {b})")
        xs = [self.value(s, idx) for s in n.srcs]
        return self.tmp(ct, self.math(op, xs, n.dtype))

    @staticmethod
    def math(op: Op, xs: list[str], dtype: DType) -> str:
        """The C expression of an arithmetic op on compute values, rounded to `dtype`."""
        if dtype == DType.i32:
            e = {Op.ADD: "({0} + {1})", Op.MUL: "({0} * {1})", Op.MOD: "(({1} == 0 || {1} == -1) ? 0 : {0} % {1})"}[op]
            return e.format(*xs)
        if dtype == DType.i64:   # add and mul in unsigned arithmetic: they wrap, without undefined overflow
            e = {Op.ADD: "((long long)((unsigned long long){0} + (unsigned long long){1}))",
                 Op.MUL: "((long long)((unsigned long long){0} * (unsigned long long){1}))",
                 Op.MOD: "(({1} == 0LL || {1} == -1LL) ? 0LL : {0} % {1})"}[op]
            return e.format(*xs)
        if dtype in (DType.i8, DType.u8):   # computed in int (no overflow), wrapped by the conversion
            trap = "{1} == 0" if dtype == DType.u8 else "{1} == 0 || {1} == -1"
            e = {Op.ADD: "({0} + {1})", Op.MUL: "({0} * {1})", Op.MOD: f"(({trap}) ? 0 : {{0}} % {{1}})"}[op]
            return f"(({C_COMPUTE[dtype]}){e.format(*xs)})"
        if dtype == DType.bool:
            e = {Op.ADD: "({0} || {1})", Op.MUL: "({0} && {1})"}[op]
            return e.format(*xs)
        # float adds and multiplies round one by one, as the program's ops do: the compiler may not
        # contract them into an FMA. (x * c - max(x) * c is exactly 0 at the max only when both
        # products round alike; fma(x, c, -(max * c)) leaves max * c's rounding error, 1e31 for
        # a bf16 near its max, and exp2 of it is inf or 0: a NaN softmax row on the H200.)
        if dtype == DType.f64:
            e = {Op.EXP2: "exp2({0})", Op.LOG2: "log2({0})", Op.SIN: "sin({0})", Op.SQRT: "sqrt({0})",
                 Op.RECIP: "(1.0 / {0})", Op.ADD: "__dadd_rn({0}, {1})", Op.MUL: "__dmul_rn({0}, {1})",
                 Op.MOD: "fmod({0}, {1})"}[op]
            return e.format(*xs)
        e = {
            Op.EXP2: "exp2f({0})", Op.LOG2: "log2f({0})", Op.SIN: "sinf({0})", Op.SQRT: "sqrtf({0})",
            Op.RECIP: "(1.0f / {0})", Op.ADD: "__fadd_rn({0}, {1})", Op.MUL: "__fmul_rn({0}, {1})",
            Op.MOD: "fmodf({0}, {1})",
        }[op].format(*xs)
        return round_to(e, dtype)

    @staticmethod
    def _cast(x: str, src: DType, dst: DType) -> str:
        if dst == DType.bool:
            return f"({x} != 0)"
        if dst.is_int:   # floats truncate: to i64 directly, to narrower types through int, then wrap
            ct = C_COMPUTE[dst]
            if not src.is_float:
                return f"(({ct}){x})"
            # the prelude's round-toward-zero conversions: saturating, NaN -> 0
            # (ir.interpreter.float_to_int); a C cast is undefined there
            if src not in (DType.f32, DType.f64):   # half types compute in float
                x = f"((float){x})"
            if dst == DType.i64:
                return f"to_i64({x})"
            return f"to_i32({x})" if dst == DType.i32 else f"(({ct})to_i32({x}))"
        if dst == DType.f64:
            return f"((double){x})"
        # to another float type: via float, rounded to the target's precision
        return round_to(f"((float){x})", dst)

    def _view(self, n: Node, idx: tuple[str, ...]) -> str:
        st: ShapeTracker = n.arg
        src = n.srcs[0]
        ct = C_COMPUTE[n.dtype]
        fill = c_literal(st.fill if n.dtype.is_float else typed_fill(st.fill, n.dtype.np), n.dtype)
        got = tracker_offset(st, idx)
        if got is None:
            return fill
        flat, tests = got
        off = c_index(flat)
        if src in self.buffers and src not in self.hooks:
            load = load_expr(self.buffers[src], off, src.dtype)
            if not tests:
                return self.tmp(ct, load)
            return self.tmp(ct, f"(({' && '.join(tests)}) ? {load} : {fill})")
        from ir.lower import to_multi
        if src.numel == 0:
            return fill
        src_idx = tuple(c_index(i) for i in to_multi(src.shape, ("flat", flat)))
        if not tests:
            return self.value(src, src_idx)
        # masked read of a computed value: compute it only where valid
        name = self.tmp(ct, fill)
        self.emit(f"if ({' && '.join(tests)}) {{")
        self.push()
        v = self.value(src, src_idx)
        self.emit(f"{name} = {v};")
        self.pop()
        self.emit("}")
        return name
