"""The interface every backend implements, its algorithms' interface, and the error of
running out of memory.

A backend is one object (:class:`Backend`) with a table of algorithm classes
(:attr:`Backend.ALGORITHM_TABLE`, one :class:`Algorithm` subclass per ``method=`` name it
runs).  Each algorithm says whether it can run a problem and why not
(``can_implement``), how much workspace it needs, how long it predicts it to take, and
runs it; the backend's methods of the same names hand each question to the algorithm
named.  The dispatcher (:mod:`cupyconv.dispatch`) is the only caller; it owns the choice.
"""
from __future__ import annotations

import abc
import functools
import contextlib
import math
import os
from typing import Dict, Iterable, Optional, Tuple

import numpy as np

from .._kernels import program
from .._vocabulary import ALGORITHMS

__all__ = ["Algorithm", "Backend", "OutOfMemoryError", "host_available_memory"]


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


class Algorithm:
    """One algorithm of one backend: an entry of the backend's table, made once per
    backend object (``self.backend``).  Subclasses set :attr:`name` and override what
    differs; the defaults are an algorithm without workspace, replayable conditions or
    data rules."""

    #: ``method=`` name (a key of ``_vocabulary.ALGORITHMS``).
    name = ""

    #: Whether its forward sums start from +0.0, so that a zero result is +0.0 even where
    #: every product is -0.0 (the CUDA kernels' accumulators); False where a sum may
    #: start from a product (the CPU tap loop keeps that sign) or where a library sums.
    plus_zero_sums = False

    def __init__(self, backend, name=None):
        self.backend = backend
        self.name = name or self.name
        self.spec = ALGORITHMS[self.name]

    def can_implement(self, problem) -> Tuple[bool, str]:
        """``(True, "")`` or ``(False, reason)``: the vocabulary's ops and backends, then
        :meth:`applies`.  O(rank): no loop over sizes."""
        if (problem.op, self.backend.name) in self.spec.served:
            return self.applies(problem)
        return False, self.spec.refusal(problem.op, self.backend.name)

    def applies(self, problem) -> Tuple[bool, str]:
        """The algorithm's own checks of a problem it serves."""
        return True, ""

    def workspace(self, problem, workspace_limit=None) -> int:
        """Bytes it allocates besides the result under ``workspace_limit``."""
        return 0

    def min_workspace(self, problem) -> int:
        """The least workspace it can run in (chunking as far as it can)."""
        return self.workspace(problem)

    def predict(self, problem) -> float:
        """Predicted seconds (the backend's cost model)."""
        raise NotImplementedError

    def assess(self, problem, workspace_limit) -> Tuple[Optional[str], int, int, float]:
        """See :meth:`Backend.assess`."""
        ok, why = self.can_implement(problem)
        if not ok:
            return why, 0, 0, math.inf
        return (None, self.min_workspace(problem), self.workspace(problem, workspace_limit),
                self.predict(problem))

    def floor(self, problem) -> float:
        """Seconds that :meth:`predict` never goes below for any problem (its fixed
        cost), read without deriving any geometry: the chooser prices the candidates
        cheapest floor first and leaves those whose floor already loses unpriced."""
        return 0.0

    def run(self, problem, operands, workspace_limit, stats=None):
        """The result array (logical channels-first)."""
        raise NotImplementedError

    def host_program(self, problem, workspace_limit):
        """See :meth:`Backend.host_program`."""
        return None

    def compile_refusal(self, problem) -> str:
        """See :meth:`Backend.compile_refusal`."""
        return f"the {self.backend.name} backend runs no launch programs"

    def data_ok(self, problem, operands, slack=math.inf) -> Tuple[bool, str]:
        """See :meth:`Backend.data_ok`."""
        return True, ""

    def rounds_tf32(self, problem) -> bool:
        """See :meth:`Backend.rounds_tf32`."""
        return False

    def prepare_filter(self, problem, w):
        """See :meth:`Backend.prepare_filter`."""
        return w


class Backend(abc.ABC):
    """What the dispatcher needs from a backend.

    Attributes
    ----------
    name : str
        ``"numpy"``, ``"cuda"`` or ``"emulated"``.
    xp : module
        Array module of its arrays (NumPy or CuPy).
    ALGORITHM_TABLE : tuple of Algorithm subclasses
        The algorithms it runs, in the vocabulary's order; the per-algorithm methods
        below hand the question to the instance in :attr:`algorithms`.
    """

    name: str
    xp: object
    ALGORITHM_TABLE: Tuple[type, ...] = ()
    _floors: Dict[str, float]       # time_floors' table, set on its first call

    @functools.cached_property
    def algorithms(self) -> Dict[str, Algorithm]:
        """``name -> Algorithm`` of this backend object."""
        return {cls.name: cls(self) for cls in self.ALGORITHM_TABLE}

    def algorithm(self, name) -> Algorithm:
        """The table's entry for ``name`` (the defaults of :class:`Algorithm` for a name
        outside the table)."""
        entry = self.algorithms.get(name)
        return Algorithm(self, name) if entry is None else entry

    def algorithm_names(self) -> Tuple[str, ...]:
        """The names the chooser asks, in the vocabulary's order (those outside the table
        are declined with the vocabulary's reason)."""
        return tuple(ALGORITHMS)

    def can_implement(self, problem, algorithm) -> Tuple[bool, str]:
        """``(True, "")`` or ``(False, reason)`` for one problem (any op)."""
        return self.algorithm(algorithm).can_implement(problem)

    def workspace_bytes(self, problem, algorithm, workspace_limit=None) -> int:
        """Extra memory ``algorithm`` allocates for ``problem`` under the limit."""
        return self.algorithm(algorithm).workspace(problem, workspace_limit)

    def min_workspace_bytes(self, problem, algorithm) -> int:
        """The least workspace ``algorithm`` can run in (chunking as far as it can)."""
        return self.algorithm(algorithm).min_workspace(problem)

    def predict_times(self, problem, names: Iterable[str]) -> Dict[str, float]:
        """Predicted seconds per algorithm (the cost model)."""
        return {name: self.algorithm(name).predict(problem) for name in names}

    def assess(self, problem, algorithm,
               workspace_limit) -> Tuple[Optional[str], int, int, float]:
        """``(reason, least workspace, workspace under the limit, predicted seconds)``:
        the chooser's four questions about one candidate in one call (``reason``: why
        it cannot run ``problem``, the rest then not asked; ``None`` when it can): the
        :meth:`Algorithm.assess` of the table's entry, or where a subclass replaces one of
        the four methods, of an entry that asks those methods."""
        if _replaced(type(self)):
            return _Asked(self, algorithm).assess(problem, workspace_limit)
        return self.algorithm(algorithm).assess(problem, workspace_limit)

    def assessors(self) -> Dict[str, Algorithm]:
        """The table entries whose :meth:`Algorithm.assess` is this backend's
        :meth:`assess` (the chooser asks them directly): :attr:`algorithms`, or ``{}``
        where a subclass replaces :meth:`assess` or one of its four questions."""
        return {} if _replaced(type(self), _QUESTIONS + ("assess",)) else self.algorithms

    def pricing(self, problem) -> Tuple[Tuple[str, ...], Dict[str, float],
                                        Dict[str, Algorithm]]:
        """What a choice starts from, in one call: :meth:`algorithm_names`, their
        :meth:`time_floors` and :meth:`assessors`."""
        names = self.algorithm_names()
        return names, self.time_floors(problem, names), self.assessors()

    def time_floors(self, problem, names: Iterable[str]) -> Dict[str, float]:
        """Per algorithm, seconds its predicted time never goes below
        (:meth:`Algorithm.floor`); 0 for all where :meth:`predict_times` is not the
        algorithms' own (a backend replacing the cost model bounds nothing).  A floor holds
        for every problem, so the table's are read once per backend (one added to the
        table later is bounded by 0)."""
        known = self.__dict__.get("_floors")
        if known is None:
            known = {}
            if not _replaced(type(self), ("predict_times",)):
                for name, entry in self.algorithms.items():
                    known[name] = entry.floor(problem)
            self._floors = known
        return {name: known.get(name, 0.0) for name in names}

    @abc.abstractmethod
    def default_workspace_limit(self) -> int:
        """The workspace limit when neither the call nor ``config`` gives one."""

    @abc.abstractmethod
    def available_memory(self) -> int:
        """Bytes the backend can still allocate (host or device)."""

    def run(self, problem, algorithm, operands, workspace_limit, stats=None):
        """Compute ``problem``'s result array (logical channels-first)."""
        return self.algorithm(algorithm).run(problem, operands, workspace_limit, stats)

    def host_program(self, problem, algorithm, workspace_limit):
        """The :class:`~cupyconv._kernels.program.Program` that computes ``algorithm`` on
        the host (its operands the operation's GEMM roles ``a`` and ``b``, named as in
        :data:`~cupyconv.core.roles.ROLES`), or ``None`` when ``run`` does."""
        return self.algorithm(algorithm).host_program(problem, workspace_limit)

    def compute(self, problem, algorithm, operands, workspace_limit, stats=None):
        """``algorithm``'s result: its :meth:`host_program` executed (what a compiled call
        replays), else :meth:`run` (also where ``stats`` asks for the run's figures)."""
        host = self.host_program(problem, algorithm, workspace_limit)
        if host is None or stats is not None:
            return self.run(problem, algorithm, operands, workspace_limit, stats)
        return program.execute(host, self.xp, {
            name: getattr(operands, name) for name in host.operands})[host.result]

    def compile_refusal(self, problem, algorithm) -> str:
        """Why a call running ``algorithm`` on ``problem`` cannot be a compiled call
        (``""`` when it can): the algorithm does work outside a launch program."""
        return self.algorithm(algorithm).compile_refusal(problem)

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
        return self.algorithm(algorithm).rounds_tf32(problem)

    def plus_zero_sums(self, algorithm) -> bool:
        """Whether ``algorithm``'s forward sums start from +0.0
        (:attr:`Algorithm.plus_zero_sums`): its zero results are +0.0 already."""
        return self.algorithm(algorithm).plus_zero_sums

    def prepare_filter(self, problem, algorithm, w):
        """``w`` (the channels-first logical view :meth:`prepare` made) prepared once for
        repeated forward calls of ``problem`` on ``algorithm`` (frozen weights of a plan or
        ``ConvOperator``): a device copy in the layout and rounding the backend's kernels
        read, which later calls take as it is; default ``w``."""
        return self.algorithm(algorithm).prepare_filter(problem, w)

    def data_ok(self, problem, algorithm, operands, slack=math.inf) -> Tuple[bool, str]:
        """``(True, "")`` when ``algorithm`` can run on these operands' values (an
        algorithm whose applicability depends on the data, such as ``separable``, says
        why not); the dispatcher asks before ``auto`` runs it.

        ``slack``: how many times its data-free predicted time ``algorithm`` may take on
        these values and still be the best candidate (``separable`` runs a kernel that
        is a sum of ``r`` outer products ``r`` times; infinite when nothing competes)."""
        return self.algorithm(algorithm).data_ok(problem, operands, slack)

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


#: The per-algorithm questions a backend answers by asking its table.
_QUESTIONS = ("can_implement", "min_workspace_bytes", "workspace_bytes", "predict_times")


class _Asked(Algorithm):
    """Algorithm ``name`` answering :meth:`Algorithm.assess`'s questions with its backend's
    methods (:data:`_QUESTIONS`), where a subclass replaces one (:func:`_replaced`)."""

    def can_implement(self, problem):
        return self.backend.can_implement(problem, self.name)

    def min_workspace(self, problem):
        return self.backend.min_workspace_bytes(problem, self.name)

    def workspace(self, problem, workspace_limit=None):
        return self.backend.workspace_bytes(problem, self.name, workspace_limit)

    def predict(self, problem):
        return self.backend.predict_times(problem, (self.name,))[self.name]


def _replaced(cls, names=_QUESTIONS):
    """Whether ``cls`` answers one of ``names`` otherwise than :class:`Backend` (a scripted
    backend, a test's stubbed cost model): its table's answers then do not stand for it."""
    for name in names:
        if getattr(cls, name) is not getattr(Backend, name):
            return True
    return False


def _rescan(scan, decide, *arrays):
    """A :meth:`Backend.check`'s decision on new arrays (a compiled call's guard)."""
    return decide(scan(list(arrays)))
