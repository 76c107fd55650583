"""compile(cluster=Ray(...)) on a local Ray instance of a few worker processes: the same search
through Ray actors (build actors, one actor per fake device, the home worker here), a worker
killed mid-search, and a candidate that crashes its actor. Skipped without Ray (the
`distributed` extra)."""
from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import compiler as saturn  # noqa: E402
from compiler.cluster import Ray  # noqa: E402
from compiler.cluster.fake import FakeDevices  # noqa: E402
from test_cluster import SPEC, _compile, _outputs, candidates, softmax  # noqa: E402,F401


@pytest.fixture(scope="module", autouse=True)
def ray_instance():
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


CLUSTER = Ray(build_workers=2)


def test_a_search_through_ray_verifies_the_same_answer_as_the_default_path(candidates):
    local = _compile(candidates, None)
    f = _compile(candidates, CLUSTER)
    log = f.result.cluster
    assert log.name.startswith("ray: 2 build actors, 3 device actor(s)")
    assert log.timing == ["device 0", "device 1"] and log.identities["device 2"].model == "fake-B"
    assert {d for labels in log.timed_on.values() for d in labels} >= {"device 0", "device 1"}
    # the home worker is not one of the actors: the winner is always re-timed here
    w = f.result.winner
    assert log.timed_on[w.id][-1] == "this host"
    assert any(f"trial {w.id} re-timed on the device that runs it (this host" in n for n in f.result.notes)
    got, ref = _outputs(f)
    want, _ = _outputs(local)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_an_actor_killed_from_outside_mid_search_loses_its_candidate_not_the_search(candidates):
    from compiler.cluster.hosts import _OPEN
    # slow builds (the fake devices' builder sleeps) keep the build actors busy long enough
    be = FakeDevices(("fake-A", "fake-A", "fake-B"), build_delay=0.5)
    killed = []

    def kill_a_busy_builder():
        deadline = time.time() + 60
        while time.time() < deadline and not killed:
            for c in list(_OPEN.values()):
                for w in c.builders.workers if c.key[0] == "ray" else ():
                    if w is not None and w.ref is not None:   # serving a request now
                        _, pid = ray.get(w.who)
                        os.kill(pid, signal.SIGKILL)
                        killed.append(pid)
                        return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_a_busy_builder)
    killer.start()
    f = _compile(candidates, CLUSTER, backend=be)
    killer.join()
    assert killed, "no build actor was seen busy"
    lost = f.result.cluster.lost
    assert lost and "lost build worker" in lost[0] and f"pid {killed[0]}" in lost[0] and "reassigned" in lost[0]
    assert lost[0] in f.explain()
    assert f.result.winner is not None
    got, ref = _outputs(f)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_a_crashing_candidate_kills_two_actors_and_is_rejected():
    from test_search import Cand as SearchCand, FakeBackend
    f = saturn.compile(softmax, SPEC, target="fake", backend=FakeBackend(("crash", "ok")), cluster=CLUSTER,
                       candidates=[SearchCand(saturn.trace(softmax, SPEC), 1.0, "original program")], budget=20.0,
                       timeout=10.0, max_schedules=2, quiet=True, cache=False)
    by = {t.schedule: t for t in f.result.trials}
    assert by["crash"].status == "rejected" and "Ray actor died" in by["crash"].reason
    assert by["ok"].status == "chosen"
