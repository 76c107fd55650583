"""Argument checking shared by the frontend modules: scalars, broadcasting, axes, and the
half-precision wrapper that runs a composite op in f32."""
from __future__ import annotations

import functools
import operator

from compiler.errors import ShapeError
from ir.dtypes import HALVES, DType

Scalar = int | float | bool


def as_scalar(x):
    """A Python scalar for Python and numpy scalars (and 0-d arrays); None for anything else."""
    if isinstance(x, (bool, int, float)):
        return x
    if hasattr(x, "dtype") and getattr(x, "shape", None) == () and hasattr(x, "item") and not hasattr(x, "node"):
        return x.item()
    return None


def half_in_f32(fn):
    """Run a composite op on f16/bf16 tensors in f32 and round once at the end (like PyTorch's
    opmath): without this every intermediate primitive would round to the half type."""
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        if self.dtype not in HALVES:
            return fn(self, *args, **kwargs)
        up = [a.astype(DType.f32) if isinstance(a, type(self)) and a.dtype in HALVES else a for a in args]
        return fn(self.astype(DType.f32), *up, **kwargs).astype(self.dtype)
    return wrapper


def broadcast_shapes(op: str, *shapes) -> tuple[int, ...]:
    nd = max(len(s) for s in shapes)
    out = []
    for i in range(nd):
        dims = {s[len(s) - nd + i] for s in shapes if len(s) - nd + i >= 0} - {1}
        if len(dims) > 1:
            raise ShapeError(f"shapes {' and '.join(str(tuple(s)) for s in shapes)} do not broadcast "
                             f"(axis {i - nd}: sizes {sorted(dims)})", op)
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def is_int(x) -> bool:
    """An int-like axis or size (Python or numpy int), not a bool."""
    return not isinstance(x, bool) and (isinstance(x, int) or (hasattr(x, "__index__") and not hasattr(x, "node")))


def norm_axis(op: str, axis, ndim: int, shape: tuple | None = None) -> int:
    """`axis` as a non-negative index into `ndim` axes (`shape`, when given, goes in the message).
    A 0-d tensor takes axis 0 or -1, like PyTorch."""
    if not is_int(axis):
        raise ShapeError(f"axis must be an int, got {axis!r}", op)
    axis = operator.index(axis)
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        of = f"shape {tuple(shape)} (rank {ndim})" if shape is not None else f"a tensor of rank {ndim}"
        raise ShapeError(f"axis {axis} is out of range for {of}", op)
    return axis % ndim if ndim else 0


def norm_axes(op: str, axis, ndim: int, shape: tuple | None = None) -> tuple[int, ...]:
    """None (every axis), one axis, or a tuple/list of distinct axes, as non-negative indices."""
    if axis is None:
        return tuple(range(ndim))
    if is_int(axis):
        axes = (axis,)
    elif isinstance(axis, (tuple, list)):
        axes = tuple(axis)
    else:
        raise ShapeError(f"axis must be an int or a tuple of ints, got {axis!r}", op)
    out = tuple(norm_axis(op, a, ndim, shape) for a in axes)
    if len(set(out)) != len(out) and ndim:
        raise ShapeError(f"repeated axis in {axis} for shape {shape}", op)
    return tuple(dict.fromkeys(out))


def int_list(op: str, name: str, value, n: int | None = None) -> tuple[int, ...]:
    """An int or a sequence of ints as a tuple (an int repeated `n` times when `n` is given)."""
    if is_int(value):
        value = (operator.index(value),) * (n if n is not None else 1)
    elif isinstance(value, (tuple, list)) and all(is_int(v) for v in value):
        value = tuple(operator.index(v) for v in value)
    else:
        raise ShapeError(f"{name} must be an int or a sequence of ints, got {value!r}", op)
    if n is not None and len(value) != n:
        raise ShapeError(f"{name} needs {n} values, got {value}", op)
    return value
