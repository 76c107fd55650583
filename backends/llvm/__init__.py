"""The CPU backend: kernel IR -> LLVM IR (llvmlite) -> O3 machine code for the host CPU.

    backend = LLVMBackend()
    exe = backend.build(graph)                   # lower, render, compile (disk-cached), load
    outs = exe(*numpy_arrays)
    exe.benchmark(args, warmup=3, repeat=20)     # seconds per run
    backend.schedules(graph)                     # schedule variants to time; first = default
"""
from __future__ import annotations

import dataclasses
import math
import time

from ir.dtypes import DType
from ir.graph import Graph
from ir.node import Node
from ir.ops import Op
from ir.kernel import KernelProgram, KernelSchedule, Schedule, digest

# f32 product work (multiply-adds) from which the host BLAS is the second schedule tried
LIBRARY_FIRST_MACS = 1 << 26


def native_vector_width() -> int:
    """f32 lanes of the widest vector unit here: 16 with AVX-512, else 8."""
    from backends.llvm import jit
    jit.target_info()
    return 16 if "+avx512f" in jit._state["features"].split(",") else 8


class LLVMBackend:
    name = "cpu"

    def __init__(self):
        self._lowered: dict = {}

    def unavailable_reason(self) -> str | None:
        try:
            import llvmlite.binding  # noqa: F401
        except ImportError as e:
            return f"llvmlite is not installed ({e})"
        return None

    def default_schedule(self) -> Schedule:
        """All cores, the host's widest vectors, matmul tiles of `matmul.DEFAULT_TILE`."""
        return Schedule(default=KernelSchedule(vector_width=native_vector_width()), name="default")

    def schedules(self, graph: Graph) -> list[Schedule]:
        """Candidate schedules, the default heuristic first, then one thread (second: handing
        chunks to the pool costs ~0.1 ms per kernel on a shared machine, which decides small
        programs, and a search whose budget runs out after a few schedules should have seen
        it; the BLAS numpy links comes before it when f32 products carry over LIBRARY_FIRST_MACS of
        work), the BLAS numpy links for plain products (when the program has one: blas.py),
        on AVX-512 the 8 x 2 matmul tile, LLVM's loop unroller on, the other matmul tiles, vector
        widths, and strict (no reassociated reductions)."""
        from backends.llvm import blas
        w = native_vector_width()
        out = [self.default_schedule(),
               Schedule(threads=1, default=KernelSchedule(vector_width=w), name="1-thread")]
        library = KernelSchedule(vector_width=w, library=blas.LIBRARY)
        # read from the graph's contraction terms, not from its lowering: the search asks every
        # candidate program for its schedules before building any, and a 12-layer model's
        # lowering takes seconds (a term the library cannot take runs generated code under
        # this schedule: the same code as the default, timed once)
        products = [n for n in graph.nodes if n.op == Op.CONTRACT and n.numel and n.dtype.is_float and _is_product(n)]
        if products:
            # second, before one thread, when f32 products carry the program's work (a decoder:
            # the search of a big program may verify only its first two schedules)
            big = sum(n.numel * math.prod(n.srcs[0].shape[a] for a in n.arg) for n in products
                      if all(_stored_dtype(x) == DType.f32 for x in n.srcs)) >= LIBRARY_FIRST_MACS
            out.insert(1 if big else 2, Schedule(default=library, name=blas.LIBRARY))
        # matmul tiles change only the packed products' code: a program without contraction
        # terms would build, verify and time the default's code again under another name
        tiles = any(n.op == Op.CONTRACT for n in graph.nodes)
        if tiles and w == 16:
            # the 8-row tile the 12-row default replaced (matmul.DEFAULT_ROWS): ahead of the
            # schedules a big program's search may not reach
            out.insert(3 if products else 2,
                       Schedule(default=KernelSchedule(vector_width=w, tile=(8, 2, 256, 1024)), name="mm8x2"))
        out.append(Schedule(default=KernelSchedule(vector_width=w, unroll=4), name="unrolled"))
        if tiles:
            # another tile beside the default (matmul.DEFAULT_TILE): on AVX-512 6 x 2 (the odd
            # 3x3 conv b3 27x27x31 preferred it, 0.198-0.206 ms against 0.219-0.221 under 8 x 2;
            # 8 x 1 was never the fastest, 2-core EPYC, 2026-12-06)
            out.append(Schedule(default=KernelSchedule(vector_width=w, tile=(6, 2, 256, 1024)), name="mm6x2")
                       if w == 16 else
                       Schedule(default=KernelSchedule(vector_width=w, tile=(4, 3, 256, 1024)), name="mm4x3"))
        if w == 16:
            out.append(Schedule(default=KernelSchedule(vector_width=8), name="vec256"))
        if tiles:
            out.append(Schedule(default=KernelSchedule(vector_width=w, tile=(6, 2, 512, 512)), name="mm6x2-kc512"))
        out.append(Schedule(default=KernelSchedule(vector_width=w, fast_math=False), name="strict"))
        return out

    def lower(self, graph: Graph) -> KernelProgram:
        """The kernel program of a graph (memoized: the search builds one graph under several
        schedules; nodes are hash-consed, so (inputs, outputs) identifies the program)."""
        from ir.lower import lower
        key = (graph.inputs, graph.outputs)
        program = self._lowered.get(key)
        if program is None:
            program = lower(graph)
            if len(self._lowered) >= 64:
                self._lowered.pop(next(iter(self._lowered)))
            self._lowered[key] = program
        return program

    def features(self, graph: Graph) -> tuple[float, ...]:
        """The kernel program of `graph`, counted for the cost model (ir/kernel_cost.py)."""
        from ir.kernel_cost import program_features
        return program_features(self.lower(graph))

    def schedule_factor(self, graph: Graph, schedule: Schedule, first: Schedule, coefficients) -> float | None:
        """`schedule`'s time over `first`'s for `graph`, predicted from counts priced with the cost
        model's `coefficients`: the model's prior for a schedule it has not measured
        (backends/llvm/schedule_cost.py)."""
        from backends.llvm import schedule_cost
        from backends.llvm.runtime import cpu_count
        return schedule_cost.relative(self.lower(graph), schedule, first, coefficients, cpu_count(),
                                      native_vector_width())

    def build(self, graph: Graph, schedule: Schedule | None = None, *, use_cache: bool = True):
        return self.build_program(self.lower(graph), schedule, use_cache=use_cache)

    def build_program(self, program: KernelProgram, schedule: Schedule | None = None, *, use_cache: bool = True):
        from backends.llvm import blas, jit
        from backends.llvm.render import LaunchInfo, render_program
        from backends.llvm.runtime import LLVMExecutable
        schedule = schedule or self.default_schedule()
        t0 = time.perf_counter()
        program, calls = blas.split_epilogues(program, schedule)   # library products (schedule.library)
        skip = frozenset(calls)
        unroll = any(ks.unroll > 1 for ks in [schedule.default] + [k for _, k in schedule.overrides])
        # (the program's full content, not its listing: two programs never share an entry)
        pkey = jit.program_key(f"{digest(program)}\n{schedule!r}\n{sorted(skip)}", unroll) if use_cache else None
        found = jit.load_indexed(pkey) if pkey else None
        if found is not None:     # a warm build: the object, found without rendering the IR again
            addrs, engine, rows = found
            args = {name: LaunchInfo(*row) for name, row in rows.items()}
            return LLVMExecutable(program, schedule, lambda: render_program(program, schedule, skip=skip)[0],
                                  addrs, args, engine, True, time.perf_counter() - t0, calls)
        source, args = render_program(program, schedule, skip=skip)
        index = (pkey, {name: dataclasses.astuple(info) for name, info in args.items()}) if pkey else None
        symbols = {name: info.symbol or name for name, info in args.items()}
        addrs, hit, engine = jit.load(source, symbols, use_cache=use_cache, unroll=unroll, index=index)
        return LLVMExecutable(program, schedule, source, addrs, args, engine, hit, time.perf_counter() - t0, calls)


__all__ = ["LLVMBackend"]


def _is_product(n: Node) -> bool:
    """A contraction term with an output axis along which one operand is broadcast and the other
    is not (a matrix product's m or n), not a row's sum of squares or scaled sum."""
    from ir.terms import constant_axes
    a, b = (constant_axes(x) for x in n.srcs)
    return bool((a ^ b) - set(n.arg))


def _stored_dtype(n: Node) -> DType:
    """The dtype `n` is read from memory as: through views and casts (an f16 weight cast to f32
    for a product is not an f32 operand of the library's f32 product)."""
    while n.op in (Op.VIEW, Op.CAST) and n.srcs:
        n = n.srcs[0]
    return n.dtype
