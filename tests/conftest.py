"""Shared test setup: the repository on sys.path and the Hypothesis profiles of the suite."""
from __future__ import annotations

import os
import sys

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Small example counts and no deadline: the suite shares two CPU cores, and the interpreter
# is numpy (first calls are slow). The default run is derandomized (the same examples every
# run, no example database), so a submission cannot fail on examples it did not touch.
# SATURN_HYPOTHESIS_PROFILE=thorough explores at random with ten times more examples (the
# fuzz runs, `saturn fuzz`, explore further still).
_common = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("default", max_examples=30, derandomize=True, database=None, **_common)
settings.register_profile("thorough", max_examples=300, **_common)
settings.load_profile(os.environ.get("SATURN_HYPOTHESIS_PROFILE", "default"))

# SATURN_HYPOTHESIS_SEED=N: the default profile's example counts, but examples drawn at random
# from seed N (no database), so runs with different seeds explore different examples and a
# failing seed reproduces. Unset (the default): derandomized as above.
_seed = os.environ.get("SATURN_HYPOTHESIS_SEED") or None
if _seed is not None:
    if not _seed.strip().lstrip("-").isdigit():
        raise pytest.UsageError(f"SATURN_HYPOTHESIS_SEED must be an integer, got {_seed!r}")
    settings.register_profile("seeded", max_examples=settings().max_examples, derandomize=False,
                              database=None, **_common)
    settings.load_profile("seeded")


def pytest_report_header(config):
    return f"hypothesis: SATURN_HYPOTHESIS_SEED={_seed}" if _seed is not None else "hypothesis: derandomized"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Give every hypothesis test the chosen seed (hypothesis's own `seed` decorator, applied
    here so no test has to name it)."""
    if _seed is None:
        return
    from hypothesis import seed as hypothesis_seed
    for item in items:
        fn = getattr(getattr(item, "obj", None), "__func__", getattr(item, "obj", None))
        if fn is not None and getattr(fn, "is_hypothesis_test", False):
            hypothesis_seed(int(_seed))(fn)


@pytest.fixture(scope="module")
def module_cache_dir(tmp_path_factory):
    """A fresh SATURN_CACHE_DIR shared by one test module (its compiles stay out of the user's cache)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("SATURN_CACHE_DIR", str(tmp_path_factory.mktemp("saturn-cache")))
    yield
    mp.undo()


@pytest.fixture(scope="session")
def cuda_backend():
    """The CUDA backend, or the test skipped with the reason it is unavailable (no pycuda,
    nvcc or device)."""
    from backends.cuda import CUDABackend
    be = CUDABackend()
    reason = be.unavailable_reason()
    if reason:
        pytest.skip(reason)
    return be
