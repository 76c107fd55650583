"""The CUDA target on a real GPU: every case of tests/cuda_cases.py (all frontend ops, odd
shapes, f16/bf16, the transformer block) against the reference interpreter, plus determinism
and failures-as-data. Marked gpu: skipped where pycuda, nvcc or a device is missing."""
from __future__ import annotations

import numpy as np
import pytest

from cuda_cases import CASES, graph_of
from ir.dtypes import DType
from ir.interpreter import evaluate

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def backend(cuda_backend):
    precompile(cuda_backend)
    return cuda_backend


def precompile(be) -> None:
    """Compile every case in parallel first (nvcc is the slow part; results land in the cache)."""
    be.precompile([(graph_of(name), None) for name in CASES])


def random_inputs(graph, seed: int):
    rng = np.random.default_rng(seed)
    out = []
    for n in graph.inputs:
        if n.dtype == DType.i32:
            out.append(rng.integers(-9, 10, n.shape).astype(np.int32))
        elif n.dtype == DType.bool:
            out.append(rng.random(n.shape) < 0.5)
        else:
            out.append(rng.standard_normal(n.shape).astype(n.dtype.np))
    return out


def tolerance(dtype: DType, graph) -> tuple[float, float]:
    # composite programs round many times in half precision; products sum up to K terms
    big = graph.num_compute_ops() > 20 or any(n.op.value == "sum" for n in graph.nodes)
    return {DType.f32: (2e-4, 2e-5) if big else (1e-5, 1e-6), DType.f16: (2e-2, 2e-2) if big else (4e-3, 2e-3),
            DType.bf16: (5e-2, 5e-2), DType.i32: (0, 0), DType.bool: (0, 0)}[dtype]


def assert_close(a, b, dtype: DType, graph, msg: str) -> None:
    """Elementwise within rtol, plus an absolute slack proportional to the output's magnitude
    (composite programs such as the transformer block sum many rounded terms, so entries that
    cancel to near zero carry the rounding error of the large intermediates), and a relative
    L2 error bound on the whole output."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    assert np.array_equal(np.isnan(a64), np.isnan(b64)), msg
    rtol, atol = tolerance(dtype, graph)
    finite = np.isfinite(b64)
    scale = float(np.max(np.abs(b64[finite]), initial=0.0))
    np.testing.assert_allclose(a64, b64, rtol=rtol, atol=atol + rtol * scale * 0.25, equal_nan=True, err_msg=msg)
    diff = np.linalg.norm(np.nan_to_num(a64 - b64))
    assert diff <= rtol * max(np.linalg.norm(np.nan_to_num(b64)), 1e-30) + atol, msg


@pytest.mark.parametrize("name", list(CASES))
def test_case_matches_reference(backend, name):
    g = graph_of(name)
    exe = backend.build(g)
    for seed in (0, 1):
        args = random_inputs(g, seed)
        want = evaluate(g, args)
        got = exe(*args)
        assert len(got) == len(want)
        for o, a, b in zip(g.outputs, got, want):
            assert a.shape == b.shape and a.dtype == b.dtype
            if o.dtype in (DType.i32, DType.bool):
                np.testing.assert_array_equal(a, b, err_msg=name)
            else:
                assert_close(a, b, o.dtype, g, f"{name}\n{exe.explain()}")


@pytest.mark.parametrize("name", ["matmul_aligned_f16", "attention_f16", "softmax_f32", "block_f16"])
def test_deterministic(backend, name):
    g = graph_of(name)
    exe = backend.build(g)
    args = random_inputs(g, 3)
    first = exe(*args)
    for _ in range(3):
        for a, b in zip(first, exe(*args)):
            assert np.array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.mark.parametrize("name", ["matmul_aligned_f16", "matmul_f16", "matmul_bt_f16", "mlp_f16", "attention_f16",
                                  "layernorm_f32"])
def test_all_schedules_match(backend, name):
    g = graph_of(name)
    args = random_inputs(g, 5)
    want = evaluate(g, args)
    for sched in backend.schedules(g):
        if sched.lowering == "kernel_ir":    # checked by test_kernel_ir_lowering_matches_reference
            continue
        exe, why = backend.try_build(g, sched)
        if exe is None:          # a schedule that does not fit is data, not a crash
            assert why
            continue
        for a, b in zip(exe(*args), want):
            assert_close(a, b, g.outputs[0].dtype, g, f"{name} {sched.name}")


def test_compile_error_is_data(backend):
    from backends.cuda import toolchain
    from backends.cuda.runtime import get_runtime
    res = toolchain.compile_source("this is not CUDA", get_runtime().info.arch)
    assert res.error and res.binary is None


def test_oversized_launch_is_rejected(backend):
    from backends.cuda import toolchain
    from backends.cuda.runtime import CUDAFailure, get_runtime
    rt = get_runtime()
    src = 'extern "C" __global__ void k(float* o) { extern __shared__ float s[]; s[threadIdx.x] = 1.f; o[threadIdx.x] = s[0]; }'
    res = toolchain.compile_source(src, rt.info.arch)
    mod = rt.load(res.binary)
    with pytest.raises(CUDAFailure) as e:
        rt.function(mod, "k", threads=64, shared=rt.info.smem_per_block_optin + 1024, nargs=1)
    assert e.value.stage == "resources"
    with pytest.raises(CUDAFailure):
        rt.function(mod, "k", threads=4096, shared=0, nargs=1)


def test_benchmark_times_runs(backend):
    g = graph_of("softmax_f32")
    exe = backend.build(g)
    times = exe.benchmark(random_inputs(g, 0), warmup=2, repeat=5)
    assert len(times) == 5 and all(t > 0 for t in times)


def test_compile_api_target_cuda(backend):
    import compiler
    from compiler.trace import spec
    fn = compiler.compile(lambda a, b: (a @ b).softmax(-1), spec((64, 64), "f16"), spec((64, 64), "f16"),
                          target="cuda", quiet=True)
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((64, 64)).astype(np.float16) for _ in range(2))
    want = evaluate(fn.graph, [a, b])[0]
    np.testing.assert_allclose(np.asarray(fn(a, b), np.float64), want.astype(np.float64), rtol=2e-2, atol=2e-2)


KERNEL_IR_CASES = ["softmax_f32", "layernorm_f16", "matmul_f16", "sum0_f32", "movement_f16", "int_ops",
                   "attention_small_f16", "two_outputs", "block_odd_f32", "mod_f32"]


@pytest.mark.parametrize("name", KERNEL_IR_CASES)
def test_kernel_ir_lowering_matches_reference(backend, name):
    """The shared kernel IR (ir/lower.py) rendered by backends/cuda/kir.py."""
    from backends.cuda.render import Schedule
    g = graph_of(name)
    exe = backend.build(g, Schedule(lowering="kernel_ir"))
    args = random_inputs(g, 7)
    for o, a, b in zip(g.outputs, exe(*args), evaluate(g, args)):
        if o.dtype in (DType.i32, DType.bool):
            np.testing.assert_array_equal(a, b, err_msg=name)
        else:
            assert_close(a, b, o.dtype, g, f"{name}\n{exe.explain()}")



@pytest.mark.parametrize("dtype,shape", [("f16", (2, 2, 1024, 64)), ("bf16", (1, 2, 192, 32)), ("f16", (1, 1, 1024, 64))])
def test_attend_term_runs_as_one_flash_kernel_under_every_attention_schedule(backend, dtype, shape):
    """The traced attention's online-contraction term is lowered to the flash kernel (one
    launch) under every attention schedule, and computes what the program computes."""
    from compiler import nn
    from compiler.trace import spec, trace
    g = trace(nn.attention, *[spec(shape, dtype)] * 3)
    assert "attend" in g.op_counts()
    args = random_inputs(g, 7)
    want = evaluate(g, args)[0]
    scheds = [s for s in backend.schedules(g) if s.attn is not None]
    assert scheds
    for sched in scheds:
        exe, why = backend.try_build(g, sched)
        assert exe is not None, why
        assert len(exe.launches) == 1 and exe.launches[0].kind == "attention", exe.explain()
        assert_close(exe(*args)[0], want, g.outputs[0].dtype, g, sched.name)


def test_every_attention_candidate_runs_on_the_device(backend):
    """Every program the e-graph offers for attention (flash forms, the deferred-normalization
    form whose Online carries the value row as a lane sum, materialized forms) builds under
    the default plan and under the shared kernel IR, and matches the interpreter."""
    from backends.cuda.render import Schedule
    from compiler import nn
    from compiler.explore import explore
    from compiler.trace import spec, trace
    g = trace(nn.attention, *[spec((1, 2, 128, 32), "f32")] * 3)
    args = random_inputs(g, 7)
    want = evaluate(g, args)[0]
    for c in explore(g, max_candidates=12).candidates:
        for sched in (None, Schedule(lowering="kernel_ir")):
            exe = backend.build(c.graph, sched)
            assert_close(exe(*args)[0], want, DType.f32, g, f"{c.description} {sched}")


@pytest.mark.parametrize("shape,axis,dtype,op", [((4, 1000, 7), 1, "f32", "sum"), ((4, 1000, 7), 1, "f32", "max"),
                                                ((4097, 3), 0, "f16", "sum"), ((33, 5), 0, "i32", "sum"),
                                                ((64, 8, 128), 1, "f32", "max")])
def test_long_reductions_into_few_outputs_take_a_warp_each(backend, shape, axis, dtype, op):
    """Reductions not over the last axis run in the generic template; long ones into few
    outputs use a warp per output (lanes stride, fixed butterfly). They match the interpreter,
    NaN propagates through max, and two runs give the same bits."""
    from compiler.trace import spec, trace
    g = trace(lambda x: getattr(x, op)(axis), spec(shape, dtype))
    exe = backend.build(g)
    args = random_inputs(g, 3)
    if dtype == "f32" and op == "max":
        args[0][(0,) * len(shape)] = np.nan
    out = exe(*args)[0]
    want = evaluate(g, args)[0]
    if dtype == "i32":
        np.testing.assert_array_equal(out, want)
    else:
        assert_close(out, want, DType(dtype), g, exe.explain())
    assert exe(*args)[0].tobytes() == out.tobytes()
    if shape[axis] >= 32:
        assert "warp per output" in exe.explain(), exe.explain()


@pytest.mark.parametrize("rows,cols,dtype,sliced", [(7, 12, "f32", False), (5, 10, "f32", False), (3, 24, "f16", False),
                                                    (4, 4097, "f32", False), (6, 16, "f32", True), (2, 8, "bf16", True)])
def test_elementwise_reads_broadcast_rows_as_vectors(backend, rows, cols, dtype, sliced):
    """x * w + b with w, b broadcast over rows: the elementwise template loads a row read as
    16-byte vectors when the row length and the read's offset allow it (12, 24, 16), and
    element by element otherwise (10, 4097, an offset slice); every case matches."""
    from compiler.trace import spec, trace
    width = cols + 1 if sliced else cols

    def fn(x, w, b):
        w = w[1:] if sliced else w
        return x * w + b

    g = trace(fn, spec((rows, cols), dtype), spec((width,), dtype), spec((cols,), dtype))
    exe = backend.build(g)
    args = random_inputs(g, 5)
    assert_close(exe(*args)[0], evaluate(g, args)[0], DType(dtype), g, exe.explain())


@pytest.mark.parametrize("rows,cols,dtype,fn", [(4097, 7, "f32", "softmax"), (1000, 1000, "f32", "layernorm"),
                                                (4099, 33, "f16", "softmax"), (17, 4097, "bf16", "rmsnorm"),
                                                (70001, 128, "f32", "sum")])
@pytest.mark.parametrize("row_blocks", [0, 1, 7])
def test_row_kernels_loop_over_rows_with_a_grid_stride(backend, rows, cols, dtype, fn, row_blocks):
    """Row kernels launch at most Schedule.row_blocks blocks (by default about two waves of
    threads) and each block loops over its rows: row counts that leave a partial last round
    (one block, seven blocks, the default cap), warps that share a block (short rows) and
    blocks that are one row (long rows, shared-memory combine in the loop); NaN rows stay
    NaN and only there; two runs give the same bits."""
    from backends.cuda.render import Schedule
    from compiler.trace import spec, trace
    funcs = {"softmax": lambda x: x.softmax(-1), "sum": lambda x: x.sum(-1),
             "layernorm": lambda x: x.layer_norm((x.shape[-1],)),
             "rmsnorm": lambda x: x * ((x * x).mean(-1, keepdim=True) + 1e-6).rsqrt()}
    g = trace(funcs[fn], spec((rows, cols), dtype))
    exe = backend.build(g, Schedule(row_blocks=row_blocks))
    launches = [l for l in exe.launches if l.kind == "row"]
    assert launches, exe.explain()
    if row_blocks:
        assert all(l.grid[0] <= row_blocks and "grid-stride" in l.detail for l in launches), exe.explain()
    args = random_inputs(g, 11)
    args[0][rows // 2, cols // 3] = np.nan
    out = exe(*args)[0]
    assert_close(out, evaluate(g, args)[0], DType(dtype), g, exe.explain())
    assert exe(*args)[0].tobytes() == out.tobytes()


@pytest.mark.parametrize("dtype,m,k,n", [("f32", 3, 16, 5), ("f16", 32, 16, 32), ("bf16", 130, 16, 24)])
def test_products_of_more_than_65535_batches_run(backend, dtype, m, k, n):
    """A batched product past 65535 batches (more than gridDim.z holds) runs with the extra
    batches on gridDim.y (SIMT and tensor-core kernels) and matches numpy's product in float64
    (the interpreter would materialize batch x m x k x n), the last batch included."""
    from compiler.trace import spec, trace
    batch = 65537 if dtype != "f32" else 70001
    g = trace(lambda a, b: a @ b, spec((batch, m, k), dtype), spec((batch, k, n), dtype))
    exe = backend.build(g)
    assert all(max(l.grid[1:]) <= 65535 for l in exe.launches), exe.explain()
    assert any(l.grid[1] > (m + 127) // 128 for l in exe.launches), exe.explain()    # batches on y
    args = random_inputs(g, 13)
    out = exe(*args)[0]
    want = np.matmul(args[0].astype(np.float64), args[1].astype(np.float64))
    assert_close(out, want, DType(dtype), g, exe.explain())
    assert_close(out[-1], want[-1], DType(dtype), g, "last batch")
