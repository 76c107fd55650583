"""Render kernel IR to LLVM IR with llvmlite's IR builder.

Every kernel becomes `void @name(ptr noalias %buf..., i64 %start, i64 %end)`: the leading
`parallel` axes are collapsed into one loop over [start, end), so the runtime can hand chunks of
it to threads; deeper axes are ordinary loops; the innermost one is left for LLVM's loop
vectorizer (contiguous loads, no aliasing, math that vectorizes: see mathfns.py). Values live in
their compute type: f32 for f32 and the halves (which are rounded after each op), double for f64,
i64, i32, i8 (u8 too: its compares, divisions and widening are the unsigned ones), i1 for bool.
"""
from __future__ import annotations

import dataclasses
import math
import re
from contextlib import contextmanager
from dataclasses import dataclass

from llvmlite import ir

from backends.llvm import jit, mathfns
from backends.llvm.common import (COMPUTE, F16, F32, F64, FAST, FLOAT_TYPES, I1, I8, I16, I32, I64, PTR, STORAGE,
                                  _i64, const, for_range, parallel_depth)
from backends.llvm.online import OnlineRenderer, _Row
from ir.dtypes import DType
from ir.kernel import (Compute, Const, Div, Gather, Iota, Kernel, KernelProgram, KernelSchedule, Let, Lin, Load,
                       Online, Reduce, Ref, Schedule, Value, Var, as_lin, digest, postorder, substitute, value_vars,
                       walk)
from ir.ops import Op

MAX_ROW_CACHE = 16384       # floats of stack per row cache


def _expensive(e) -> bool:
    return any(isinstance(x, Compute) and x.op in (Op.EXP2, Op.LOG2, Op.SIN, Op.SQRT, Op.RECIP) for x in walk(e))


class KernelRenderer(OnlineRenderer):
    def __init__(self, module: ir.Module, program: KernelProgram, kernel: Kernel, ks: KernelSchedule):
        self.module, self.program, self.k, self.ks = module, program, kernel, ks
        self.buffers = sorted(kernel.reads() | kernel.writes())
        self.scopes: list[dict] = []
        self.refs: dict[str, ir.Value] = {}
        self.lane_refs: dict[str, tuple] = {}    # lane sums of Onlines: (array, lane var, dtype)
        self.vars: dict[Var, ir.Value] = {}
        self.atom_values: dict = {}               # div/mod atoms whose value is already at hand

    # --- the function ---------------------------------------------------------------------
    def render(self) -> None:
        k = self.k
        self.panel = self._plan_panel()
        self.scratch_floats = self.panel.floats if self.panel else 0
        fnty = ir.FunctionType(ir.VoidType(), [PTR] * (len(self.buffers) + bool(self.scratch_floats)) + [I64, I64])
        fn = ir.Function(self.module, fnty, k.name)
        fn.attributes.add("nounwind")
        for a in fn.args[:-2]:
            a.add_attribute("noalias")
        self.fn = fn
        self.ptrs = dict(zip(self.buffers, fn.args))
        start, end = fn.args[-2], fn.args[-1]
        self.entry = fn.append_basic_block("entry")
        if self.panel:
            self.scratch = fn.args[len(self.buffers)]
            self.panel_base = ir.IRBuilder(self.entry).alloca(I64)
            ir.IRBuilder(self.entry).store(_i64(-1), self.panel_base)
        body = fn.append_basic_block("body")
        b = self.b = ir.IRBuilder(body)
        self.scopes.append({})
        self.row_cache = self._plan_row_cache()
        self.interchange = self._plan_interchange()
        P = parallel_depth(k, self.ks)
        self._emit_lets(0)
        if not k.axes:
            with b.if_then(b.icmp_signed("<", start, end)):
                self.scopes.append({})
                self._emit_stores()
                self.scopes.pop()
        elif self.interchange and len(k.axes) == 1:
            self._interchanged(start, end, start)
        else:
            online, rows = self._plan_rows(P)
            if online is not None:
                # blocks of `rows` rows aligned to multiples of `rows` (which divides the last
                # parallel axis, so a block never straddles the axes above it and its rows read
                # the same keys and values); the chunk's unaligned ends one by one
                aligned = b.mul(b.sdiv(b.add(start, _i64(rows - 1)), _i64(rows)), _i64(rows))
                first = b.select(b.icmp_signed("<", aligned, end), aligned, end)
                stop = b.sub(end, b.srem(b.sub(end, first), _i64(rows)))
                self._one_by_one(start, first, P)
                with for_range(b, first, stop, "pr", step=rows) as p:
                    self._row_block(online, p, rows, P)
                start = stop
            self._one_by_one(start, end, P)
        b.ret_void()
        ir.IRBuilder(self.entry).branch(body)

    def _one_by_one(self, start, end, P: int) -> None:
        """Rows start .. end - 1 of the parallel loop, each with its Lets and inner nest."""
        with for_range(self.b, start, end, "p") as p:
            self.scopes.append({})
            self.vars.update(self._parallel_vars(p, P))
            for d in range(1, P + 1):
                self._emit_lets(d)
            self._nest(P)
            self.scopes.pop()

    def _parallel_vars(self, p, P: int) -> dict:
        """The values of the leading P axes at flat index p of the parallel loop."""
        out, rest = {}, p
        for v in reversed(self.k.axes[:P]):
            if v is self.k.axes[0]:
                out[v] = rest
            else:
                out[v] = self.b.srem(rest, _i64(v.extent))
                rest = self.b.sdiv(rest, _i64(v.extent))
        return out

    def _plan_rows(self, P: int) -> tuple[Online | None, int]:
        """The Online to run for several rows at once, and how many (KernelSchedule.rows, or
        the largest power-of-two part of it dividing the last parallel axis): when it is the
        only Let above the inner loops (so a row is: the Online, then the row's inner nest)."""
        rows = self.ks.rows
        while rows > 1 and self.k.axes[P - 1].extent % rows:
            rows //= 2
        if rows <= 1 or self.row_cache or self.interchange:
            return None, 1
        upper = [l for l in self.k.lets if l.depth <= P]
        if len(upper) != 1 or not isinstance(upper[0], Online) or upper[0].depth != P:
            return None, 1
        return upper[0], rows

    def _row_block(self, online: Online, p, rows: int, P: int) -> None:
        """Rows p .. p + rows - 1 (consecutive values of the last parallel axis, the others the
        same): one Online pass for all of them, then each row's inner nest."""
        base = self._parallel_vars(p, P)
        last = self.k.axes[P - 1]
        block = [_Row({**base, last: self.b.add(base[last], _i64(u))}, {}, dict(self.refs), dict(self.lane_refs))
                 for u in range(rows)]
        self._online(online, block, last)
        for row in block:
            with self._as_row(row):
                self._nest(P)

    @contextmanager
    def _as_row(self, row: "_Row", *scopes: dict):
        """Render as row `row`: its axis values, Lets and value cache (plus `scopes`)."""
        refs, lane_refs = self.refs, self.lane_refs
        self.vars.update(row.vars)
        self.refs, self.lane_refs = row.refs, row.lane_refs
        self.scopes.append(row.scope)
        self.scopes.extend(scopes)
        try:
            yield
        finally:
            del self.scopes[-1 - len(scopes):]
            self.refs, self.lane_refs = refs, lane_refs

    def _nest(self, depth: int) -> None:
        k = self.k
        if depth == len(k.axes):
            self._emit_stores()
            return
        v = k.axes[depth]
        if depth == len(k.axes) - 1 and self.interchange:
            self._interchanged(_i64(0), _i64(v.extent), _i64(0))
            return
        with for_range(self.b, _i64(0), _i64(v.extent), v.name) as i:
            self.scopes.append({})
            self.vars[v] = i
            if depth == len(k.axes) - 1:
                for _, (expr, inner, buf) in self.row_cache.items():
                    ptr = self.b.gep(buf, [i], inbounds=True, source_etype=F32)
                    self.scopes[-1][inner] = self.b.load(ptr, typ=F32)
            self._emit_lets(depth + 1)
            self._nest(depth + 1)
            self.scopes.pop()

    def _plan_interchange(self) -> list:
        """Column reductions: when every innermost-depth Let is a reduction whose loads walk the
        last output axis contiguously but not its own innermost variable (x.sum(0), softmax over
        axis 0), run the reduction loops outside and the last axis inside, with one accumulator
        per output element in a stack buffer. Each element still sums in the same order."""
        k = self.k
        if not k.axes or k.axes[-1].extent > MAX_ROW_CACHE:
            return []
        full = [l for l in k.lets if l.depth == len(k.axes)]
        if not full or any(not isinstance(l, Let) or not isinstance(l.value, Reduce) for l in full):
            return []
        last = k.axes[-1]
        for l in full:
            red = l.value
            if any(isinstance(x, (Reduce, Ref)) for x in walk(red.body)):
                return []
            loads = [x for x in walk(red.body) if isinstance(x, Load)]
            inner = red.vars[-1]
            if not loads or any(x.index.coeff(inner) == 1 for x in loads):
                return []
            if not any(x.index.coeff(last) == 1 for x in loads):
                return []
        if len({l.value.vars for l in full}) != 1:
            return []
        return full

    def _interchanged(self, lo, hi, base) -> None:
        """The last axis over [lo, hi) with the full-depth reductions interchanged (see
        _plan_interchange); accumulator slot = index - base."""
        b, k = self.b, self.k
        last = k.axes[-1]
        lets = self.interchange
        bufs = [ir.IRBuilder(self.entry).alloca(COMPUTE[l.value.dtype], size=last.extent) for l in lets]
        with for_range(b, lo, hi, last.name + ".init") as j:
            for l, buf in zip(lets, bufs):
                b.store(self._init(l.value), b.gep(buf, [b.sub(j, base)], inbounds=True, source_etype=COMPUTE[l.value.dtype]))

        def loop(vs):
            if not vs:
                with for_range(b, lo, hi, last.name + ".acc") as j:
                    self.scopes.append({})
                    self.vars[last] = j
                    for l, buf in zip(lets, bufs):
                        ty = COMPUTE[l.value.dtype]
                        ptr = b.gep(buf, [b.sub(j, base)], inbounds=True, source_etype=ty)
                        b.store(self._combine(l.value, b.load(ptr, typ=ty), self.value(l.value.body)), ptr)
                    self.scopes.pop()
                return
            with for_range(b, _i64(0), _i64(vs[0].extent), vs[0].name) as i:
                self.scopes.append({})
                self.vars[vs[0]] = i
                loop(vs[1:])
                self.scopes.pop()

        loop(list(lets[0].value.vars))
        with for_range(b, lo, hi, last.name) as j:
            self.scopes.append({})
            self.vars[last] = j
            for l, buf in zip(lets, bufs):
                ty = COMPUTE[l.value.dtype]
                acc = b.load(b.gep(buf, [b.sub(j, base)], inbounds=True, source_etype=ty), typ=ty)
                self.refs[l.name] = self.round(acc, l.value.dtype)
            self._emit_stores()
            self.scopes.pop()

    def _plan_row_cache(self) -> dict:
        """Row kernels (softmax): when a row reduction's body and the epilogue compute the same
        expensive per-element value (exp(x - max)), compute it once: the reduction loop keeps it
        in a per-row stack buffer and the epilogue loop reads it back. Same code, same bits.
        Returns {reduce: (expr in the reduction, the same expr in the epilogue, buffer)}."""
        k = self.k
        out: dict = {}
        if len(k.axes) < 2:
            return out
        last = k.axes[-1]
        if last.extent > MAX_ROW_CACHE:
            return out
        epilogue = set()
        for st in k.stores:
            epilogue |= set(walk(st.value))
        for let in k.lets:
            red = let.value if isinstance(let, Let) else None
            if let.depth != len(k.axes) - 1 or not isinstance(red, Reduce) or len(red.vars) != 1:
                continue
            r = red.vars[0]
            if r.extent != last.extent:
                continue
            for sub in walk(red.body):
                if COMPUTE.get(getattr(sub, "dtype", None)) != F32 or not _expensive(sub):
                    continue
                if r not in value_vars(sub):
                    continue
                inner = substitute(sub, {r: as_lin(last)})
                if inner in epilogue:
                    buf = ir.IRBuilder(self.entry).alloca(F32, size=last.extent)
                    out[red] = (sub, inner, buf)
                    break
        return out

    def _emit_lets(self, depth: int) -> None:
        for let in self.k.lets:
            if let.depth == depth:
                if isinstance(let, Online):
                    self._online(let)
                else:
                    self.refs[let.name] = self.value(let.value)

    def _emit_stores(self) -> None:
        for st in self.k.stores:
            v = self.value(st.value)
            dt = self.program.buffer(st.buffer).dtype
            ptr = self.b.gep(self.ptrs[st.buffer], [self.index(st.index)], inbounds=True, source_etype=STORAGE[dt])
            self.b.store(self.to_storage(v, dt), ptr)

    # --- index expressions ----------------------------------------------------------------
    def index(self, e: Lin) -> ir.Value:
        b = self.b
        out = _i64(e.const)
        first = True
        for a, c in e.terms:
            x = self.vars[a] if isinstance(a, Var) else self.atom(a)
            t = x if c == 1 else b.mul(x, _i64(c), flags=("nsw",))
            out = t if first and e.const == 0 else b.add(out, t, flags=("nsw",))
            first = False
        return out

    def atom(self, a) -> ir.Value:
        """The value of a Div or Mod index atom (`atom_values` first)."""
        if a in self.atom_values:
            return self.atom_values[a]
        if isinstance(a, Div):
            return self.b.sdiv(self.index(a.arg), _i64(a.divisor))
        return self.b.srem(self.index(a.arg), _i64(a.divisor))

    # --- values ---------------------------------------------------------------------------
    def value(self, e: Value) -> ir.Value:
        v = self._emitted(e)
        if v is not None:
            return v
        if isinstance(e, Compute):
            # emit the elementwise tree children first, so its depth needs no recursion (a
            # reduction met on the way emits its own body inside its loop, as a leaf here)
            for x in postorder(e, lambda x: isinstance(x, Compute) and self._emitted(x) is None):
                if self._emitted(x) is None:
                    self.scopes[-1][x] = self._value(x)
            return self.scopes[-1][e]
        v = self.scopes[-1][e] = self._value(e)
        return v

    def _emitted(self, e: Value) -> ir.Value | None:
        for scope in reversed(self.scopes):
            if e in scope:
                return scope[e]
        return None

    def _value(self, e: Value) -> ir.Value:
        b = self.b
        if isinstance(e, Const):
            return const(e.value, e.dtype)
        if isinstance(e, Ref):
            if e.name in self.lane_refs:
                array, lane, dtype = self.lane_refs[e.name]
                ptr = b.gep(array, [self.vars[lane]], inbounds=True, source_etype=F32)
                return self.round(b.load(ptr, typ=F32), dtype)
            return self.refs[e.name]
        if isinstance(e, Load):
            return self._load(e)
        if isinstance(e, Iota):
            return b.trunc(self.index(e.index), I32)
        if isinstance(e, Gather):
            return self._gather(e)
        if isinstance(e, Reduce):
            return self._reduce(e)
        return self._compute(e)

    def _gather(self, e: Gather) -> ir.Value:
        """A load at base + stride * index; an index outside [0, extent) reads 0 (it loads the
        row's first element instead, which exists: extent > 0)."""
        b = self.b
        j = b.sext(self.value(e.index), I64)
        ok = b.and_(b.icmp_signed(">=", j, _i64(0)), b.icmp_signed("<", j, _i64(e.extent)))
        pos = b.add(self.index(e.base), b.mul(b.select(ok, j, _i64(0)), _i64(e.stride)))
        ptr = b.gep(self.ptrs[e.buffer], [pos], inbounds=True, source_etype=STORAGE[e.dtype])
        v = self.from_storage(b.load(ptr, typ=STORAGE[e.dtype]), e.dtype)
        return b.select(ok, v, const(0.0 if e.dtype.is_float else (False if e.dtype == DType.bool else 0), e.dtype))

    def _load(self, e: Load) -> ir.Value:
        b = self.b
        idx = self.index(e.index)
        ok = None
        for bd in e.valid:
            x = self.index(bd.expr)
            c = b.and_(b.icmp_signed(">=", x, _i64(bd.lo)), b.icmp_signed("<", x, _i64(bd.hi)))
            ok = c if ok is None else b.and_(ok, c)
        if ok is None:
            ptr = b.gep(self.ptrs[e.buffer], [idx], inbounds=True, source_etype=STORAGE[e.dtype])
            return self.from_storage(b.load(ptr, typ=STORAGE[e.dtype]), e.dtype)
        # a load only where the index is valid (a branch, not a select of a clamped index): the
        # loop vectorizer turns it into a masked load of consecutive elements (a padded window)
        fill = const(e.fill, e.dtype)
        before = b.block
        inside = b.append_basic_block("load.in")
        joined = b.append_basic_block("load.join")
        b.cbranch(ok, inside, joined)
        b.position_at_end(inside)
        ptr = b.gep(self.ptrs[e.buffer], [idx], inbounds=True, source_etype=STORAGE[e.dtype])
        v = self.from_storage(b.load(ptr, typ=STORAGE[e.dtype]), e.dtype)
        end_inside = b.block
        b.branch(joined)
        b.position_at_end(joined)
        out = b.phi(v.type)
        out.add_incoming(v, end_inside)
        out.add_incoming(fill, before)
        return out

    def _init(self, e: Reduce) -> ir.Constant:
        return const(0 if e.op == Op.SUM else e.dtype.lowest, e.dtype)

    def _combine(self, e: Reduce, acc: ir.Value, x: ir.Value) -> ir.Value:
        b, ty = self.b, COMPUTE[e.dtype]
        flags = FAST if self.ks.fast_math else ()
        if e.op == Op.SUM:
            if flags and ty in FLOAT_TYPES and isinstance(x, ir.Instruction) and x.opname == "fmul":
                # a product enters the sum as fmuladd(a, b, +0.0) without flags, which the
                # optimizer must keep (a product of -0 plus +0 is +0): under `reassoc` it factors
                # a sum of products by one value (sum x_i * s -> s * sum x_i, once a short loop
                # is unrolled or vectorized), and the unscaled sum can overflow where the program
                # scaled each term first (bf16 norms of near-max rows). The sum itself still
                # reassociates and vectorizes; an FMA costs what the multiply did
                fma = self._intrinsic("llvm.fmuladd.f32" if ty == F32 else "llvm.fmuladd.f64", ty, 3)
                x = b.call(fma, [x.operands[0], x.operands[1], ir.Constant(ty, 0.0)])
            return b.fadd(acc, x, flags=flags) if ty in FLOAT_TYPES else (b.or_(acc, x) if ty == I1 else b.add(acc, x))
        if ty in FLOAT_TYPES:
            name = "llvm.maximum.f32" if ty == F32 else "llvm.maximum.f64"
            new = b.call(self._intrinsic(name, ty, 2), [acc, x])
            if flags:
                new.fastmath.add("nsz")
            return new
        return b.select(_icmp(b, ">", x, acc, e.dtype), x, acc)

    def _reduce(self, e: Reduce) -> ir.Value:
        b = self.b
        ty = COMPUTE[e.dtype]
        slot = ir.IRBuilder(self.entry).alloca(ty)
        b.store(self._init(e), slot)

        cache = self.row_cache.get(e)

        def loop(vs):
            if not vs:
                x = self.value(e.body)
                if cache is not None:   # keep this row's value for the epilogue
                    ptr = b.gep(cache[2], [self.vars[e.vars[0]]], inbounds=True, source_etype=F32)
                    b.store(self.value(cache[0]), ptr)
                b.store(self._combine(e, b.load(slot, typ=ty), x), slot)
                return
            with for_range(b, _i64(0), _i64(vs[0].extent), vs[0].name) as i:
                self.scopes.append({})
                self.vars[vs[0]] = i
                loop(vs[1:])
                self.scopes.pop()

        loop(list(e.vars))
        return self.round(b.load(slot, typ=ty), e.dtype)

    def _intrinsic(self, name: str, ty, nargs: int = 1, arg=None) -> ir.Function:
        """The declaration of an LLVM intrinsic returning `ty`, its `nargs` arguments of type
        `arg` (default: `ty`)."""
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ty, [arg or ty] * nargs), name)
        return fn

    def _compute(self, e: Compute) -> ir.Value:
        b = self.b
        op, dt = e.op, e.dtype
        xs = [self.value(s) for s in e.srcs]
        src_dt = e.srcs[0].dtype
        if op == Op.CAST:
            return self.round(cast(b, xs[0], src_dt, dt), dt)
        if op == Op.WHERE:
            return b.select(xs[0], xs[1], xs[2])
        ty = COMPUTE[src_dt]
        if op == Op.CMPLT:
            if ty in FLOAT_TYPES:
                return b.fcmp_ordered("<", xs[0], xs[1])
            return _icmp(b, "<", xs[0], xs[1], src_dt)
        if ty == F64:   # double math: LLVM's intrinsics (libm's exp2, log2, sin; sqrt inline)
            if op in (Op.ADD, Op.MUL, Op.MOD):
                return {Op.ADD: b.fadd, Op.MUL: b.fmul, Op.MOD: b.frem}[op](xs[0], xs[1])
            if op == Op.RECIP:
                return b.fdiv(ir.Constant(F64, 1.0), xs[0])
            return b.call(self._intrinsic(f"llvm.{op.value}.f64", F64), [xs[0]])
        if ty == F32:
            if op == Op.ADD:
                r = b.fadd(xs[0], xs[1])
            elif op == Op.MUL:
                r = b.fmul(xs[0], xs[1])
            elif op == Op.MOD:
                r = b.frem(xs[0], xs[1])
            elif op == Op.RECIP:
                r = b.fdiv(ir.Constant(F32, 1.0), xs[0])
            elif op == Op.EXP2:
                r = b.call(mathfns.define_exp2(self.module), [xs[0]])
            elif op == Op.LOG2:
                r = b.call(mathfns.define_log2(self.module), [xs[0]])
            elif op == Op.SQRT:
                r = b.call(self._intrinsic("llvm.sqrt.f32", F32), [xs[0]])
            elif op == Op.SIN:
                r = b.call(self._intrinsic("llvm.sin.f32", F32), [xs[0]])
            else:
                raise NotImplementedError(op)
            return self.round(r, dt)
        if ty != I1:   # integers of any width: add and mul wrap
            if op == Op.ADD:
                return b.add(xs[0], xs[1])
            if op == Op.MUL:
                return b.mul(xs[0], xs[1])
            if op == Op.MOD:   # C remainder, never trapping: x % 0 and x % -1 (INT_MIN too) are 0
                # (docs/ir.md): srem by 0, or of INT_MIN by -1, faults; srem by 1 gives that 0
                one = ir.Constant(ty, 1)
                if not src_dt.is_signed:
                    return b.urem(xs[0], b.select(b.icmp_unsigned("==", xs[1], ir.Constant(ty, 0)), one, xs[1]))
                trap = b.or_(b.icmp_signed("==", xs[1], ir.Constant(ty, 0)),
                             b.icmp_signed("==", xs[1], ir.Constant(ty, -1)))
                return b.srem(xs[0], b.select(trap, one, xs[1]))
        if ty == I1:
            if op == Op.ADD:
                return b.or_(xs[0], xs[1])
            if op == Op.MUL:
                return b.and_(xs[0], xs[1])
        raise NotImplementedError(f"{op} on {src_dt}")

    # --- dtype conversions ----------------------------------------------------------------
    def round(self, v: ir.Value, dt: DType) -> ir.Value:
        """Round an f32 compute value to a half storage type and back (per-op rounding)."""
        if dt in (DType.f16, DType.bf16):
            return self.from_storage(self.to_storage(v, dt), dt)
        return v

    def from_storage(self, v: ir.Value, dt: DType) -> ir.Value:
        b = self.b
        if dt == DType.f16:
            return b.fpext(v, F32)
        if dt == DType.bf16:
            return b.bitcast(b.shl(b.zext(v, I32), ir.Constant(I32, 16)), F32)
        if dt == DType.bool:
            return b.icmp_unsigned("!=", v, ir.Constant(I8, 0))
        return v

    def to_storage(self, v: ir.Value, dt: DType) -> ir.Value:
        b = self.b
        if dt == DType.f16:
            return b.fptrunc(v, F16)
        if dt == DType.bf16:   # round to nearest even; NaN stays a quiet NaN
            bits = b.bitcast(v, I32)
            lsb = b.and_(b.lshr(bits, ir.Constant(I32, 16)), ir.Constant(I32, 1))
            rounded = b.lshr(b.add(bits, b.add(lsb, ir.Constant(I32, 0x7FFF))), ir.Constant(I32, 16))
            nan = b.or_(b.lshr(bits, ir.Constant(I32, 16)), ir.Constant(I32, 0x40))
            r = b.select(b.fcmp_unordered("uno", v, v), nan, rounded)
            return b.trunc(r, I16)
        if dt == DType.bool:
            return b.zext(v, I8)
        return v


def _icmp(b: ir.IRBuilder, pred: str, x, y, dt: DType) -> ir.Value:
    """An integer compare, unsigned for u8 and bool."""
    return b.icmp_signed(pred, x, y) if dt.is_signed else b.icmp_unsigned(pred, x, y)


def cast(b: ir.IRBuilder, v: ir.Value, src: DType, dst: DType) -> ir.Value:
    """The interpreter's casts (ir.interpreter.elementwise): floats to integers truncate, to i64
    directly and to narrower types through i32 (then wrap); integers wrap or extend by their
    own sign (u8 and bool zero-extend)."""
    s, d = COMPUTE[src], COMPUTE[dst]
    if s == d:      # the same compute type (i8 <-> u8: the same bits)
        return v
    if d == I1:
        return b.fcmp_unordered("!=", v, ir.Constant(s, 0.0)) if s in FLOAT_TYPES else b.icmp_unsigned("!=", v, ir.Constant(s, 0))
    if s in FLOAT_TYPES and d in FLOAT_TYPES:
        return b.fpext(v, d) if d == F64 else b.fptrunc(v, d)
    if s in FLOAT_TYPES:
        # saturating, NaN -> 0 (ir.interpreter.float_to_int): a plain fptosi is poison there
        w = _fptosi_sat(b, v, s, I64 if d == I64 else I32)
        return w if d in (I32, I64) else b.trunc(w, d)
    if d in FLOAT_TYPES:
        return b.sitofp(v, d) if src.is_signed else b.uitofp(v, d)
    if s.width > d.width:
        return b.trunc(v, d)
    return b.sext(v, d) if src.is_signed else b.zext(v, d)


def _fptosi_sat(b: ir.IRBuilder, v: ir.Value, src, dst) -> ir.Value:
    bits = lambda t: "f64" if t == F64 else "f32" if t == F32 else f"i{t.width}"
    name = f"llvm.fptosi.sat.{bits(dst)}.{bits(src)}"
    fn = b.module.globals.get(name)
    if fn is None:
        fn = ir.Function(b.module, ir.FunctionType(dst, [src]), name)
    return b.call(fn, [v])


@dataclass(frozen=True)
class LaunchInfo:
    """How the runtime calls one rendered kernel."""
    buffers: list[str]      # pointer arguments, in order
    extent: int             # the parallel loop runs over [0, extent)
    scratch: int            # floats of per-thread scratch passed after the buffers (0: none)
    chunks_per_thread: int  # how finely to cut [0, extent)
    symbol: str = ""        # the function it calls: "" its own; else an earlier kernel's (same code)


def kernel_class(k: Kernel, names: list[str], program: KernelProgram, ks) -> tuple:
    """What a kernel's rendered function depends on: its loops and values with each buffer
    named by its place in `names` (`buffer_roles(k)`), those buffers' dtypes and sizes (not
    their kinds: input, temp or output is the same pointer to the code), and its schedule.
    Kernels of one class (the layers of a model) share one function: LLVM compiles it once."""
    body = digest((k.axes, k.lets, k.stores), {n: f"#{i}" for i, n in enumerate(names)})
    metas = tuple((b.dtype.value, b.size) for b in map(program.buffer, names))
    return body, metas, repr(ks)


def buffer_roles(k: Kernel) -> list[str]:
    """k's buffers in the order its values first use them (then any left, sorted): two kernels
    of one class use their buffers in the same roles in this order."""
    seen: dict[str, None] = {}
    for e in k.values():
        for node in walk(e):
            if isinstance(node, (Load, Gather)):
                seen.setdefault(node.buffer)
    for st in k.stores:
        seen.setdefault(st.buffer)
    for n in sorted(k.reads() | k.writes()):
        seen.setdefault(n)
    return list(seen)


def render_program(program: KernelProgram, schedule: Schedule,
                   skip: frozenset = frozenset()) -> tuple[str, dict[str, LaunchInfo]]:
    """LLVM IR text of the whole program (but the kernels named in `skip`: library calls), and
    how to launch each kernel."""
    from backends.llvm import matmul
    module = ir.Module(name="saturn")
    triple, layout, _ = jit.target_info()
    module.triple, module.data_layout = triple, layout
    info: dict[str, LaunchInfo] = {}
    widths: dict[str, int] = {}
    rendered: dict[tuple, tuple[str, list[str]]] = {}     # class -> (its kernel's name, buffer roles)
    for k in program.kernels:
        if any(v.extent == 0 for v in k.axes) or k.name in skip:
            continue
        ks = schedule.for_kernel(k.name)
        roles = buffer_roles(k)
        cls = kernel_class(k, roles, program, ks)
        if cls in rendered:      # the same code on other buffers: the earlier function, its arguments renamed
            first, first_roles = rendered[cls]
            place = dict(zip(first_roles, roles))
            f = info[first]
            info[k.name] = dataclasses.replace(f, buffers=[place[b] for b in f.buffers], symbol=first)
            continue
        rendered[cls] = (k.name, roles)
        pat = matmul.product_layout(k, program)
        if pat is not None:
            r = matmul.MatmulRenderer(module, program, k, ks, pat)
            r.render()
            info[k.name] = LaunchInfo(r.buffers, matmul.launch_extent(k, ks), matmul.scratch_floats(k, program, ks), 1)
        else:
            r = KernelRenderer(module, program, k, ks)
            r.render()
            extent = math.prod(v.extent for v in k.axes[:parallel_depth(k, ks)]) if k.axes else 1
            info[k.name] = LaunchInfo(r.buffers, extent, r.scratch_floats, 2)
        widths[k.name] = ks.vector_width
    text = str(module)
    # llvmlite has no API for string attributes: add the vector-width preference to each header
    lines = text.split("\n")
    for i, line in enumerate(lines):
        m = re.match(r'define void @"?([\w.]+)"?\(', line)
        if m and m.group(1) in widths:
            bits = max(32 * widths[m.group(1)], 128)
            lines[i] = line + f' "prefer-vector-width"="{bits}" "min-legal-vector-width"="0"'
    return "\n".join(lines), info
