"""The torch.compile backend: a Dynamo graph -> ATen (AOTAutograd) -> Saturn regions + PyTorch.

Inference only: a graph traced with grad mode on and inputs that require grad runs in PyTorch
eager, with one warning; so does a graph with dynamic shapes (Saturn compiles static shapes).
Otherwise AOTAutograd turns the graph into a functional ATen inference graph (parameters and
buffers as inputs), `partition` splits it, and each region is compiled by `compiler.compile`
for the target (CUDA when the model's inputs are CUDA tensors, unless `options` say otherwise;
then regions take CUDA tensors, read in place on torch's current stream).
"""
from __future__ import annotations

import dataclasses
import inspect
import time
import warnings

from compiler.errors import SaturnError
from compiler.torch_backend.partition import fallback_summary, partition
from compiler.torch_backend.region import compile_region
from compiler.torch_backend.report import GraphRecord, new_record

COMPILE_OPTIONS = {"target", "budget", "cache", "quiet", "seed"}   # compiler.compile's own keywords
# Computing ATen nodes per region at most: a bound on one search's program size (a tiny 2-layer
# GPT-2, 86 ATen ops, compiles as one region in 7.4 s at budget 1 on 2 cores, against 8.7 s as
# 16-op regions; the e-graph's size limits still bound exploration of bigger regions).
MAX_REGION_OPS = 256

AUTOGRAD_WARNING = ("saturn: autograd is on (grad mode enabled and inputs that require grad), so this graph "
                    "runs in PyTorch eager; call the compiled module under torch.no_grad() or "
                    "torch.inference_mode() to run it with Saturn")


class BackendOptionError(SaturnError, TypeError):
    pass


def check_options(options: dict | None, example_inputs=()) -> dict:
    """torch.compile(..., options={...}) -> keyword arguments for compiler.compile. The target
    defaults to 'cuda' when an example input is a CUDA tensor, else 'cpu'."""
    from compiler.search import SearchOptions
    allowed = COMPILE_OPTIONS | {f.name for f in dataclasses.fields(SearchOptions)}
    opts = dict(options or {})
    bad = sorted(set(opts) - allowed - {"max_region_ops"})
    if bad:
        raise BackendOptionError(f"unknown option(s) {', '.join(map(repr, bad))}; "
                                 f"choose from {', '.join(sorted(allowed))}", "torch.compile(backend='saturn')")
    on_cuda = any(getattr(getattr(t, "device", None), "type", None) == "cuda" for t in example_inputs)
    opts.setdefault("target", "cuda" if on_cuda else "cpu")
    return opts


def region_device(target: str) -> str:
    """The torch device type whose tensors a region for `target` takes."""
    return "cuda" if target == "cuda" else "cpu"


def decompositions() -> dict:
    """ATen ops rewritten into ones Saturn translates before partitioning (others stay whole:
    softmax, layer_norm, gelu, attention, convolution, pooling, group norm and inference batch
    norm are translated as they are)."""
    import torch
    from torch._decomp import get_decompositions
    aten = torch.ops.aten
    return get_decompositions([
        aten._native_batch_norm_legit,
        aten._native_batch_norm_legit_functional, aten.native_batch_norm, aten.leaky_relu, aten.elu,
        aten.hardswish, aten.hardsigmoid, aten.softplus, aten.mish, aten.glu, aten.addcmul, aten.addcdiv,
        aten.lerp, aten.linalg_vector_norm, aten.std, aten.threshold, aten.celu, aten.selu, aten.square,
        aten.log_sigmoid_forward,
    ])


def _frame():
    """(description, code object, owning module) of the frame Dynamo is compiling, best effort:
    the module is `self`, the first argument, the first of `*args` (a decorator's wrapper) or
    the `fn` that torch.compile's own wrapper of a module closes over."""
    import torch
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator
        tx = InstructionTranslator.current_tx()
        code, local = tx.f_code, tx.f_locals
    except Exception:  # noqa: BLE001 - private Dynamo API: only the report loses its label
        return "?", None, None
    names = code.co_varnames
    candidates = [local.get("self"), local.get(names[0]) if code.co_argcount else None, local.get("fn")]
    if code.co_flags & inspect.CO_VARARGS:
        varargs = local.get(names[code.co_argcount + code.co_kwonlyargcount])
        candidates.insert(2, varargs[0] if isinstance(varargs, tuple) and varargs else None)
    owner = next((c for c in candidates if isinstance(c, torch.nn.Module)), None)
    return (f"{code.co_name} of {type(owner).__name__}" if owner is not None else code.co_name), code, owner


def _timed(rec: GraphRecord, fn):
    def run(*args):
        t0 = time.perf_counter()
        out = fn(*args)
        rec.calls += 1
        rec.run_s += time.perf_counter() - t0
        return out
    return run


def build(aten_gm, rec: GraphRecord, options: dict):
    """The ATen graph with each supported region replaced by its Saturn program."""
    rec.aten_nodes = sum(1 for n in aten_gm.graph.nodes if n.op == "call_function")
    options = dict(options)
    fused, reasons, names = partition(aten_gm, device=region_device(options.get("target", "cpu")),
                                      max_ops=options.pop("max_region_ops", MAX_REGION_OPS))
    rec.fallbacks = fallback_summary(reasons)
    for i, name in enumerate(names):
        module, info = compile_region(f"region{rec.index}_{i + 1}", getattr(fused, name), options)
        rec.regions.append(info)
        setattr(fused, name, module)
    return fused


def compile_graph(gm, example_inputs, options: dict | None = None, mode: str | None = None):
    """Dynamo's backend entry: returns the callable that runs `gm`."""
    import torch
    if mode not in (None, "default"):
        raise BackendOptionError(f"mode={mode!r} names an Inductor preset; Saturn takes options={{...}} "
                                 "(e.g. {'budget': 10})", "torch.compile(backend='saturn')")
    opts = check_options(options, example_inputs)
    rec = new_record(*_frame())
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs):
        warnings.warn(AUTOGRAD_WARNING, stacklevel=2)
        rec.whole_graph = "autograd is on (grad mode and inputs that require grad): Saturn compiles inference only"
        return _timed(rec, gm.forward)
    if any(not isinstance(t, torch.Tensor) for t in example_inputs):
        rec.whole_graph = "dynamic shapes (symbolic sizes among the inputs): Saturn compiles static shapes"
        return _timed(rec, gm.forward)
    from torch._functorch.aot_autograd import aot_module_simplified
    from compiler.torch_backend import upsample
    upsample.keep_whole(gm)   # before ATen's upsampling decomposes into int64 indexing
    compiled = aot_module_simplified(gm, example_inputs, fw_compiler=lambda g, _inputs: build(g, rec, opts),
                                     decompositions=decompositions())
    return _timed(rec, compiled)
