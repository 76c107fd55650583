"""The reference interpreter's contraction and attention (matrix products over broadcast
operands, never materializing them) against the plain broadcast product and sum, and its views
(read in place) never handed out as the caller's memory."""
from __future__ import annotations

import numpy as np

import compiler
from ir.interpreter import attend, contract, evaluate


def test_contract_is_the_broadcast_product_summed():
    """Ranks 0-4, axes of every kind (contracted, batch, one operand's only, size 1, empty),
    operands that are broadcast views (zero strides), and operands holding inf, NaN and zeros
    (their terms counted apart from the matrix product)."""
    rng = np.random.default_rng(0)
    for _ in range(3000):
        full = rng.integers(0, 5, rng.integers(0, 5))
        a = rng.standard_normal(tuple(n if rng.random() < .6 else 1 for n in full))
        b = rng.standard_normal(tuple(n if rng.random() < .6 else 1 for n in full))
        for x in (a, b):        # infinities, NaN and zeros on either side (inf * 0 is NaN)
            if x.size and rng.random() < .4:
                for _ in range(rng.integers(1, 4)):
                    x.flat[rng.integers(x.size)] = rng.choice([np.inf, -np.inf, np.nan, 0.0])
        if full.size and rng.random() < .3:
            a = np.broadcast_to(a, np.broadcast_shapes(a.shape, b.shape))
        axes = tuple(d for d in range(full.size) if rng.random() < .5)
        with np.errstate(all="ignore"):
            want = (a * b).sum(axis=axes, keepdims=True)
            got = contract(a, b, axes, np.float64)
        assert got.shape == want.shape, (a.shape, b.shape, axes)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, equal_nan=True)


def test_attend_is_the_softmax_weighted_sum_over_the_broadcast_operands():
    """Scores and values broadcast to one shape (as the IR's operands are), scores holding
    -inf (masked keys, whole masked rows), inf and NaN, against the materialized formula."""
    rng = np.random.default_rng(2)
    for _ in range(1500):
        full = rng.integers(0, 5, rng.integers(1, 5))
        a = rng.standard_normal(tuple(n if rng.random() < .6 else 1 for n in full)) * 3
        b = rng.standard_normal(tuple(n if rng.random() < .6 else 1 for n in full))
        if a.size and rng.random() < .3:
            a = a.copy()
            a.flat[rng.integers(a.size)] = rng.choice([-np.inf, np.inf, np.nan])
        shape = np.broadcast_shapes(a.shape, b.shape)
        a, b = np.broadcast_to(a, shape), np.broadcast_to(b, shape)
        axis = int(rng.integers(0, full.size))
        out_shape = tuple(1 if i == axis else n for i, n in enumerate(shape))
        with np.errstate(all="ignore"):
            p = np.exp2(a - (a.max(axis=axis, keepdims=True) if a.size else np.full(out_shape, -np.inf)))
            want = (p * b).sum(axis=axis, keepdims=True) / p.sum(axis=axis, keepdims=True)
            got = attend(a, b, (axis,), np.float64, out_shape)
        assert got.shape == out_shape
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, equal_nan=True)


def test_inf_times_a_zero_weight_is_nan():
    got = contract(np.array([np.inf, 1.0]), np.array([0.0, 1.0]), (0,), np.float64)
    assert np.isnan(got).all()


def test_a_product_over_broadcast_operands_matches_float64():
    """a @ w^T at an odd batched shape (its operands broadcast to 20x257x520x72 in the program)."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((20, 257, 72)).astype(np.float16)
    w = rng.standard_normal((520, 72)).astype(np.float16)
    g = compiler.trace(lambda a, w: a @ w.transpose(-1, -2), compiler.spec(a.shape, "f16"), compiler.spec(w.shape, "f16"))
    got = evaluate(g, [a, w])[0]
    want = a.astype(np.float64) @ w.astype(np.float64).T
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-3, atol=2e-3)


def test_an_output_that_views_an_input_is_a_writable_copy():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    g = compiler.trace(lambda x: x.transpose(0, 1), compiler.spec(x.shape, "f32"))
    out = evaluate(g, [x])[0]
    assert out.flags.writeable and not np.shares_memory(out, x)
    out[...] = -1
    assert x[0, 1] == 1
