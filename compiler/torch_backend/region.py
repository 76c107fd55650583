"""A supported region of an ATen graph compiled as one Saturn program, called on torch tensors.

The region is a fused FX submodule whose nodes all translate (`translate.why_unsupported`).
Its placeholders become the Saturn function's inputs (parameters and buffers among them: they
are passed as arguments, never baked in), its outputs the function's results. Calls share
memory both ways: on the CPU, contiguous tensors go in as numpy views and results come back as
torch tensors over Saturn's freshly allocated output arrays; on CUDA, tensors go in as they are
(parameters and buffers are read in place on the device, never copied per call) and results
are fresh CUDA tensors, all on torch's current stream (compiler/device_args.py).
"""
from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field

from compiler.torch_backend import convert
from compiler.torch_backend.translate import op_name, spec_of, translate


@dataclass
class RegionInfo:
    """What `explain` shows for one region."""
    name: str
    ops: collections.Counter                  # ATen op -> count of nodes
    inputs: list[str]                         # input specs, e.g. 'f32[2, 16, 64]'
    outputs: int
    status: str = "saturn"                    # 'saturn', or 'pytorch' when compiling failed
    reason: str = ""                          # why it runs in PyTorch
    compile_s: float = 0.0
    cache: str = ""
    chosen: str = ""                          # the search's winner, in a few words
    calls: int = 0
    run_s: float = 0.0
    copied_inputs: int = 0                    # inputs that had to be made contiguous (total over calls)
    compiled: object = field(default=None, repr=False)   # the CompiledFunction


def region_function(sub):
    """A Python function over lazy Tensors that evaluates the FX graph `sub` with Saturn's frontend."""
    nodes = list(sub.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    out_node = next(n for n in nodes if n.op == "output")

    def region(*inputs):
        env = dict(zip(placeholders, inputs))
        for n in nodes:
            if n.op == "call_function":
                env[n] = translate(n, env)
        outs = out_node.args[0]
        outs = outs if isinstance(outs, (tuple, list)) else (outs,)
        return tuple(env[o] for o in outs)
    return region, placeholders


def count_ops(sub) -> collections.Counter:
    return collections.Counter(op_name(n) for n in sub.graph.nodes
                               if n.op == "call_function" and op_name(n) != "operator.getitem")


def _torch_module_base():
    import torch
    return torch.nn.Module


class SaturnRegion(_torch_module_base()):
    """Calls a compiled Saturn program in place of a fused FX submodule."""

    def __init__(self, info: RegionInfo, compiled, returns_tuple: bool):
        super().__init__()
        self.info, self.compiled, self.returns_tuple = info, compiled, returns_tuple

    def forward(self, *args):
        t0 = time.perf_counter()
        if self.compiled.target == "cuda":
            result = self._forward_cuda(args)
        else:
            result = self._forward_cpu(args)
        self.info.calls += 1
        self.info.run_s += time.perf_counter() - t0
        return result if self.returns_tuple else result[0]

    def _forward_cuda(self, args) -> tuple:
        outs = self.compiled(*args)
        self.info.copied_inputs = self.compiled._device_stats.copied_inputs
        return outs if isinstance(outs, tuple) else (outs,)

    def _forward_cpu(self, args) -> tuple:
        arrays = []
        for a in args:
            x = convert.to_numpy(a)
            if not x.flags.c_contiguous:
                self.info.copied_inputs += 1
            arrays.append(x)
        outs = self.compiled(*arrays)
        outs = outs if isinstance(outs, tuple) else (outs,)
        return tuple(convert.from_numpy(o) for o in outs)


def compile_region(name: str, sub, options: dict):
    """(module to call, RegionInfo): a SaturnRegion, or `sub` itself when Saturn cannot build it."""
    import compiler
    fn, placeholders = region_function(sub)
    fn.__name__ = name
    out_arg = next(n for n in sub.graph.nodes if n.op == "output").args[0]
    returns_tuple = isinstance(out_arg, (tuple, list))
    info = RegionInfo(name, count_ops(sub), [], len(out_arg) if returns_tuple else 1)
    t0 = time.perf_counter()
    try:
        specs = [compiler.spec(*spec_of(p.meta["val"]), p.name) for p in placeholders]
        info.inputs = [str(s) for s in specs]
        compiled = compiler.compile(fn, *specs, **options)
    except Exception as e:  # noqa: BLE001 - any failure keeps the region correct, in PyTorch
        info.status, info.reason = "pytorch", f"Saturn could not compile it: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        info.compile_s = time.perf_counter() - t0
        return sub, info
    info.compile_s = time.perf_counter() - t0
    info.cache, info.compiled = compiled.cache, compiled
    w = getattr(compiled.result, "winner", None)
    info.chosen = getattr(w, "description", "") if w is not None else ("cached winner" if compiled.cache == "hit" else "")
    if hasattr(compiled.report, "summary"):     # compiled region by region (compiler/regions.py)
        info.chosen = compiled.report.summary()
    return SaturnRegion(info, compiled, returns_tuple), info
