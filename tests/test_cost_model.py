"""The cost model that orders the search's trials: counting, prediction, learning, ranking."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

import compiler as saturn
from backends.cuda import CUDABackend
from backends.llvm import LLVMBackend
from compiler import cost_model
from compiler.explore import explore
from ir.lower import lower
from ir.kernel_cost import FEATURES, program_features
from tests.test_search import BUILDS, Cand, FakeBackend, softmax, softmax_rewritten, SPEC


def _feature(feats, name):
    return feats[FEATURES.index(name)]


def test_a_matrix_product_counts_its_multiply_accumulates_and_bytes_on_the_kernel_ir():
    g = saturn.trace(lambda a, b: a @ b, saturn.spec((64, 48)), saturn.spec((48, 80)))
    f = program_features(lower(g))
    assert _feature(f, "mm_f32") == 64 * 48 * 80
    assert _feature(f, "bytes") == 4 * (64 * 48 + 48 * 80 + 64 * 80)
    assert _feature(f, "kernels") == 1


def test_a_half_product_on_the_cuda_plan_counts_as_half():
    g = saturn.trace(lambda a, b: a @ b, saturn.spec((64, 48), "f16"), saturn.spec((48, 80), "f16"))
    f = CUDABackend().features(g)
    assert _feature(f, "mm_half") == 64 * 48 * 80 and _feature(f, "mm_f32") == 0


def _attention(q, k, v):
    return ((q @ k.transpose(-1, -2)) * 0.125).softmax(-1) @ v


def test_the_rules_flash_attention_is_predicted_faster_than_naive_attention_on_cuda():
    """The ordering that matters: with a small budget the flash form must be built early."""
    specs = [saturn.spec((1, 2, 2048, 64), "f16")] * 3
    g = saturn.trace(_attention, *specs)
    model = cost_model.CostModel("cuda", "test", [], cost_model.fit_scales("cuda", []))
    backend = CUDABackend()
    exp = explore(g, max_candidates=8)
    predicted = {c.description: model.predict(cost_model.features(c.graph, backend)) for c in exp.candidates}
    # the same program without its attention term: products and a softmax row
    from ir.terms import expand_terms
    naive = model.predict(cost_model.features(expand_terms(g), backend))
    # one candidate is planned as one flash kernel: no score tensor in memory
    flash = [c for c in exp.candidates if _feature(backend.features(c.graph), "kernels") == 1]
    assert flash, predicted
    assert min(predicted[c.description] for c in flash) < naive / 2, (naive, predicted)


def test_spearman_is_one_for_the_same_order_minus_one_reversed_and_handles_ties():
    assert cost_model.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert cost_model.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert cost_model.spearman([1, 1, 2, 3], [5, 5, 6, 7]) == pytest.approx(1.0)
    assert cost_model.spearman([1, 2], [1, 2]) is None
    assert cost_model.spearman([1, 1, 1], [1, 2, 3]) is None


def test_the_model_learns_a_machine_whose_memory_is_slower_than_the_default():
    rng = np.random.default_rng(0)
    d = np.array(cost_model.DEFAULTS["cpu"])
    truth = d * np.array([3.0] + [1.0] * (len(d) - 1))
    model = cost_model.CostModel("cpu", "test", [], cost_model.fit_scales("cpu", []))
    feats = [tuple(rng.uniform(0, 1, len(d)) / d) for _ in range(60)]
    before = cost_model.spearman([model.predict(f) for f in feats], [float(truth @ f) for f in feats])
    model.observe([(f, float(truth @ np.array(f))) for f in feats])
    after = [model.predict(f) for f in feats]
    assert model.scales[0] > 2.0
    assert np.allclose(after, [truth @ f for f in feats], rtol=0.25)
    assert cost_model.spearman(after, [float(truth @ f) for f in feats]) >= before


def test_saved_model_round_trips_and_a_damaged_or_foreign_file_gives_the_defaults(tmp_path):
    model = cost_model.load("cpu", "dev-a", str(tmp_path))
    assert model.observations == [] and model.scales == (1.0,) * len(FEATURES)
    model.observe([((1e6, 0, 1e6, 1e6, 1), 1e-3)] * 5)
    cost_model.save(model, str(tmp_path))
    again = cost_model.load("cpu", "dev-a", str(tmp_path))
    assert again.observations == model.observations and again.scales == pytest.approx(model.scales)
    assert cost_model.load("cpu", "dev-b", str(tmp_path)).observations == []   # another device
    path = cost_model._path("dev-a", str(tmp_path))
    with open(path, "w") as f:
        f.write("{ not json")
    assert cost_model.load("cpu", "dev-a", str(tmp_path)).observations == []
    with open(path, "w") as f:
        json.dump({"target": "cpu", "device": "dev-a", "features": ["other"], "observations": [[1, 2, 0]]}, f)
    assert cost_model.load("cpu", "dev-a", str(tmp_path)).observations == []


class PredictingBackend(FakeBackend):
    """Predicts the rewritten program far faster than the original and the third program."""

    def __init__(self, plan, fast_hash):
        super().__init__(plan)
        self.fast_hash = fast_hash

    def features(self, graph):
        scale = 1.0 if graph.structural_hash() == self.fast_hash else 100.0
        return (scale * 1e6, 0.0, 0.0, 0.0, 1.0)


def _softmax_third(x):
    e = (x - x.max(-1, keepdim=True)).exp() + 0.0
    return e * e.sum(-1, keepdim=True).reciprocal()


class SlowToPlanBackend(PredictingBackend):
    """Preparing the trials takes a while (as exploration does on a real program)."""

    def schedules(self, graph):
        import time as _time
        _time.sleep(0.3)
        return super().schedules(graph)


def test_predictions_order_the_trials_even_when_preparing_them_took_most_of_the_budget(tmp_path):
    original, rewritten = saturn.trace(softmax, SPEC), saturn.trace(softmax_rewritten, SPEC)
    third = saturn.trace(_softmax_third, SPEC)
    BUILDS.clear()
    f = saturn.compile(softmax, SPEC, target="fake", backend=SlowToPlanBackend(("ok",), rewritten.structural_hash()),
                       budget=2.0, timeout=3.0, quiet=True, isolate=False, cache=False,
                       candidates=[Cand(original, 1.0, "original program"), Cand(third, 0.5, "third"),
                                   Cand(rewritten, 0.6, "rewritten")])
    assert all(math.isfinite(t.predicted) for t in f.result.trials)
    order = [h for h, _ in BUILDS if h in (rewritten.structural_hash(), third.structural_hash())]
    assert order and order[0] == rewritten.structural_hash()


def test_rewritten_programs_are_built_in_predicted_order_and_the_report_shows_the_correlation(monkeypatch, tmp_path):
    monkeypatch.setenv("SATURN_CACHE_DIR", str(tmp_path))
    original, rewritten = saturn.trace(softmax, SPEC), saturn.trace(softmax_rewritten, SPEC)
    third = saturn.trace(_softmax_third, SPEC)
    assert len({original.structural_hash(), rewritten.structural_hash(), third.structural_hash()}) == 3
    BUILDS.clear()
    backend = PredictingBackend(("ok",), rewritten.structural_hash())
    f = saturn.compile(softmax, SPEC, target="fake", backend=backend, budget=20.0, timeout=3.0, quiet=True,
                       isolate=False, cache=str(tmp_path / "c"),
                       candidates=[Cand(original, 1.0, "original program"), Cand(third, 0.5, "third"),
                                   Cand(rewritten, 0.6, "rewritten")])
    names = {original.structural_hash(): "original", rewritten.structural_hash(): "rewritten",
             third.structural_hash(): "third"}
    order = []
    for h, _ in BUILDS:
        if h in names and names[h] not in order:
            order.append(names[h])
    assert order == ["original", "rewritten", "third"], order   # static rank alone would put "third" first
    report = str(f.result)
    assert "cost model (roofline defaults" in report and "Spearman rho" in report
    assert f.result.cost_model["trials"] == 3
    # the measurements joined this device's model, kept beside the cached winners
    assert cost_model.load("fake", f.result.device or "fake", str(tmp_path / "c")).observations
    assert not (tmp_path / "costmodel").exists()


def test_a_trial_timed_far_slower_than_the_original_is_not_timed_again():
    from compiler.search import SearchOptions, TrialRecord, _successive_halving

    class Runner:
        def __init__(self, speed):
            self.speed, self.calls = speed, {}

        def time(self, t, spec, warmup, n):
            self.calls[t.id] = self.calls.get(t.id, 0) + 1
            return [self.speed[t.id]] * n

        def time_each(self, trials, spec, warmup, n):
            return [self.time(t, spec, warmup, n) for t in trials]

        def prepare_timing(self, trials):
            pass

    g = saturn.trace(softmax, SPEC)
    trials = [TrialRecord(i, i, "", 0.0, g, None, status="verified", run_s=1e-4) for i in range(4)]
    runner = Runner({0: 1e-3, 1: 0.9e-3, 2: 30e-3, 3: 31e-3})
    opts = SearchOptions(budget=5.0, min_repeat=3, max_repeat=3)

    class Quiet:
        def update(self, **kw):
            pass
    import time as _time
    _successive_halving(runner, trials, None, _time.perf_counter() + 5.0, opts, Quiet(), [], baseline=trials[0])
    assert trials[2].status == trials[3].status == "pruned"
    assert len(trials[2].rounds) == len(trials[3].rounds) == 1     # one round (cut into slices), never again
    assert runner.calls[2] == runner.calls[3] <= 3
    assert math.isfinite(trials[0].median) and trials[1].status == "timed"


class SlowFailingBackend(FakeBackend):
    """Every build takes a while and fails: nothing can pass verification."""

    def build(self, graph, schedule=None):
        import time as _time
        _time.sleep(0.4)
        raise RuntimeError("planted compile error")


def test_when_every_candidate_fails_the_search_stops_at_the_budgets_hard_end():
    from compiler.search import SearchError
    plan = tuple(f"s{i}" for i in range(8))
    with pytest.raises(SearchError, match="within the budget") as err:
        saturn.compile(softmax, SPEC, target="fake", backend=SlowFailingBackend(plan), budget=0.5, timeout=3.0,
                       quiet=True, isolate=False, cache=False,
                       candidates=[Cand(saturn.trace(softmax, SPEC), 1.0, "original program")])
    text = str(err.value)
    assert "trial 0 (original program, s0): rejected: " in text        # the baseline is always tried
    assert "skipped: budget spent before it was verified" in text      # the rest is not, past the end


def test_loads_an_innermost_loop_strides_through_are_counted_and_contiguous_or_product_loads_are_not():
    from ir.kernel import Buffer, Kernel, KernelProgram, Load, Reduce, Store, Var, as_lin
    from ir.dtypes import DType
    from ir.ops import Op
    f32 = DType.f32
    i, r0, r1 = Var("i0", 64), Var("r0", 32), Var("r1", 32)

    def row_sum(index) -> tuple:
        body = Load("in0", f32, index)
        inner = Reduce(Op.SUM, f32, (r1,), body)
        k = Kernel("k0", (i,), (), (Store("out0", as_lin(i), Reduce(Op.SUM, f32, (r0,), inner)),))
        program = KernelProgram((Buffer("in0", f32, 64 * 1024, "input"), Buffer("out0", f32, 64, "output")), (k,),
                                ("in0",), ("out0",), ((64,),))
        return program_features(program)

    # the tile loop outside, the elements of a tile inside: one element per step
    contiguous = row_sum(as_lin(i) * 1024 + as_lin(r0) * 32 + as_lin(r1))
    # the other way round (a two-level reduction whose inner loop strides by the tile)
    strided = row_sum(as_lin(i) * 1024 + as_lin(r0) + as_lin(r1) * 32)
    assert _feature(contiguous, "strided") == 0
    assert _feature(strided, "strided") == 64 * 32 * 32
    # the kernel's loop once, the r0 loop once per row, the r1 loop once per tile
    assert _feature(strided, "loops") == _feature(contiguous, "loops") == 1 + 64 + 64 * 32
    # a matrix product's operands step through k at any stride: its kernel packs them
    g = saturn.trace(lambda a, b: a @ b, saturn.spec((64, 48)), saturn.spec((48, 80)))
    assert _feature(program_features(lower(g)), "strided") == 0


def test_schedule_factors_are_learned_relative_to_the_first_schedule_and_kept_with_the_model(tmp_path):
    model = cost_model.load("cpu", "dev-s", str(tmp_path))
    assert model.factor("1-thread") == 1.0 and model.factor(None) == 1.0
    model.observe([], [("1-thread", 2.0)] * 3 + [("vec256", 0.9)])
    # one pseudo-measurement of ratio 1 beside the three of 2
    assert model.factor("1-thread") == pytest.approx(2.0 ** (3 / 4))
    assert model.factor("vec256") == pytest.approx(0.9 ** 0.5)
    feats = (1e6,) + (0.0,) * (len(FEATURES) - 1)
    assert model.predict(feats, "1-thread") == pytest.approx(model.predict(feats) * model.factor("1-thread"))
    cost_model.save(model, str(tmp_path))
    again = cost_model.load("cpu", "dev-s", str(tmp_path))
    assert again.factor("1-thread") == pytest.approx(model.factor("1-thread"))
    with open(cost_model._path("dev-s", str(tmp_path))) as f:
        data = json.load(f)
    data["schedules"] = {"x": "not a pair"}
    with open(cost_model._path("dev-s", str(tmp_path)), "w") as f:
        json.dump(data, f)
    assert cost_model.load("cpu", "dev-s", str(tmp_path)).schedules == {}   # damaged: the defaults


def test_a_search_predicts_each_schedule_by_its_factor_and_learns_the_ratios_it_timed():
    from compiler.search import SearchResult, TrialRecord, SearchOptions, _learn, _predict

    class Counting:
        def features(self, graph):
            return (1e7,) + (0.0,) * (len(FEATURES) - 1)

    g = saturn.trace(softmax, SPEC)
    model = cost_model.CostModel("cpu", "dev", [], cost_model.fit_scales("cpu", []), {"1-thread": [math.log(4.0) * 3, 3]})
    trials = [TrialRecord(i, cand, "p", 1.0, g, sched) for i, (cand, sched) in
              enumerate([(0, None), (0, _Named("1-thread")), (1, None), (1, _Named("1-thread"))])]
    _predict(trials, Counting(), model, math.inf)
    assert trials[1].predicted == pytest.approx(trials[0].predicted * 4.0 ** 0.75)
    assert trials[2].predicted == trials[0].predicted
    for t, seconds in zip(trials, (1e-3, 3e-3, 2e-3, 6e-3)):
        t.rounds = [(3, seconds)]
    result = SearchResult("cpu", "dev", SearchOptions(), trials)
    _learn(model, trials, result, [], "")
    assert result.cost_model["trials"] == 4 and result.cost_model["rho_trials"] is not None
    assert model.schedules["1-thread"] == [pytest.approx(3 * math.log(4.0) + 2 * math.log(3.0)), 5]
    # each program joins the fit at its first schedule's time
    assert sorted(row[-2] for row in model.observations) == [1e-3, 2e-3]


class _Named:
    def __init__(self, name):
        self.name = name


def test_a_fit_that_ranks_past_searches_worse_than_the_defaults_is_not_kept(monkeypatch):
    """Absolute accuracy is not what the search needs: a fit is kept only where it orders the
    programs within each past search at least as well as the defaults."""
    d = np.array(cost_model.DEFAULTS["cpu"])
    n = len(d)

    def feats(bytes_, strided):
        f = np.zeros(n)
        f[FEATURES.index("bytes")], f[FEATURES.index("strided")] = bytes_, strided
        return tuple(f)
    # within each search the strided loads decide (the defaults weigh them enough to see it)
    model = cost_model.CostModel("cpu", "test", [], cost_model.fit_scales("cpu", []))
    # a fit that weighs only the bytes ranks each search backwards: not kept
    backwards = tuple(1.0 if f == "bytes" else 1e-3 for f in FEATURES)
    monkeypatch.setattr(cost_model, "least_squares", lambda d, obs: backwards)
    for size in (1e6, 1e7, 1e8):     # three searches
        model.observe([(feats(size * (1 + 0.01 * k), size * (5 - k)), size * 1e-9 * (1 + 0.1 * (5 - k)))
                       for k in (1, 2, 3, 4)])
    obs = np.array(model.observations)
    assert sorted(set(obs[:, -1])) == [0, 1, 2]
    assert cost_model._ranking(backwards, d, obs) == pytest.approx(-1.0)
    assert cost_model._ranking(backwards, d, obs) < cost_model._ranking((1.0,) * n, d, obs)
    assert model.scales == (1.0,) * n
    monkeypatch.undo()
    # where the fit ranks as well, it is kept
    truth = d * np.array([3.0] + [1.0] * (n - 1))
    rng = np.random.default_rng(1)
    fs = [tuple(rng.uniform(0, 1, n) / d) for _ in range(30)]
    good = cost_model.CostModel("cpu", "test", [], cost_model.fit_scales("cpu", []))
    good.observe([(f, float(truth @ np.array(f))) for f in fs])
    assert good.scales[0] > 2.0


def test_a_schedule_factor_is_taken_at_the_programs_size_where_it_was_measured_there():
    model = cost_model.CostModel("cpu", "dev", [], cost_model.fit_scales("cpu", []))
    # one thread: faster on programs predicted at ~50 us, slower at ~2 ms
    model.observe([], [("1-thread", 0.5, 5e-5)] * 3 + [("1-thread", 2.0, 2e-3)] * 3)
    assert model.factor("1-thread", 4e-5) == pytest.approx(0.5 ** 0.75)
    assert model.factor("1-thread", 3e-3) == pytest.approx(2.0 ** 0.75)
    assert model.factor("1-thread", 0.5) == pytest.approx(1.0)         # no data at 0.1-1 s: all sizes
    assert model.factor("1-thread") == pytest.approx(1.0)              # (0.5 and 2.0 cancel)
    model.observe([], [("vec256", 0.8, 1e-3)])                            # one at that size: not enough
    assert model.factor("vec256", 1e-3) == model.factor("vec256") == pytest.approx(0.8 ** 0.5)


def test_the_backends_prior_is_one_more_measurement_of_a_schedules_factor():
    model = cost_model.CostModel("cpu", "dev", [], cost_model.fit_scales("cpu", []))
    assert model.factor("1-thread", 1e-3, prior=1.8) == pytest.approx(1.8)      # nothing measured: the prior
    model.observe([], [("1-thread", 2.0)] * 3)
    assert model.factor("1-thread", prior=1.8) == pytest.approx((2.0 ** 3 * 1.8) ** 0.25)
    assert model.factor("1-thread", prior=None) == pytest.approx(2.0 ** 0.75)  # no prior: a ratio of 1
    assert model.factor("1-thread", prior=math.inf) == pytest.approx(2.0 ** 0.75)


def _prior(fn, *specs, schedule: str, first: str = "default"):
    g = saturn.trace(fn, *specs)
    be = LLVMBackend()
    by_name = {s.name: s for s in be.schedules(g)}
    coefficients = cost_model.CostModel("cpu", "dev", [], cost_model.fit_scales("cpu", [])).coefficients
    return be.schedule_factor(g, by_name[schedule], by_name[first], coefficients)


def test_the_cpu_prior_tells_one_thread_strict_reductions_and_half_library_products_apart():
    """What each schedule does, from counts alone: one thread is slower on a big program and not
    on a tiny one (the pool hand-off); keeping reductions in order slows a softmax, not an
    elementwise chain; the library's half products (converted copies) are slower than the
    generated ones, its f32 products are not."""
    from backends.llvm.runtime import cpu_count
    big, tiny = saturn.spec((2048, 2048)), saturn.spec((8, 8))
    chain = lambda x: (x * 1.7 + 0.3).exp()
    if cpu_count() > 1:
        assert _prior(chain, big, schedule="1-thread") > 1.5
        assert _prior(chain, tiny, schedule="1-thread") == pytest.approx(1.0, rel=0.05)
    assert _prior(lambda x: x.softmax(-1), big, schedule="strict") > 1.5
    assert _prior(chain, big, schedule="strict") == pytest.approx(1.0)
    a, b = saturn.spec((512, 512), "f16"), saturn.spec((512, 512), "f16")
    assert _prior(lambda x, y: x @ y, a, b, schedule="blas") > 1.2
    a, b = saturn.spec((512, 512)), saturn.spec((512, 512))
    assert _prior(lambda x, y: x @ y, a, b, schedule="blas") == pytest.approx(1.0, rel=0.2)
    # relative to the program's first schedule, whichever that was
    assert _prior(chain, big, schedule="default", first="strict") == pytest.approx(1.0)


def test_a_search_on_a_device_that_measured_nothing_predicts_one_thread_slower_on_a_big_program():
    from compiler.search import TrialRecord, _predict
    g = saturn.trace(lambda x: (x * 1.7 + 0.3).exp(), saturn.spec((2048, 2048)))
    be = LLVMBackend()
    scheds = {s.name: s for s in be.schedules(g)}
    model = cost_model.CostModel("cpu", "dev", [], cost_model.fit_scales("cpu", []))
    trials = [TrialRecord(i, 0, "p", 1.0, g, scheds[name]) for i, name in enumerate(["default", "1-thread", "unrolled"])]
    _predict(trials, be, model, math.inf)
    from backends.llvm.runtime import cpu_count
    if cpu_count() > 1:
        assert trials[1].predicted > 1.5 * trials[0].predicted
    assert trials[2].predicted == pytest.approx(trials[0].predicted)
