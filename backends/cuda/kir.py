"""Render the backend-neutral kernel IR (`ir/kernel.py`, built by `ir.lower.lower`) to CUDA.

Every IR kernel becomes one CUDA kernel: its leading axes, up to the shallowest `Let` that sits
inside the loop nest, are spread over threads (one thread per iteration); the remaining axes
are sequential loops in the thread; each `Let` is computed at its depth and reused; a `Reduce`
is a loop in the thread, in the row-major order of its variables (deterministic). Row kernels
(float reductions or `Online` loops at the row's depth, elementwise work inside the row: softmax,
layernorm, the online-softmax rules' forms) run one block per row instead: the block's threads
split each row reduction (and each Online's tiles), combine in a fixed order (block_sum /
block_max; Onlines merge their (max, sums) states with the same rescale), then write the row. This is the
general path that works for any graph; the templates in `render.py` are the fast paths.
Selected by `Schedule(lowering="kernel_ir")`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ir.dtypes import DType
from ir.kernel import (Compute, Const, Gather, Iota, Kernel, KernelProgram, Let, Lin, Load, Online, Reduce,
                       Ref)
from ir.ops import Op
from backends.cuda.cexpr import (C_COMPUTE, C_STORAGE, Emitter, c_index, c_literal, load_expr, reduce_combine,
                                 reduce_identity, round_to, store_value)

BLOCK = 256


def _lin(e: Lin) -> str:
    """An index expression as C (cexpr.c_index: 32-bit divisions where the ranges allow)."""
    return f"({c_index(e)})"


class _ValueEmitter:
    """Statements computing kernel-IR values; shared values are computed once per scope."""

    def __init__(self, lets: dict[str, str]):
        self.lines: list[str] = []
        self.indent = "  "
        self.lets = lets                     # Let name -> C variable
        self.memo: list[dict] = [{}]
        self.n = 0
        self.lanes = False      # split the next float reduction over the warp's 32 lanes

    def emit(self, s: str) -> None:
        self.lines.append(self.indent + s)

    def tmp(self, ctype: str, expr: str) -> str:
        name = f"v{self.n}"
        self.n += 1
        self.emit(f"{ctype} {name} = {expr};")
        return name

    def value(self, e) -> str:
        for scope in reversed(self.memo):
            if e in scope:
                return scope[e]
        name = self._value(e)
        self.memo[-1][e] = name
        return name

    def _value(self, e) -> str:
        if isinstance(e, Const):
            return c_literal(e.value, e.dtype)
        if isinstance(e, Ref):
            return self.lets[e.name]
        if isinstance(e, Load):
            load = load_expr(e.buffer, _lin(e.index), e.dtype)
            if not e.valid:
                return self.tmp(C_COMPUTE[e.dtype], load)
            cond = " && ".join(f"({_lin(b.expr)} >= {b.lo}LL && {_lin(b.expr)} < {b.hi}LL)" for b in e.valid)
            fill = c_literal(e.fill if e.dtype.is_float else int(e.fill), e.dtype)
            return self.tmp(C_COMPUTE[e.dtype], f"(({cond}) ? {load} : {fill})")
        if isinstance(e, Iota):
            return self.tmp("int", f"((int){_lin(e.index)})")
        if isinstance(e, Gather):   # the load runs only for an index inside [0, extent)
            j = self.value(e.index)
            load = load_expr(e.buffer, f"({_lin(e.base)} + {e.stride}LL * (long long){j})", e.dtype)
            zero = c_literal(0.0 if e.dtype.is_float else (False if e.dtype == DType.bool else 0), e.dtype)
            return self.tmp(C_COMPUTE[e.dtype], f"(({j} >= 0 && {j} < {e.extent}) ? {load} : {zero})")
        if isinstance(e, Compute):
            return self._compute(e)
        if isinstance(e, Reduce):
            return self._reduce(e)
        raise TypeError(e)

    def _compute(self, e: Compute) -> str:
        ct = C_COMPUTE[e.dtype]
        xs = [self.value(s) for s in e.srcs]
        if e.op == Op.CAST:
            return self.tmp(ct, Emitter._cast(xs[0], e.srcs[0].dtype, e.dtype))
        if e.op == Op.CMPLT:
            return self.tmp("bool", f"({xs[0]} < {xs[1]})")
        if e.op == Op.WHERE:
            return self.tmp(ct, f"({xs[0]} ? {xs[1]} : {xs[2]})")
        return self.tmp(ct, Emitter.math(e.op, xs, e.dtype))

    def _reduce(self, e: Reduce) -> str:
        ct = C_COMPUTE[e.dtype]
        acc = self.tmp(ct, reduce_identity(e.op, e.dtype))
        outer = self.lanes
        # nested reductions stay in the lane; warp_sum / warp_max are the prelude's float ones
        lanes, self.lanes = outer and e.dtype.compute == DType.f32, False
        self._accumulate(acc, e, *(("lane", 32) if lanes else ("0", 1)))
        if lanes:   # fixed-order butterfly, then lane 0's bits for every lane
            combine = "warp_sum" if e.op == Op.SUM else "warp_max"
            self.emit(f"{acc} = __shfl_sync(0xffffffffu, {combine}({acc}), 0);")
        self.lanes = outer
        return self.tmp(ct, round_to(acc, e.dtype) if e.dtype.is_float else acc)

    def _accumulate(self, acc: str, e: Reduce, start: str, step) -> None:
        """acc combined with e's body over e's variables, in their order; the first one runs
        from `start` by `step` (a thread's or lane's share), the others in full."""
        for i, v in enumerate(e.vars):
            lo, by = (start, step) if i == 0 else ("0", 1)
            self.emit(f"for (long long {v.name} = {lo}; {v.name} < {v.extent}LL; {v.name} += {by}) {{")
            self.indent += "  "
        self.memo.append({})
        x = self.value(e.body)
        self.emit(f"{acc} = {reduce_combine(e.op, acc, x, e.dtype)};")
        self.memo.pop()
        for _ in e.vars:
            self.indent = self.indent[:-2]
            self.emit("}")

    def online(self, l: Online, threads: int = 0) -> None:
        """The tuple-accumulator loop (ir.kernel.Online): sequential in the thread, or with
        `threads` > 0 spread over the block: warp w takes tiles w, w + warps, ..., its lanes
        split each tile's reductions (coalesced reads), and the warps' (max, sums) states are
        merged with the same rescale in a fixed order. A lane sum (sequential only) is a local
        array over the lane axis, updated in its gemv form; Ref reads it at the lane's value."""
        assert not (threads and l.lane is not None), "lane sums run in the thread (_block_rows)"
        self.emit(f"float {l.name} = -__int_as_float(0x7f800000);")
        for k, (name, t) in enumerate(zip(l.sums, l.terms)):
            if l.lane_sum(k):
                n = l.lane.extent
                self.emit(f"float {name}[{n}];")
                self.emit(f"for (int j = 0; j < {n}; ++j) {name}[j] = 0.f;")
                self.lets[name] = round_to(f"{name}[{l.lane.name}]", t.dtype)
            else:
                self.emit(f"float {name} = 0.f;")
        v = l.var.name
        start, step = (f"(threadIdx.x >> 5)", threads // 32) if threads else ("0", 1)
        self.emit(f"for (long long {v} = {start}; {v} < {l.var.extent}LL; {v} += {step}) {{")
        self.indent += "  "
        self.memo.append({})
        self.lanes = bool(threads)
        y = self.value(l.tile_max)
        self.emit(f"const float {l.name}_new = max_nan({l.name}, {y});")
        self.emit(f"const float {l.name}_a = {self._rescale(l, l.name, l.name + '_new')};")
        self.emit(f"const bool {l.name}_z = {self._fresh(l.name, l.name + '_new')};")
        old = self.lets[l.name]
        self.lets[l.name] = f"{l.name}_new"     # the terms read the running max
        scalar = [(name, self.value(t)) for k, (name, t) in enumerate(zip(l.sums, l.terms)) if not l.lane_sum(k)]
        self.lanes = False
        for name, t in scalar:
            self.emit(f"{name} = ({l.name}_z ? 0.f : {name} * {l.name}_a) + {t};")
        for k, name in enumerate(l.sums):
            if l.lane_sum(k):
                self._lane_update(l, name, l.lane_sum(k))
        self.lets[l.name] = old
        self.emit(f"{l.name} = {l.name}_new;")
        self.memo.pop()
        self.indent = self.indent[:-2]
        self.emit("}")
        if threads:   # every lane of a warp holds its warp's state: lane 0 speaks for it
            self.emit(f"const float {l.name}_all = block_max({l.name}, red_sh);")
            self.emit(f"const float {l.name}_a = {self._rescale(l, l.name, l.name + '_all')};")
            for name in l.sums:
                self.emit(f"{name} = block_sum(lane == 0 && !({self._fresh(l.name, l.name + '_all')}) ? "
                          f"{name} * {l.name}_a : 0.f, red_sh);")
            self.emit(f"{l.name} = {l.name}_all;")
        for k, (name, t) in enumerate(zip(l.sums, l.terms)):
            if not l.lane_sum(k) and t.dtype.is_float and t.dtype.name != "f32":
                self.emit(f"{name} = {round_to(name, t.dtype)};")

    def _lane_update(self, l: Online, name: str, form) -> None:
        """name[j] = name[j] * alpha + prod(outer) * sum_r prod(a) * prod(b)(j) for every lane j
        (without r: + prod(outer) * prod(b)(j))."""
        outer, r, a, b = form
        n, lane = l.lane.extent, l.lane.name
        self.emit(f"for (long long {lane} = 0; {lane} < {n}LL; ++{lane}) "
                  f"{name}[{lane}] = {l.name}_z ? 0.f : {name}[{lane}] * {l.name}_a;")
        ov = self._product(outer)
        loops = 1
        if r is not None:
            self.emit(f"for (long long {r.name} = 0; {r.name} < {r.extent}LL; ++{r.name}) {{")
            self.indent += "  "
            self.memo.append({})
            loops = 2
        av = self._product(a)
        self.emit(f"for (long long {lane} = 0; {lane} < {n}LL; ++{lane}) {{")
        self.indent += "  "
        self.memo.append({})
        self.emit(f"{name}[{lane}] += {ov} * {av} * {self._product(b)};")
        for _ in range(loops):
            self.memo.pop()
            self.indent = self.indent[:-2]
            self.emit("}")

    def _product(self, values) -> str:
        return "(" + " * ".join([self.value(x) for x in values] or ["1.f"]) + ")"

    @staticmethod
    def _fresh(old: str, new: str) -> str:
        """The running max grows from -inf: the sums so far hold -inf - (-inf) = NaN terms of keys
        that contribute 0 to the program; they restart from 0 instead of being rescaled."""
        return f"({old} == -__int_as_float(0x7f800000) && {new} != {old})"

    @staticmethod
    def _rescale(l: Online, old: str, new: str) -> str:
        return f"(({old} == {new}) ? 1.f : exp2f({c_literal(l.scale, DType.f32)} * ({old} - {new})))"

    def block_reduce(self, name: str, e: Reduce, threads: int) -> None:
        """A row reduction spread over the block: thread i takes i, i + threads, ... of the first
        variable (the rest in order), then a fixed-order block combine."""
        combine = "block_sum" if e.op == Op.SUM else "block_max"
        acc = self.tmp("float", reduce_identity(e.op, e.dtype))
        self._accumulate(acc, e, "threadIdx.x", threads)
        self.emit(f"const float {name} = {round_to(f'{combine}({acc}, red_sh)', e.dtype)};")


@dataclass
class KIRLaunch:
    name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    buffers: list[str]          # kernel-IR buffer names, in parameter order
    detail: str


def _block_rows(k: Kernel, p: int) -> bool:
    """One block per row: the kernel has a row (axes outside depth p) with work inside it, and
    the lets at depth p are float reductions or Onlines the block's threads can share."""
    if not 1 <= p < len(k.axes):
        return False
    row = [l for l in k.lets if l.depth == p]
    return bool(row) and all((isinstance(l, Online) and l.lane is None) or
                             (isinstance(l, Let) and isinstance(l.value, Reduce) and l.value.dtype.compute == DType.f32)
                             for l in row)


def render_kernel(k: Kernel, program: KernelProgram, name: str, row_threads: int = 256) -> tuple[str, KIRLaunch]:
    axes = list(k.axes)
    inner_lets = [l.depth for l in k.lets if l.depth >= 1]
    p = min(inner_lets + [len(axes)])              # axes spread over threads (or blocks)
    used = sorted(k.reads() | k.writes(), key=lambda b: [x.name for x in program.buffers].index(b))
    written = k.writes()
    params = []
    for b in used:
        buf = program.buffer(b)
        const = "" if b in written else "const "
        params.append(f"{const}{C_STORAGE[buf.dtype]}* __restrict__ {b}")
    npar = math.prod(v.extent for v in axes[:p])
    lets = {l.name: l.name for l in k.lets}
    lets.update({name: name for l in k.lets if isinstance(l, Online) for name in l.sums})
    em = _ValueEmitter(lets)
    block = row_threads > 0 and _block_rows(k, p)
    threads = row_threads if block else BLOCK
    if block:
        em.emit("const long long t = blockIdx.x;")
        em.emit("const int lane = threadIdx.x & 31;")
        em.emit("__shared__ float red_sh[33];")
    else:
        em.emit(f"const long long t = (long long)blockIdx.x * {BLOCK} + threadIdx.x;")
        em.emit(f"if (t >= {npar}LL) return;")
    inner = 1
    for v in reversed(axes[:p]):
        em.emit(f"const long long {v.name} = (t / {inner}LL) % {v.extent}LL;")
        inner *= v.extent

    def emit_let(l, shared: bool):
        if isinstance(l, Online):
            em.online(l, threads if shared else 0)
        elif shared and isinstance(l.value, Reduce):
            em.block_reduce(l.name, l.value, threads)
        else:
            x = em.value(l.value)
            em.emit(f"const {C_COMPUTE[l.value.dtype]} {l.name} = {x};")

    for l in k.lets:
        if l.depth <= p:
            emit_let(l, block and l.depth == p)
    if block:
        # the row's elements over the block's threads; deeper lets per element
        total = math.prod(v.extent for v in axes[p:])
        em.emit(f"for (long long e = threadIdx.x; e < {total}LL; e += {threads}) {{")
        em.indent += "  "
        em.memo.append({})
        inner = 1
        for v in reversed(axes[p:]):
            em.emit(f"const long long {v.name} = (e / {inner}LL) % {v.extent}LL;")
            inner *= v.extent
        for l in sorted((l for l in k.lets if l.depth > p), key=lambda l: l.depth):
            emit_let(l, False)
        loops = 1
    else:
        loops = len(axes) - p
        for d in range(p, len(axes)):
            v = axes[d]
            em.emit(f"for (long long {v.name} = 0; {v.name} < {v.extent}LL; ++{v.name}) {{")
            em.indent += "  "
            em.memo.append({})
            for l in k.lets:
                if l.depth == d + 1:
                    emit_let(l, False)
    for st in k.stores:
        x = em.value(st.value)
        buf = program.buffer(st.buffer)
        em.emit(f"{st.buffer}[{_lin(st.index)}] = {store_value(x, buf.dtype)};")
    for _ in range(loops):
        em.memo.pop()
        em.indent = em.indent[:-2]
        em.emit("}")
    src = f'extern "C" __global__ void __launch_bounds__({threads}) {name}({", ".join(params)}) {{\n' + \
        "\n".join(em.lines) + "\n}\n"
    if block:
        return src, KIRLaunch(name, (max(1, npar), 1, 1), (threads, 1, 1), used,
                              f"{k.name}: {npar} rows, one block of {threads} threads each")
    blocks = max(1, (npar + BLOCK - 1) // BLOCK)
    return src, KIRLaunch(name, (blocks, 1, 1), (BLOCK, 1, 1), used,
                          f"{k.name}: {npar} threads x {math.prod(v.extent for v in axes[p:])} sequential iterations")


def render_kir_program(program: KernelProgram, prefix: str = "", prelude: bool = True,
                       row_threads: int = 256) -> tuple[str, list[KIRLaunch]]:
    """The program's kernels in one translation unit. row_threads: threads per block for row
    kernels (0: none; every kernel one thread per iteration, as the host simulator needs)."""
    from backends.cuda.templates.prelude import PRELUDE
    parts, launches = ([PRELUDE] if prelude else []), []
    for i, k in enumerate(program.kernels):
        src, launch = render_kernel(k, program, f"{prefix}kir{i}_{k.name}", row_threads)
        parts.append(f"// kernel-IR kernel {k.name}\n" + src)
        launches.append(launch)
    return "\n".join(parts), launches


class KIRExecutable:
    """A kernel-IR program on the device: one buffer per IR buffer, kernels in order, host<->device
    copies only for inputs and outputs."""

    def __init__(self, graph, program: KernelProgram, launches: list[KIRLaunch], source: str, module, rt,
                 compile_log: str = ""):
        import numpy as np
        self.graph, self.program, self.launches, self.source, self.rt = graph, program, launches, source, rt
        self.compile_log = compile_log
        self._np = np
        self.functions = [rt.function(module, l.name, l.block[0], 0, len(l.buffers)) for l in launches]
        self.module = module
        self._sizes = {b.name: max(b.size, 1) * b.dtype.itemsize for b in program.buffers}
        self.buffers = {b.name: rt.alloc(self._sizes[b.name]) for b in program.buffers}
        for name, buf in self.buffers.items():     # (unwritten elements show: runtime.fill_unwritten)
            if name not in program.inputs:
                rt.fill_unwritten(buf, self._sizes[name])
        self._args = [[int(self.buffers[b]) for b in l.buffers] for l in launches]

    def upload(self, args) -> None:
        np = self._np
        for name, a in zip(self.program.inputs, args):
            arr = np.ascontiguousarray(a, dtype=self.program.buffer(name).dtype.np)
            if arr.size:
                self.rt.drv.memcpy_htod(self.buffers[name], arr.reshape(-1).view(np.uint8))

    def launch_all(self) -> None:
        from backends.cuda.runtime import CUDAFailure
        for l, f, args in zip(self.launches, self.functions, self._args):
            try:
                f.prepared_call(l.grid, l.block, *args, shared_size=0)
            except self.rt.drv.Error as e:
                raise CUDAFailure("launch", f"{l.name}: {e}") from None

    def download(self):
        np = self._np
        outs = []
        for name, shape in zip(self.program.outputs, self.program.output_shapes):
            arr = np.empty(shape, dtype=self.program.buffer(name).dtype.np)
            if arr.size:
                self.rt.drv.memcpy_dtoh(arr.reshape(-1).view(np.uint8), self.buffers[name])
            outs.append(arr)
        return outs

    def __call__(self, *args):
        from backends.cuda.executable import _on_device   # one caller at a time (see there)
        with _on_device(self.rt):
            self.upload(args)
            self.launch_all()
            self.rt.synchronize()
            return self.download()

    def benchmark(self, args, warmup: int = 10, repeat: int = 50) -> list[float]:
        """Seconds per run, CUDA events around each run, inputs already on the device (one copy)."""
        from backends.cuda.executable import _on_device
        with _on_device(self.rt):
            return self._benchmark(args, warmup, repeat)

    def _benchmark(self, args, warmup: int, repeat: int) -> list[float]:
        drv = self.rt.drv
        self.upload(args)
        for _ in range(warmup):
            self.launch_all()
        self.rt.synchronize()
        times = []
        start, stop = drv.Event(), drv.Event()
        for _ in range(repeat):
            start.record()
            self.launch_all()
            stop.record()
            stop.synchronize()
            times.append(stop.time_since(start) / 1e3)
        return times

    def close(self) -> None:
        from backends.cuda.executable import _DEVICE_LOCK
        with _DEVICE_LOCK:
            for name, buf in self.buffers.items():
                self.rt.release(buf, self._sizes[name])
            self.buffers = {}

    def explain(self) -> str:
        return "\n".join(f"{l.name}: kernel-IR grid={l.grid} block={l.block} {l.detail}" for l in self.launches)
