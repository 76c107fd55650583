"""compile(target="cuda", cluster="local") on the GPUs of this host: one pinned timing worker per
GPU, each naming its identity (model, driver, clocks), a verified winner. Runs only with -m gpu."""
from __future__ import annotations

import numpy as np
import pytest

import compiler as saturn
from backends.base import BackendUnavailable
from compiler.cluster.devices import device_count
from compiler.explain_cli import workload
from ir.interpreter import evaluate

pytestmark = pytest.mark.gpu


def test_cuda_search_on_the_local_cluster_times_on_identified_gpus(tmp_path):
    fn, specs = workload("softmax", "small")
    try:
        f = saturn.compile(fn, *specs, target="cuda", budget=10.0, quiet=True, cache=str(tmp_path), cluster="local")
    except BackendUnavailable as e:
        pytest.skip(str(e))
    from backends import get_backend
    log = f.result.cluster
    assert len(log.identities) == device_count(get_backend("cuda"))
    home = log.identities["device 0"]
    assert home.kind == "cuda" and home.model and home.driver and home.clocks
    assert log.timing and log.timing[0] == "device 0"
    assert all(log.identities[d] == home for d in log.timing)
    assert f.result.winner.status == "chosen"
    rng = np.random.default_rng(11)
    xs = [rng.standard_normal(s.shape).astype(s.dtype.np) for s in specs]
    out = np.array(f(*xs), copy=True)
    ref = evaluate(f.graph, xs)[0].astype(np.float64)
    assert np.max(np.abs(out - ref)) <= 1e-4 * np.max(np.abs(ref))
    assert "timing on" in f.explain()
