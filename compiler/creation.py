"""Tensors made from positions, not inputs: arange (the IOTA primitive), eye and the triangle
masks of tril/triu (views of constants), so a causal mask is computed in the program instead
of passed in."""
from __future__ import annotations

import math

from compiler.errors import DTypeError, ShapeError
from compiler.tensor_args import as_scalar
from ir import node as N
from ir.dtypes import DType, as_dtype


def _tensor(node):
    from compiler.tensor import Tensor
    return Tensor(node)


def positions(n: int):
    """The i32 tensor 0, 1, ..., n - 1."""
    return _tensor(N.iota((n,)))


def arange(start, end=None, step=1, dtype=None):
    """torch.arange: start, start + step, ... below end (above it for a negative step). Ints give
    i32 (torch: int64), any float argument f32; float values are start + i * step in f32."""
    if end is None:
        start, end = 0, start
    vals = [as_scalar(v) for v in (start, end, step)]
    if any(v is None or isinstance(v, bool) for v in vals):
        raise DTypeError(f"arange takes numbers, got {(start, end, step)!r}", "arange")
    start, end, step = vals
    if step == 0:
        raise ShapeError("arange step must be nonzero", "arange")
    n = max(math.ceil((end - start) / step), 0)
    if dtype is not None:
        try:
            dt = as_dtype(dtype)
        except TypeError as e:
            raise DTypeError(str(e), "arange") from None
    else:
        dt = DType.f32 if any(isinstance(v, float) for v in vals) else DType.i32
    if dt == DType.i32 and not all(-2 ** 31 <= v < 2 ** 31 for v in (start, start + (n - 1) * step)):
        raise DTypeError(f"arange({start}, {end}, {step}) does not fit i32", "arange")
    i = positions(n)
    if dt.is_float:
        out = i.astype(DType.f32) * float(step) + float(start) if (step, start) != (1, 0) else i.astype(DType.f32)
        return out.astype(dt)
    if dt == DType.bool:
        raise DTypeError("arange of bool", "arange")
    return i * int(step) + int(start) if (step, start) != (1, 0) else i


def eye(n: int, m: int | None = None, dtype="f32"):
    """The n x m identity (torch.eye)."""
    m = n if m is None else m
    return triangle(n, m, 0, "eq").astype(dtype)


def lower_triangle(rows: int, cols: int, diagonal: int = 0):
    """The bool mask `j <= i + diagonal` of shape (rows, cols), from views of constants (no
    iota: a program of constants and views keeps every backend path, the CUDA templates'
    attention included). A pattern p of period P = rows + cols read with row stride P - 1 gives
    row i, column j the element p[(j - i) mod P]: p[k] holds for offset k (k < cols) or k - P
    (k >= cols)."""
    from compiler.tensor import Tensor
    period = rows + cols
    if diagonal >= 0:
        ranges = [(0, min(diagonal, cols - 1) + 1), (cols, period)]
    else:
        ranges = [(cols, max(cols, period + diagonal + 1))]
    p = None
    for start, stop in ranges:
        if stop > start:
            piece = Tensor.full((stop - start,), True, DType.bool).pad([(start, period - stop)])
            p = piece if p is None else p.logical_or(piece)
    if p is None or rows == 0 or cols == 0:
        return Tensor.full((rows, cols), False, DType.bool)
    tiled = p.reshape(1, period).expand(rows, period).reshape(rows * period)
    return tiled[: rows * (period - 1)].reshape(rows, period - 1)[:, :cols]


def triangle(rows: int, cols: int, k: int, keep: str):
    """bool (rows, cols): col - row <= k ('lower', tril's), >= k ('upper', triu's) or == k."""
    if keep == "lower":
        return lower_triangle(rows, cols, k)
    if keep == "upper":
        return lower_triangle(rows, cols, k - 1).logical_not()
    return lower_triangle(rows, cols, k).logical_and(lower_triangle(rows, cols, k - 1).logical_not())
