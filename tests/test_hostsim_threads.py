"""Kernels with barriers, shared memory and warp shuffles, run on the host (hostsim's fibers):
the emulation itself, then the row-reduction, transpose and SIMT product templates and the
kernel-IR renderer's row threads against the interpreter, at shapes that fill no tile."""
from __future__ import annotations

import numpy as np
import pytest

from backends.cuda import hostsim, render
from backends.cuda.render import Schedule
from backends.cuda.templates.gemm_simt import SIMT_CONFIGS, SIMT_EXPERIMENTAL_CONFIGS, SimtConfig
from compiler.trace import spec, trace
from cuda_cases import graph_of
from ir.interpreter import evaluate
from test_cuda_render import check_on_host, host_inputs

pytestmark = pytest.mark.skipif(hostsim.available() is not None, reason=str(hostsim.available()))

SYNC_KERNELS = r"""
#include <cuda_fp16.h>
extern "C" __global__ void block_reductions(float* out, const float* x) {
  __shared__ float sh[33];
  const float v = x[blockIdx.x * blockDim.x + threadIdx.x];
  const float s = block_sum(v, sh), m = block_max(v, sh);
  if (threadIdx.x == 0) { out[2 * blockIdx.x] = s; out[2 * blockIdx.x + 1] = m; }
}
extern "C" __global__ void early_exit(float* out, const float* x) {
  if (threadIdx.x >= 40) return;
  __shared__ float t[64];
  t[threadIdx.x] = x[threadIdx.x];
  __syncthreads();
  out[threadIdx.x] = t[39 - threadIdx.x] + __shfl_down_sync(0xffffffffu, x[threadIdx.x], 1);
}
extern "C" __global__ void divergent(float* out, const float* x) {
  float v = x[threadIdx.x];
  if (threadIdx.x < 16) __syncthreads();
  else v = __shfl_xor_sync(0xffffffffu, v, 1);
  out[threadIdx.x] = v;
}
"""


def test_fibers_meet_at_barriers_and_shuffles():
    """Block sums and maxima through shuffles and shared memory over three blocks; threads
    that returned early leave the barrier; a shuffle from a lane that has left (or past the
    warp) gives the caller its own value, as the device does for lanes out of range."""
    run = hostsim.build(SYNC_KERNELS, [("block_reductions", 2, 3, 128), ("early_exit", 2, 1, 64)])
    x = np.random.default_rng(0).standard_normal(3 * 128).astype(np.float32)
    out = np.zeros(6, np.float32)
    run("block_reductions", [out, x])
    rows = x.reshape(3, 128).astype(np.float64)
    np.testing.assert_allclose(out[0::2], rows.sum(1), rtol=1e-5)
    np.testing.assert_array_equal(out[1::2], x.reshape(3, 128).max(1))
    got = np.zeros(64, np.float32)
    run("early_exit", [got, x])
    down = np.array([x[i + 1] if i % 32 < 31 and i + 1 < 40 else x[i] for i in range(40)], np.float32)
    np.testing.assert_array_equal(got[:40], x[:40][::-1] + down)


def test_a_build_leaves_nothing_in_the_temporary_directory(tmp_path, monkeypatch):
    """The compiled library is loaded and its files removed, also when the compile fails (a
    test run used to leave a directory a build: tens of GB over many runs)."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    run = hostsim.build(SYNC_KERNELS, [("block_reductions", 2, 1, 128)])
    with pytest.raises(RuntimeError, match="host compile failed"):
        hostsim.build("extern \"C\" __global__ void broken(float* o) { o[0] = ; }", [("broken", 1, 1, 1)])
    assert list(tmp_path.iterdir()) == [] or [p.name[:21] for p in tmp_path.iterdir()] == ["saturn_host_prelude_"]
    out = np.zeros(2, np.float32)
    run("block_reductions", [out, np.ones(128, np.float32)])      # still loaded
    assert out.tolist() == [128.0, 1.0]


def test_a_barrier_half_the_block_never_reaches_is_an_error():
    """Half a warp at a barrier, the other half at a shuffle: neither can go on."""
    run = hostsim.build(SYNC_KERNELS, [("divergent", 2, 1, 64)])
    x = np.zeros(64, np.float32)
    with pytest.raises(RuntimeError, match="never reach"):
        run("divergent", [np.zeros(64, np.float32), x])


@pytest.mark.parametrize("name", ["softmax_f32", "gelu_f16", "sum0_f32", "int_ops"])
def test_kernel_ir_row_threads_run_on_host(name):
    """The kernel-IR renderer with 256 threads sharing a row (warp shuffles, shared memory)."""
    check_on_host(lambda g, a: hostsim.run_kernel_ir(g, a, row_threads=256), graph_of(name), 1, 1e-5)


@pytest.mark.parametrize("fn,shape", [
    (lambda x: x.softmax(-1), (5, 1000)),                    # block-wide row reductions
    (lambda x: x.softmax(-1), (7, 33)),
    (lambda x: x.sum(0), (1000, 7)),                         # a warp per output
    (lambda x: x.permute(1, 0) * 2.0, (130, 70)),
    (lambda x: (x - x.mean(-1, keepdim=True)).square().mean(-1), (3, 4097)),
])
def test_reduction_and_transpose_templates_run_on_host(fn, shape):
    check_on_host(hostsim.run_templates, trace(fn, spec(shape)), 2, 1e-5)


PRODUCTS = [
    ((1, 1), (1, 1), "nn"), ((7, 5), (5, 3), "nn"), ((130, 70), (70, 50), "nn"), ((129, 33), (33, 257), "nt"),
    ((3, 65, 17), (3, 17, 66), "nn"), ((70, 130), (70, 50), "tn"),
]


def _product(a_shape, b_shape, form, dtype, epilogue=False):
    def fn(a, b):
        a = a.transpose(-1, -2) if form[0] == "t" else a
        b = b.transpose(-1, -2) if form[1] == "t" else b
        y = a @ b
        return (y * 0.5).relu() if epilogue else y
    sa = a_shape
    sb = b_shape[:-2] + b_shape[:-3:-1] if form[1] == "t" else b_shape
    return trace(fn, spec(sa, dtype), spec(sb, dtype))


@pytest.mark.parametrize("config", SIMT_CONFIGS + SIMT_EXPERIMENTAL_CONFIGS, ids=lambda c: c.name)
@pytest.mark.parametrize("a_shape,b_shape,form", PRODUCTS)
def test_simt_products_run_on_host(config, a_shape, b_shape, form):
    """Every SIMT tile on products that fill no tile, transposed operands and a batch."""
    g = _product(a_shape, b_shape, form, "f32")
    check_on_host(lambda gr, a: hostsim.run_templates(gr, a, Schedule(simt=config)), g, 3, 1e-4)


VECTOR_PRODUCTS = [((130, 20), (20, 68), "nn"), ((3, 65, 16), (3, 16, 132), "nn"), ((64, 36), (36, 52), "nt"),
                   ((36, 70), (36, 44), "tn")]


VECTOR_CONFIGS = [c for c in SIMT_EXPERIMENTAL_CONFIGS if c.vector_loads] + [SimtConfig(64, 64, 8, 4, 4, vector_loads=True)]


@pytest.mark.parametrize("config", VECTOR_CONFIGS, ids=lambda c: c.name)
@pytest.mark.parametrize("a_shape,b_shape,form", VECTOR_PRODUCTS)
def test_simt_products_read_aligned_operands_as_vectors_on_host(config, a_shape, b_shape, form):
    """f32 operands contiguous along k (A) or n (B), that size a multiple of 4, are read 16
    bytes at a time, off the tile grid too (m 130, k 20 against k-tiles of 8, n 68 / 132
    against 128); a sliced A whose rows start 4-aligned takes vectors, one at an odd offset
    does not."""
    g = _product(a_shape, b_shape, form, "f32")
    src = render(g, Schedule(simt=config))[0]
    vec_a, vec_b = "reinterpret_cast<const float4*>(in0" in src, "reinterpret_cast<const float4*>(in1" in src
    threads_fit = (config.bm * config.bk // 4) % config.threads == 0
    assert vec_a == (form[0] == "n" and threads_fit), src
    assert vec_b == (form[1] == "n" and (config.bk * config.bn // 4) % config.threads == 0), src
    check_on_host(lambda gr, a: hostsim.run_templates(gr, a, Schedule(simt=config)), g, 3, 1e-4)


def test_simt_vector_reads_need_aligned_rows_on_host():
    cfg = VECTOR_CONFIGS[0]
    aligned = trace(lambda a, b: a[:, 4:] @ b, spec((70, 36)), spec((32, 40)))
    odd = trace(lambda a, b: a[:, 1:33] @ b, spec((70, 36)), spec((32, 40)))
    assert "const float4*>(in0" in render(aligned, Schedule(simt=cfg))[0]
    assert "const float4*>(in0" not in render(odd, Schedule(simt=cfg))[0]
    for g in (aligned, odd):
        check_on_host(lambda gr, a: hostsim.run_templates(gr, a, Schedule(simt=cfg)), g, 5, 1e-4)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_simt_product_with_an_epilogue_in_half_precision_runs_on_host(dtype):
    g = _product((67, 40), (40, 45), "nn", dtype, epilogue=True)
    args = host_inputs(g, 5)
    got = hostsim.run_templates(g, args, Schedule(simt=SIMT_CONFIGS[0], use_tensor_cores=False))[0].astype(np.float64)
    want = evaluate(g, args)[0].astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)


def test_simt_async_copies_read_views_with_zero_fill_on_host():
    """The async-copy tile on operands read through a pad (masked: the copy writes zeros), a
    slice with an offset and a permutation, and on an f16 operand (no async copy: registers)."""
    import compiler.functional as F
    cfg = next(c for c in SIMT_EXPERIMENTAL_CONFIGS if c.async_copy)
    progs = [
        trace(lambda a, b: F.pad(a, (1, 2, 0, 3)) @ b, spec((60, 37)), spec((40, 70))),
        trace(lambda a, b: a[3:, 1:].permute(1, 0) @ b, spec((50, 66)), spec((47, 33))),
        trace(lambda a, b: a @ b, spec((33, 20), "f16"), spec((20, 9))),
    ]
    for g in progs:
        src = render(g, Schedule(simt=cfg))[0]
        assert ("cp_async4(&As" in src) == (g is not progs[-1])
        assert (": -1LL; }" in src) == (g is progs[0])        # (an offset function with a mask)
        check_on_host(lambda gr, a: hostsim.run_templates(gr, a, Schedule(simt=cfg)), g, 7, 1e-4)


# --- the tensor-core product (mma.sync, ldmatrix, 16-byte cp.async emulated) --------------------
TC_PRODUCTS = [((64, 32), (32, 64), "nn"), ((70, 40), (40, 50), "nn"), ((33, 48), (48, 20), "nt"),
               ((2, 17, 24), (2, 24, 40), "nn"), ((40, 70), (40, 24), "tn")]


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("a_shape,b_shape,form", TC_PRODUCTS)
def test_tensor_core_products_run_on_host(a_shape, b_shape, form, dtype):
    """The mma.sync product under its default and the prior's tiles: aligned and unaligned
    (gathered) operands, B read k- or n-contiguous (ldmatrix with and without .trans), a
    batch, sizes off every tile."""
    from tests.tolerances import assert_close
    g = _product(a_shape, b_shape, form, dtype)
    args = host_inputs(g, 4)
    want = evaluate(g, args)[0]
    for sched in (Schedule(), Schedule(gemm="prior", name="prior")):
        assert "gemm_tc" in {l.kind for l in render(g, sched)[1]}
        got = hostsim.run_templates(g, args, sched)[0]
        assert_close(got, want, scale=8.0, graph=g, args=args, err_msg=sched.name)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_tensor_core_product_gathering_its_window_runs_on_host(dtype):
    """Convolution windows read by the tensor-core product: in 16-byte runs from a
    channels-last copy (16 channels; 13 padded to 16), or gathered element by element into
    registers a stage ahead (window="gather"; the next stage's fetch has no branch around it,
    and a store into the stage being read would be caught here: 53-75% off)."""
    from compiler import conv
    from tests.tolerances import assert_close
    cases = [(lambda x, w: conv.conv2d(x, w, padding=1), [(2, 16, 9, 9), (24, 16, 3, 3)]),
             (lambda x, w: conv.conv2d(x, w, stride=2, padding=1), [(3, 13, 11, 12), (24, 13, 3, 3)])]
    for fn, shapes in cases:
        g = trace(fn, *[spec(s, dtype) for s in shapes])
        args = host_inputs(g, 1)
        want = evaluate(g, args)[0]
        for sched in (Schedule(), Schedule(window="gather", name="gather"), Schedule(gemm="prior", name="prior")):
            assert "gemm_tc" in {l.kind for l in render(g, sched)[1]}
            got = hostsim.run_templates(g, args, sched)[0]
            assert_close(got, want, scale=8.0, graph=g, args=args, err_msg=f"{shapes} {sched.name}")


# --- the mma.sync flash attention ---------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("shape,masked", [((1, 2, 40, 64), False), ((2, 1, 70, 64), True), ((1, 1, 33, 32), True)])
def test_flash_attention_runs_on_host(shape, masked, dtype):
    """The attention term's mma.sync flash kernel (every mma.sync tile): sequences off the key
    and query tiles, an additive causal mask (fully masked key tiles skipped), two head dims."""
    import compiler.functional as F
    from backends.cuda.templates.attention import ATTN_CONFIGS
    from tests.tolerances import assert_close
    b, h, s, d = shape

    def fn(q, k, v, m):
        scores = (q @ k.transpose(-1, -2)) * (1.0 / d ** 0.5)
        return F.softmax(scores + m if masked else scores, -1) @ v
    g = trace(fn, spec(shape, dtype), spec(shape, dtype), spec(shape, dtype), spec((s, s)))
    args = host_inputs(g, 2)[:3] + [np.triu(np.full((s, s), -np.inf, np.float32), 1)]
    want = evaluate(g, args)[0]
    for cfg in [None] + list(ATTN_CONFIGS):
        sched = Schedule(attn=cfg, arch="sm_80")
        assert [l.kind for l in render(g, sched)[1]] == ["attention"]
        assert_close(hostsim.run_templates(g, args, sched)[0], want, scale=8.0, graph=g, args=args, err_msg=str(cfg))


def test_a_stage_read_before_its_async_copies_land_is_wrong_on_host(monkeypatch):
    """cp.async lands at the wait that retires its group: the tensor-core product waiting with
    one group too many in flight reads a stage whose copies have not landed (its previous
    contents), so the product is wrong here as it may be on the GPU; as rendered it is right."""
    import re
    from backends.cuda.templates import gemm_tc
    from tests.tolerances import assert_close
    g = _product((64, 256), (256, 64), "nn", "f16")
    args = host_inputs(g, 4)
    want = evaluate(g, args)[0]
    assert_close(hostsim.run_templates(g, args, Schedule())[0], want, scale=8.0, graph=g, args=args)
    render_tc = gemm_tc.render

    def one_group_early(*a, **kw):
        src, n = re.subn(r"cp_async_wait<(\d+)>\(\);\n    __syncthreads\(\);",
                         lambda m: f"cp_async_wait<{int(m.group(1)) + 1}>();\n    __syncthreads();", render_tc(*a, **kw))
        assert n == 1
        return src
    monkeypatch.setattr(gemm_tc, "render", one_group_early)
    with pytest.raises(AssertionError):
        assert_close(hostsim.run_templates(g, args, Schedule())[0], want, scale=8.0, graph=g, args=args)
