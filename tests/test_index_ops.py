"""The ops built on IOTA and GATHER (arange, eye, tril/triu, argmax/argmin, gather,
index_select, take_along_dim, take, embedding, one_hot, cumsum/cumprod/cummax/cummin,
class-index nll_loss/cross_entropy) against PyTorch, on the reference interpreter and the CPU
target, over odd shapes, size-0 and 0-d tensors, negative axes, inputs read through views
(transposed, strided), f32/f16/bf16 and i32; the CUDA kernel-IR renderer on the host."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import compiler
import compiler.functional as F
from ir import node as N
from ir.dtypes import DType, as_dtype
from ir.graph import Graph
from ir.interpreter import evaluate
from ir.ops import Op
from tolerances import assert_close

torch = pytest.importorskip("torch")
llvm = pytest.importorskip("backends.llvm")
CPU = llvm.LLVMBackend()
pytestmark = pytest.mark.usefixtures("module_cache_dir")

FLOATS = ["f32", "f16", "bf16"]
TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "i32": torch.int32,
         "bool": torch.bool}


def values(rng, shape, dtype: str, low=-4, high=4):
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype == "i32":
        return rng.integers(low, high, shape).astype(np.int32)
    return rng.standard_normal(shape).astype(as_dtype(dtype).np)


def to_torch(a: np.ndarray):
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(np.array(a, np.float32)).to(torch.bfloat16)
    return torch.from_numpy(np.array(a, order="C"))   # (ascontiguousarray makes a 0-d array 1-d)


def from_torch(t) -> np.ndarray:
    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.float().numpy().astype(ml_dtypes.bfloat16)
    if t.dtype == torch.int64:
        return t.numpy().astype(np.int32)
    return t.numpy()


def check(ours, theirs, *arrays, dtype: str, scale: float = 4.0, cpu: bool = True, longs=()):
    """ours(*Tensors) on the reference (and the CPU target) == theirs(*torch tensors); the
    arguments at positions `longs` reach torch as int64 (what torch's indexing ops take)."""
    specs = [compiler.spec(a.shape, as_dtype(a.dtype)) for a in arrays]
    graph = compiler.trace(ours, *specs)
    ts = [to_torch(a).long() if i in longs else to_torch(a) for i, a in enumerate(arrays)]
    want = from_torch(theirs(*ts))
    got = evaluate(graph, list(arrays))[0]
    out = DType.bool if want.dtype == np.bool_ else DType.i32 if want.dtype == np.int32 else as_dtype(dtype)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert_close(got, want, out, scale, err_msg=f"reference\n{graph}")
    if cpu:
        got_cpu = CPU.build(graph)(*arrays)[0]
        assert_close(got_cpu, got, out, scale, err_msg=f"cpu\n{graph}")
    return graph


# --- the primitives ----------------------------------------------------------------------------

def test_iota_and_gather_primitives_meaning():
    x = N.input_(0, "x", (3, 4), DType.f32)
    i = N.input_(1, "i", (3, 2), DType.i32)
    g = Graph((x, i), (N.gather(x, i, 1), N.iota((2, 3))))
    xa = np.arange(12, dtype=np.float32).reshape(3, 4)
    ia = np.array([[0, 3], [4, -1], [2, 2]], np.int32)   # 4 and -1 are outside: they read 0
    got, pos = evaluate(g, [xa, ia])
    np.testing.assert_array_equal(got, [[0, 3], [0, 0], [10, 10]])
    np.testing.assert_array_equal(pos, [[0, 1, 2], [3, 4, 5]])
    np.testing.assert_array_equal(CPU.build(g)(xa, ia)[1], pos)
    np.testing.assert_array_equal(CPU.build(g)(xa, ia)[0], got)


def test_gather_rejects_ill_formed_nodes():
    from ir.node import IRError
    x = N.input_(0, "x", (3, 4), DType.f32)
    with pytest.raises(IRError, match="i32 indices"):
        N.gather(x, N.input_(1, "i", (3, 4), DType.f32), 0)
    with pytest.raises(IRError, match="another axis"):
        N.gather(x, N.input_(1, "i", (2, 4), DType.i32), 1)


def test_gather_of_a_computed_value_materializes_it():
    """The gathered operand is computed by its own kernel; the gather is a load from it."""
    from ir.lower import lower
    from ir.kernel import Gather, walk
    graph = compiler.trace(lambda x, i: (x * 2).exp().gather(0, i), compiler.spec((5, 3)), compiler.spec((4, 3), "i32"))
    program = lower(graph)
    assert len(program.kernels) == 2
    gathers = [v for v in walk(program.kernels[1].stores[0].value) if isinstance(v, Gather)]
    assert len(gathers) == 1 and gathers[0].buffer == program.kernels[0].stores[0].buffer


def test_programs_with_gather_explore_in_the_egraph():
    """compile() searches a program holding iota and gather (they are e-graph leaves)."""
    def fn(x, i):
        return x.softmax(-1).gather(1, i).cumsum(-1) + x.argmax(-1, keepdim=True).astype("f32")
    rng = np.random.default_rng(0)
    x, i = rng.standard_normal((6, 9)).astype(np.float32), rng.integers(0, 9, (6, 4)).astype(np.int32)
    f = compiler.compile(fn, compiler.spec((6, 9)), compiler.spec((6, 4), "i32"), target="cpu", budget=1,
                         quiet=True)
    tx = torch.from_numpy(x)
    want = tx.softmax(-1).gather(1, torch.from_numpy(i).long()).cumsum(-1) + tx.argmax(-1, keepdim=True)
    assert_close(f(x, i), want.numpy(), DType.f32, 4)


# --- creation and triangles ---------------------------------------------------------------------

@pytest.mark.parametrize("args,dtype", [((7,), None), ((2, 11, 3), None), ((5, -4, -2), None), ((3, 3), None),
                                        ((0.5, 2.0, 0.25), None), ((-1.0, 1.0, 0.3), None), ((6,), "f16"),
                                        ((1, 9, 2), "bf16")])
def test_arange(args, dtype):
    kw = {"dtype": TORCH[dtype]} if dtype else {}
    want = torch.arange(*args, **kw)
    graph = compiler.trace(lambda: compiler.arange(*args, dtype=dtype))
    got = evaluate(graph, [])[0]
    out = from_torch(want)
    assert got.dtype == out.dtype
    assert_close(got, out, as_dtype(out.dtype), 2)
    assert_close(CPU.build(graph)()[0], got, as_dtype(out.dtype), 1)


def test_eye():
    graph = compiler.trace(lambda: compiler.eye(3, 5))
    np.testing.assert_array_equal(evaluate(graph, [])[0], torch.eye(3, 5).numpy())


@pytest.mark.parametrize("dtype", FLOATS + ["i32", "bool"])
@pytest.mark.parametrize("shape,k", [((5, 7), 0), ((3, 4, 4), 1), ((2, 6, 3), -2), ((0, 3), 0), ((4, 1), 9),
                                     ((3, 5), -9)])
def test_tril_triu(shape, k, dtype):
    rng = np.random.default_rng(1)
    x = values(rng, shape, dtype)
    check(lambda a: a.tril(k), lambda a: a.tril(k), x, dtype=dtype, cpu=dtype in ("f32", "bool"))
    check(lambda a: a.triu(k), lambda a: a.triu(k), x, dtype=dtype, cpu=dtype in ("f16", "i32"))


def test_tril_of_a_transposed_input():
    x = np.random.default_rng(2).standard_normal((6, 4)).astype(np.float32)
    check(lambda a: a.T.tril(1), lambda a: a.T.tril(1), x, dtype="f32")


def test_causal_mask_in_the_program_matches_sdpa():
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((2, 7, 8)).astype(np.float32) for _ in range(3))

    def attn(q, k, v):
        s = (q @ k.transpose(-1, -2)) * 0.5
        n = s.shape[-1]
        keep = compiler.Tensor.full((n, n), True, "bool").tril()
        return keep.where(s, float("-inf")).softmax(-1) @ v

    check(attn, lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.5),
          q, k, v, dtype="f32", scale=8)


# --- argmax / argmin ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS + ["i32"])
@pytest.mark.parametrize("shape,axis,keepdim", [((5, 7), 1, False), ((3, 4, 5), -2, True), ((6,), 0, False),
                                                ((3, 5), None, False), ((2, 3), None, True), ((), None, False),
                                                ((4, 1, 3), 1, False)])
def test_argmax_argmin(shape, axis, keepdim, dtype):
    rng = np.random.default_rng(4)
    x = values(rng, shape, dtype, -3, 3)   # small ints: ties, the first one wins
    kw = {} if axis is None else {"dim": axis}
    check(lambda a: a.argmax(axis, keepdim), lambda a: a.argmax(**kw, keepdim=keepdim), x, dtype=dtype,
          cpu=dtype in ("f32", "i32"))
    check(lambda a: a.argmin(axis, keepdim), lambda a: a.argmin(**kw, keepdim=keepdim), x, dtype=dtype,
          cpu=dtype in ("bf16",))


def test_argmax_takes_the_first_nan_and_extreme_ints():
    x = np.array([[1.0, np.nan, 3.0, np.nan], [2.0, 5.0, 5.0, -np.inf]], np.float32)
    check(lambda a: a.argmax(1), lambda a: a.argmax(1), x, dtype="f32")
    check(lambda a: a.argmin(1), lambda a: a.argmin(1), x, dtype="f32")
    xi = np.array([[3, -2 ** 31, 2 ** 31 - 1, -2 ** 31]], np.int32)
    check(lambda a: a.argmin(1), lambda a: a.argmin(1), xi, dtype="i32")
    check(lambda a: a.argmax(-1), lambda a: a.argmax(-1), xi, dtype="i32")


def test_argmax_of_a_strided_view_and_empty_axis_error():
    x = np.random.default_rng(5).standard_normal((6, 9)).astype(np.float32)
    check(lambda a: a[::2, 1::3].argmax(0), lambda a: a[::2, 1::3].argmax(0), x, dtype="f32")
    with pytest.raises(compiler.ShapeError, match="empty axis"):
        compiler.trace(lambda a: a.argmax(1), compiler.spec((3, 0)))


# --- gathers ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS + ["i32", "bool"])
@pytest.mark.parametrize("shape,ishape,dim", [((5, 7), (3, 7), 0), ((4, 6), (4, 9), -1), ((3, 5, 4), (2, 3, 4), 1),
                                              ((4, 3), (0, 3), 0), ((6,), (6,), 0), ((3, 4), (2, 3), 1)])
def test_gather(shape, ishape, dim, dtype):
    rng = np.random.default_rng(6)
    x = values(rng, shape, dtype)
    n = shape[dim]
    i = rng.integers(-n, n, ishape).astype(np.int32)   # negative positions count from the end
    check(lambda a, b: a.gather(dim, b), lambda a, b: a.gather(dim, b % n), x, i, dtype=dtype, longs=(1,),
          cpu=dtype in ("f32", "bf16", "bool"))


def test_gather_of_a_0d_input_and_transposed_input():
    x = np.float32(2.5).reshape(())
    check(lambda a, b: a.gather(0, b), lambda a, b: a.gather(0, b), x, np.zeros((), np.int32), dtype="f32",
          longs=(1,))
    rng = np.random.default_rng(7)
    x, i = rng.standard_normal((5, 4)).astype(np.float32), rng.integers(0, 4, (5, 3)).astype(np.int32)
    check(lambda a, b: a.T.gather(0, b.T), lambda a, b: a.T.gather(0, b.T), x, i, dtype="f32", longs=(1,))


@pytest.mark.parametrize("dtype", FLOATS + ["i32"])
@pytest.mark.parametrize("shape,dim,m", [((5, 7), 0, 4), ((3, 4, 5), -1, 8), ((6,), 0, 0), ((2, 3), 1, 1)])
def test_index_select(shape, dim, m, dtype):
    rng = np.random.default_rng(8)
    x = values(rng, shape, dtype)
    i = rng.integers(0, shape[dim], (m,)).astype(np.int32)
    check(lambda a, b: a.index_select(dim, b), lambda a, b: a.index_select(dim, b), x, i, dtype=dtype,
          cpu=dtype in ("f32", "i32"))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("ishape", [(5,), (2, 3), (), (0, 4)])
def test_embedding(ishape, dtype):
    rng = np.random.default_rng(9)
    w, i = values(rng, (11, 6), dtype), rng.integers(0, 11, ishape).astype(np.int32)
    check(lambda a, b: F.embedding(b, a), lambda a, b: torch.nn.functional.embedding(b, a), w, i, dtype=dtype,
          cpu=dtype == "f16")


def test_take_along_dim_and_take():
    rng = np.random.default_rng(10)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    i = rng.integers(0, 5, (1, 3)).astype(np.int32)      # broadcast over the rows
    check(lambda a, b: a.take_along_dim(b, 1), lambda a, b: torch.take_along_dim(a, b, 1), x, i, dtype="f32",
          longs=(1,))
    j = rng.integers(0, 20, (2, 3)).astype(np.int32)
    check(lambda a, b: a.take_along_dim(b), lambda a, b: torch.take_along_dim(a, b), x, j, dtype="f32", longs=(1,))
    check(lambda a, b: a.take(b), lambda a, b: torch.take(a, b), x, j, dtype="f32", longs=(1,))


@pytest.mark.parametrize("pick", ["first", "middle", "ellipsis", "ellipsis_before"])
def test_tensor_index(pick):
    rng = np.random.default_rng(20)
    x, i = rng.standard_normal((4, 5, 6)).astype(np.float32), np.array([[3, -1], [0, 2]], np.int32)
    fn = {"first": lambda a, b: a[b], "middle": lambda a, b: a[:, b], "ellipsis": lambda a, b: a[..., b],
          "ellipsis_before": lambda a, b: a[..., b, :]}[pick]
    check(fn, fn, x, i, dtype="f32", longs=(1,), cpu=pick == "middle")


def test_gather_index_errors():
    with pytest.raises(compiler.DTypeError, match="integers"):
        compiler.trace(lambda a, b: a.gather(0, b), compiler.spec((3,)), compiler.spec((3,)))
    with pytest.raises(compiler.ShapeError, match="rank"):
        compiler.trace(lambda a, b: a.gather(0, b), compiler.spec((3, 2)), compiler.spec((3,), "i32"))
    with pytest.raises(compiler.ShapeError, match="larger"):
        compiler.trace(lambda a, b: a.gather(0, b), compiler.spec((3, 2)), compiler.spec((3, 5), "i32"))


# --- one_hot and losses -------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(5,), (2, 3), (), (0,)])
def test_one_hot(shape):
    t = np.random.default_rng(11).integers(0, 4, shape).astype(np.int32)
    check(lambda a: F.one_hot(a, 4), lambda a: torch.nn.functional.one_hot(a, 4), t, dtype="i32", longs=(0,))
    with pytest.raises(compiler.UnsupportedError, match="num_classes"):
        compiler.trace(lambda a: F.one_hot(a), compiler.spec(shape, "i32"))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing,weighted", [(0.0, False), (0.0, True), (0.2, True), (0.1, False)])
def test_cross_entropy_class_indices(reduction, smoothing, weighted, dtype):
    rng = np.random.default_rng(12)
    x, w = values(rng, (5, 6, 3), dtype), rng.random(6).astype(as_dtype(dtype).np)
    t = rng.integers(0, 6, (5, 3)).astype(np.int32)
    t[1, 2] = -100                                         # ignored
    x[0, 2, 0] = -np.inf                                   # a class never picked: no NaN

    def ours(a, b, c):
        return F.cross_entropy(a, b, weight=c if weighted else None, reduction=reduction, label_smoothing=smoothing)

    def theirs(a, b, c):
        return torch.nn.functional.cross_entropy(a, b, weight=c if weighted else None, reduction=reduction,
                                                 label_smoothing=smoothing)

    if smoothing:
        x[0, 2, 0] = -30.0    # smoothing sums every class: torch gives inf there too
    check(ours, theirs, x, t, w, dtype=dtype, longs=(1,), scale=16, cpu=reduction == "mean" and dtype == "f32")


@pytest.mark.parametrize("shape,tshape", [((4, 5), (4,)), ((5,), ()), ((2, 3, 4), (2, 4))])
def test_nll_loss(shape, tshape):
    rng = np.random.default_rng(13)
    x = rng.standard_normal(shape).astype(np.float32)
    c = shape[0] if len(shape) == 1 else shape[1]
    t = rng.integers(0, c, tshape).astype(np.int32)
    check(lambda a, b: F.nll_loss(a, b), lambda a, b: torch.nn.functional.nll_loss(a, b), x, t, dtype="f32",
          longs=(1,), scale=8)


# --- scans --------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS + ["i32"])
@pytest.mark.parametrize("shape,dim", [((5, 7), 1), ((3, 4, 5), -2), ((6,), 0), ((), 0), ((0, 3), 1), ((4, 0), -1),
                                       ((1, 9), -1)])
def test_cumsum_cumprod(shape, dim, dtype):
    rng = np.random.default_rng(14)
    x = values(rng, shape, dtype, -3, 4)
    small = x if dtype == "i32" else (x * 0.5 + 1.0).astype(x.dtype)   # products of moderate size
    check(lambda a: a.cumsum(dim), lambda a: a.cumsum(dim), x, dtype=dtype, scale=8, cpu=dtype in ("f32", "i32"))
    check(lambda a: a.cumprod(dim), lambda a: a.cumprod(dim), small, dtype=dtype, scale=16, cpu=dtype == "f16")


@pytest.mark.parametrize("dtype", ["f32", "i32", "bf16"])
def test_cummax_cummin(dtype):
    rng = np.random.default_rng(15)
    x = values(rng, (4, 9), dtype)
    check(lambda a: a.cummax(1), lambda a: a.cummax(1).values, x, dtype=dtype)
    check(lambda a: a.cummin(0), lambda a: a.cummin(0).values, x, dtype=dtype, cpu=False)


def test_cumsum_of_bool_and_of_a_view_and_with_inf():
    rng = np.random.default_rng(16)
    b = rng.random((3, 6)) < 0.5
    check(lambda a: a.cumsum(1), lambda a: a.cumsum(1), b, dtype="i32")
    x = rng.standard_normal((6, 5)).astype(np.float32)
    x[2, 1] = np.inf
    check(lambda a: a.T[:, ::2].cumsum(-1), lambda a: a.T[:, ::2].cumsum(-1), x, dtype="f32")


# --- the CUDA kernel-IR renderer, run on the host -----------------------------------------------

HOST_PROGRAMS = {
    "gather_f16": (lambda x, i: (x * 2).gather(1, i), [((4, 7), "f16"), ((4, 5), "i32")]),
    "embedding_bf16": (lambda w, i: F.embedding(i, w) * 3, [((9, 6), "bf16"), ((2, 3), "i32")]),
    "one_hot_cumsum_f32": (lambda x, i: (F.one_hot(i, 6).astype("f32") * x.tril(-1)).cumsum(0),
                           [((5, 6), "f32"), ((5, 1), "i32")]),
    "argmax_i32": (lambda x: x.argmax(-1), [((6, 5), "i32")]),
}


@pytest.mark.parametrize("name", sorted(HOST_PROGRAMS))
def test_cuda_kernel_ir_on_host(name):
    from backends.cuda import hostsim
    from backends.cuda.plan import needs_kernel_ir
    reason = hostsim.available()
    if reason:
        pytest.skip(reason)
    fn, specs = HOST_PROGRAMS[name]
    graph = compiler.trace(fn, *(compiler.spec(s, d) for s, d in specs))
    assert needs_kernel_ir(graph)
    rng = np.random.default_rng(17)
    args = [values(rng, s, d, 0, s[0] if d == "i32" else 4) for s, d in specs]
    want = evaluate(graph, args)[0]
    got = hostsim.run_kernel_ir(graph, args)[0]
    assert_close(got, want, as_dtype(want.dtype), 1)


def test_cuda_templates_refuse_iota_and_gather():
    """Programs with iota or gather go to the kernel IR; tril/triu/cumsum (views of constants)
    stay on the template path."""
    from backends.cuda.plan import needs_kernel_ir, plan
    graph = compiler.trace(lambda x: x.argmax(-1), compiler.spec((3, 3)))
    assert any(n.op == Op.IOTA for n in graph.nodes)
    with pytest.raises(ValueError, match="kernel_ir"):
        plan(graph)
    assert not needs_kernel_ir(compiler.trace(lambda x: x.tril().cumsum(-1), compiler.spec((3, 3))))


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(HOST_PROGRAMS))
def test_cuda_index_programs_on_gpu(name):
    from backends.cuda import CUDABackend
    be = CUDABackend()
    if be.unavailable_reason():
        pytest.skip(be.unavailable_reason())
    fn, specs = HOST_PROGRAMS[name]
    graph = compiler.trace(fn, *(compiler.spec(s, d) for s, d in specs))
    assert [s.name for s in be.schedules(graph)] == ["kernel_ir"]
    rng = np.random.default_rng(18)
    args = [values(rng, s, d, 0, s[0] if d == "i32" else 4) for s, d in specs]
    want = evaluate(graph, args)[0]
    assert_close(be.build(graph)(*args)[0], want, as_dtype(want.dtype), 1)


@pytest.mark.gpu
def test_cuda_compile_causal_attention_and_cross_entropy():
    rng = np.random.default_rng(19)
    q, k, v = (rng.standard_normal((2, 64, 32)).astype(np.float32) for _ in range(3))

    def attn(q, k, v):
        s = (q @ k.transpose(-1, -2)) * 0.125
        keep = compiler.Tensor.full((64, 64), True, "bool").tril()
        return keep.where(s, float("-inf")).softmax(-1) @ v

    f = compiler.compile(attn, *(compiler.spec(a.shape) for a in (q, k, v)), target="cuda", budget=5, quiet=True)
    want = torch.nn.functional.scaled_dot_product_attention(*map(torch.from_numpy, (q, k, v)), is_causal=True,
                                                            scale=0.125)
    assert_close(f(q, k, v), want.numpy(), DType.f32, 8)
    x, t = rng.standard_normal((32, 100)).astype(np.float32), rng.integers(0, 100, (32,)).astype(np.int32)
    g = compiler.compile(lambda a, b: F.cross_entropy(a, b), compiler.spec(x.shape), compiler.spec(t.shape, "i32"),
                         target="cuda", budget=5, quiet=True)
    want = torch.nn.functional.cross_entropy(torch.from_numpy(x), torch.from_numpy(t).long())
    assert_close(g(x, t), want.numpy(), DType.f32, 8)


@pytest.mark.parametrize("name,alternative", [("int16", "i32"), ("torch.int16", "i32"), (np.uint16, "i32"),
                                              ("uint32", "i64"), (np.uint64, "i64")])
def test_missing_dtypes_name_what_to_use(name, alternative):
    with pytest.raises(compiler.DTypeError, match=f"not supported: Saturn has .*; use {alternative}"):
        compiler.spec((3,), name)


# --- sorting ------------------------------------------------------------------------------------

def distinct(rng, shape, dtype: str):
    """Distinct values (topk's tie order is unspecified in torch), shuffled."""
    n = int(np.prod(shape))
    v = rng.permutation(n).reshape(shape) - n // 2
    return v.astype(np.int32) if dtype == "i32" else (v * 0.25).astype(as_dtype(dtype).np)


@pytest.mark.parametrize("dtype", FLOATS + ["i32"])
@pytest.mark.parametrize("shape,dim,descending", [((3, 7), -1, False), ((5, 4), 0, True), ((2, 3, 5), 1, False),
                                                  ((6,), 0, True), ((), 0, False), ((3, 0), -1, True)])
def test_sort_and_argsort(shape, dim, descending, dtype):
    rng = np.random.default_rng(21)
    x = values(rng, shape, dtype, -2, 3)    # ties: a stable sort keeps them in order

    def theirs(a, part):
        return torch.sort(a, stable=True, dim=dim, descending=descending)[part]

    check(lambda a: a.sort(dim, descending)[0], lambda a: theirs(a, 0), x, dtype=dtype, cpu=dtype in ("f32", "bf16"))
    check(lambda a: a.argsort(dim, descending), lambda a: theirs(a, 1), x, dtype=dtype, cpu=dtype in ("f16", "i32"))


def test_sort_puts_nan_last_and_keeps_signed_zeros():
    x = np.array([[2.0, np.nan, -0.0, -1.0, np.inf, 0.0, np.nan, -np.inf]], np.float32)
    for desc in (False, True):
        check(lambda a: a.sort(-1, desc)[0], lambda a: torch.sort(a, stable=True, descending=desc)[0], x, dtype="f32")
        check(lambda a: a.argsort(-1, desc), lambda a: torch.sort(a, stable=True, descending=desc)[1], x,
              dtype="f32")


@pytest.mark.parametrize("dtype", FLOATS + ["i32"])
@pytest.mark.parametrize("shape,k,dim,largest", [((4, 9), 3, -1, True), ((6, 5), 2, 0, False), ((7,), 7, 0, True),
                                                 ((3, 4), 0, 1, True)])
def test_topk(shape, k, dim, largest, dtype):
    x = distinct(np.random.default_rng(22), shape, dtype)
    check(lambda a: a.topk(k, dim, largest)[0], lambda a: torch.topk(a, k, dim, largest)[0], x, dtype=dtype,
          cpu=dtype == "f32")
    check(lambda a: a.topk(k, dim, largest)[1], lambda a: torch.topk(a, k, dim, largest)[1], x, dtype=dtype,
          cpu=dtype == "i32")
    with pytest.raises(compiler.ShapeError, match="out of range"):
        compiler.trace(lambda a: a.topk(shape[dim] + 1, dim), compiler.spec(shape, dtype))


def test_gather_at_an_unsure_index_accepts_any_value():
    """The error-bound reference (ir.bounds): a gather whose index is not pinned down (here an
    argmax of computed values: `x == max(x)` is within rounding of both outcomes) may read any
    element, so its bound is infinite there; at an exact index it keeps the source's bound."""
    from ir import bounds
    graph = compiler.trace(lambda a, b, w: w.gather(0, (a + b).argmax(0, keepdim=True)),
                           compiler.spec((2,)), compiler.spec((2,)), compiler.spec((2,)))
    w = np.array([10.0, 20.0], np.float32)
    near = bounds.evaluate_bounded(graph, [np.array([1.0, 0.5], np.float32), np.array([2.0 ** -23, 0.5], np.float32), w])
    assert np.isinf(near[0].bound).all() and near[0].value[0] == 10.0
    exact = compiler.trace(lambda i, w: (w * 3).gather(0, i), compiler.spec((2,), "i32"), compiler.spec((2,)))
    got = bounds.evaluate_bounded(exact, [np.array([1, 0], np.int32), w])[0]
    assert np.isfinite(got.bound).all() and (got.value == [60.0, 30.0]).all()


def test_iota_and_gather_round_trip_through_the_cache_codec():
    """Graphs and kernel programs with iota and gather are stored by the winners' cache."""
    from compiler import codec
    from ir.lower import lower
    graph = compiler.trace(lambda x, i: x.exp().gather(1, i) + x.argmax(1, keepdim=True).astype("f32"),
                           compiler.spec((4, 6)), compiler.spec((4, 3), "i32"))
    back = codec.loads(codec.dumps(graph))
    assert all(a is b for a, b in zip(back.outputs, graph.outputs)) and str(back) == str(graph)
    program = lower(graph)
    assert codec.loads(codec.dumps(program)) == program


def _scatter_np(x, dim, idx, src, add):
    out = x.copy()
    for p in np.ndindex(*idx.shape):
        t = list(p)
        t[dim] = idx[p]
        out[tuple(t)] = out[tuple(t)] + src[p] if add else src[p]     # (C order: the last j wins)
    return out


@pytest.mark.parametrize("shape,ishape,dim", [((5, 4), (3, 4), 0), ((5, 4), (5, 3), 1), ((5, 4), (5, 3), -1),
                                              ((5, 4, 3), (2, 4, 2), 0), ((1, 7), (1, 7), 1), ((6,), (9,), 0)])
@pytest.mark.parametrize("add", [False, True])
@pytest.mark.parametrize("target", ["reference", "cpu"])
def test_scatter_and_scatter_add(shape, ishape, dim, add, target):
    """torch.scatter / scatter_add along any dim, index smaller than the input outside it,
    repeated positions (scatter: the last j wins; scatter_add: they sum), on both targets."""
    rng = np.random.default_rng(len(shape) * 10 + ishape[0])
    x = rng.standard_normal(shape).astype(np.float32)
    d = dim % len(shape)
    idx = rng.integers(0, shape[d], ishape).astype(np.int32)
    src = rng.standard_normal(ishape).astype(np.float32)
    fn = (lambda a, i, s: a.scatter_add(dim, i, s)) if add else (lambda a, i, s: a.scatter(dim, i, s))
    f = compiler.compile(fn, compiler.spec(shape), compiler.spec(ishape, "i32"), compiler.spec(ishape), target=target,
                       budget=0.5, quiet=True, cache=False)
    np.testing.assert_allclose(np.asarray(f(x, idx, src)), _scatter_np(x, d, idx, src, add), rtol=1e-6, atol=1e-6)


def test_scatter_of_a_value_and_its_errors():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    idx = np.array([[2, 0, 1, 2]], np.int32)
    f = compiler.compile(lambda a, i: a.scatter(0, i, value=-1.0), compiler.spec((3, 4)), compiler.spec((1, 4), "i32"),
                       target="reference", quiet=True, cache=False)
    want = x.copy()
    want[2, 0] = want[0, 1] = want[1, 2] = want[2, 3] = -1.0
    np.testing.assert_array_equal(np.asarray(f(x, idx)), want)
    from compiler.errors import DTypeError, ShapeError
    t, i = compiler.spec((3, 4)), compiler.spec((1, 4), "i32")
    with pytest.raises(ShapeError, match="larger than the input"):
        compiler.trace(lambda a, j: a.scatter(0, j, value=1.0), t, compiler.spec((1, 5), "i32"))
    with pytest.raises(ShapeError, match="either src or value"):
        compiler.trace(lambda a, j: a.scatter(0, j), t, i)
    with pytest.raises(DTypeError, match="integers"):
        compiler.trace(lambda a, j: a.scatter(0, j, value=1.0), t, compiler.spec((1, 4)))
    from compiler.errors import UnsupportedError
    with pytest.raises(UnsupportedError, match="reduce"):
        compiler.trace(lambda a, j: a.scatter(0, j, value=1.0, reduce="add"), t, i)


# advanced indexing with several integer tensors (torch's semantics: ints and slices first, the
# tensors broadcast together; their shape replaces their axes when adjacent, else comes first)
ADVANCED = {
    "x[i, j]": lambda x, i, j: x[i, j % 4],
    "x[:, i, j]": lambda x, i, j: x[:, i % 4, j],
    "x[i, :, j]": lambda x, i, j: x[i, :, j],
    "x[0, :, j]": lambda x, i, j: x[0, :, j],
    "x[-1, i, j]": lambda x, i, j: x[-1, i % 4, j],
    "x[..., j]": lambda x, i, j: x[..., j],
    "x[1:, i, ::2]": lambda x, i, j: x[1:, i, ::2],
    "x[i, j, j]": lambda x, i, j: x[i, j % 4, j],
    "x[i.T, j] (broadcast)": lambda x, i, j: x[i.reshape(-1, 1), j % 4],
}


@pytest.mark.parametrize("name", list(ADVANCED))
def test_several_tensor_indices_pick_like_torch(name):
    torch = pytest.importorskip("torch")
    from backends import get_backend
    fn = ADVANCED[name]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    i = np.array([0, 2, -1], np.int32)        # a negative position counts from the end
    j = np.array([4, 0, 1], np.int32)
    g = compiler.trace(fn, compiler.spec(x.shape), compiler.spec(i.shape, "i32"), compiler.spec(j.shape, "i32"))
    want = fn(torch.from_numpy(x), torch.from_numpy(i).long(), torch.from_numpy(j).long()).numpy()
    for got in (evaluate(g, [x, i, j])[0], get_backend("cpu").build(g)(x, i, j)[0]):
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_several_tensor_indices_out_of_range_read_zero_not_another_element():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    g = compiler.trace(lambda x, i, j: x[i, j], compiler.spec(x.shape), compiler.spec((2,), "i32"),
                       compiler.spec((2,), "i32"))
    # (0, 5) would be element 5 = (1, 1) of the flattened pair if the column were not checked
    got = evaluate(g, [x, np.array([0, 1], np.int32), np.array([5, 1], np.int32)])[0]
    np.testing.assert_array_equal(got, [0.0, 5.0])
