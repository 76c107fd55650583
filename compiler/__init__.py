"""Saturn: an e-graph superoptimizing tensor compiler.

    import compiler as saturn
    f = saturn.compile(lambda x: x.softmax(-1), saturn.spec((4, 1000), "f32"))
    y = f(np.random.rand(4, 1000).astype(np.float32))
"""
from compiler.api import CompiledFunction, compile
from compiler.saved import load
from compiler.errors import DTypeError, SaturnError, ShapeError, UnsupportedError
from compiler.tensor import Tensor, cat, maximum, where
from compiler.tensor import stack
from compiler.creation import arange, eye
from compiler.einsum import einsum
from compiler import functional
from compiler.trace import Spec, spec, trace
from ir.dtypes import dtypes



def explain(compiled=None):
    """What Saturn did, to print: for a `compile()` result its program, search and kernels (a
    str); for a `torch.compile(..., backend="saturn")` result (or None: every graph so far) the
    torch backend's `Report` of regions, fallbacks and timings."""
    if isinstance(compiled, CompiledFunction):
        return compiled.explain()
    from compiler.torch_backend import explain as torch_explain
    return torch_explain(compiled)


__version__ = "0.1.0"
__all__ = ["compile", "trace", "spec", "Spec", "Tensor", "cat", "where", "maximum", "dtypes",
           "CompiledFunction", "SaturnError", "ShapeError", "DTypeError", "UnsupportedError"]
__all__ += ["stack", "einsum", "functional", "explain", "load", "arange", "eye"]
