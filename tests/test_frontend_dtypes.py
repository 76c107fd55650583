"""Dtype promotion (tensor-tensor and tensor-Python-scalar), integer and bool arithmetic, and
astype, against a fixed table that follows PyTorch, and against PyTorch itself when present."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import compiler
from ir.dtypes import DType, promote
from ir.interpreter import evaluate

ALL = ["bool", "i32", "f16", "bf16", "f32"]
# PyTorch's promotion restricted to Saturn's dtypes (int64 results map to i32)
TENSOR_TENSOR = {
    ("bool", "bool"): "bool", ("bool", "i32"): "i32", ("bool", "f16"): "f16", ("bool", "bf16"): "bf16",
    ("bool", "f32"): "f32", ("i32", "i32"): "i32", ("i32", "f16"): "f16", ("i32", "bf16"): "bf16",
    ("i32", "f32"): "f32", ("f16", "f16"): "f16", ("f16", "bf16"): "f32", ("f16", "f32"): "f32",
    ("bf16", "bf16"): "bf16", ("bf16", "f32"): "f32", ("f32", "f32"): "f32",
}
# tensor dtype, Python scalar -> result dtype (a scalar never widens a float tensor)
TENSOR_SCALAR = {
    ("bool", True): "bool", ("bool", 2): "i32", ("bool", 2.5): "f32",
    ("i32", True): "i32", ("i32", 2): "i32", ("i32", 2.5): "f32",
    **{(f, s): f for f in ("f16", "bf16", "f32") for s in (True, 2, 2.5)},
}
TORCH_NAMES = {"bool": "bool", "i32": "int32", "f16": "float16", "bf16": "bfloat16", "f32": "float32"}


def spec(dtype, shape=(3,)):
    return compiler.spec(shape, dtype)


def result_dtype(fn, *dtypes) -> str:
    return compiler.trace(fn, *(spec(d) for d in dtypes)).outputs[0].dtype.value


@pytest.mark.parametrize("a, b", list(itertools.product(ALL, ALL)))
def test_tensor_tensor_promotion(a, b):
    want = TENSOR_TENSOR.get((a, b)) or TENSOR_TENSOR[(b, a)]
    assert promote(DType(a), DType(b)).value == want
    assert result_dtype(lambda x, y: x * y, a, b) == want
    assert result_dtype(lambda x, y: x < y, a, b) == "bool"
    assert result_dtype(lambda x, y: compiler.cat([x, y]), a, b) == want


@pytest.mark.parametrize("dtype, scalar", list(TENSOR_SCALAR))
def test_tensor_scalar_promotion(dtype, scalar):
    want = TENSOR_SCALAR[(dtype, scalar)]
    assert result_dtype(lambda x: x * scalar, dtype) == want
    assert result_dtype(lambda x: scalar * x, dtype) == want
    assert result_dtype(lambda x: x * np.float32(scalar) if isinstance(scalar, float) else x * scalar, dtype) == want


def test_promotion_follows_torch():
    torch = pytest.importorskip("torch")

    def ours_name(t):
        return {"int64": "i32", "int32": "i32", "bool": "bool", "float16": "f16", "bfloat16": "bf16",
                "float32": "f32"}[str(t).removeprefix("torch.")]
    for a, b in itertools.product(ALL, ALL):
        ta, tb = (torch.zeros(2, dtype=getattr(torch, TORCH_NAMES[d])) for d in (a, b))
        assert ours_name(torch.result_type(ta, tb)) == (TENSOR_TENSOR.get((a, b)) or TENSOR_TENSOR[(b, a)])
    for (d, s), want in TENSOR_SCALAR.items():
        assert ours_name(torch.result_type(torch.zeros(2, dtype=getattr(torch, TORCH_NAMES[d])), s)) == want


def test_dtype_names_numpy_and_torch_dtypes_are_accepted():
    from ir.dtypes import as_dtype
    assert as_dtype("float16") is DType.f16 and as_dtype("bf16") is DType.bf16
    assert as_dtype(np.int32) is DType.i32 and as_dtype(np.dtype(bool)) is DType.bool
    with pytest.raises(TypeError):
        as_dtype("int16")
    torch = pytest.importorskip("torch")
    assert as_dtype(torch.bfloat16) is DType.bf16 and as_dtype(torch.float32) is DType.f32
    assert compiler.spec((2,), torch.float16).dtype is DType.f16


def test_where_promotes_its_values():
    assert result_dtype(lambda c, x: (c > 0).where(x, 0.5), "f32", "i32") == "f32"
    assert result_dtype(lambda c, x: (c > 0).where(x, 2), "f32", "f16") == "f16"
    assert result_dtype(lambda c, x: (c > 0).where(0.5, x), "f32", "bf16") == "bf16"
    assert result_dtype(lambda c: (c > 0).where(1, 2), "f32") == "i32"
    assert result_dtype(lambda c: (c > 0).where(True, False), "f32") == "bool"
    assert result_dtype(lambda c: (c > 0).where(1.5, 2), "f32") == "f32"
    assert result_dtype(lambda c: (c > 0).where(np.float32(1.5), np.int32(2)), "f32") == "f32"


def run(fn, *arrays):
    graph = compiler.trace(fn, *(compiler.spec(a.shape, a.dtype) for a in arrays))
    return evaluate(graph, list(arrays))[0]


def test_integer_and_bool_arithmetic_matches_numpy():
    rng = np.random.default_rng(0)
    a, b = rng.integers(-20, 20, (4, 5)).astype(np.int32), rng.integers(1, 9, (5,)).astype(np.int32)
    same_in_numpy = [lambda x, y: x + y, lambda x, y: x - y, lambda x, y: x * y, lambda x, y: -x,
                     lambda x, y: x % y, lambda x, y: x * 3 - 1, lambda x, y: x ** 3]
    pairs = [(f, f) for f in same_in_numpy] + [(lambda x, y: x.maximum(y), np.maximum),
                                               (lambda x, y: x.abs(), lambda x, y: np.abs(x))]
    for ours, ref in pairs:
        out = run(ours, a, b)
        assert out.dtype == np.int32
        np.testing.assert_array_equal(out, ref(a, b))
    np.testing.assert_array_equal(run(lambda x, y: x.sum(0), a, b), a.sum(0))
    np.testing.assert_array_equal(run(lambda x, y: x.max(1), a, b), a.max(1))
    np.testing.assert_array_equal(run(lambda x, y: x @ x.T, a, b), a @ a.T)
    np.testing.assert_allclose(run(lambda x, y: x / y, a, b), a / b, rtol=1e-6)
    p, q = rng.random((3, 4)) < 0.5, rng.random((3, 4)) < 0.5
    np.testing.assert_array_equal(run(lambda x, y: x.logical_and(y), p, q), p & q)
    np.testing.assert_array_equal(run(lambda x, y: x.logical_or(y), p, q), p | q)
    np.testing.assert_array_equal(run(lambda x, y: x.logical_xor(y), p, q), p ^ q)
    np.testing.assert_array_equal(run(lambda x, y: x.logical_not(), p, q), ~p)
    np.testing.assert_array_equal(run(lambda x, y: x.sum(1), p, q), p.sum(1))   # counts, i32
    np.testing.assert_array_equal(run(lambda x, y: x.max(1), p, q), p.any(1))   # any, bool
    np.testing.assert_array_equal(run(lambda x, y: x.min(1), p, q), p.all(1))   # all, bool
    np.testing.assert_array_equal(run(lambda x, y: x == y, p, q), p == q)


@pytest.mark.parametrize("src, dst", list(itertools.product(ALL, ALL)))
def test_astype_between_all_dtypes(src, dst):
    values = np.array([0, 1, -2, 3.75, -0.5, 100], np.float32)
    x = values.astype(DType(src).np) if src != "bool" else values != 0
    out = run(lambda t: t.astype(dst), x)
    assert out.dtype == DType(dst).np
    expected = (x != 0) if dst == "bool" else np.trunc(x.astype(np.float64)).astype(np.int32) if dst == "i32" \
        else x.astype(DType(dst).np)
    np.testing.assert_array_equal(out, expected)
