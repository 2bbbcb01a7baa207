"""How long the suite's child processes may run: derived from their work and the machine.

A test that starts a child process (a compile, an ASan run, SciPy's own test modules, a
wheel build) needs a limit only to turn a hang into a failure that shows the child's
output.  It must never fail because the machine is slow or shared: a fixed limit did
(issue 28: the ASan test failed on its limit on a loaded 2-core machine).  So the limit of
a child is counted from its work::

    (start_s + units * per_unit_s) * SLACK * load_factor()

``units`` is what the caller knows the child will do (kernels it compiles, tests it runs,
commands), ``start_s`` and ``per_unit_s`` are upper estimates for the idle 2-core
development VM (an interpreter start with NumPy/SciPy imported is ~1-2 s there; the
figures at each call say what they cover), ``SLACK`` covers a slower machine, and
:func:`load_factor` the machine's load when the child starts (a shared machine runs the
child proportionally slower).
"""
from __future__ import annotations

import os

__all__ = ["SLACK", "load_factor", "child_limit"]

#: How much slower than the development VM, idle, a machine may be before a child's limit
#: trips (CI's runners are of the same class; 4x leaves room for a slow one).
SLACK = 4.0


def load_factor() -> float:
    """The one-minute load average per core, when above 1 (else 1)."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):       # not on every platform
        return 1.0
    return max(1.0, load / (os.cpu_count() or 1))


def child_limit(units: float = 1, per_unit_s: float = 0.0, start_s: float = 30.0) -> float:
    """Seconds a child process doing ``units`` of work may run (see the module docstring)."""
    if units < 0 or per_unit_s < 0 or start_s < 0:
        raise ValueError("work figures are non-negative")
    return (start_s + units * per_unit_s) * SLACK * load_factor()
