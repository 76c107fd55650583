"""Compiled executables called from many threads at once give the results of serial calls.

Every call owns its scratch, temporaries and outputs; the runtime's thread pool is shared and
safe to submit to from any thread.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

import compiler as saturn

pytest.importorskip("llvmlite")
from backends.llvm import LLVMBackend  # noqa: E402

THREADS, CALLS = 8, 100


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SATURN_CACHE_DIR", str(tmp_path))


def matmul_relu(a, b):
    return (a @ b).relu()


def mlp(x, w, v):
    # two products with a temporary between them: temps are per call too
    return ((x @ w).relu() @ v).exp()


def _inputs(shapes, count, seed=0):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(count)]


def _hammer(exe, inputs, expected):
    """THREADS threads each call `exe` CALLS times on rotating inputs; the mismatch count."""
    bad = []
    start = threading.Barrier(THREADS)

    def run(k):
        start.wait()
        for i in range(CALLS):
            j = (k + i) % len(inputs)
            out = exe(*inputs[j])
            if any(not np.array_equal(o, e) for o, e in zip(out, expected[j])):
                bad.append((k, i))

    threads = [threading.Thread(target=run, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(bad)


@pytest.mark.parametrize("threads", [None, 1], ids=["pool", "1-thread"])
def test_matmul_relu_from_many_threads(threads):
    backend = LLVMBackend()
    graph = saturn.trace(matmul_relu, saturn.spec((256, 256)), saturn.spec((256, 256)))
    schedule = backend.default_schedule()
    if threads is not None:
        schedule = type(schedule)(threads=threads, default=schedule.default, name=f"{threads}-thread")
    exe = backend.build(graph, schedule)
    assert any(l.scratch_floats for l in exe.launches)   # the packed-panel product path is the one run
    inputs = _inputs([(256, 256), (256, 256)], 4)
    expected = [[o.copy() for o in exe(*args)] for args in inputs]
    assert _hammer(exe, inputs, expected) == 0


def test_temporaries_from_many_threads():
    backend = LLVMBackend()
    graph = saturn.trace(mlp, saturn.spec((64, 128)), saturn.spec((128, 128)), saturn.spec((128, 32)))
    exe = backend.build(graph)
    assert any(b.kind == "temp" for b in exe.program.buffers)
    inputs = _inputs([(64, 128), (128, 128), (128, 32)], 4, seed=1)
    for args in inputs:
        args[1] *= 0.1
        args[2] *= 0.1
    expected = [[o.copy() for o in exe(*args)] for args in inputs]
    assert _hammer(exe, inputs, expected) == 0


def test_compiled_function_from_many_threads():
    f = saturn.compile(matmul_relu, saturn.spec((256, 256)), saturn.spec((256, 256)), budget=1.0, quiet=True,
                       cache=False)
    inputs = _inputs([(256, 256), (256, 256)], 4, seed=2)
    expected = [[f(*args).copy()] for args in inputs]
    assert _hammer(lambda *a: [f(*a)], inputs, expected) == 0


class _FakeDevice:
    """Stands in for the CUDA runtime: records how many calls are inside the device at once and
    whether each thread's context pushes and pops balance."""

    def __init__(self):
        self.inside = self.most = 0
        self.depth = threading.local()
        self.context = self
        self.drv = self

    def push(self):
        self.depth.n = getattr(self.depth, "n", 0) + 1

    def pop(self):
        self.depth.n -= 1

    def memcpy_htod(self, buf, arr):
        assert getattr(self.depth, "n", 0) == 1, "no context current on this thread"
        self.inside += 1
        self.most = max(self.most, self.inside)

    def synchronize(self):
        import time
        time.sleep(1e-4)   # let another thread in, if nothing keeps it out

    def memcpy_dtoh(self, arr, buf):
        self.inside -= 1


def test_cuda_executables_serialize_calls():
    """No GPU needed: the executable's entry points hold the device lock and push the context."""
    from backends.cuda.executable import CUDAExecutable
    g = saturn.trace(lambda x: x + 1, saturn.spec((4,)))
    exe = object.__new__(CUDAExecutable)   # skip the module load of __init__
    exe.graph, exe.launches, exe.functions, exe._args, exe.rt = g, [], [], [], _FakeDevice()
    exe.concurrent = False
    exe.buffers = {n: 0 for n in list(g.inputs) + list(g.outputs)}
    x = np.zeros(4, np.float32)
    done = []

    def run():
        for _ in range(50):
            exe(x)
        done.append(1)

    workers = [threading.Thread(target=run) for _ in range(THREADS)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert len(done) == THREADS
    assert exe.rt.most == 1 and exe.rt.inside == 0


@pytest.mark.gpu
def test_cuda_matmul_relu_from_many_threads():
    from backends.cuda import CUDABackend
    backend = CUDABackend()
    reason = backend.unavailable_reason()
    if reason:
        pytest.skip(reason)
    exe = backend.build(saturn.trace(matmul_relu, saturn.spec((256, 256)), saturn.spec((256, 256))))
    inputs = _inputs([(256, 256), (256, 256)], 4)
    expected = [[o.copy() for o in exe(*args)] for args in inputs]
    assert _hammer(exe, inputs, expected) == 0
