"""Run compiled kernel programs: buffers, a reusing allocator, and a thread pool over chunks.

Each kernel's parallel loop [0, n) is cut into contiguous chunks; chunks run on the calling
thread and the pool's workers (backends/llvm/spin_pool.py: native code, the GIL released). A
chunk holds whole output rows, so every reduction runs in one thread in one fixed order:
results never depend on the thread count.

An executable may be called from many threads at once: nothing a call writes is shared. Outputs
are fresh arrays per call; a kernel's scratch (the matmul's packed panels, the attention K
panel) belongs to the thread running the chunk, and freed temporaries are kept for reuse by the
calling thread only (both in threading.local storage, so a call never waits on another).
"""
from __future__ import annotations

import ctypes
import math
import os
import threading
import time

import numpy as np

from backends.base import wall_clock_benchmark
from backends.llvm import spin_pool
from backends.llvm.blas import BlasLaunch
from ir.kernel import KernelProgram, Schedule

LIBRARY_SETTLE_S = 0.3    # (2 cores, 2026-12-05: 1.5x slow 0.12 s after a BLAS call, clean 0.3 s later)
# Below this many inner operations a kernel runs on one thread. Handing chunks to the pool's
# workers (native, spinning) costs a few microseconds on the 2-core development machine:
# (x * 1.7 + 0.3).exp() ran 16.1 / 27.9 us on one thread at 65536 / 131072 elements and 14.1 /
# 20.3 us on two, 10.2 against 10.8 us at 32768 (sleeping Python workers cost 50-80 us a kernel,
# when this was 1 << 18).
MIN_CHUNK_WORK = 1 << 16


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _work(k) -> int:
    """Rough operations per kernel (output elements x reduction extents)."""
    from ir.kernel import Reduce, walk
    red = 1
    for e in k.values():
        for x in walk(e):
            if isinstance(x, Reduce):
                red = max(red, math.prod(v.extent for v in x.vars))
    return k.numel * red


class _Launch:
    """One kernel ready to run: function pointer, buffer names, parallel extent, chunks, scratch."""

    def __init__(self, kernel, fn, info, threads: int, address: int = 0):
        self.kernel, self.fn, self.buffers = kernel, fn, info.buffers
        self.address = address
        self.n = info.extent
        work = _work(kernel)
        if threads <= 1 or self.n <= 1 or work < MIN_CHUNK_WORK:
            self.chunks = [(0, self.n)]
        else:
            count = min(self.n, threads * info.chunks_per_thread, max(threads, work // MIN_CHUNK_WORK))
            bounds = [self.n * i // count for i in range(count + 1)]
            self.chunks = [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]
        self.bounds = np.array(self.chunks, np.int64).reshape(-1, 2)
        # floats of 64-byte-aligned scratch a chunk needs; each thread that runs chunks of this
        # kernel (a pool worker, or a calling thread) has its own, made on its first chunk
        self.scratch_floats = info.scratch
        self._mine = threading.local()
        self._participants: list[tuple] = []   # scratch of the pool's participants (used under its lock)

    def _new_scratch(self) -> tuple[np.ndarray, int]:
        raw = np.empty(self.scratch_floats + 16, np.float32)
        off = (-raw.ctypes.data % 64) // 4
        array = raw[off:off + self.scratch_floats]
        return array, array.ctypes.data

    def _scratch(self) -> int:
        ptr = getattr(self._mine, "ptr", None)
        if ptr is None:
            self._mine.array, ptr = self._new_scratch()
            self._mine.ptr = ptr
        return ptr

    def args(self, addr: dict[str, int]) -> list:
        ptrs = [addr[n] for n in self.buffers]
        if self.scratch_floats:
            ptrs.append(self._scratch())
        return ptrs

    def rows(self, addr: dict[str, int], participants: int) -> list[list[int]] | None:
        """Each pool participant's arguments (its own scratch last), or None when the native
        loop cannot call this kernel (too many pointers)."""
        ptrs = [addr[n] for n in self.buffers]
        if len(ptrs) + bool(self.scratch_floats) > spin_pool.MAX_ARGS:
            return None
        if not self.scratch_floats:
            return [ptrs] * participants
        while len(self._participants) < participants:
            self._participants.append(self._new_scratch())
        return [ptrs + [self._participants[who][1]] for who in range(participants)]


class LLVMExecutable:
    """A compiled program: call it with numpy arrays, get numpy arrays back."""

    def __init__(self, program: KernelProgram, schedule: Schedule, source: str, addrs: dict[str, int],
                 infos: dict, engine, cache_hit: bool, compile_seconds: float, library_calls: dict | None = None):
        self.program, self.schedule = program, schedule
        # what explain() shows: the kernel IR listing (as comments), then the LLVM IR
        listing = "\n".join("; " + line for line in str(program).splitlines())
        calls = library_calls or {}
        library = "".join(f"; library call: {c.describe()}\n" for c in calls.values())
        self._head = f"; schedule: {schedule.name}\n{listing}\n{library}"
        self._ir = source      # the LLVM IR text, or a function rendering it (a warm build)
        self.cache_hit, self.compile_seconds = cache_hit, compile_seconds
        # numpy's BLAS keeps its threads spinning after a call, taking the cores from whatever
        # runs next (another executable's product ran 2x slow for 5 runs of 11 ms): a search
        # worker times generated code only this long after this one ran (compiler/workers.py)
        self.settle_s = LIBRARY_SETTLE_S if calls else 0.0
        self._engine = engine   # owns the machine code
        self.threads = schedule.threads or cpu_count()
        # workers beyond the cores would only poll against each other: chunks are shared out
        # among at most one participant per core
        self._workers = min(self.threads, cpu_count()) - 1
        self.launches = []
        for k in program.kernels:
            if k.name in calls:
                self.launches.append(BlasLaunch(k, calls[k.name]))
                continue
            if k.name not in addrs:
                continue   # an empty kernel
            info = infos[k.name]
            nptr = len(info.buffers) + (1 if info.scratch else 0)
            proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * nptr), ctypes.c_int64, ctypes.c_int64)
            self.launches.append(_Launch(k, proto(addrs[k.name]), info, self.threads, addrs[k.name]))
        self._plan_temps()
        self._mine = threading.local()   # .free: this calling thread's freed temps, by (dtype, size)

    @property
    def source(self) -> str:
        """What explain() shows: the kernel IR listing (as comments), then the LLVM IR."""
        if callable(self._ir):
            self._ir = self._ir()
        return self._head + self._ir

    def _plan_temps(self) -> None:
        """For each launch, which temps to allocate before it and which to free after it."""
        last: dict[str, int] = {}
        first: dict[str, int] = {}
        for i, l in enumerate(self.launches):
            for name in l.buffers:
                last[name] = i
                first.setdefault(name, i)
        temps = {b.name: b for b in self.program.buffers if b.kind == "temp"}
        self.alloc_before = [[temps[n] for n in l.buffers if n in temps and first[n] == i]
                             for i, l in enumerate(self.launches)]
        self.free_after = [[temps[n] for n in l.buffers if n in temps and last[n] == i]
                           for i, l in enumerate(self.launches)]
        # per-call lookups done once
        p = self.program
        self._input_dtypes = [p.buffer(n).dtype.np for n in p.inputs]
        self._outputs = [(b.name, max(b.size, 1), b.dtype.np) for b in p.buffers if b.kind == "output"]
        self._output_sizes = [math.prod(s) for s in p.output_shapes]

    def _free_lists(self) -> dict[tuple, list[tuple[np.ndarray, int]]]:
        free = getattr(self._mine, "free", None)
        if free is None:
            free = self._mine.free = {}
        return free

    def _take(self, free: dict, buf) -> tuple[np.ndarray, int]:
        """A temp buffer and its address: one this thread freed, else a new one."""
        arrays = free.get((buf.dtype, buf.size))
        if arrays:
            return arrays.pop()
        arr = np.empty(max(buf.size, 1), buf.dtype.np)
        return arr, arr.ctypes.data

    def __call__(self, *args) -> list[np.ndarray]:
        return self._run(args, None)

    def profile(self, args, repeat: int = 5) -> list[tuple[str, float]]:
        """Median seconds per kernel over `repeat` calls, in execution order."""
        times: dict[str, list[float]] = {}
        for _ in range(repeat + 1):
            self._run(args, times)
        return [(l.kernel.name, float(np.median(times[l.kernel.name][1:]))) for l in self.launches]

    def _run(self, args, times) -> list[np.ndarray]:
        p = self.program
        if len(args) != len(p.inputs):
            raise ValueError(f"expected {len(p.inputs)} inputs, got {len(args)}")
        env: dict[str, np.ndarray] = {}
        addr: dict[str, int] = {}      # each buffer's address, looked up once per call
        for name, dt, a in zip(p.inputs, self._input_dtypes, args):
            arr = np.ascontiguousarray(a, dtype=dt).reshape(-1)
            env[name] = arr if arr.size else np.empty(1, dt)
            addr[name] = env[name].ctypes.data
        for name, size, dt in self._outputs:
            env[name] = np.empty(size, dt)
            addr[name] = env[name].ctypes.data
        pool = spin_pool.pool(self._workers) if self._workers > 0 else None
        free = self._free_lists()
        for i, l in enumerate(self.launches):
            for buf in self.alloc_before[i]:
                env[buf.name], addr[buf.name] = self._take(free, buf)
            t0 = time.perf_counter() if times is not None else 0.0
            if isinstance(l, BlasLaunch):
                l.run(env)      # on this thread; the library runs its own threads
            elif len(l.chunks) == 1 or pool is None:
                for a, b in l.chunks:
                    l.fn(*l.args(addr), a, b)
            else:
                # the caller and threads-1 pool workers take chunks from one atomic counter, in
                # native code; where another call holds the workers, this thread runs them all
                rows = l.rows(addr, pool.participants)
                if rows is None or not pool.run(l.address, rows, l.bounds):
                    for a, b in l.chunks:
                        l.fn(*l.args(addr), a, b)
            if times is not None:
                times.setdefault(l.kernel.name, []).append(time.perf_counter() - t0)
            for buf in self.free_after[i]:
                free.setdefault((buf.dtype, buf.size), []).append((env.pop(buf.name), addr.pop(buf.name)))
        outs, seen = [], set()
        for name, shape, n in zip(p.outputs, p.output_shapes, self._output_sizes):
            arr = env[name][:n].reshape(shape)
            outs.append(arr.copy() if name in seen else arr)
            seen.add(name)
        return outs

    def benchmark(self, args, warmup: int = 3, repeat: int = 20) -> list[float]:
        """Wall-clock seconds per call, one entry per timed run (after `warmup` untimed runs)."""
        return wall_clock_benchmark(self, args, warmup, repeat)
