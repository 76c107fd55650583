"""`assert_close` for tests, over the tolerances of `ir.numerics` (one table for the project).

`rtol`/`atol` are for a single rounded op; composite ops (softmax, layer_norm, a transformer
block) pass a `scale` that multiplies both, because their error grows with the number of
roundings. Where a test has the traced program, it can pass `graph` and `args`: each
element may then also differ by its propagated error bound (`ir.bounds`), which is what an
ill-conditioned element (a layer_norm over nearly equal values, an output that cancels to
zero) needs, without widening the tolerance of the well-conditioned ones. Comparisons are
made in float64.
"""
from __future__ import annotations

import numpy as np

from ir.dtypes import DType, as_dtype
from ir.numerics import ELEMENT_TOLERANCE as TOLERANCE


def tolerance(dtype, scale: float = 1.0) -> tuple[float, float]:
    """(rtol, atol) for results stored in `dtype`, widened by `scale` for composite ops."""
    rtol, atol = TOLERANCE[as_dtype(dtype)]
    return rtol * scale, atol * scale


def error_bound(graph, args, output: int = 0) -> np.ndarray:
    """The propagated error bound of `graph`'s output on `args` (ir.bounds), per element."""
    from ir.bounds import allowed, evaluate_bounded
    b = evaluate_bounded(graph, args)[output]
    return allowed(b.value, b.bound, graph.outputs[output].dtype)


def assert_close(actual, expected, dtype=None, scale: float = 1.0, err_msg: str = "",
                 graph=None, args=None) -> None:
    """Compare in float64 with the tolerance of `dtype` (default: actual's dtype); NaNs and
    infinities must sit in the same places. With `graph` and `args`, an element may also be
    off by its propagated error bound."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    dtype = as_dtype(dtype if dtype is not None else actual.dtype)
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape} {err_msg}"
    rtol, atol = tolerance(dtype, scale)
    if dtype in (DType.i32, DType.bool):
        np.testing.assert_array_equal(actual, expected, err_msg=err_msg)
        return
    a, e = actual.astype(np.float64), np.asarray(expected, np.float64)
    if graph is not None:
        with np.errstate(all="ignore"):
            bound = error_bound(graph, args)
            ok = ~np.isfinite(e) | ~np.isfinite(a) | (np.abs(a - e) <= np.maximum(atol + rtol * np.abs(e), bound))
        # within its bound: compare exactly there, so only the rest meets rtol/atol
        a = np.where(ok & np.isfinite(e) & np.isfinite(a), e, a)
    np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, equal_nan=True, err_msg=err_msg)
