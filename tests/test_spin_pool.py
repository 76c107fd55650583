"""The CPU runtime's worker pool (backends/llvm/spin_pool.py): every chunk runs once, each
participant passes its own arguments, callers at once stay correct, sleeping workers wake."""
from __future__ import annotations

import threading
import time

import numpy as np

from backends.llvm import jit, spin_pool
from backends.llvm.spin_pool import SpinPool

_KERNELS = """
; out[i] += 1 for i in [a, b)
define void @count(ptr %out, i64 %a, i64 %b) {
entry:
  br label %loop
loop:
  %i = phi i64 [ %a, %entry ], [ %j, %body ]
  %more = icmp slt i64 %i, %b
  br i1 %more, label %body, label %done
body:
  %p = getelementptr i64, ptr %out, i64 %i
  %v = load i64, ptr %p
  %w = add i64 %v, 1
  store i64 %w, ptr %p
  %j = add i64 %i, 1
  br label %loop
done:
  ret void
}
; out[i] = the address of its last argument (a participant's own scratch) for i in [a, b)
define void @mark(ptr %out, ptr %x, ptr %scratch, i64 %a, i64 %b) {
entry:
  %s = ptrtoint ptr %scratch to i64
  br label %loop
loop:
  %i = phi i64 [ %a, %entry ], [ %j, %body ]
  %more = icmp slt i64 %i, %b
  br i1 %more, label %body, label %done
body:
  %p = getelementptr i64, ptr %out, i64 %i
  store i64 %s, ptr %p
  %j = add i64 %i, 1
  br label %loop
done:
  ret void
}
"""
_loaded: dict = {}


def _kernels() -> dict:
    if not _loaded:
        addrs, _, engine = jit.load(f'target triple = "{jit.target_info()[0]}"\n' + _KERNELS, ["count", "mark"],
                                    use_cache=False)
        _loaded.update(addrs, engine=engine)
    return _loaded


def _chunks(n: int, count: int) -> np.ndarray:
    b = [n * i // count for i in range(count + 1)]
    return np.array([(x, y) for x, y in zip(b, b[1:])], np.int64)


def test_every_chunk_runs_once_however_many_chunks_and_workers():
    k = _kernels()
    for workers in (1, 2, 3):
        p = SpinPool(workers)
        for n, count in ((1, 1), (7, 3), (1000, 64), (4097, 5)):
            out = np.zeros(n, np.int64)
            for _ in range(20):
                assert p.run(k["count"], [[out.ctypes.data]] * p.participants, _chunks(n, count))
            assert (out == 20).all(), (workers, n, count)


def test_each_participant_passes_its_own_row():
    k = _kernels()
    p = SpinPool(2)
    out = np.zeros(6000, np.int64)
    scratch = [np.zeros(4) for _ in range(p.participants)]
    rows = [[out.ctypes.data, 0, s.ctypes.data] for s in scratch]
    for _ in range(50):
        out[:] = 0
        assert p.run(k["mark"], rows, _chunks(out.size, 60))
        assert set(out.tolist()) <= {s.ctypes.data for s in scratch} and 0 not in out


def test_a_second_caller_is_told_to_run_alone_while_the_pool_is_held():
    k = _kernels()
    p = SpinPool(1)
    out = np.zeros(8, np.int64)
    p._held.acquire()                      # as a caller in the middle of a run does
    try:
        assert p.run(k["count"], [[out.ctypes.data]] * 2, _chunks(8, 2)) is False
        assert (out == 0).all()
    finally:
        p._held.release()
    assert p.run(k["count"], [[out.ctypes.data]] * 2, _chunks(8, 2)) is True
    assert (out == 1).all()


def test_workers_that_fell_asleep_wake_for_the_next_kernel(monkeypatch):
    monkeypatch.setattr(spin_pool, "SPIN_POLLS", 1)
    k = _kernels()
    p = SpinPool(2)
    out = np.zeros(300, np.int64)
    for _ in range(5):
        time.sleep(0.02)                     # long past the workers' polls: they sleep
        assert p.run(k["count"], [[out.ctypes.data]] * 3, _chunks(300, 30))
    assert (out == 5).all()


def test_many_threads_calling_a_cpu_executable_at_once_get_their_own_results():
    import compiler
    from compiler.trace import spec
    exe = compiler.compile(lambda x: (x * 1.7 + 0.3).exp().sum(1), spec((512, 1024), "f32"),
                           target="cpu", budget=1, quiet=True)
    assert exe.executable.threads < 2 or any(len(l.chunks) > 1 for l in exe.executable.launches)
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((512, 1024)).astype(np.float32) * 0.1 for _ in range(6)]
    want = [np.exp(x.astype(np.float64) * 1.7 + 0.3).sum(1) for x in xs]
    got = [None] * len(xs)

    def call(i):
        for _ in range(20):
            got[i] = exe(xs[i])
    ts = [threading.Thread(target=call, args=(i,)) for i in range(len(xs))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g, np.float64), w, rtol=1e-4)


def test_the_caller_does_not_wait_for_a_worker_that_has_not_started(monkeypatch):
    """A worker the OS has not scheduled yet must not hold up a kernel: the caller takes every
    chunk itself and returns."""
    k = _kernels()
    started = threading.Event()
    real = SpinPool._serve

    def late(self, i):
        started.wait(10)
        real(self, i)
    monkeypatch.setattr(SpinPool, "_serve", late)
    p = SpinPool(2)
    out = np.zeros(1000, np.int64)
    t0 = time.perf_counter()
    for _ in range(10):
        assert p.run(k["count"], [[out.ctypes.data]] * 3, _chunks(1000, 10))
    assert time.perf_counter() - t0 < 5 and (out == 10).all()
    started.set()
    for _ in range(10):
        assert p.run(k["count"], [[out.ctypes.data]] * 3, _chunks(1000, 10))
    assert (out == 20).all()


def test_kernels_published_back_to_back_never_mix_their_tasks():
    """Two kernels of different arguments in turn, thousands of times: a worker that reads one
    task while the next is written would call one kernel with the other's arguments."""
    k = _kernels()
    p = SpinPool(3)
    counts = np.zeros(512, np.int64)
    marks = np.zeros(4096, np.int64)
    scratch = [np.zeros(4) for _ in range(p.participants)]
    mark_rows = [[marks.ctypes.data, 0, s.ctypes.data] for s in scratch]
    count_rows = [[counts.ctypes.data]] * p.participants
    rng = np.random.default_rng(0)
    for r in range(3000):
        assert p.run(k["count"], count_rows, _chunks(counts.size, int(rng.integers(1, 9))))
        assert p.run(k["mark"], mark_rows, _chunks(marks.size, int(rng.integers(1, 17))))
    assert (counts == 3000).all()
    assert set(marks.tolist()) <= {s.ctypes.data for s in scratch}


def test_stopped_workers_leave_and_a_stopped_pool_is_not_reused():
    k = _kernels()
    p = SpinPool(2)
    out = np.zeros(100, np.int64)
    assert p.run(k["count"], [[out.ctypes.data]] * 3, _chunks(100, 4))
    p.stop()
    assert not any(t.is_alive() for t in p._threads)
    q = spin_pool.pool(2)
    spin_pool._stop_all()
    assert spin_pool.pool(2) is not q


def test_an_interrupted_caller_returns_only_once_no_worker_is_inside_the_task(monkeypatch):
    k = _kernels()
    p = SpinPool(2)
    out = np.zeros(100_000, np.int64)
    real = p._wait_for
    calls = []

    def interrupted(word, want):
        calls.append(word)
        if len(calls) == 2:                  # the wait for the chunks: as if Ctrl-C came
            raise KeyboardInterrupt
        real(word, want)
    monkeypatch.setattr(p, "_wait_for", interrupted)
    try:
        p.run(k["count"], [[out.ctypes.data]] * 3, _chunks(out.size, 50))
    except KeyboardInterrupt:
        pass
    assert int(p._task[3 * spin_pool.LINE]) == 0       # nobody inside
    assert (out == 1).all()                            # every chunk taken was finished
    monkeypatch.setattr(p, "_wait_for", real)
    assert p.run(k["count"], [[out.ctypes.data]] * 3, _chunks(out.size, 50))
    assert (out == 2).all()


def test_a_schedule_of_more_threads_than_cores_gets_one_participant_per_core(monkeypatch):
    """Chunks for 8 threads, shared out by at most one participant per core (workers beyond
    the cores would only poll against each other); results as on one thread."""
    from backends import get_backend
    from backends.llvm import runtime
    from compiler.trace import spec, trace
    from ir.kernel import KernelSchedule, Schedule
    monkeypatch.setattr(runtime, "MIN_CHUNK_WORK", 1)
    monkeypatch.setattr(runtime, "cpu_count", lambda: 2)
    g = trace(lambda x: (x * 1.7 + 0.3).exp().sum(1), spec((64, 256)))
    be = get_backend("cpu")
    many = be.build(g, Schedule(threads=8, default=KernelSchedule(vector_width=16)))
    one = be.build(g, Schedule(threads=1, default=KernelSchedule(vector_width=16)))
    assert any(len(l.chunks) > 2 for l in many.launches)
    before = set(spin_pool._POOLS)
    x = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
    np.testing.assert_array_equal(many(x)[0], one(x)[0])
    assert set(spin_pool._POOLS) - before <= {1}
