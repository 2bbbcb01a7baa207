"""The split-K reduction's launch: ``S`` partial results summed in a fixed order.

``splitk_reduce`` (``cuda_src/conv/splitk_reduce.cu``) sums the contiguous
``(outer, S, inner)`` partials into the contiguous ``(outer, inner)`` result, part 0
first, in the accumulation type, rounding once.  The split-K weight gradient
(``backends/cuda/implicit_grads``) uses it as a step of its launch program.  The kernel's
code is rank-independent; its instance is taken from the problem's rank group (where
the tiles whose partials it sums are).  Its record (:data:`registry.FAMILIES`
``["splitk_reduce"]``) gives its dtypes and its parameter struct
(:data:`~.families.SPLITK_REDUCE_PARAMS`, ``cc::SplitkReduceParams``), whose dtype
:data:`reduce_params_dtype` is.
"""
from __future__ import annotations

import numpy as np

from .._lru import memoized
from . import launch, registry
from .program import Launch

__all__ = ["FAMILY", "reduce_params_dtype", "pack_reduce_params", "reduce_step",
           "clear_program_cache"]

#: The kernel family (``registry.FAMILIES``).
FAMILY = "splitk_reduce"
_RECORD = registry.FAMILIES[FAMILY]
_PARAMS = _RECORD.params[0]
#: ``cc::SplitkReduceParams``: 4 eight-byte fields.
reduce_params_dtype = _PARAMS.dtype()


@memoized()
def pack_reduce_params(outer: int, parts: int, inner: int) -> np.void:
    """The parameter struct of one launch (memoised: never modify the scalar)."""
    return _PARAMS.pack(outer=outer, parts=parts, inner=inner, total=outer * inner)


def reduce_step(module, dtype, outer: int, parts: int, inner: int, slots, rank: int = 1):
    """The :class:`~.program.Launch` summing ``parts`` partials of ``(outer, parts,
    inner)`` (slot ``slots[0]``) into ``(outer, inner)`` (``slots[1]``), or ``None`` when
    there is nothing to sum; the instance of ``rank``'s group.

    Raises
    ------
    ValueError
        If the kernel has no instance for ``dtype`` (its record's dtypes,
        :data:`registry.SPLITK_DTYPES`) or ``parts`` is below 1.
    """
    dt = np.dtype(dtype)
    if not registry.tiles_for(FAMILY, dt, rank):
        raise ValueError(f"the split-K reduction takes "
                         f"{sorted(d.name for d in _RECORD.dtypes)}; got {dt.name}")
    if int(parts) < 1:
        raise ValueError(f"parts must be at least 1; got {parts}")
    return _step(module, dt, int(outer), int(parts), int(inner), tuple(slots), int(rank))


@memoized()
def _step(module, dtype, outer, parts, inner, slots, rank):
    total = outer * inner
    if total == 0:
        return None
    wide = outer * parts * inner >= 2**31 - 1
    kern = launch.kernel_for(module, FAMILY, dtype, rank, wide, ())
    return Launch(kern, (launch.grid_stride_blocks(total),), (registry.block_threads(FAMILY),), 0,
                  pack_reduce_params(outer, parts, inner), slots)


def clear_program_cache():
    """Forget the memoised reduction launches (they hold loaded kernels' function handles)."""
    _step.cache_clear()
