"""Shared test setup: Hypothesis settings come from a profile, not from each test.

    HYPOTHESIS_PROFILE=ci    (default) 100 examples per test, stateful runs of 50 steps
    HYPOTHESIS_PROFILE=soak  5,000 examples, 200 steps: a long run (nightly, or before a
                             change to the tree or the policies lands)

No deadline in either: the machines share noisy CI cores, and timing is not what these
tests check.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow],
           "print_blob": True}
settings.register_profile("ci", max_examples=100, stateful_step_count=50, **_COMMON)
settings.register_profile("soak", max_examples=5_000, stateful_step_count=200, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
