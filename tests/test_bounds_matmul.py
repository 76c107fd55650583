"""The bounded float64 reference computes sums of products as matrix products
(`ir.bounds._sum_of_products`, `ir.broadcast_product`): the same values, the same free and
maybe-NaN elements, and a bound never below (and close to) the elementwise path's."""
import numpy as np
import pytest

import compiler as saturn
from compiler import verify
from compiler.trace import trace_primitives
from ir import numerics
from ir.bounds import evaluate_bounded
from ir.broadcast_product import BroadcastProduct, varying_axes


def _attention(q, k, v):
    return (q @ k.transpose(-1, -2) * 0.125).softmax(-1) @ v


def _masked_attention(q, k, v, mask):
    return ((q @ k.transpose(-1, -2)) * 0.125 + mask).softmax(-1) @ v


def _mlp(x, w1, b1, w2):
    return (x @ w1 + b1).gelu() @ w2


def _norm_then_product(x, w):
    return x.layer_norm((x.shape[-1],)) @ w


def _sqrt_product(x, w):   # a maybe-NaN operand (the root of values near 0)
    return (x * x - 1.0).abs().sqrt() @ w


PROGRAMS = {
    "matmul": (lambda a, b: a @ b, [(7, 33), (33, 5)]),
    "batched": (lambda a, b: a @ b, [(3, 9, 17), (3, 17, 6)]),
    "broadcast_batch": (lambda a, b: a @ b, [(2, 3, 9, 16), (16, 5)]),
    "vector": (lambda a, b: a @ b, [(40,), (40, 3)]),
    "attention": (_attention, [(2, 16, 8), (2, 16, 8), (2, 16, 8)]),
    "masked_attention": (_masked_attention, [(2, 16, 8), (2, 16, 8), (2, 16, 8), (16, 16)]),
    "mlp": (_mlp, [(9, 16), (16, 33), (33,), (33, 7)]),
    "norm_product": (_norm_then_product, [(5, 32), (32, 12)]),
    "sqrt_product": (_sqrt_product, [(6, 20), (20, 4)]),
}


def _both(graph, args):
    with np.errstate(all="ignore"):
        return evaluate_bounded(graph, args, matmul=True), evaluate_bounded(graph, args, matmul=False)


def _assert_close_and_not_tighter(fast, slow):
    for f, s in zip(fast, slow):
        assert f.value.shape == s.value.shape
        np.testing.assert_allclose(f.value, s.value, rtol=1e-9, atol=1e-300, equal_nan=True)
        f_free, s_free = ~(f.bound < np.inf), ~(s.bound < np.inf)
        np.testing.assert_array_equal(f_free, s_free)
        np.testing.assert_array_equal(np.broadcast_to(f.nan, f.value.shape), np.broadcast_to(s.nan, s.value.shape))
        fin = ~s_free
        fb, sb = np.broadcast_to(f.bound, f.value.shape)[fin], np.broadcast_to(s.bound, s.value.shape)[fin]
        assert np.all(fb >= sb * (1 - 1e-9)), "the matrix-product bound is tighter than the elementwise one"
        # no looser than a few percent plus the subnormal floors (which it adds, never maxes)
        assert np.all(fb <= sb * 1.05 + 1e-30 * (1 + np.nan_to_num(np.abs(f.value[fin]))))


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_matrix_products_give_the_elementwise_values_and_bounds(name, dtype):
    fn, shapes = PROGRAMS[name]
    graph = trace_primitives(fn, *(saturn.spec(s, dtype) for s in shapes))
    halves = dtype != "f32"
    families = [f for f in numerics.verification_families([graph.inputs[0].dtype]) if f.name != "special"]
    assert families
    for k, family in enumerate(families):
        args = numerics.random_inputs(graph.inputs, 100 + k, family)
        if name == "masked_attention":   # a causal mask: -inf above the diagonal
            args[3] = np.triu(np.full(shapes[3], -np.inf), 1).astype(args[3].dtype)
        fast, slow = _both(graph, args)
        _assert_close_and_not_tighter(fast, slow)
    assert halves or len(families) >= 4


def test_operands_with_free_and_maybe_nan_elements_give_the_same_free_and_nan_sets():
    # a near-overflow intermediate (free) and a root near 0 (maybe NaN) feed products
    def fn(x, w):
        big = (x * 3.0e38).exp2() * 0.0 + x          # exp2 overflows where x > 0: free from there on
        return big @ w + (x * x - 1.0).abs().sqrt() @ w
    graph = trace_primitives(fn, saturn.spec((6, 24)), saturn.spec((24, 5)))
    args = numerics.random_inputs(graph.inputs, 7, numerics.NORMAL)
    fast, slow = _both(graph, args)
    assert np.any(~(slow[0].bound < np.inf)), "the case must have free elements"
    _assert_close_and_not_tighter(fast, slow)


def test_special_values_take_the_elementwise_path():
    graph = trace_primitives(lambda a, b: a @ b, saturn.spec((5, 9)), saturn.spec((9, 4)))
    a, b = numerics.random_inputs(graph.inputs, 3, numerics.NORMAL)
    a[1, 2], a[3, 0], b[4, 1] = np.inf, np.nan, -np.inf
    fast, slow = _both(graph, [a, b])
    _assert_close_and_not_tighter(fast, slow)


@pytest.mark.parametrize("shape, axes, a_arr, b_arr", [
    ((4, 6, 5), (1,), lambda r: r.normal(size=(4, 6, 1)), lambda r: r.normal(size=(1, 6, 5))),
    ((2, 3, 4, 5), (2,), lambda r: r.normal(size=(2, 3, 4, 1)), lambda r: r.normal(size=(2, 1, 4, 5))),
    ((3, 4, 5), (1, 2), lambda r: r.normal(size=(3, 4, 5)), lambda r: r.normal(size=(1, 4, 1))),
    ((3, 4, 5), (0,), lambda r: r.normal(size=(1, 4, 1)), lambda r: r.normal(size=(1, 1, 5))),
    ((6, 1, 7), (2,), lambda r: r.normal(size=(6, 1, 7)), lambda r: r.normal(size=(6, 1, 7))),
])
def test_broadcast_product_is_the_sum_of_products(shape, axes, a_arr, b_arr):
    rng = np.random.default_rng(0)
    a, b = np.broadcast_to(a_arr(rng), shape), np.broadcast_to(b_arr(rng), shape)
    plan = BroadcastProduct(shape, axes, varying_axes([a], shape), varying_axes([b], shape))
    want = (a * b).sum(axis=axes, keepdims=True)
    np.testing.assert_allclose(plan(a, b), want, rtol=1e-12, atol=1e-12)


def test_reference_work_counts_products_as_matrix_products():
    graph = trace_primitives(lambda a, b: a @ b, saturn.spec((1024, 1024)), saturn.spec((1024, 1024)))
    assert verify.reference_work(graph) > 1e9          # every product materialized
    assert verify.reference_work(graph, matmul=True) < verify.REFERENCE_LIMIT
