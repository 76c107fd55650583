"""The things being timed: Saturn's compiled function and the PyTorch formulations of a case.

Each contender has `prepare() -> compile seconds`, `output() -> numpy array` and
`time(n) -> list[float]` (seconds per run). PyTorch is imported lazily: without it, only
Saturn runs.
"""
from __future__ import annotations

import math

import os
import time

import numpy as np

from benchmarks.timing import wall_clock
from benchmarks.workloads import Case


def import_torch():
    """The torch module, or None with the reason it could not be imported."""
    # Inductor's pool of compile workers slows later eager calls of this process ~1000x
    # (8 ms per tiny op measured on 2 cores): compile in-process instead.
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    try:
        import torch
    except ImportError as e:
        return None, f"PyTorch is not installed ({e}); install the bench extra: pip install -e '.[bench]'"
    return torch, None


class TorchEnv:
    """PyTorch on one device: array conversion and honest timing (CUDA events on the GPU)."""

    def __init__(self, torch, device: str, threads: int):
        self.torch, self.device = torch, device
        if device == "cuda":
            if not torch.cuda.is_available():
                raise RuntimeError("PyTorch cannot see a CUDA device")
            # f32 means f32: no TF32 in matrix products, for eager, torch.compile and the reference alike
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        else:
            torch.set_num_threads(threads)
        try:  # in case torch was imported before import_torch set the variable
            import torch._inductor.config as inductor_config
            inductor_config.compile_threads = 1
        except (ImportError, AttributeError):
            pass

    def tensor(self, a: np.ndarray):
        """numpy -> torch on this device (bf16 arrays go through their int16 bits)."""
        t = self.torch
        if a.dtype.name == "bfloat16":
            x = t.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(t.bfloat16)
        else:
            x = t.from_numpy(np.ascontiguousarray(a))
        return x.to(self.device)

    def input_sets(self, arrays: list[np.ndarray]) -> list[list]:
        """The inputs on the device; on a GPU, several copies when they would fit in L2 twice over,
        so timed runs rotate through them and do not time the cache (as Saturn's CUDA timer does)."""
        first = [self.tensor(a) for a in arrays]
        if self.device != "cuda":
            return [first]
        l2 = getattr(self.torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20) or (50 << 20)
        nbytes = sum(a.nbytes for a in arrays)
        copies = 1 if nbytes == 0 or nbytes >= 2 * l2 else min(8, -(-2 * l2 // nbytes))
        return [first] + [[t.clone() for t in first] for _ in range(copies - 1)]

    def numpy(self, x) -> np.ndarray:
        return x.detach().float().cpu().numpy()

    def sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def time(self, fn, n: int) -> list[float]:
        """Seconds per call of `fn`: CUDA events around each call on the GPU, wall clock on the CPU."""
        if self.device != "cuda":
            return wall_clock(fn, n)
        # the same discipline as Saturn's CUDA timer: events around each run, wait for each run
        cuda = self.torch.cuda
        start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        cuda.synchronize()
        out = []
        for _ in range(n):
            start.record()
            fn()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end) / 1e3)
        return out

    def free(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.empty_cache()


def chosen_info(fn) -> dict:
    """What the search chose: the program (its description, kernel terms) and the schedule,
    and the kernels it runs (their kinds, in order)."""
    out = {}
    result = getattr(fn, "result", None)
    winner = getattr(result, "winner", None)
    if winner is not None:
        out["chosen"] = winner.description
        out["schedule"] = getattr(winner.schedule, "name", "") or str(winner.schedule)
    if getattr(result, "cost_model", None):
        out["cost_model"] = dict(result.cost_model)
    chosen = getattr(fn, "chosen", None)
    if chosen is not None:
        counts = chosen.op_counts()
        from ir.ops import KERNEL
        out["kernel_terms"] = {op.value: counts[op.value] for op in sorted(KERNEL, key=lambda o: o.value)
                               if op.value in counts}
    launches = getattr(getattr(fn, "executable", None), "launches", None)
    if launches:
        out["kernels"] = [_kernel_kind(l) for l in launches]
    trials = getattr(result, "trials", None)
    if trials:
        out["trials"] = [trial_info(t) for t in trials if t.status not in ("pending", "skipped")]
    return out


def trial_info(t) -> dict:
    """One trial's outcome, to read why a search chose what it chose (which schedules it built,
    verified and timed within its budget, and what the rest failed on)."""
    finite = lambda v: float(v) if v is not None and math.isfinite(v) else None
    return {"program": t.description, "schedule": t.schedule_text, "status": t.status,
            "reason": t.reason[:200], "build_s": round(float(t.build_s), 3), "run_s": finite(t.run_s),
            "median_s": finite(t.median), "predicted_s": finite(t.predicted), "rounds": len(t.rounds)}


def _kernel_kind(launch) -> str:
    """A launch's template kind (CUDA) or its kernel's name (CPU: `k0_contract`, `blas` for the library)."""
    if hasattr(launch, "kind"):
        return launch.kind
    name = getattr(getattr(launch, "kernel", None), "name", type(launch).__name__)
    return f"{name}:blas" if type(launch).__name__ == "BlasLaunch" else name


class SaturnContender:
    """`compiler.compile(case.saturn_fn, ...)` for one target, timed by its executable where it can."""
    name = "saturn"

    def __init__(self, case: Case, target: str, arrays: list[np.ndarray], options: dict):
        self.case, self.target, self.arrays, self.options = case, target, arrays, options
        self.fn = None
        self.how = ""

    def prepare(self) -> float:
        import compiler
        specs = [compiler.spec(i.shape, i.dtype, i.name) for i in self.case.inputs]
        t0 = time.perf_counter()
        self.fn = compiler.compile(self.case.saturn_fn, *specs, target=self.target, **self.options)
        seconds = time.perf_counter() - t0
        bench = getattr(self.fn.executable, "benchmark", None)
        self.how = "executable.benchmark" if callable(bench) else "wall clock around the call"
        return seconds

    def compile_info(self) -> dict:
        """Whether compile() hit its cache, and its own breakdown of the time, where it reports them."""
        info = {}
        if isinstance(getattr(self.fn, "cache", None), str):
            info["cache"] = self.fn.cache
        if isinstance(getattr(self.fn, "timings", None), dict):
            info["compile_parts_s"] = {k: float(v) for k, v in self.fn.timings.items()}
        stages = getattr(getattr(self.fn, "result", None), "seconds", None)
        if isinstance(stages, dict) and stages:      # the search's own stages (explore, references, ...)
            info["search_parts_s"] = {k: float(v) for k, v in stages.items()}
        info.update(chosen_info(self.fn))
        return info

    def output(self) -> np.ndarray:
        out = self.fn(*self.arrays)
        # a copy: an executable may hand back a buffer that its next run reuses
        return np.array(out[0] if isinstance(out, tuple) else out, copy=True)

    def time(self, n: int) -> list[float]:
        bench = getattr(self.fn.executable, "benchmark", None)
        if callable(bench):
            return [float(s) for s in bench(self.arrays, 0, n)]
        return wall_clock(lambda: self.fn(*self.arrays), n)


class SaturnDeviceContender:
    """Saturn's compiled function called on PyTorch CUDA tensors, as a model runs it: inputs
    read in place, outputs allocated by torch, and the kernels replayed as a CUDA graph once a
    call's addresses repeat (compiler/device_args.py, backends/cuda/graphs.py). Timed like the
    PyTorch peers (CUDA events around each call, host launch overhead included), on a copy of
    its own of the first input set: one binding, as torch.compile's CUDA graphs get."""
    name = "saturn-graphs"

    def __init__(self, saturn: "SaturnContender", env: TorchEnv, input_sets: list[list]):
        self.fn, self.env = saturn.fn, env
        self.tensors = [t.clone() for t in input_sets[0]]

    def prepare(self) -> float:
        for _ in range(3):     # a binding is recorded when it comes back: the third call replays
            self.fn(*self.tensors)
        self.env.sync()
        return 0.0

    def output(self) -> np.ndarray:
        out = self.fn(*self.tensors)
        return self.env.numpy(out[0] if isinstance(out, tuple) else out)

    def time(self, n: int) -> list[float]:
        return self.env.time(lambda: self.fn(*self.tensors), n)


class TorchContender:
    """One PyTorch formulation of a case (eager, torch.compile'd, or another such as SDPA).

    `compile_it`: False (run as written), True (torch.compile's default mode) or a torch.compile
    mode; "reduce-overhead" replays CUDA graphs, on its own copy of the first input set with
    every input marked as a static address, so that a replay copies no inputs (the weights of
    a model are its parameters there, which CUDA graphs never copy)."""

    def __init__(self, name: str, fn, env: TorchEnv, input_sets: list[list], compile_it: bool | str = False):
        self.name, self.env, self.sets = name, env, input_sets
        self.tensors = input_sets[0]
        self.raw_fn, self.compile_it = fn, compile_it
        self.fn = fn

    def prepare(self) -> float:
        """Build (torch.compile) and run once; returns the seconds that took when compiling, else 0."""
        torch = self.env.torch
        t0 = time.perf_counter()
        if self.compile_it:
            torch._dynamo.reset()
            if self.compile_it == "reduce-overhead":
                # copies of its own: a static address is a property of the tensor, which the
                # other contenders (rotating through input copies) must not see
                self.tensors = [t.clone() for t in self.tensors]
                self.sets = [self.tensors]
                for t in self.tensors:
                    torch._dynamo.mark_static_address(t)
                self.fn = torch.compile(self.raw_fn, dynamic=False, mode="reduce-overhead")
            else:
                self.fn = torch.compile(self.raw_fn, dynamic=False)
        with torch.no_grad():
            for _ in range(3 if self.compile_it == "reduce-overhead" else 1):   # (CUDA graphs record on a later call)
                self.fn(*self.tensors)
        self.env.sync()
        return time.perf_counter() - t0 if self.compile_it else 0.0

    def output(self) -> np.ndarray:
        with self.env.torch.no_grad():
            return self.env.numpy(self.fn(*self.tensors))

    def time(self, n: int) -> list[float]:
        sets, i = self.sets, [0]

        def run_once():  # rotate through the input copies
            self.fn(*sets[i[0] % len(sets)])
            i[0] += 1
        with self.env.torch.no_grad():
            return self.env.time(run_once, n)
