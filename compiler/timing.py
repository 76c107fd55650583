"""Honest timing of one executable: warm-up, repeated runs, median.

A backend that knows better (CUDA events on device-resident inputs, cache flushing) provides
`Executable.benchmark(args, warmup, repeat) -> list[float]` and is trusted to use it. For any
other executable we time wall clock here, rotating through copies of the inputs so that a
small working set is not always served hot from the cache.
"""
from __future__ import annotations

import statistics
import time

import numpy as np

ROTATE_BYTES = 64 << 20   # rotate input copies until the working set exceeds this (> a CPU LLC)
MAX_COPIES = 8


def rotated_copies(args: list[np.ndarray]) -> list[list[np.ndarray]]:
    """A few independent copies of `args` whose total size exceeds the last-level cache."""
    size = sum(a.nbytes for a in args) or 1
    n = max(1, min(MAX_COPIES, -(-ROTATE_BYTES // size)))
    return [list(args)] + [[a.copy() for a in args] for _ in range(n - 1)]


def wall_clock(exe, args: list[np.ndarray], warmup: int, repeat: int) -> list[float]:
    """Seconds per call of `exe`, each call on the next rotated copy of the inputs."""
    copies = rotated_copies(args)
    for i in range(warmup):
        exe(*copies[i % len(copies)])
    times = []
    for i in range(repeat):
        a = copies[i % len(copies)]
        t0 = time.perf_counter()
        exe(*a)
        times.append(time.perf_counter() - t0)
    return times


def measure(exe, args: list[np.ndarray], warmup: int, repeat: int) -> list[float]:
    """Per-run seconds: the backend's own benchmark when it has one, else wall clock."""
    bench = getattr(exe, "benchmark", None)
    if callable(bench):
        return [float(t) for t in bench(list(args), warmup=warmup, repeat=repeat)]
    return wall_clock(exe, args, warmup, repeat)


def median(times: list[float]) -> float:
    return statistics.median(times) if times else float("inf")


def format_seconds(s: float) -> str:
    if s != s or s == float("inf"):
        return "-"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} us"
