"""A blocked, packed matmul path for kernels of the form out[b.., i, j] = epilogue(sum_r A*B).

The frontend's matmul is (a[..., m, k, 1] * b[..., 1, k, n]).sum(-2); lowered, that is a kernel
whose only Let is a full-depth `sum[r](mul(A, B))` with A independent of j and B of i. A and B
may be any f32 expressions (views with div/mod, padding masks, casts): both are packed.
Such kernels are rendered GotoBLAS-style:

    for each batch, for each column block jc (NC), for each depth block pc (KC):
        pack B[pc:pc+KC, jc:jc+NC] into NR-wide panels (zero-padded) in a per-thread scratch
        for each MR-row block of this thread's chunk: pack A[rows, pc:pc+KC]; for each panel:
            MR x NR accumulators in vector registers, one FMA per row and vector per r
    then the epilogue (bias, activation, ...) once per element of the block, in place.

The accumulators continue from the partial sums stored in the output between depth blocks, so
each element's reduction is still one sequential chain over r (deterministic; independent of
the blocking and of threads). Row/column tails use clamped reads and guarded stores.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from llvmlite import ir

from backends.llvm.common import F32, I64, PTR, STORAGE, _i64, for_range, splat_vector
from backends.llvm.render import KernelRenderer
from ir.dtypes import DType
from ir.kernel import (Compute, Kernel, KernelProgram, KernelSchedule, Let, Load, Reduce, Ref, Value, Var, atom_vars,
                       value_vars, walk)
from ir.ops import Op

# MR rows, NR in vectors, KC depth, NC columns, by vector width: on AVX-512 the rows come from
# DEFAULT_ROWS (12 x 2 takes 24 accumulators of its 32 registers and reads each packed B panel
# once per 12 rows); 6 x 2 fits AVX2's 16
DEFAULT_TILE = {16: (12, 2, 256, 1024), 8: (6, 2, 256, 1024)}
# AVX-512 rows per block and the relative time of a row under them: the block that takes least
# for the rows computed with padding. 12 rows against 8: f32 products 1.03-1.20x faster on a
# 2-core Ice Lake-class Xeon (1024^3 1.13x; 512x2048x512 1.20x; 250x384x1537 1.16x; 2026-12-07);
# 8 against 6 on the 2-core EPYC (a 3x3 conv at b8 28x28x64 1.20-1.22 ms against 1.25-1.27; 33
# output channels: 40 rows under 8, 36 under 6, and 0.185 ms under 6 against 0.201; 2026-12-06)
DEFAULT_ROWS = ((12, 0.92), (8, 1.0), (6, 1.04))


@dataclass(frozen=True)
class ProductLayout:
    a: Value        # the operand that does not depend on j (packed per row block)
    b: Value        # the operand that does not depend on i (packed per column panel)
    r: Var
    i: Var
    j: Var
    batch: tuple[Var, ...]


def _plain_in(index, vs: set[Var]) -> bool:
    """Every variable of vs appears in the index only as a plain term."""
    for a, _ in index.terms:
        if not isinstance(a, Var) and atom_vars(a) & vs:
            return False
    return True


def product_layout(kernel: Kernel, program: KernelProgram) -> ProductLayout | None:
    """How a contraction kernel (one Let whose Reduce is a contraction term, `Reduce.contraction`)
    lays out its product for the packed GEMM: which operand varies along the row axis i, which
    along the column axis j, the reduced variable; None for a kernel this GEMM does not render
    (a reduction that is no contraction term, an epilogue that reduces, a strided store)."""
    if len(kernel.axes) < 2 or len(kernel.lets) != 1 or len(kernel.stores) != 1:
        return None
    let, store = kernel.lets[0], kernel.stores[0]
    if not isinstance(let, Let):
        return None
    red = let.value
    if let.depth != len(kernel.axes) or not isinstance(red, Reduce) or not red.contraction:
        return None   # only a contraction term runs as the product kernel
    if len(red.vars) != 1 or red.dtype not in (DType.f32, DType.f16):
        return None
    body = red.body
    if not (isinstance(body, Compute) and body.op == Op.MUL and body.dtype == red.dtype):
        return None
    if any(isinstance(x, (Reduce, Ref)) for s in body.srcs for x in walk(s)):
        return None
    if any(isinstance(x, Reduce) for x in walk(store.value)):
        return None
    i, j, r = kernel.axes[-2], kernel.axes[-1], red.vars[0]
    x, y = body.srcs
    xv, yv = value_vars(x), value_vars(y)
    if j not in xv and i not in yv:
        a, b = x, y
    elif i not in xv and j not in yv:
        a, b = y, x
    else:
        return None
    if not _plain_in(store.index, {i, j}):
        return None
    return ProductLayout(a, b, r, i, j, tuple(kernel.axes[:-2]))


def is_direct(kernel: Kernel, program: KernelProgram) -> bool:
    """Whole depth in one block, epilogue straight from the register tile: used when the
    output cannot hold f32 partial sums or the products round to a half type."""
    return program.buffer(kernel.stores[0].buffer).dtype != DType.f32 or kernel.lets[0].value.dtype != DType.f32


def blocking(kernel: Kernel, program: KernelProgram, ks: KernelSchedule) -> tuple[int, int, int, int, int]:
    mr, nr, kc, nc, w = tile_of(ks, kernel.axes[-2].extent)
    if is_direct(kernel, program):
        kc = kernel.lets[0].value.vars[0].extent
        nc = max(nr, min(nc, (1 << 18) // kc // nr * nr))   # keep the packed panel near 1 MB
    return mr, nr, kc, nc, w


def tile_of(ks: KernelSchedule, rows: int) -> tuple[int, int, int, int, int]:
    """(MR, NR, KC, NC, W) for a product of `rows` rows: rows per block, columns (a multiple of
    the vector width W), depth, column block."""
    w = 16 if ks.vector_width >= 16 else 8
    default = DEFAULT_TILE[w]
    if w == 16:
        default = (min(DEFAULT_ROWS, key=lambda r: -(-rows // r[0]) * r[0] * r[1])[0],) + default[1:]
    mr, nrv, kc, nc = (tuple(ks.tile) + default[len(ks.tile):]) if ks.tile else default
    nr = nrv * w
    nc = max(nr, nc // nr * nr)
    return mr, nr, kc, nc, w


def launch_extent(kernel: Kernel, ks: KernelSchedule) -> int:
    """Parallel units: batch x row blocks."""
    mr = tile_of(ks, kernel.axes[-2].extent)[0]
    return math.prod(v.extent for v in kernel.axes[:-2]) * -(-kernel.axes[-2].extent // mr)


def scratch_floats(kernel: Kernel, program: KernelProgram, ks: KernelSchedule) -> int:
    mr, nr, kc, nc, w = blocking(kernel, program, ks)
    n = kernel.axes[-1].extent
    return kc * min(nc, -(-n // nr) * nr) + mr * kc   # B panels, then the packed A block


class MatmulRenderer(KernelRenderer):
    """Renders a contraction kernel laid out by `product_layout`; signature (buffers..., scratch, start, end)."""

    def __init__(self, module, program, kernel, ks, pattern: ProductLayout):
        super().__init__(module, program, kernel, ks)
        self.pat = pattern

    def render(self) -> None:
        k, pat = self.k, self.pat
        mr, nr, kc, nc, w = blocking(k, self.program, self.ks)
        direct = is_direct(k, self.program)
        self.half_products = k.lets[0].value.dtype == DType.f16
        vty = ir.VectorType(F32, w)
        M, N, K = pat.i.extent, pat.j.extent, pat.r.extent
        nb = -(-M // mr)
        fnty = ir.FunctionType(ir.VoidType(), [PTR] * (len(self.buffers) + 1) + [I64, I64])
        fn = self.fn = ir.Function(self.module, fnty, k.name)
        fn.attributes.add("nounwind")
        for a in fn.args[:len(self.buffers) + 1]:
            a.add_attribute("noalias")
        self.ptrs = dict(zip(self.buffers, fn.args))
        scratch = fn.args[len(self.buffers)]
        start, end = fn.args[-2], fn.args[-1]
        self.entry = fn.append_basic_block("entry")
        bodyblock = fn.append_basic_block("body")
        b = self.b = ir.IRBuilder(bodyblock)
        eb = ir.IRBuilder(self.entry)
        tile = eb.alloca(F32, size=mr * nr)
        self.column_atoms = self._column_atoms()
        self.column_arrays = [eb.alloca(I64, size=nr) for _ in self.column_atoms]
        self.scopes.append({})
        store = k.stores[0]
        out = self.ptrs[store.buffer]
        let = k.lets[0]
        fma = self._intrinsic(f"llvm.fma.v{w}f32", vty, 3)
        fast_c = not is_direct(k, self.program) and store.index.coeff(pat.j) == 1
        apack = b.gep(scratch, [_i64(kc * min(nc, -(-N // nr) * nr))], inbounds=True, source_etype=F32)

        def gep(ptr, idx, ty=F32):
            return b.gep(ptr, [idx], inbounds=True, source_etype=ty)

        def smin(x, y):
            return b.select(b.icmp_signed("<", x, y), x, y)

        first_batch = b.sdiv(start, _i64(nb))
        last_batch = b.sdiv(b.sub(end, _i64(1)), _i64(nb))
        with for_range(b, first_batch, b.add(last_batch, _i64(1)), "bt") as bt:
            self.scopes.append({})
            rest = bt
            for v in reversed(pat.batch):
                self.vars[v] = b.srem(rest, _i64(v.extent))
                rest = b.sdiv(rest, _i64(v.extent))
            lo_u = b.sub(b.select(b.icmp_signed(">", start, b.mul(bt, _i64(nb))), start, b.mul(bt, _i64(nb))),
                         b.mul(bt, _i64(nb)))
            hi_u = b.sub(smin(end, b.mul(b.add(bt, _i64(1)), _i64(nb))), b.mul(bt, _i64(nb)))
            with for_range(b, _i64(0), _i64(-(-N // nc)), "jcb") as jcb:
                jc = b.mul(jcb, _i64(nc))
                ncur = smin(_i64(nc), b.sub(_i64(N), jc))
                npan = b.sdiv(b.add(ncur, _i64(nr - 1)), _i64(nr))
                with for_range(b, _i64(0), _i64(-(-K // kc)), "pcb") as pcb:
                    pc = b.mul(pcb, _i64(kc))
                    kcur = smin(_i64(kc), b.sub(_i64(K), pc))
                    # pack B[pc:pc+kcur, jc:jc+ncur] as panels [jp][rr][NR], zero beyond N;
                    # panels wholly inside [0, N) take a branch-free copy that vectorizes
                    with for_range(b, _i64(0), npan, "jp") as jp:
                        inside = b.icmp_signed("<=", b.add(jc, b.mul(b.add(jp, _i64(1)), _i64(nr))), _i64(N))
                        with b.if_else(inside) as (then, otherwise):
                            with then:
                                self._pack_b(scratch, jc, jp, pc, kc, nr, N, guarded=False, kcur=kcur)
                            with otherwise:
                                self._pack_b(scratch, jc, jp, pc, kc, nr, N, guarded=True, kcur=kcur)
                    with for_range(b, lo_u, hi_u, "blk") as blk:
                        i0 = b.mul(blk, _i64(mr))
                        # pack A[i0:i0+MR, pc:pc+kcur] as [MR][KC] once per row block (rows past M
                        # repeat row M-1); row by row, so a K-contiguous A packs with vector copies
                        for m in range(mr):
                            self.scopes.append({})
                            self.vars[pat.i] = smin(b.add(i0, _i64(m)), _i64(M - 1))
                            with for_range(b, _i64(0), kcur, f"ra{m}") as ra:
                                self.scopes.append({})
                                self.vars[pat.r] = b.add(pc, ra)
                                b.store(self.value(pat.a), gep(apack, b.add(_i64(m * kc), ra)))
                                self.scopes.pop()
                            self.scopes.pop()
                        with for_range(b, _i64(0), npan, "jp2") as jp:
                            j0 = b.add(jc, b.mul(jp, _i64(nr)))
                            full = b.and_(b.icmp_signed("<=", b.add(i0, _i64(mr)), _i64(M)),
                                          b.icmp_signed("<=", b.add(j0, _i64(nr)), _i64(N)))
                            if direct:
                                for idx in range(mr * nr // w):
                                    b.store(ir.Constant(vty, [0.0] * w),
                                            b.bitcast(gep(tile, _i64(idx * w)), ir.PointerType(vty)), align=4)
                            elif not fast_c:
                                self._tile_copy(tile, i0, j0, mr, nr, M, N, store, out, load_from_c=pcb)
                            panel = b.mul(b.mul(jp, _i64(kc)), _i64(nr))
                            if fast_c:   # full tiles read and write C rows as vectors directly
                                accs0 = self._phi_tiles(full, lambda: self._c_vectors(i0, j0, pcb, vty, mr, nr, w, store, out),
                                                        lambda: self._tile_vectors(tile, i0, j0, pcb, vty, mr, nr, w, M, N, store, out))
                            else:
                                accs0 = self._load_tile(tile, vty, mr, nr, w)
                            accs = self._kloop(b, kcur, accs0, lambda rr, accs: self._step(
                                b, rr, accs, scratch, panel, apack, fma, vty, mr, nr, w, kc))
                            if fast_c:
                                with b.if_else(full) as (then, otherwise):
                                    with then:
                                        self._store_c(accs, i0, j0, mr, nr, w, store, out)
                                    with otherwise:
                                        self._store_tile(accs, tile, mr, nr, w)
                                        self._tile_copy(tile, i0, j0, mr, nr, M, N, store, out, load_from_c=None)
                            else:
                                self._store_tile(accs, tile, mr, nr, w)
                                if direct:
                                    self._tile_epilogue(tile, i0, j0, mr, nr, M, N, store, out, let)
                                else:
                                    self._tile_copy(tile, i0, j0, mr, nr, M, N, store, out, load_from_c=None)
                # epilogue over this thread's rows x this column block, in place
                if not direct and store.value != Ref(let.name, let.value.dtype):
                    row_lo = b.mul(lo_u, _i64(mr))
                    row_hi = smin(b.mul(hi_u, _i64(mr)), _i64(M))
                    with for_range(b, row_lo, row_hi, "ei") as ei:
                        with for_range(b, jc, b.add(jc, ncur), "ej") as ej:
                            self.scopes.append({})
                            self.vars[pat.i], self.vars[pat.j] = ei, ej
                            addr = gep(out, self.index(store.index))
                            self.refs[let.name] = b.load(addr, typ=F32)
                            b.store(self.value(store.value), addr)
                            self.scopes.pop()
            self.scopes.pop()
        b.ret_void()
        eb.branch(bodyblock)

    def _column_atoms(self) -> list:
        """The div/mod atoms of B's load indices and bounds that depend on the column j but not
        on the depth r (a convolution window's h = j // W, w = j % W): the same for every depth
        row of a panel, so the pack computes them once per panel column; its copy loop is then
        only adds, compares and consecutive (masked) loads, which vectorize."""
        pat = self.pat
        found: dict = {}
        stack = []
        for x in walk(pat.b):
            if isinstance(x, Load):
                stack += [x.index] + [bd.expr for bd in x.valid]
        while stack:
            lin = stack.pop()
            for a, _ in lin.terms:
                if isinstance(a, Var):
                    continue
                stack.append(a.arg)
                vs = atom_vars(a)
                if pat.j in vs and pat.r not in vs and pat.i not in vs:
                    found.setdefault(a, None)
        return list(found)

    def _pack_b(self, scratch, jc, jp, pc, kc, nr, N, guarded: bool, kcur) -> None:
        b, pat = self.b, self.pat

        def column(jj):
            j = b.add(jc, b.add(b.mul(jp, _i64(nr)), jj))
            if not guarded:
                return j, None
            ok = b.icmp_signed("<", j, _i64(N))
            return b.select(ok, j, _i64(0)), ok

        def arrays_at(jj):
            return [b.gep(arr, [jj], inbounds=True, source_etype=I64) for arr in self.column_arrays]

        if self.column_atoms:   # this panel's column atoms, once
            with for_range(b, _i64(0), _i64(nr), "jq") as jj:
                self.scopes.append({})
                self.vars[pat.j], _ = column(jj)
                for a, ptr in zip(self.column_atoms, arrays_at(jj)):
                    b.store(self.atom(a), ptr)
                self.scopes.pop()
        with for_range(b, _i64(0), kcur, "rr") as rr:
            self.scopes.append({})
            with for_range(b, _i64(0), _i64(nr), "jj") as jj:
                self.scopes.append({})
                j, ok = column(jj)
                self.vars[pat.r] = b.add(pc, rr)
                self.vars[pat.j] = j
                self.atom_values = {a: b.load(ptr, typ=I64) for a, ptr in zip(self.column_atoms, arrays_at(jj))}
                val = self.value(pat.b)
                self.atom_values = {}
                if ok is not None:
                    val = b.select(ok, val, ir.Constant(F32, 0.0))
                dst = b.add(b.mul(b.add(b.mul(jp, _i64(kc)), rr), _i64(nr)), jj)
                b.store(val, b.gep(scratch, [dst], inbounds=True, source_etype=F32))
                self.scopes.pop()
            self.scopes.pop()

    # --- accumulator tiles ---------------------------------------------------------------
    def _load_tile(self, tile, vty, mr, nr, w):
        b = self.b
        return [[b.load(b.bitcast(b.gep(tile, [_i64(m * nr + t * w)], inbounds=True, source_etype=F32),
                                  ir.PointerType(vty)), typ=vty, align=4) for t in range(nr // w)] for m in range(mr)]

    def _store_tile(self, accs, tile, mr, nr, w):
        b = self.b
        for m in range(mr):
            for t in range(nr // w):
                ptr = b.gep(tile, [_i64(m * nr + t * w)], inbounds=True, source_etype=F32)
                b.store(accs[m][t], b.bitcast(ptr, ir.PointerType(accs[m][t].type)), align=4)

    def _c_row(self, i0, j0, m, store, out):
        self.scopes.append({})
        self.vars[self.pat.i], self.vars[self.pat.j] = self.b.add(i0, _i64(m)), j0
        base = self.index(store.index)
        self.scopes.pop()
        return base

    def _c_vectors(self, i0, j0, pcb, vty, mr, nr, w, store, out):
        """The C tile as vectors (zeros on the first depth block)."""
        b = self.b
        first = b.icmp_signed("==", pcb, _i64(0))
        zero = ir.Constant(vty, [0.0] * w)
        rows = []
        for m in range(mr):
            base = self._c_row(i0, j0, m, store, out)
            row = []
            for t in range(nr // w):
                ptr = b.gep(out, [b.add(base, _i64(t * w))], inbounds=True, source_etype=F32)
                row.append(b.select(first, zero, b.load(b.bitcast(ptr, ir.PointerType(vty)), typ=vty, align=4)))
            rows.append(row)
        return rows

    def _tile_vectors(self, tile, i0, j0, pcb, vty, mr, nr, w, M, N, store, out):
        self._tile_copy(tile, i0, j0, mr, nr, M, N, store, out, load_from_c=pcb)
        return self._load_tile(tile, vty, mr, nr, w)

    def _store_c(self, accs, i0, j0, mr, nr, w, store, out):
        b = self.b
        for m in range(mr):
            base = self._c_row(i0, j0, m, store, out)
            for t in range(nr // w):
                ptr = b.gep(out, [b.add(base, _i64(t * w))], inbounds=True, source_etype=F32)
                b.store(accs[m][t], b.bitcast(ptr, ir.PointerType(accs[m][t].type)), align=4)

    def _phi_tiles(self, cond, then_fn, else_fn):
        """Vectors from then_fn() where cond holds, else from else_fn(), joined with phis."""
        b = self.b
        with b.if_else(cond) as (then, otherwise):
            with then:
                a = then_fn()
                a_end = b.block
            with otherwise:
                c = else_fn()
                c_end = b.block
        out = []
        for ra, rc in zip(a, c):
            row = []
            for va, vc in zip(ra, rc):
                p = b.phi(va.type)
                p.add_incoming(va, a_end)
                p.add_incoming(vc, c_end)
                row.append(p)
            out.append(row)
        return out

    def _kloop(self, b, kcur, accs0, step):
        """for rr in [0, kcur): accs = step(rr, accs), accumulators carried in phis."""
        pre = b.block
        head = b.append_basic_block("k.head")
        body = b.append_basic_block("k.body")
        done = b.append_basic_block("k.done")
        b.branch(head)
        b.position_at_end(head)
        rr = b.phi(I64, "rr")
        rr.add_incoming(_i64(0), pre)
        phis = [[b.phi(a.type) for a in row] for row in accs0]
        for row, row0 in zip(phis, accs0):
            for p, a in zip(row, row0):
                p.add_incoming(a, pre)
        b.cbranch(b.icmp_signed("<", rr, kcur), body, done)
        b.position_at_end(body)
        new = step(rr, phis)
        nxt = b.add(rr, _i64(1))
        rr.add_incoming(nxt, b.block)
        for row, nrow in zip(phis, new):
            for p, a in zip(row, nrow):
                p.add_incoming(a, b.block)
        b.branch(head)
        b.position_at_end(done)
        return phis

    def _step(self, b, rr, accs, scratch, panel, apack, fma, vty, mr, nr, w, kc):
        off = b.add(panel, b.mul(rr, _i64(nr)))
        bv = [b.load(b.gep(scratch, [b.add(off, _i64(t * w))], inbounds=True, source_etype=F32), typ=vty, align=4)
              for t in range(nr // w)]
        new = []
        for m in range(mr):
            av = b.load(b.gep(apack, [b.add(rr, _i64(m * kc))], inbounds=True, source_etype=F32), typ=F32)
            splat = splat_vector(b, av, w)
            if self.half_products:   # the product rounds to f16 before it is summed in f32
                hty = ir.VectorType(ir.HalfType(), w)
                new.append([b.fadd(accs[m][t], b.fpext(b.fptrunc(b.fmul(splat, bv[t]), hty), vty))
                            for t in range(nr // w)])
            else:
                new.append([b.call(fma, [splat, bv[t], accs[m][t]]) for t in range(nr // w)])
        return new

    def _tile_epilogue(self, tile, i0, j0, mr, nr, M, N, store, out, let):
        """out <- epilogue(tile) for positions inside [0, M) x [0, N)."""
        b = self.b
        dt = self.program.buffer(store.buffer).dtype
        with for_range(b, _i64(0), _i64(mr), "em") as tm:
            with for_range(b, _i64(0), _i64(nr), "ej") as tj:
                self.scopes.append({})
                i, j = b.add(i0, tm), b.add(j0, tj)
                ok = b.and_(b.icmp_signed("<", i, _i64(M)), b.icmp_signed("<", j, _i64(N)))
                with b.if_then(ok):
                    self.vars[self.pat.i], self.vars[self.pat.j] = i, j
                    acc = b.load(b.gep(tile, [b.add(b.mul(tm, _i64(nr)), tj)], inbounds=True, source_etype=F32), typ=F32)
                    self.refs[let.name] = self.round(acc, let.value.dtype)
                    addr = b.gep(out, [self.index(store.index)], inbounds=True, source_etype=STORAGE[dt])
                    b.store(self.to_storage(self.value(store.value), dt), addr)
                self.scopes.pop()

    def _tile_copy(self, tile, i0, j0, mr, nr, M, N, store, out, load_from_c):
        """load_from_c given (the depth-block index): tile <- C (or 0 on the first block);
        else C <- tile. Only positions inside [0, M) x [0, N) touch C."""
        b = self.b
        with for_range(b, _i64(0), _i64(mr), "tm") as tm:
            with for_range(b, _i64(0), _i64(nr), "tj") as tj:
                self.scopes.append({})
                i, j = b.add(i0, tm), b.add(j0, tj)
                ok = b.and_(b.icmp_signed("<", i, _i64(M)), b.icmp_signed("<", j, _i64(N)))
                self.vars[self.pat.i] = b.select(ok, i, _i64(0))
                self.vars[self.pat.j] = b.select(ok, j, _i64(0))
                slot = b.gep(tile, [b.add(b.mul(tm, _i64(nr)), tj)], inbounds=True, source_etype=F32)
                addr = b.gep(out, [self.index(store.index)], inbounds=True, source_etype=F32)
                if load_from_c is not None:
                    use = b.and_(ok, b.icmp_signed(">", load_from_c, _i64(0)))
                    c = b.load(addr, typ=F32)
                    b.store(b.select(use, c, ir.Constant(F32, 0.0)), slot)
                else:
                    with b.if_then(ok):
                        b.store(b.load(slot, typ=F32), addr)
                self.scopes.pop()
