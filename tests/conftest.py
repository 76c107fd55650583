"""Shared test setup: the repository on sys.path and one Hypothesis profile for the suite."""
from __future__ import annotations

import os
import sys

from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Small example counts and no deadline: the suite shares two CPU cores, and the interpreter
# is numpy (first calls are slow). SATURN_HYPOTHESIS_PROFILE=thorough runs ten times more.
settings.register_profile("default", max_examples=30, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("thorough", max_examples=300, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("SATURN_HYPOTHESIS_PROFILE", "default"))
