"""Run one of SciPy's own test modules in a child pytest with :mod:`swap_plugin`.

Shared by ``tests/api/test_scipy_signaltools.py`` and
``tests/api/test_scipy_ndimage_filters.py``.  The child imports this checkout's
``cupyconv`` (the repository root leads ``PYTHONPATH``) and runs in SciPy's
installation directory, as SciPy's tests expect; the tail of its report comes back
with the ids of the tests that failed and the plugin's per-name call counts.
"""
from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import scipy

from limits import child_limit

SCIPY_ROOT = Path(scipy.__file__).resolve().parent
PLUGIN_DIR = Path(__file__).resolve().parent
REPO_ROOT = PLUGIN_DIR.parents[1]


@dataclasses.dataclass
class SuiteRun:
    """What the child pytest reported."""

    returncode: int
    stdout: str
    tail: str

    @property
    def passed(self):
        found = re.search(r"(\d+) passed", self.stdout)
        return int(found.group(1)) if found else 0

    @property
    def failed(self):
        """The ids (``path::test[params]``) of the tests that failed or errored."""
        return sorted(set(re.findall(r"^(?:FAILED|ERROR) (\S+)", self.stdout, re.M)))

    def calls(self, scipy_module):
        """Calls per swapped name, from the plugin's summary line."""
        line = self.stdout.split(f"replaced {scipy_module}:")[-1].splitlines()[0]
        return {name: int(n) for name, n in re.findall(r"(\w+)=(\d+)", line)}

    def ran_this_checkout(self):
        import cupyconv
        return f"from {os.path.dirname(cupyconv.__file__)} replaced" in self.stdout


def scipy_tests(relative):
    """The path of one of SciPy's test modules (it may be absent from a SciPy install)."""
    return SCIPY_ROOT / relative


def run_scipy_tests(tests, swap, *, selection=None, deselect=(), env=None, expected_tests=1000):
    """Run SciPy's test module `tests` with `swap` (``"signal"`` or ``"ndimage"``)
    swapped for cupyconv's functions; `selection` is a ``-k`` expression, `deselect`
    test ids relative to the module; `expected_tests` (about how many run) sizes the
    child's time limit (``limits.child_limit``: ~0.1 s a test here, idle)."""
    rel = str(Path(tests).relative_to(SCIPY_ROOT.parent))
    cmd = [sys.executable, "-m", "pytest", rel, "-q", "-rfE", "--tb=line",
           "-p", "no:cacheprovider", "-p", "swap_plugin", "-o", "addopts=",
           "-W", "ignore::DeprecationWarning"]
    if selection:
        cmd += ["-k", selection]
    for name in deselect:
        cmd += ["--deselect", f"{rel}::{name}"]
    child = dict(os.environ, CUPYCONV_SWAP=swap, PYTHONDONTWRITEBYTECODE="1", **(env or {}))
    child["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), str(PLUGIN_DIR),
                                                        os.environ.get("PYTHONPATH")]))
    child.pop("PYTEST_XDIST_WORKER", None)
    proc = subprocess.run(cmd, cwd=SCIPY_ROOT.parent, env=child, capture_output=True,
                          text=True, timeout=child_limit(expected_tests, 0.1, 30.0))
    return SuiteRun(proc.returncode, proc.stdout, proc.stdout[-6000:] + proc.stderr[-2000:])
