"""A compiled function gives bit-identical outputs when run twice on the same inputs."""
from __future__ import annotations

import numpy as np
import pytest

import compiler as saturn
from backends.base import BackendUnavailable
from backends.reference import ReferenceBackend
from compiler.nn import attention


def _workloads():
    return [
        ("softmax", lambda x: x.softmax(-1), [saturn.spec((8, 100))]),
        ("layernorm", lambda x: x.layer_norm((64,)), [saturn.spec((8, 64))]),
        ("attention", attention, [saturn.spec((2, 16, 8))] * 3),
    ]


def _inputs(specs, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s.shape).astype(s.dtype.np) for s in specs]


def _check_bit_identical(f, specs):
    xs = _inputs(specs, 7)
    a = np.array(f(*[x.copy() for x in xs]), copy=True)  # copies: a reused output buffer must not
    b = np.array(f(*[x.copy() for x in xs]), copy=True)  # make the comparison pass by itself
    assert a.tobytes() == b.tobytes()
    assert np.all(np.isfinite(a))


@pytest.mark.parametrize("name,fn,specs", _workloads(), ids=[w[0] for w in _workloads()])
def test_searched_function_is_bit_identical_run_to_run(name, fn, specs):
    f = saturn.compile(fn, *specs, target="refsearch", backend=ReferenceBackend(), budget=1.0, quiet=True)
    _check_bit_identical(f, specs)


@pytest.mark.parametrize("name,fn,specs", _workloads(), ids=[w[0] for w in _workloads()])
def test_cpu_function_is_bit_identical_run_to_run(name, fn, specs, tmp_path):
    try:
        f = saturn.compile(fn, *specs, target="cpu", budget=1.0, quiet=True, cache=str(tmp_path), max_candidates=3)
    except BackendUnavailable as e:
        pytest.skip(str(e))
    _check_bit_identical(f, specs)
    g = saturn.compile(fn, *specs, target="cpu", quiet=True, cache=str(tmp_path))
    assert g.cache == "hit"
    xs = _inputs(specs, 9)
    assert f(*xs).tobytes() == g(*xs).tobytes()
