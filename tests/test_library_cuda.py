"""cuBLAS products on CUDA (backends/cuda/cublas.py). On the host: the transpose identity's
call arguments against a column-major emulation of cuBLAS, which plan steps become cuBLAS
launches, and when the schedule is offered. Marked gpu: every dtype, odd shapes, batched and
transposed operands against the interpreter, and the search choosing cuBLAS."""
from __future__ import annotations

import math

import numpy as np
import pytest

import compiler as saturn
from backends.cuda import cublas, render
from backends.cuda.render import Schedule
from ir.interpreter import evaluate
from tests.tolerances import assert_close

CUBLAS = Schedule(gemm="cublas", name="cublas")


def _layout(rng, rows, cols, order, pad):
    """A rows x cols matrix stored C- or F-ordered with `pad` extra elements per line."""
    x = rng.standard_normal((rows, cols))
    if order == "C":
        ld = cols + pad
        flat = np.zeros(max(rows * ld, 1))
        np.lib.stride_tricks.as_strided(flat, (rows, cols), (ld * 8, 8))[...] = x
        return x, flat, (ld, 1)
    ld = rows + pad
    flat = np.zeros(max(cols * ld, 1))
    np.lib.stride_tricks.as_strided(flat, (rows, cols), (8, ld * 8))[...] = x
    return x, flat, (1, ld)


@pytest.mark.parametrize("m,n,k", [(5, 7, 3), (1, 9, 4), (6, 1, 5), (4, 5, 1), (1, 1, 7)])
@pytest.mark.parametrize("a_order", ["C", "F"])
@pytest.mark.parametrize("b_order", ["C", "F"])
@pytest.mark.parametrize("pad", [0, 3])
def test_transpose_identity(m, n, k, a_order, b_order, pad):
    rng = np.random.default_rng(m * 100 + n * 10 + k)
    a, fa, sa = _layout(rng, m, k, a_order, pad)
    b, fb, sb = _layout(rng, k, n, b_order, pad)
    ldc = n + pad
    g = cublas.gemm_args(m, n, k, sa, sb, (ldc, 1))
    assert g is not None
    assert (g.m, g.n, g.k) == (n, m, k)
    c = cublas.emulate(g, fb, fa, alpha=0.5)          # cuBLAS's A is our B, its B our A
    got = np.lib.stride_tricks.as_strided(c, (m, n), (g.ldc * 8, 8))
    np.testing.assert_allclose(got, 0.5 * a @ b, rtol=1e-12, atol=1e-12)


def test_no_unit_stride_is_refused():
    assert cublas.gemm_args(4, 5, 6, (12, 2), (5, 1), (5, 1)) is None     # A strided both ways
    assert cublas.gemm_args(4, 5, 6, (6, 1), (5, 1), (1, 4)) is None      # C column-major


def _steps(fn, *specs):
    from backends.cuda.plan import plan
    return plan(saturn.trace(fn, *specs))


def _kinds(fn, *specs, schedule=CUBLAS):
    _, launches = render(saturn.trace(fn, *specs), schedule)
    return [l.kind for l in launches], launches


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_plain_products_become_cublas_launches(dtype):
    kinds, launches = _kinds(lambda a, b: a @ b, saturn.spec((64, 32), dtype), saturn.spec((32, 48), dtype))
    assert kinds == ["cublas"]
    call = launches[0].library
    assert call.types[0].value == dtype and (call.args.m, call.args.n, call.args.k) == (48, 64, 32)
    assert kinds == ["cublas"] and "cublasGemmStridedBatchedEx" in launches[0].detail


def test_transposed_batched_and_scaled_operands():
    _, ls = _kinds(lambda a, b: a.transpose(-1, -2) @ b, saturn.spec((32, 64), "f16"), saturn.spec((32, 48), "f16"))
    assert ls[0].kind == "cublas" and ls[0].library.args.transb == cublas.OP_T
    _, ls = _kinds(lambda a, b: a @ b.transpose(-1, -2), saturn.spec((64, 32)), saturn.spec((48, 32)))
    assert ls[0].kind == "cublas" and ls[0].library.args.transa == cublas.OP_T
    _, ls = _kinds(lambda a, b: a @ b, saturn.spec((3, 64, 32), "f16"), saturn.spec((32, 48), "f16"))
    c = ls[0].library
    assert ls[0].kind == "cublas" and (c.batch * len(c.outer) == 3 or c.args.n == 3 * 64)
    _, ls = _kinds(lambda a, b: (a @ b) * 0.25, saturn.spec((64, 32)), saturn.spec((32, 48)))
    assert ls[0].kind == "cublas" and ls[0].library.alpha == 0.25


def test_epilogue_products_run_as_cublas_then_an_epilogue_kernel():
    kinds, _ = _kinds(lambda x, w, b: (x @ w + b).relu(), saturn.spec((64, 32), "f16"), saturn.spec((32, 48), "f16"),
                      saturn.spec((48,), "f16"))
    assert kinds == ["cublas", "elementwise"]


def test_offered_only_where_found(monkeypatch):
    from backends.cuda import CUDABackend
    g = saturn.trace(lambda a, b: a @ b, saturn.spec((64, 32)), saturn.spec((32, 48)))
    monkeypatch.setitem(cublas._STATE, "result", (None, "libcublas not found (tried nothing)"))
    assert "cublas" not in [s.name for s in CUDABackend().schedules(g)]
    monkeypatch.setitem(cublas._STATE, "result", (object(), "/somewhere/libcublas.so"))
    assert [s.name for s in CUDABackend().schedules(g)][1] == "cublas"
    soft = saturn.trace(lambda x: x.softmax(-1), saturn.spec((8, 16)))
    assert "cublas" not in [s.name for s in CUDABackend().schedules(soft)]


# --- on the GPU -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def backend():
    from backends.cuda import CUDABackend
    be = CUDABackend()
    reason = be.unavailable_reason() or cublas.unavailable_reason()
    if reason:
        pytest.skip(reason)
    return be


def _run(be, fn, specs, seed=0):
    g = saturn.trace(fn, *specs)
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal(s.shape).astype(s.dtype.np) for s in specs]
    exe = be.build(g, CUBLAS)
    return g, args, exe, exe(*args)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("m,k,n", [(1, 7, 1000), (7, 1000, 1), (1000, 4097, 7), (4097, 7, 1000), (33, 1000, 4097)])  # the interpreter materializes m*k*n
def test_gpu_cublas_matches_the_interpreter(backend, dtype, m, k, n):
    g, args, exe, outs = _run(backend, lambda a, b: a @ b, [saturn.spec((m, k), dtype), saturn.spec((k, n), dtype)])
    assert any(l.kind == "cublas" for l in exe.launches), exe.explain()
    assert_close(outs[0], evaluate(g, args)[0], scale=8.0, graph=g, args=args)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_gpu_cublas_batched_transposed_scaled(backend, dtype):
    cases = [
        (lambda a, b: a @ b, [(4, 33, 65), (4, 65, 17)]),
        (lambda a, b: a @ b, [(2, 3, 33, 65), (65, 17)]),                          # weights broadcast
        (lambda a, b: a.transpose(-1, -2) @ b, [(3, 65, 33), (3, 65, 17)]),
        (lambda a, b: a @ b.transpose(-1, -2), [(3, 33, 65), (3, 17, 65)]),
        (lambda a, b: (a.transpose(0, 1) @ b) * 0.125, [(33, 4, 65), (4, 65, 17)]),  # batch-major view, alpha
    ]
    for fn, shapes in cases:
        g, args, exe, outs = _run(backend, fn, [saturn.spec(s, dtype) for s in shapes])
        assert any(l.kind == "cublas" for l in exe.launches), exe.explain()
        assert_close(outs[0], evaluate(g, args)[0], scale=8.0, graph=g, args=args)


@pytest.mark.gpu
def test_gpu_cublas_f32_is_not_tf32(backend):
    # 1 + 2^-12 is exact in f32 but not in TF32 (10 mantissa bits)
    a = np.full((256, 256), 1 + 2.0 ** -12, np.float32)
    b = np.eye(256, dtype=np.float32)
    g = saturn.trace(lambda x, y: x @ y, saturn.spec(a.shape), saturn.spec(b.shape))
    np.testing.assert_array_equal(backend.build(g, CUBLAS)(a, b)[0], a)


@pytest.mark.gpu
def test_gpu_search_picks_cublas(backend, tmp_path):
    # f32 4096^3: the generated SIMT product runs at ~62% of cuBLAS
    specs = (saturn.spec((4096, 4096)), saturn.spec((4096, 4096)))
    f = saturn.compile(lambda a, b: a @ b, *specs, target="cuda", budget=30, quiet=True, cache=str(tmp_path))
    tried: dict[str, set] = {}     # (several programs may run under each schedule)
    for t in f.result.trials:
        tried.setdefault(t.schedule_text, set()).add(t.status)
    assert tried.get("cublas", set()) & {"verified", "timed", "chosen"}, tried
    assert f.result.winner.schedule_text == "cublas", f.explain()[:3000]
    assert "cublas" in f.executable.explain()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_gpu_staged_products_match_the_interpreter(backend, dtype):
    """Half products cuBLAS would read unaligned or cannot read run staged into zero-padded
    buffers (render._cublas_staged): odd sizes with an epilogue, a permuted operand (an attention
    output merged back into rows), shared weights, an odd k only."""
    cases = [
        (lambda x, w, b: (x @ w + b).gelu(), [(333, 1001), (1001, 257), (257,)]),
        (lambda x, w: x.permute(1, 0, 2).reshape(128, 512) @ w, [(8, 128, 64), (512, 96)]),
        (lambda a, b, r: a @ b + r, [(3, 65, 129), (129, 47), (3, 65, 47)]),
        (lambda a, b: a @ b, [(64, 1023), (1023, 64)]),
    ]
    for fn, shapes in cases:
        g, args, exe, outs = _run(backend, fn, [saturn.spec(s, dtype) for s in shapes])
        kinds = [l.kind for l in exe.launches]
        assert "cublas" in kinds and "stage" in kinds, exe.explain()
        assert_close(outs[0], evaluate(g, args)[0], scale=8.0, graph=g, args=args)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_gpu_convolutions_under_cublas_match_the_interpreter(backend, dtype):
    """Convolutions under the cuBLAS schedule: one strided-batched call over the images (the
    weights with batch stride 0), its im2col windows staged, or a 1x1 input read in place."""
    from compiler import conv
    cases = [
        (lambda x, w: conv.conv2d(x, w, padding=1), [(4, 16, 14, 14), (32, 16, 3, 3)]),
        (lambda x, w: conv.conv2d(x, w), [(2, 64, 8, 8), (32, 64, 1, 1)]),
        (lambda x, w: conv.conv2d(x, w, stride=2, padding=1), [(3, 7, 11, 11), (5, 7, 3, 3)]),
    ]
    for fn, shapes in cases:
        g, args, exe, outs = _run(backend, fn, [saturn.spec(s, dtype) for s in shapes])
        assert "cublas" in [l.kind for l in exe.launches], exe.explain()
        assert_close(outs[0], evaluate(g, args)[0], scale=8.0, graph=g, args=args)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_gpu_generated_convolutions_gather_their_windows(backend, dtype):
    """Convolutions as generated tensor-core products: the im2col windows are never copied
    whole. With the channels a multiple of 8, or zero-padded to one at a cost of at most a
    third more reduction (63 to 64, 12 to 16, in the copy and the reduction alike), they are
    read by default in 16-byte runs from a channels-last copy of the padded input: the
    frontend's conv2d (reduced over (channels, taps)) with its reduction reordered to (taps,
    channels) by the backend, the weight staged in that order, and a convolution written over
    (taps, channels) as it is. Fewer channels (9), and any window under window="gather", are
    gathered in the product (by columns, prefetched into registers). Under the default tile,
    the prior's and (on sm_90) the wgmma product; odd sizes, stride 2, dilation 2, 5x5 and 3x1
    filters, and a 64-channel layer whose tile has 64 rows."""
    from compiler import conv
    from backends.cuda.render import Schedule
    from tests.window_programs import taps_channels_conv2d as tc
    cases = [
        (lambda x, w: conv.conv2d(x, w, padding=1), [(4, 16, 14, 14), (32, 16, 3, 3)], True),
        (lambda x, w: conv.conv2d(x, w, padding=1), [(3, 63, 13, 13), (65, 63, 3, 3)], True),
        (lambda x, w: conv.conv2d(x, w, stride=2, padding=1), [(3, 16, 11, 11), (24, 16, 3, 3)], True),
        (lambda x, w: conv.conv2d(x, w, padding=1), [(2, 64, 28, 28), (64, 64, 3, 3)], True),
        (lambda x, w: conv.conv2d(x, w, padding=2, dilation=2), [(2, 24, 9, 10), (17, 24, 5, 3)], True),
        (lambda x, w: conv.conv2d(x, w, padding=2), [(2, 8, 13, 15), (24, 8, 5, 5)], True),
        (lambda x, w: conv.conv2d(x, w, padding=(1, 0)), [(2, 16, 10, 11), (24, 16, 3, 1)], True),
        (lambda x, w: conv.conv2d(x, w, padding=1), [(2, 12, 14, 14), (32, 12, 3, 3)], True),
        (lambda x, w: conv.conv2d(x, w, stride=2, padding=1), [(3, 13, 11, 12), (24, 13, 3, 3)], True),
        (lambda x, w: conv.conv2d(x, w, padding=1), [(2, 9, 14, 14), (32, 9, 3, 3)], False),
        # written over (taps, channels)
        (lambda x, w: tc(x, w, padding=1), [(4, 16, 14, 14), (32, 16, 3, 3)], True),
        (lambda x, w: tc(x, w, padding=1), [(3, 63, 13, 13), (65, 63, 3, 3)], True),
        (lambda x, w: tc(x, w, stride=2, padding=1), [(3, 16, 11, 11), (24, 16, 3, 3)], True),
        (lambda x, w: tc(x, w, padding=1), [(2, 64, 28, 28), (64, 64, 3, 3)], True),
        (lambda x, w: tc(x, w, padding=2, dilation=2), [(2, 24, 9, 10), (17, 24, 5, 3)], True),
    ]
    scheds = [Schedule(), Schedule(window="gather", name="gather"), Schedule(gemm="prior", name="prior")]
    if backend._has_wgmma():
        scheds.append(Schedule(gemm="wgmma", name="wgmma"))
    graphs = [saturn.trace(fn, *[saturn.spec(s, dtype) for s in shapes]) for fn, shapes, _ in cases]
    backend.precompile([(g, s) for g in graphs for s in scheds])     # (60 kernels: nvcc on all cores)
    for (fn, shapes, runs), g in zip(cases, graphs):
        specs = [saturn.spec(s, dtype) for s in shapes]
        rng = np.random.default_rng(1)
        args = [rng.standard_normal(s.shape).astype(s.dtype.np) for s in specs]
        for sched in scheds:
            exe = backend.build(g, sched)
            product = [l for l in exe.launches if l.kind in ("gemm_tc", "gemm_wgmma")]
            assert product, exe.explain()
            assert ("16-byte runs" in product[0].detail) == (runs and sched.window == "runs"), exe.explain()
            if sched.name == "wgmma" and runs:
                assert product[0].kind == "gemm_wgmma", exe.explain()
            staged_b = [l for l in exe.launches if l.kind == "stage" and l.detail.startswith("B")]
            assert all(math.prod(l.output.shape) < 2 * math.prod(shapes[0]) * 4 for l in staged_b), exe.explain()
            assert_close(exe(*args)[0], evaluate(g, args)[0], scale=8.0, graph=g, args=args)
