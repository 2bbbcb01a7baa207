"""Scale-out with Dask: ``convolve``, ``correlate`` and ``conv`` on Dask arrays.

``import cupyconv`` never imports Dask; importing this submodule does (install
it with ``pip install -e '.[dask]'`` from a checkout until cupyconv is on a package
index).  The functions take a Dask array
with NumPy or CuPy chunks and an in-memory kernel (NumPy or CuPy, never a Dask
array) and return a lazy Dask array whose values are those of the in-memory
function of the same name: same modes, ``axes``, geometry arguments, dtype
rules and errors.

How it works
------------
Every call is reduced to the in-memory function applied per block with no
padding (``mode="valid"`` / ``padding=0``):

1. The geometry is validated by the in-memory code itself, run on
   zero-stride stand-ins of the real shapes (nothing is allocated), so the
   ``valid``-mode swap, the "kernel larger than input" errors and every
   argument check are identical.
2. The input is padded at the array edges with :func:`dask.array.pad` to the
   geometry of the whole problem: zeros for ``full``/``same`` (``full`` pads
   ``K-1`` on both sides, ``same`` ``K//2`` before and ``(K-1)//2`` after);
   ``conv``'s ``padding`` with its ``padding_mode`` (``constant`` with
   ``cval``, ``reflect``, ``symmetric``, ``wrap``, ``edge``).
3. Each convolved axis is re-cut so that every block produces whole output
   chunks (:func:`cupyconv.dask._blocks.plan_axis`).  The halo
   ``h = max(dilation*(K-1) + 1 - stride, 0)`` (``K-1`` for
   ``convolve``/``correlate``) is split into ``a = min(pad_before, h)``
   elements borrowed from the preceding block and ``h - a`` from the
   following one.  Output chunk boundaries follow the input's, rounded to
   the stride, so block starts are multiples of the stride in the padded
   coordinate; with stride 1 no data moves (``same`` keeps the input's
   chunks, ``full`` grows the last one by ``K-1``, ``valid`` shrinks it).
   Output chunks are merged until every block is at least as long as the
   halo it lends, so chunks smaller than the halo are rechunked.
4. :func:`dask.array.overlap.overlap` with the asymmetric depth
   ``(a, h - a)`` and ``boundary='none'`` (the edges are already padded)
   builds the extended blocks, and :meth:`dask.array.Array.map_blocks` runs
   the in-memory function on each of them.

``scipy.ndimage``'s filters on Dask arrays are in :mod:`cupyconv.dask.ndimage` (each
block extended by the filter's halo, filtered by :mod:`cupyconv.ndimage`).

Channels (``conv``) are always one chunk; batch and non-convolved axes keep
their chunks.  For ``convolve``/``correlate`` with a per-element kernel
(``axes`` given and ``in2`` not 1 along a batch axis) each block gets its
slice of the kernel.  In the swapped ``valid`` case (``in2`` covers ``in1``)
the Dask operand is the smaller one and the convolved axes are one block.

Examples
--------
>>> import numpy as np, dask.array as da, cupyconv.dask as cdask
>>> vol = da.random.default_rng(0).standard_normal((64, 64, 64), chunks=32)
>>> psf = np.ones((5, 5, 5)) / 125
>>> cdask.convolve(vol, psf, mode="same").chunks
((32, 32), (32, 32), (32, 32))
"""
from __future__ import annotations

try:
    import dask.array  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "cupyconv.dask needs Dask, which is not installed; install the 'dask' "
        "extra from a checkout: pip install -e '.[dask]' (pip install 'cupyconv[dask]' once "
        "cupyconv is on a package index), or pip install 'dask[array]' distributed. "
        f"Original error: {exc}") from exc

from ._conv import conv
from ._signal import convolve, correlate

__all__ = ["convolve", "correlate", "conv"]
