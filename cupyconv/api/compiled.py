"""Compiled calls: a repeated public call replays the launch programs it ran.

:func:`compiled` wraps a public function.  A call builds its *key* from everything that
can change the result or the launch: every argument typed (``2`` and ``2.0`` differ; a
NaN never matches), each array's type, shape, strides, dtype (byte order included),
pointer alignment (up to 16 bytes, what the kernels' vector paths test) and device, the
settings of :mod:`cupyconv.config`, the backend forced by ``use_backend`` and the
current CUDA device.  Arguments the key cannot hold (lists of arrays, array-likes,
arbitrary objects) take the normal path.

The first call with a key runs the normal path and notes the key (:data:`SEEN_ONCE`), so
a key called once pays for no recording, compiling or cached programs.  The second runs
the normal path while :func:`cupyconv._kernels.program.record` watches: which
:class:`~cupyconv._kernels.program.Program` ran on which arrays.  That call *compiles*
when every array a program read is found again by its memory: inside one of the call's
own arrays (at a fixed offset), inside an allocation of an earlier program (a pass
buffer), or inside a constant made from the key alone (filter taps); and when the result
is a view of a program's allocation.  Anything else (a cast or copy of the data
outside a program) means the key is remembered as *not compiled*: it takes the normal
path every time.  So does a program that refuses a replay
(:attr:`~cupyconv._kernels.program.Program.refusal`: work outside any program, such as
cuBLAS or cuFFT between launches, or an autotuning measurement).  Where the host read
an operand's values (:attr:`~cupyconv._kernels.program.Program.host_reads`: weights
factored into the ``separable`` taps, a scan on the host), the arrays those values
come from (through the programs that made them, a widening copy for one) are found
too: a call's array or an array an object holds (:func:`~cupyconv._kernels.program.held`)
has its bytes compared on every replay when it is a small NumPy array, and the call
never replays otherwise; a constant made from the key alone needs no comparison.
A decision that is a program's :class:`~cupyconv._kernels.program.Check` (the one-flag scan deciding a warning, or
``auto``'s fft rule) compiles and replays; a check that decides expects its recorded
outcome on replay (:class:`~cupyconv._kernels.program.Expect`), and data that decide
otherwise take the normal path (``program.Diverged``); a :func:`compiled_method`'s
replay (a plan) leaves out the checks that only warn.

A repeated compiled call then does only: build the key, look it up, allocate the
programs' allocations, launch their launches with the new pointers, view the result.
No dispatcher, no problem objects, no validation beyond what the key proves.  An
out-of-memory while replaying runs the normal path instead.  The cache is a bounded
LRU (:data:`COMPILED_CALLS` entries), thread-safe, emptied by ``clear_caches()``, and
switched off by ``cupyconv.config.compiled_calls = False``.

On the ``numpy`` backend the tap loop (``direct``/``implicit_gemm``), ``gemm``,
``winograd`` along the last axis and ``fft`` on one signal are *host programs*
(``Program.host``: one call of the algorithm on whole operand views), so a repeated call
there skips validation and the dispatcher the same way; its operands are rebuilt as
views (shape, strides, dtype at an offset) of the call's arrays.
"""
from __future__ import annotations

import dataclasses
import functools
import sys
import weakref
from typing import Any, Callable, TypeVar, overload

import numpy as np

from .. import config
from .._kernels import program
from .._lru import LRU, clears
from ..dispatch.backends import FORCED
from .replay_values import HOST_VALUE_BYTES, replay_steps, source as _source

#: A decorated function's type, kept by the decorators (their wrappers take the same
#: arguments).
_F = TypeVar("_F", bound=Callable[..., Any])

__all__ = ["compiled", "compiled_method", "CompiledCall", "NotCompiled", "SEEN_ONCE",
           "COMPILED_CALLS", "HOST_VALUE_BYTES", "clear_cache", "lookup", "call_key"]

#: Compiled calls kept (each holds a few programs; the LRU drops the oldest).
COMPILED_CALLS = 512



def _held(entry):
    return getattr(entry, "device_bytes", 0)


def _bounded_lru(entries):
    """A compiled-call cache: ``entries`` keys, and ``config.compiled_call_bytes`` of
    device memory held by its entries (constants, a graph's owned buffers)."""
    return LRU(entries, maxbytes=functools.partial(getattr, config, "compiled_call_bytes"),
               size=_held)


_cache = _bounded_lru(COMPILED_CALLS)

#: type -> whether it is CuPy's ndarray (NumPy's is tested first, by identity).
_ARRAY_TYPES = {np.ndarray: False}
_SCALARS = (int, bool, str, bytes, type(None), np.dtype, type)


class NotCompiled:
    """A key whose call takes the normal path every time, and why."""

    __slots__ = ("reason",)

    def __init__(self, reason):
        self.reason = reason

    def __repr__(self):
        return f"NotCompiled({self.reason!r})"


#: The entry of a key called once: its next call records and compiles (a key called
#: once never pays for recording, compiling and the entry's programs).
SEEN_ONCE = NotCompiled("called once: the next call with this key records and compiles")


def _is_cupy(t):
    known = _ARRAY_TYPES.get(t)
    if known is None:
        known = _ARRAY_TYPES[t] = (t.__name__ == "ndarray"
                                   and t.__module__.split(".")[0] == "cupy")
    return known


def _alignment(ptr):
    """The pointer's alignment as the kernels test it: 1, 2, 4, 8 or 16 bytes."""
    low = ptr & 15
    return 16 if low == 0 else low & -low


#: :func:`_alignment` of ``ptr`` by ``ptr & 15`` (a key part reads it without a call).
_ALIGNMENT = tuple(_alignment(low) for low in range(16))


def call_key(args, kwargs, backend=None):
    """``(key, arrays)`` of a call, or ``(None, None)`` when the key cannot hold it.

    ``arrays`` lists the call's top-level arrays in key order (the replay binds them);
    ``backend`` is the one in force (``get_backend()``, read when not given).
    """
    arrays = []
    parts = [config.in_force_id,    # every setting, as one small int
             (FORCED.forced or "numpy") if backend is None else backend]   # get_backend()
    for v in args:
        part = _part(v, arrays)
        if part is None:
            return None, None
        parts.append(part)
    for k, v in kwargs.items():
        part = _part(v, arrays)
        if part is None:
            return None, None
        parts.append(k)
        parts.append(part)
    for a in arrays:
        if type(a) is not np.ndarray:
            import cupy  # optional dependency: present, since a CuPy array was passed
            parts.append(("device", cupy.cuda.runtime.getDevice()))
            break
    return tuple(parts), arrays


#: ``id(array) -> (weak reference, data pointer)`` of NumPy arrays seen lately: reading
#: ``__array_interface__`` costs ~1 us, a third of a repeated call's key.  An entry is
#: used only while its reference still points at the same object.
_POINTERS = {}


def _numpy_pointer(v):
    """``v``'s data pointer, read and remembered in :data:`_POINTERS` (a hit is read
    inline by :func:`_part`)."""
    ptr = v.__array_interface__["data"][0]
    if len(_POINTERS) > 256:
        _POINTERS.clear()
    _POINTERS[id(v)] = (weakref.ref(v), ptr)
    return ptr


def _part(v, arrays):
    t = type(v)
    if t is np.ndarray:
        arrays.append(v)
        hit = _POINTERS.get(id(v))                  # _numpy_pointer(v), its hit inline
        ptr = hit[1] if hit is not None and hit[0]() is v else _numpy_pointer(v)
        return (t, v.shape, v.strides, v.dtype, _ALIGNMENT[ptr & 15], v.flags.writeable)
    if t not in _SCALARS and t not in (float, complex, tuple, list) and _is_cupy(t):
        arrays.append(v)
        return (t, v.shape, v.strides, v.dtype, _ALIGNMENT[v.data.ptr & 15], v.device.id)
    if t is float or t is complex:
        return None if v != v else (t, v)          # a NaN never matches
    if t in _SCALARS or isinstance(v, np.dtype):
        return (t, v)
    if t is tuple or t is list:
        inner = []
        for e in v:
            p = _part(e, arrays)
            if p is None:
                return None
            inner.append(p)
        return (t, tuple(inner))
    if isinstance(v, np.generic) and not isinstance(v, np.void):
        return None if (isinstance(v, np.inexact) and v != v) else (t, v)
    return None


class CompiledCall:
    """The programs of one key, with where each of their operands comes from."""

    __slots__ = ("steps", "result", "xp", "programs", "host_values", "held_values", "guards",
                 "graph", "checks_values", "_constant_bytes", "_bindings", "__weakref__")

    def __init__(self, steps, result, xp, host_values=(), guards=(), graph=None,
                 held_values=()):
        #: ``(program, ((name, source), ...))`` in order; a source is
        #: ``("arg", i, None, offset, view)`` (the call's ``i``-th array),
        #: ``("prev", step, name, offset, view)`` (an earlier program's array) or
        #: ``("const", array)`` (``array`` ``None`` for no array); ``view`` is
        #: ``(shape, strides, dtype)`` for a host program's operands (whole views), ``None``
        #: for a launch's (only the pointer is read).
        self.steps = steps
        #: ``(step, name, None)`` for the allocation itself, else ``(step, name, view)``
        #: with ``view = (offset, shape, strides, dtype)`` (the allocation C-contiguous).
        self.result = result
        self.xp = xp
        programs, constants, bindings = [], [], []
        for prog, binding in steps:
            programs.append(prog)
            # the binding sorted once by kind (a repeated call's replay walks the short
            # lists): constants, whole call arrays, the other sources
            given, whole, other = {}, [], []
            for n, src in binding:
                kind = src[0]
                if kind == "const":
                    given[n] = src[1]
                    constants.append(src[1])
                elif kind == "arg" and not src[3] and src[4] is None:
                    whole.append((n, src[1]))
                elif kind == "prev" or kind == "arg":
                    other.append((n, src))
            for _, a in prog.constants:
                constants.append(a)
            bindings.append((prog, given, tuple(whole), tuple(other)))
        self.programs = tuple(programs)
        #: ``(i, bytes)`` of the call's arrays that no program reads (``axes=``, ``origin=``
        #: or ``sigma=`` given as arrays, weights read on the host): their values shaped
        #: the programs, so a replay needs the same values (:meth:`matches`)
        self.host_values = host_values
        #: ``(array, bytes)`` of arrays an object holds for the call (an operator's kernel)
        #: whose values the host read: a replay needs the same values (:meth:`matches`)
        self.held_values = held_values
        #: ``(check, sources, outcome)``: the decisions on the data the first call made
        #: (:func:`cupyconv._kernels.program.guard`), with where their arrays come from
        #: (``("arg", i, None, offset, view)``, as :attr:`steps`)
        self.guards = guards
        #: a :class:`~cupyconv.backends.cuda.graphs.GraphedCall` replaying the programs as
        #: one CUDA graph (``config.cuda_graphs``), or ``None``.
        self.graph = graph
        #: whether a replay first compares values (:meth:`matches`)
        self.checks_values = bool(host_values or held_values or guards)
        self._constant_bytes = _array_bytes(constants)
        #: per step: ``(program, constants, whole call arrays, the other sources)``
        self._bindings = tuple(bindings)

    @property
    def device_bytes(self):
        """Device memory this entry holds between calls: its programs' constants and its
        graph's owned buffers (what ``config.compiled_call_bytes`` bounds)."""
        return self._constant_bytes + (self.graph.device_bytes if self.graph is not None else 0)

    def matches(self, arrays):
        """Whether the arrays the host read hold the values this call was compiled with,
        and every decision on the data comes out as it did."""
        if not all(arrays[i].tobytes() == b for i, b in self.host_values):
            return False
        if not all(a.tobytes() == b for a, b in self.held_values):
            return False
        for check, sources, outcome in self.guards:
            operands = [arrays[s[1]] if s[4] is None else
                        program.view_of(np, arrays[s[1]], s[3], s[4]) for s in sources]
            if check(*operands) != outcome:
                return False
        return True

    @property
    def launches(self):
        return sum(len(p.launches) for p in self.programs)

    @property
    def allocations(self):
        return sum(len(p.allocations) + len(p.checks) for p in self.programs)

    def __repr__(self):
        graph = "" if self.graph is None else (
            f"; not graphed: {self.graph.reason}" if self.graph.reason
            else "; replayed as one CUDA graph")
        return (f"CompiledCall({' + '.join(p.name for p in self.programs)}: "
                f"{self.launches} launches, {self.allocations} allocations{graph})")

    def replay(self, arrays):
        """Run the programs on this call's ``arrays``; returns the result."""
        if self.graph is not None:
            y = self.graph.replay(arrays)
            if y is not None:
                return y
        xp, done = self.xp, []
        for prog, constants, whole, others in self._bindings:
            bound = constants.copy()                # constants, or no array (bias)
            for name, i in whole:
                bound[name] = arrays[i]
            for name, src in others:
                base = arrays[src[1]] if src[0] == "arg" else done[src[1]][src[2]]
                bound[name] = program.placed(xp, base, src[3], src[4])
            done.append(program.execute(prog, xp, bound))
        step, name, view = self.result
        y = done[step][name]
        return y if view is None else program.view_of(xp, y, view[0], view[1:])


def _compile(rec, arrays, result, promise=False):
    """A :class:`CompiledCall` from a recording, or :class:`NotCompiled` with the reason;
    ``promise``: the caller froze its problem (a plan), so the replay leaves out the
    checks that only warn (:func:`_unchecked`)."""
    computing = []
    for prog, _, _ in rec.steps:
        if prog.refusal:
            return NotCompiled(prog.refusal)
        computing.append(_computes(prog))
    if not any(computing):
        return NotCompiled("no launch program ran (the numpy backend, or an empty result)")
    xp = _module_of(result)
    if xp is None:
        return NotCompiled("the result is not an array")
    found = replay_steps(rec, arrays, result, computing)
    if isinstance(found, str):
        return NotCompiled(found)
    steps, res, host_values, held_values = found
    guards = _guards(rec, arrays)
    if isinstance(guards, str):
        return NotCompiled(guards)
    if promise:
        steps, res = _unchecked(steps, res)
    if xp is not np and config.prebuilt_launches:
        import cupy  # optional dependency: present, the result is a CuPy array
        from ..backends.cuda.prebuilt_launch import prebuilt_program  # loads with the CUDA path
        def stream():
            return cupy.cuda.get_current_stream().ptr
        steps = [(prebuilt_program(prog, cupy.cuda.driver, stream), binding)
                 for prog, binding in steps]
    graph = None  # NumPy arrays graph only under graphs.use_api's stand-in (tests)
    if config.cuda_graphs and (xp is not np or "cupyconv.backends.cuda.graphs" in sys.modules):
        from ..backends.cuda import graphs  # the CUDA path loads on first use
        graph = graphs.graphed(steps, res, xp, arrays)
    return CompiledCall(tuple(steps), res, xp, host_values, guards, graph, held_values)


def _computes(prog):
    """Whether ``prog`` does work a replay repeats (not a host read or a refusal only)."""
    return bool(prog.steps or prog.allocations or prog.host is not None or prog.constants)


def _array_bytes(arrays):
    """The bytes of the distinct arrays among ``arrays`` (``None`` skipped)."""
    seen = {}
    for a in arrays:
        if a is not None:
            seen[id(a)] = int(a.nbytes)
    return sum(seen.values())


def _guards(rec, arrays):
    """The recording's guards with their arrays found among the call's (whole views), or
    why one cannot be rebuilt on a replay."""
    guards = []
    for check, operands, outcome in rec.guards:
        sources = []
        for a in operands:
            src = _source(a, arrays, (), (), True)
            if isinstance(src, str) or src[0] != "arg":
                return f"a decision on the data reads an array that is not the call's: {src}"
            sources.append(src)
        guards.append((check, tuple(sources), outcome))
    return tuple(guards)


def _unchecked(steps, res):
    """``(steps, res)`` without the :class:`~cupyconv._kernels.program.Check` steps that
    only warn (``warns``): a plan promises its problem, not its data, so its repeated
    call does not scan (the first call of each key did, and warned).  A program left
    with no steps and no allocations is dropped, the later indices renumbered."""
    kept, index = [], {}
    for i, (prog, binding) in enumerate(steps):
        if any(type(s) is program.Check and s.warns for s in prog.steps):
            prog = dataclasses.replace(prog, steps=tuple(
                s for s in prog.steps if not (type(s) is program.Check and s.warns)))
            if not prog.steps and not prog.allocations and prog.host is None:
                continue
        index[i] = len(kept)
        kept.append((prog, tuple((n, src[:1] + (index[src[1]],) + src[2:])
                                 if src[0] == "prev" else (n, src) for n, src in binding)))
    return kept, (index[res[0]],) + tuple(res[1:])


def _module_of(a):
    t = type(a)
    if t is np.ndarray:
        return np
    if _is_cupy(t):
        import cupy  # optional dependency: present, the result is a CuPy array
        return cupy
    return None


def lookup(function, *args, **kwargs):
    """The cache entry of the call ``function(*args, **kwargs)`` of a :func:`compiled`
    function or a :func:`compiled_method` bound method (:class:`CompiledCall`,
    :class:`NotCompiled`, or ``None`` when none is cached)."""
    self = getattr(function, "__self__", None)
    if self is not None:
        cache, tag = self.__dict__.get("_compiled"), function.__func__.__wrapped_compiled__
    else:
        cache, tag = _cache, function.__wrapped_compiled__
    key, _ = call_key(args, kwargs)
    if key is None or cache is None:
        return None
    return cache.get((tag, key))


def _call(fn, tag, cache, args, kwargs, promise=False, owner=None):
    """``fn(*args, **kwargs)`` (``fn(owner, *args, ...)`` for a method) through ``cache``."""
    if not config.compiled_calls or program._STATE.recording is not None:
        return _normal(fn, owner, args, kwargs)        # off, or inside a call being recorded
    try:
        key, arrays = call_key(args, kwargs)
        if key is None:
            return _normal(fn, owner, args, kwargs)
        key = (tag, key)
        entry = cache.get(key)
    except TypeError:                     # an unhashable value inside the key
        return _normal(fn, owner, args, kwargs)
    if entry is None:                     # a first call: the normal path, the key noted
        cache.put(key, SEEN_ONCE, 0)
        return _normal(fn, owner, args, kwargs)
    if entry is not SEEN_ONCE:
        if type(entry) is CompiledCall and (not entry.checks_values
                                             or entry.matches(arrays)):
            try:
                y = entry.replay(arrays)
            except (MemoryError, program.Diverged):   # CuPy's OutOfMemoryError too; data
                pass                                  # that choose otherwise: the normal path
            else:
                if entry.graph is not None and entry.graph.recount():
                    _store(cache, key, entry)      # captured: its owned buffers counted
                return y
        return _normal(fn, owner, args, kwargs)
    with program.record() as rec:                  # the second call records and compiles
        result = _normal(fn, owner, args, kwargs)
    entry = _compile(rec, arrays, result, promise)
    if type(entry) is NotCompiled:
        for p, _, _ in rec.steps:
            if p.transient:                 # refused for this call only: not remembered
                return result
    _store(cache, key, entry)
    return result


def _normal(fn, owner, args, kwargs):
    """The call itself, on the normal path (``owner``: the instance of a
    :func:`compiled_method`, passed here rather than bound into a partial on every call)."""
    if owner is None:
        return fn(*args, **kwargs)
    return fn(owner, *args, **kwargs)


def _store(cache, key, entry):
    """Store ``entry``, or why it is too large for the byte bound (the cache refuses an
    entry holding more than ``config.compiled_call_bytes`` of device memory alone)."""
    held = _held(entry)
    if not cache.put(key, entry, held):
        cache.put(key, NotCompiled(
            f"its programs hold {held} bytes of device memory (constants, a graph's "
            f"buffers), more than config.compiled_call_bytes = {config.compiled_call_bytes}"))


def compiled(fn: _F) -> _F:
    """Decorate a public function with the process-wide compiled-call cache."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return _call(fn, fn, _cache, args, kwargs)
    wrapper.__wrapped_compiled__ = fn
    return wrapper


@overload
def compiled_method(fn: _F) -> _F: ...
@overload
def compiled_method(fn: None = None, *, warns: bool = False) -> Callable[[_F], _F]: ...
def compiled_method(fn=None, *, warns=False):
    """Decorate a method with a compiled-call cache of its own instance (``_compiled``),
    so a key never outlives the object it belongs to (a plan's weights, its choice).
    The object promised its problem: a replay leaves out the checks that only warn
    (the NaN/Inf scan of an explicit ``method="winograd"``), which its first call with
    each key ran; ``warns=True`` keeps them (an operator's ``matvec`` warns on every
    call as the function it applies does)."""
    if fn is None:
        return functools.partial(compiled_method, warns=warns)

    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        cache = self.__dict__.get("_compiled")
        if cache is None:
            cache = self.__dict__["_compiled"] = _bounded_lru(16)
            _owners.add(self)
        return _call(fn, fn, cache, args, kwargs, promise=not warns, owner=self)
    wrapper.__wrapped_compiled__ = fn
    return wrapper


#: objects with a :func:`compiled_method` cache (plans), for :func:`clear_cache`.
_owners = weakref.WeakSet()


@clears
def clear_cache():
    """Forget every compiled call, the plans' own included (``cupyconv.clear_caches``)."""
    _cache.clear()
    for owner in list(_owners):
        owner.__dict__.pop("_compiled", None)
