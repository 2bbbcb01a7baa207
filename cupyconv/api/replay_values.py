"""Where a compiled call finds its operands again, and what it compares before it replays.

:func:`source` finds where a recorded program's operand lies (a call's array at an offset,
an earlier program's allocation, a constant made from the key) and :func:`result_source`
the result among the programs' allocations, or they say why not.

A replay reruns the launches on new pointers; what the host read by *value* when the call
was recorded (weights factored into taps, a data scan, an array argument no program
reads) shaped those programs and must be the same again.  These helpers find those
arrays (:func:`values_read`) and keep their bytes (:func:`host_values`,
:func:`held_values`), or say why the call cannot compile.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .._kernels import program
from .._kernels import addressing

__all__ = ["HOST_VALUE_BYTES", "replay_steps", "values_read", "held_values", "host_values",
           "extents", "source", "result_source"]


#: Largest array argument no program reads whose value a compiled call keeps and compares.
HOST_VALUE_BYTES = 4096


def _comparable(a):
    """Whether a replay can keep and compare ``a``'s bytes: a small NumPy array."""
    return type(a) is np.ndarray and a.nbytes <= HOST_VALUE_BYTES


def replay_steps(rec, arrays, result, computing):
    """``(steps, result, host values, held values)`` of a recording ``rec`` of a call on
    ``arrays`` that returned the array ``result`` (see
    :class:`~cupyconv.api.compiled.CompiledCall`), or why the call cannot compile: an
    operand or the result is not found again (:func:`source`, :func:`result_source`), or
    values the host read cannot be compared (:func:`host_values`, :func:`held_values`).
    ``computing``: per recorded program, whether it does work a replay repeats (the
    others are host reads only)."""
    made = []                   # [step, name, array, its span] of every program allocation
    steps, reads = [], []               # reads: sources of the values the host read
    spans = extents(arrays, rec)
    constants = ([s[1] for s in addressing.spans(rec.constants, rec.spans)]
                 if rec.constants else [])
    for (prog, bound, touched), computes in zip(rec.steps, computing):
        binding, whole = [], prog.whole_operands
        for name in prog.operands + tuple([n for n, _, _ in prog.allocations]):
            a = bound.get(name, False)
            if a is False:                          # allocated by the program
                made.append([len(steps), name, touched[name], None])
                continue
            src = source(a, arrays, made, constants, name in whole, spans, rec)
            if isinstance(src, str):
                return f"{prog.name} operand {name}: {src}"
            if name in prog.host_reads:
                reads.append(src)
            binding.append((name, src))
        if not computes:                            # a host read only: nothing to replay
            continue
        if prog.host is not None:                   # a host program's result
            made.append([len(steps), prog.result, touched[prog.result], None])
        if prog.host_reads:                         # (read when built: not on a replay)
            prog = dataclasses.replace(prog, host_reads=())
        steps.append((_expecting(prog, touched), tuple(binding)))
    res = result_source(result, made, rec)
    if isinstance(res, str):
        return res
    args, held = values_read(reads, steps, rec.held)
    kept = host_values(arrays, steps, args)
    if isinstance(kept, str):
        return kept
    held_kept = held_values(held)
    if isinstance(held_kept, str):
        return held_kept
    return steps, res, kept, held_kept


def _expecting(prog, touched):
    """``prog`` with each :class:`~cupyconv._kernels.program.Check` that decides (not only
    warns: ``auto``'s fft scan) expecting the outcome it had when recorded (``touched``):
    a replay whose data decide otherwise raises ``program.Diverged``, and the call takes
    the normal path, which chooses again."""
    for s in prog.steps:
        if type(s) is program.Check and not s.warns:
            break
    else:
        return prog
    return dataclasses.replace(prog, steps=tuple(
        dataclasses.replace(s, decide=program.Expect(s.decide, touched[s.output]))
        if type(s) is program.Check and not s.warns else s for s in prog.steps))


def host_values(arrays, steps, read_values=()):
    """``(i, bytes)`` of the call's arrays that no program reads and of those whose values
    the host read (``read_values``, :func:`values_read`), or why the call cannot compile:
    such an array shaped the programs by its values (``axes`` as an array, weights factored
    on the host), so a replay must see the same values; kept for small NumPy arrays."""
    read = {src[1] for _, binding in steps for _, src in binding if src[0] == "arg"}
    kept = []
    for i, a in enumerate(arrays):
        if i in read and i not in read_values:
            continue
        if not _comparable(a):
            return (f"array argument {i} is read on the host, not by a program, and is not a "
                    f"small NumPy array whose values the key can compare")
        kept.append((i, a.tobytes()))
    return tuple(kept)


def values_read(reads, steps, held):
    """``(indices of the call's arrays, held arrays)`` whose values the host read: the
    sources in ``reads``, followed back through the programs that made an array read (its
    values are a function of all of their operands).  Constants made from the key alone
    are left out; ``held``: the recording's :func:`~cupyconv._kernels.program.held`."""
    args, found, seen, todo = set(), {}, set(), list(reads)
    while todo:
        src = todo.pop()
        if src[0] == "arg":
            args.add(src[1])
        elif src[0] == "prev":
            if src[1] not in seen:
                seen.add(src[1])
                todo.extend(s for _, s in steps[src[1]][1])
        elif src[1] is not None:
            for h in held:
                if program.within(src[1], h):
                    found[id(h)] = h
    return args, tuple(found.values())


def held_values(held):
    """``(array, bytes)`` of held arrays whose values the host read, or why the call
    cannot compile (one is not a small NumPy array)."""
    kept = []
    for a in held:
        if not _comparable(a):
            return ("the host read the values of an array the caller's object holds, which "
                    "is not a small NumPy array whose values the key can compare")
        kept.append((a, a.tobytes()))
    return tuple(kept)


def extents(arrays, rec=None):
    """``(data pointer, extent)`` of each of ``arrays``
    (:func:`~cupyconv._kernels.addressing.span`; ``(None, None)`` for what is not an
    array: a host program's result may be any object); ``rec``: the recording whose
    ``spans`` remember them."""
    return addressing.spans(arrays, None if rec is None else rec.spans)


def _span(a, rec):
    """:func:`~cupyconv._kernels.addressing.span` of ``a``, through ``rec``'s ``spans``
    when given."""
    return addressing.span(a) if rec is None else addressing.span_in(rec.spans, a)


def _made_span(entry, rec=None):
    """The span of a ``made`` entry's array (:func:`replay_steps`), found when first asked."""
    if entry[3] is None:
        entry[3] = _span(entry[2], rec)
    return entry[3]


def source(a, arrays, made, constants, whole, spans=None, rec=None):
    """Where operand ``a`` comes from (see
    :attr:`~cupyconv.api.compiled.CompiledCall.steps`), or why it cannot be found again;
    ``made``: ``[step, name, array, span]`` of the programs' allocations so far
    (:func:`replay_steps`); ``constants``: the extents of the recording's constants;
    ``whole``: the operand is read as a view (a host program), not a pointer; ``spans``:
    :func:`extents` of ``arrays`` (computed when not given); ``rec``: the recording that
    remembers spans (:func:`extents`)."""
    if a is None:
        return ("const", None)
    inside = program.inside
    spans = extents(arrays, rec) if spans is None else spans
    viewed = getattr(a, "base", None)   # a view lies within the array it views
    for own, u in enumerate(arrays):
        if u is a:                      # one of the call's arrays itself
            ptr, ext = spans[own]
            break
    else:
        ptr, ext = _span(a, rec)
        own = None
        for i, u in enumerate(arrays):
            if u is viewed and u is not None:
                own = i
    for entry in reversed(made):
        base, outer = _made_span(entry, rec)
        if entry[2] is viewed or inside(ext, outer):
            return _located(("prev", entry[0], entry[1]), a, entry[2], ptr - base, whole)
    hits = []
    if ext is not None:
        for i, (_, span) in enumerate(spans):
            if i == own or inside(ext, span):
                hits.append(i)
    if len(hits) > 1:
        return "lies in more than one of the call's arrays (they overlap)"
    if hits:
        i = hits[0]
        return _located(("arg", i, None), a, arrays[i], ptr - spans[i][0], whole)
    for span in constants:
        if inside(ext, span):
            return ("const", a)
    return "a temporary (a cast or a copy of the data) the replay cannot rebuild"


def _located(where, a, base, offset, whole):
    if not whole:
        return where + (offset, None)
    if (not offset and a.shape == base.shape and a.strides == base.strides
            and a.dtype == base.dtype):
        return where + (0, None)                 # the array itself
    if not base.flags.c_contiguous:
        return "a view of a non-contiguous array (a host program reads whole views)"
    return where + (offset, _view(a, base, offset))


def _view(a, base, offset):
    """``(shape, strides, dtype)`` of ``a`` at ``offset`` into C-contiguous ``base``;
    ``strides`` ``None`` when ``a`` is the whole of ``base`` reshaped (replayed as a
    reshape, not a new array over the buffer)."""
    if (not offset and a.dtype == base.dtype and a.size == base.size
            and a.flags.c_contiguous):
        return tuple(a.shape), None, a.dtype
    return tuple(a.shape), tuple(a.strides), a.dtype


def result_source(y, made, rec=None):
    """``(step, name, view)`` of the result ``y`` among the programs' allocations ``made``
    (``[step, name, array, span]``, :func:`replay_steps`; see
    :attr:`~cupyconv.api.compiled.CompiledCall.result`), or why it is not one's view."""
    for entry in reversed(made):                    # an allocation itself
        if y is entry[2]:
            return (entry[0], entry[1], None)
    at = None
    for entry in reversed(made):
        i, name, buf = entry[:3]
        if type(y) is not type(buf):
            continue
        if at is None:                              # (y's pointer, y's extent)
            at = _span(y, rec)
        base, outer = _made_span(entry, rec)
        if y.base is buf or program.inside(at[1], outer):      # (a view lies within)
            if not buf.flags.c_contiguous:
                break
            offset = at[0] - base
            return (i, name, (offset,) + _view(y, buf, offset))
    return "the result is not a view of a program's allocation (a host-side cast, bias or copy)"
