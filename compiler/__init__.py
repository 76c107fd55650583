"""Saturn: an e-graph superoptimizing tensor compiler.

    import compiler as saturn
    f = saturn.compile(lambda x: x.softmax(-1), saturn.spec((4, 1000), "f32"))
    y = f(np.random.rand(4, 1000).astype(np.float32))
"""
from compiler.api import CompiledFunction, compile
from compiler.errors import DTypeError, SaturnError, ShapeError, UnsupportedError
from compiler.tensor import Tensor, cat, maximum, where
from compiler.tensor import stack
from compiler.einsum import einsum
from compiler import functional
from compiler.trace import Spec, spec, trace
from ir.dtypes import dtypes

__version__ = "0.1.0"
__all__ = ["compile", "trace", "spec", "Spec", "Tensor", "cat", "where", "maximum", "dtypes",
           "CompiledFunction", "SaturnError", "ShapeError", "DTypeError", "UnsupportedError"]
__all__ += ["stack", "einsum", "functional"]
