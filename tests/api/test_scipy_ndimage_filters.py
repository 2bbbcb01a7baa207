"""SciPy's own ``scipy/ndimage/tests/test_filters.py``, run against ``cupyconv.ndimage``.

Every name of ``cupyconv.ndimage.__all__`` (the linear filters: ``correlate``,
``convolve``, the 1-D ones, Gaussian, uniform, and ``sobel``, ``prewitt``, ``laplace``,
``generic_laplace``, ``gaussian_laplace``, ``generic_gradient_magnitude``,
``gaussian_gradient_magnitude``) replaces SciPy's on ``scipy.ndimage`` before the test
module is imported (so the functions its ``parametrize`` lists hold are ours too), in a
child pytest with ``tests/scipy_suite/swap_plugin.py``.  The whole module runs (its other
filters, median and friends, stay SciPy's and pass as they would); it takes ~10 s.

The tests that fail are exactly :data:`EXPECTED_DEVIATIONS`, each a documented
extension: a test that starts passing, or a new failure, fails this test.
"""
from __future__ import annotations

import pytest
import scipy

import cupyconv.ndimage
from scipy_suite.runner import run_scipy_tests, scipy_tests

TESTS = scipy_tests("ndimage/tests/test_filters.py")
MODULE = "scipy/ndimage/tests/test_filters.py"

#: SciPy's tests that fail against cupyconv by design, with the reason.
EXPECTED_DEVIATIONS = {
    f"{MODULE}::test_gaussian_filter_float16[numpy]":
        "SciPy raises RuntimeError for float16 input; cupyconv.ndimage accepts it and "
        "computes in float32 (an extension, docs/semantics.md 'cupyconv.ndimage')",
}


def test_scipy_ndimage_filters_pass_with_cupyconv():
    if not TESTS.exists():
        pytest.skip(f"the installed SciPy {scipy.__version__} ships no tests ({TESTS} is "
                    "missing; install a SciPy wheel with its test suite to run this)")
    run = run_scipy_tests(TESTS, "ndimage", expected_tests=2500)
    assert run.failed == sorted(EXPECTED_DEVIATIONS), (
        f"failed beyond the expected deviations: "
        f"{sorted(set(run.failed) - set(EXPECTED_DEVIATIONS))}; expected but passed: "
        f"{sorted(set(EXPECTED_DEVIATIONS) - set(run.failed))}\n{run.tail}")
    assert run.passed > 2000, run.tail                          # the module really ran
    calls = run.calls("scipy.ndimage")
    assert sorted(calls) == sorted(cupyconv.ndimage.__all__), run.tail
    assert all(n > 0 for n in calls.values()), run.tail        # each of ours was called
    assert run.ran_this_checkout(), run.tail
