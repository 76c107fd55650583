"""A search's verification data (input sets and bounded references) made in a worker while
the e-graph is explored: the same data as made in the compiling process, and a fallback there
when the worker fails."""
import os
import signal

import numpy as np
import pytest

import compiler as saturn
from compiler.array_files import StoredArray, load_arrays
from compiler.search import SearchOptions, _Runner, prepare_references
from compiler.trace import trace
from compiler.workers import Worker, WorkerFailure


def _job(rows: int, cols: int):
    g = trace(lambda x, w: (x.softmax(-1) * w).sum(-1), saturn.spec((rows, cols)), saturn.spec((cols,)))
    return (g, g, 0, True, 1e9, None)


def _same(a, b) -> None:
    a, b = load_arrays(a), load_arrays(b)
    assert len(a) == len(b)
    for xs, ys in zip(a, b):
        assert [x.tobytes() for x in xs] == [y.tobytes() for y in ys]


@pytest.mark.parametrize("rows", [7, 2100])       # (2100 x 2048 f32: the sets go through files)
def test_data_made_in_a_worker_is_the_data_made_here(rows, tmp_path):
    job = _job(rows, 2048 if rows > 7 else 37)
    runner = _Runner(SearchOptions(workers=2), "cpu")
    try:
        ahead = runner.start_references(job)
        assert ahead is not None
        got = runner.references(ahead, lambda: pytest.fail("made here, not in the worker"))
        if rows > 7:
            assert all(isinstance(a, StoredArray) for s in got.inputs for a in s)
        want = prepare_references(*job)
        _same(got.inputs, want.inputs)
        _same(got.expected, want.expected)
        assert got.notes == want.notes and got.odd is None
    finally:
        runner.close()


def test_a_program_too_big_to_bound_gets_its_inputs_and_odd_references_from_the_worker():
    """Not bounded (the original program's run is the reference at the compiled shapes): the
    worker makes the input sets and the odd shapes' bounded references, the same as here."""
    g, _, seed, elementwise, limit, _ = _job(7, 37)
    odd = _job(5, 23)[0]
    job = (g, g, seed, elementwise, limit, odd, False)
    runner = _Runner(SearchOptions(workers=2), "cpu")
    try:
        got = runner.references(runner.start_references(job), lambda: pytest.fail("made here, not in the worker"))
        want = prepare_references(*job)
        assert got.expected is None and want.expected is None
        _same(got.inputs, want.inputs)
        _same(got.odd[0], want.odd[0])
        _same(got.odd[1], want.odd[1])
        assert [x.shape for x in load_arrays(got.odd[0])[0]] == [(5, 23), (23,)]
    finally:
        runner.close()


def test_a_worker_that_dies_leaves_the_data_to_this_process():
    job = _job(7, 37)
    runner = _Runner(SearchOptions(workers=2), "cpu")
    try:
        # stopped before the request, so it cannot answer before it is killed (a ready worker
        # answered this small request first when the test process was slow on a loaded machine)
        w = runner.pool.get(runner.size - 1)
        os.kill(w.proc.pid, signal.SIGSTOP)
        ahead = runner.start_references(job)
        assert runner.pool.workers[ahead[0]] is w
        w.kill()
        made = []
        got = runner.references(ahead, lambda: made.append(1) or prepare_references(*job))
        assert made == [1] and got.inputs
    finally:
        runner.close()


def test_kept_answers_come_in_order_and_a_failure_is_the_kept_request_s(tmp_path):
    """Posted answers not kept are dropped on the way; a request that raised in the worker is
    its own answer's failure (the worker then retires, as after any request that raised)."""
    job = _job(7, 37)
    w = Worker()
    try:
        w.post(("prepare", "cpu"))
        w.post_kept(("references", job, str(tmp_path), "a"))
        w.post_kept(("references", (None,) + job[1:], str(tmp_path), "bad"))   # raises in the worker
        assert w.collect(60).key == "a"
        with pytest.raises(WorkerFailure, match="error"):
            w.collect(60)
        assert not w.alive()
        with pytest.raises(WorkerFailure, match="no posted request"):
            w.collect(1)
    finally:
        w.close()
