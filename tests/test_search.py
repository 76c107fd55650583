"""The measured-runtime search: planted wrong, crashing, hanging and NaN candidates are rejected
with a reason and never chosen, and compile() still succeeds with a correct program.

The fakes below run the reference interpreter but misbehave on purpose under named schedules;
they live at module level so the isolated worker processes can unpickle them.
"""
from __future__ import annotations

import ctypes
import inspect
import io
import os
import time

import numpy as np
import pytest

import compiler as saturn
from compiler.progress import Progress
from compiler.search import SearchError, SearchOptions, search
from ir.interpreter import evaluate


_POISONED = []  # set in a worker process once a "poison" kernel ran there
BUILDS = []     # (program hash, schedule) of each build in this process, in order


class FakeExecutable:
    def __init__(self, graph, schedule):
        self.graph, self.schedule = graph, schedule
        self.source = f"fake kernel for program {graph.structural_hash()} under schedule {schedule}"
        self.calls = 0

    def __call__(self, *args):
        self.calls += 1
        if _POISONED:           # like a GPU context after a kernel fault: nothing runs any more
            raise RuntimeError("device context lost after an earlier fault")
        outs = evaluate(self.graph, args)
        s = self.schedule
        if s == "poison":
            _POISONED.append(True)
            raise RuntimeError("illegal memory access")
        if s == "wrong_fast":   # off by 1% everywhere: fast and wrong
            return [o * np.float32(1.01) for o in outs]
        if s == "crash":        # a segfault, as broken native code would do
            ctypes.string_at(0)
        if s == "hang":
            time.sleep(3600)
        if s == "nan":
            o = outs[0].copy()
            o.reshape(-1)[0] = np.nan
            return [o] + outs[1:]
        if s == "tail_bug" and outs[0].shape[-1] % 32:  # forgets the tail of a tiled axis
            o = outs[0].copy()
            o[..., -(o.shape[-1] % 32):] = 0
            return [o] + outs[1:]
        if s == "slow":         # correct, but long enough for the progress line to appear
            time.sleep(0.3)
        if s == "flaky":        # within one ulp (inside any error bound), but different every run
            rng = np.random.default_rng(self.calls)
            return [np.where(rng.random(o.shape) < 0.5, np.nextafter(o, np.float32(np.inf)), o) for o in outs]
        return outs

    def benchmark(self, args, warmup, repeat):
        # the planted candidates claim to be far faster than the honest one
        fast = self.schedule in ("wrong_fast", "nan", "flaky", "tail_bug")
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            self(*args)
            times.append(1e-9 if fast else time.perf_counter() - t0)
        return times


class FakeBackend:
    """A backend whose schedules are the names above; 'ok' is the only honest one."""
    name = "fake"

    def __init__(self, plan=("ok",), build_log=None):
        self.plan = tuple(plan)
        self.build_log = build_log    # a file each build (in any process) appends its schedule to

    def unavailable_reason(self):
        return None

    def schedules(self, graph):
        return list(self.plan)

    def build(self, graph, schedule=None):
        BUILDS.append((graph.structural_hash(), schedule))
        if self.build_log is not None:
            with open(self.build_log, "a") as f:
                f.write(f"{schedule}\n")
        if schedule == "build_error":
            raise RuntimeError("planted compile error")
        return FakeExecutable(graph, schedule)


class Cand:
    def __init__(self, graph, cost, description):
        self.graph, self.cost, self.description = graph, cost, description


def softmax(x):
    return x.softmax(-1)


SPEC = saturn.spec((8, 33))


def _compile(plan, **kw):
    # only the original program: these tests are about schedules, not the e-graph's candidates
    kw.setdefault("candidates", [Cand(saturn.trace(softmax, kw.pop("spec", SPEC)), 1.0, "original program")])
    kw.setdefault("budget", 20.0)  # ample: a search ends once every trial is verified and timed
    kw.setdefault("timeout", 3.0)
    kw.setdefault("prune_factor", float("inf"))
    kw.setdefault("quiet", True)
    return saturn.compile(softmax, SPEC, target="fake", backend=FakeBackend(plan), **kw)


def _by_schedule(f):
    return {t.schedule: t for t in f.result.trials}


def _check_correct(f):
    x = np.random.default_rng(5).standard_normal((8, 33)).astype(np.float32)
    np.testing.assert_allclose(f(x), evaluate(f.graph, [x])[0], rtol=1e-6, atol=1e-7)


def test_planted_wrong_schedule_is_rejected_and_never_chosen():
    f = _compile(["wrong_fast", "ok"])
    trials = _by_schedule(f)
    assert trials["wrong_fast"].status == "rejected"
    assert "mismatch" in trials["wrong_fast"].reason
    assert f.result.winner.schedule == "ok"
    _check_correct(f)


def test_crash_hang_nan_build_error_and_nondeterminism_are_rejected_with_reasons():
    t0 = time.perf_counter()
    f = _compile(["crash", "hang", "nan", "build_error", "flaky", "ok"], max_schedules=6)
    trials = _by_schedule(f)
    assert trials["crash"].status == "rejected" and "crashed" in trials["crash"].reason
    assert "SIGSEGV" in trials["crash"].reason
    assert trials["hang"].status == "rejected" and "timeout" in trials["hang"].reason
    assert trials["nan"].status == "rejected" and "NaN" in trials["nan"].reason
    assert trials["build_error"].status == "rejected" and "build failed" in trials["build_error"].reason
    assert trials["flaky"].status == "rejected" and "nondeterministic" in trials["flaky"].reason
    assert f.result.winner.schedule == "ok" and trials["ok"].status == "chosen"
    _check_correct(f)
    assert time.perf_counter() - t0 < 60  # the hang cost one timeout, not the whole compile


def test_a_worker_whose_candidate_raised_is_replaced_before_the_next_candidate():
    # one worker: without replacement, "ok" would run in the poisoned process and fail too
    f = _compile(["poison", "ok"], workers=1, max_schedules=2)
    trials = _by_schedule(f)
    assert trials["poison"].status == "rejected" and "illegal memory access" in trials["poison"].reason
    assert trials["ok"].status == "chosen", trials["ok"].reason
    _check_correct(f)


def test_schedule_that_is_right_only_at_the_compiled_shape_is_rejected_at_odd_shapes():
    spec = saturn.spec((8, 64))  # a multiple of the tile: tail_bug is exact here
    # prune_factor=inf: the fakes' "fast" claims come from benchmark(), not their real run time
    kw = dict(target="fake", backend=FakeBackend(["tail_bug", "ok"]), quiet=True, budget=20.0, timeout=3.0,
              prune_factor=float("inf"),
              candidates=[Cand(saturn.trace(softmax, spec), 1.0, "original program")])
    f = saturn.compile(softmax, spec, **kw)
    trials = _by_schedule(f)
    assert trials["tail_bug"].status == "rejected"
    assert "at odd shapes ([9, 65])" in trials["tail_bug"].reason
    assert f.result.winner.schedule == "ok" and "odd shapes" in f.result.winner.note
    # without the odd-shape check the planted schedule passes and, being fastest, wins
    g = saturn.compile(softmax, spec, odd_shapes=False, **kw)
    assert g.result.winner.schedule == "tail_bug"


def test_search_does_not_wait_for_a_hung_candidate_once_the_budget_is_spent():
    t0 = time.perf_counter()
    f = _compile(["ok", "hang"], budget=1.0, timeout=120.0)
    assert time.perf_counter() - t0 < 60
    trials = _by_schedule(f)
    assert trials["hang"].status == "skipped" and "budget" in trials["hang"].reason
    assert f.result.winner.schedule == "ok"


def test_program_too_big_for_the_interpreter_is_checked_against_the_anchored_baseline():
    # reference_limit=100 makes this small program count as "too big for the interpreter"
    f = _compile(["ok", "wrong_fast"], reference_limit=100)
    trials = _by_schedule(f)
    assert trials["wrong_fast"].status == "rejected" and "mismatch" in trials["wrong_fast"].reason
    assert f.result.winner.schedule == "ok"
    assert any("compared with the original program" in n for n in f.result.notes)
    _check_correct(f)


def test_baseline_that_fails_at_small_shapes_is_not_trusted_as_reference():
    with pytest.raises(SearchError, match="no trusted reference"):
        _compile(["wrong_fast", "ok"], reference_limit=100)


def _wrong_softmax(x):
    # a "rule" that forgot the normalization: fewer ops, so genuinely faster, and wrong
    return (x - x.max(-1, keepdim=True)).exp()


def test_planted_wrong_candidate_program_is_rejected():
    good = saturn.trace(softmax, SPEC)
    bad = saturn.trace(_wrong_softmax, SPEC)
    assert bad.inputs == good.inputs  # hash-consed: same input nodes
    cands = [Cand(bad.__class__(good.inputs, bad.outputs), 0.5, "planted: softmax without the sum"),
             Cand(good, 1.0, "original program")]
    f = _compile(["ok"], candidates=cands)
    trials = {t.description: t for t in f.result.trials}
    bad_trial = trials["planted: softmax without the sum"]
    assert bad_trial.status == "rejected" and "mismatch" in bad_trial.reason
    assert f.result.winner.description == "original program"
    assert f.chosen is good
    _check_correct(f)


def test_candidate_with_wrong_interface_is_rejected_before_it_runs():
    good = saturn.trace(softmax, SPEC)
    other = saturn.trace(lambda x: x.sum(-1), SPEC)
    f = _compile(["ok"], candidates=[Cand(other, 0.1, "wrong shape"), Cand(good, 1.0, "original program")])
    t = {t.description: t for t in f.result.trials}["wrong shape"]
    assert t.status == "rejected" and "not a valid candidate" in t.reason


def test_all_candidates_rejected_raises_with_every_reason():
    g = saturn.trace(softmax, SPEC)
    with pytest.raises(SearchError) as e:
        search(g, FakeBackend(["wrong_fast", "nan"]), target="fake", backend_spec=FakeBackend(["wrong_fast", "nan"]),
               candidates=[Cand(g, 1.0, "original program")], options=SearchOptions(budget=1.0, timeout=3.0, quiet=True))
    assert "mismatch" in str(e.value) and "NaN" in str(e.value)


def test_search_is_seeded_and_reproducible():
    a = _compile(["ok", "ok2"], seed=3, cache=False)
    b = _compile(["ok", "ok2"], seed=3, cache=False)
    assert [(t.id, t.schedule, t.status != "rejected") for t in a.result.trials] == \
           [(t.id, t.schedule, t.status != "rejected") for t in b.result.trials]


def test_progress_is_silent_when_quiet_or_fast_and_shown_otherwise():
    s = io.StringIO()
    p = Progress("x", quiet=True, delay=0.0, stream=s)
    p.phase("timing"); p.update(tried=3, verified=2, rejected=1, best=1e-3); p.close()
    assert s.getvalue() == ""
    s = io.StringIO()
    p = Progress("x", quiet=False, delay=10.0, stream=s)
    p.phase("timing"); p.close()
    assert s.getvalue() == ""
    s = io.StringIO()
    p = Progress("x", quiet=False, delay=0.0, stream=s)
    p.phase("timing"); p.update(tried=3, verified=2, rejected=1, best=1e-3); p.close()
    out = s.getvalue()
    assert "3 tried" in out and "2 verified" in out and "1 rejected" in out and "1 ms" in out


def test_compile_shows_progress_on_stderr_only_when_slow_and_not_quiet(capsys):
    f = _compile(["slow"], quiet=False, budget=0.5, odd_shapes=False, min_repeat=1)
    err = capsys.readouterr().err
    assert "saturn:" in err and "tried" in err and "verified" in err and "best" in err
    assert f.result.winner.schedule == "slow"
    _compile(["slow"], quiet=True, budget=0.5, odd_shapes=False, min_repeat=1)
    assert capsys.readouterr().err == ""
    _compile(["ok"], quiet=False)  # a search well under a second prints nothing
    assert capsys.readouterr().err == ""


def test_reference_target_needs_no_search():
    f = saturn.compile(softmax, SPEC, target="reference")
    assert f.result is None
    _check_correct(f)


@pytest.mark.skipif(os.environ.get("SATURN_SKIP_CPU") == "1", reason="cpu backend skipped")
def test_cpu_target_chooses_a_verified_candidate():
    from backends.base import BackendUnavailable
    try:
        f = saturn.compile(softmax, SPEC, target="cpu", budget=1.0, quiet=True, cache=False, max_candidates=3)
    except BackendUnavailable as e:
        pytest.skip(str(e))
    assert f.result.winner.status == "chosen"
    assert all(t.reason for t in f.result.trials if t.status == "rejected")
    _check_correct(f)


def test_unknown_compile_option_is_an_error_even_without_a_search():
    with pytest.raises(TypeError, match="budgett"):
        saturn.compile(softmax, SPEC, target="reference", budgett=3)


def test_failed_search_ends_the_progress_line():
    class Terminal(io.StringIO):
        def isatty(self):
            return True
    g = saturn.trace(softmax, SPEC)
    stream = Terminal()
    with pytest.raises(SearchError):
        search(g, FakeBackend(["wrong_fast"]), target="fake", backend_spec=FakeBackend(["wrong_fast"]),
               candidates=[Cand(g, 1.0, "original program")], options=SearchOptions(budget=1.0, timeout=3.0),
               progress=Progress("softmax", delay=0.0, stream=stream))
    assert stream.getvalue() and stream.getvalue().endswith("\n")


def softmax_rewritten(x):
    e = (x - x.max(-1, keepdim=True)).exp()
    return e * (1.0 / e.sum(-1, keepdim=True))


def test_every_rewritten_program_is_verified_before_the_originals_other_schedules():
    """Breadth first: the original program under its first two schedules and every rewritten
    program under its default are verified before the original's other schedules (a
    rewritten program can be several times faster, a schedule rarely is; when the original
    came first under all its schedules, a 10 s CUDA search of attention spent its budget on
    them and never tried the flash form). Checked on the order of builds, in-process."""
    plan = ("ok", "second", "third", "fourth")
    original = saturn.trace(softmax, SPEC)
    rewritten = saturn.trace(softmax_rewritten, SPEC)
    assert rewritten.structural_hash() != original.structural_hash()
    BUILDS.clear()
    _compile(plan, candidates=[Cand(original, 1.0, "original program"), Cand(rewritten, 0.5, "rewritten")],
             isolate=False)
    names = {original.structural_hash(): "original", rewritten.structural_hash(): "rewritten"}
    order = []
    for h, schedule in BUILDS:              # (odd-shape variants are built too: not counted)
        if h in names and (names[h], schedule) not in order:
            order.append((names[h], schedule))
    assert order[:4] == [("original", "ok"), ("original", "second"), ("rewritten", "ok"), ("original", "third")], order


def test_a_program_too_big_for_the_interpreter_is_compiled_while_the_e_graph_is_explored(tmp_path, monkeypatch):
    """Its reference is the original program built and run before any candidate: the workers
    compile it under its first schedules during exploration (on the H200 a 2-layer decoder's
    build took as long as its exploration). The exploration below waits until a worker has
    built something, so it sees a build only if one was started before it."""
    import compiler.search as search_mod
    log = tmp_path / "builds"
    explore = search_mod.explore_candidates
    seen = []

    def slow_explore(*args, **kw):
        end = time.monotonic() + 60
        while not log.exists() and time.monotonic() < end:
            time.sleep(0.05)
        seen.extend(log.read_text().split() if log.exists() else [])
        return explore(*args, **kw)

    monkeypatch.setattr(search_mod, "explore_candidates", slow_explore)
    f = saturn.compile(softmax, SPEC, target="fake", backend=FakeBackend(("ok", "second"), build_log=str(log)),
                       budget=20.0, timeout=3.0, prune_factor=float("inf"), quiet=True, reference_limit=100)
    assert seen and seen[0] in ("ok", "second")
    assert f.result.winner is not None
    _check_correct(f)


def test_posted_requests_queue_without_waiting_and_their_answers_are_all_read():
    """Two posted requests go out at once (a build posted during exploration waited ~2 s for
    the fresh worker's `prepare` before), and when both answers are already in the pipe the
    next call still gets its own: the parent reads the pipe unbuffered, so select sees the
    second answer (a buffered reader had read it ahead, and the call waited out its timeout)."""
    from compiler.workers import Worker
    w = Worker()
    try:
        assert isinstance(w.proc.stdout, io.FileIO)      # raw: no read-ahead that select cannot see
        t0 = time.perf_counter()
        w.post(("reset",), 20.0)
        w.post(("reset",), 20.0)
        assert time.perf_counter() - t0 < 1.0          # nothing waited for the worker's start
        time.sleep(1.5)                                # both answers arrive before anything reads
        t1 = time.perf_counter()
        w.call(("reset",), 20.0)
        assert time.perf_counter() - t1 < 10.0 and w.unanswered == 0 and not w.out_of_step()
    finally:
        w.close()


def test_a_worker_wait_cut_at_the_hard_end_is_skipped_not_rejected(monkeypatch):
    """A trial whose worker did not answer before the budget's hard end never ran: 'skipped'
    (a 'rejected' would say the candidate failed)."""
    from compiler import search as search_mod
    from compiler.workers import WorkerFailure
    real = search_mod._Runner._worker

    def slow_start(self, i, until=None):
        # only a verification's start of a trial other than the baseline (which is waited for
        # while nothing has passed) is held up
        if until is None or inspect.stack()[1].function != "verify_all":
            return real(self, i, until)
        while time.perf_counter() < self.end:
            time.sleep(0.01)
        raise WorkerFailure("timeout: no answer within 0.0 s")
    monkeypatch.setattr(search_mod._Runner, "_worker", slow_start)
    f = _compile(("ok", "second"), budget=0.5, workers=2)     # two workers: both trials start at once
    trials = _by_schedule(f)
    assert trials["ok"].status == "chosen"
    assert trials["second"].status == "skipped" and "worker started" in trials["second"].reason


def test_a_timing_round_waits_for_the_other_workers_pending_starts():
    """Runs are timed with the other workers idle: a replacement still starting (its posted
    `prepare` unanswered) shared the 2 cores with the first trials of a round, which then
    timed 2x slow. The round reads those answers first; the timing worker is left alone."""
    from compiler.search import SearchOptions, TrialRecord, _Runner

    class Worker:
        def __init__(self, unanswered):
            self.unanswered, self.drain_s, self.finished = unanswered, 60.0, 0

        def read_posted(self, timeout):
            assert timeout > 0
            self.unanswered -= 1
            self.finished += 1

    class Pool:
        def __init__(self):
            self.workers = [Worker(0), Worker(2), None]

    runner = _Runner(SearchOptions(isolate=False))
    runner.local, runner.pool = None, Pool()
    runner._worker = lambda i, until=None: runner.pool.workers[i]
    runner._timing_worker = lambda t: 0
    runner.prepare_timing([TrialRecord(0, 0, "p", 1.0, None, None)])
    timing, starting, _ = runner.pool.workers
    assert starting.unanswered == 0 and starting.finished == 2
    assert timing.finished == 0


def test_a_candidate_displaces_the_original_only_when_timed_clearly_faster():
    from compiler.search import WIN_MARGIN, TrialRecord, _finalists
    g = saturn.trace(softmax, SPEC)

    def trial(i, *medians, spread=0.0):
        t = TrialRecord(i, i, "p", 1.0, g, None, status="timed")
        t.rounds = [(3, m) for m in medians]
        t.spread = [(m * (1 - spread), m * (1 + spread)) for m in medians]
        return t

    base = trial(0, 1.0)
    close, far = trial(1, 1.0 - WIN_MARGIN / 2), trial(2, 1.0 - 2 * WIN_MARGIN)
    assert [t.id for t in _finalists([close, base], base)] == [0, 1]       # within the margin: the original
    assert [t.id for t in _finalists([far, close, base], base)] == [2, 1, 0]
    assert [t.id for t in _finalists([far, close, base], None)] == [2, 1, 0]
    # a candidate timed a round longer is compared with the original at the round both reached
    longer = trial(3, 1.0 - WIN_MARGIN / 2, 0.5)
    assert _finalists([longer, base], base)[0] is base
    longer = trial(4, 0.9, 0.95)
    assert _finalists([longer, base], base)[0] is longer
    # faster by the margin, but the middle halves of the runs overlap: within the noise
    noisy_base, noisy = trial(5, 1.0, spread=0.05), trial(6, 0.95, spread=0.05)
    assert _finalists([noisy, noisy_base], noisy_base)[0] is noisy_base
    quiet_base, quiet = trial(7, 1.0, spread=0.005), trial(8, 0.95, spread=0.005)
    assert _finalists([quiet, quiet_base], quiet_base)[0] is quiet


def test_trials_whose_code_covers_all_they_run_are_timed_once_under_any_schedule():
    from compiler.search import TrialRecord, _drop_duplicates
    from backends.cuda.render import Schedule
    a, b = Schedule(name="a"), Schedule(name="b")
    whole = [TrialRecord(i, 0, "p", 1.0, None, s, status="verified", source_hash="h", whole_code=True)
             for i, s in enumerate([a, b, a])]
    kept = _drop_duplicates(whole)
    assert [t.id for t in kept] == [0] and [t.status for t in whole[1:]] == ["duplicate", "duplicate"]
    # a hash of the source alone (the schedule may change how it runs): once per schedule
    partial = [TrialRecord(i, 0, "p", 1.0, None, s, status="verified", source_hash="h")
               for i, s in enumerate([a, b, a])]
    assert [t.id for t in _drop_duplicates(partial)] == [0, 1]
