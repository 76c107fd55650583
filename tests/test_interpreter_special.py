"""NaN, infinities and signed zeros through the frontend and the reference interpreter.

What matches numpy and PyTorch is asserted against both; the deliberate differences are
asserted as they are and listed in docs/ir.md."""
from __future__ import annotations

import numpy as np
import pytest

import compiler
from ir.interpreter import evaluate

nan, inf = np.nan, np.inf
SPECIAL = np.array([nan, inf, -inf, 0.0, -0.0, 1.0, -2.5], np.float32)


def run(fn, *arrays):
    graph = compiler.trace(fn, *(compiler.spec(a.shape, a.dtype) for a in arrays))
    return evaluate(graph, list(arrays))[0]


def same(a, b, zero_sign: bool = True):
    """Equal values (to f32 rounding), NaN and infinities in the same places, and the same
    sign on zeros."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
    np.testing.assert_array_equal(np.isinf(a) * np.sign(a), np.isinf(b) * np.sign(b))
    np.testing.assert_allclose(a, b, rtol=3e-7, atol=0, equal_nan=True)
    zeros = (a == 0) & (b == 0)
    if zero_sign:
        np.testing.assert_array_equal(np.signbit(a[zeros]), np.signbit(b[zeros]))


# op on SPECIAL: numpy meaning (float64); these agree with PyTorch too (test below)
EXACT = {
    "relu": (lambda x: x.relu(), lambda x: np.where(x < 0, 0.0, x)),
    "neg": (lambda x: -x, np.negative),
    "exp": (lambda x: x.exp(), np.exp),
    "log": (lambda x: x.log(), np.log),
    "sqrt": (lambda x: x.sqrt(), np.sqrt),
    "reciprocal": (lambda x: 1 / x, lambda x: 1 / x),
    "sigmoid": (lambda x: x.sigmoid(), lambda x: 1 / (1 + np.exp(-x))),
    "silu": (lambda x: x.silu(), lambda x: x * (1 / (1 + np.exp(-x)))),
    "remainder": (lambda x: x % 2, lambda x: np.mod(x, 2)),
    "square": (lambda x: x ** 2, np.square),
    "clamp": (lambda x: x.clamp(0, 0.5), lambda x: np.clip(x, 0, 0.5)),
    "maximum": (lambda x: x.maximum(0.5), lambda x: np.maximum(x, 0.5)),
    "isnan": (lambda x: x.isnan(), np.isnan),
    "isinf": (lambda x: x.isinf(), np.isinf),
    "isfinite": (lambda x: x.isfinite(), np.isfinite),
    "eq_self": (lambda x: x == x, lambda x: x == x),
    "ne_self": (lambda x: x != x, lambda x: x != x),
    "le_one": (lambda x: x <= 1, lambda x: x <= 1),
    "ge_one": (lambda x: x >= 1, lambda x: x >= 1),
    "to_bool": (lambda x: x.astype("bool"), lambda x: x.astype(bool)),
}


@pytest.mark.parametrize("name", sorted(EXACT))
def test_special_values_follow_numpy(name):
    ours, ref = EXACT[name]
    with np.errstate(all="ignore"):
        expected = ref(SPECIAL.astype(np.float64))
    out = run(ours, SPECIAL)
    # -0.0 % 2: numpy gives 0.0, PyTorch and Saturn -0.0
    same(out, expected.astype(out.dtype), zero_sign=name != "remainder")


@pytest.mark.parametrize("name", sorted(EXACT))
def test_special_values_follow_torch(name):
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(SPECIAL.copy())
    ref = {"relu": torch.relu, "neg": torch.neg, "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt,
           "reciprocal": torch.reciprocal, "sigmoid": torch.sigmoid, "silu": torch.nn.functional.silu,
           "remainder": lambda x: x % 2, "square": lambda x: x ** 2, "clamp": lambda x: x.clamp(0, 0.5),
           "maximum": lambda x: torch.maximum(x, torch.tensor(0.5)), "isnan": torch.isnan,
           "isinf": torch.isinf, "isfinite": torch.isfinite, "eq_self": lambda x: x == x,
           "ne_self": lambda x: x != x, "le_one": lambda x: x <= 1, "ge_one": lambda x: x >= 1,
           "to_bool": lambda x: x.to(torch.bool)}[name]
    out = run(EXACT[name][0], SPECIAL)
    np.testing.assert_allclose(out, ref(t).numpy(), rtol=1e-6, equal_nan=True)


def test_nan_compares_unequal_and_max_propagates_nan():
    x = np.array([[1, nan, 2], [3, 0, -1]], np.float32)
    same(run(lambda x: x.max(-1), x), np.max(x, -1))  # [nan, 3]
    same(run(lambda x: x.min(-1), x), np.min(x, -1))
    same(run(lambda x: x.maximum(1.0), x), np.maximum(x, 1))
    same(run(lambda x: (x * 0 + 1).maximum(x), x), np.maximum(1, x))  # NaN on the right too
    same(run(lambda x: (x * 0 + 1).minimum(x), x), np.minimum(1, x))
    assert not run(lambda x: x == x, x)[0, 1] and run(lambda x: x != x, x)[0, 1]


def test_softmax_rows_with_infinities():
    x = np.array([[-inf, 0, 1], [-inf, -inf, 3], [-inf, -inf, -inf], [inf, 0, 1], [1, nan, 2]], np.float32)
    out = run(lambda x: x.softmax(-1), x)
    e = np.exp(np.array([0, 1]) - 1.0)
    np.testing.assert_allclose(out[0], [0, *(e / e.sum())], rtol=1e-6)
    np.testing.assert_array_equal(out[1], [0, 0, 1])
    assert np.isnan(out[2:]).all()  # all -inf, +inf, NaN rows: NaN (as in PyTorch)
    ls = run(lambda x: x.log_softmax(-1), x)
    assert ls[0, 0] == -inf and np.isfinite(ls[0, 1:]).all() and np.isnan(ls[2:]).all()


def test_sums_and_norms_with_infinities():
    x = np.array([[inf, 1], [inf, -inf], [1, 2]], np.float32)
    same(run(lambda x: x.sum(-1), x), [inf, nan, 3])
    ln = run(lambda x: x.layer_norm(), x)
    assert np.isnan(ln[:2]).all() and np.isfinite(ln[2]).all()


def test_deliberate_differences_from_torch():
    """Documented in docs/ir.md ("Special values")."""
    out = run(lambda x: x.abs(), np.array([-0.0], np.float32))
    assert out[0] == 0 and not np.signbit(out[0])         # abs(-0.0) is +0.0, as in torch (no longer a difference)
    out = run(lambda x: x.gelu(), np.array([inf, -inf], np.float32))
    assert out[0] == inf and np.isnan(out[1])              # torch CPU: nan, nan
    out = run(lambda x: x ** 2.5, np.array([-inf, -1.0], np.float32))
    assert out[0] == inf and np.isnan(out[1])              # C's pow, as in torch
    out = run(lambda x: x.astype("i32"), np.array([2.7, -2.7], np.float32))
    np.testing.assert_array_equal(out, [2, -2])            # truncation, as in torch and C


def test_integer_arithmetic_wraps_and_divides_to_float():
    x = np.array([2**31 - 1, 7, -7], np.int32)
    out = run(lambda x: x + 1, x)
    assert out.dtype == np.int32 and out[0] == -(2**31)
    np.testing.assert_array_equal(run(lambda x: x % 3, x), np.mod(x, 3))         # like Python / numpy
    np.testing.assert_array_equal(run(lambda x: x.fmod(3), x), np.fmod(x, 3))    # like C
    out = run(lambda x: x / 2, x)
    assert out.dtype == np.float32 and out[1] == 3.5


def test_half_precision_overflow_and_rounding():
    x = np.array([60000, 1], np.float16)
    out = run(lambda x: x * 2, x)
    assert out[0] == inf and out.dtype == np.float16
    # composites compute in f32 and round once: softmax of a wide f16 row stays accurate
    row = np.linspace(-8, 8, 13).astype(np.float16)[None]
    ref = np.exp(row.astype(np.float64) - row.max())
    ref /= ref.sum()
    np.testing.assert_allclose(run(lambda x: x.softmax(-1), row).astype(np.float64), ref, rtol=1e-3, atol=1e-5)


def test_pad_fill_and_empty_max_are_typed():
    """Fill values are floats; for i32 they saturate (-inf -> i32 min), for bool nonzero is True."""
    from ir import node as N
    from ir.dtypes import DType
    from ir.interpreter import evaluate_nodes
    from ir.ops import Op
    from ir.view import ShapeTracker
    x = N.input_(0, "x", (3,), DType.i32)
    padded = N.view(x, ShapeTracker.from_shape((3,)).pad(((1, 1),), float("-inf")))
    out = evaluate_nodes([padded, N.reduce(Op.MAX, padded, (0,))], {x: np.array([4, -7, 2], np.int32)})
    np.testing.assert_array_equal(out[0], [-(2**31), 4, -7, 2, -(2**31)])
    assert out[1][0] == 4
    b = N.input_(0, "b", (2,), DType.bool)
    bpad = N.view(b, ShapeTracker.from_shape((2,)).pad(((0, 1),), 1.0))
    np.testing.assert_array_equal(evaluate_nodes([bpad], {b: np.array([False, True])})[0], [False, True, True])
    empty = N.input_(0, "e", (0, 2), DType.i32)
    (m,) = evaluate_nodes([N.reduce(Op.MAX, empty, (0,))], {empty: np.zeros((0, 2), np.int32)})
    np.testing.assert_array_equal(m, [[-(2**31), -(2**31)]])
