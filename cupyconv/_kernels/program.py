"""Launch programs: what a CUDA-path algorithm does to the device, as data.

A :class:`Program` is immutable and holds everything a call of one algorithm on one
problem asks of the device: the arrays it allocates (the result, workspaces, the
buffers between passes), its kernel launches (function handle, grid, block, dynamic
shared memory, the packed parameter struct and, in order, the names of the arrays
whose pointers follow it) and the names of the operands the caller binds.  The
builders (:mod:`.launch`) memoise one program per problem, strides and launch
options, so a repeated call executes a cached program: :func:`execute` allocates
what the caller did not bind and launches, nothing else.  The same programs run on
CuPy arrays and on the emulator.

Two things watch :func:`execute` from above, each through this module's thread-local
state so that the layers keep pointing down:

- a *recording* (:func:`record`): the compiled calls of the public functions
  (``cupyconv.api.compiled``) record which programs a call executed on which arrays,
  and every layer that does device work outside a program, or decides on the data,
  says so with :func:`not_compiled`;
- an *account* (:func:`accounting`): counts per call of launches, allocations,
  synchronisations, copies each way and library calls (the call-accounting stand-in
  of the tests and ``benchmarks.host_path``).
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import threading
from typing import Any, Tuple

import numpy as np

from .addressing import data_pointer

__all__ = ["Launch", "Program", "execute", "allocate", "record", "Recording", "recording",
           "not_compiled", "constant", "is_constant", "count", "accounting", "launch_stubbed",
           "extent"]


@dataclasses.dataclass(frozen=True)
class Launch:
    """One kernel launch of a program."""

    #: the kernel: ``function(grid, block, args, shared_mem=...)`` (CuPy or emulated).
    function: Any
    grid: Tuple[int, ...]
    block: Tuple[int, ...]
    shared_mem: int
    #: the packed parameter struct (read-only, shared between calls).
    params: Any
    #: names of the arrays whose pointers follow ``params``, in the kernel's order.
    slots: Tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Program:
    """An algorithm's launches on one problem (see the module docstring)."""

    #: what it computes, for messages (``"direct"``, ``"implicit_gemm"``).
    name: str
    #: names the caller binds (``x``, ``w``; ``bias`` may be bound to ``None``).
    operands: Tuple[str, ...]
    #: ``(name, shape, dtype)`` allocated by :func:`execute` unless the caller binds it.
    allocations: Tuple[Tuple[str, Tuple[int, ...], Any], ...]
    launches: Tuple[Launch, ...]
    #: the name of the array the program computes.
    result: str
    #: a host computation instead of launches (the NumPy backend's algorithms):
    #: ``host(*operands) -> result``; its operands are whole views, not pointers.
    host: Any = None

    @property
    def workspace_count(self):
        """Allocations besides the result (the budget tests pin)."""
        return len(self.allocations) - 1


class _State(threading.local):
    """This thread's recording and account (class defaults: none)."""

    recording = None
    counts = None
    stub = False


_STATE = _State()


def allocate(xp, shape, dtype):
    """``xp.empty(shape, dtype)``, counted by :func:`accounting`."""
    counts = _STATE.counts
    if counts is not None:
        counts["allocations"] += 1
    return xp.empty(shape, dtype=dtype)


def execute(program, xp, bound):
    """Run ``program``: allocate what ``bound`` (a fresh dict name -> array, filled in
    here) lacks, then launch each launch on the pointers of the named arrays.

    Returns ``bound`` with the program's allocations added; the result is
    ``bound[program.result]``.
    """
    state = _STATE
    rec = state.recording
    if rec is not None:
        rec.steps.append((program, dict(bound), bound))
    if program.host is not None:
        bound[program.result] = program.host(*[bound[n] for n in program.operands])
        return bound
    for name, shape, dtype in program.allocations:
        if bound.get(name) is None:
            bound[name] = allocate(xp, shape, dtype)
    counts = state.counts
    if counts is not None:
        counts["launches"] += len(program.launches)
        if state.stub:
            return bound
    for step in program.launches:
        step.function(step.grid, step.block, (step.params, *[bound[s] for s in step.slots]),
                      shared_mem=step.shared_mem)
    return bound


# ---------------------------------------------------------------- recording


class Recording:
    """What one public call did on this thread: the programs it executed (with the arrays
    they ran on), the constants it made, and why it cannot be compiled (``reasons``;
    ``transient`` when the reason may not hold for the next call)."""

    __slots__ = ("steps", "constants", "reasons", "transient")

    def __init__(self):
        self.steps, self.constants, self.reasons, self.transient = [], [], [], False


def recording():
    """The :class:`Recording` in progress on this thread, or ``None``."""
    return _STATE.recording


@contextlib.contextmanager
def record():
    """Record the programs executed inside the ``with`` block (this thread only)."""
    rec, outer = Recording(), recording()
    _STATE.recording = rec
    try:
        yield rec
    finally:
        _STATE.recording = outer


def not_compiled(reason, transient=False):
    """Say that the call being recorded did device work outside a program, or decided on
    its data: it must take the normal path every time (``transient``: only this time, as
    an autotuning measurement or an out-of-memory fallback)."""
    rec = recording()
    if rec is not None:
        rec.reasons.append(reason)
        rec.transient = rec.transient or transient


def constant(array):
    """Mark ``array`` as a constant of the recorded call: computed from the call's key
    alone (filter taps from ``sigma``), so a compiled call may keep and reuse it."""
    rec = recording()
    if rec is not None and array is not None:
        rec.constants.append(array)
    return array


def is_constant(array):
    """Whether ``array`` lies within a :func:`constant` of the call being recorded."""
    rec = recording()
    if rec is None or array is None:
        return False
    return any(_within(array, c) for c in rec.constants)


def _within(inner, outer):
    a, b = extent(inner), extent(outer)
    return a is not None and b is not None and b[0] <= a[0] and a[1] <= b[1]


# ---------------------------------------------------------------- accounting
def count(what, n=1):
    """Add ``n`` to counter ``what`` of the :func:`accounting` in force (if any)."""
    counts = _STATE.counts
    if counts is not None:
        counts[what] += n


def launch_stubbed():
    """Whether :func:`accounting` asked for launches to be counted, not run."""
    return _STATE.stub


@contextlib.contextmanager
def accounting(stub=False):
    """Count what the calls inside the block ask of the device (this thread): a
    ``collections.Counter`` of ``launches``, ``allocations``, ``syncs``, ``d2h``,
    ``h2d`` and ``library`` calls.  ``stub``: programs count their launches without
    running them (the results are then garbage: for budgets and host time only)."""
    counts = collections.Counter()
    outer = (_STATE.counts, _STATE.stub)
    _STATE.counts, _STATE.stub = counts, bool(stub)
    try:
        yield counts
    finally:
        _STATE.counts, _STATE.stub = outer


def extent(array):
    """``(lowest, highest + 1)`` byte address of ``array``'s elements (``None`` if empty)."""
    if 0 in array.shape:
        return None
    lo = hi = data_pointer(array)
    for n, st in zip(array.shape, array.strides):
        if st < 0:
            lo += (n - 1) * st
        else:
            hi += (n - 1) * st
    return lo, hi + int(np.dtype(array.dtype).itemsize)
