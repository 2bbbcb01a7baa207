"""SciPy's own tests of the functions cupyconv replaces, run against cupyconv.

A drop-in passes the peer's test suite: ``scipy/signal/tests/test_signaltools.py`` (shipped
in the SciPy wheel) runs in a child pytest with ``tests/scipy_suite/swap_plugin.py``, which
swaps every ``scipy.signal`` name cupyconv provides (``convolve``, ``correlate``,
``fftconvolve``, ``oaconvolve``, ``convolve2d``, ``correlate2d``, ``choose_conv_method``)
for cupyconv's, in the test module and on ``scipy.signal``.  The selection is every class
that tests one of those names; ``TestOAConvolve``'s ~11,000 generated size combinations
are sampled (one in ``SAMPLE``), and ``test_large_array`` (a 2**31-element stride trick,
34 s) is left out.  Skipped, with the reason, when the installed SciPy ships no tests.
"""
from __future__ import annotations

import pytest
import scipy

from scipy_suite.runner import run_scipy_tests, scipy_tests

TESTS = scipy_tests("signal/tests/test_signaltools.py")
#: Classes and functions of test_signaltools.py that test a name cupyconv provides.
SELECTION = ("TestConvolve or TestConvolve2d or TestCorrelate2d or TestFFTConvolve or "
             "TestOAConvolve or TestAllFreqConvolves or test_convolve_longdtype_input or "
             "TestCorrelateReal or TestCorrelate or TestCorrelateComplex or "
             "test_choose_conv_method")
#: Keep one in SAMPLE of TestOAConvolve's generated cases.
SAMPLE = 40
#: Left out: correct but slow (34 s of 2**31-element index arithmetic in convolve2d).
DESELECT = ("TestConvolve2d::test_large_array",)


def test_scipy_signaltools_pass_with_cupyconv():
    if not TESTS.exists():
        pytest.skip(f"the installed SciPy {scipy.__version__} ships no tests ({TESTS} is "
                    "missing; install a SciPy wheel with its test suite to run this)")
    run = run_scipy_tests(TESTS, "signal", selection=SELECTION, deselect=DESELECT,
                          env=dict(CUPYCONV_SCIPY_SAMPLE=str(SAMPLE)), expected_tests=1500)
    assert run.returncode == 0, f"SciPy's tests failed against cupyconv:\n{run.tail}"
    assert run.passed > 1000, run.tail                         # the selection really ran
    calls = run.calls("scipy.signal")
    assert calls and all(n > 0 for n in calls.values()), run.tail   # cupyconv's functions ran
    assert run.ran_this_checkout(), run.tail
