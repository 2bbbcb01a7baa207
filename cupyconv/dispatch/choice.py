"""The data-free choice of one problem on one backend, its candidates priced lazily.

The chooser asks each algorithm of the backend's table for a floor of its predicted
time (``Backend.time_floors``: a constant per algorithm, no geometry derived) and prices
the candidates (``Backend.assess``: ``can_implement``, workspace against the limit and
the memory, the cost model) cheapest floor first.  It stops once the best that fits is settled (predicted
faster than the floor of every candidate not asked yet, and within :data:`SLOW_SECONDS`:
no memory refusal can then arise from the others) and, when the best has a data rule
(``ALGORITHMS[name].needs``: its rule weighs it against the runner-up), the runner-up
too.  The algorithm to run (and that runner-up) are then exact, and a small problem
never builds Winograd's transforms or an FFT plan to be priced.
The rest of the ranking (``Choice.ranked``, ``times``, ``rejected``, ``by_workspace``)
is priced when first asked for, and is the ranking an eager chooser gives: the
candidates that fit, by predicted time, ties in the vocabulary's order.
"""
from __future__ import annotations

import math
import threading
from collections.abc import Sequence

import numpy as np

from .._vocabulary import ALGORITHMS

__all__ = ["Choice", "choose_lazily", "describe", "over_limit", "result_bytes",
           "result_refusal",
           "SLOWDOWN_LIMIT", "SLOW_SECONDS"]

#: ``auto`` raises MemoryError instead of running the best algorithm that fits
#: when it is predicted this many times slower than one that does not fit ...
SLOWDOWN_LIMIT = 100.0
#: ... and would take longer than this many seconds.
SLOW_SECONDS = 60.0


class Choice:
    """What the chooser decided for one problem on one backend, without data.

    Attributes
    ----------
    algorithm : str
        The algorithm to run (first of ``ranked``), or ``None``.
    ranked : sequence of str
        Candidates that fit, cheapest predicted first.
    times : dict
        Predicted seconds of every implementable candidate.
    rejected : dict
        Algorithm -> why it is not a candidate.
    limit : int
        Workspace limit in bytes the choice was made and runs under (the one asked for,
        or the memory left beside the result where that is less).
    refusal : Exception or None
        Why ``auto`` must not run at all (a MemoryError or ValueError).
    by_workspace : tuple of str
        Fallback order after an out-of-memory: by decreasing workspace.

    ``ranked``, ``times``, ``rejected`` and ``by_workspace`` of a lazily made choice
    (``rest``: a callable giving the four complete) are completed when first read; its
    head (``ranked[0]``, and ``ranked[1]`` when the first has a data rule) and their
    times (:meth:`time_of`) are exact without it.
    """

    def __init__(self, algorithm, ranked, times, rejected, limit, refusal=None,
                 by_workspace=(), rest=None):
        self.algorithm, self.limit, self.refusal = algorithm, limit, refusal
        self._parts = (tuple(ranked), times, rejected, tuple(by_workspace))
        self._rest = rest

    def _complete(self):
        rest = self._rest
        if rest is not None:
            self._parts, self._rest = rest(), None
        return self._parts

    @property
    def ranked(self):
        if self._rest is None:
            return self._parts[0]
        return _Ranking(self)

    @property
    def times(self):
        return self._complete()[1]

    @property
    def rejected(self):
        return self._complete()[2]

    @property
    def by_workspace(self):
        return self._complete()[3]

    def time_of(self, name, default=None):
        """Predicted seconds of ``name`` (its ranking's first two: without completing)."""
        times = self._parts[1]
        if name in times or self._rest is None:
            return times.get(name, default)
        return self.times.get(name, default)

    def __repr__(self):
        return (f"Choice({self.algorithm!r}, ranked={tuple(self.ranked)}, "
                f"limit={self.limit}, refusal={self.refusal!r})")


class _Ranking(Sequence):
    """``Choice.ranked`` of a lazy choice: its known head served as is, anything past it
    (or its length) completes the choice."""

    def __init__(self, choice):
        self._choice = choice

    def __getitem__(self, i):
        head = self._choice._parts[0]
        if isinstance(i, int) and 0 <= i < len(head):
            return head[i]
        return self._choice._complete()[0][i]

    def __len__(self):
        return len(self._choice._complete()[0])

    def __eq__(self, other):
        return isinstance(other, (list, tuple, _Ranking)) and list(self) == list(other)

    def __repr__(self):
        return repr(self._choice._complete()[0])


def result_bytes(problem):
    """Bytes of the array ``problem.op`` computes."""
    return math.prod(problem.logical_result_shape) * problem.dtype.itemsize


def describe(problem):
    """The problem in a message: op, shapes, dtype."""
    return (f"{problem.op} of x{problem.x_shape} * w{problem.w_shape} -> y{problem.y_shape} "
            f"({problem.dtype})")


def over_limit(least, limit):
    return (f"needs at least {least} bytes of workspace but the workspace limit is "
            f"{limit} bytes")


def result_refusal(problem, result, available):
    """Why a result of ``result`` bytes cannot be computed in ``available`` bytes (no
    workspace limit helps: the result itself does not fit)."""
    return MemoryError(
        f"{describe(problem)}: the result alone needs {result} bytes "
        f"({result / 2**30:.3g} GiB) but {available} bytes are available; process the data "
        "in pieces with cupyconv.dask (for example over the batch or an output axis)")


def _refusal(problem, best, why, fallback, seconds, over):
    hint = (f"method={fallback!r} fits but is predicted to take {seconds:.3g} s; pass it "
            "explicitly to run it anyway, " if fallback else "")
    return (f"{describe(problem)}: the fastest algorithm {best!r} {why}; {hint}"
            "process the data in pieces with cupyconv.dask"
            + (", or raise workspace_limit" if over else ""))


class _Pricing:
    """One choice's candidates, priced one at a time in the order of their floors.

    A candidate's workspace and price are those of what it runs under ``judged``: the
    workspace limit, or the memory left beside the result where that is less (an
    algorithm with a choice of record, the split-K weight gradient's, then picks the one
    that fits); its least workspace is held against the limit itself."""

    def __init__(self, problem, backend, limit, available, result):
        self.problem, self.backend, self.limit = problem, backend, limit
        self.available, self.result = available, result
        self.judged = min(limit, available - result)
        self.names, floors, self.assessors = backend.pricing(problem)
        self.rejected, serving = {}, []
        pair = (problem.op, backend.name)
        for name in self.names:
            if pair in ALGORITHMS[name].served:
                serving.append(name)
            else:
                self.rejected[name] = f"{name} does not serve {problem.op} on {backend.name}"
        # cheapest floor first, ties in the vocabulary's order
        self.pending = sorted(serving, key=floors.__getitem__)
        self.floors, self.order = floors, {n: i for i, n in enumerate(self.names)}
        self.lock, self.done = threading.Lock(), None
        self.fitting, self.unfit, self.workspace, self.over, self.times = [], {}, {}, set(), {}

    def price(self, name):
        """Ask ``name`` everything the choice weighs (the eager chooser's loop body);
        whether it fits."""
        problem, backend, limit, judged = self.problem, self.backend, self.limit, self.judged
        spec = ALGORITHMS[name]
        entry = self.assessors.get(name)
        why, least, workspace, seconds = (backend.assess(problem, name, judged) if entry is None
                                          else entry.assess(problem, judged))
        if why is not None:
            self.rejected[name] = why
            return False
        if spec.cval_refusal and not np.isfinite(complex(problem.cval)):
            self.rejected[name] = spec.cval_refusal
            return False
        self.workspace[name] = workspace
        need = self.result + workspace
        if least > limit:
            self.rejected[name] = self.unfit[name] = over_limit(least, limit)
            self.over.add(name)
        elif need > self.available:
            self.rejected[name] = self.unfit[name] = (
                f"needs {need} bytes (result + workspace) but {self.available} bytes "
                "are available")
        else:
            self.fitting.append(name)
        self.times[name] = seconds
        return name not in self.unfit

    def ranked(self):
        times, order, keyed = self.times, self.order, []
        for n in self.fitting:
            keyed.append((times[n], order[n], n))
        keyed.sort()
        ranked = []
        for key in keyed:
            ranked.append(key[2])
        return tuple(ranked)

    def settled(self, ranked):
        """How many of the first that fit are settled (beat every candidate not priced
        yet): 0 while the best is not, or an algorithm with a data rule
        (``ALGORITHMS[name].needs``, which weighs it against the runner-up) has no
        settled runner-up; else 1 or 2."""
        if not ranked or self.times[ranked[0]] > SLOW_SECONDS:
            return 0
        floor = self.floors[self.pending[0]]
        if self.times[ranked[0]] >= floor:
            return 0
        if not ALGORITHMS[ranked[0]].needs:
            return 1
        return 2 if len(ranked) >= 2 and self.times[ranked[1]] < floor else 0

    def complete(self):
        """``(ranked, times, rejected, by_workspace)`` with every candidate priced
        (once: a second caller, or another thread, gets the same)."""
        with self.lock:
            if self.done is None:
                while self.pending:
                    self.price(self.pending.pop(0))
                ranked = self.ranked()
                times = {n: self.times[n] for n in self.names if n in self.times}
                rejected = {n: self.rejected[n] for n in self.names if n in self.rejected}
                self.done = (ranked, times, rejected,
                             tuple(sorted(ranked, key=lambda n: -self.workspace[n])))
            return self.done

    def refusal(self, ranked, times, rejected):
        problem, unfit = self.problem, self.unfit
        if unfit:       # the first of the fastest in the vocabulary's order
            best = min([n for n in self.names if n in unfit], key=times.get)
            slow = times[ranked[0]] if ranked else math.inf
            if not ranked or (slow > SLOW_SECONDS and slow > SLOWDOWN_LIMIT * times[best]):
                return MemoryError(_refusal(problem, best, unfit[best],
                                            ranked[0] if ranked else None, slow,
                                            best in self.over))
        elif not ranked:
            return ValueError(f"no algorithm can run {describe(problem)} on "
                              f"{self.backend.name}: "
                              + "; ".join(f"{k}: {v}" for k, v in rejected.items()))
        return None


def choose_lazily(problem, backend, limit):
    """The :class:`Choice` of ``problem`` on ``backend`` under ``limit`` bytes of
    workspace, priced as the module docstring says; its ``limit`` is the one its
    algorithm runs under (``limit``, or the memory left beside the result where less)."""
    available = backend.available_memory()
    result = result_bytes(problem)
    if result > available:          # no algorithm can run: ask none of them
        return Choice(None, (), {}, {}, limit, result_refusal(problem, result, available))
    pricing = _Pricing(problem, backend, limit, available, result)
    ranked = ()
    while pricing.pending:
        head = pricing.settled(ranked)
        if head:
            return Choice(ranked[0], ranked[:head], dict(pricing.times), {}, pricing.judged,
                          rest=pricing.complete)
        if pricing.price(pricing.pending.pop(0)):
            ranked = pricing.ranked()
    ranked, times, rejected, by_workspace = pricing.complete()
    return Choice(ranked[0] if ranked else None, ranked, times, rejected, pricing.judged,
                  pricing.refusal(ranked, times, rejected), by_workspace)
