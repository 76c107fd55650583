"""Float-to-integer casts are defined everywhere, and every target agrees (docs/ir.md):
truncation toward zero, to i64 directly and to narrower types through i32 (then wrapped);
past the intermediate's range the value saturates, and NaN gives 0. A plain LLVM `fptosi`
(or a C cast) is undefined there, and the optimizer may fold such a result to anything."""
from __future__ import annotations

import math

import numpy as np
import pytest

import compiler as saturn

EDGES = [math.nan, math.inf, -math.inf, 0.0, -0.0, 2.5, -2.5, 127.9, -128.9, 255.5, 300.7, -129.0,
         2147483520.0, 2147483648.0, -2147483648.0, -2147483904.0, 3e9, -3e9, 9.2e18, 9.3e18, -9.3e18, 1e30]
TARGETS = ["i64", "i32", "i8", "u8"]


def _documented(x: float, dst: str) -> int:
    """The documented meaning, in Python integers."""
    if math.isnan(x):
        return 0
    bits = 64 if dst == "i64" else 32
    lo, hi = -2 ** (bits - 1), 2 ** (bits - 1) - 1
    t = lo if x == -math.inf else hi if x == math.inf else math.trunc(x)
    t = min(max(t, lo), hi)
    if dst in ("i8", "u8"):
        t &= 0xFF
        if dst == "i8" and t >= 128:
            t -= 256
    return t


def _grid(src: str) -> np.ndarray:
    """Every edge value, repeated to 40 columns so that the vector loop runs too."""
    with np.errstate(over="ignore"):
        return np.array([[x] * 40 for x in EDGES], np.float64).astype({"f32": np.float32, "f64": np.float64}[src])


def _expected(src: str, dst: str) -> np.ndarray:
    x = _grid(src).astype(np.float64)
    return np.vectorize(lambda v: _documented(v, dst), otypes=[object])(x).astype(np.dtype(
        {"i64": np.int64, "i32": np.int32, "i8": np.int8, "u8": np.uint8}[dst]))


def test_documented_values():
    assert _documented(math.nan, "i32") == 0 and _documented(3e9, "i32") == 2 ** 31 - 1
    assert _documented(-3e9, "i64") == -3_000_000_000 and _documented(1e30, "i64") == 2 ** 63 - 1
    assert _documented(300.7, "u8") == 44 and _documented(-129.0, "i8") == 127 and _documented(3e9, "u8") == 255


def _cases():
    return [(s, d) for s in ("f32", "f64") for d in TARGETS]


@pytest.mark.parametrize("src,dst", _cases())
def test_interpreter(src, dst):
    from ir.interpreter import float_to_int
    got = float_to_int(_grid(src), np.dtype({"i64": np.int64, "i32": np.int32, "i8": np.int8, "u8": np.uint8}[dst]))
    np.testing.assert_array_equal(got, _expected(src, dst))


@pytest.mark.parametrize("src,dst", _cases())
def test_reference_target(src, dst):
    x = _grid(src)
    f = saturn.compile(lambda t: t.astype(dst), saturn.spec(x.shape, src), target="reference")
    np.testing.assert_array_equal(f(x), _expected(src, dst))


@pytest.mark.parametrize("src,dst", _cases())
def test_cpu_target_under_every_schedule(src, dst):
    pytest.importorskip("llvmlite")
    from backends.llvm import LLVMBackend
    x = _grid(src)
    be = LLVMBackend()
    g = saturn.trace(lambda t: t.astype(dst), saturn.spec(x.shape, src))
    for s in be.schedules(g):
        np.testing.assert_array_equal(be.build(g, s, use_cache=False)(x)[0], _expected(src, dst), err_msg=str(s))


def test_cpu_target_cast_of_a_known_nan():
    """x * NaN is NaN for every x, which the optimizer knows: a plain `fptosi` of it is poison and
    was folded to whatever suited it; the saturating conversion gives 0."""
    pytest.importorskip("llvmlite")
    from backends.llvm import LLVMBackend
    x = np.linspace(-3, 3, 64, dtype=np.float32)
    be = LLVMBackend()
    g = saturn.trace(lambda t: (t * math.nan).astype("i32") + 5, saturn.spec(x.shape))
    for s in be.schedules(g):
        np.testing.assert_array_equal(be.build(g, s, use_cache=False)(x)[0], np.full(64, 5, np.int32), err_msg=str(s))


def test_cuda_text_uses_the_saturating_conversions():
    from backends.cuda.cexpr import Emitter
    from ir.dtypes import DType
    assert Emitter._cast("v", DType.f32, DType.i32) == "to_i32(v)"
    assert Emitter._cast("v", DType.f64, DType.i64) == "to_i64(v)"
    assert Emitter._cast("v", DType.f16, DType.u8) == "((unsigned char)to_i32(((float)v)))"


@pytest.mark.parametrize("src", ["f32", "f64"])
def test_cuda_text_runs_on_host(src):
    """The CUDA text of both lowerings (the templates take f32 -> i32 only), compiled for the host
    with the device's conversion intrinsics emulated as the H200 computes them (saturating; NaN
    gives the most negative integer except from f32 to i32), gives the documented values."""
    from backends.cuda import hostsim
    reason = hostsim.available()
    if reason:
        pytest.skip(reason)
    x = _grid(src)
    for dst in TARGETS:
        g = saturn.trace(lambda t: t.astype(dst), saturn.spec(x.shape, src))
        runs = [hostsim.run_kernel_ir] + ([hostsim.run_templates] if (src, dst) == ("f32", "i32") else [])
        for run in runs:
            np.testing.assert_array_equal(run(g, [x])[0], _expected(src, dst), err_msg=f"{dst} {run.__name__}")


@pytest.mark.gpu
@pytest.mark.parametrize("src,dst", _cases())
def test_cuda_target(src, dst):
    from backends.cuda import CUDABackend
    be = CUDABackend()
    reason = be.unavailable_reason()
    if reason:
        pytest.skip(reason)
    x = _grid(src)
    g = saturn.trace(lambda t: t.astype(dst), saturn.spec(x.shape, src))
    for s in be.schedules(g):
        np.testing.assert_array_equal(be.build(g, s)(x)[0], _expected(src, dst), err_msg=str(s))


def test_cuda_text_compiles_to_ptx_conversions():
    """nvcc turns the conversions into `cvt.rzi` (clamped to the range; NaN tested apart)."""
    from backends.cuda.kir import render_kir_program
    from backends.cuda.toolchain import compile_source, find_nvcc
    from ir.lower import lower
    if find_nvcc() is None:
        pytest.skip("nvcc not found")
    for src, dst, cvt in [("f32", "i32", b"cvt.rzi.s32.f32"), ("f64", "i64", b"cvt.rzi.s64.f64"),
                          ("f32", "u8", b"cvt.rzi.s32.f32"), ("f32", "i64", b"cvt.rzi.s64.f32")]:
        g = saturn.trace(lambda t: t.astype(dst), saturn.spec((7, 9), src))
        text, _ = render_kir_program(lower(g), row_threads=0)
        res = compile_source(text, "sm_90", kind="ptx")
        assert res.error is None and cvt in res.binary, (src, dst, res.error)
