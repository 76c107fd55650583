"""A compile interrupted by KeyboardInterrupt (Ctrl-C) leaves the process able to compile again.

The interrupt is raised deterministically from the progress display: after the first trial is
verified, while the other worker still has a request in flight (its answer must not be taken
for the answer to the next search's first request)."""
from __future__ import annotations

import signal

import numpy as np
import pytest

import compiler as saturn
from compiler import api
from compiler.progress import Progress
from ir.interpreter import evaluate

pytest.importorskip("llvmlite")


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SATURN_CACHE_DIR", str(tmp_path))


def softmax(x):
    return x.softmax(-1)


def layernorm(x):
    return x.layer_norm((x.shape[-1],))


def _interrupting(phase: str, after: int):
    class Interrupting(Progress):
        def update(self, **counters):
            super().update(**counters)
            if self.phase_name == phase and self.tried >= after:
                raise KeyboardInterrupt

        def phase(self, name):
            super().phase(name)
            if name == phase and after == 0:
                raise KeyboardInterrupt
    return Interrupting


def _check(f, shape, seed=0):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(f(x), evaluate(f.graph, [x])[0], rtol=2e-5, atol=1e-6)


def _compiles_again():
    # the interrupted program and another one: the workers take requests again
    for fn in (softmax, layernorm):
        f = saturn.compile(fn, saturn.spec((8, 300)), budget=1.0, quiet=True, cache=False, workers=2)
        assert f.result.winner is not None
        _check(f, (8, 300))


@pytest.mark.parametrize("phase,after", [
    ("verifying", 1),   # a worker still owes an answer (it used to be taken for the next search's)
    pytest.param("timing", 0, marks=pytest.mark.slow),
    pytest.param("saturating", 0, marks=pytest.mark.slow),
])
def test_compile_after_interrupt(monkeypatch, phase, after):
    monkeypatch.setattr(api, "Progress", _interrupting(phase, after))
    with pytest.raises(KeyboardInterrupt):
        saturn.compile(softmax, saturn.spec((8, 300)), budget=2.0, quiet=True, cache=False, workers=2)
    monkeypatch.undo()
    _compiles_again()


@pytest.mark.parametrize("delay", [0.5, pytest.param(0.05, marks=pytest.mark.slow),
                                   pytest.param(1.0, marks=pytest.mark.slow),
                                   pytest.param(1.5, marks=pytest.mark.slow)])
def test_compile_after_sigint(delay):
    """A real SIGINT at some point of a compile (where it lands varies; the next compile must
    work wherever it does). The SIGINT comes at `delay / 2` of an uninterrupted compile's time
    (measured first: a warm search of a small program ends well inside its budget, in about
    0.6 s here, so fixed delays of 0.5-0.9 s mostly arrived after it had returned), at most 0.9."""
    import time

    def interrupt(signum, frame):
        raise KeyboardInterrupt
    t0 = time.perf_counter()
    saturn.compile(softmax, saturn.spec((8, 300)), budget=3.0, quiet=True, cache=False, workers=2)
    took = time.perf_counter() - t0
    old = signal.signal(signal.SIGALRM, interrupt)
    interrupted = False
    try:
        # CPython drops an exception raised while a finalizer runs ("Exception ignored in ..."),
        # so a signal that lands in garbage collection is lost, for a user's Ctrl-C too: up to
        # three tries, at shifted delays, to land one where it is delivered
        for attempt in range(3):
            signal.setitimer(signal.ITIMER_REAL, min(delay / 2 * (1 + 0.37 * attempt), 0.9) * took)
            try:
                saturn.compile(softmax, saturn.spec((8, 300)), budget=3.0, quiet=True, cache=False, workers=2)
            except KeyboardInterrupt:
                interrupted = True
                break
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        signal.signal(signal.SIGALRM, old)
    assert interrupted, "no SIGINT of three reached the compile"
    _compiles_again()


def test_killing_a_worker_whose_wait_lock_an_interrupt_left_held_does_not_hang():
    """A Ctrl-C inside Popen.wait() can leave the Popen's wait lock held; killing that worker
    later (a search's abandoned trial) must still return, with the process reaped."""
    import time
    from compiler.workers import Worker
    w = Worker()
    assert w.proc.poll() is None
    w.proc._waitpid_lock.acquire()          # what the interrupted wait left behind
    t0 = time.monotonic()
    w.kill()
    assert time.monotonic() - t0 < 3 and w.proc.returncode is not None
    w.proc._waitpid_lock.release()
    w.close()
