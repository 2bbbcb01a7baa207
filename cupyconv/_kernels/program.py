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
  (``cupyconv.api.compiled``) record which programs a call executed on which arrays.
  A program says what a replay must know about it: the operands whose *values* the
  host read to build it or to decide on it (:attr:`Program.host_reads`; a layer that
  reads values outside a program runs a :func:`host_read` program), and whether it
  can be replayed at all (:attr:`Program.refusal`; a layer that works outside any
  program runs a :func:`refuse` program).  The compiled-call layer decides from these;
- an *account* (:func:`accounting`): counts per call of launches, allocations,
  synchronisations, copies each way and library calls (the call-accounting stand-in
  of the tests and ``benchmarks.host_path``).
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import operator
import threading
from typing import Any, Tuple

import numpy as np

from .addressing import data_pointer, extent, span_in

__all__ = ["Launch", "Call", "Check", "Expect", "Diverged", "View", "Program", "at_offset", "view_of", "placed", "host_step", "execute", "allocate", "record", "Recording", "recording",
           "host_read", "refuse", "guard", "constant", "held", "is_constant", "count", "count_allocation", "accounting", "launch_stubbed",
           "extent", "within", "inside"]


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

    def __post_init__(self):
        # ``pick(bound)``: the slots' arrays in one C call where every slot is a name (two
        # or more: ``itemgetter`` of one returns the item, not a tuple); else ``None``
        names = len(self.slots) > 1
        for s in self.slots:
            names = names and type(s) is str
        object.__setattr__(self, "pick", operator.itemgetter(*self.slots) if names else None)


@dataclasses.dataclass(frozen=True)
class View:
    """A slot that is a view of a named array: ``shape``/``strides`` (bytes) at ``offset``
    bytes into it (the named array C-contiguous); ``shape=None`` for a launch's pointer
    only."""

    name: str
    offset: int
    shape: Any = None
    strides: Any = None
    dtype: Any = None


@dataclasses.dataclass(frozen=True)
class Call:
    """A library call of a program (a cuBLAS GEMM, an array-module operation on device
    arrays): ``function(*inputs)``, its return value stored as ``output`` (``None``: it
    writes in place, into an ``out=`` among its inputs)."""

    function: Any
    #: slots: names, or :class:`View` of named arrays.
    inputs: Tuple[Any, ...]
    output: Any = None


class Diverged(Exception):
    """A replayed :class:`Check` decided otherwise than when its call was compiled (the
    data now pick another algorithm): the compiled call runs the normal path instead."""


@dataclasses.dataclass(frozen=True)
class Expect:
    """A :class:`Check`'s ``decide`` in a compiled call: ``decide``, which must give
    ``expected`` again, else :class:`Diverged`."""

    decide: Any
    expected: Any

    def __call__(self, words):
        value = self.decide(words)
        if value != self.expected:
            raise Diverged(f"the data now decide {value!r}, not {self.expected!r}")
        return value


@dataclasses.dataclass(frozen=True)
class Check:
    """A data check of a program: ``launch`` writes a small ``uint64`` result into
    ``buffer`` (``words`` elements, allocated zeroed by :func:`execute`; the launch's
    slots name it), which is read back with one device-to-host copy (counted as 1
    synchronisation + 1 copy); ``decide(host_words)`` is bound as ``output``.  The
    one-flag data scan (:mod:`.scan_launch`) is one: a compiled call replays it, so a
    decision on the data (a warning) costs one small read, not the normal path."""

    launch: Launch
    buffer: str
    words: int
    decide: Any
    output: str
    #: the decision only warns (it changes no result): a compiled call of an object
    #: that promised its problem (a plan) skips the check when it replays.
    warns: bool = False


@dataclasses.dataclass(frozen=True)
class Program:
    """An algorithm's launches on one problem (see the module docstring)."""

    #: what it computes, for messages (``"direct"``, ``"implicit_gemm"``).
    name: str
    #: names the caller binds (``x``, ``w``; ``bias`` may be bound to ``None``).
    operands: Tuple[str, ...]
    #: ``(name, shape, dtype)`` allocated by :func:`execute` unless the caller binds it.
    allocations: Tuple[Tuple[str, Tuple[int, ...], Any], ...]
    #: the kernel launches (:class:`Launch`) and library calls (:class:`Call`), in order.
    steps: Tuple[Any, ...]
    #: the name of the array the program computes.
    result: str
    #: a host computation instead of steps (the NumPy backend's algorithms):
    #: ``host(*operands) -> result``; its operands are whole views, not pointers.
    host: Any = None
    #: ``(name, array)`` kept by the program (device constants: transform matrices).
    constants: Tuple[Tuple[str, Any], ...] = ()
    #: operands whose values the host read to build the program or to decide on it
    #: (weights factored into taps, a scan on the host): a replay is valid only while
    #: they hold the same values (a compiled call compares their bytes, or never replays).
    host_reads: Tuple[str, ...] = ()
    #: why the program cannot be replayed (work it did outside its steps), ``""`` if it can.
    refusal: str = ""
    #: the refusal holds for this call only (an autotuning measurement, an out-of-memory
    #: fallback): the next call with the same key may compile.
    transient: bool = False

    @property
    def launches(self):
        """The kernel launches among the steps (a :class:`Check`'s included)."""
        return tuple([s.launch if type(s) is Check else s for s in self.steps
                      if type(s) is Launch or type(s) is Check])

    @property
    def checks(self):
        """The data checks among the steps."""
        return tuple([s for s in self.steps if type(s) is Check])

    @property
    def calls(self):
        """The library calls among the steps."""
        return tuple([s for s in self.steps if type(s) is Call])

    @property
    def whole_operands(self):
        """Operands read as whole views (by a host computation or a library call), not
        only through their pointer."""
        if self.host is not None:
            return frozenset(self.operands)
        names = set()
        for step in self.steps:
            if type(step) is Call:
                for s in step.inputs:
                    names.add(getattr(s, "name", s))
        return frozenset(names)

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
    if _STATE.counts is not None:
        count_allocation(math.prod(shape) * np.dtype(dtype).itemsize)
    return xp.empty(shape, dtype=dtype)


def execute(program, xp, bound, workspace=None):
    """Run ``program``: allocate what ``bound`` (a fresh dict name -> array, filled in
    here) lacks, then run each step (a launch on the pointers of the named arrays, a
    library call on them).  ``workspace(shape, dtype)``: how the allocations other than
    the result are made (a runner's, which counts them and turns an out-of-memory into
    the dispatcher's fallback); default :func:`allocate`, as the result's.

    Returns ``bound`` with the program's allocations added; the result is
    ``bound[program.result]``.
    """
    state = _STATE
    rec = state.recording
    if rec is not None:
        rec.steps.append((program, dict(bound), bound))
    if program.host is not None:
        if state.counts is not None:
            state.counts["calls"] += 1
        bound[program.result] = program.host(*[bound[n] for n in program.operands])
        return bound
    for name, shape, dtype in program.allocations:
        if bound.get(name) is None:
            if workspace is None or name == program.result:
                bound[name] = allocate(xp, shape, dtype)
            else:
                bound[name] = workspace(shape, dtype)
    for name, array in program.constants:
        bound[name] = array
    counts, stub = state.counts, state.stub
    for step in program.steps:
        if type(step) is Launch:
            if counts is not None:
                counts["launches"] += 1
            if not stub:
                pick = step.pick
                step.function(step.grid, step.block, (step.params, *(
                    pick(bound) if pick is not None else
                    [_slot(xp, bound, s) for s in step.slots])), shared_mem=step.shared_mem)
            continue
        if type(step) is Check:
            bound[step.output] = _check(step, xp, bound, counts, stub)
            continue
        if counts is not None:
            counts["calls"] += 1
        value = step.function(*[_slot(xp, bound, s) for s in step.inputs])
        if step.output is not None:
            bound[step.output] = value
    return bound


def _check(step, xp, bound, counts, stub):
    """Run a :class:`Check`: zeroed buffer, its launch, one read back, the decision."""
    xp = np if xp is None else xp
    if counts is not None:
        counts["allocations"] += 1
        counts["launches"] += 1
        counts["syncs"] += 1
        counts["d2h"] += 1
    buf = bound[step.buffer] = xp.zeros(step.words, np.uint64)
    launch = step.launch
    if not stub:
        pick = launch.pick                  # as execute() hands a launch its slots
        launch.function(launch.grid, launch.block, (launch.params, *(
            pick(bound) if pick is not None else
            [_slot(xp, bound, s) for s in launch.slots])), shared_mem=launch.shared_mem)
    return step.decide(buf.get() if hasattr(buf, "get") else buf)   # (NumPy: fresh, as is)


def _slot(xp, bound, slot):
    if type(slot) is str:
        return bound[slot]
    base = bound[slot.name]
    if slot.shape is None:
        return at_offset(xp, base, slot.offset) if slot.offset else base
    return view_of(xp, base, slot.offset, (slot.shape, slot.strides, slot.dtype))


def at_offset(xp, base, offset):
    """An array whose data pointer is ``offset`` bytes past ``base``'s (a launch reads
    only the pointer: the strides are in its parameter struct)."""
    if xp is np or type(base) is np.ndarray:
        import ctypes
        addr = data_pointer(base) + offset
        return np.frombuffer((ctypes.c_char * 1).from_address(addr), np.uint8)
    return xp.ndarray((1,), np.uint8, memptr=base.data + offset)


def placed(xp, base, offset, view):
    """A compiled call's operand from ``base``: ``view`` (``(shape, strides, dtype)``) at
    ``offset`` bytes into it (:func:`view_of`), or, with ``view=None``, ``base`` itself or
    its pointer moved by ``offset`` (:func:`at_offset`)."""
    if view is not None:
        return view_of(xp, base, offset, view)
    return base if not offset else at_offset(xp, base, offset)


def view_of(xp, base, offset, view):
    """The view ``(shape, strides, dtype)`` at ``offset`` bytes into C-contiguous ``base``
    (``strides=None``: the whole of ``base`` reshaped, a tenth of the cost on NumPy)."""
    shape, strides, dtype = view
    if strides is None:
        return base.reshape(shape)
    if xp is np or type(base) is np.ndarray:
        return np.ndarray(shape, dtype, buffer=base, offset=offset, strides=strides)
    return xp.ndarray(shape, dtype, memptr=base.data + offset, strides=strides)


def host_step(name, function, *arrays):
    """``function(*arrays)`` as a one-step host program: what a public function does to
    its arrays between programs (a bias added, a layout restored, a cast, a division)
    becomes a step that a compiled call replays, instead of a reason not to compile.
    ``function`` must be a function of its arrays and of the call's key alone."""
    prog = Program(name, tuple(f"a{i}" for i in range(len(arrays))), (), (), "y",
                   host=function)
    return execute(prog, None, {f"a{i}": a for i, a in enumerate(arrays)})["y"]


# ---------------------------------------------------------------- recording


class Recording:
    """What one public call did on this thread: the programs it executed (with the arrays
    they ran on), the constants it made (``held``: those an object keeps for the caller,
    whose values may change between calls) and the decisions on the data it made;
    ``spans``: the memory of the arrays looked at so far (:func:`~.addressing.span_in`)."""

    __slots__ = ("steps", "constants", "held", "guards", "spans")

    def __init__(self):
        self.steps, self.constants, self.held, self.guards = [], [], [], []
        self.spans = {}


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


def host_read(why, *arrays):
    """Run the program of a host read: the host read the values of ``arrays`` (a copy to
    the host, a factorisation, a scan) and what follows depends on them.  It has no
    steps; its operands are :attr:`Program.host_reads`, so a compiled call of the call
    being recorded replays only while they hold the same values (``None``: no array).
    Outside a recording it does nothing (a program without steps), so it is not built."""
    if _STATE.recording is None:
        return
    arrays = [a for a in arrays if a is not None]
    names = tuple(f"a{i}" for i in range(len(arrays)))
    execute(Program(why, names, (), (), None, host_reads=names), None,
            dict(zip(names, arrays)))


def refuse(why, transient=False):
    """Run the program of work done outside any program (a library or host computation
    that is not a step, a measurement, a fallback): it cannot be replayed
    (:attr:`Program.refusal`; ``transient``: only this call's).  Outside a recording it
    does nothing, so it is not built."""
    if _STATE.recording is None:
        return
    execute(Program(why, (), (), (), None, refusal=why, transient=transient), None, {})


def guard(check, arrays, outcome):
    """Say that the call being recorded decided on its data: ``check(*arrays)`` (a cheap
    host function of NumPy arrays, of the call's key otherwise) gave ``outcome``.  A
    compiled call replays only while ``check`` on the new call's arrays gives the same
    outcome (else the normal path), instead of never (:func:`refuse`)."""
    rec = recording()
    if rec is not None:
        rec.guards.append((check, tuple(arrays), outcome))


def constant(array):
    """Mark ``array`` as a constant of the recorded call: computed from the call's key
    alone (filter taps from ``sigma``), so a compiled call may keep and reuse it."""
    rec = recording()
    if rec is not None and array is not None:
        rec.constants.append(array)
    return array


def held(array):
    """Mark ``array`` as held by an object for the recorded call (an operator's kernel):
    a compiled call keeps it and reads it on every replay, as a :func:`constant`, but its
    values may change, so a host read of it (:func:`host_read`) puts its bytes in the
    replay's check."""
    rec = recording()
    if rec is not None and array is not None:
        rec.constants.append(array)
        rec.held.append(array)
    return array


def is_constant(array):
    """Whether ``array`` lies within a :func:`constant` of the call being recorded whose
    values are fixed (not a :func:`held` one)."""
    rec = recording()
    if rec is None or array is None:
        return False
    spans = rec.spans
    ext = span_in(spans, array)[1]
    return (any(inside(ext, span_in(spans, c)[1]) for c in rec.constants)
            and not any(inside(ext, span_in(spans, h)[1]) for h in rec.held))


def inside(inner, outer):
    """Whether the extent ``inner`` lies within the extent ``outer`` (``None``: empty)."""
    return (inner is not None and outer is not None and outer[0] <= inner[0]
            and inner[1] <= outer[1])


def within(inner, outer):
    """Whether array ``inner``'s memory lies within ``outer``'s (:func:`extent`)."""
    return inside(extent(inner), extent(outer))


# ---------------------------------------------------------------- accounting
def count(what, n=1):
    """Add ``n`` to counter ``what`` of the :func:`accounting` in force (if any)."""
    counts = _STATE.counts
    if counts is not None:
        counts[what] += n


def count_allocation(nbytes):
    """Count one allocation of ``nbytes`` (``allocations`` and ``allocated_bytes``) in the
    :func:`accounting` in force (if any)."""
    counts = _STATE.counts
    if counts is not None:
        counts["allocations"] += 1
        counts["allocated_bytes"] += nbytes


def launch_stubbed():
    """Whether :func:`accounting` asked for launches to be counted, not run."""
    return _STATE.stub


@contextlib.contextmanager
def accounting(stub=False):
    """Count what the calls inside the block ask of the device (this thread): a
    ``collections.Counter`` of ``launches``, ``allocations`` (and their
    ``allocated_bytes``), ``syncs``, ``d2h``,
    ``h2d``, ``library`` calls (``runner.matmul``: cuBLAS) and ``calls`` (a program's
    library and array-module steps, host programs and host steps: each allocates its
    result on the array module, which ``allocations`` does not count).  ``stub``: programs count their launches without
    running them (the results are then garbage: for budgets and host time only)."""
    counts = collections.Counter()
    outer = (_STATE.counts, _STATE.stub)
    _STATE.counts, _STATE.stub = counts, bool(stub)
    try:
        yield counts
    finally:
        _STATE.counts, _STATE.stub = outer
