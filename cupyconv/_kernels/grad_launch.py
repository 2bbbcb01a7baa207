"""Pieces the gradients' launch programs are built from (``backends/cuda/gradients`` and
``implicit_grads``).

The gradients run the forward kernels (the implicit GEMM, vol2col/col2vol) on
role-swapped views of their operands: a weight gradient's "input" is one group of ``x``
with its first two axes swapped, an input gradient's is ``dy`` cropped.  Their programs
are built from the forward programs of :mod:`.launch` with each launch's slots
*retargeted* (:func:`retarget`): the slot ``x`` of the forward launch becomes a pointer
at a fixed byte offset into the gradient's ``dy`` (:class:`~.program.View`), ``w`` the
program's transposed-weights workspace, and so on.  The forward builders read strides
and alignment from arrays; for an array the gradient program allocates itself they get
a stand-in with the allocation's shape, contiguous strides and a 256-byte aligned
pointer (:func:`fresh_like`, never read).  :func:`composed` memoises a composed program
on the forward programs it was made of (memoised themselves, so found by identity).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .._lru import LRU
from .addressing import data_pointer
from .program import Launch

__all__ = ["retarget", "fresh_like", "fresh_operands", "composed", "clear_program_cache",
           "byte_offset"]

#: Composed gradient programs kept.
PROGRAMS = 256

_programs = LRU(PROGRAMS)


def retarget(launches, mapping):
    """``launches`` with each slot name replaced by ``mapping[name]`` (a name, or a
    :class:`~.program.View` pointer at an offset into a named array); names not in
    ``mapping`` stay."""
    return tuple([dataclasses.replace(s, slots=tuple([mapping.get(n, n) for n in s.slots]))
                  if type(s) is Launch else s for s in launches])


def byte_offset(view, base):
    """Bytes from ``base``'s data pointer to ``view``'s (a view into ``base``)."""
    return data_pointer(view) - data_pointer(base)


_STANDIN = np.empty(1024, np.uint8)
#: The offset of the stand-ins' 256-byte aligned pointer into :data:`_STANDIN`.
_ALIGNED = (-data_pointer(_STANDIN)) % 256


def fresh_like(shape, dtype):
    """A host stand-in for a fresh C-contiguous allocation of ``shape`` and ``dtype``:
    its strides and a 256-byte aligned pointer, as the pool's (CuPy) or NumPy's fresh
    arrays have; its memory must never be read (the builders read strides and
    pointers only)."""
    dtype = np.dtype(dtype)
    base = _STANDIN[_ALIGNED:_ALIGNED + dtype.itemsize].view(dtype)
    strides, step = [], dtype.itemsize
    for n in reversed(tuple(shape)):
        strides.append(step)
        step *= max(int(n), 1)
    return np.lib.stride_tricks.as_strided(base, tuple(shape), tuple(reversed(strides)),
                                           writeable=False)


def fresh_operands(problem):
    """:func:`fresh_like` stand-ins of ``problem``'s ``x``, ``w`` and ``y`` (C-contiguous
    channels-first shapes)."""
    dtype = problem.dtype
    return (fresh_like(problem.x_shape, dtype), fresh_like(problem.w_shape, dtype),
            fresh_like(problem.y_shape, dtype))


def composed(key, parts, build):
    """The program ``build()`` makes from the (memoised) programs ``parts``, memoised on
    ``key`` and the parts' identity (the entry keeps them, so an identity is not reused
    while it lives)."""
    full = (key, tuple(map(id, parts)))
    hit = _programs.get(full)
    if hit is not None and all(a is b for a, b in zip(hit[0], parts)):
        return hit[1]
    prog = build()
    _programs.put(full, (tuple(parts), prog))
    return prog


def clear_program_cache():
    """Forget the composed programs (they hold the runners' kernels)."""
    _programs.clear()
