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

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import scipy

SCIPY_ROOT = Path(scipy.__file__).resolve().parent
TESTS = SCIPY_ROOT / "signal" / "tests" / "test_signaltools.py"
PLUGIN_DIR = Path(__file__).resolve().parents[1] / "scipy_suite"
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
    cmd = [sys.executable, "-m", "pytest", str(TESTS.relative_to(SCIPY_ROOT.parent)), "-q",
           "-p", "no:cacheprovider", "-p", "swap_plugin", "-k", SELECTION,
           "-o", "addopts=", "-W", "ignore::DeprecationWarning"]
    for name in DESELECT:
        cmd += ["--deselect", f"{TESTS.relative_to(SCIPY_ROOT.parent)}::{name}"]
    env = dict(os.environ, CUPYCONV_SCIPY_SAMPLE=str(SAMPLE), PYTHONDONTWRITEBYTECODE="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(PLUGIN_DIR),
                                                        os.environ.get("PYTHONPATH")])))
    env.pop("PYTEST_XDIST_WORKER", None)
    proc = subprocess.run(cmd, cwd=SCIPY_ROOT.parent, env=env, capture_output=True, text=True,
                          timeout=600)
    tail = proc.stdout[-6000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, f"SciPy's tests failed against cupyconv:\n{tail}"
    passed = re.search(r"(\d+) passed", proc.stdout)
    assert passed and int(passed.group(1)) > 1000, tail    # the selection really ran
    calls = dict(re.findall(r"(\w+)=(\d+)", proc.stdout.split("replaced scipy.signal:")[-1]))
    assert calls and all(int(n) > 0 for n in calls.values()), tail   # cupyconv's functions ran
    import cupyconv
    root = os.path.dirname(cupyconv.__file__)
    assert f"from {root} replaced" in proc.stdout, tail                 # this checkout's
