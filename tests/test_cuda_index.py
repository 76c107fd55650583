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
    """conv2d's B operand (batch, k = (c, r, s), n = (h, w)) over a padded input: one division
    per index digit, all in 32 bits, no division of a whole sum."""
    from compiler import conv
    from compiler.trace import Spec, trace
    import backends.cuda as bc
    from backends.cuda.render import Schedule
    g = trace(lambda x, w: conv.conv2d(x, w, stride=1, padding=1), Spec((32, 64, 56, 56), "f16"),
              Spec((64, 64, 3, 3), "f16"))
    src, launches = bc.render(g, Schedule())
    # gathered in the product (no 9x im2col copy), a warp's loads along the image rows
    assert [l.kind for l in launches] == ["gemm_tc"] and "B gathered by columns" in launches[0].detail
    g2 = trace(lambda x, w: conv.conv2d(x, w, stride=2, padding=1), Spec((3, 16, 11, 11), "f16"),
               Spec((24, 16, 3, 3), "f16"))
    assert "by columns" not in bc.render(g2, Schedule())[1][0].detail   # stride 2: no neighbours
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


@pytest.mark.parametrize("n,c,hw,o,r,stride,dilation,pad", [
    (2, 16, 12, 24, 3, 1, 1, 1), (3, 16, 11, 24, 3, 2, 1, 1), (1, 8, 9, 16, 3, 1, 2, 2),
    (2, 24, 7, 17, 5, 1, 1, 2), (1, 8, 10, 16, (3, 1), 1, 1, (1, 0))])
def test_a_window_read_in_runs_reads_what_the_gather_reads(n, c, hw, o, r, stride, dilation, pad):
    """A convolution's window operand (reduced over (taps, channels)) read from a channels-last
    copy of the padded input: the copy's view reads every element the window reads, and the
    rendered offset function (ldb_runs) points at it, each k = 8q the start of 8 consecutive,
    16-byte aligned elements. The frontend's conv2d (channels, taps) keeps the gather."""
    from compiler.trace import Spec, trace
    from tests.window_programs import frontend_conv2d, taps_channels_conv2d
    from backends.cuda.plan import plan
    R = importlib.import_module("backends.cuda.render")   # (the package's render() shadows the module)
    kh, kw = (r, r) if isinstance(r, int) else r
    specs = Spec((n, c, hw, hw + 1), "f16"), Spec((o, c, kh, kw), "f16")
    g = trace(lambda x, w: frontend_conv2d(x, w, stride=stride, dilation=dilation, padding=pad), *specs)
    step = next(s for s in plan(g) if s.kind == "gemm")
    assert R._restage_window(step.gemm.b, R._params(step)[2], step.gemm.k_axis) is None
    g = trace(lambda x, w: taps_channels_conv2d(x, w, stride=stride, dilation=dilation, padding=pad), *specs)
    step = next(s for s in plan(g) if s.kind == "gemm")
    names = R._params(step)[2]
    got = R._restage_window(step.gemm.b, names, step.gemm.k_axis)
    assert got is not None
    copy, x, operand = got
    assert copy.shape[-1] == c and copy.numel < math.prod(step.gemm.b.shape) / 2   # channels last, not im2col
    xs = np.random.default_rng(0).standard_normal(x.shape).astype(np.float32)
    window = apply_tracker(R._read_tracker(step.gemm.b, names)[0], xs)
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
    K = sizes[step.gemm.k_axis]
    for bz, nn in itertools.product(range(math.prod(bsz)), range(0, math.prod(nsz), 5)):
        idx = [0] * len(sizes)
        for axes, v, sz in ((batch_axes, bz, bsz), (n_axes, nn, nsz)):
            for a, d in zip(axes, np.unravel_index(v, sz) if sz else ()):
                idx[a] = int(d)
        for k in range(K):
            idx[step.gemm.k_axis] = k
            at = c_eval(expr, {"bz": bz, "k": k, "n": nn})
            assert flat_y[at] == window[tuple(idx)], (bz, k, nn)
            if k % 8 == 0:
                assert at % 8 == 0 and c_eval(expr, {"bz": bz, "k": k + 7, "n": nn}) == at + 7


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


@pytest.mark.parametrize("chunk", range(4))
def test_fuzz_programs_rendered_for_cuda_run_on_the_host(chunk):
    """The fuzzer's programs (a fixed slice) whose CUDA kernels need no shared memory or warp
    instructions, under the template planner and the kernel-IR renderer, compiled for the host
    and run thread by thread, match the interpreter: the index arithmetic of every view chain
    the fuzzer draws, checked where no GPU is."""
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
        for run in (hostsim.run_templates, hostsim.run_kernel_ir):
            try:
                got = run(g, args)
            except ValueError as e:
                if "need a GPU" in str(e) or "cannot plan" in str(e):
                    continue   # tensor cores, shared memory, shuffles; or a program only the kernel IR plans
                raise
            except RuntimeError as e:
                if any(w in str(e) for w in ("shfl", "syncthreads", "__shared__")):
                    continue                   # warp / shared-memory kernels run only on a GPU
                raise
            ran += 1
            for a, b in zip(got, want):
                assert_close(a, b, scale=8.0, graph=g, args=args)
    assert ran >= 20
