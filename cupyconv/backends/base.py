"""The interface every backend implements, and the error of running out of memory.

A backend is one object (:class:`Backend`) that says what it can run for a
problem and why not (``can_implement``), how much workspace an algorithm
needs, how long it predicts it to take, and runs it.  The dispatcher
(:mod:`cupyconv.dispatch`) is the only caller; it owns the choice.
"""
from __future__ import annotations

import abc
import functools
import contextlib
import math
import os
from typing import Dict, Iterable, Tuple

import numpy as np

__all__ = ["Backend", "OutOfMemoryError", "host_available_memory"]


class OutOfMemoryError(MemoryError):
    """An algorithm's workspace could not be allocated; the message states the bytes."""


def host_available_memory() -> int:
    """Bytes of host memory available now (``MemAvailable``; free pages elsewhere)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 2**63 - 1


class Backend(abc.ABC):
    """What the dispatcher needs from a backend.

    Attributes
    ----------
    name : str
        ``"numpy"``, ``"cuda"`` or ``"emulated"``.
    xp : module
        Array module of its arrays (NumPy or CuPy).
    """

    name: str
    xp: object

    @abc.abstractmethod
    def can_implement(self, problem, algorithm) -> Tuple[bool, str]:
        """``(True, "")`` or ``(False, reason)`` for one problem (any op)."""

    @abc.abstractmethod
    def workspace_bytes(self, problem, algorithm, workspace_limit=None) -> int:
        """Extra memory ``algorithm`` allocates for ``problem`` under the limit."""

    @abc.abstractmethod
    def min_workspace_bytes(self, problem, algorithm) -> int:
        """The least workspace ``algorithm`` can run in (chunking as far as it can)."""

    @abc.abstractmethod
    def predict_times(self, problem, names: Iterable[str]) -> Dict[str, float]:
        """Predicted seconds per algorithm (the cost model)."""

    @abc.abstractmethod
    def default_workspace_limit(self) -> int:
        """The workspace limit when neither the call nor ``config`` gives one."""

    @abc.abstractmethod
    def available_memory(self) -> int:
        """Bytes the backend can still allocate (host or device)."""

    @abc.abstractmethod
    def run(self, problem, algorithm, operands, workspace_limit, stats=None):
        """Compute ``problem``'s result array (logical channels-first)."""

    def host_program(self, problem, algorithm, workspace_limit):
        """The :class:`~cupyconv._kernels.program.Program` that computes ``algorithm`` on
        the host (operands ``activation``, ``filter``), or ``None`` when ``run`` does."""
        return None

    def compile_refusal(self, problem, algorithm) -> str:
        """Why a call running ``algorithm`` on ``problem`` cannot be a compiled call
        (``""`` when it can): the algorithm does work outside a launch program."""
        return f"the {self.name} backend runs no launch programs"

    def scan(self, arrays):
        """The data rules' one read of ``arrays`` (a call's operands, at most three, one
        dtype): a :class:`~cupyconv._kernels.scan_launch.ScanResult`, whether each is
        finite and its largest magnitude (integer data).  On the host by default
        (:func:`~cupyconv.backends.arrays.host_scan`)."""
        from .arrays import host_scan
        return host_scan(arrays)

    def check(self, arrays, decide, warns=False):
        """``decide(self.scan(arrays))``: a decision on the data that a compiled call may
        replay where the backend runs it as a program step (the CUDA path: one
        ``program.Check``); here on the host: on NumPy arrays a guard of the call being
        recorded (``program.guard``: a compiled call replays while the scan decides as it
        did, a warning included), else the call takes the normal path.
        ``warns``: the decision only warns (a plan's replay skips it)."""
        from .._kernels import program
        outcome = decide(self.scan(arrays))
        if all(type(a) is np.ndarray for a in arrays):    # a compiled call re-checks it
            program.guard(functools.partial(_rescan, self.scan, decide), arrays, outcome)
        else:
            program.host_read("the call scans its operands on the host", *arrays)
        return outcome

    def rounds_tf32(self, problem, algorithm) -> bool:
        """Whether ``algorithm`` rounds its operands to TF32 itself under
        ``precision="tf32"`` (the dispatcher then hands it the unrounded ones); default
        False: the dispatcher rounds them."""
        return False

    def prepare_filter(self, problem, algorithm, w):
        """``w`` (the channels-first logical view :meth:`prepare` made) prepared once for
        repeated forward calls of ``problem`` on ``algorithm`` (frozen weights of a plan or
        ``ConvOperator``): a device copy in the layout and rounding the backend's kernels
        read, which later calls take as it is; default ``w``."""
        return w

    def data_ok(self, problem, algorithm, operands, slack=math.inf) -> Tuple[bool, str]:
        """``(True, "")`` when ``algorithm`` can run on these operands' values (an
        algorithm whose applicability depends on the data, such as ``separable``, says
        why not); the dispatcher asks before ``auto`` runs it.

        ``slack``: how many times its data-free predicted time ``algorithm`` may take on
        these values and still be the best candidate (``separable`` runs a kernel that
        is a sum of ``r`` outer products ``r`` times; infinite when nothing competes)."""
        return True, ""

    def call_scope(self):
        """A context around one dispatched call (its data checks and its run): the CUDA
        backend copies a small device array it reads on the host once per call inside it.
        Default: nothing."""
        return contextlib.nullcontext()

    def prepare(self, problem, operands):
        """``(problem, operands)`` as the backend's kernels take them (default: as is)."""
        return problem, operands

    def free_cached(self) -> None:
        """Release cached memory (before falling back after an out-of-memory)."""

    def synchronize(self) -> None:
        """Wait for queued work (timing)."""


def _rescan(scan, decide, *arrays):
    """A :meth:`Backend.check`'s decision on new arrays (a compiled call's guard)."""
    return decide(scan(list(arrays)))
