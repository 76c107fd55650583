"""Per-dtype comparison tolerances (in the style of JAX's test utilities) and `assert_close`.

`rtol`/`atol` are for a single rounded op; composite ops (softmax, layer_norm, a transformer
block) pass a `scale` that multiplies both, because their error grows with the number of
roundings. Comparisons are made in float64.
"""
from __future__ import annotations

import numpy as np

from ir.dtypes import DType, as_dtype

# dtype -> (rtol, atol)
TOLERANCE = {
    DType.f32: (1e-5, 1e-6),
    DType.f16: (2e-3, 1e-3),
    DType.bf16: (1.6e-2, 1e-2),
    DType.i32: (0.0, 0.0),
    DType.bool: (0.0, 0.0),
}


def tolerance(dtype, scale: float = 1.0) -> tuple[float, float]:
    """(rtol, atol) for results stored in `dtype`, widened by `scale` for composite ops."""
    rtol, atol = TOLERANCE[as_dtype(dtype)]
    return rtol * scale, atol * scale


def assert_close(actual, expected, dtype=None, scale: float = 1.0, err_msg: str = "") -> None:
    """Compare in float64 with the tolerance of `dtype` (default: actual's dtype); NaNs and
    infinities must sit in the same places."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    dtype = as_dtype(dtype if dtype is not None else actual.dtype)
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape} {err_msg}"
    rtol, atol = tolerance(dtype, scale)
    if dtype in (DType.i32, DType.bool):
        np.testing.assert_array_equal(actual, expected, err_msg=err_msg)
        return
    np.testing.assert_allclose(actual.astype(np.float64), np.asarray(expected, np.float64),
                               rtol=rtol, atol=atol, equal_nan=True, err_msg=err_msg)
