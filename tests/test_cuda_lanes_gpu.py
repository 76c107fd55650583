"""Independent launches on concurrent streams on a real GPU (backends/cuda/lanes.py): the same
results as in order, with host arrays, device arrays in plain launches and replayed CUDA
graphs (the lanes are off by default: these tests turn them on). Marked gpu. Run: python -m pytest -m gpu tests/test_cuda_lanes_gpu.py"""
from __future__ import annotations

import numpy as np
import pytest

import compiler

pytestmark = pytest.mark.gpu


def _projections(x, wq, wk, wv):
    # a GQA layer's three products of one input (none reads another) and a sum of their results
    return (x @ wq)[:, :128] * (x @ wk).relu() + x @ wv


SPECS = [compiler.spec((1000, 512), "f16"), compiler.spec((512, 512), "f16"),
         compiler.spec((512, 128), "f16"), compiler.spec((512, 128), "f16")]


@pytest.fixture(scope="module")
def fn(module_cache_dir):
    from backends.cuda import CUDABackend
    reason = CUDABackend().unavailable_reason()
    if reason:
        pytest.skip(reason)
    return compiler.compile(_projections, *SPECS, target="cuda", budget=5, quiet=True, max_schedules=2)


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(s.shape) * 0.3).astype(np.float16) for s in SPECS]


def test_independent_products_run_side_by_side_with_the_same_results(fn):
    exe = fn.executable
    assert exe.lanes.count >= 2, exe.lanes
    args = _inputs()
    exe.concurrent = False
    want = np.array(fn(*args), copy=True)
    exe.concurrent = True
    for _ in range(3):
        np.testing.assert_array_equal(fn(*args), want)
    times = exe.benchmark(args, 2, 5)
    assert len(times) == 5 and min(times) > 0


def test_device_arrays_plain_and_graph_replay_match(fn):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    fn.executable.concurrent = True          # (read when the first device-array call sets up)
    args = _inputs(1)
    want = np.array(fn(*args), copy=True)
    dev = [torch.from_numpy(a).cuda() for a in args]
    for _ in range(4):            # the first calls launch plainly, later ones replay a graph
        got = fn(*dev)
        torch.cuda.synchronize()
        np.testing.assert_array_equal(got.cpu().numpy(), want)
