"""The public entry points: `trace` a function, `compile` it for a target, call the result.

compile() traces the function, then (for a code-generating target) looks for a cached winner,
else runs the measured-runtime search (compiler.search) and caches what it chose.
"""
from __future__ import annotations

import os
import time

import numpy as np

from backends import BackendUnavailable, checked, get_backend
from compiler import arguments, device_args, regions
from compiler import cache as cache_mod
from compiler.cluster import check_cluster
from compiler.errors import DTypeError, OptionError, ShapeError, TargetError
from compiler.progress import Progress
from compiler.search import SearchOptions, SearchResult, ShapeVariant, same_interface, describe_schedule, search
from compiler.verify import odd_specs, odd_variant_graph
from compiler.trace import Spec, as_spec, trace, trace_primitives
from rewrites.apply import kernel_terms
from ir.graph import Graph

# seconds of search for a program compiled for the first time; nvcc costs ~1 s per candidate
DEFAULT_BUDGET = {"cuda": 20.0}
DEFAULT_BUDGET_OTHER = 10.0   # a hard bound (search.py): 5 s left a loaded 2-core machine one timed trial


class CompiledFunction:
    """A traced program built for one target; call it with numpy arrays (or, for target
    'cuda', device arrays: torch CUDA tensors, CuPy arrays, `__cuda_array_interface__` or
    DLPack objects, read and returned without host copies; see `compiler/device_args.py`).

    `.graph` is the traced program, `.chosen` the candidate that runs (same meaning, maybe
    rewritten), `.result` the search that chose it (None for the reference target),
    `.cache` whether it came from the cache ("hit"), was stored ("stored") or neither.
    `.cuda_graphs` (default True): device-array calls replay CUDA graphs where they can.
    """

    def __init__(self, fn, specs: list[Spec], graph: Graph, target: str, executable, report=None,
                 chosen: Graph | None = None, cache: str = "off", timings: dict | None = None):
        self.fn, self.specs, self.graph, self.target = fn, specs, graph, target
        self.executable = executable
        self.report = report
        self.result = report if isinstance(report, SearchResult) else None
        self.chosen = chosen if chosen is not None else graph
        self.cache = cache
        self.timings = timings or {}
        self._single = None
        self._device = None                       # DeviceCalls, made on the first device-array call
        self._fast = None                         # device_args.FastPath, after a plain torch call
        self._device_stats = device_args.Stats()
        self._cuda_graphs = True

    @property
    def cuda_graphs(self) -> bool:
        return self._cuda_graphs

    @cuda_graphs.setter
    def cuda_graphs(self, enabled: bool) -> None:
        arguments.check_flag("cuda_graphs", enabled)
        self._cuda_graphs = enabled
        if self._device is not None:
            self._device.set_graphs(enabled)

    def _check(self, args) -> list[np.ndarray]:
        name = getattr(self.fn, "__name__", "compiled function")
        if len(args) != len(self.specs):
            raise ShapeError(f"{name} takes {len(self.specs)} inputs ({', '.join(map(str, self.specs))}), "
                             f"got {len(args)}", "call")
        out = []
        for i, (a, s) in enumerate(zip(args, self.specs)):
            if hasattr(a, "detach") and hasattr(a, "numpy"):  # a CPU torch tensor
                a = _torch_to_numpy(a.detach())
            a = np.asarray(a) if not isinstance(a, np.ndarray) else a
            if tuple(a.shape) != s.shape:
                raise ShapeError(f"input {i} has shape {tuple(a.shape)}, expected {s.shape}", "call")
            if a.dtype != s.dtype.np:
                raise DTypeError(f"input {i} has dtype {a.dtype}, expected {s.dtype.np} ({s.dtype.value}); "
                                 f"convert it with .astype", "call")
            out.append(np.ascontiguousarray(a))
        return out

    def __call__(self, *args, stream=None, **kwargs):
        """Run on numpy arrays (or CPU torch tensors): numpy results. Run on device arrays:
        device results of the first input's kind, enqueued on `stream` (an int handle or a
        torch / CuPy stream; default: the caller's current stream) without synchronizing."""
        if self._fast is not None and stream is None and not kwargs:
            outs = self._fast(self._device, args, self._device_stats)
            if outs is not None:
                return outs[0] if len(outs) == 1 else tuple(outs)
        if kwargs:
            raise OptionError(f"inputs are positional; got keyword arguments {sorted(kwargs)}", "call")
        if stream is not None or device_args.any_device(args):
            outs = self._device_call(args, stream)
        else:
            if self._device is not None:   # device-array calls share the intermediate buffers
                self._device.wait_idle()
            outs = self.executable(*self._check(args))
        return outs[0] if len(self.graph.outputs) == 1 else tuple(outs)

    def _device_call(self, args, stream) -> list:
        name = getattr(self.fn, "__name__", None) or "the compiled function"
        if len(args) != len(self.specs):
            raise ShapeError(f"{name} takes {len(self.specs)} inputs ({', '.join(map(str, self.specs))}), "
                             f"got {len(args)}", "call")
        found = next(((i, device_args.kind_of(a)) for i, a in enumerate(args) if device_args.kind_of(a)), None)
        if found is None:
            raise OptionError("stream= is for calls on device arrays; these inputs are host arrays", "call")
        if self.target != "cuda":
            raise device_args.host_call_error(self.target, found[1], found[0], name)
        if stream is not None:
            try:
                device_args.stream_handle(stream)
            except TypeError as e:
                raise OptionError(str(e), "call") from None
        if self._device is None:
            self._device = device_args.device_calls_for(self.executable, self._cuda_graphs)
        outs = device_args.call(self._device, args, self.specs, self.graph.outputs, stream, name, self._device_stats)
        if self._fast is None and device_args.plain_torch_call(args, stream):
            self._fast = device_args.FastPath(device_args._torch(), self.specs, self.graph.outputs,
                                              self._device.ordinal)
        return outs

    def save(self, path) -> str:
        """Write this function to `path` (compiler.saved; `compiler.load(path)` reads it back)."""
        from compiler import saved
        return saved.save(self, path)

    def explain(self) -> str:
        """What was compiled, what the search tried and chose, and the generated code."""
        lines = [f"target: {self.target}", f"inputs: {', '.join(map(str, self.specs))}"]
        if self.timings:
            lines.append("compile: " + ", ".join(f"{k} {v:.3f} s" for k, v in self.timings.items()))
        lines += [f"program ({self.graph.num_compute_ops()} compute ops):", str(self.graph)]
        if self.report is not None:
            head = "search (stored with the cache entry):" if self.cache == "hit" else "search:"
            lines += ["", head, str(self.report)]
        if self.chosen is not self.graph:
            lines += ["", f"chosen program ({self.chosen.num_compute_ops()} compute ops):", str(self.chosen)]
        elif self.report is not None:
            lines += ["", "chosen program: the original program"]
        if self._device is not None:
            lines += ["", "device arrays: " + self._device_stats.describe(), "  " + self._device.describe()]
        lines += ["", "generated code:", getattr(self.executable, "source", "<none>")]
        return "\n".join(lines)


def _torch_to_numpy(t) -> np.ndarray:
    """A CPU torch tensor as numpy; bf16 (which numpy lacks) is reinterpreted bit for bit."""
    if str(t.dtype) == "torch.bfloat16":
        import ml_dtypes
        import torch
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _saturn_version() -> str:
    import compiler
    return compiler.__version__


def _odd_variant(fn, specs) -> ShapeVariant | None:
    """`fn` traced at odd (and, for big programs, smaller) shapes, if it is shape-generic."""
    g = odd_variant_graph(lambda *s: trace(fn, *s), specs)
    return ShapeVariant(g) if g is not None else None


def _compile_regions(fn, specs, graph, split, be, backend_spec, target, device, opts, name, use_cache, directory,
                     t0, t_trace):
    """compile() of a big program, region by region (compiler/regions.py)."""
    def variant():      # traced only if some region is searched
        return _odd_variant(fn, specs) if opts.odd_shapes else None
    exe, report, chosen = regions.compile_regions(graph, split, be, target=target, backend_spec=backend_spec, device=device,
                                                  options=opts, name=name, variant=variant, use_cache=use_cache,
                                                  directory=directory, version=_saturn_version(), start=t0)
    hits = [o.cache == "hit" for o in report.outcomes]
    cache = "hit" if all(hits) else ("stored" if use_cache else "off")
    timings = {"trace": t_trace - t0, "regions": time.perf_counter() - t_trace}
    return CompiledFunction(fn, specs, graph, target, exe, report, chosen=chosen, cache=cache, timings=timings)


def compile(fn, *specs, target: str = "cpu", budget: float | None = None, quiet: bool = False,  # noqa: A001
            cache=None, seed: int = 0, candidates=None, backend=None, cluster=None, **options) -> CompiledFunction:
    """Trace `fn` on inputs described by `specs` and build the fastest verified program for `target`.

    target: 'cpu', 'cuda' or 'reference' (the interpreter; no search).
    budget: seconds of search on a cold compile (default 10; 20 for cuda, whose compiler is slow); a hard bound: budget x 1.1 or + 1 s.
    quiet: no progress line (otherwise shown on stderr for searches longer than a second).
    cache: None (on, unless `candidates` or `backend` are injected), True, False, or a directory (str or Path).
    seed: fixes the verification inputs and the search order.
    candidates: programs to search instead of the e-graph's (objects with .graph/.cost/.description).
    backend: a backend object to use instead of get_backend(target) (must be picklable for the
      isolated workers). Other keyword options set fields of `compiler.search.SearchOptions`.
    cluster: None (this process's workers), "local" (all local cores and devices), "ray" or
      "ray://host:port" (Ray actors; the `distributed` extra): see docs/distributed.md.
    """
    t0 = time.perf_counter()
    arguments.check_target(target)
    arguments.check_budget(budget)
    arguments.check_seed(seed)
    arguments.check_flag("quiet", quiet)
    arguments.check_cache(cache)
    candidates = arguments.check_candidates(candidates)
    arguments.check_backend(backend)
    opts = SearchOptions(budget=float(DEFAULT_BUDGET.get(target, DEFAULT_BUDGET_OTHER) if budget is None else budget),
                         seed=int(seed), quiet=quiet)
    arguments.apply_options(opts, options)
    opts.cluster = check_cluster(cluster)
    if opts.cluster is not None and not opts.isolate:
        raise OptionError("cluster needs isolated workers; drop isolate=False", "compile")
    specs = [as_spec(s) for s in specs]
    arguments.check_function(fn, specs)
    written = trace_primitives(fn, *specs)      # the program as written: the reference's error bound
    graph = kernel_terms(written)
    try:
        be = backend if backend is not None else get_backend(target)
    except BackendUnavailable as e:
        raise TargetError(str(e), "compile") from None
    t_trace = time.perf_counter()
    if target == "reference" and backend is None:
        return CompiledFunction(fn, specs, graph, target, be.build(graph), timings={"trace": t_trace - t0})

    use_cache = cache if cache is not None else (candidates is None and backend is None)
    directory = os.fspath(cache) if isinstance(cache, (str, os.PathLike)) else None
    device = cache_mod.device_name(be, target)
    key = cache_mod.make_key(graph, specs, target, device, _saturn_version())
    why_not = ""
    if use_cache:
        entry, path, why_not = cache_mod.load(key, directory)
        bad = same_interface(graph, entry.graph) if entry is not None else None
        if bad:  # a well-formed entry whose program does not fit this one's inputs and outputs
            entry, why_not = None, f"ignored entry whose program does not fit: {bad}"
        if entry is not None:
            try:
                exe = cache_mod.build(be, entry)
            except Exception as e:  # stale schedule or backend change: search again
                why_not = f"ignored entry that failed to build: {type(e).__name__}: {e}"
            else:
                timings = {"trace": t_trace - t0, "cache load + build": time.perf_counter() - t_trace}
                report = (f"cache hit: {path}\nchosen: {entry.description}, schedule {describe_schedule(entry.schedule)}"
                          f", median {entry.median * 1e3:.4g} ms when searched\n{entry.report}")
                return CompiledFunction(fn, specs, graph, target, exe, report, chosen=entry.graph,
                                        cache="hit", timings=timings)

    name = getattr(fn, "__name__", "function")
    # the cost model learns where winners are cached, and not at all with the cache off, unless
    # told where (cost_model_dir=: a cold benchmark keeps one model across its searches)
    if "cost_model_dir" not in options:
        opts.cost_model_dir = directory if use_cache else ""
    split = regions.split_for(graph, target, opts.regions, opts.reference_limit) if candidates is None else None
    if split is not None:
        return _compile_regions(fn, specs, graph, split, be, backend if backend is not None else target, target,
                                device, opts, name, use_cache, directory, t0, t_trace)
    variant = _odd_variant(fn, specs)
    # the budget bounds the call: the search gets what tracing (twice, for the odd shapes: 1-2 s
    # of a 12-layer model's compile) left of it
    before = time.perf_counter() - t0
    rest = SearchOptions(**{**opts.__dict__, "budget": max(0.0, opts.budget - before)})
    result = search(graph, be, target=target, backend_spec=backend if backend is not None else target,
                    device=device, candidates=candidates, options=rest,
                    progress=Progress(f"{name} for {target}", quiet=quiet),
                    variant=variant, written=written)
    if before >= 0.1:
        result.notes.append(f"tracing (at the compiled and the odd shapes) took {before:.1f} s of the "
                            f"{opts.budget:g} s budget; the search had the rest")
    if opts.odd_shapes and variant is None:
        result.notes.append("odd shapes not checked: the function does not trace at other shapes "
                            f"(tried {', '.join(str(list(s.shape)) for s in odd_specs(specs))} and smaller)")
    state = "off"
    if use_cache:
        result.cache = "miss" + (f" ({why_not})" if why_not not in ("", "miss") else "")
        w = result.winner
        try:
            program = getattr(result.executable, "program", None) if hasattr(be, "build_program") else None
            result.cache_path = cache_mod.store(key, cache_mod.Entry(w.graph, w.schedule, w.description, w.median,
                                                                     str(result), program=program), directory)
            state = "stored"
        except Exception as e:  # unwritable directory, or a schedule/program the cache cannot store
            result.notes.append(f"could not write the cache entry: {type(e).__name__}: {e}")
            checked.warn_write_failure("compile", directory or cache_mod.cache_dir(), e)
    timings = {"trace": t_trace - t0, "search": time.perf_counter() - t_trace}
    return CompiledFunction(fn, specs, graph, target, result.executable, result, chosen=result.chosen_graph,
                            cache=state, timings=timings)
