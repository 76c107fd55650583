"""Device arrays on a real GPU: torch CUDA tensors and CuPy arrays in and out without host copies,
the caller's stream, non-contiguous inputs, CUDA-graph replay against plain launches, results
never overwritten by later calls, the torch backend on CUDA with a tiny GPT-2, and the per-call
overhead (printed, not asserted). Marked gpu: skipped without pycuda, nvcc, a device or torch
with CUDA. Run: python -m pytest -m gpu -s tests/test_device_tensors_gpu.py"""
from __future__ import annotations

import time

import numpy as np
import pytest

import compiler

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def cuda(module_cache_dir):
    from backends.cuda import CUDABackend
    reason = CUDABackend().unavailable_reason()
    if reason:
        pytest.skip(reason)
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    torch.cuda.init()


def _block(x, w, b):
    return (x @ w + b).gelu().softmax(-1)


def _block_torch(x, w, b):
    return torch.softmax(torch.nn.functional.gelu((x.float() @ w.float() + b.float())), -1)


SPECS = [compiler.spec((64, 128), "f16"), compiler.spec((128, 256), "f16"), compiler.spec((256,), "f16")]


@pytest.fixture(scope="module")
def block(cuda):
    return compiler.compile(_block, *SPECS, target="cuda", budget=5, quiet=True, max_schedules=2)


def _inputs(seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(s.shape, generator=g, device="cuda", dtype=torch.float16) * 0.5 for s in SPECS]


def _close(got, want, tol=2e-2):
    torch.testing.assert_close(got.float(), want.float(), rtol=tol, atol=tol * 1e-1)


def test_torch_in_torch_out_reads_the_input_in_place(block):
    x, w, b = _inputs()
    y = block(x, w, b)
    assert isinstance(y, torch.Tensor) and y.is_cuda and y.dtype == torch.float16 and y.shape == (64, 256)
    _close(y, _block_torch(x, w, b))
    x.mul_(3.0)                      # in place: the next call must see it (the input is read, not a copy)
    y2 = block(x, w, b)
    _close(y2, _block_torch(x, w, b))
    assert not torch.equal(y, y2)
    assert block._device_stats.copied_inputs == 0


def test_cupy_in_cupy_out(block):
    cupy = pytest.importorskip("cupy")
    x, w, b = (cupy.asarray(t) for t in _inputs(1))        # zero-copy views of torch's memory
    y = block(x, w, b)
    assert isinstance(y, cupy.ndarray) and y.dtype == np.float16 and y.shape == (64, 256)
    want = _block_torch(*(torch.as_tensor(a, device="cuda") for a in (x, w, b)))
    _close(torch.as_tensor(y, device="cuda"), want)
    x *= 2
    _close(torch.as_tensor(block(x, w, b), device="cuda"),
           _block_torch(*(torch.as_tensor(a, device="cuda") for a in (x, w, b))))


def test_any_cuda_array_interface_object_gives_a_device_array(block):
    from backends.cuda.device_array import DeviceArray

    class Wrapped:
        def __init__(self, t):
            self.t = t
            self.__cuda_array_interface__ = t.__cuda_array_interface__

    x, w, b = _inputs(2)
    y = block(Wrapped(x), Wrapped(w), Wrapped(b))
    assert isinstance(y, DeviceArray)
    _close(torch.as_tensor(y, device="cuda"), _block_torch(x, w, b))
    np.testing.assert_allclose(y.numpy().astype(np.float32), _block_torch(x, w, b).cpu().numpy(), rtol=2e-2, atol=2e-3)


def test_callers_stream_is_used(block):
    x, w, b = _inputs(3)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        x2 = x * 2                      # produced on the side stream; Saturn must run after it there
        y = block(x2, w, b)
    assert side.cuda_stream in block._device_stats.streams
    side.synchronize()
    _close(y, _block_torch(x * 2, w, b))
    y3 = block(x, w, b, stream=side)    # an explicit stream object
    side.synchronize()
    _close(y3, _block_torch(x, w, b))


def test_non_contiguous_input_is_copied_on_the_device(block):
    x, w, b = _inputs(4)
    wt = w.t().contiguous().t()         # the same values, column-major
    assert not wt.is_contiguous()
    before = block._device_stats.copied_inputs
    _close(block(x, wt, b), _block_torch(x, w, b))
    assert block._device_stats.copied_inputs == before + 1


def test_wrong_dtype_shape_and_host_mix_name_the_argument(block):
    x, w, b = _inputs(5)
    with pytest.raises(compiler.DTypeError, match="input 0 has dtype f32"):
        block(x.float(), w, b)
    with pytest.raises(compiler.ShapeError, match="input 2 has shape"):
        block(x, w, b[:10])
    with pytest.raises(compiler.SaturnError, match="input 1 is host data"):
        block(x, w.cpu().numpy(), b)


def test_graph_replay_equals_plain_launches_over_many_calls(cuda):
    f = compiler.compile(_block, *SPECS, target="cuda", budget=5, quiet=True, max_schedules=2)
    g = compiler.compile(_block, *SPECS, target="cuda", budget=5, quiet=True, max_schedules=2)
    g.cuda_graphs = False
    x, w, b = _inputs(6)
    for i in range(40):
        x.copy_(torch.randn_like(x) * 0.5)        # new values at the same address: the graph replays
        a, c = f(x, w, b), g(x, w, b)
        assert torch.equal(a, c), f"call {i}: graph replay differs from plain launches"
    text = f.explain()
    assert "CUDA graphs on" in text and " 0 replayed" not in text, text
    assert "CUDA graphs off: turned off" in g.explain()


def test_results_held_by_the_caller_are_never_overwritten(block):
    x, w, b = _inputs(7)
    held, want = [], []
    for i in range(20):
        x.copy_(torch.randn_like(x) * 0.5)
        held.append(block(x, w, b))
        want.append(_block_torch(x, w, b))
    torch.cuda.synchronize()
    for i, (h, e) in enumerate(zip(held, want)):
        _close(h, e)
    assert len({h.data_ptr() for h in held}) == len(held)


def test_per_call_overhead_of_one_kernel(cuda):
    f = compiler.compile(lambda x: x * 2.0 + 1.0, compiler.spec((1024,), "f32"), target="cuda", budget=3,
                         quiet=True, max_schedules=1)
    x = torch.randn(1024, device="cuda")
    torch.testing.assert_close(f(x), x * 2 + 1)
    for graphs in (True, False):
        f.cuda_graphs = graphs
        for _ in range(50):
            f(x)
        torch.cuda.synchronize()
        n = 2000
        t0 = time.perf_counter()
        for _ in range(n):
            f(x)
        torch.cuda.synchronize()
        per = (time.perf_counter() - t0) / n
        t0 = time.perf_counter()
        for _ in range(n):
            x * 2 + 1
        torch.cuda.synchronize()
        eager = (time.perf_counter() - t0) / n
        print(f"\nper-call overhead, 1 kernel on 1024 f32 (graphs={graphs}): Saturn {per * 1e6:.1f} us, "
              f"eager x*2+1 {eager * 1e6:.1f} us")
    print(f.explain().split("generated code:")[0].splitlines()[-2:])


def test_torch_backend_gpt2_on_cuda(cuda):
    transformers = pytest.importorskip("transformers")
    from compiler.torch_backend import explain
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=64,
                                  bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(cfg).eval().cuda().half()
    ids = torch.randint(0, 100, (2, 32), device="cuda")
    from compiler.torch_backend import register
    register()   # a checkout that is not pip-installed has no entry point
    fast = torch.compile(model, backend="saturn", options={"budget": 5, "max_schedules": 2})
    with torch.no_grad():
        want = model(ids).logits
        got = fast(ids).logits
        got2 = fast(ids).logits
    assert got.is_cuda and got.dtype == torch.float16
    torch.testing.assert_close(got.float(), want.float(), rtol=3e-2, atol=3e-2)
    torch.testing.assert_close(got2.float(), want.float(), rtol=3e-2, atol=3e-2)
    report = explain(fast)
    print(report)
    assert report.regions and all(r.status == "saturn" for r in report.regions), str(report)
    assert all(r.compiled.target == "cuda" and r.compiled._device_stats.calls >= 2 for r in report.regions)
    # parameters are read in place: no region copied an input
    assert sum(r.copied_inputs for r in report.regions) == 0, str(report)


def test_repeated_plain_calls_take_the_repeat_path(block):
    x, w, b = _inputs(8)
    block(x, w, b)
    before = block._device_stats.fast_calls
    for _ in range(3):
        x.copy_(torch.randn_like(x) * 0.5)
        _close(block(x, w, b), _block_torch(x, w, b))
    assert block._device_stats.fast_calls == before + 3
    wt = w.t().contiguous().t()                        # not plain: the full path copies it
    _close(block(x, wt, b), _block_torch(x, w, b))
    assert block._device_stats.fast_calls == before + 3
    with pytest.raises(compiler.ShapeError, match="input 2 has shape"):
        block(x, w, b[:10])


def test_an_output_stored_by_its_product_on_device_tensors(cuda):
    """A convolution whose product writes the (n, o, h, w) output's buffer directly (no copy
    kernel): with torch tensors in and out, each call's result is its own tensor and correct."""
    from compiler import conv
    specs = [compiler.spec((2, 16, 9, 9), "f16"), compiler.spec((8, 16, 3, 3), "f16")]
    f = compiler.compile(lambda x, w: conv.conv2d(x, w, padding=1), *specs, target="cuda", budget=3, quiet=True,
                         max_schedules=2)
    g = torch.Generator(device="cuda").manual_seed(3)
    held, want = [], []
    for _ in range(4):
        x, w = [torch.randn(s.shape, generator=g, device="cuda", dtype=torch.float16) for s in specs]
        held.append(f(x, w))
        want.append(torch.nn.functional.conv2d(x.float(), w.float(), padding=1))
    torch.cuda.synchronize()
    for h, e in zip(held, want):
        assert h.shape == (2, 8, 9, 9)
        _close(h, e, tol=3e-2)
