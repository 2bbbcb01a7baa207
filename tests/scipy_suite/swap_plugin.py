"""A pytest plugin that runs SciPy's own ``signal`` tests against cupyconv's functions.

Loaded with ``-p swap_plugin`` into a pytest run of
``scipy/signal/tests/test_signaltools.py`` (see ``tests/api/test_scipy_signaltools.py``):
every name cupyconv provides replaces SciPy's, both in the test module (which imported
them by name) and on ``scipy.signal`` (``signal.convolve(...)`` in a test body); SciPy's
own internals keep SciPy's functions.  ``CUPYCONV_SCIPY_SAMPLE`` keeps every n-th of the
~11,000 generated ``TestOAConvolve`` cases (the rest are the same code path on other
sizes), so the run fits the suite's time budget.
"""
from __future__ import annotations

import functools
import os

import cupyconv

#: scipy.signal names that cupyconv provides, swapped in.
SWAPPED = ("convolve", "correlate", "fftconvolve", "oaconvolve", "convolve2d", "correlate2d",
           "choose_conv_method")


#: calls per swapped name, reported at the end (evidence the run used cupyconv's functions).
CALLS = dict.fromkeys(SWAPPED, 0)


def _counted(name):
    fn = getattr(cupyconv, name)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        CALLS[name] += 1
        return fn(*args, **kwargs)
    return wrapper


def pytest_collection_modifyitems(session, config, items):
    import scipy.signal

    every = int(os.environ.get("CUPYCONV_SCIPY_SAMPLE", "1"))
    kept, seen, modules = [], 0, set()
    for item in items:
        if "TestOAConvolve" in item.nodeid:
            seen += 1
            if (seen - 1) % every:
                continue
        kept.append(item)
        modules.add(item.module)
    items[:] = kept
    for name in SWAPPED:
        ours = _counted(name)
        setattr(scipy.signal, name, ours)
        for module in modules:
            if hasattr(module, name):
                setattr(module, name, ours)


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(
        f"cupyconv {cupyconv.__version__} from {os.path.dirname(cupyconv.__file__)} replaced "
        "scipy.signal: " + ", ".join(f"{name}={n}" for name, n in CALLS.items()) + " calls")
