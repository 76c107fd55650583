"""Render kernel IR to LLVM IR with llvmlite's IR builder.

Every kernel becomes `void @name(ptr noalias %buf..., i64 %start, i64 %end)`: the leading
`parallel` axes are collapsed into one loop over [start, end), so the runtime can hand chunks of
it to threads; deeper axes are ordinary loops; the innermost one is left for LLVM's loop
vectorizer (contiguous loads, no aliasing, math that vectorizes: see mathfns.py). Values live in
their compute type: f32 for every float dtype (halves are rounded after each op), i32, i1.
"""
from __future__ import annotations

import math
import re
from contextlib import contextmanager
from dataclasses import dataclass

from llvmlite import ir

from backends.llvm import jit, mathfns
from ir.dtypes import DType
from ir.kernel import (Compute, Const, Div, Kernel, KernelProgram, KernelSchedule, Let, Lin, Load, Online,
                       Reduce, Ref, Schedule, Value, Var, as_lin, atom_vars, substitute, value_vars, walk)
from ir.ops import Op

F32, F16, I1, I8, I16, I32, I64 = (ir.FloatType(), ir.HalfType(), ir.IntType(1), ir.IntType(8),
                                   ir.IntType(16), ir.IntType(32), ir.IntType(64))
PTR = ir.PointerType()
STORAGE = {DType.f32: F32, DType.f16: F16, DType.bf16: I16, DType.i32: I32, DType.bool: I8}
COMPUTE = {DType.f32: F32, DType.f16: F32, DType.bf16: F32, DType.i32: I32, DType.bool: I1}
FAST = ("reassoc", "nsz", "contract")


def _i64(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def splat_vector(b: ir.IRBuilder, x: ir.Value, width: int) -> ir.Value:
    """<width x float> with every lane x."""
    undef = ir.Constant(ir.VectorType(F32, width), None)
    zeros = ir.Constant(ir.VectorType(ir.IntType(32), width), None)
    return b.shuffle_vector(b.insert_element(undef, x, ir.Constant(ir.IntType(32), 0)), undef, zeros)


def lane_sums(b: ir.IRBuilder, vectors: list, width: int) -> ir.Value:
    """One vector whose lane u is the sum of vectors[u]'s lanes (len(vectors) a power of two
    <= width; the other lanes are unspecified): pairs are merged by adding their halves, so
    n vectors cost n - 1 + log2(width / n) shuffle pairs and adds instead of n horizontal sums."""
    i32 = ir.IntType(32)

    def shuffle(x, y, idx):
        idx = idx + [0] * (width - len(idx))
        return b.shuffle_vector(x, y, ir.Constant(ir.VectorType(i32, width), idx))

    vs, size = list(vectors), width        # each vector: width // size blocks of `size` lanes
    while len(vs) > 1:
        half, blocks = size // 2, width // size
        lo = [k * size + j for k in range(blocks) for j in range(half)]
        lo += [width + i for i in lo]
        hi = [i + half for i in lo]
        vs = [b.fadd(shuffle(x, y, lo), shuffle(x, y, hi), flags=FAST) for x, y in zip(vs[0::2], vs[1::2])]
        size = half
    v, rows = vs[0], len(vectors)          # rows blocks of `size` lanes, in order
    while size > 1:
        half = size // 2
        lo = [k * size + j for k in range(rows) for j in range(half)]
        v = b.fadd(shuffle(v, v, lo), shuffle(v, v, [i + half for i in lo]), flags=FAST)
        size = half
    return v


@contextmanager
def for_range(b: ir.IRBuilder, start, stop, name: str = "i", step: int = 1):
    """for (i = start; i < stop; i += step) { body }: yields i (an i64)."""
    pre = b.block
    head = b.append_basic_block(f"{name}.head")
    body = b.append_basic_block(f"{name}.body")
    done = b.append_basic_block(f"{name}.done")
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64, name)
    i.add_incoming(start, pre)
    b.cbranch(b.icmp_signed("<", i, stop), body, done)
    b.position_at_end(body)
    yield i
    nxt = b.add(i, _i64(step), name=f"{name}.next", flags=("nsw",))
    i.add_incoming(nxt, b.block)
    b.branch(head)
    b.position_at_end(done)


MAX_ROW_CACHE = 16384       # floats of stack per row cache
PANEL_FLOATS = 1 << 22      # largest K panel (floats of per-thread scratch) for an Online's key blocks
PANEL_GROUP = 8             # rows whose score vectors share each panel load
PANEL_PARTS = 2             # partial sums per score vector (independent FMA chains)


def _expensive(e) -> bool:
    return any(isinstance(x, Compute) and x.op in (Op.EXP2, Op.LOG2, Op.SIN, Op.SQRT, Op.RECIP) for x in walk(e))


def parallel_depth(k: Kernel, ks: KernelSchedule | None = None) -> int:
    """How many leading axes form the chunked parallel loop: never past a Let's depth (so no
    row reduction is recomputed per element), never the innermost (vector) axis unless it is
    the only one, and at most the schedule's `parallel` when that is set (> 0)."""
    if not k.axes:
        return 0
    depth = len(k.axes) - 1 if len(k.axes) > 1 else 1
    for let in k.lets:
        if let.depth >= 1:
            depth = min(depth, let.depth)
    if ks is not None and ks.parallel > 0:
        depth = min(depth, ks.parallel)
    return max(depth, 1)


@dataclass
class _Row:
    """One row of a block rendered together: its parallel-axis values, value cache and Lets;
    m_slot/slots hold its Online state."""
    vars: dict
    scope: dict
    refs: dict
    lane_refs: dict
    m_slot: object = None
    slots: list = None


class KernelRenderer:
    def __init__(self, module: ir.Module, program: KernelProgram, kernel: Kernel, ks: KernelSchedule):
        self.module, self.program, self.k, self.ks = module, program, kernel, ks
        self.buffers = sorted(kernel.reads() | kernel.writes())
        self.scopes: list[dict] = []
        self.refs: dict[str, ir.Value] = {}
        self.lane_refs: dict[str, tuple] = {}    # lane sums of Onlines: (array, lane var, dtype)
        self.vars: dict[Var, ir.Value] = {}

    # --- the function ---------------------------------------------------------------------
    def render(self) -> None:
        k = self.k
        self.panel = self._plan_panel()
        self.scratch_floats = self.panel[1][3] * self.panel[1][1].extent if self.panel else 0
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

    def _online(self, let: Online, rows: list["_Row"] | None = None, row_axis: Var | None = None) -> None:
        """One pass over the tiles carrying (m, sums): m' = max(m, tile max); when the max grew
        (or is NaN) each sum is first rescaled by exp2(scale * (m - m')), then gets the tile's
        term, which reads m' (ir.kernel.Online). Skipping the rescale when the max did not
        change saves an exp2 and a multiply per sum on most tiles. A lane sum is an array over
        the lane axis; its term is computed in gemv form: the lane-free factors once per r, the
        lane loop inside. With `rows` (a block of rows along `row_axis`, _row_block) every row
        carries its own state through the same pass; loads the rows share are emitted once per row and merged
        by LLVM, and their scalar steps line up for its SLP vectorizer."""
        b = self.b
        rows = rows or [_Row({}, self.scopes[-1], self.refs, self.lane_refs)]
        flags = FAST if self.ks.fast_math else ()
        entry = ir.IRBuilder(self.entry)
        lanes = let.lane.extent if let.lane is not None else 0
        zero = ir.Constant(F32, 0.0)
        for row in rows:
            row.m_slot = entry.alloca(F32)
            row.slots = [entry.alloca(F32, size=lanes) if let.lane_sum(k) else entry.alloca(F32)
                         for k in range(len(let.sums))]
            b.store(ir.Constant(F32, float("-inf")), row.m_slot)
            for k, slot in enumerate(row.slots):
                if let.lane_sum(k):
                    with for_range(b, _i64(0), _i64(lanes), "lane.init") as j:
                        b.store(zero, b.gep(slot, [j], inbounds=True, source_etype=F32))
                else:
                    b.store(zero, slot)
        exp2 = mathfns.define_exp2(self.module)
        maximum = self._intrinsic("llvm.maximum.f32", F32, 2)
        start = _i64(0)
        if self._key_block_plan(let) is not None:
            start = self._online_key_blocks(let, rows, flags)     # the whole blocks; the rest below
        with for_range(b, start, _i64(let.var.extent), let.var.name) as i:
            self.vars[let.var] = i
            steps = [{} for _ in rows]          # each row's values in this step
            olds, news, changed = [], [], None
            for step, y in zip(steps, self._block_dot(let.tile_max, rows, row_axis)):
                step[let.tile_max] = y
            for row, step in zip(rows, steps):
                with self._as_row(row, step):
                    y = self.value(let.tile_max)
                m = b.load(row.m_slot, typ=F32)
                m_new = b.call(maximum, [m, y])
                grew = b.fcmp_unordered("!=", m, m_new)
                olds.append(m)
                news.append(m_new)
                changed = grew if changed is None else b.or_(changed, grew)
            with b.if_then(changed):
                for row, m, m_new in zip(rows, olds, news):
                    alpha = b.call(exp2, [b.fmul(ir.Constant(F32, let.scale), b.fsub(m, m_new))])
                    if len(rows) > 1:           # (a row whose max did not grow keeps its sums)
                        alpha = b.select(b.fcmp_ordered("==", m, m_new), ir.Constant(F32, 1.0), alpha)
                    for k, slot in enumerate(row.slots):
                        if let.lane_sum(k):
                            with for_range(b, _i64(0), _i64(lanes), "lane.rescale") as j:
                                p = b.gep(slot, [j], inbounds=True, source_etype=F32)
                                b.store(b.fmul(b.load(p, typ=F32), alpha, flags=flags), p)
                        else:
                            b.store(b.fmul(b.load(slot, typ=F32), alpha, flags=flags), slot)
            for row, step, m_new in zip(rows, steps, news):
                b.store(m_new, row.m_slot)
                with self._as_row(row, step):
                    self.refs[let.name] = m_new
                    for k, (slot, term) in enumerate(zip(row.slots, let.terms)):
                        if let.lane_sum(k):
                            self._lane_term(let, let.lane_sum(k), slot, flags)
                        else:
                            b.store(b.fadd(b.load(slot, typ=F32), self.value(term), flags=flags), slot)
        for row in rows:
            row.refs[let.name] = b.load(row.m_slot, typ=F32)
            for k, (name, slot, term) in enumerate(zip(let.sums, row.slots, let.terms)):
                if let.lane_sum(k):
                    row.lane_refs[name] = (slot, let.lane, term.dtype)
                else:
                    row.refs[name] = self.round(b.load(slot, typ=F32), term.dtype)

    def _key_block_plan(self, let: Online):
        """(dot operands of the tile max, {sum index: its lane load}) when the Online can step a
        vector's width of keys at a time (KernelSchedule.keys): its tile max is a dot product
        with an operand that reads the key (_dot_operands) and every lane sum reads its lane
        factors directly as one contiguous load (gemv form without r); else None."""
        if not self.ks.keys or let.var.extent < self._lane_width():
            return None
        operands = self._dot_operands(let.tile_max, let.var)
        if operands is None:
            return None
        loads = {}
        for k in range(len(let.sums)):
            form = let.lane_sum(k)
            if form:
                outer, r, a, bs = form
                ld = self._lane_vector_load(let, bs) if r is None else None
                if ld is None:
                    return None
                loads[k] = ld
        return operands, loads

    def _online_key_blocks(self, let: Online, rows: list["_Row"], flags) -> ir.Value:
        """The Online's steps over whole blocks of w keys (w the vector width; _key_block_plan),
        for each row of `rows` in turn inside each block (the block's keys and values, 2 * w
        rows of K and V, stay in L1 while the rows use them). Per row and block: the w scores
        as one vector (from the K panel for groups of PANEL_GROUP rows when the kernel has one,
        _panel_scores; else _dot_vector), the block max, one rescale when the max grew, the
        terms of the w keys in a loop LLVM vectorizes (their exps as one vector), each lane
        sum's value rows accumulated into vector registers (stored back to the lane arrays after
        the blocks, so the one-key loop can finish the keys left over). Returns the first key
        not done."""
        (operands, loads), b = self._key_block_plan(let), self.b
        w, n = self._lane_width(), let.var.extent
        full = n - n % w
        vty = ir.VectorType(F32, w)
        fma = self._intrinsic(f"llvm.fmuladd.v{w}f32", vty, 3)
        exp2 = mathfns.define_exp2(self.module)
        maximum = self._intrinsic("llvm.maximum.f32", F32, 2)
        name = f"llvm.vector.reduce.fmax.v{w}f32"
        block_max = self.module.globals.get(name) or ir.Function(self.module, ir.FunctionType(F32, [vty]), name)
        any_true = self.module.globals.get(f"llvm.vector.reduce.or.v{w}i1") or ir.Function(
            self.module, ir.FunctionType(ir.IntType(1), [ir.VectorType(ir.IntType(1), w)]), f"llvm.vector.reduce.or.v{w}i1")
        entry = ir.IRBuilder(self.entry)
        scores = entry.alloca(F32, size=w)
        factors = {k: entry.alloca(F32, size=w) for k in loads}       # a lane sum's lane-free factor per key
        regs = [{k: [entry.alloca(vty) for _ in range(let.lane.extent // w)] for k in loads} for _ in rows]
        for row_regs in regs:                                         # (mem2reg'd: registers or spills)
            for k in loads:
                for reg in row_regs[k]:
                    b.store(ir.Constant(vty, [0.0] * w), reg)
        panel = self.panel[1] if self.panel is not None and self.panel[0] == let else None
        if panel is not None:
            self._pack_panel(let, rows[0], panel)

        def at(buf, u):
            return b.gep(buf, [u], inbounds=True, source_etype=F32)

        def step(row, row_regs, s, kb):
            b.store(s, b.bitcast(scores, vty.as_pointer()), align=4)
            # the block max ignoring NaN (a plain max tree), then NaN if any score is NaN
            t = b.call(block_max, [s], fastmath=("nnan",))
            t = b.select(b.call(any_true, [b.fcmp_unordered("uno", s, s)]), ir.Constant(F32, float("nan")), t)
            m = b.load(row.m_slot, typ=F32)
            m_new = b.call(maximum, [m, t])
            with b.if_then(b.fcmp_unordered("!=", m, m_new)):
                alpha = b.call(exp2, [b.fmul(ir.Constant(F32, let.scale), b.fsub(m, m_new))])
                splat = splat_vector(b, alpha, w)
                for k, slot in enumerate(row.slots):
                    for reg in row_regs.get(k, [slot]):
                        ty, x = (vty, splat) if k in row_regs else (F32, alpha)
                        b.store(b.fmul(b.load(reg, typ=ty), x, flags=flags), reg)
            b.store(m_new, row.m_slot)
            with for_range(b, _i64(0), _i64(w), let.var.name + ".key") as u:
                with self._as_row(row, {let.tile_max: b.load(at(scores, u), typ=F32)}):
                    self.vars[let.var] = b.add(kb, u)
                    self.refs[let.name] = m_new
                    for k, (slot, term) in enumerate(zip(row.slots, let.terms)):
                        if k in loads:
                            b.store(self._product(let.lane_sum(k)[0]), at(factors[k], u))
                        else:
                            b.store(b.fadd(b.load(slot, typ=F32), self.value(term), flags=flags), slot)
            for k, ld in loads.items():
                for u in range(w):
                    with self._as_row(row, {}):
                        self.vars[let.var], self.vars[let.lane] = b.add(kb, _i64(u)), _i64(0)
                        base = self.index(ld.index)
                    p = splat_vector(b, b.load(at(factors[k], _i64(u)), typ=F32), w)
                    for v, reg in enumerate(row_regs[k]):
                        ptr = b.gep(self.ptrs[ld.buffer], [b.add(base, _i64(v * w))], inbounds=True, source_etype=F32)
                        x = b.load(ptr, typ=vty, align=4)
                        b.store(b.call(fma, [p, x, b.load(reg, typ=vty)]), reg)

        with for_range(b, _i64(0), _i64(full), let.var.name + ".blk", step=w) as kb:
            if panel is not None:
                for g in range(0, len(rows), PANEL_GROUP):
                    group = rows[g:g + PANEL_GROUP]
                    for row, row_regs, s in zip(group, regs[g:], self._panel_scores(let, panel, group, kb)):
                        step(row, row_regs, s, kb)
            else:
                for row, row_regs in zip(rows, regs):
                    keys = [_Row({**row.vars, let.var: b.add(kb, _i64(u))}, {}, row.refs, row.lane_refs)
                            for u in range(w)]
                    step(row, row_regs, self._dot_vector(operands, keys), kb)
        for row, row_regs in zip(rows, regs):
            for k in loads:
                for v, reg in enumerate(row_regs[k]):
                    ptr = b.bitcast(at(row.slots[k], _i64(v * w)), vty.as_pointer())
                    b.store(b.load(reg, typ=vty), ptr, align=4)
        return _i64(full)

    def _plan_panel(self):
        """(the Online, (K load, dot var r, shared factors, whole keys)) when the kernel has an
        Online that steps key blocks (_key_block_plan) whose score operand that reads the key
        is one load (K), the same for every row of the last parallel axis (a batch's keys), and
        whose whole key blocks fit PANEL_FLOATS: its key blocks then read the scores from a K
        panel (per block of w keys a d-major w-wide tile, _pack_panel) in per-thread scratch,
        so a score vector is one broadcast q_d times one panel vector per d, no lane sums.
        None otherwise."""
        P = parallel_depth(self.k, self.ks)
        row_axis = self.k.axes[P - 1] if self.k.axes else None
        for let in self.k.lets:
            plan = self._key_block_plan(let) if isinstance(let, Online) else None
            if plan is None:
                continue
            r, shared, own = plan[0]
            w, n = self._lane_width(), let.var.extent
            full = n - n % w
            if len(own) != 1 or row_axis in value_vars(own[0]) or full * r.extent > PANEL_FLOATS:
                continue
            if any(let.var in atom_vars(a) for a, _ in own[0].index.terms if not isinstance(a, Var)):
                continue
            return let, (own[0], r, shared, full)
        return None

    def _pack_panel(self, let: Online, row: "_Row", panel) -> None:
        """Copy the whole key blocks of K into the panel (key kk, dim d at
        (kk - kk % w) * D + d * w + kk % w) unless the panel already holds this batch's keys
        (the index of K's first element is remembered in panel_base)."""
        K, r, _, full = panel
        b, w, D = self.b, self._lane_width(), r.extent
        with self._as_row(row, {}):
            self.vars[let.var], self.vars[r] = _i64(0), _i64(0)
            first = self.index(K.index)
        with b.if_then(b.icmp_signed("!=", first, b.load(self.panel_base, typ=I64))):
            with for_range(b, _i64(0), _i64(full), "pack.key") as kk:
                lane = b.srem(kk, _i64(w))
                row_start = b.mul(b.sub(kk, lane), _i64(D))
                with for_range(b, _i64(0), _i64(D), "pack.d") as d:
                    with self._as_row(row, {}):
                        self.vars[let.var], self.vars[r] = kk, d
                        x = self._load(K)
                    dst = b.add(row_start, b.add(b.mul(d, _i64(w)), lane))
                    b.store(x, b.gep(self.scratch, [dst], inbounds=True, source_etype=F32))
            b.store(first, self.panel_base)

    def _panel_scores(self, let: Online, panel, group: list["_Row"], kb) -> list:
        """The score vectors of keys kb .. kb + w - 1 for each row of `group`, from the K panel:
        per d one panel vector shared by the group's rows, one FMA per row with its broadcast
        query element (the shared factors that are loads); PANEL_PARTS partial sums per row
        over alternating d keep the FMA chains short; constant factors multiply at the end."""
        K, r, shared, _ = panel
        b, w, D = self.b, self._lane_width(), r.extent
        vty = ir.VectorType(F32, w)
        fma = self._intrinsic(f"llvm.fmuladd.v{w}f32", vty, 3)
        consts = [f for f in shared if isinstance(f, Const)]
        qs = [f for f in shared if not isinstance(f, Const)]
        entry = ir.IRBuilder(self.entry)
        accs = [[entry.alloca(vty) for _ in range(PANEL_PARTS)] for _ in group]     # mem2reg'd
        for parts in accs:
            for acc in parts:
                b.store(ir.Constant(vty, [0.0] * w), acc)
        tile = b.mul(kb, _i64(D))
        with for_range(b, _i64(0), _i64(D), r.name + ".panel", step=PANEL_PARTS) as d0:
            for part in range(PANEL_PARTS):
                d = b.add(d0, _i64(part))
                ptr = b.gep(self.scratch, [b.add(tile, b.mul(d, _i64(w)))], inbounds=True, source_etype=F32)
                kt = b.load(b.bitcast(ptr, vty.as_pointer()), typ=vty, align=4)
                for row, parts in zip(group, accs):
                    with self._as_row(row, {}):
                        self.vars[r] = d
                        q = self._product(qs)
                    b.store(b.call(fma, [splat_vector(b, q, w), kt, b.load(parts[part], typ=vty)]), parts[part])
        out = []
        for parts in accs:
            s = b.load(parts[0], typ=vty)
            for acc in parts[1:]:
                s = b.fadd(s, b.load(acc, typ=vty), flags=FAST)
            for c in consts:
                s = b.fmul(s, splat_vector(b, const(c.value, DType.f32), w), flags=FAST)
            out.append(s)
        return out

    def _dot_operands(self, red: Value, block_var: Var):
        """(r, shared, own) when `red` is a dot product over contiguous f32 rows (sum over one
        var r, a multiple of the vector width, of a product of loads with unit stride in r and
        constants) that a block along `block_var` can share: `own` the loads that read
        block_var (a row's query, a key's row of K), `shared` the rest; None otherwise."""
        w = self._lane_width()
        if (not self.ks.fast_math or not isinstance(red, Reduce) or red.op != Op.SUM or len(red.vars) != 1
                or red.dtype != DType.f32 or red.vars[0].extent % w):
            return None
        r = red.vars[0]
        shared, own = [], []
        stack = [red.body]
        while stack:
            f = stack.pop()
            if isinstance(f, Compute) and f.op == Op.MUL:
                stack += f.srcs
            elif isinstance(f, Const):
                shared.append(f)
            elif (isinstance(f, Load) and f.dtype == DType.f32 and not f.valid and f.index.coeff(r) == 1
                  and not any(r in atom_vars(a) for a, _ in f.index.terms if not isinstance(a, Var))):
                (own if block_var in value_vars(f) else shared).append(f)
            else:
                return None
        return (r, shared, own) if own else None

    def _dot_vector(self, operands, rows: list["_Row"]) -> ir.Value:
        """A vector whose lane u is the dot product `operands` (_dot_operands) for rows[u]: per
        vector of the reduced axis the shared operand is loaded once and each row does one FMA,
        then lane_sums replaces the per-row horizontal sums."""
        r, shared, own = operands
        b, w = self.b, self._lane_width()
        vty = ir.VectorType(F32, w)
        fma = self._intrinsic(f"llvm.fmuladd.v{w}f32", vty, 3)
        entry = ir.IRBuilder(self.entry)
        accs = [entry.alloca(vty) for _ in rows]           # promoted to registers by mem2reg
        for acc in accs:
            b.store(ir.Constant(vty, [0.0] * w), acc)

        def vector(factors):
            out = None
            for f in factors:
                if isinstance(f, Const):
                    x = splat_vector(b, const(f.value, DType.f32), w)
                else:
                    ptr = b.gep(self.ptrs[f.buffer], [self.index(f.index)], inbounds=True, source_etype=F32)
                    x = b.load(b.bitcast(ptr, vty.as_pointer()), typ=vty, align=4)
                out = x if out is None else b.fmul(out, x, flags=FAST)
            return out

        with for_range(b, _i64(0), _i64(r.extent // w), r.name + ".v") as c:
            self.vars[r] = b.mul(c, _i64(w))
            with self._as_row(rows[0], {}):
                kv = vector(shared) if shared else None
            for row, acc in zip(rows, accs):
                with self._as_row(row, {}):
                    qv = vector(own)
                old = b.load(acc, typ=vty)
                b.store(b.fadd(old, qv, flags=FAST) if kv is None else b.call(fma, [qv, kv, old]), acc)
        return lane_sums(b, [b.load(acc, typ=vty) for acc in accs], w)

    def _block_dot(self, red: Value, rows: list["_Row"], row_axis: Var | None) -> list:
        """A block of rows' values of `red` when it is a dot product with one operand shared by
        the rows (attention's score q_u . k_j against one key; _dot_vector); [] otherwise."""
        operands = self._dot_operands(red, row_axis) if 2 <= len(rows) <= self._lane_width() else None
        if operands is None:
            return []
        sums = self._dot_vector(operands, rows)
        return [self.b.extract_element(sums, ir.Constant(ir.IntType(32), u)) for u in range(len(rows))]

    def _product(self, values) -> ir.Value:
        out = ir.Constant(F32, 1.0)
        for v in values:
            out = self.b.fmul(out, self.value(v))
        return out

    def _lane_vector_load(self, let: Online, bs) -> Load | None:
        """The one contiguous f32 load (unit stride in the lane, no mask) the lane factors are,
        when the lane count is a multiple of the vector width: then the lane loop is vector FMAs
        into registers."""
        w = self._lane_width()
        if len(bs) != 1 or not isinstance(bs[0], Load) or let.lane.extent % w:
            return None
        ld = bs[0]
        if ld.dtype != DType.f32 or ld.valid or ld.index.coeff(let.lane) != 1:
            return None
        if any(let.lane in atom_vars(a) for a, _ in ld.index.terms if not isinstance(a, Var)):
            return None
        return ld

    def _lane_width(self) -> int:
        return 16 if self.ks.vector_width >= 16 else 8

    @contextmanager
    def _over_r(self, r: Var | None, a_buf):
        """The loop over a gemv form's r, yielding prod(a) at r (read from a_buf); one step
        yielding 1 when the form has no r (the lane factors are read directly)."""
        if r is None:
            yield ir.Constant(F32, 1.0)
            return
        with for_range(self.b, _i64(0), _i64(r.extent), r.name) as ri:
            self.scopes.append({})
            self.vars[r] = ri
            yield self.b.load(self.b.gep(a_buf, [ri], inbounds=True, source_etype=F32), typ=F32)
            self.scopes.pop()

    def _lane_term(self, let: Online, form, acc, flags) -> None:
        """acc[j] += prod(outer) * sum_r prod(a) * prod(b)(j) for every lane j."""
        b = self.b
        outer, r, a, bs = form
        lanes = let.lane.extent
        ld = self._lane_vector_load(let, bs)
        if ld is not None:
            return self._lane_term_vectors(let, form, ld, acc)
        tmp = ir.IRBuilder(self.entry).alloca(F32, size=lanes)
        with for_range(b, _i64(0), _i64(lanes), "lane.zero") as j:
            b.store(ir.Constant(F32, 0.0), b.gep(tmp, [j], inbounds=True, source_etype=F32))
        with self._over_r(r, self._lane_free_factors(a, r)) as av:
            with for_range(b, _i64(0), _i64(lanes), "lane") as j:
                self.scopes.append({})
                self.vars[let.lane] = j
                ptr = b.gep(tmp, [j], inbounds=True, source_etype=F32)
                prod = b.fmul(av, self._product(bs), flags=flags)
                b.store(b.fadd(b.load(ptr, typ=F32), prod, flags=flags), ptr)
                self.scopes.pop()
        ov = self._product(outer)
        with for_range(b, _i64(0), _i64(lanes), "lane.acc") as j:
            p_acc = b.gep(acc, [j], inbounds=True, source_etype=F32)
            t = b.fmul(ov, b.load(b.gep(tmp, [j], inbounds=True, source_etype=F32), typ=F32), flags=flags)
            b.store(b.fadd(b.load(p_acc, typ=F32), t, flags=flags), p_acc)

    def _emit_stores(self) -> None:
        for st in self.k.stores:
            v = self.value(st.value)
            dt = self.program.buffer(st.buffer).dtype
            ptr = self.b.gep(self.ptrs[st.buffer], [self.index(st.index)], inbounds=True, source_etype=STORAGE[dt])
            self.b.store(self.to_storage(v, dt), ptr)

    def _lane_term_vectors(self, let: Online, form, ld: Load, acc) -> None:
        """The lane sum with the lanes in vector registers: per r one broadcast of the lane-free
        factor and one FMA per vector of the contiguous lane load."""
        b = self.b
        outer, r, a, _ = form
        w = self._lane_width()
        nvec = let.lane.extent // w
        vty = ir.VectorType(F32, w)
        fma = self._intrinsic(f"llvm.fmuladd.v{w}f32", vty, 3)
        acc_ptrs = [b.bitcast(b.gep(acc, [_i64(v * w)], inbounds=True, source_etype=F32), vty.as_pointer())
                    for v in range(nvec)]
        if r is None:           # acc += prod(outer) * b: one FMA per vector, straight into acc
            ovs = splat_vector(b, self._product(outer), w)
            self.vars[let.lane] = _i64(0)
            base = self.index(ld.index)
            for v in range(nvec):
                x = b.load(b.gep(self.ptrs[ld.buffer], [b.add(base, _i64(v * w))], inbounds=True,
                                 source_etype=F32), typ=vty, align=4)
                b.store(b.call(fma, [ovs, x, b.load(acc_ptrs[v], typ=vty, align=4)]), acc_ptrs[v], align=4)
            return
        entry = ir.IRBuilder(self.entry)
        regs = [entry.alloca(vty) for _ in range(nvec)]     # promoted to registers by mem2reg
        for reg in regs:
            b.store(ir.Constant(vty, [0.0] * w), reg)
        with self._over_r(r, self._lane_free_factors(a, r)) as av:
            splat = splat_vector(b, av, w)
            self.vars[let.lane] = _i64(0)
            base = self.index(ld.index)
            for v in range(nvec):
                ptr = b.gep(self.ptrs[ld.buffer], [b.add(base, _i64(v * w))], inbounds=True, source_etype=F32)
                x = b.load(ptr, typ=vty, align=4)
                b.store(b.call(fma, [splat, x, b.load(regs[v], typ=vty)]), regs[v])
        ovs = splat_vector(b, self._product(outer), w)
        for v in range(nvec):
            old = b.load(acc_ptrs[v], typ=vty, align=4)
            b.store(b.call(fma, [ovs, b.load(regs[v], typ=vty), old]), acc_ptrs[v], align=4)

    def _lane_free_factors(self, a, r: Var | None):
        """prod(a) for every r in a stack buffer, in a loop of its own: the lane-free factors
        (P, an exp per key) are computed once, and that loop vectorizes. None without r."""
        if r is None:
            return None
        b = self.b
        a_buf = ir.IRBuilder(self.entry).alloca(F32, size=r.extent)
        with for_range(b, _i64(0), _i64(r.extent), r.name + ".a") as ri:
            self.scopes.append({})
            self.vars[r] = ri
            b.store(self._product(a), b.gep(a_buf, [ri], inbounds=True, source_etype=F32))
            self.scopes.pop()
        return a_buf

    # --- index expressions ----------------------------------------------------------------
    def index(self, e: Lin) -> ir.Value:
        b = self.b
        out = _i64(e.const)
        first = True
        for a, c in e.terms:
            if isinstance(a, Var):
                x = self.vars[a]
            elif isinstance(a, Div):
                x = b.sdiv(self.index(a.arg), _i64(a.divisor))
            else:
                x = b.srem(self.index(a.arg), _i64(a.divisor))
            t = x if c == 1 else b.mul(x, _i64(c), flags=("nsw",))
            out = t if first and e.const == 0 else b.add(out, t, flags=("nsw",))
            first = False
        return out

    # --- values ---------------------------------------------------------------------------
    def value(self, e: Value) -> ir.Value:
        for scope in reversed(self.scopes):
            if e in scope:
                return scope[e]
        v = self._value(e)
        self.scopes[-1][e] = v
        return v

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
        if isinstance(e, Reduce):
            return self._reduce(e)
        return self._compute(e)

    def _load(self, e: Load) -> ir.Value:
        b = self.b
        idx = self.index(e.index)
        ok = None
        for bd in e.valid:
            x = self.index(bd.expr)
            c = b.and_(b.icmp_signed(">=", x, _i64(bd.lo)), b.icmp_signed("<", x, _i64(bd.hi)))
            ok = c if ok is None else b.and_(ok, c)
        if ok is not None:
            idx = b.select(ok, idx, _i64(0))
        ptr = b.gep(self.ptrs[e.buffer], [idx], inbounds=True, source_etype=STORAGE[e.dtype])
        v = self.from_storage(b.load(ptr, typ=STORAGE[e.dtype]), e.dtype)
        if ok is not None:
            v = b.select(ok, v, const(e.fill, e.dtype))
        return v

    def _init(self, e: Reduce) -> ir.Constant:
        ty = COMPUTE[e.dtype]
        if e.op == Op.SUM:
            return ir.Constant(ty, 0.0 if ty == F32 else 0)
        return ir.Constant(ty, float("-inf")) if ty == F32 else ir.Constant(ty, -2 ** 31 if ty == I32 else 0)

    def _combine(self, e: Reduce, acc: ir.Value, x: ir.Value) -> ir.Value:
        b, ty = self.b, COMPUTE[e.dtype]
        flags = FAST if self.ks.fast_math else ()
        if e.op == Op.SUM:
            return b.fadd(acc, x, flags=flags) if ty == F32 else (b.add(acc, x) if ty == I32 else b.or_(acc, x))
        if ty == F32:
            new = b.call(self._intrinsic("llvm.maximum.f32", F32, 2), [acc, x])
            if flags:
                new.fastmath.add("nsz")
            return new
        return b.select(b.icmp_signed(">", x, acc) if ty == I32 else b.icmp_unsigned(">", x, acc), x, acc)

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

    def _intrinsic(self, name: str, ty, nargs: int = 1) -> ir.Function:
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ty, [ty] * nargs), name)
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
            if ty == F32:
                return b.fcmp_ordered("<", xs[0], xs[1])
            return b.icmp_signed("<", xs[0], xs[1]) if ty == I32 else b.icmp_unsigned("<", xs[0], xs[1])
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
        if ty == I32:
            if op == Op.ADD:
                return b.add(xs[0], xs[1])
            if op == Op.MUL:
                return b.mul(xs[0], xs[1])
            if op == Op.MOD:   # C remainder; x % 0 is 0 (like numpy), never undefined behaviour
                zero = b.icmp_signed("==", xs[1], ir.Constant(I32, 0))
                safe = b.select(zero, ir.Constant(I32, 1), xs[1])
                return b.select(zero, ir.Constant(I32, 0), b.srem(xs[0], safe))
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


def const(value, dt: DType) -> ir.Constant:
    ty = COMPUTE[dt]
    if ty == F32:
        v = float(value)
        if dt in (DType.f16, DType.bf16):   # constants are rounded to the storage type too
            import numpy as np
            v = float(np.asarray(v, dtype=dt.np).astype(np.float32))
        return ir.Constant(F32, v)
    if ty == I32:
        return ir.Constant(I32, int(value))
    return ir.Constant(I1, int(bool(value)))


def cast(b: ir.IRBuilder, v: ir.Value, src: DType, dst: DType) -> ir.Value:
    s, d = COMPUTE[src], COMPUTE[dst]
    if s == d:
        return v
    if d == I1:
        return b.fcmp_unordered("!=", v, ir.Constant(F32, 0.0)) if s == F32 else b.icmp_unsigned("!=", v, ir.Constant(s, 0))
    if s == F32 and d == I32:
        return b.fptosi(v, I32)
    if s == I32 and d == F32:
        return b.sitofp(v, F32)
    if s == I1 and d == F32:
        return b.uitofp(v, F32)
    if s == I1 and d == I32:
        return b.zext(v, I32)
    raise NotImplementedError(f"cast {src} -> {dst}")


@dataclass(frozen=True)
class LaunchInfo:
    """How the runtime calls one rendered kernel."""
    buffers: list[str]      # pointer arguments, in order
    extent: int             # the parallel loop runs over [0, extent)
    scratch: int            # floats of per-thread scratch passed after the buffers (0: none)
    chunks_per_thread: int  # how finely to cut [0, extent)


def render_program(program: KernelProgram, schedule: Schedule) -> tuple[str, dict[str, LaunchInfo]]:
    """LLVM IR text of the whole program, and how to launch each kernel."""
    from backends.llvm import matmul
    module = ir.Module(name="saturn")
    triple, layout, _ = jit.target_info()
    module.triple, module.data_layout = triple, layout
    info: dict[str, LaunchInfo] = {}
    widths: dict[str, int] = {}
    for k in program.kernels:
        if any(v.extent == 0 for v in k.axes):
            continue
        ks = schedule.for_kernel(k.name)
        pat = matmul.match(k, program)
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
