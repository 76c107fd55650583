"""compile(cluster="local"): builds and verification on a pool of build workers, timing on one
pinned worker per device, only devices of the home device's identity compared, the winner
re-timed at home, lost workers' candidates reassigned. Devices are faked on the CPU
(compiler.cluster.fake): each timing worker claims the model its device index names."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import compiler as saturn
from compiler.cluster import Local, Ray, check_cluster
from compiler.cluster.fake import FakeDevices
from compiler.errors import OptionError, SaturnError
from compiler.explore import explore
from ir.interpreter import evaluate

SPEC = saturn.spec((8, 33))


def softmax(x):
    return x.softmax(-1)


class Cand:
    def __init__(self, graph, cost, description):
        self.graph, self.cost, self.description = graph, cost, description


@pytest.fixture(scope="module")
def candidates():
    """The e-graph's programs for softmax, found once (both paths search the same ones)."""
    g = saturn.trace(softmax, SPEC)
    return [Cand(c.graph, c.cost, c.description) for c in explore(g, max_candidates=3).candidates]


def _compile(candidates, cluster, backend=None, **kw):
    kw.setdefault("budget", 20.0)   # ample: the search ends once every trial is verified and timed
    kw.setdefault("max_trials", 6)
    kw.setdefault("max_schedules", 2)
    return saturn.compile(softmax, SPEC, target="cpu", backend=backend or FakeDevices(("fake-A", "fake-A", "fake-B")),
                          cluster=cluster, candidates=candidates, quiet=True, cache=False, **kw)


def _outputs(f):
    x = np.random.default_rng(3).standard_normal((8, 33)).astype(np.float32)
    return f(x), evaluate(f.graph, [x])[0]


@pytest.mark.parametrize("bad", ["lan", "ray:/h:1", "ray://host", "ray://:80", "ray://h:0", 3, Local(build_workers=-1)])
def test_a_bad_cluster_is_an_option_error_naming_the_forms(bad):
    with pytest.raises(OptionError, match="cluster"):
        saturn.compile(softmax, SPEC, cluster=bad, quiet=True)


def test_ray_without_ray_installed_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else object())
    with pytest.raises(SaturnError, match=r"saturn-tensor\[distributed\]"):
        check_cluster("ray://head:10001")


def test_cluster_specs_parse():
    assert check_cluster(None) is None
    assert check_cluster("local") == Local()
    if importlib.util.find_spec("ray") is not None:
        assert check_cluster("ray") == Ray()
        assert check_cluster("ray://head:10001") == Ray(address="ray://head:10001")


def test_a_cluster_needs_isolated_workers():
    with pytest.raises(OptionError, match="isolate"):
        saturn.compile(softmax, SPEC, cluster="local", isolate=False, quiet=True)


def test_local_cluster_builds_on_the_pool_times_on_matching_devices_and_agrees_with_the_default_path(candidates):
    local = _compile(candidates, None)
    f = _compile(candidates, Local(build_workers=2))
    log = f.result.cluster
    assert f.result.winner.status == "chosen"
    # the process pool: the first verification round gives each build worker a trial
    assert {t.worker for t in f.result.trials if t.status in ("timed", "chosen")} == {0, 1}
    # device 2 claims another model: it never times; both fake-A devices do
    assert log.identities["device 2"].model == "fake-B"
    assert log.timing == ["device 0", "device 1"]
    used = {d for labels in log.timed_on.values() for d in labels}
    assert used == {"device 0", "device 1"}
    assert any("device 2 is fake-B" in n for n in f.result.notes)
    # the winner is re-timed on device 0 exactly when it was timed elsewhere too
    w = f.result.winner
    retimed = any(f"trial {w.id} re-timed on the device that runs it" in n for n in f.result.notes)
    before = log.timed_on[w.id][:-1] if retimed else log.timed_on[w.id]   # a re-time is the last entry
    assert retimed == any(d != "device 0" for d in before)
    # the same verified answer as the default path's winner (which program won may be noise)
    got, ref = _outputs(f)
    want, _ = _outputs(local)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert "timing requests per device" in f.explain()


def test_a_build_worker_lost_mid_search_loses_only_its_candidate_once(candidates, tmp_path):
    be = FakeDevices(("fake-A", "fake-A"), lose_once=("build", str(tmp_path / "lost")))
    f = _compile(candidates, Local(build_workers=2), backend=be)
    assert (tmp_path / "lost").exists()   # a build worker did die
    lost = f.result.cluster.lost
    assert len(lost) == 1 and "lost build worker" in lost[0] and "SIGKILL" in lost[0] and "reassigned" in lost[0]
    assert not [t for t in f.result.trials if "crashed" in t.reason]   # its candidate was verified elsewhere
    assert lost[0] in f.explain()
    got, ref = _outputs(f)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_a_timing_device_lost_mid_search_hands_its_candidate_to_another(candidates, tmp_path):
    be = FakeDevices(("fake-A", "fake-A"), lose_once=("time", str(tmp_path / "lost")))
    f = _compile(candidates, Local(build_workers=2), backend=be)
    lost = f.result.cluster.lost
    assert len(lost) == 1 and "lost device" in lost[0] and "while timing" in lost[0]
    assert not [t for t in f.result.trials if "failed while timing" in t.reason]
    assert f.result.winner is not None


def test_a_candidate_that_kills_every_worker_is_rejected_after_one_reassignment():
    from test_search import Cand as SearchCand, FakeBackend
    f = saturn.compile(softmax, SPEC, target="fake", backend=FakeBackend(("crash", "ok")), cluster=Local(build_workers=2),
                       candidates=[SearchCand(saturn.trace(softmax, SPEC), 1.0, "original program")], budget=20.0,
                       timeout=5.0, max_schedules=2, quiet=True, cache=False)
    by = {t.schedule: t for t in f.result.trials}
    assert by["crash"].status == "rejected" and "SIGSEGV" in by["crash"].reason
    assert len(f.result.cluster.lost) == 2 and "died again" in f.result.cluster.lost[1]
    assert by["ok"].status == "chosen"
