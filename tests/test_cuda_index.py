"""The CUDA templates' index expressions (backends/cuda/cexpr.py on ir.kernel's Lin): for any
chain of movement ops, the C offset and validity tests rendered, evaluated with C's integer
semantics (division and remainder truncate toward zero), read the same elements as the
interpreter at every index of the view; and the folds that make a convolution's windows cheap
happen, in 32-bit arithmetic where the ranges allow."""
from __future__ import annotations

import ast
import importlib
import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from backends.cuda import cexpr
from backends.cuda.toolchain import find_nvcc
from ir.kernel import Var, as_lin, floordiv, mod
from ir.lower import to_multi
from ir.interpreter import apply_tracker
from tests.test_ir_view import SIZES, movement_chain, tracker_chain


def _cdiv(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _cmod(a: int, b: int) -> int:
    return a - b * _cdiv(a, b)


class _CSemantics(ast.NodeTransformer):
    def visit_BinOp(self, node):
        self.generic_visit(node)
        fn = {ast.Div: "_cdiv", ast.Mod: "_cmod"}.get(type(node.op))
        if fn is None:
            return node
        return ast.Call(ast.Name(fn, ast.Load()), [node.left, node.right], [])


def c_eval(expr: str, env: dict) -> int:
    """Evaluate a rendered C integer expression (casts, + - * / %, && , comparisons)."""
    py = expr.replace("(long long)", "").replace("(int)", "").replace("&&", " and ").replace("||", " or ")
    tree = ast.fix_missing_locations(_CSemantics().visit(ast.parse(py, mode="eval")))
    return eval(compile(tree, "<c>", "eval"), {"_cdiv": _cdiv, "_cmod": _cmod}, env)


def check_tracker(tracker, base_size: int) -> None:
    """Every index of the tracker: valid per the rendered tests exactly where the interpreter
    reads the source (the source holds 1.., the fill is 0), and then the same element."""
    names = tuple(f"i{a}" for a in range(len(tracker.shape)))
    off, tests = cexpr.apply_tracker(tracker, names)
    src = np.arange(1, 1 + base_size, dtype=np.float32)
    want = apply_tracker(tracker, src)
    for index in itertools.product(*(range(s) for s in tracker.shape)):
        env = dict(zip(names, index))
        valid = "false" not in tests and all(c_eval(t, env) for t in tests)
        assert valid == (want[index] != 0), (tracker, index, off, tests)
        if valid:
            o = c_eval(off, env)
            assert 0 <= o < base_size and src[o] == want[index], (tracker, index, off, tests)


shapes = st.lists(st.sampled_from(SIZES), min_size=1, max_size=3).map(tuple)


@settings(max_examples=150, deadline=None)
@given(st.data(), shapes)
def test_rendered_offsets_read_what_the_interpreter_reads(data, shape):
    ops = data.draw(movement_chain(shape))
    tracker = tracker_chain(shape, ops, 0.0)
    if math.prod(tracker.shape) <= 4000:
        check_tracker(tracker, math.prod(shape))


def test_a_convolution_window_folds_to_its_loop_indices():
    """conv2d's B operand (batch, k = (c, r, s), n = (h, w)) over a padded input, gathered
    (window="gather"): one division per index digit, all in 32 bits, no division of a whole
    sum."""
    from compiler import conv
    from compiler.trace import Spec, trace
    import backends.cuda as bc
    from backends.cuda.render import Schedule
    g = trace(lambda x, w: conv.conv2d(x, w, stride=1, padding=1), Spec((32, 64, 56, 56), "f16"),
              Spec((64, 64, 3, 3), "f16"))
    src, launches = bc.render(g, Schedule(window="gather"))
    # gathered in the product (no 9x im2col copy), a warp's loads along the image rows
    assert [l.kind for l in launches] == ["gemm_tc"] and "B gathered by columns" in launches[0].detail
    g2 = trace(lambda x, w: conv.conv2d(x, w, stride=2, padding=1), Spec((3, 16, 11, 11), "f16"),
               Spec((24, 16, 3, 3), "f16"))
    assert "by columns" not in bc.render(g2, Schedule(window="gather"))[1][0].detail   # stride 2: no neighbours
    loader = src[src.index("DEV float ldb_"):]
    loader = loader[:loader.index("}")]
    assert "(int)k / 9" in loader and "(int)n / 56" in loader and "(int)n % 56" in loader
    assert "k * 3136" not in loader and "long long)" not in loader.split("{", 1)[1]


def test_a_window_over_taps_then_channels_is_read_in_runs():
    """A convolution reducing over (taps, channels): by default its window is read in 16-byte
    runs from a channels-last copy of the padded input (no 9x im2col copy), by the mma.sync and
    the wgmma products; under window="gather" element by element."""
    from compiler.trace import Spec, trace
    import backends.cuda as bc
    from backends.cuda.render import Schedule
    from tests.window_programs import taps_channels_conv2d
    g = trace(lambda x, w: taps_channels_conv2d(x, w, padding=1), Spec((32, 64, 56, 56), "f16"),
              Spec((64, 64, 3, 3), "f16"))
    src, launches = bc.render(g, Schedule())
    assert [l.kind for l in launches] == ["elementwise", "stage", "gemm_tc"]   # the weight copy, the image's
    assert "B in 16-byte runs" in launches[2].detail and "staged" not in launches[2].detail
    assert launches[1].output.shape == (32, 58, 58, 64)
    assert "ldb_runs_k1_gemm(long long bz, int k, int n) { return (((int)k / 192) * 3712" in src
    src_wg, launches = bc.render(g, Schedule(gemm="wgmma", arch="sm_90"))
    assert launches[-1].kind == "gemm_wgmma" and "16-byte runs" in launches[-1].detail
    assert "Bb + ldb_runs_" in src_wg
    src, launches = bc.render(g, Schedule(window="gather"))
    assert [l.kind for l in launches] == ["elementwise", "gemm_tc"] and "B gathered by columns" in launches[1].detail


# (n, c, hw, o, r, stride, dilation, pad): the input is (n, c, hw, hw + 1), odd sizes among them
RUNS_CASES = [(2, 16, 12, 24, 3, 1, 1, 1), (3, 16, 11, 24, 3, 2, 1, 1), (1, 8, 9, 16, 3, 1, 2, 2),
              (2, 24, 7, 17, 5, 1, 1, 2), (1, 8, 10, 16, (3, 1), 1, 1, (1, 0))]
# channels not a multiple of 8, read in runs with the reduction's channel digit zero-padded to one
PADDED_CASES = [(2, 63, 9, 24, 3, 2, 1, 1), (2, 12, 11, 17, 3, 2, 1, 1), (1, 13, 9, 16, (3, 1), 1, 2, (2, 0))]


def _padded(c: int) -> int:
    return c + (-c) % 8


def _conv_product(form: str, case, dtype: str = "f16"):
    """(graph, the product's step as planned, as rendered on CUDA, its buffer names) for a
    convolution written as `form`: "frontend" (conv2d, reduced over (channels, taps), which the
    backend reorders) or "taps_channels" (tests/window_programs.py)."""
    from compiler.trace import Spec, trace
    from tests.window_programs import frontend_conv2d, taps_channels_conv2d
    from backends.cuda.plan import plan
    R = importlib.import_module("backends.cuda.render")   # (the package's render() shadows the module)
    n, c, hw, o, r, stride, dilation, pad = case
    kh, kw = (r, r) if isinstance(r, int) else r
    fn = frontend_conv2d if form == "frontend" else taps_channels_conv2d
    g = trace(lambda x, w: fn(x, w, stride=stride, dilation=dilation, padding=pad),
              Spec((n, c, hw, hw + 1), dtype), Spec((o, c, kh, kw), dtype))
    planned = next(s for s in plan(g) if s.kind == "gemm")
    names = R._params(planned)[2]
    return g, planned, R._reduction_for_runs(planned, names), names


def _taps_channels(a: np.ndarray, k_axis: int, c: int, taps: int, padded: int | None = None,
                   reorder: bool = True) -> np.ndarray:
    """An operand over k = (channel, tap) re-indexed over k = (tap, channel) (one already over
    (tap, channel): reorder=False), its channels zero-padded to `padded`."""
    shape = a.shape
    split = a.reshape(shape[:k_axis] + ((c, taps) if reorder else (taps, c)) + shape[k_axis + 1:])
    if reorder:
        split = np.swapaxes(split, k_axis, k_axis + 1)
    pads = [(0, 0)] * split.ndim
    pads[k_axis + 1] = (0, (padded or c) - c)
    return np.pad(split, pads).reshape(shape[:k_axis] + (taps * (padded or c),) + shape[k_axis + 1:])


@pytest.mark.parametrize("form", ["taps_channels", "frontend"])
@pytest.mark.parametrize("case", RUNS_CASES + PADDED_CASES)
def test_a_window_read_in_runs_reads_what_the_gather_reads(form, case):
    """A convolution's window operand read in runs of a channels-last copy of the padded input:
    the copy's view reads every element the window reads, and the rendered offset function
    (ldb_runs) points at it, each k = 8q the start of 8 consecutive, 16-byte aligned elements.
    The frontend's conv2d reduces over (channels, taps), whose window no copy reads in runs:
    the backend reads both operands over (taps, channels) instead, and that window is the
    original one with its k permuted so (numpy). Channels not a multiple of 8 are zero-padded
    to one, in the copy and in the reduction, in either form: the window reads zeros there."""
    R = importlib.import_module("backends.cuda.render")
    c = case[1]
    cp = _padded(c)
    _, planned, step, names = _conv_product(form, case)
    k_axis = step.gemm.k_axis
    K = step.gemm.mul.shape[k_axis]
    assert K == planned.gemm.mul.shape[k_axis] // c * cp
    if form == "frontend" or cp != c:
        assert R._restage_window(planned.gemm.b, names, k_axis) is None and step is not planned
    else:
        assert step is planned         # already in that order: nothing to reorder
    got = R._restage_window(step.gemm.b, names, k_axis)
    assert got is not None
    copy, x, operand = got
    assert copy.shape[-1] == cp and copy.numel < math.prod(step.gemm.b.shape) / 2   # channels last, not im2col
    xs = np.random.default_rng(0).standard_normal(x.shape).astype(np.float32)
    window = apply_tracker(R._read_tracker(step.gemm.b, names)[0], xs)
    if step is not planned:
        original = apply_tracker(R._read_tracker(planned.gemm.b, names)[0], xs)
        np.testing.assert_array_equal(window, _taps_channels(original, k_axis, c, K // cp, cp, form == "frontend"))
    y = apply_tracker(copy.srcs[0].arg, xs)
    np.testing.assert_array_equal(apply_tracker(operand.arg, y), window)
    staged = {"b_runs": operand}
    groups = R.tc_plan(step, names, staged)[0][-1]
    fn = R._runs_offset("k0", step, operand, groups)
    expr = fn[fn.index("return ") + 7:fn.rindex(";")]
    sizes = step.gemm.mul.shape
    batch_axes, _, n_axes = groups
    bsz = [sizes[a] for a in batch_axes]
    nsz = [sizes[a] for a in n_axes]
    flat_y = y.reshape(-1)
    for bz, nn in itertools.product(range(math.prod(bsz)), range(0, math.prod(nsz), 5)):
        idx = [0] * len(sizes)
        for axes, v, sz in ((batch_axes, bz, bsz), (n_axes, nn, nsz)):
            for a, d in zip(axes, np.unravel_index(v, sz) if sz else ()):
                idx[a] = int(d)
        for k in range(K):
            idx[k_axis] = k
            at = c_eval(expr, {"bz": bz, "k": k, "n": nn})
            assert flat_y[at] == window[tuple(idx)], (bz, k, nn)
            if k % 8 == 0:
                assert at % 8 == 0 and c_eval(expr, {"bz": bz, "k": k + 7, "n": nn}) == at + 7


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("case", RUNS_CASES + PADDED_CASES)
def test_the_frontend_convolution_reordered_runs_on_the_host(case, dtype):
    """The frontend's conv2d as the CUDA product reads it: its two copy kernels (the weight
    staged over (taps, channels), the padded input channels-last) and the runs offset function
    (ldb_runs, tabulated by a kernel of its own at every (batch, k, n)), compiled for the host
    and run thread by thread. The staged weight is the weight permuted so, exactly; the window
    read at those offsets is the original window permuted the same way, exactly; and the
    product of the two is the interpreter's convolution. Channels not a multiple of 8 are
    zero-padded to one in both (k grows): the weight and the window are zero there."""
    from backends.cuda import hostsim
    from backends.cuda.plan import plan
    from ir.interpreter import evaluate_nodes
    from tests.test_cuda_render import host_inputs
    R = importlib.import_module("backends.cuda.render")
    if hostsim.available():
        pytest.skip(hostsim.available())
    c, o = case[1], case[3]
    cp = _padded(c)
    g, planned, step, names = _conv_product("frontend", case, dtype)
    assert step is not planned
    M = {s.output for s in plan(g)}
    staged, extra, srcs, launches = R.stage_operands("k0", step, names, M, R.Schedule())
    assert [l.name for l in launches] == ["k0_stage_a", "k0_stage_b_runs"] and set(staged) == {"a", "b_runs"}
    names = R._params(step, extra)[2]
    groups = R.tc_plan(step, names, staged)[0][-1]
    g_ = step.gemm
    sizes, k_axis = g_.mul.shape, g_.k_axis
    batch_axes, m_axes, n_axes = groups
    nb, K, N = (math.prod(sizes[a] for a in batch_axes), sizes[k_axis], math.prod(sizes[a] for a in n_axes))
    table = f"""
extern "C" __global__ void runs_table(long long* __restrict__ out) {{
  const long long t = (long long)blockIdx.x * 64 + threadIdx.x;
  if (t >= {nb * K * N}LL) return;
  out[t] = ldb_runs_k0(t / {K * N}LL, (int)(t / {N}LL % {K}), (int)(t % {N}LL));
}}"""
    source = "\n".join(srcs + [R._runs_offset("k0", step, staged["b_runs"], groups), table])
    blocks = -(-nb * K * N // 64)
    run = hostsim.build(source, [(l.name, 2, l.grid[0], l.block[0]) for l in launches] + [("runs_table", 1, blocks, 64)])
    args = host_inputs(g, 3)
    weight, image = (args[g.inputs.index(l.inputs[0])] for l in launches)
    copies = []
    for l, src in zip(launches, (weight, image)):
        out = np.zeros(l.output.numel, l.output.dtype.np)
        run(l.name, [out, np.ascontiguousarray(src)])
        copies.append(out)
    offsets = np.zeros(nb * K * N, np.int64)
    run("runs_table", [offsets])
    # the staged weight, read as the product reads it: the weight over (taps, channels)
    acc_a = staged["a"]
    kh, kw = weight.shape[2:]
    a = copies[0][acc_a.offset + acc_a.strides[m_axes[0]] * np.arange(o)[:, None]
                  + acc_a.strides[k_axis] * np.arange(K)[None, :]]
    assert K == kh * kw * cp
    np.testing.assert_array_equal(a, np.pad(weight.transpose(0, 2, 3, 1), [(0, 0)] * 3 + [(0, cp - c)]).reshape(o, K))
    # the window at the offsets: the original window (as gathered) with k over (taps, channels)
    b = copies[1][offsets].reshape(nb, K, N)
    original = evaluate_nodes([planned.gemm.b], {x: v for x, v in zip(g.inputs, args)})[0]
    original = original.take(0, axis=m_axes[0]).reshape(nb, K // cp * c, N)      # (B is constant along m)
    np.testing.assert_array_equal(b.astype(np.float32), _taps_channels(original, 1, c, kh * kw, cp).astype(np.float32))
    product = np.einsum("mk,bkn->bmn", a.astype(np.float64), b.astype(np.float64))
    want = evaluate_nodes([planned.gemm.reduce], {x: v for x, v in zip(g.inputs, args)})[0]
    np.testing.assert_allclose(product.reshape(want.shape), want.astype(np.float64), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_the_frontend_convolution_is_read_in_runs_where_channels_allow(dtype):
    """The frontend's conv2d on CUDA under the default schedule: with channels a multiple of 8,
    or more than 8 of them zero-padded to one at a cost of at most a third more reduction (12
    channels to 16, 63 to 64), its window is read in 16-byte runs (the weight staged over
    (taps, channels)) by the mma.sync and the wgmma products; with fewer channels (4, 6) or
    more zeros (9), and under window="gather", it is gathered (by the mma.sync product) as
    planned."""
    from compiler import conv
    from compiler.trace import Spec, trace
    import backends.cuda as bc
    from backends.cuda.render import Schedule
    cases = [(16, (3, 3), dict(padding=1)), (16, (3, 3), dict(stride=2, padding=1)),
             (16, (3, 3), dict(dilation=2, padding=2)), (64, (5, 5), dict(padding=2)), (8, (3, 1), dict(padding=(1, 0))),
             (24, (3, 3), dict()), (12, (3, 3), dict(padding=1)), (63, (3, 3), dict(stride=2, padding=1)),
             (6, (3, 3), dict(dilation=2, padding=2)), (4, (5, 5), dict(padding=2)), (9, (3, 3), dict(padding=1))]
    for c, kernel, kw in cases:
        g = trace(lambda x, w: conv.conv2d(x, w, **kw), Spec((2, c, 13, 14), dtype), Spec((24, c) + kernel, dtype))
        runs = c not in (4, 6, 9)
        for sched in (Schedule(), Schedule(gemm="wgmma", arch="sm_90")):
            launches = bc.render(g, sched)[1]
            product = launches[-1]
            if runs:
                assert product.kind == ("gemm_tc" if sched.gemm == "auto" else "gemm_wgmma"), (c, kernel, kw)
                assert "16-byte runs" in product.detail, (c, kernel, kw, product.detail)
                assert f"K={math.prod(kernel) * _padded(c)} " in product.detail, (c, product.detail)
                assert [l.detail.split(" ")[0] for l in launches[:-1]] == ["A", "B_RUNS"]
                assert launches[1].output.shape[-1] == _padded(c)       # the input channels-last, padded
            else:       # (the wgmma product gathers nothing: mma.sync's does)
                assert product.kind == "gemm_tc" and "B gathered" in product.detail, product.detail
                assert not any(l.detail.startswith("B_RUNS") for l in launches)
        gathered = bc.render(g, Schedule(window="gather"))[1]
        assert gathered[-1].kind == "gemm_tc" and "B gathered" in gathered[-1].detail
        assert not any(l.detail.startswith("B_RUNS") for l in gathered)


@pytest.mark.parametrize("name", ["conv1d", "grouped conv2d", "conv3d", "conv2d + relu", "conv1d, 63 channels",
                                  "conv3d, 12 channels", "conv2d + relu, 13 channels"])
def test_other_convolutions_reordered_compute_the_planned_product(name):
    """The reordering is not conv2d's alone: a 1-d, a grouped and a 3-d convolution, and one
    with an epilogue, reach the runs path too, with their channels zero-padded to a multiple of
    8 where they are not one, and the reordered operands' product (the interpreter's sum over
    the new reduction order) is the planned one."""
    from compiler import conv
    from compiler.trace import Spec, trace
    from backends.cuda.plan import plan
    import backends.cuda as bc
    from ir import node as N
    from ir.interpreter import evaluate_nodes
    from ir.ops import Op
    R = importlib.import_module("backends.cuda.render")
    fn, xs, ws = {
        "conv1d": (lambda x, w: conv.conv1d(x, w, padding=1), (2, 16, 30), (24, 16, 3)),
        "grouped conv2d": (lambda x, w: conv.conv2d(x, w, padding=1, groups=2), (2, 32, 9, 10), (48, 16, 3, 3)),
        "conv3d": (lambda x, w: conv.conv3d(x, w, padding=1), (2, 16, 5, 6, 7), (24, 16, 3, 3, 3)),
        "conv2d + relu": (lambda x, w: conv.conv2d(x, w, padding=1).relu(), (2, 16, 9, 10), (24, 16, 3, 3)),
        "conv1d, 63 channels": (lambda x, w: conv.conv1d(x, w, padding=1), (2, 63, 30), (24, 63, 3)),
        "conv3d, 12 channels": (lambda x, w: conv.conv3d(x, w, padding=1), (2, 12, 5, 6, 7), (24, 12, 3, 3, 3)),
        "conv2d + relu, 13 channels": (lambda x, w: conv.conv2d(x, w, padding=1).relu(), (2, 13, 9, 10),
                                       (24, 13, 3, 3))}[name]
    g = trace(fn, Spec(xs, "f16"), Spec(ws, "f16"))
    assert any("16-byte runs" in l.detail for l in bc.render(g)[1])
    step = next(s for s in plan(g) if s.kind == "gemm")
    reordered = R._reduction_for_runs(step, R._params(step)[2])
    assert reordered is not step
    rng = np.random.default_rng(0)
    env = {x: rng.standard_normal(x.shape).astype(np.float16) for x in g.inputs}
    got = N.reduce(Op.SUM, reordered.gemm.mul, (reordered.gemm.k_axis,))
    want, got = evaluate_nodes([step.gemm.reduce, got], env)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found")
def test_the_frontend_convolutions_read_in_runs_compile_without_spills():
    """The frontend's conv2d read in runs, under the mma.sync and (sm_90a) the wgmma products,
    compiles with nvcc and spills no registers, its channels zero-padded to a multiple of 8
    or not."""
    from compiler import conv
    from compiler.trace import Spec, trace
    import backends.cuda as bc
    from backends.cuda.render import Schedule
    from backends.cuda.toolchain import ARCH_SPECIFIC_MARKER, compile_source, parse_resources
    programs = [(dict(padding=1), (32, 64, 56, 56), (64, 64, 3, 3)),
                (dict(stride=2, padding=1), (3, 16, 11, 12), (24, 16, 3, 3)),
                (dict(dilation=2, padding=2), (1, 8, 9, 10), (16, 8, 3, 3)),
                (dict(padding=2), (2, 24, 7, 8), (17, 24, 5, 5)),
                (dict(padding=(1, 0)), (1, 8, 10, 11), (16, 8, 3, 1)),
                (dict(padding=1), (31, 63, 55, 55), (65, 63, 3, 3)),    # the odd benchmark conv: 63 channels to 64
                (dict(padding=1), (2, 12, 13, 14), (24, 12, 3, 3))]               # ... and to 16
    for sched in (Schedule(), Schedule(gemm="wgmma", arch="sm_90")):
        parts = []
        for i, (kw, xs, ws) in enumerate(programs):
            dtype = "bf16" if i % 2 else "f16"
            g = trace(lambda x, w: conv.conv2d(x, w, **kw), Spec(xs, dtype), Spec(ws, dtype))
            src, launches = bc.render(g, sched, prefix=f"c{i}_", prelude=(i == 0))
            assert "16-byte runs" in launches[-1].detail
            assert launches[-1].kind == ("gemm_wgmma" if sched.gemm == "wgmma" else "gemm_tc")
            parts.append(src)
        source = "\n".join(parts)
        assert (ARCH_SPECIFIC_MARKER in source) == (sched.gemm == "wgmma")     # then built for sm_90a
        res = compile_source(source, "sm_90")
        assert res.error is None, res.log[-3000:]
        resources = parse_resources(res.log)
        assert {f"c{i}_k0_gemm" for i in range(len(programs))} <= set(resources)
        for kernel, rr in resources.items():
            assert rr.get("spill_stores", 0) == 0 and rr.get("spill_loads", 0) == 0, (kernel, rr)


def test_folds():
    k, n = as_lin(Var("k", 576)), as_lin(Var("n", 3136))
    flat = k * 3136 + n
    assert cexpr.c_index(floordiv(flat, 3136)) == "k"
    assert cexpr.c_index(floordiv(flat, 9408)) == "((int)k / 3)"
    assert cexpr.c_index(to_multi((64, 3, 3, 56, 56), ("flat", flat))[3]) == "((int)n / 56)"
    # rests that may be negative: C's truncating operators still give the floor everywhere
    w = as_lin(Var("w", 56)) + (-1)
    for e, d in (((w + k * 56), 56), ((w + k * 56), 7), ((w * -1 + k * 3), 6), ((w * 5 + n), 112)):
        q, r = cexpr.c_index(floordiv(e, d)), cexpr.c_index(mod(e, d))
        for kv, wv, nv in itertools.product(range(0, 576, 97), range(56), range(0, 3136, 311)):
            env = {"k": kv, "w": wv, "n": nv}
            total = c_eval(cexpr.c_index(e), env)
            assert (c_eval(q, env), c_eval(r, env)) == divmod(total, d), (e, d, env, q, r)
    # 64 bits where a partial sum may pass 2^31
    big = as_lin(Var("b", 1 << 20)) * 4096 + n
    assert "(long long)b" in cexpr.c_index(big)
    assert cexpr.c_index(n * 2) == "n * 2"


@pytest.mark.parametrize("chunk", [0] + [pytest.param(c, marks=pytest.mark.slow) for c in (1, 2, 3)])
def test_fuzz_programs_rendered_for_cuda_run_on_the_host(chunk):
    """The fuzzer's programs (a fixed slice) whose CUDA kernels have no inline PTX, under the
    template planner and the kernel-IR renderer (a thread per row, and 64 threads sharing a
    row through shuffles and barriers), compiled for the host and run (hostsim's fibers where
    they sync), match the interpreter: the index arithmetic of every view chain the fuzzer
    draws and the reductions' thread splits, checked where no GPU is."""
    from backends.cuda import hostsim
    from compiler import fuzz
    import compiler as saturn
    from ir.interpreter import evaluate
    from tests.tolerances import assert_close
    if hostsim.available():
        pytest.skip(hostsim.available())
    ran = 0
    for seed in range(chunk * 25, chunk * 25 + 25):
        prog = fuzz.random_program(seed)
        g = saturn.trace(fuzz.saturn_fn(prog), *[saturn.spec(s, d) for s, d in prog.inputs])
        args = fuzz.inputs_for(prog)
        want = evaluate(g, args)
        for run in (hostsim.run_templates, hostsim.run_kernel_ir,
                    lambda gr, a: hostsim.run_kernel_ir(gr, a, row_threads=64)):
            try:
                got = run(g, args)
            except ValueError as e:
                if "need a GPU" in str(e) or "cannot plan" in str(e):
                    continue   # tensor cores (inline PTX); or a program only the kernel IR plans
                raise
            ran += 1
            for a, b in zip(got, want):
                assert_close(a, b, scale=8.0, graph=g, args=args)
    assert ran >= 60
