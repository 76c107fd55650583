"""The search on the GPU: a verified, deterministic winner for softmax, layernorm and attention,
and a cache hit on the second compile. Runs only with -m gpu on a machine with CUDA."""
from __future__ import annotations

import numpy as np
import pytest

import compiler as saturn
from backends.base import BackendUnavailable
from compiler.explain_cli import workload
from ir.interpreter import evaluate

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name", ["softmax", "layernorm", "attention"])
def test_cuda_search_chooses_a_verified_deterministic_candidate(name, tmp_path):
    fn, specs = workload(name, "small")
    try:
        f = saturn.compile(fn, *specs, target="cuda", budget=10.0, quiet=True, cache=str(tmp_path))
    except BackendUnavailable as e:
        pytest.skip(str(e))
    assert f.result.winner.status == "chosen"
    assert all(t.reason for t in f.result.trials if t.status == "rejected")
    rng = np.random.default_rng(11)
    xs = [rng.standard_normal(s.shape).astype(s.dtype.np) for s in specs]
    a, b = np.array(f(*xs), copy=True), np.array(f(*xs), copy=True)
    assert a.tobytes() == b.tobytes()
    ref = evaluate(f.graph, xs)[0].astype(np.float64)
    assert np.max(np.abs(a - ref)) <= 1e-4 * np.max(np.abs(ref))
    g = saturn.compile(fn, *specs, target="cuda", quiet=True, cache=str(tmp_path))
    assert g.cache == "hit" and g(*xs).tobytes() == a.tobytes()
    assert "cache hit" in g.explain() and "generated code:" in g.explain()
