"""The public entry points: `trace` a function, `compile` it for a target, call the result."""
from __future__ import annotations

import numpy as np

from backends import get_backend
from compiler.errors import DTypeError, ShapeError
from compiler.trace import Spec, as_spec, trace
from ir.graph import Graph


class CompiledFunction:
    """A traced program built for one target; call it with numpy arrays."""

    def __init__(self, fn, specs: list[Spec], graph: Graph, target: str, executable, report=None):
        self.fn, self.specs, self.graph, self.target = fn, specs, graph, target
        self.executable = executable
        self.report = report
        self._single = None

    def _check(self, args) -> list[np.ndarray]:
        name = getattr(self.fn, "__name__", "compiled function")
        if len(args) != len(self.specs):
            raise ShapeError(f"{name} takes {len(self.specs)} inputs ({', '.join(map(str, self.specs))}), "
                             f"got {len(args)}", "call")
        out = []
        for i, (a, s) in enumerate(zip(args, self.specs)):
            if hasattr(a, "detach") and hasattr(a, "numpy"):  # a CPU torch tensor
                a = a.detach().numpy()
            a = np.asarray(a) if not isinstance(a, np.ndarray) else a
            if tuple(a.shape) != s.shape:
                raise ShapeError(f"input {i} has shape {tuple(a.shape)}, expected {s.shape}", "call")
            if a.dtype != s.dtype.np:
                raise DTypeError(f"input {i} has dtype {a.dtype}, expected {s.dtype.np} ({s.dtype.value}); "
                                 f"convert it with .astype", "call")
            out.append(np.ascontiguousarray(a))
        return out

    def __call__(self, *args):
        outs = self.executable(*self._check(args))
        return outs[0] if len(self.graph.outputs) == 1 else tuple(outs)

    def explain(self) -> str:
        lines = [f"target: {self.target}", f"inputs: {', '.join(map(str, self.specs))}",
                 f"program ({self.graph.num_compute_ops()} compute ops):", str(self.graph)]
        if self.report is not None:
            lines += ["", str(self.report)]
        lines += ["", "generated code:", getattr(self.executable, "source", "<none>")]
        return "\n".join(lines)


def compile(fn, *specs, target: str = "cpu", **options) -> CompiledFunction:  # noqa: A001 - public name
    """Trace `fn` on inputs described by `specs` and build it for `target` ('cpu', 'cuda', 'reference')."""
    specs = [as_spec(s) for s in specs]
    graph = trace(fn, *specs)
    backend = get_backend(target)
    return CompiledFunction(fn, specs, graph, target, backend.build(graph))
