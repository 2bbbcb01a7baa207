"""The one dispatcher: choose an algorithm for a problem on a backend, and run it.

Every public function builds one :class:`~cupyconv.core.ConvProblem` and
calls :func:`run`; plans call :func:`choose` once and :func:`run` per call,
so both take the same path and obey the same rules:

- **Candidates** are the algorithms of the backend's table for the problem's op
  that can implement it (``can_implement`` gives the reason when not); an explicit
  ``method=`` asks only that algorithm (the others only after an out-of-memory).
- **Safety rules** (all here): ``fft`` is never chosen by ``auto`` for
  integer data whose result could round (the bound comes from the operands'
  min/max, never ``abs``, which wraps at the most negative integer), for
  non-finite data (FFT spreads one NaN to every output) or a non-finite
  ``cval``; the data scan runs only when it can change the choice (``auto``
  ranked ``fft`` first) and allocates no temporary.
- **Memory**, checked before any work on every path (:func:`precheck`): a result
  beyond the memory the backend has is refused at once; an algorithm is considered
  only when its least workspace fits the workspace limit and its peak (result +
  workspace, the workspace of what it runs under the limit or the memory left beside
  the result, the smaller) fits that memory; when the fastest algorithm does not fit
  and the best that fits would take far longer, ``auto`` raises :class:`MemoryError` naming
  the shapes, the bytes and what to do instead of running for hours.
- **Choice**: cheapest predicted time (the backend's cost model) among the
  candidates, or measured once per problem when ``config.autotune`` is on;
  data-free choices are cached per (problem, backend, limit) in a bounded LRU.
- **Fallback**: an :class:`~cupyconv.backends.base.OutOfMemoryError` while
  running frees cached blocks and runs the next algorithm down by workspace.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import sys
import warnings

import numpy as np

from .._dtypes import is_inexact
from .. import config
from .._kernels import program
from .._lru import LRU
from .._vocabulary import ALGORITHMS, describe_choices
from ..backends.arrays import host_scan, to_tf32, zeros_result
from ..backends.base import OutOfMemoryError
from ..backends.numpy.progress import PROGRESS_SECONDS, cpu_progress
from ..core.args import normalize_workspace_limit
from ..core.problem import Operands
from . import autotune
from .choice import (SLOW_SECONDS, SLOWDOWN_LIMIT, Choice, choose_lazily, describe,
                     over_limit, result_bytes, result_refusal)

__all__ = ["Choice", "choose", "run", "precheck", "ranked_for_data", "data_rule", "fft_safe", "clear_cache",
           "resolve_limit", "CHOICE_CACHE_SIZE", "SLOWDOWN_LIMIT", "SLOW_SECONDS"]

#: Data-free choices kept (problem, backend, workspace limit).
CHOICE_CACHE_SIZE = 1024

_choices = LRU(CHOICE_CACHE_SIZE)


def resolve_limit(workspace_limit, backend):
    """The workspace limit in force: the call's, ``config``'s, or the backend's default."""
    if workspace_limit is not None:
        return normalize_workspace_limit(workspace_limit)
    if config.workspace_limit is not None:
        return normalize_workspace_limit(config.workspace_limit,
                                         "cupyconv.config.workspace_limit")
    return backend.default_workspace_limit()


def _check_result(problem, backend):
    """``(available, result bytes)``; raises when the result alone cannot fit."""
    available = backend.available_memory()
    result = result_bytes(problem)
    if result > available:
        raise result_refusal(problem, result, available)
    return available, result


def _memory_refusal(problem, method, result, workspace, available):
    return MemoryError(
        f"{describe(problem)}: method={method!r} needs {result + workspace} bytes "
        f"(result {result} + workspace {workspace}) but {available} bytes are "
        "available; choose a method with less workspace (method='direct' needs none), "
        "or process the data in pieces with cupyconv.dask")


def choose(problem, backend, workspace_limit=None) -> Choice:
    """The data-free :class:`Choice` for ``problem`` on ``backend`` (cached, bounded LRU).

    The key holds the limit the caller or ``config`` gave; without one the
    backend's default (a fraction of the memory available) is read on a miss
    only, so a cached choice may predate the current free memory.
    """
    given = workspace_limit if workspace_limit is not None else config.workspace_limit
    # the backend object itself, never its id(): a backend made after another was freed
    # (dispatch.backends.reset, a test's runner with a memory limit) may reuse the id
    key = (problem, backend, given, config.winograd_max_error_growth, config.kernels)
    return _choices.get_or_compute(key, lambda: choose_lazily(
        problem, backend, resolve_limit(workspace_limit, backend)))


def clear_cache():
    """Forget every cached choice and autotuned winner."""
    _choices.clear()
    autotune.clear_cache()


# ------------------------------------------------------------------ data rules


def fft_safe(problem, operands, backend=None):
    """``(ok, reason)``: whether the FFT result is exact enough for these operands, from
    one scan of them: with a ``backend``, its ``check`` (on the CUDA path one kernel and
    one read back, a program step that a compiled call replays, and whose outcome it
    re-checks: a replay whose data decide otherwise takes the normal path); on the host
    without one."""
    arrays = _scanned(operands)
    if not arrays:
        return True, ""
    rule = FftRule(problem.dtype.kind in "biu", max(problem.gemm_k, 1), len(arrays))
    if backend is None:
        program.host_read("the fft data scan reads the operands", *arrays)
        return rule(host_scan(arrays))
    return backend.check(arrays, rule)


@dataclasses.dataclass(frozen=True)
class FftRule:
    """:func:`fft_safe`'s decision on a ``ScanResult`` of its ``count`` operands (equal
    for equal problems: the CUDA path's scan programs are memoised by it)."""

    exact: bool
    gemm_k: int
    count: int

    def __call__(self, scan):
        if self.exact:
            bound = math.prod(scan.magnitude[:self.count]) * self.gemm_k
            if bound >= 2 ** (np.finfo(np.float64).nmant - 1):
                return False, (f"integer results up to {bound} are not exactly "
                               "representable through a float64 FFT")
            return True, ""
        if not scan.all_finite:
            return False, "non-finite data would spread to every output through the FFT"
        return True, ""


def _scanned(operands):
    """The operands a data rule reads (those present)."""
    arrays = [operands.get(r) for r in ("activation", "filter", "output")]
    return [a for a in arrays if a is not None]


def _slack(choice, ranked, i, every, name):
    """How many times its predicted time candidate ``i`` may take on the data and still
    beat the next one (infinite when every candidate is timed, none follows, or it has no
    data rule to weigh it)."""
    if every or not ALGORITHMS[name].needs or not _has(ranked, i + 1):
        return math.inf
    mine, nxt = choice.time_of(name, 0.0), choice.time_of(ranked[i + 1], math.inf)
    return nxt / mine if mine > 0 else math.inf


def _entry(ranked, i):
    """``ranked[i]``, or ``None`` past its end (a lazy choice's head: without pricing the
    rest)."""
    try:
        return ranked[i]
    except IndexError:
        return None


def _has(ranked, i):
    """Whether ``ranked`` has an entry ``i`` (:func:`_entry`)."""
    return _entry(ranked, i) is not None


class _Tf32Operands:
    """A call's operands under ``precision="tf32"``, per algorithm: rounded to TF32
    (``to_tf32``, once, when first asked) for every algorithm but those the backend
    rounds itself (``backend.rounds_tf32``: the implicit GEMM's re-layout kernel rounds in
    the same pass)."""

    def __init__(self, problem, operands, backend):
        self.problem, self.raw, self.backend, self.rounded = problem, operands, backend, None

    def for_algorithm(self, name):
        """The operands ``name`` runs on."""
        if self.backend.rounds_tf32(self.problem, name):
            return self.raw
        if self.rounded is None:
            ops = self.raw
            self.rounded = ops.replace(**{r: to_tf32(ops.get(r)) for r in
                                          ("activation", "filter", "output")
                                          if ops.get(r) is not None})
        return self.rounded


def data_rule(problem, name, operands, backend=None, slack=math.inf):
    """``(ok, reason)``: whether ``auto`` may run ``name`` on these operands' values.

    Each algorithm has its own rule: the backend's ``data_ok`` (a ``separable`` kernel
    must be a short enough sum of outer products, ``winograd`` needs finite data; the
    others pass), and for ``fft`` first :func:`fft_safe`.  ``slack``: how many times its
    predicted time ``name`` may take on these values (``data_ok``).
    """
    for_algorithm = getattr(operands, "for_algorithm", None)
    if for_algorithm is not None:
        operands = for_algorithm(name)
    if ALGORITHMS[name].scans_exactness:
        ok, why = fft_safe(problem, operands, backend)
        if not ok:
            return ok, why
    if backend is None:
        return True, ""
    return backend.data_ok(problem, name, operands, slack)


def ranked_for_data(choice, problem, operands, every=False, backend=None):
    """``choice.ranked`` after the data rules: the candidates ``auto`` may run, best first.

    The first candidate (every one when ``every`` candidate will be timed: autotune,
    ``measure=True``) must pass its own :func:`data_rule`; one refused is dropped and
    the next, now first, is asked in turn, so whatever is promoted has passed its rule.
    A refusal under a finite ``slack`` (``separable``: a sum of outer products that only
    pays against the next candidate) first asks the next candidate: when the data
    refuse that one too, it is dropped and the first is asked again with the slack
    against the one after.  Each rule runs at most once per candidate and slack, and
    only where it can change the outcome (a data scan allocates no temporary).
    Raises the choice's refusal, if any, and a ``ValueError`` naming every refusal
    when no candidate is left.  Returns a list, or, when no candidate was dropped, the
    choice's own ranking (a sequence: a lazy choice prices its candidates past the
    head only when they are read).
    """
    if choice.refusal is not None:
        raise type(choice.refusal)(*choice.refusal.args)
    # the choice's ranking as it is while no candidate is dropped (a lazy choice prices
    # the rest only when asked past its head)
    ranked, verdicts, refused = choice.ranked, {}, {}
    own = ranked        # its head is the choice's algorithm (read without asking it)

    def verdict(i, name):
        slack = _slack(choice, ranked, i, every, name)
        key = (name, None if ALGORITHMS[name].scans_exactness else slack)
        if key not in verdicts:
            verdicts[key] = data_rule(problem, name, operands, backend, slack)
        if not verdicts[key][0]:
            refused[name] = verdicts[key][1]
        return verdicts[key][0], slack

    i = 0
    while every or i == 0:
        name = choice.algorithm if i == 0 and ranked is own else _entry(ranked, i)
        if name is None:
            break
        ok, slack = verdict(i, name)
        if ok:
            i += 1
        elif not every and math.isfinite(slack) and not verdict(i + 1, ranked[i + 1])[0]:
            ranked = list(ranked)
            ranked.pop(i + 1)          # the next goes; ask this one again with more slack
        else:
            ranked = list(ranked)
            ranked.pop(i)
    if i == 0 and not _has(ranked, 0):       # (a candidate passed: ranked[0] is there)
        raise ValueError(f"{describe(problem)}: no candidate can run on these operands ("
                         + "; ".join(f"{k}: {v}" for k, v in refused.items()) + ")")
    return list(ranked) if isinstance(ranked, tuple) else ranked


# ------------------------------------------------------------------------- run
#: Where an explicitly chosen algorithm spreads a NaN or Inf of the data (SciPy's warning
#: for ``method="fft"``, worded as SciPy's; ``auto`` never runs these on such data).
NON_FINITE_SPREAD = {name: a.spreads for name, a in ALGORITHMS.items() if a.spreads}


@dataclasses.dataclass(frozen=True)
class NonFiniteWarning:
    """The decision of an explicit ``method`` in :data:`NON_FINITE_SPREAD` on its data scan
    (a ``ScanResult``): SciPy's ``RuntimeWarning`` when an operand is not finite.  Equal
    for equal methods, so the CUDA path's scan program (``backend.check``) is memoised
    and a compiled call replays it; the warning points at the first frame outside
    cupyconv."""

    method: str

    def __call__(self, scan):
        if not scan.all_finite:
            warnings.warn(f"Use of {self.method} convolution on input with NAN or inf results "
                          f"in NAN or inf {NON_FINITE_SPREAD[self.method]}. Consider using "
                          "method='direct' instead.", RuntimeWarning, stacklevel=_caller_level())


def _caller_level():
    """``stacklevel`` of the first frame outside cupyconv, for a warning raised by the
    caller of this function (the depth differs between the normal path and a replay)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] == "cupyconv":
        frame, level = frame.f_back, level + 1
    return level


def _explicit(problem, backend, method, limit):
    """Ask only ``method`` (its ``can_implement``, then its memory) before any work: the
    workspace limit it runs under when it may run (``limit``, or the memory left beside
    the result where that is less: its workspace is judged there, as ``auto``'s, so an
    algorithm with a choice of record picks the one that fits), ``None`` when its least
    workspace passes ``limit`` (the call then takes the fallbacks, as after an
    out-of-memory)."""
    spec = ALGORITHMS.get(method)
    if spec is None or not spec.serves(problem.op, backend.name):
        valid = [n for n, a in ALGORITHMS.items() if a.serves(problem.op, backend.name)]
        raise ValueError(f"method={method!r} cannot compute the {problem.op} on the "
                         f"{backend.name} backend; choose {describe_choices(['auto'] + valid)}")
    ok, why = backend.can_implement(problem, method)
    if not ok:
        raise ValueError(f"method={method!r} cannot run this problem: {why}")
    available, result = _check_result(problem, backend)
    least = backend.min_workspace_bytes(problem, method)
    if result + least > available:
        raise _memory_refusal(problem, method, result, least, available)
    if least > limit:
        return None
    judged = min(limit, available - result)
    workspace = backend.workspace_bytes(problem, method, judged)
    if result + workspace > available:
        raise _memory_refusal(problem, method, result, workspace, available)
    return judged


def precheck(problem, backend, method="auto", workspace_limit=None):
    """Raise what :func:`run` would raise for ``problem`` alone, before a caller casts,
    copies or scans any operand: ``auto``'s refusal (a result or every candidate beyond
    memory), an explicit ``method`` that cannot run the problem or whose result and
    workspace cannot fit.  No data is read."""
    if problem.is_empty:
        return
    prepared = backend.prepare(problem, Operands())[0]
    if method == "auto":
        choice = choose(prepared, backend, workspace_limit)
        if choice.refusal is not None:
            raise type(choice.refusal)(*choice.refusal.args)
        return choice
    _explicit_verdict(prepared, backend, method, workspace_limit)
    return None


def _explicit_verdict(problem, backend, method, workspace_limit):
    """``(limit, runs_under)``: the limit in force and :func:`_explicit`'s verdict under
    it (the limit the method runs under, or ``None``), cached as
    ``auto``'s :func:`choose` is (same key, same LRU: a verdict may predate the current
    free memory), so a repeated explicit call reads no memory figures; a refusal is
    cached and raised again."""
    given = workspace_limit if workspace_limit is not None else config.workspace_limit
    key = ("explicit", method, problem, backend, given, config.winograd_max_error_growth,
           config.kernels)

    def verdict():
        limit = resolve_limit(workspace_limit, backend)
        try:
            return limit, _explicit(problem, backend, method, limit), None
        except (ValueError, MemoryError) as exc:
            return limit, None, exc
    limit, runs_under, refusal = _choices.get_or_compute(key, verdict)
    if refusal is not None:
        raise type(refusal)(*refusal.args)
    return limit, runs_under


def run(problem, operands, backend, *, method="auto", workspace_limit=None, stats=None,
        choice=None, warn=True):
    """Compute ``problem``'s result (logical channels-first) on ``backend``.

    Parameters
    ----------
    problem : ConvProblem
    operands : Operands
        The two arrays the op reads, logical channels-first views in the
        compute dtype (an integer activation may be narrower: the backend
        widens it for the algorithms that need it).
    backend : Backend
    method : str
        ``"auto"`` or an algorithm name.
    workspace_limit : int, optional
    stats : dict, optional
        Receives ``algorithm``, ``peak_workspace`` and ``fallbacks``.
    choice : Choice, optional
        A plan's choice (skips the cache lookup).
    warn : bool
        Whether an explicit ``method`` that spreads a NaN or Inf warns about such data
        (:data:`NON_FINITE_SPREAD`); ``False`` skips the data scan that decides it
        (``fftconvolve``, which, as SciPy's, spreads them without a word).

    Returns
    -------
    (result, algorithm)
    """
    if workspace_limit is not None:                     # checked even when nothing runs
        normalize_workspace_limit(workspace_limit)
    if problem.is_empty:
        return zeros_result(problem, backend.xp), "direct"
    with backend.call_scope(), _progress(problem, backend, method, workspace_limit, choice):
        return _run(problem, operands, backend, method, workspace_limit, stats, choice, warn)


def _progress(problem, backend, method, workspace_limit, choice):
    """A progress bar while a NumPy-backend call predicted to take long runs
    (``config.progress``; ``backends/numpy/progress.py``)."""
    if not config.progress or backend.name != "numpy":
        return contextlib.nullcontext()
    if choice is not None:
        algorithm = choice.algorithm if method == "auto" else method
        seconds = choice.time_of(algorithm)
    elif method == "auto":
        choice = choose(backend.prepare(problem, Operands())[0], backend, workspace_limit)
        algorithm, seconds = choice.algorithm, choice.time_of(choice.algorithm)
    else:           # an explicit method prices itself alone, once per problem (the LRU)
        algorithm = method
        seconds = _choices.get_or_compute(("seconds", method, problem, backend), lambda: (
            backend.predict_times(backend.prepare(problem, Operands())[0], (method,))
            .get(method)))
    if seconds is None or not seconds > PROGRESS_SECONDS:      # no bar: nothing to set up
        return contextlib.nullcontext()
    return cpu_progress(seconds, f"{problem.op} by {algorithm}")


def _run(problem, operands, backend, method, workspace_limit, stats, choice, warn):
    tried = []
    if method == "auto":
        if choice is None:
            prepared = backend.prepare(problem, Operands())[0]      # the problem alone
            choice = choose(prepared, backend, workspace_limit)
        if choice.refusal is not None:      # before the operands are prepared or scanned
            raise type(choice.refusal)(*choice.refusal.args)
        limit = choice.limit
    else:
        prepared = backend.prepare(problem, Operands())[0]          # the problem alone
        # a plan's choice gives the limit; the verdict under it is cached either way
        limit, runs_under = _explicit_verdict(
            prepared, backend, method, workspace_limit if choice is None else choice.limit)
        if runs_under is None:
            least = backend.min_workspace_bytes(prepared, method)
            tried.append(f"{method}: {over_limit(least, limit)}")
        else:
            limit = runs_under
    problem, operands = backend.prepare(problem, operands)
    if problem.precision == "tf32":     # TF32 numerics: every algorithm sees rounded operands
        operands = _Tf32Operands(problem, operands, backend)   # (some round them themselves)
    operands_for = getattr(operands, "for_algorithm", lambda name: operands)
    ranked = None
    if method == "auto":
        ranked = ranked_for_data(choice, problem, operands, every=config.autotune,
                                 backend=backend)
        # a list when a candidate was dropped, else the choice's own ranking
        names = [ranked[0] if isinstance(ranked, list) else choice.algorithm]
        if config.autotune and len(ranked) > 1:
            program.refuse("autotune measured the candidates", transient=True)
            names = [autotune.winner((problem, backend.name, limit), ranked, lambda name: (
                backend.run(problem, name, operands_for(name), limit), backend.synchronize()))]
    elif tried:
        names = []
    else:
        if warn and method in NON_FINITE_SPREAD and is_inexact(problem.dtype):
            backend.check(_scanned(operands_for(method)), NonFiniteWarning(method), warns=True)
        names = [method]
    # first, then the others by decreasing workspace, zero-workspace last (asked only
    # after an out-of-memory); a fallback obeys the data rules too (scanned only if an
    # out-of-memory reaches fft)
    first = names[0] if names else method

    def order():                # the fallbacks are asked for only once one is needed
        yield from names
        if tried:
            yield from _fallbacks(problem, backend, workspace_limit, choice, ranked, first)
    for name in order():
        if name != first:
            ok, why = data_rule(problem, name, operands, backend)
            if not ok:
                tried.append(f"{name}: skipped, {why}")
                continue
        try:
            result = backend.compute(problem, name, operands_for(name), limit, stats)
        except OutOfMemoryError as exc:
            program.refuse("an out-of-memory fell back", transient=True)
            tried.append(f"{name}: {exc}")
            backend.free_cached()
            continue
        if stats is not None:
            stats.update(algorithm=name, fallbacks=tried)
        return result, name
    raise OutOfMemoryError(f"{describe(problem)}: every algorithm ran out of memory: "
                           + "; ".join(tried))


def _fallbacks(problem, backend, workspace_limit, choice, ranked, first):
    """The algorithms to try after ``first`` ran out of memory (or its least workspace
    passed the limit): the choice's candidates by decreasing workspace (the choice is
    made here, on the first out-of-memory, for an explicit method)."""
    choice = choose(problem, backend, workspace_limit) if choice is None else choice
    ranked = choice.ranked if ranked is None else ranked
    return [n for n in choice.by_workspace if n != first and n in ranked]
