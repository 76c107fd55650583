"""The budget holds when every candidate fails: compile() raises SearchError naming each
trial's fate within budget x 1.1 + 1 s of wall clock, the search's own hard end when nothing
passes, or, where the original program's first trial answers later than that (its worker's
start on a loaded machine: 5.6 s at load 4 on 2 cores), soon after that answer: the search
waits for it, as nothing else can be trusted. TEARDOWN is what tracing before the search and
stopping the workers after it may add (0.05-0.25 s measured on 2 idle cores); a search that
waited for one more slow worker (2 s here) or timed slow failures past its end overruns it.

The fakes live at module level so the isolated worker processes can unpickle them.
"""
from __future__ import annotations

import ctypes
import os
import time

import numpy as np
import pytest

import compiler as saturn
from compiler.search import SearchError
from ir.interpreter import evaluate

BUDGET = 2.0
BOUND = BUDGET * 1.1 + 1.0
TEARDOWN = 0.5
SLOW_S = 0.4    # a slow failure: 32 trials of it overrun the budget


def _stamp_first_answer() -> None:
    """Record (wall clock, shared by the worker processes) when a candidate first ran or failed
    to build: the original program's trial is the first the search starts."""
    path = os.environ.get("SATURN_TEST_FIRST_ANSWER")
    if path and not os.path.exists(path):
        with open(path, "w") as f:
            f.write(repr(time.time()))


class FailingExecutable:
    def __init__(self, graph, schedule):
        self.graph, self.schedule = graph, schedule

    def __call__(self, *args):
        _stamp_first_answer()
        outs = evaluate(self.graph, args)
        if self.schedule == "crash":
            ctypes.string_at(0)          # a segfault, as broken native code would do
        if self.schedule == "hang":
            time.sleep(3600)
        if self.schedule == "nan":
            return [np.full_like(o, np.nan) for o in outs]
        if self.schedule == "slow_wrong":
            time.sleep(SLOW_S)
        return [o + np.float32(1) for o in outs]   # "wrong", "slow_wrong": off by one


class FailingBackend:
    """Every schedule of `plan` fails; the first one is the baseline's (the original program's
    default schedule)."""
    name = "failing"

    def __init__(self, plan):
        self.plan = tuple(plan)

    def unavailable_reason(self):
        return None

    def schedules(self, graph):
        return list(self.plan)

    def build(self, graph, schedule=None):
        if schedule.startswith("build_error"):
            _stamp_first_answer()
            flag = os.environ.get("SATURN_TEST_SLOW_START_FLAG")
            if flag:                     # from now on, workers (the replacements) start slowly
                open(flag, "w").close()
            time.sleep(SLOW_S)
            raise RuntimeError("planted compile error")
        return FailingExecutable(graph, schedule)


class Cand:
    def __init__(self, graph, cost, description):
        self.graph, self.cost, self.description = graph, cost, description


def softmax(x):
    return x.softmax(-1)


# four distinct programs of softmax, so the search has rewritten candidates to try too
FORMS = [softmax,
         lambda x: (x - x.max(-1, keepdim=True)).softmax(-1),
         lambda x: x.exp() / x.exp().sum(-1, keepdim=True),
         lambda x: x.log_softmax(-1).exp()]
SPEC = saturn.spec((8, 33))


def _compile_failing(plan, tmp_path, monkeypatch) -> tuple[float, float, str]:
    """Wall seconds of a compile whose candidates all fail, the bound it must keep (module
    docstring), and its error's text."""
    graphs = [saturn.trace(f, SPEC) for f in FORMS]
    assert len({g.structural_hash() for g in graphs}) == len(FORMS)
    cands = [Cand(g, 1.0 + i, "original program" if i == 0 else f"form {i}") for i, g in enumerate(graphs)]
    stamp = tmp_path / "first-answer"
    monkeypatch.setenv("SATURN_TEST_FIRST_ANSWER", str(stamp))
    t0, w0 = time.perf_counter(), time.time()
    with pytest.raises(SearchError) as e:
        saturn.compile(softmax, SPEC, target="failing", backend=FailingBackend(plan), candidates=cands,
                       budget=BUDGET, timeout=60.0, quiet=True, cache=False)
    wall = time.perf_counter() - t0
    first = float(stamp.read_text()) - w0 if stamp.exists() else 0.0
    return wall, max(BOUND, first) + TEARDOWN, str(e.value)


def test_budget_is_kept_when_every_candidate_computes_wrong_or_hangs(tmp_path, monkeypatch):
    wall, bound, text = _compile_failing(["wrong", "slow_wrong", "hang", "nan", "slow_wrong2"], tmp_path, monkeypatch)
    assert wall <= bound, f"compile took {wall:.2f} s at budget={BUDGET:g} (bound {bound:.2f} s)\n{text}"
    assert "no candidate passed verification" in text
    assert "mismatch" in text         # the original's first trial always answers
    # every other trial was rejected for what it did, or abandoned or skipped at the budget's
    # end (on a loaded machine the original's worker may start so late that nothing else runs)
    for line in text.splitlines()[1:]:
        kind = line.split(", ")[1].split(")")[0]
        why = {"wrong": "mismatch", "slow_wrong": "mismatch", "slow_wrong2": "mismatch", "nan": "NaN",
               "hang": "timeout"}[kind]
        assert why in line or "budget" in line, line
    assert "budget spent" in text     # the hung trials were abandoned, the rest skipped


_SLOW_START = """\
import os, time
flag = os.environ.get("SATURN_TEST_SLOW_START_FLAG")
if flag and os.path.exists(flag):
    time.sleep(float(os.environ.get("SATURN_TEST_WORKER_START_DELAY", "0")))
"""


def test_budget_is_kept_when_every_build_fails_and_workers_start_slowly(tmp_path, monkeypatch):
    # each failed build retires its worker; its replacement takes 2 s to start (a loaded
    # machine, a GPU context, big data sets to reload): the search must not wait past its end.
    # Only workers started after the first failed build are slow: the baseline's own worker,
    # which the search may wait for while nothing has passed, starts as fast as it can
    site = tmp_path / "slow_start"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_SLOW_START)
    monkeypatch.syspath_prepend(str(site))        # the workers' PYTHONPATH is this sys.path
    monkeypatch.setenv("SATURN_TEST_WORKER_START_DELAY", "2.0")
    monkeypatch.setenv("SATURN_TEST_SLOW_START_FLAG", str(tmp_path / "slow-from-now-on"))
    wall, bound, text = _compile_failing(["build_error", "crash", "build_error2", "build_error3"], tmp_path, monkeypatch)
    assert "build failed" in text and "planted compile error" in text
    assert wall <= bound, f"compile took {wall:.2f} s at budget={BUDGET:g} (bound {bound:.2f} s)\n{text}"


class _SleepingRunner:
    """Times a trial by sleeping its runs (`run_s` each), 20 ms per request on top."""

    def __init__(self):
        self.requests = []

    def prepare_timing(self, trials):
        pass

    def time_each(self, trials, backend_spec, warmup, repeat):
        out = []
        for t in trials:
            self.requests.append((t.id, warmup, repeat))
            time.sleep(0.02 + (warmup + repeat) * t.run_s)
            out.append([t.run_s] * repeat)
        return out


def test_timing_drops_what_the_budget_cannot_time_and_keeps_its_end():
    """Two fast trials and two slow ones (0.3 s a run) with 0.6 s left: timing even the slow
    ones once (a warmup and min_repeat runs) would take 2.4 s. They are skipped, the baseline
    and the other fast one are timed, and the phase ends near its deadline."""
    from compiler.search import SearchOptions, TrialRecord, _successive_halving
    from compiler.progress import Progress
    trials = [TrialRecord(i, i, "", 1.0, None, None, status="verified", run_s=r)
              for i, r in enumerate([0.002, 0.003, 0.3, 0.3])]
    runner, notes = _SleepingRunner(), []
    t0 = time.perf_counter()
    _successive_halving(runner, trials, "cpu", t0 + 0.6, SearchOptions(prune_factor=1000.0), Progress("t", quiet=True),
                        notes, baseline=trials[0])
    took = time.perf_counter() - t0
    assert {i for i, _, _ in runner.requests} == {0, 1}
    assert [t.status for t in trials[2:]] == ["skipped", "skipped"]
    assert all("budget spent" in t.reason for t in trials[2:])
    assert took < 0.6 * 1.1 + 0.1, took


def test_a_trial_whose_worker_is_restarting_is_timed_on_one_that_is_up():
    """The worker that verified the original program is often killed when the verification
    phase ends; its replacement takes ~1.4 s to start on 2 cores. Timing goes to a worker that
    is up with the data loaded (which rebuilds the trial from the disk cache) instead."""
    from types import SimpleNamespace
    from compiler.search import TrialRecord, _Runner

    def worker(up, unanswered=0, keys=("main",)):
        return SimpleNamespace(alive=lambda: up, unanswered=unanswered, data_keys=set(keys))

    runner = _Runner.__new__(_Runner)
    runner.data_requests = [("data", "main")]
    t = TrialRecord(0, 0, "", 1.0, None, None, worker=0)
    runner.pool = SimpleNamespace(workers=[worker(True, unanswered=1, keys=()), worker(True)])
    assert runner._timing_worker(t) == 1 and t.worker == 1
    runner.pool = SimpleNamespace(workers=[worker(True), worker(True)])
    t.worker = 0
    assert runner._timing_worker(t) == 0                          # its own worker, when it is up
    runner.pool = SimpleNamespace(workers=[worker(False), worker(True, keys=())])
    assert runner._timing_worker(t) == 0                          # none ready: wait for its own


def test_tracing_comes_out_of_the_budget():
    """The budget bounds the compile() call: what tracing took (here a function that spends
    0.6 s being traced, once per shape it is traced at) is not also given to the search, and
    the report says so."""
    def slow(x):
        time.sleep(0.3)
        return (x * 2.0).sum(-1)
    f = saturn.compile(slow, saturn.spec((8, 33)), budget=3.0, cache=False, quiet=True)
    text = str(f.report)
    searched = float(text.split("budget ", 1)[1].split(" s", 1)[0])
    assert searched <= 3.0 - 0.6, text
    assert "tracing (at the compiled and the odd shapes) took" in text


class _FixedRunner:
    """Answers each timing request at once with the trial's `run_s` as every run."""

    def __init__(self):
        self.rounds = []

    def prepare_timing(self, trials):
        self.rounds.append(sorted(t.id for t in trials))

    def time_each(self, trials, backend_spec, warmup, repeat):
        return [[t.run_s] * repeat for t in trials]


def test_the_baseline_is_timed_in_every_round_beside_the_faster_half():
    """Successive halving keeps the faster half of the candidates and the baseline, so the
    winner is compared with the original at the same number of runs."""
    from compiler.progress import Progress
    from compiler.search import SearchOptions, TrialRecord, _successive_halving
    trials = [TrialRecord(i, i, "", 1.0, None, None, status="verified", run_s=r)
              for i, r in enumerate([5e-4, 1e-4, 2e-4, 3e-4, 4e-4])]
    runner = _FixedRunner()
    _successive_halving(runner, trials, "cpu", time.perf_counter() + 5.0, SearchOptions(prune_factor=1000.0),
                        Progress("t", quiet=True), [], baseline=trials[0])
    assert runner.rounds == [[0, 1, 2, 3, 4], [0, 1, 2], [0, 1]]
    assert len(trials[0].rounds) == len(trials[1].rounds) == 3
