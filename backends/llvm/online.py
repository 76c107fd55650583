"""The CPU rendering of ir.kernel.Online (online softmax, flash attention): one pass over the
tiles carrying (max, sums), for one row or a block of rows; key blocks whose scores come out as
one vector (from a packed K panel or by lane sums); lane sums (the attention accumulator) in
vector registers. A mixin of backends.llvm.render.KernelRenderer, which provides value(),
index(), the row scopes and the kernel being rendered."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

from llvmlite import ir

from backends.llvm import mathfns
from backends.llvm.common import (F32, FAST, I64, _i64, const, for_range, lane_sums, parallel_depth,
                                  splat_vector)
from ir.dtypes import DType
from ir.kernel import Compute, Const, Load, Online, Reduce, Value, Var, atom_vars, value_vars
from ir.ops import Op

# largest K panel, floats of scratch per chunk of the parallel loop (4 MB: 16384 keys of 64);
# longer key ranges take the lane-sum scores instead
PANEL_FLOATS = 1 << 20
KEY_VECTORS = 2             # vectors of keys per key block
PANEL_GROUP = 8             # rows whose score vectors share each panel load
PANEL_PARTS = 2             # partial sums per score vector (independent FMA chains)


@dataclass(frozen=True)
class _Panel:
    """The K panel of an Online's key blocks (_plan_panel): K's load, the dot product's variable
    r, the factors shared by the keys (the query, constants) and how many keys it holds."""
    online: Online
    load: Load
    r: Var
    shared: tuple
    keys: int

    @property
    def floats(self) -> int:
        return self.keys * self.r.extent


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


def _leaves_minus_inf(b: ir.IRBuilder, m, m_new):
    """True when the running max grows from -inf: every key so far was -inf, so its terms,
    computed against a max of -inf, are -inf - (-inf) = NaN where the program means 0 (exp of
    -inf minus the row max). The sums restart from 0 instead of rescaling those NaNs."""
    return b.and_(b.fcmp_ordered("==", m, ir.Constant(F32, float("-inf"))), b.fcmp_unordered("!=", m, m_new))


class OnlineRenderer:
    panel: _Panel | None = None       # the kernel's K panel, when it has one: set by render()

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
        start, plan = _i64(0), self._key_block_plan(let)
        if plan is not None:
            start = self._online_key_blocks(let, plan, rows, flags)     # the whole blocks; the rest below
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
                    fresh = _leaves_minus_inf(b, m, m_new)
                    for k, slot in enumerate(row.slots):
                        if let.lane_sum(k):
                            with for_range(b, _i64(0), _i64(lanes), "lane.rescale") as j:
                                p = b.gep(slot, [j], inbounds=True, source_etype=F32)
                                b.store(b.select(fresh, zero, b.fmul(b.load(p, typ=F32), alpha, flags=flags)), p)
                        else:
                            b.store(b.select(fresh, zero, b.fmul(b.load(slot, typ=F32), alpha, flags=flags)), slot)
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
        """(dot operands of the tile max, {sum index: its lane load}) when the Online can step
        blocks of keys (KernelSchedule.keys, _online_key_blocks): its tile max is a dot product
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

    def _online_key_blocks(self, let: Online, plan, rows: list["_Row"], flags) -> ir.Value:
        """The Online's steps over whole blocks of KEY_VECTORS * w keys (w the vector width;
        _key_block_plan), for each row of `rows` in turn inside each block (the block's rows of
        K and V stay in L1 while the rows use them). Per row and block: the scores as
        KEY_VECTORS vectors (from the K panel for groups of PANEL_GROUP rows when the kernel
        has one, _panel_scores; else _dot_vector), the block max, one rescale when the max
        grew, the terms of the block's keys in a loop LLVM vectorizes (their exps as vectors),
        each lane sum's value rows accumulated into vector registers (stored back to the lane
        arrays after the blocks, so the one-key loop can finish the keys left over). Two
        vectors of keys per block halve the per-block work (max, rescale test, state) per key:
        4x128x64 one thread 346 -> 303 us. Returns the first key not done."""
        (operands, loads), b = plan, self.b
        w, n = self._lane_width(), let.var.extent
        kv = KEY_VECTORS if n >= KEY_VECTORS * w else 1
        kw = kv * w                                                   # keys per block
        full = n - n % kw
        vty = ir.VectorType(F32, w)
        fma = self._intrinsic(f"llvm.fmuladd.v{w}f32", vty, 3)
        exp2 = mathfns.define_exp2(self.module)
        maximum = self._intrinsic("llvm.maximum.f32", F32, 2)
        block_max = self._intrinsic(f"llvm.vector.reduce.fmax.v{w}f32", F32, arg=vty)
        any_true = self._intrinsic(f"llvm.vector.reduce.or.v{w}i1", ir.IntType(1), arg=ir.VectorType(ir.IntType(1), w))
        entry = ir.IRBuilder(self.entry)
        scores = entry.alloca(F32, size=kw)
        factors = {k: entry.alloca(F32, size=kw) for k in loads}      # a lane sum's lane-free factor per key
        regs = [{k: [entry.alloca(vty) for _ in range(let.lane.extent // w)] for k in loads} for _ in rows]
        for row_regs in regs:                                         # (mem2reg'd: registers or spills)
            for k in loads:
                for reg in row_regs[k]:
                    b.store(ir.Constant(vty, [0.0] * w), reg)
        panel = self.panel if self.panel is not None and self.panel.online == let else None
        if panel is not None:
            self._pack_panel(let, rows[0], panel)

        def at(buf, u):
            return b.gep(buf, [u], inbounds=True, source_etype=F32)

        def step(row, row_regs, ss, kb):
            for j, s in enumerate(ss):
                b.store(s, b.bitcast(at(scores, _i64(j * w)), vty.as_pointer()), align=4)
            # the block max ignoring NaN (a plain max tree), then NaN if any score is NaN
            top, nan = ss[0], b.fcmp_unordered("uno", ss[0], ss[0])
            for s in ss[1:]:
                top = b.call(self._intrinsic(f"llvm.maxnum.v{w}f32", vty, 2), [top, s], fastmath=("nnan",))
                nan = b.or_(nan, b.fcmp_unordered("uno", s, s))
            t = b.call(block_max, [top], fastmath=("nnan",))
            t = b.select(b.call(any_true, [nan]), ir.Constant(F32, float("nan")), t)
            m = b.load(row.m_slot, typ=F32)
            m_new = b.call(maximum, [m, t])
            with b.if_then(b.fcmp_unordered("!=", m, m_new)):
                alpha = b.call(exp2, [b.fmul(ir.Constant(F32, let.scale), b.fsub(m, m_new))])
                splat = splat_vector(b, alpha, w)
                fresh = _leaves_minus_inf(b, m, m_new)
                for k, slot in enumerate(row.slots):
                    for reg in row_regs.get(k, [slot]):
                        ty, x = (vty, splat) if k in row_regs else (F32, alpha)
                        nothing = ir.Constant(ty, None)          # zeroinitializer
                        b.store(b.select(fresh, nothing, b.fmul(b.load(reg, typ=ty), x, flags=flags)), reg)
            b.store(m_new, row.m_slot)
            with for_range(b, _i64(0), _i64(kw), let.var.name + ".key") as u:
                with self._as_row(row, {let.tile_max: b.load(at(scores, u), typ=F32)}):
                    self.vars[let.var] = b.add(kb, u)
                    self.refs[let.name] = m_new
                    for k, (slot, term) in enumerate(zip(row.slots, let.terms)):
                        if k in loads:
                            b.store(self._product(let.lane_sum(k)[0]), at(factors[k], u))
                        else:
                            b.store(b.fadd(b.load(slot, typ=F32), self.value(term), flags=flags), slot)
            for k, ld in loads.items():
                for u in range(kw):
                    with self._as_row(row, {}):
                        self.vars[let.var], self.vars[let.lane] = b.add(kb, _i64(u)), _i64(0)
                        base = self.index(ld.index)
                    p = splat_vector(b, b.load(at(factors[k], _i64(u)), typ=F32), w)
                    for v, reg in enumerate(row_regs[k]):
                        ptr = b.gep(self.ptrs[ld.buffer], [b.add(base, _i64(v * w))], inbounds=True, source_etype=F32)
                        x = b.load(ptr, typ=vty, align=4)
                        b.store(b.call(fma, [p, x, b.load(reg, typ=vty)]), reg)

        with for_range(b, _i64(0), _i64(full), let.var.name + ".blk", step=kw) as kb:
            if panel is not None:
                for g in range(0, len(rows), PANEL_GROUP):
                    group = rows[g:g + PANEL_GROUP]
                    per_row = [[] for _ in group]
                    for j in range(kv):
                        for acc, s in zip(per_row, self._panel_scores(panel, group, b.add(kb, _i64(j * w)))):
                            acc.append(s)
                    for row, row_regs, ss in zip(group, regs[g:], per_row):
                        step(row, row_regs, ss, kb)
            else:
                for row, row_regs in zip(rows, regs):
                    ss = []
                    for j in range(kv):
                        keys = [_Row({**row.vars, let.var: b.add(kb, _i64(j * w + u))}, {}, row.refs, row.lane_refs)
                                for u in range(w)]
                        ss.append(self._dot_vector(operands, keys))
                    step(row, row_regs, ss, kb)
        for row, row_regs in zip(rows, regs):
            for k in loads:
                for v, reg in enumerate(row_regs[k]):
                    ptr = b.bitcast(at(row.slots[k], _i64(v * w)), vty.as_pointer())
                    b.store(b.load(reg, typ=vty), ptr, align=4)
        return _i64(full)

    def _plan_panel(self) -> _Panel | None:
        """The K panel when the kernel has an Online that steps key blocks (_key_block_plan) whose score operand that reads the key
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
            return _Panel(let, own[0], r, tuple(shared), full)
        return None

    def _pack_panel(self, let: Online, row: "_Row", panel: _Panel) -> None:
        """Copy the whole key blocks of K into the panel (key kk, dim d at
        (kk - kk % w) * D + d * w + kk % w) unless the panel already holds this batch's keys
        (the index of K's first element is remembered in panel_base)."""
        K, r, full = panel.load, panel.r, panel.keys
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

    def _panel_scores(self, panel: _Panel, group: list["_Row"], kb) -> list:
        """The score vectors of keys kb .. kb + w - 1 for each row of `group`, from the K panel:
        per d one panel vector shared by the group's rows, one FMA per row with its broadcast
        query element (the shared factors that are loads); PANEL_PARTS partial sums per row
        over alternating d keep the FMA chains short; constant factors multiply at the end."""
        r, shared = panel.r, panel.shared
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
