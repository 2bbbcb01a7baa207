"""Shared pytest configuration for every cupyconv test directory.

Hypothesis profiles (chosen with ``CUPYCONV_HYPOTHESIS_PROFILE``, default
``ci``), in the style of ``scipy/conftest.py``:

``ci``
    Deterministic: ``derandomize=True`` (examples derived from the test
    itself), no example database, no deadline (CI machines are noisy) and a
    bounded ``max_examples`` so the suite has a predictable runtime.
``dev``
    Randomised and larger, with the local example database, for hunting bugs
    on a workstation: ``CUPYCONV_HYPOTHESIS_PROFILE=dev pytest tests``.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

# ``tests/helpers.py`` is imported as ``helpers`` by every test directory.
sys.path.insert(0, os.path.dirname(__file__))

settings.register_profile(
    "ci", derandomize=True, database=None, deadline=None, max_examples=40,
    print_blob=True, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "dev", max_examples=300, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("CUPYCONV_HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def rng(request):
    """A NumPy generator seeded from the test's node id (stable across runs)."""
    seed = sum(map(ord, request.node.nodeid)) + 12345
    return np.random.default_rng(seed)


@pytest.fixture
def restore_config():
    """Snapshot ``cupyconv.config`` (and the autotune cache) and restore it."""
    import cupyconv
    from cupyconv import _select

    saved = {k: v for k, v in vars(cupyconv.config).items() if not k.startswith("_")}
    _select.clear_cache()
    try:
        yield cupyconv.config
    finally:
        for k, v in saved.items():
            setattr(cupyconv.config, k, v)
        _select.clear_cache()
