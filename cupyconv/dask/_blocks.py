"""Block geometry shared by the Dask front ends.

Every Dask path reduces to one pattern: a (padded) input whose blocks,
each extended by a halo borrowed from its neighbours, produce whole
output blocks under a ``padding=0`` / ``mode="valid"`` call of the
in-memory function.  This module plans that chunking per axis
(:func:`plan_axis`), pads at the array edges (:func:`pad`) and builds the
graph (:func:`map_halo_blocks`).
"""
from __future__ import annotations

import dataclasses
from typing import Tuple

import dask
import dask.array as da
import numpy as np
from dask.array.overlap import overlap

from ..core import args as arguments

__all__ = ["AxisPlan", "plan_axis", "single_block_plan", "pad", "map_halo_blocks",
           "as_dask_array", "check_kernel", "guard_memory", "meta_like", "empty_result", "stand_in"]


@dataclasses.dataclass(frozen=True)
class AxisPlan:
    """How one padded axis is cut so every block yields whole output chunks.

    Attributes
    ----------
    in_chunks : tuple of int
        Chunks of the padded axis, truncated to `used` elements.
    out_chunks : tuple of int
        Output chunks; block ``i`` of `in_chunks`, extended by `depth`
        elements of its neighbours, produces output chunk ``i``.
    depth : (int, int)
        Halo borrowed from the preceding and the following block
        (``boundary='none'``: the first and last blocks lend nothing outwards).
    used : int
        Leading padded elements the output depends on (the tail after it
        is never read when the stride does not divide the extent).
    """

    in_chunks: Tuple[int, ...]
    out_chunks: Tuple[int, ...]
    depth: Tuple[int, int]
    used: int


def plan_axis(chunks, pad_width, span, stride=1):
    """Plan one convolved axis.

    Parameters
    ----------
    chunks : tuple of int
        Chunks of the unpadded input axis.
    pad_width : (int, int)
        Padding before and after the input.
    span : int
        Dilated kernel extent ``dilation * (K - 1) + 1``.
    stride : int, optional

    Returns
    -------
    AxisPlan

    Notes
    -----
    Output position ``o`` reads padded elements ``[o*stride, o*stride+span)``.
    The halo ``h = max(span - stride, 0)`` is split into ``a`` elements
    borrowed from the preceding block and ``h - a`` from the following one,
    with ``a = min(pad_before, h)``.  Output chunk ``i`` starts at
    ``O_i = round((pad_before + S_i - a) / stride)`` where ``S_i`` is an
    input chunk boundary, and its input block at ``O_i*stride + a``: block
    starts are multiples of the stride in the padded coordinate (shifted by
    the constant ``a``), and with ``stride=1`` the input chunks stay where
    they are (only the edge padding joins the first and last chunk), so
    ``same`` keeps the input's chunks and ``full`` grows the last by
    ``K-1``.  Output chunks are merged until every block is at least as long
    as the halo it lends (chunks smaller than the halo are rechunked).
    """
    size = int(sum(chunks))
    pad_before = int(pad_width[0])
    # the output extent of a kernel of extent ``span`` (its dilation applied)
    n_out = arguments.output_shape((size,), (span,), ((pad_before, int(pad_width[1])),),
                                   (stride,), (1,))[0]
    if n_out < 1:
        raise ValueError(f"internal error: empty output (padded size "
                         f"{size + pad_before + int(pad_width[1])}, span {span})")
    halo = max(span - stride, 0)
    before = min(pad_before, halo)
    depth = (before, halo - before)
    bounds = np.cumsum((pad_before - before,) + tuple(chunks[:-1]))[1:]
    cuts = sorted({min(max((int(b) + stride // 2) // stride, 0), n_out) for b in bounds}
                  - {0, n_out})
    pieces = np.diff([0] + cuts + [n_out]).tolist()
    minimum = max(-(-max(depth) // stride), 1)
    out_chunks, acc = [], 0
    for piece in pieces:
        acc += piece
        if acc >= minimum:
            out_chunks.append(acc)
            acc = 0
    if acc and out_chunks:
        out_chunks[-1] += acc
    elif acc:
        out_chunks.append(acc)
    used = (n_out - 1) * stride + span
    starts = np.cumsum([0] + out_chunks[:-1]) * stride + before
    starts[0] = 0
    in_chunks = np.diff(starts.tolist() + [used]).tolist()
    return AxisPlan(tuple(in_chunks), tuple(out_chunks), depth, used)


def single_block_plan(size, n_out):
    """One block covering the whole axis (no halo), ``n_out`` outputs."""
    return AxisPlan((size,), (n_out,), (0, 0), size)


# Largest pad width per side that ``dask.array.pad`` reproduces exactly
# (it mirrors at most one period); wider pads go through ``xp.pad``.
_DASK_PAD_LIMIT = {
    "reflect": lambda n: n - 1,
    "symmetric": lambda n: n,
    "wrap": lambda n: n,
    "edge": lambda n: np.inf,
    "constant": lambda n: np.inf,
}


def _pad_block(block, pad_width, mode, **kwargs):
    xp = arguments.array_module_of(block=block)
    return xp.pad(block, pad_width, mode=mode, **kwargs)


def pad(x, pad_width, mode="constant", cval=0):
    """:func:`numpy.pad` semantics on a Dask array, at the array edges only.

    ``dask.array.pad`` is used where it is exact; an axis padded by more
    than one period in ``reflect``/``symmetric``/``wrap`` mode (which
    ``numpy.pad`` handles by repeated mirroring, dask not) is made one
    chunk and padded in memory, block by block.  So is an empty axis:
    ``dask.array.pad`` sizes the pad chunks from the axis' largest chunk,
    0 there (ZeroDivisionError); constant padding makes it all ``cval``.
    """
    pad_width = tuple((int(b), int(a)) for b, a in pad_width)
    if not any(b or a for b, a in pad_width):
        return x
    limit = _DASK_PAD_LIMIT[mode]
    kwargs = {"constant_values": cval} if mode == "constant" else {}
    # empty axes first, so dask.array.pad below sees a non-empty array (its
    # concatenation keeps zero-size pieces of an empty one as extra chunks)
    shape = tuple(x.shape)
    empty = [(b, a) if n == 0 else (0, 0) for (b, a), n in zip(pad_width, shape)]
    native = [(b, a) if n > 0 and max(b, a) <= limit(n) else (0, 0)
              for (b, a), n in zip(pad_width, shape)]
    wide = [(b, a) if n > 0 and max(b, a) > limit(n) else (0, 0)
            for (b, a), n in zip(pad_width, shape)]
    x = _pad_axes_in_memory(x, empty, mode, kwargs)
    if any(b or a for b, a in native):
        x = da.pad(x, tuple(native), mode=mode, **kwargs)
    return _pad_axes_in_memory(x, wide, mode, kwargs)


def _pad_axes_in_memory(x, pad_width, mode, kwargs):
    """Pad each axis with a non-zero width as one chunk, block by block, with ``xp.pad``."""
    for ax, (b, a) in enumerate(pad_width):
        if b or a:
            x = x.rechunk({ax: -1})
            widths = [(0, 0)] * x.ndim
            widths[ax] = (b, a)
            chunks = list(x.chunks)
            chunks[ax] = (x.shape[ax] + b + a,)
            x = x.map_blocks(_pad_block, pad_width=tuple(widths), mode=mode,
                             chunks=tuple(chunks), dtype=x.dtype, meta=x._meta, **kwargs)
    return x


def map_halo_blocks(worker, x, plans, out_chunks, dtype, meta, **kwargs):
    """Rechunk ``x`` to ``plans``, share halos and map ``worker`` per block.

    Parameters
    ----------
    worker : callable
        ``worker(block, [block_id=...,] **kwargs)`` returning one output block.
    x : dask.array.Array
        Padded input.
    plans : dict of int to AxisPlan
        Planned axes; the others keep their chunks (or the ones given in
        `out_chunks`, which must then cover the whole axis as one block).
    out_chunks : dict of int to tuple of int
        Output chunks of unplanned axes whose extent changes.
    dtype, meta
        Of the output.
    """
    x = x[tuple(slice(0, plans[ax].used) if ax in plans else slice(None)
                for ax in range(x.ndim))]
    x = x.rechunk(tuple(plans[ax].in_chunks if ax in plans else x.chunks[ax]
                        for ax in range(x.ndim)))
    depth = {ax: p.depth for ax, p in plans.items() if any(p.depth)}
    if depth:
        x = overlap(x, depth=depth, boundary="none", allow_rechunk=False)
    chunks = tuple(plans[ax].out_chunks if ax in plans else out_chunks.get(ax, x.chunks[ax])
                   for ax in range(x.ndim))
    return x.map_blocks(worker, chunks=chunks, dtype=dtype, meta=meta, **kwargs)


def as_dask_array(a, name):
    """``a`` as a Dask array; NumPy/CuPy arrays and array_likes become one chunk.

    Blocks in non-native byte order are byte-swapped once each into the native dtype
    (lazily), as :func:`cupyconv.core.args.as_array` does for in-memory arrays.
    """
    if isinstance(a, da.Array):
        if any(np.isnan(c) for axis in a.chunks for c in axis):
            raise ValueError(
                f"{name} has unknown chunk sizes (shape {a.shape}); call "
                f"{name}.compute_chunk_sizes() first: the halo planning needs them")
    elif dask.is_dask_collection(a):
        raise TypeError(f"{name} must be a dask.array.Array, got {type(a).__name__}")
    else:
        if not hasattr(a, "shape"):
            a = np.asarray(a)
        a = da.from_array(a, chunks=-1, asarray=False)
    native = arguments.native_dtype(a.dtype)
    return a if native == a.dtype else a.astype(native)


def check_kernel(a, name):
    """Reject Dask kernels: the kernel is broadcast to every block."""
    if dask.is_dask_collection(a):
        raise TypeError(
            f"{name} must be an in-memory NumPy or CuPy array, not a Dask collection "
            f"({type(a).__name__}): every block needs the whole kernel; call "
            f"{name}.compute() first")
    return a


def guard_memory(function, block, block_id, what, *args, **kwargs):
    """``function(block, *args, **kwargs)``; a :class:`MemoryError` names the block and
    what to do (the worker and the cluster stay usable: the task fails, not the process)."""
    try:
        return function(block, *args, **kwargs)
    except MemoryError as exc:
        raise MemoryError(
            f"{what} ran out of memory on block {block_id} (shape {tuple(block.shape)}, "
            f"{block.dtype}, halo included): {exc or type(exc).__name__}. Rechunk the input "
            "into smaller chunks (x.rechunk(...)) so that one block's result and workspace "
            "fit a worker's memory, or give each worker more memory (fewer threads per "
            "worker, or a larger memory_limit)") from exc


def meta_like(xp, ndim, dtype):
    """Zero-size array of the output's type (NumPy or CuPy) for ``meta=``."""
    return xp.empty((0,) * ndim, dtype=dtype)


def empty_result(xp, shape, dtype):
    """A Dask array of an empty result (some extent is 0)."""
    return da.from_array(xp.zeros(shape, dtype=dtype), chunks=shape, asarray=False)


def stand_in(shape, dtype):
    """Zero-stride NumPy array of ``shape``: validation without allocation."""
    return np.broadcast_to(np.zeros((), dtype=dtype), tuple(shape))
