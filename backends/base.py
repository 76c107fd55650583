"""The one small interface every backend implements: build(graph) -> Executable.

A backend that generates code splits `build` into render (kernel IR -> source text),
compile (source -> binary, cached by hash) and load (binary -> callable). The reference
backend has nothing to render: it runs the interpreter.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

from ir.graph import Graph


class Executable(Protocol):
    source: str  # the generated code (or a description), shown by explain()

    def __call__(self, *args: np.ndarray) -> list[np.ndarray]: ...


class Backend(Protocol):
    name: str

    def unavailable_reason(self) -> str | None:
        """None where this backend can run here, else a sentence saying what is missing."""

    def build(self, graph: Graph, schedule=None) -> Executable: ...


def cache_root() -> Path:
    """Saturn's on-disk cache: $SATURN_CACHE_DIR, else $XDG_CACHE_HOME/saturn, else ~/.cache/saturn.
    Backends keep compiled objects in subfolders; compile() keeps search winners at the top."""
    env = os.environ.get("SATURN_CACHE_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "saturn"


class BackendUnavailable(RuntimeError):
    pass


_REGISTRY: dict[str, "Backend"] = {}
_FACTORIES: dict[str, str] = {
    "reference": "backends.reference:ReferenceBackend",
    "cpu": "backends.llvm:LLVMBackend",
    "cuda": "backends.cuda:CUDABackend",
}


def get_backend(name: str) -> Backend:
    if name in _REGISTRY:
        return _REGISTRY[name]
    if name not in _FACTORIES:
        raise BackendUnavailable(f"unknown target {name!r}; choose one of {sorted(_FACTORIES)}")
    module, cls = _FACTORIES[name].split(":")
    import importlib
    try:
        backend = getattr(importlib.import_module(module), cls)()
    except ImportError as e:
        raise BackendUnavailable(f"target {name!r} is not available: {e}") from None
    reason = backend.unavailable_reason()
    if reason:
        raise BackendUnavailable(f"target {name!r} is not available here: {reason}")
    _REGISTRY[name] = backend
    return backend


def targets() -> Sequence[str]:
    return tuple(_FACTORIES)


def wall_clock_benchmark(call, args, warmup: int = 3, repeat: int = 20) -> list[float]:
    """Wall-clock seconds of `call(*args)`, one entry per timed run (after `warmup` untimed runs)."""
    for _ in range(warmup):
        call(*args)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        call(*args)
        times.append(time.perf_counter() - t0)
    return times
