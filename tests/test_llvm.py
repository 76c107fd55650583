"""The CPU backend (llvmlite) against the reference interpreter: every frontend op, views,
dtypes, the transformer block, determinism, the disk cache, schedules and benchmark()."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import compiler as saturn
from compiler import nn
from ir.interpreter import evaluate

llvm_backend = pytest.importorskip("backends.llvm")
pytest.importorskip("llvmlite")


pytestmark = pytest.mark.usefixtures("module_cache_dir")


BACKEND = llvm_backend.LLVMBackend()
TOL = {"f32": dict(rtol=2e-5, atol=2e-5), "f16": dict(rtol=1e-2, atol=1e-2), "bf16": dict(rtol=5e-2, atol=5e-2),
       "i32": dict(rtol=0, atol=0), "bool": dict(rtol=0, atol=0)}


def _args(shapes, dtypes, seed=0, positive=False):
    rng = np.random.default_rng(seed)
    out = []
    for s, d in zip(shapes, dtypes):
        if d == "i32":
            out.append(rng.integers(-9, 10, s).astype(np.int32))
        elif d == "bool":
            out.append(rng.random(s) < 0.5)
        else:
            x = rng.standard_normal(s)
            out.append((np.abs(x) + 0.1 if positive else x).astype(saturn.spec((), d).dtype.np))
    return out


def check(fn, shapes, dtypes="f32", positive=False, schedule=None):
    dtypes = [dtypes] * len(shapes) if isinstance(dtypes, str) else dtypes
    g = saturn.trace(fn, *[saturn.spec(s, d) for s, d in zip(shapes, dtypes)])
    args = _args(shapes, dtypes, positive=positive)
    exe = BACKEND.build(g, schedule)
    got = exe(*args)
    want = evaluate(g, args)
    assert len(got) == len(want)
    for w, o in zip(want, got):
        assert o.shape == w.shape and o.dtype == w.dtype
        tol = TOL[saturn.spec((), str(w.dtype) if w.dtype != np.bool_ else "bool").dtype.value]
        np.testing.assert_allclose(o.astype(np.float64), w.astype(np.float64), equal_nan=True, **tol)
    return exe


UNARY = {
    "neg": lambda x: -x, "exp": lambda x: x.exp(), "exp2": lambda x: x.exp2(), "sin": lambda x: x.sin(),
    "cos": lambda x: x.cos(), "sigmoid": lambda x: x.sigmoid(), "tanh": lambda x: x.tanh(),
    "relu": lambda x: x.relu(), "silu": lambda x: x.silu(), "abs": lambda x: x.abs(),
    "square": lambda x: x.square(), "erf": lambda x: x.erf(), "gelu": lambda x: x.gelu(),
    "gelu_tanh": lambda x: x.gelu("tanh"), "pow3": lambda x: x ** 3, "clamp": lambda x: x.clamp(-0.5, 0.7),
    "rdiv": lambda x: 2.0 / (x.abs() + 1), "mod": lambda x: x % 0.7, "rsub": lambda x: 1 - x,
    "min_all": lambda x: x.min(), "mean": lambda x: x.mean(), "var": lambda x: x.var(0),
    "softmax": lambda x: x.softmax(-1), "softmax0": lambda x: x.softmax(0), "log_softmax": lambda x: x.log_softmax(-1),
    "rms_norm": lambda x: x.rms_norm(), "layer_norm": lambda x: x.layer_norm(), "max_keep": lambda x: x.max(-1, keepdim=True),
    "cmp": lambda x: ((x > 0.2).logical_and(x <= 1.0)).logical_or(x == 0.0).logical_not().astype("f32"),
    "ne_ge": lambda x: (x != 0.5).where(x >= -0.1, False).astype("i32"),
    "to_i32": lambda x: (x * 4).astype("i32") % 3, "contiguous_T": lambda x: x.T.contiguous() * 2,
}
POSITIVE = {"log": lambda x: x.log(), "log2": lambda x: x.log2(), "sqrt": lambda x: x.sqrt(),
            "rsqrt": lambda x: x.rsqrt(), "recip": lambda x: x.reciprocal(), "pow": lambda x: x ** 1.7,
            "pow_half": lambda x: x ** 0.5, "pow_neg": lambda x: x ** -2}


@pytest.mark.parametrize("name", list(UNARY))
def test_unary_and_reductions(name):
    check(UNARY[name], [(3, 7)])


@pytest.mark.parametrize("name", list(POSITIVE))
def test_positive_domain(name):
    check(POSITIVE[name], [(7, 3)], positive=True)


BINARY = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
          "div": lambda a, b: a / (b.abs() + 0.5), "maximum": lambda a, b: a.maximum(b),
          "minimum": lambda a, b: a.minimum(b), "where": lambda a, b: (a < b).where(a, b * 2),
          "lt_gt": lambda a, b: ((a < b).astype("f32") + (a > b).astype("f32")), "mod": lambda a, b: a % (b.abs() + 1)}


@pytest.mark.parametrize("name", list(BINARY))
def test_binary_broadcasting(name):
    check(BINARY[name], [(4, 1, 7), (3, 1)])


def test_matmul_family():
    check(lambda a, b: a @ b, [(7, 5), (5, 3)])
    check(lambda a, b: a @ b, [(2, 1, 4, 5), (3, 5, 6)])
    check(lambda a, b: a @ b, [(5,), (5, 3)])
    check(lambda a, b: a @ b, [(4, 5), (5,)])
    check(lambda x, w, b: x.linear(w, b), [(3, 8), (6, 8), (6,)])


def test_movement_ops():
    check(lambda x: x.reshape(3, 2, 7).permute(2, 0, 1).flatten(1) + 1, [(6, 7)])
    check(lambda x: x.unsqueeze(1).expand(6, 4, 7).transpose(0, 2).squeeze() * 2, [(6, 7)])
    check(lambda x: x[1:5:2, ::3] + x[None, -1, 2:5].sum(), [(6, 7)])
    check(lambda x: x.slice(1, 1, 6, 2).pad(((2, 1), (0, 3)), -1.5).exp(), [(6, 7)])
    check(lambda a, b: saturn.cat([a, b.exp(), a * 2], 0), [(2, 7), (3, 7)])


@pytest.mark.parametrize("dtype", ["i32", "bool"])
def test_int_and_bool(dtype):
    if dtype == "i32":
        check(lambda a, b: (a * b + a % (b.abs() + 1)).sum(0) + a.max(1, keepdim=True), [(5, 4), (5, 4)], "i32")
        check(lambda a: (a < 2).where(a, -a).astype("f32").softmax(-1), [(3, 6)], "i32")
    else:
        check(lambda a, b: (a.logical_or(b).logical_and(a.logical_not())).sum(1), [(5, 4), (5, 4)], "bool")


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_half_storage(dtype):
    check(lambda x, w: (x @ w).softmax(-1) * 2 + x.sum(1, keepdim=True).exp(), [(5, 6), (6, 6)], dtype)
    check(lambda x, w, b: x.layer_norm((6,), w, b).gelu(), [(4, 6), (6,), (6,)], dtype)


def test_transformer_block():
    specs = nn.transformer_block_specs(2, 7, 16, 32)
    shapes = [s.shape for s in specs]
    g = saturn.trace(lambda *a: nn.transformer_block(*a, heads=2), *specs)
    args = [a * 0.3 for a in _args(shapes, ["f32"] * len(shapes))]
    got = BACKEND.build(g)(*args)[0]
    np.testing.assert_allclose(got, evaluate(g, args)[0], rtol=1e-4, atol=1e-4)


def test_attention_and_mlp_sizes():
    check(lambda q, k, v: nn.attention(q, k, v), [(2, 7, 8)] * 3)
    check(lambda x, w1, b1, w2, b2: nn.mlp(x, w1, b1, w2, b2), [(7, 8), (8, 16), (16,), (16, 8), (8,)])


def test_multiple_outputs_and_input_passthrough():
    check(lambda x, y: (x, x + y, x + y, y.sum()), [(3, 4), (3, 4)])


def test_large_and_one_sized():
    check(lambda x: (x * 2).exp().sum(), [(1000,)])
    check(lambda x: x.softmax(-1) + 1, [(1, 1)])
    check(lambda x: x.softmax(-1), [(3, 1000)])


def test_deterministic_and_thread_independent():
    g = saturn.trace(lambda x, w: (x @ w).softmax(-1).sum(0), saturn.spec((300, 200)), saturn.spec((200, 100)))
    args = _args([(300, 200), (200, 100)], ["f32", "f32"], seed=3)
    from ir.kernel import Schedule
    multi = BACKEND.build(g, Schedule(threads=2))
    single = BACKEND.build(g, Schedule(threads=1))
    assert any(len(l.chunks) > 1 for l in multi.launches)        # the product is split across threads
    a, b, c = multi(*args)[0], multi(*args)[0], single(*args)[0]
    assert a.tobytes() == b.tobytes() == c.tobytes()


def test_disk_cache_and_benchmark(tmp_path, monkeypatch):
    monkeypatch.setenv("SATURN_CACHE_DIR", str(tmp_path))
    g = saturn.trace(lambda x: (x * 3 + 1).sin(), saturn.spec((10, 10)))
    first = BACKEND.build(g)
    second = BACKEND.build(g)
    assert not first.cache_hit and second.cache_hit
    assert list((tmp_path / "llvm").glob("*.o"))
    x = _args([(10, 10)], ["f32"])
    np.testing.assert_array_equal(first(*x)[0], second(*x)[0])
    times = second.benchmark(x, warmup=1, repeat=3)
    assert len(times) == 3 and all(t > 0 for t in times)


def test_warm_build_loads_the_object_without_rendering(tmp_path, monkeypatch):
    """The second build of a kernel program under a schedule finds its object through an index
    entry keyed by the program itself: no LLVM IR is rendered (the 12-layer model's warm compile
    spent 0.7 of 1.1 s rendering only to find the object's key); explain()'s source is rendered
    when asked for. A damaged index entry is ignored: the build renders and compiles again."""
    import backends.llvm.render as render
    monkeypatch.setenv("SATURN_CACHE_DIR", str(tmp_path))
    g = saturn.trace(lambda a, b: (a @ b + 1).relu().sum(-1), saturn.spec((9, 17)), saturn.spec((17, 5)))
    x = _args([(9, 17), (17, 5)], ["f32", "f32"])
    first = BACKEND.build(g)
    real = render.render_program
    renders = []
    monkeypatch.setattr(render, "render_program", lambda *a, **k: renders.append(1) or real(*a, **k))
    second = BACKEND.build(g)
    assert second.cache_hit and not renders
    np.testing.assert_array_equal(first(*x)[0], second(*x)[0])
    assert second.source == first.source and renders == [1]
    (index,) = (tmp_path / "llvm").glob("*.idx")
    data = bytearray(index.read_bytes())
    data[-1] ^= 0xFF
    index.write_bytes(bytes(data))
    third = BACKEND.build(g)
    assert len(renders) == 2 and third.cache_hit       # rendered again; the object itself was intact
    np.testing.assert_array_equal(first(*x)[0], third(*x)[0])


def test_schedules_all_match():
    g = saturn.trace(lambda x, w: (x @ w + 1).softmax(-1), saturn.spec((9, 12)), saturn.spec((12, 7)))
    args = _args([(9, 12), (12, 7)], ["f32", "f32"])
    want = evaluate(g, args)[0]
    for s in BACKEND.schedules(g):
        np.testing.assert_allclose(BACKEND.build(g, s)(*args)[0], want, rtol=2e-5, atol=2e-5)


def test_tile_schedules_are_offered_only_to_programs_with_contraction_terms_and_match_on_odd_convolutions():
    """A matmul tile changes only the packed products' code; the tiles run a convolution whose
    sizes divide no tile (3x3, 5 channels, 7x9 pixels, 3 outputs) like the interpreter."""
    from compiler import conv
    tiles = {"mm6x2", "mm4x3", "mm6x2-kc512", "mm8x2"}
    plain = saturn.trace(lambda x: x.softmax(-1), saturn.spec((4, 9)))
    assert not tiles & {s.name for s in BACKEND.schedules(plain)}
    g = saturn.trace(lambda x, w: conv.conv2d(x, w, padding=1).relu(), saturn.spec((2, 5, 7, 9)), saturn.spec((3, 5, 3, 3)))
    offered = [s for s in BACKEND.schedules(g) if s.name in tiles]
    assert len(offered) == (3 if BACKEND.schedules(g)[0].default.vector_width == 16 else 2)
    args = _args([(2, 5, 7, 9), (3, 5, 3, 3)], ["f32", "f32"])
    want = evaluate(g, args)[0]
    for s in offered:
        np.testing.assert_allclose(BACKEND.build(g, s)(*args)[0], want, rtol=2e-5, atol=2e-5)


def test_registry_maps_cpu_to_llvm_backend():
    from backends import get_backend
    be = get_backend("cpu")
    assert type(be).__name__ == "LLVMBackend" and be.unavailable_reason() is None
    g = saturn.trace(lambda x: x.softmax(-1), saturn.spec((4, 9)))
    x = _args([(4, 9)], ["f32"])[0]
    np.testing.assert_allclose(be.build(g)(x)[0], evaluate(g, [x])[0], rtol=2e-5, atol=1e-6)


@pytest.mark.slow
def test_compile_api_target_cpu():
    f = saturn.compile(lambda x: x.softmax(-1), saturn.spec((4, 9)), target="cpu", budget=1.0, quiet=True,
                       cache=False)
    x = _args([(4, 9)], ["f32"])[0]
    np.testing.assert_allclose(f(x), evaluate(f.graph, [x])[0], rtol=2e-5, atol=1e-6)


@settings(max_examples=12, deadline=None)
@given(st.lists(st.sampled_from([1, 2, 7, 13]), min_size=1, max_size=3), st.data())
def test_random_views_elementwise_reductions(shape, data):
    shape = tuple(shape)
    perm = tuple(data.draw(st.permutations(range(len(shape)))))
    axis = data.draw(st.integers(0, len(shape) - 1))
    step = data.draw(st.integers(1, 3))
    pad = data.draw(st.integers(0, 2))
    op = data.draw(st.sampled_from(["softmax", "sum", "max", "norm"]))

    def fn(x):
        z = x.permute(perm)
        z = z.slice(axis, 0, None, step)
        z = z.pad(tuple((pad, 1) if a == axis else (0, 0) for a in range(z.ndim)), 0.5)
        if op == "softmax":
            return z.softmax(axis)
        if op == "sum":
            return (z.exp() * 2).sum(axis)
        if op == "max":
            return z.max(axis) + z.sum()
        return z.rms_norm() if axis == z.ndim - 1 else z - z.mean(axis, keepdim=True)
    check(fn, [shape])


@settings(max_examples=6, deadline=None)
@given(st.sampled_from([1, 7, 1000]), st.sampled_from([1, 3]), st.sampled_from(["f32", "f16"]))
def test_elementwise_chain_sizes(n, m, dtype):
    check(lambda x, y: ((x * y + 1).sigmoid() * x).tanh() - y, [(m, n), (1, n)], dtype)


@pytest.mark.parametrize("tile", [(3, 1, 4, 16), (6, 2, 7, 32), (1, 1, 1, 8)])
def test_blocked_matmul_edges(tile):
    """Small tiles force many depth/column blocks, row and column tails, and the epilogue."""
    from backends.llvm import matmul
    from ir.kernel import KernelSchedule, Schedule
    s = Schedule(default=KernelSchedule(vector_width=8, tile=tile))
    exe = check(lambda a, b, c: (a @ b + c).relu(), [(13, 37), (37, 45), (45,)], schedule=s)
    assert any(matmul.product_layout(k, exe.program) for k in exe.program.kernels)
    check(lambda a, b: a @ b.transpose(-1, -2), [(2, 9, 21), (2, 17, 21)], schedule=s)
    check(lambda a, b: a.T @ b, [(33, 5), (33, 19)], schedule=s)


@pytest.mark.parametrize("tile", [(3, 1, 4, 16), (6, 2, 256, 1024)])
def test_blocked_matmul_half(tile):
    """f16 matmuls take the packed path too (products rounded to f16, sums in f32)."""
    from backends.llvm import matmul
    from ir.kernel import KernelSchedule, Schedule
    s = Schedule(default=KernelSchedule(vector_width=8, tile=tile))
    exe = check(lambda a, b, c: (a @ b + c).gelu(), [(13, 37), (37, 45), (45,)], "f16", schedule=s)
    assert any(matmul.product_layout(k, exe.program) for k in exe.program.kernels)
    check(lambda a, b: (a @ b).astype("f32"), [(5, 300), (300, 17)], "f16", schedule=s)


def test_column_reductions_interchanged():
    """Reductions over a non-contiguous axis run with the contiguous output axis innermost."""
    from backends.llvm.render import KernelRenderer
    check(lambda x: x.sum(0) + x.max(0), [(37, 13)])
    check(lambda x: x.softmax(1), [(3, 19, 5)])
    check(lambda x: x.var(0), [(300,)])
    check(lambda x: (x.astype("i32")).sum(0), [(9, 4)])
    exe = check(lambda x: x.mean((0, 1)), [(5, 6, 7)])
    k = exe.program.kernels[-1]
    import llvmlite.ir as lir
    r = KernelRenderer(lir.Module(), exe.program, k, exe.schedule.default)
    assert r._plan_interchange()


@pytest.mark.parametrize("case", range(6))
def test_degenerate_shapes(case):
    fn, shapes = [
        (lambda x: x.sum(0) + x.astype("i32").sum(0).astype("f32"), [(0, 3)]),
        (lambda x: x * 2, [(0, 3)]),
        (lambda x: x.sum(), [()]),
        (lambda a, b: a @ b, [(3, 0), (0, 4)]),
        (lambda a, b: a @ b, [(1, 5), (5, 1)]),
        (lambda x: (x, x * 0 + 1, saturn.Tensor.full((2, 2), 3.0) + x.sum()), [(2,)]),
    ][case]
    check(fn, shapes)


def test_parallel_cap_is_honoured_and_results_identical():
    from ir.kernel import KernelSchedule, Schedule
    g = saturn.trace(lambda x: (x.softmax(-1) * 2).exp(), saturn.spec((6, 50, 70)))
    x = _args([(6, 50, 70)], ["f32"])[0]
    outs = []
    for cap in (0, 1, 2):
        exe = BACKEND.build(g, Schedule(threads=2, default=KernelSchedule(vector_width=8, parallel=cap)))
        assert exe.launches[0].n == (6 if cap == 1 else 300)
        outs.append(exe(x)[0])
    assert outs[0].tobytes() == outs[1].tobytes() == outs[2].tobytes()
    np.testing.assert_allclose(outs[0], evaluate(g, [x])[0], rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("width", [16, 8, 1])
def test_exp2_is_within_one_ulp(width):
    """The CPU exp2 (backends/llvm/mathfns.py, vectorized or scalar) against float64 rounded
    to f32: at most 1 ulp wherever the result is a normal float, denormal results within one
    denormal step, and NaN, inf, -inf, overflow and underflow exactly as numpy."""
    from backends import get_backend
    from compiler.trace import spec, trace
    from ir.kernel import KernelSchedule, Schedule
    x = np.concatenate([np.linspace(-160, 130, 1_000_003, dtype=np.float32),
                        np.random.default_rng(0).standard_normal(100_000).astype(np.float32) * 10,
                        np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 127.99, 128.0, -126.0, -149.0, -150.0,
                                  1e30, -1e30, 1e-30], np.float32)])
    exe = get_backend("cpu").build(trace(lambda x: x.exp2(), spec(x.shape)),
                                   Schedule(threads=1, default=KernelSchedule(vector_width=width)))
    got = exe(x)[0].astype(np.float64)
    with np.errstate(over="ignore"):
        want = np.exp2(x.astype(np.float64)).astype(np.float32).astype(np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(np.isinf(got), np.isinf(want))
    normal = np.isfinite(want) & (want >= np.finfo(np.float32).tiny)
    ulps = np.abs(got[normal] - want[normal]) / np.spacing(want[normal].astype(np.float32)).astype(np.float64)
    assert ulps.max() <= 1.0, ulps.max()
    tiny = np.isfinite(want) & (want < np.finfo(np.float32).tiny)
    assert np.max(np.abs(got[tiny] - want[tiny])) <= np.finfo(np.float32).smallest_subnormal


def test_kernels_that_differ_only_in_their_buffers_share_one_function(tmp_path, monkeypatch):
    """Two layers of the same shape on their own weights: each layer's kernels are the same code
    on other buffers, rendered and compiled once and called with each kernel's own arguments;
    the results match the interpreter, cold and warm (from the object index)."""
    from backends.llvm.render import render_program
    monkeypatch.setenv("SATURN_CACHE_DIR", str(tmp_path))

    def two_layers(x, w1, w2, b1, b2):
        h = (x @ w1 + b1).relu().softmax(-1)
        return (h @ w2 + b2).relu().softmax(-1)

    shapes = [(7, 13), (13, 13), (13, 13), (13,), (13,)]
    g = saturn.trace(two_layers, *[saturn.spec(s) for s in shapes])
    program = BACKEND.lower(g)
    _, info = render_program(program, BACKEND.default_schedule())
    shared = {n: i for n, i in info.items() if i.symbol}
    assert shared, "the second layer's kernels should call the first layer's functions"
    for name, i in shared.items():
        assert i.symbol in info and not info[i.symbol].symbol
        assert i.buffers != info[i.symbol].buffers          # its own arguments
    x = _args(shapes, ["f32"] * 5)
    want = evaluate(g, x)[0]
    for _ in range(2):                                      # cold, then warm from the index
        exe = BACKEND.build(g)
        np.testing.assert_allclose(exe(*x)[0], want, rtol=1e-5, atol=1e-6)
    assert exe.cache_hit


def test_a_padded_read_loads_only_inside_the_image():
    """A convolution's window operand reads the input where the index is inside the image and 0
    in the padding: the load sits under a branch (not a load at a clamped index, then a select),
    which the vectorizer turns into masked loads and gathers that skip the padding; the result
    still matches the interpreter, padding included."""
    from backends.llvm import jit
    from backends.llvm.render import render_program
    from compiler import conv
    shapes = [(2, 8, 16, 16), (8, 8, 3, 3)]
    g = saturn.trace(lambda x, w: conv.conv2d(x, w, padding=1), *[saturn.spec(s) for s in shapes])
    text, _ = render_program(BACKEND.lower(g), BACKEND.default_schedule())
    assert '"load.in' in text
    optimized = jit.optimized_ir(text, unroll=False)
    assert "llvm.masked.load" in optimized or "llvm.masked.gather" in optimized
    x = _args(shapes, ["f32"] * 2)
    np.testing.assert_allclose(BACKEND.build(g)(*x)[0], evaluate(g, x)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n,c,h,w,k,r,stride,pad,dil,groups", [
    (2, 3, 7, 9, 4, 3, 1, 1, 1, 1), (1, 8, 13, 5, 6, 3, 2, 1, 1, 2), (3, 4, 10, 10, 8, 5, 1, 2, 2, 1),
    (2, 6, 9, 9, 6, 3, 1, 1, 1, 6), (1, 3, 1000, 1, 2, 3, 1, 1, 1, 1), (1, 2, 33, 65, 3, 1, 1, 0, 1, 1)])
def test_a_window_operand_computes_its_column_index_parts_once_per_panel(n, c, h, w, k, r, stride, pad, dil, groups):
    """The packed product's window operand (a convolution's im2col view) has index atoms that
    depend on the output position alone (h = p // W, w = p % W): the pack computes them once per
    panel column instead of once per element; odd sizes, strides, dilations and groups still
    match the interpreter."""
    from backends.llvm import matmul
    from compiler import conv
    shapes = [(n, c, h, w), (k, c // groups, r, r)]
    g = saturn.trace(lambda x, wt: conv.conv2d(x, wt, stride=stride, padding=pad, dilation=dil, groups=groups),
                     *[saturn.spec(s) for s in shapes])
    program = BACKEND.lower(g)
    kernel = next((kk for kk in program.kernels if matmul.product_layout(kk, program) is not None), None)
    if groups < c:     # (a depthwise convolution is no packed product: its depth is one window)
        layout = matmul.product_layout(kernel, program)
        renderer = matmul.MatmulRenderer(None, program, kernel, BACKEND.default_schedule().default, layout)
        atoms = renderer._column_atoms()
        assert all(layout.j in atom_vars_of(a) and layout.r not in atom_vars_of(a) for a in atoms)
        if r > 1 and min(h, w) > 1:
            assert atoms, "a 2-D window's column index has a div/mod by the output width"
    x = _args(shapes, ["f32"] * 2)
    np.testing.assert_allclose(BACKEND.build(g)(*x)[0], evaluate(g, x)[0], rtol=1e-5, atol=1e-5)


def atom_vars_of(a):
    from ir.kernel import atom_vars
    return atom_vars(a)


def test_default_product_rows_per_block_waste_least():
    """With AVX-512 the default takes the row block (12, 8 or 6 rows) that computes the fewest
    rows, weighted by a row's cost under it: 12 unless it pads more rows than its speed per row
    makes up (64 rows: 72 computed under 12, 64 under 8), 6 where 8 and 12 pad more (1 row)."""
    from backends.llvm.matmul import tile_of
    from ir.kernel import KernelSchedule
    rows = {r: tile_of(KernelSchedule(vector_width=16), r)[0] for r in (64, 1024, 1000, 4097, 7, 33, 12, 1)}
    assert rows == {64: 8, 1024: 12, 1000: 12, 4097: 12, 7: 8, 33: 12, 12: 12, 1: 6}
    assert tile_of(KernelSchedule(vector_width=8), 64)[:2] == (6, 16)
    assert tile_of(KernelSchedule(vector_width=16, tile=(4, 3)), 64)[:2] == (4, 48)     # a schedule's tile wins
