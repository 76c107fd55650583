"""Trace a Python function over lazy Tensors into a primitive `Graph`."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from compiler.errors import DTypeError, ShapeError
from compiler.tensor import Tensor
from ir import node as N
from ir.dtypes import DType, as_dtype
from ir.graph import Graph
from rewrites.apply import kernel_terms


@dataclass(frozen=True)
class Spec:
    """The shape and dtype of one input of a traced function."""
    shape: tuple[int, ...]
    dtype: DType = DType.f32
    name: str | None = None

    def __post_init__(self):
        shape = tuple(self.shape)
        if any(not isinstance(s, (int, np.integer)) or isinstance(s, bool) or s < 0 for s in shape):
            raise ShapeError(f"input shape must be non-negative ints, got {self.shape}", "spec")
        object.__setattr__(self, "shape", tuple(int(s) for s in shape))
        try:
            object.__setattr__(self, "dtype", as_dtype(self.dtype))
        except TypeError as e:
            raise DTypeError(str(e), "spec") from None

    def __str__(self) -> str:
        return f"{self.dtype.value}{list(self.shape)}"


def spec(shape, dtype="f32", name: str | None = None) -> Spec:
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise ShapeError(f"input shape must be a tuple of non-negative ints, got {shape!r}", "spec")
    return Spec(tuple(shape), dtype, name)


def as_spec(x) -> Spec:
    """Accept a Spec, a (shape, dtype) pair, a bare shape tuple (f32) or an example array."""
    if isinstance(x, Spec):
        return x
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return Spec(tuple(x.shape), x.dtype)  # Spec converts the dtype (DTypeError if unsupported)
    if isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], (tuple, list)):
        return Spec(tuple(x[0]), x[1])
    if isinstance(x, (tuple, list)):
        return Spec(tuple(x))
    raise ShapeError(f"cannot read an input spec from {x!r}; use compiler.spec(shape, dtype)", "trace")


def trace(fn, *specs) -> Graph:
    """Call `fn` on lazy Tensors described by `specs` and return the program it builds."""
    # the primitive program with its kernel terms (sums of products as contractions): the
    # program every later stage starts from (rewrites/kernels.py)
    return kernel_terms(trace_primitives(fn, *specs))


def trace_primitives(fn, *specs) -> Graph:
    """The program `fn` builds as written, in primitive ops only (no kernel terms): its error
    bound is that of the user's roundings (a half-rounded softmax before a product, say)."""
    specs = [as_spec(s) for s in specs]
    names = getattr(fn, "__code__", None)
    argnames = names.co_varnames[:names.co_argcount] if names else ()
    inputs = []
    for i, s in enumerate(specs):
        name = s.name or (argnames[i] if i < len(argnames) else f"x{i}")
        inputs.append(N.input_(i, name, s.shape, s.dtype))
    result = fn(*(Tensor(n) for n in inputs))
    outs = result if isinstance(result, (tuple, list)) else (result,)
    for o in outs:
        if not isinstance(o, Tensor):
            raise ShapeError(f"the traced function must return Tensors, got {type(o).__name__}", "trace")
    return Graph(tuple(inputs), tuple(o.node for o in outs))
