"""The CPU backend: kernel IR -> LLVM IR (llvmlite) -> O3 machine code for the host CPU.

    backend = LLVMBackend()
    exe = backend.build(graph)                   # lower, render, compile (disk-cached), load
    outs = exe(*numpy_arrays)
    exe.benchmark(args, warmup=3, repeat=20)     # seconds per run
    backend.schedules(graph)                     # schedule variants to time; first = default
"""
from __future__ import annotations

import time

from ir.graph import Graph
from ir.kernel import KernelProgram, KernelSchedule, Schedule


class LLVMBackend:
    name = "cpu"

    def unavailable_reason(self) -> str | None:
        try:
            import llvmlite.binding  # noqa: F401
        except ImportError as e:
            return f"llvmlite is not installed ({e})"
        return None

    def schedules(self, graph: Graph) -> list[Schedule]:
        """A few variants: the default (all cores, 512-bit vectors), 256-bit vectors, one thread,
        and strict (no reassociated reductions)."""
        return [
            Schedule(name="default"),
            Schedule(default=KernelSchedule(vector_width=8), name="vec256"),
            Schedule(default=KernelSchedule(vector_width=16), name="vec512"),
            Schedule(threads=1, name="1-thread"),
            Schedule(default=KernelSchedule(fast_math=False), name="strict"),
        ]

    def lower(self, graph: Graph) -> KernelProgram:
        from compiler.lower import lower
        return lower(graph)

    def build(self, graph: Graph, schedule: Schedule | None = None, *, use_cache: bool = True):
        return self.build_program(self.lower(graph), schedule, use_cache=use_cache)

    def build_program(self, program: KernelProgram, schedule: Schedule | None = None, *, use_cache: bool = True):
        from backends.llvm import jit
        from backends.llvm.render import render_program
        from backends.llvm.runtime import LLVMExecutable
        schedule = schedule or Schedule()
        t0 = time.perf_counter()
        source, args = render_program(program, schedule)
        addrs, hit, engine = jit.load(source, list(args), use_cache=use_cache)
        return LLVMExecutable(program, schedule, source, addrs, args, engine, hit, time.perf_counter() - t0)


__all__ = ["LLVMBackend"]
