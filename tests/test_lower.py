"""Lowering Graph -> kernel IR: the kernel program means the same as the graph, and the
partition fuses what it should (softmax/layernorm: one kernel; attention scores: materialized)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import compiler as saturn
from compiler import nn
from ir.lower import lower
from ir.interpreter import evaluate
from ir.kernel import Ref, evaluate_program


def _run(fn, *shapes, dtype="f32", seed=0):
    specs = [saturn.spec(s, dtype) for s in shapes]
    g = saturn.trace(fn, *specs)
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal(s).astype(sp.dtype.np) for s, sp in zip(shapes, specs)]
    prog = lower(g)
    for want, got in zip(evaluate(g, args), evaluate_program(prog, args)):
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-5, atol=1e-5)
    return prog


CASES = {
    "chain": (lambda x: ((x * 2 + 1).exp() * x.sin()).sqrt(), [(3, 5)]),
    "softmax0": (lambda x: x.softmax(0), [(4, 6)]),
    "logsoftmax": (lambda x: x.log_softmax(-1), [(3, 9)]),
    "rmsnorm": (lambda x, w: x.rms_norm((6,), w), [(5, 6), (6,)]),
    "var": (lambda x: x.var((0, 2)), [(3, 4, 5)]),
    "max_all": (lambda x: x.max(), [(3, 4)]),
    "matmul_bias": (lambda a, b, c: a @ b + c, [(3, 4), (4, 5), (5,)]),
    "batched_matmul": (lambda a, b: a @ b, [(2, 3, 4), (4, 2)]),
    "mlp": (lambda x, w1, b1, w2, b2: nn.mlp(x, w1, b1, w2, b2), [(3, 4), (4, 8), (8,), (8, 4), (4,)]),
    "attention": (lambda q, k, v: nn.attention(q, k, v), [(2, 5, 4)] * 3),
    "views": (lambda x: x.T.reshape(3, 8)[:, 1::2].pad(((1, 0), (0, 2)), 2.0) + 1, [(4, 6)]),
    "cat": (lambda a, b: saturn.cat([a.exp(), b], 1), [(2, 3), (2, 4)]),
    "where_cast": (lambda x: (x < 0).where(x.astype("i32").astype("f32"), x % 0.7), [(4, 5)]),
    "outputs": (lambda x: (x, x.sum(1), x.sum(1)), [(3, 2)]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_lowering_matches_interpreter(name):
    fn, shapes = CASES[name]
    _run(fn, *shapes)


def test_softmax_and_layernorm_are_one_kernel_with_row_lets():
    p = _run(lambda x: x.softmax(-1), (4, 7))
    assert len(p.kernels) == 1 and [l.depth for l in p.kernels[0].lets] == [1, 1]
    p = _run(lambda x, w, b: x.layer_norm((7,), w, b), (4, 7), (7,), (7,))
    assert len(p.kernels) == 1 and [l.depth for l in p.kernels[0].lets] == [1, 1]


def test_attention_materializes_scores_once():
    p = _run(lambda q, k, v: nn.attention(q, k, v), (2, 5, 4), (2, 5, 4), (2, 5, 4))
    assert len(p.kernels) == 3   # scores, softmax row kernel, P @ V
    assert isinstance(p.kernels[0].stores[0].value, Ref)


def test_half_storage():
    _run(lambda x: (x * 3).softmax(-1).astype("f32"), (3, 9), dtype="f16")


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from([1, 2, 3, 7]), min_size=1, max_size=3), st.data())
def test_random_views_and_reductions(shape, data):
    shape = tuple(shape)
    perm = tuple(data.draw(st.permutations(range(len(shape)))))
    axis = data.draw(st.integers(0, len(shape) - 1))
    pad = data.draw(st.integers(0, 2))

    def fn(x):
        y = x.permute(perm).reshape(-1)
        y = y.pad(((pad, 1),)).reshape(1, -1)
        z = x.permute(perm)
        return y.exp().sum(1), (z - z.max(axis, keepdim=True)).exp().sum(axis)
    _run(fn, shape)


def test_whole_tensor_reduction_gets_its_own_kernel():
    p = _run(lambda x: (x - x.max()).exp(), (50,))
    assert len(p.kernels) == 2 and not p.kernels[0].axes


def test_an_output_that_reshapes_a_computed_value_is_written_in_place():
    """A convolution computes (N, O, H*W) and returns it as (N, O, H, W): the product's kernel
    writes the output buffer, with no copy kernel after it; a second output reshaping the same
    value is a copy (outputs are separate arrays), and both match the interpreter."""
    from compiler import conv
    shapes = [(2, 3, 6, 6), (4, 3, 3, 3)]
    g = saturn.trace(lambda x, w: conv.conv2d(x, w, padding=1), *[saturn.spec(s) for s in shapes])
    p = lower(g)
    assert len(p.kernels) == 1 and [b.kind for b in p.buffers].count("temp") == 0
    assert p.kernels[0].stores[0].buffer == p.outputs[0]
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    np.testing.assert_allclose(evaluate_program(p, args)[0], evaluate(g, args)[0], rtol=1e-5, atol=1e-5)
    two = saturn.trace(lambda x: ((x * 2).contiguous().reshape(4, 2), (x * 2).contiguous().reshape(2, 4)),
                       saturn.spec((8,)))
    p2 = lower(two)
    assert len(p2.kernels) == 2 and p2.kernels[0].stores[0].buffer == p2.outputs[0]
    x = rng.standard_normal(8).astype(np.float32)
    for got, want in zip(evaluate_program(p2, [x]), evaluate(two, [x])):
        np.testing.assert_array_equal(got, want)


def test_a_padded_constant_is_a_select_not_a_buffer():
    """A constant read through a padded view (a mask built from ones, then padded) is selected on
    the index inside the kernel that reads it; materializing it cost a kernel and a buffer."""
    def f(x):
        ones = saturn.Tensor.full((5,), 3.0).pad([(2, 1)], -1.0)
        return x * ones
    g = saturn.trace(f, saturn.spec((4, 8)))
    p = lower(g)
    assert len(p.kernels) == 1 and not [b for b in p.buffers if b.kind == "temp"]
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_array_equal(evaluate_program(p, [x])[0], evaluate(g, [x])[0])
