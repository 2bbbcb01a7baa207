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
    """Snapshot the settings of ``cupyconv.config`` (and the autotune cache) and restore them."""
    import cupyconv
    from cupyconv.dispatch import dispatcher

    saved = cupyconv.config.in_force._asdict()
    dispatcher.clear_cache()            # cached choices and autotuned winners
    try:
        yield cupyconv.config
    finally:
        for k, v in saved.items():
            setattr(cupyconv.config, k, v)
        dispatcher.clear_cache()


@pytest.fixture(scope="session", autouse=True)
def cupyconv_from_one_tree():
    """Fail if a test imported a ``cupyconv`` module from another checkout.

    An editable install of another worktree resolves submodules this tree
    does not have (a stale ``cupyconv._select``) from that tree, so a test
    of a removed module would silently test old code.
    """
    yield
    import cupyconv
    root = os.path.dirname(os.path.abspath(cupyconv.__file__))
    strays = sorted(name for name, mod in list(sys.modules.items())
                    if (name == "cupyconv" or name.startswith("cupyconv."))
                    and getattr(mod, "__file__", None)
                    and not os.path.abspath(mod.__file__).startswith(root + os.sep))
    if strays:
        pytest.fail(f"cupyconv modules imported from outside {root}: {strays}")
