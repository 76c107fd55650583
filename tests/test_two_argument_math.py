"""atan2, hypot, nan_to_num and masked_fill at their edges (signed zeros, infinities, NaN,
subnormals, the dtype's limits) on the reference and CPU targets; the random cases are rows of
tests/frontend_cases.py."""
from __future__ import annotations

import numpy as np
import pytest

import compiler as saturn
from compiler.errors import SaturnError

EDGES = np.array([0.0, -0.0, np.inf, -np.inf, 1.0, -1.0, np.nan, 2.5, -1e-30, 1e30, 1e-45, -3e-39, 3e38], np.float32)
GRID = [a.ravel() for a in np.meshgrid(EDGES, EDGES)]


def _run(fn, target, *arrays):
    specs = [saturn.spec(a.shape, "bool" if a.dtype == np.bool_ else str(a.dtype)) for a in arrays]
    f = saturn.compile(fn, *specs, target=target, budget=0, quiet=True, cache=False)
    return np.asarray(f(*arrays))


def _same(got, want, tol):
    """Equal up to `tol` (absolute), NaN for NaN, and the same sign bit on the non-NaNs."""
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(np.signbit(got[~nan]), np.signbit(want[~nan]))
    tol = np.broadcast_to(tol, want.shape)[~nan]
    with np.errstate(invalid="ignore"):
        assert np.all((got[~nan] == want[~nan]) | (np.abs(got[~nan] - want[~nan]) <= tol))


@pytest.mark.parametrize("target", ["reference", "cpu"])
def test_atan2_on_every_pair_of_edge_values(target):
    y, x = GRID
    with np.errstate(all="ignore"):
        want = np.arctan2(y.astype(np.float64), x.astype(np.float64)).astype(np.float32)
    _same(_run(lambda a, b: a.atan2(b), target, y, x), want, 3e-7)


@pytest.mark.parametrize("target", ["reference", "cpu"])
def test_hypot_on_every_pair_of_edge_values(target):
    a, b = GRID
    with np.errstate(all="ignore"):
        want = np.hypot(a.astype(np.float64), b.astype(np.float64))
        want = np.where(np.isinf(a) | np.isinf(b), np.inf, want).astype(np.float32)   # C: inf beats NaN
    got = _run(lambda p, q: p.hypot(q), target, a, b)
    with np.errstate(over="ignore"):
        _same(got, want, 2 * np.abs(want) * 2.0 ** -24 + 2e-45)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_nan_to_num_defaults_are_the_dtypes_limits(dtype):
    from ir.dtypes import as_dtype
    from ir.numerics import MAX_FINITE
    x = np.array([np.nan, np.inf, -np.inf, 1.5, -0.0], np.float32).astype(as_dtype(dtype).np)
    got = _run(lambda t: t.nan_to_num(), "cpu", x).astype(np.float64)
    top = MAX_FINITE[as_dtype(dtype)]
    assert got.tolist() == [0.0, top, -top, 1.5, 0.0] and np.signbit(got[4])


def test_masked_fill_casts_the_value_broadcasts_and_names_a_bad_mask():
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    m = np.array([True, False, True])
    assert _run(lambda t, k: t.masked_fill(k, 7.9), "cpu", x, m).tolist() == [[7, 1, 7], [7, 4, 7]]
    with pytest.raises(SaturnError, match="bool mask"):
        saturn.trace(lambda t: t.masked_fill(t, 1.0), saturn.spec((3,)))
    with pytest.raises(SaturnError, match="0-d tensor"):
        saturn.trace(lambda t, k: t.masked_fill(k > 0, t), saturn.spec((3,)), saturn.spec((3,)))
