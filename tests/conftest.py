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


@pytest.fixture(scope="module")
def module_cache_dir(tmp_path_factory):
    """A fresh SATURN_CACHE_DIR shared by one test module (its compiles stay out of the user's cache)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("SATURN_CACHE_DIR", str(tmp_path_factory.mktemp("saturn-cache")))
    yield
    mp.undo()
