"""The budget holds when every candidate fails: compile() raises SearchError naming each
trial's fate within budget x 1.1 + 1 s of wall clock. (When nothing passes, the search runs
to its own hard end, the later of budget x 1.1 and budget + 1 s, so the bound leaves only
0.2 s at budget 2 for tracing and tearing down: real, and still an upper bound.)

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
SLOW_S = 0.4    # a slow failure: 32 trials of it overrun the budget


class FailingExecutable:
    def __init__(self, graph, schedule):
        self.graph, self.schedule = graph, schedule

    def __call__(self, *args):
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


def _compile_failing(plan) -> tuple[float, str]:
    """Wall seconds of a compile whose candidates all fail, and its error's text."""
    graphs = [saturn.trace(f, SPEC) for f in FORMS]
    assert len({g.structural_hash() for g in graphs}) == len(FORMS)
    cands = [Cand(g, 1.0 + i, "original program" if i == 0 else f"form {i}") for i, g in enumerate(graphs)]
    t0 = time.perf_counter()
    with pytest.raises(SearchError) as e:
        saturn.compile(softmax, SPEC, target="failing", backend=FailingBackend(plan), candidates=cands,
                       budget=BUDGET, timeout=60.0, quiet=True, cache=False)
    return time.perf_counter() - t0, str(e.value)


def test_budget_is_kept_when_every_candidate_computes_wrong_or_hangs():
    wall, text = _compile_failing(["wrong", "slow_wrong", "hang", "nan", "slow_wrong2"])
    assert wall <= BOUND, f"compile took {wall:.2f} s at budget={BUDGET:g}\n{text}"
    assert "no candidate passed verification" in text
    assert "mismatch" in text and "NaN" in text
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
    wall, text = _compile_failing(["build_error", "crash", "build_error2", "build_error3"])
    assert "build failed" in text and "planted compile error" in text
    assert wall <= BOUND, f"compile took {wall:.2f} s at budget={BUDGET:g}\n{text}"
