"""The dtypes i64, i8, u8 and f64: names, promotion (vs a table and PyTorch), the interpreter's
exact meaning (wraparound, C remainder, unsigned compares, truncating casts) against numpy,
the CPU backend and the CUDA kernel-IR renderer (on the host, and on a GPU where there is one)
against the interpreter, f64 precision kept end to end, and the frontend ops the new types take."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import compiler
from ir.dtypes import DType, as_dtype, promote
from ir.interpreter import evaluate

NEW = ["i64", "i8", "u8", "f64"]
ALL = ["bool", "u8", "i8", "i32", "i64", "f16", "bf16", "f32", "f64"]
RANK = {"bool": 0, "u8": 1, "i8": 1, "i32": 2, "i64": 3, "f16": 4, "bf16": 4, "f32": 5, "f64": 6}
TORCH_NAMES = {"bool": "bool", "u8": "uint8", "i8": "int8", "i32": "int32", "i64": "int64", "f16": "float16",
               "bf16": "bfloat16", "f32": "float32", "f64": "float64"}


def expected_promotion(a: str, b: str) -> str:
    """PyTorch's rule written out: the higher rank wins; f16 + bf16 -> f32; u8 + i8 -> i32
    (PyTorch: int16, which Saturn lacks)."""
    if a == b:
        return a
    if {a, b} == {"f16", "bf16"}:
        return "f32"
    if {a, b} == {"u8", "i8"}:
        return "i32"
    return a if RANK[a] > RANK[b] else b


def trace(fn, *dtypes, shape=(5, 7)):
    return compiler.trace(fn, *(compiler.spec(shape, d) for d in dtypes))


def ints(rng, dtype: str, shape, lo=None, hi=None):
    info = np.iinfo(DType(dtype).np)
    lo = info.min if lo is None else max(lo, info.min)
    hi = info.max if hi is None else min(hi, info.max)
    return rng.integers(lo, hi, shape, endpoint=True).astype(DType(dtype).np)


def args_for(dtype: str, n: int, shape=(5, 7), seed=0):
    """Inputs over the type's whole range (integers: wraparound happens), f64 normal."""
    rng = np.random.default_rng(seed)
    if dtype == "f64":
        return [rng.standard_normal(shape) for _ in range(n)]
    return [ints(rng, dtype, shape) for _ in range(n)]


# --- names and promotion ----------------------------------------------------------------------

@pytest.mark.parametrize("name, want", [("int64", "i64"), ("long", "i64"), ("torch.int64", "i64"),
                                        ("int8", "i8"), ("uint8", "u8"), ("float64", "f64"),
                                        ("double", "f64"), ("torch.float64", "f64"), (np.int64, "i64"),
                                        (np.uint8, "u8"), (np.dtype(np.int8), "i8"), (np.float64, "f64")])
def test_names_and_numpy_dtypes(name, want):
    assert as_dtype(name) is DType(want)
    assert DType(want).np == np.dtype(TORCH_NAMES[want])


def test_torch_dtypes_are_accepted():
    torch = pytest.importorskip("torch")
    for ours, theirs in TORCH_NAMES.items():
        assert as_dtype(getattr(torch, theirs)) is DType(ours)


@pytest.mark.parametrize("name, substitute", [("int16", "i32"), ("uint16", "i32"), ("uint32", "i64"),
                                              ("uint64", "i64"), (np.int16, "i32"), (np.uint32, "i64")])
def test_still_missing_dtypes_name_a_substitute(name, substitute):
    with pytest.raises(compiler.DTypeError, match=f"not supported: Saturn has .*; use {substitute}"):
        compiler.spec((3,), name)
    with pytest.raises(compiler.SaturnError, match="int16"):
        compiler.trace(lambda x: x.astype("int16"), compiler.spec((3,)))


@pytest.mark.parametrize("a, b", list(itertools.combinations_with_replacement(ALL, 2)))
def test_promotion_table(a, b):
    want = expected_promotion(a, b)
    assert promote(DType(a), DType(b)).value == want == promote(DType(b), DType(a)).value
    assert trace(lambda x, y: x + y, a, b).outputs[0].dtype.value == want


def test_promotion_follows_torch():
    torch = pytest.importorskip("torch")
    for a, b in itertools.product(ALL, ALL):
        got = str(torch.result_type(torch.zeros(2, dtype=getattr(torch, TORCH_NAMES[a])),
                                    torch.zeros(2, dtype=getattr(torch, TORCH_NAMES[b])))).removeprefix("torch.")
        theirs = {v: k for k, v in TORCH_NAMES.items()}.get(got, "i32" if got == "int16" else got)
        assert theirs == expected_promotion(a, b), (a, b, got)


@pytest.mark.parametrize("dtype", NEW)
def test_python_scalars_do_not_widen(dtype):
    assert trace(lambda x: x * 3, dtype).outputs[0].dtype.value == dtype
    assert trace(lambda x: x + 2.5, dtype).outputs[0].dtype.value == ("f64" if dtype == "f64" else "f32")


def test_int_scalars_wrap_for_i8_u8_and_must_fit_i64():
    g = trace(lambda x: x + 300, "u8", shape=(3,))
    x = np.array([0, 5, 200], np.uint8)
    np.testing.assert_array_equal(evaluate(g, [x])[0], np.array([44, 49, 244], np.uint8))   # torch's values
    with pytest.raises(compiler.DTypeError, match="does not fit in i64"):
        trace(lambda x: x + 2 ** 63, "i64")


# --- the interpreter: exact numpy meaning --------------------------------------------------------

def test_wraparound_of_add_mul_sub():
    cases = {
        "i8": ([127, -128, 100], [1, -1, 3]),
        "u8": ([255, 0, 200], [1, 1, 3]),
        "i64": ([2 ** 63 - 1, -2 ** 63, 2 ** 62], [1, 1, 4]),
    }
    for dt, (a, b) in cases.items():
        npt = DType(dt).np
        x, y = np.array(a, npt), np.array(b, npt)
        g = trace(lambda x, y: (x + y, x - y, x * y), dt, dt, shape=(3,))
        with np.errstate(over="ignore"):
            want = [x + y, x - y, x * y]
        for got, w in zip(evaluate(g, [x, y]), want):
            assert got.dtype == npt
            np.testing.assert_array_equal(got, w)
    # the numbers written out, so the test does not lean on numpy alone
    g = trace(lambda x: (x + 1, x - 2), "u8", shape=(2,))
    plus, minus = evaluate(g, [np.array([255, 1], np.uint8)])
    assert plus.tolist() == [0, 2] and minus.tolist() == [253, 255]
    g = trace(lambda x: x * 2, "i64", shape=(1,))
    assert evaluate(g, [np.array([2 ** 62], np.int64)])[0].tolist() == [-2 ** 63]


def test_unsigned_compare_mod_and_widening():
    x, y = np.array([200, 7, 255], np.uint8), np.array([100, 200, 16], np.uint8)
    g = trace(lambda x, y: (x < y, x.fmod(y), x.astype("i32"), x.astype("f32"), x.astype("i8"), x.max(), x.min()),
              "u8", "u8", shape=(3,))
    lt, mod, wide, fl, narrow, mx, mn = evaluate(g, [x, y])
    assert lt.tolist() == [False, True, False]
    assert mod.tolist() == [0, 7, 15]
    assert wide.tolist() == [200, 7, 255] and fl.tolist() == [200.0, 7.0, 255.0]
    assert narrow.tolist() == [-56, 7, -1]
    assert mx.item() == 255 and mn.item() == 7


def test_signed_remainder_never_traps():
    for dt in ("i8", "i64"):
        lo = DType(dt).lowest
        x = np.array([lo, -7, 7, 5], DType(dt).np)
        y = np.array([-1, 2, -2, 0], DType(dt).np)
        g = trace(lambda x, y: x.fmod(y), dt, dt, shape=(4,))
        assert evaluate(g, [x, y])[0].tolist() == [0, -1, 1, 0]


def test_float_casts_truncate_then_wrap_like_torch():
    x = np.array([-1.7, 300.5, -300.5, 2.9, -0.5], np.float32)
    g = trace(lambda x: (x.astype("u8"), x.astype("i8"), x.astype("i64")), "f32", shape=(5,))
    u, s, l = evaluate(g, [x])
    assert u.tolist() == [255, 44, 212, 2, 0] and s.tolist() == [-1, 44, -44, 2, 0]
    assert l.tolist() == [-1, 300, -300, 2, 0]
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(x)
    assert t.to(torch.uint8).tolist() == u.tolist() and t.to(torch.int8).tolist() == s.tolist()


def test_f64_keeps_its_precision():
    g = trace(lambda x: (x + 1e-12) - x, "f64", shape=(3,))
    got = evaluate(g, [np.ones(3)])[0]
    assert got.dtype == np.float64 and np.allclose(got, 1e-12, rtol=1e-3)
    g32 = trace(lambda x: (x + 1e-12) - x, "f32", shape=(3,))
    assert not evaluate(g32, [np.ones(3, np.float32)])[0].any()     # f32 loses it
    x = np.linspace(0.1, 3.0, 7)
    g = trace(lambda x: (x.exp(), x.log(), x.sin(), x.sqrt(), 1 / x, x.sum()), "f64", shape=(7,))
    for got, want in zip(evaluate(g, [x]), (np.exp(x), np.log(x), np.sin(x), np.sqrt(x), 1 / x, x.sum())):
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-14)


# --- the CPU backend against the interpreter -------------------------------------------------------

PROGRAMS = {
    "arith": lambda x, y: x * y + x - y,
    "fmod": lambda x, y: x.fmod(y),
    "compare": lambda x, y: (x < y).logical_or(x == y),
    "where": lambda x, y: (x < y).where(x, y),
    "max_min": lambda x, y: (x.max(-1), x.min(0)),
    "sum": lambda x, y: (x.sum(-1), x.sum()),
    "to_wider": lambda x, y: (x.astype("i64"), x.astype("f64"), x.astype("f32")),
    "to_narrow": lambda x, y: (x.astype("u8"), x.astype("i8"), x.astype("i32")),
    "matmul": lambda x, y: x @ y.permute(1, 0),
    "pad": lambda x, y: x.pad([(1, 2), (0, 1)], -np.inf).max(0),
}


def cpu_backend():
    llvm = pytest.importorskip("backends.llvm")
    return llvm.LLVMBackend()


def assert_same(got, want, dtype):
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype == np.float64 or dtype == "f64":
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-12, atol=1e-12)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", NEW)
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_cpu_matches_interpreter(dtype, name):
    if name == "fmod" and dtype == "f64":
        pytest.skip("covered by test_f64_cpu_math")
    g = trace(PROGRAMS[name], dtype, dtype)
    args = args_for(dtype, 2)
    exe = cpu_backend().build(g)
    for got, want in zip(exe(*args), evaluate(g, args)):
        assert_same(got, want, dtype)


def test_f64_cpu_math():
    g = trace(lambda x, y: (x.exp(), x.abs().log(), x.sin(), x.abs().sqrt(), 1 / x, x.fmod(y), (x + 1e-12) - x),
              "f64", "f64")
    args = args_for("f64", 2, seed=3)
    outs = cpu_backend().build(g)(*args)
    for got, want in zip(outs, evaluate(g, args)):
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-300)
    assert np.allclose(outs[-1], 1e-12, rtol=1e-3)


def test_cpu_i64_values_beyond_f64_are_exact():
    """An i64 result that float64 cannot hold: the verified program returns it bit for bit."""
    f = compiler.compile(lambda x: x * 3 + 1, compiler.spec((4,), "i64"), target="cpu", budget=1, quiet=True)
    x = np.array([2 ** 60 + 1, -2 ** 62 - 3, 3 ** 39, 2 ** 63 - 1], np.int64)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(f(x), x * 3 + 1)


def test_f64_products_stay_f64_through_the_search():
    """A matmul becomes a contraction term in the searched programs: in f64 it must multiply and
    sum in f64 (an f32 one fails verification, and no candidate would be left)."""
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((33, 65)), rng.standard_normal((65, 17))
    f = compiler.compile(lambda x, y: x @ y, a, b, target="cpu", budget=1, quiet=True)
    np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-13, atol=1e-13)


def test_cpu_compile_verifies_each_new_dtype():
    for dt in NEW:
        f = compiler.compile(lambda x, y: (x * y + x).max(-1), compiler.spec((6, 9), dt), compiler.spec((6, 9), dt),
                             target="cpu", budget=1, quiet=True)
        a, b = args_for(dt, 2, shape=(6, 9), seed=5)
        g = trace(lambda x, y: (x * y + x).max(-1), dt, dt, shape=(6, 9))
        assert_same(f(a, b), evaluate(g, [a, b])[0], dt)


# --- frontend ops on the new types, against PyTorch --------------------------------------------------

FRONTEND = {
    "floordiv": lambda x, y: x // y,
    "remainder": lambda x, y: x % y,
    "and": lambda x, y: x & y,
    "or": lambda x, y: x | y,
    "xor": lambda x, y: x ^ y,
    "not": lambda x, y: ~x,
    "shifts": lambda x, y: (x << 3, x >> 2),
    "min": lambda x, y: x.min(-1),
    "neg": lambda x, y: -x,
    "abs": lambda x, y: x.abs(),
}


@pytest.mark.parametrize("dtype", ["i8", "u8", "i64"])
@pytest.mark.parametrize("name", list(FRONTEND))
def test_frontend_integer_ops_match_torch(dtype, name):
    torch = pytest.importorskip("torch")
    if dtype == "i64" and name in ("and", "or", "xor"):
        with pytest.raises(compiler.DTypeError, match="i64"):
            trace(FRONTEND[name], dtype, dtype)
        return
    if dtype == "u8" and name in ("neg", "abs"):
        pytest.skip("torch refuses or differs on unsigned negation")
    rng = np.random.default_rng(7)
    x = ints(rng, dtype, (4, 6), -1000, 1000)
    y = ints(rng, dtype, (4, 6), -1000, 1000)
    y[y == 0] = 3   # torch raises on an integer division by zero
    g = trace(FRONTEND[name], dtype, dtype, shape=(4, 6))
    got = evaluate(g, [x, y])
    want = FRONTEND[name](torch.from_numpy(x), torch.from_numpy(y))
    want = want if isinstance(want, tuple) else (want,)
    for o, w in zip(got, want):
        np.testing.assert_array_equal(o, w.numpy())


def test_small_int_sums_accumulate_in_i32():
    """PyTorch sums i8 and u8 to int64; Saturn sums them (like bool) in i32 (docs/ir.md)."""
    x = np.full((300,), 200, np.uint8)
    g = trace(lambda x: (x.sum(), x.cumsum(0)), "u8", shape=(300,))
    total, running = evaluate(g, [x])
    assert total.dtype == np.int32 and total.item() == 60000
    assert running.dtype == np.int32 and running[-1] == 60000
    assert trace(lambda x: x.sum(), "i64").outputs[0].dtype is DType.i64


def test_index_of_i64_and_argmax():
    """i64 and u8 index tensors are accepted; argmax keeps returning i32 (torch: int64)."""
    table = np.arange(20, dtype=np.float32).reshape(10, 2)
    ids = np.array([3, 0, 9], np.int64)
    g = compiler.trace(lambda t, i: (t.index_select(0, i), t.argmax(0)), compiler.spec((10, 2)),
                       compiler.spec((3,), "i64"))
    rows, arg = evaluate(g, [table, ids])
    np.testing.assert_array_equal(rows, table[ids])
    assert arg.dtype == np.int32


def test_torch_backend_accepts_the_new_dtypes():
    torch = pytest.importorskip("torch")
    from compiler.torch_backend.translate import value_problem
    for name in ("int64", "int8", "uint8", "float64"):
        assert value_problem(torch.zeros(2, dtype=getattr(torch, name))) is None
    assert "int16" in value_problem(torch.zeros(2, dtype=torch.int16))


# --- CUDA: the planner's routing, the kernel-IR renderer on the host, the GPU --------------------

def test_cuda_templates_route_new_dtypes_to_the_kernel_ir():
    from backends.cuda.plan import needs_kernel_ir
    for dt in NEW:
        assert needs_kernel_ir(trace(lambda x, y: x * y, dt, dt))
        assert needs_kernel_ir(trace(lambda x, y: x.astype(dt) + y, "f32", "f32"))
    assert not needs_kernel_ir(trace(lambda x, y: x * y, "f32", "f32"))


def test_cuda_c_types_and_literals():
    from backends.cuda.cexpr import C_COMPUTE, C_STORAGE, c_literal
    assert [C_STORAGE[DType(d)] for d in NEW] == ["long long", "signed char", "unsigned char", "double"]
    assert C_COMPUTE[DType.u8] == "unsigned char"
    assert c_literal(-2 ** 63, DType.i64) == "(-9223372036854775807LL - 1)"
    assert c_literal(255, DType.u8) == "((unsigned char)255)" and c_literal(-1, DType.u8) == "((unsigned char)255)"
    assert float.fromhex(c_literal(0.1, DType.f64).strip("()")) == 0.1


HOST_PROGRAMS = ["arith", "fmod", "compare", "where", "max_min", "sum", "to_wider", "to_narrow", "pad"]


@pytest.mark.parametrize("dtype", NEW)
def test_cuda_kernel_ir_on_the_host(dtype):
    """The CUDA kernel-IR renderer's C for the new types, compiled for the host (backends/cuda/hostsim.py)."""
    from backends.cuda import hostsim
    reason = hostsim.available()
    if reason:
        pytest.skip(reason)
    args = args_for(dtype, 2, seed=11)
    for name in HOST_PROGRAMS:
        g = trace(PROGRAMS[name], dtype, dtype)
        for got, want in zip(hostsim.run_kernel_ir(g, args), evaluate(g, args)):
            assert_same(got, want, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", NEW)
def test_cuda_matches_interpreter(dtype):
    from backends.cuda import CUDABackend
    be = CUDABackend()
    reason = be.unavailable_reason()
    if reason:
        pytest.skip(reason)
    args = args_for(dtype, 2, shape=(33, 65), seed=13)
    for name in list(PROGRAMS) + ["big_sum"]:
        fn = PROGRAMS.get(name, lambda x, y: (x.sum(-1), x.max(0), (x * y).sum()))
        g = trace(fn, dtype, dtype, shape=(33, 65))
        exe = be.build(g)
        for got, want in zip(exe(*args), evaluate(g, args)):
            assert_same(np.asarray(got), want, dtype)


@pytest.mark.gpu
def test_cuda_compile_new_dtypes_end_to_end():
    from backends.cuda import CUDABackend
    if CUDABackend().unavailable_reason():
        pytest.skip(CUDABackend().unavailable_reason())
    for dt in NEW:
        fn = lambda x, y: ((x * y + x).max(-1), x.astype("f64").sum(0))
        f = compiler.compile(fn, compiler.spec((40, 70), dt), compiler.spec((40, 70), dt), target="cuda",
                             budget=5, quiet=True)
        a, b = args_for(dt, 2, shape=(40, 70), seed=17)
        g = trace(fn, dt, dt, shape=(40, 70))
        for got, want in zip(f(a, b), evaluate(g, [a, b])):
            assert_same(np.asarray(got), want, dt)
