"""Every primitive op, built directly with the ir.node constructors and run by the reference
interpreter, against a direct numpy computation in float64 (rounded to the node's dtype)."""
from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, strategies as st

from ir import node as N
from ir.dtypes import DType
from ir.interpreter import evaluate_nodes
from ir.node import IRError
from ir.ops import ARITY, OP_TABLE, OTHER_OP_TABLE, Op, op_table_markdown
from tolerances import assert_close

FLOATS = [DType.f32, DType.f16, DType.bf16]
ALL = FLOATS + [DType.i32, DType.bool]
shapes = st.lists(st.sampled_from([1, 2, 3, 7, 13]), min_size=0, max_size=3).map(tuple)
seeds = st.integers(0, 2**32 - 1)


def random_array(rng, shape, dtype: DType, positive=False, special=False) -> np.ndarray:
    if dtype == DType.bool:
        return rng.random(shape) < 0.5
    if dtype == DType.i32:
        return rng.integers(1 if positive else -50, 50, shape).astype(np.int32)
    x = rng.standard_normal(shape) * 3
    if positive:
        x = np.abs(x) + 0.1
    if special and x.size:
        flat = x.reshape(-1)
        flat[rng.integers(0, flat.size, max(1, flat.size // 4))] = rng.choice(
            [np.nan, np.inf, -np.inf, 0.0, -0.0])
    return x.astype(dtype.np)


def leaf(i, x: np.ndarray, dtype: DType):
    return N.input_(i, f"x{i}", x.shape, dtype)


def run(out, leaves_and_values):
    return evaluate_nodes([out], {n: v for n, v in leaves_and_values})[0]


def f64(x):
    return np.asarray(x).astype(np.float64)


UNARY_NUMPY = {Op.EXP2: np.exp2, Op.LOG2: np.log2, Op.SIN: np.sin, Op.SQRT: np.sqrt,
               Op.RECIP: lambda a: 1.0 / a}


@given(st.sampled_from(sorted(UNARY_NUMPY, key=str)), st.sampled_from(FLOATS), shapes, seeds, st.booleans())
def test_unary(op, dtype, shape, seed, special):
    rng = np.random.default_rng(seed)
    x = random_array(rng, shape, dtype, positive=op in (Op.LOG2, Op.SQRT) and not special, special=special)
    a = leaf(0, x, dtype)
    out = run(N.unary(op, a), [(a, x)])
    assert out.dtype == dtype.np and out.shape == shape
    with np.errstate(all="ignore"):
        expected = UNARY_NUMPY[op](f64(x)).astype(dtype.np)
    assert_close(out, expected, dtype)


BINARY_NUMPY = {Op.ADD: np.add, Op.MUL: np.multiply, Op.MOD: np.fmod, Op.CMPLT: np.less}


@given(st.sampled_from(sorted(BINARY_NUMPY, key=str)), st.sampled_from(ALL), shapes, seeds, st.booleans())
def test_binary(op, dtype, shape, seed, special):
    if op == Op.MOD and dtype == DType.bool:
        return
    rng = np.random.default_rng(seed)
    x = random_array(rng, shape, dtype, special=special)
    y = random_array(rng, shape, dtype, positive=op == Op.MOD and dtype == DType.i32, special=special)
    a, b = leaf(0, x, dtype), leaf(1, y, dtype)
    out = run(N.binary(op, a, b), [(a, x), (b, y)])
    with np.errstate(all="ignore"):
        if dtype in (DType.i32, DType.bool):
            expected = BINARY_NUMPY[op](x, y)
        else:
            expected = BINARY_NUMPY[op](f64(x), f64(y))
    result_dtype = DType.bool if op == Op.CMPLT else dtype
    assert out.dtype == result_dtype.np
    assert_close(out, np.asarray(expected).astype(result_dtype.np), result_dtype)


@given(st.sampled_from(ALL), shapes, seeds)
def test_where(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    c, x, y = rng.random(shape) < 0.5, random_array(rng, shape, dtype), random_array(rng, shape, dtype)
    nc, nx, ny = leaf(0, c, DType.bool), leaf(1, x, dtype), leaf(2, y, dtype)
    out = run(N.where(nc, nx, ny), [(nc, c), (nx, x), (ny, y)])
    np.testing.assert_array_equal(out, np.where(c, x, y))


@given(st.sampled_from([Op.SUM, Op.MAX]), st.sampled_from(ALL), shapes.filter(len), seeds, st.data())
def test_reduce(op, dtype, shape, seed, data):
    if op == Op.SUM and dtype == DType.bool:
        return
    axes = data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1))
    rng = np.random.default_rng(seed)
    x = random_array(rng, shape, dtype)
    a = leaf(0, x, dtype)
    out = run(N.reduce(op, a, axes), [(a, x)])
    assert out.shape == tuple(1 if i in axes else s for i, s in enumerate(shape)) and out.dtype == dtype.np
    src = x if dtype in (DType.i32, DType.bool) else f64(x)
    fn = np.sum if op == Op.SUM else np.max
    expected = fn(src, axis=tuple(axes), keepdims=True).astype(dtype.np)
    # a sum of n rounded values: error grows with n for the storage rounding of the inputs
    assert_close(out, expected, dtype, scale=4)


def test_sum_of_halves_accumulates_in_f32():
    # 4096 ones + 1 in f16: an f16 accumulator would stop at 2048
    x = np.ones(4097, np.float16)
    a = leaf(0, x, DType.f16)
    assert run(N.reduce(Op.SUM, a, (0,)), [(a, x)])[0] == 4096  # 4097 rounds to 4096 in f16
    y = np.full(3000, 0.1, ml_dtypes.bfloat16)
    b = leaf(0, y, DType.bf16)
    assert abs(float(run(N.reduce(Op.SUM, b, (0,)), [(b, y)])[0]) - 3000 * float(y[0])) < 2


def test_half_ops_round_once_per_op():
    x = np.array([1.0009765625], np.float16)  # 1 + 2^-10
    a = leaf(0, x, DType.f16)
    # (1 + 2^-10)^2 = 1 + 2^-9 + 2^-20 rounds to 1 + 2^-9 in f16
    assert run(N.binary(Op.MUL, a, a), [(a, x)])[0] == np.float16(1.001953125)


@given(st.sampled_from(ALL), st.sampled_from(ALL), shapes, seeds)
def test_cast(src, dst, shape, seed):
    rng = np.random.default_rng(seed)
    x = random_array(rng, shape, src)
    a = leaf(0, x, src)
    out = run(N.cast(a, dst), [(a, x)])
    if dst == DType.bool:
        expected = x != 0
    elif dst == DType.i32 and src.is_float:
        expected = np.trunc(f64(x)).astype(np.int32)
    else:
        expected = x.astype(dst.np)
    assert out.dtype == dst.np
    np.testing.assert_array_equal(out, expected)


def test_const_and_contiguous():
    c = N.const(2.5, (2, 3), DType.bf16)
    out = run(N.contiguous(c), [])
    assert out.dtype == ml_dtypes.bfloat16 and out.shape == (2, 3) and np.all(out == 2.5)


def test_constructors_reject_ill_formed_nodes():
    a = N.input_(0, "a", (2, 3), DType.f32)
    b = N.input_(1, "b", (3, 2), DType.f32)
    i = N.input_(2, "i", (2, 3), DType.i32)
    with pytest.raises(IRError):
        N.binary(Op.ADD, a, b)  # shapes differ: broadcasting is the frontend's job
    with pytest.raises(IRError):
        N.binary(Op.ADD, a, i)  # dtypes differ
    with pytest.raises(IRError):
        N.unary(Op.EXP2, i)
    with pytest.raises(IRError):
        N.where(a, a, a)
    with pytest.raises(IRError):
        N.reduce(Op.SUM, a, (2,))
    with pytest.raises(IRError):
        N.reduce(Op.SUM, N.input_(3, "c", (2,), DType.bool), (0,))


def test_op_table_lists_every_op_once_with_its_arity():
    rows = OP_TABLE + OTHER_OP_TABLE
    names = [r[0] for r in rows]
    assert sorted(names) == sorted(o.value for o in Op)
    for name, arity, _, _ in rows:
        assert ARITY[Op(name)] == arity


def test_docs_show_the_op_table():
    doc = open(os.path.join(os.path.dirname(__file__), "..", "docs", "ir.md")).read()
    assert op_table_markdown() in doc, "docs/ir.md is out of date: paste ir.ops.op_table_markdown()"
