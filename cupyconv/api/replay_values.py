"""What a compiled call compares before it replays: the values its programs depend on.

A replay reruns the launches on new pointers; what the host read by *value* when the call
was recorded (weights factored into taps, a data scan, an array argument no program
reads) shaped those programs and must be the same again.  These helpers find those
arrays (:func:`values_read`) and keep their bytes (:func:`host_values`,
:func:`held_values`), or say why the call cannot compile.
"""
from __future__ import annotations

import numpy as np

from .._kernels import program

__all__ = ["HOST_VALUE_BYTES", "values_read", "held_values", "host_values"]


#: Largest array argument no program reads whose value a compiled call keeps and compares.
HOST_VALUE_BYTES = 4096


def _comparable(a):
    """Whether a replay can keep and compare ``a``'s bytes: a small NumPy array."""
    return type(a) is np.ndarray and a.nbytes <= HOST_VALUE_BYTES


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
