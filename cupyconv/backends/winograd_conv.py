"""The ``winograd`` algorithm, array-module generic (NumPy on the CPU; the GPU path has
no transform kernels yet).

A forward problem is padded once in its boundary mode, then split per axis into dense
stride-1 pieces (:func:`cupyconv.core.winograd.axis_pieces`: polyphase for the stride,
residues for the dilation); the N-D pieces are the products of the axes' pieces.  Each
piece is one Winograd convolution with the per-axis tiles of
:func:`~cupyconv.core.winograd.best_tile`:

1. input tiles (``alpha`` samples every ``m``) as a strided view, then ``B^T`` along each
   axis (the input transform);
2. the weights through ``G`` along each axis, in float64, once;
3. per transform position a batched GEMM over channels (per group);
4. ``A^T`` along each axis (the output transform), tiles back into the output.

Phases of a stride add into the output; residues of a dilation fill disjoint outputs.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from .. import config
from ..core.winograd import (MAX_ERROR_GROWTH, MAX_TAPS, axis_pieces, best_tile, error_growth,
                             transforms)
from .arrays import all_finite, oriented_weights, pad_input

__all__ = ["can_implement", "data_ok", "plan_tiles", "run", "workspace_bytes", "growth_limit"]


def growth_limit(dtype):
    """The N-D error growth ``auto`` accepts for ``dtype`` (``config.winograd_max_error_growth``
    when set, else :data:`~cupyconv.core.winograd.MAX_ERROR_GROWTH` by item size)."""
    if config.winograd_max_error_growth is not None:
        return float(config.winograd_max_error_growth)
    return MAX_ERROR_GROWTH.get(np.dtype(dtype).itemsize, 10.0)


def _pieces(problem):
    per_axis = [axis_pieces(problem.kernel_shape[a], problem.stride[a], problem.dilation[a],
                            problem.out_shape[a]) for a in range(problem.ndim)]
    return list(itertools.product(*per_axis))


def plan_tiles(problem):
    """``[(pieces, tile), ...]`` per N-D piece, or a reason string when a piece has no
    tile within the error gate."""
    limit = growth_limit(problem.dtype)
    plan = []
    for pieces in _pieces(problem):
        rs = tuple(p.r for p in pieces)
        if all(r == 1 for r in rs):
            plan.append((pieces, (1,) * len(rs)))
            continue
        tile = best_tile(rs, np.dtype(problem.dtype).itemsize, limit)
        if tile is None and max(rs) > MAX_TAPS:
            return f"winograd tiles are built for kernels of at most {MAX_TAPS} taps per axis"
        if tile is None:
            smallest = math.prod(error_growth(transforms(2, r)) for r in rs if r > 1)
            return (f"the smallest Winograd tiles F(2, r) of the kernel {rs} have an error "
                    f"growth of {smallest:.3g}x direct's, above the limit of {limit:g} "
                    f"(config.winograd_max_error_growth)")
        plan.append((pieces, tile))
    return plan


def can_implement(problem):
    """``(ok, reason)`` for the forward ``problem`` (float/complex data, finite ``cval``,
    a tile within the error gate for every piece)."""
    if problem.dtype.kind not in "fc":
        return False, (f"winograd computes float and complex data only (the transforms' "
                       f"fractions would not keep {problem.dtype} exact)")
    if not np.isfinite(complex(problem.cval)):
        return False, "a non-finite cval would spread through the Winograd tiles"
    if all(k == 1 for k in problem.kernel_shape):
        return False, "a 1-tap kernel saves no multiplications"
    if max(problem.kernel_shape) > MAX_TAPS:
        return False, f"winograd tiles are built for kernels of at most {MAX_TAPS} taps per axis"
    plan = plan_tiles(problem)
    if isinstance(plan, str):
        return False, plan
    return True, ""


def data_ok(operands):
    """Non-finite data would spread to a whole tile (outputs that never read it)."""
    if all(all_finite(a) for a in (operands.activation, operands.filter)):
        return True, ""
    return False, "non-finite data would spread to whole Winograd tiles"


def _compute_dtype(dtype):
    return np.dtype(np.float32) if dtype == np.float16 else np.dtype(dtype)


def workspace_bytes(problem):
    """The padded input, transformed input and products of the largest piece (x2 for the
    transforms' temporaries)."""
    plan = plan_tiles(problem)
    if isinstance(plan, str):
        return 0
    item = _compute_dtype(problem.dtype).itemsize
    padded = problem.batch * problem.in_channels * math.prod(problem.padded_shape())
    worst = 0
    for pieces, tile in plan:
        tiles = math.prod(-(-p.count // m) for p, m in zip(pieces, tile))
        alpha = math.prod(p.r + m - 1 for p, m in zip(pieces, tile))
        worst = max(worst, problem.batch * tiles * alpha
                    * (problem.in_channels + problem.out_channels))
    return item * (padded + 2 * worst)


def _along(a, mat, axis, xp):
    """``mat`` applied along ``axis`` of ``a`` (``mat`` is out x in)."""
    if mat.shape == (1, 1) and mat[0, 0] == 1:
        return a
    return xp.moveaxis(xp.tensordot(a, mat, axes=([axis], [1])), -1, axis)


def _dense(xv, w, groups, tile, counts, cdtype, xp):
    """Stride-1 correlation of ``xv`` ``(N, C, *L)`` with ``w`` ``(K, Cg, *r)`` (float64
    weights), ``counts`` outputs per axis, by Winograd tiles ``tile``."""
    rank = len(tile)
    rs = w.shape[2:]
    real = np.dtype(cdtype).type(0).real.dtype
    mats = [transforms(m, r).arrays(np.float64) for m, r in zip(tile, rs)]
    ntiles = [-(-c // m) for c, m in zip(counts, tile)]
    alphas = [m + r - 1 for m, r in zip(tile, rs)]
    need = [t * m + r - 1 for t, m, r in zip(ntiles, tile, rs)]
    n, c = xv.shape[:2]
    k = w.shape[0]
    xv = xv[(slice(None), slice(None)) + tuple(slice(0, q) for q in need)]
    short = [(0, 0), (0, 0)] + [(0, q - s) for q, s in zip(need, xv.shape[2:])]
    if any(b for _, b in short):
        xv = xp.pad(xv, short)
    spatial = tuple(range(2, 2 + rank))
    win = xp.lib.stride_tricks.sliding_window_view(xv, tuple(alphas), axis=spatial)
    win = win[(slice(None), slice(None)) + tuple(slice(None, None, m) for m in tile)]
    v = win.astype(cdtype)                                    # (N, C, T..., alpha...)
    for a, (_, _, bt) in enumerate(mats):
        v = _along(v, xp.asarray(bt.astype(real)), 2 + rank + a, xp)
    u = w
    for a, (_, g, _) in enumerate(mats):
        u = _along(u, xp.asarray(g), 2 + a, xp)              # (K, Cg, alpha...) float64
    u = u.astype(cdtype)
    npos, tprod = math.prod(alphas), math.prod(ntiles)
    cg, kg = c // groups, k // groups
    # (alpha..., C, N, T...) -> (P, G, Cg, N*T); (alpha..., K, Cg) -> (P, G, Kg, Cg)
    v = xp.transpose(v, tuple(range(2 + rank, 2 + 2 * rank)) + (1, 0) + spatial)
    v = v.reshape(npos, groups, cg, n * tprod)
    u = xp.transpose(u, tuple(range(2, 2 + rank)) + (0, 1)).reshape(npos, groups, kg, cg)
    prod = xp.matmul(u, v).reshape(tuple(alphas) + (k, n) + tuple(ntiles))
    for a, (at, _, _) in enumerate(mats):
        prod = _along(prod, xp.asarray(at.astype(real)), a, xp)   # (m..., K, N, T...)
    order = (rank + 1, rank) + tuple(q for a in range(rank) for q in (rank + 2 + a, a))
    y = xp.transpose(prod, order).reshape((n, k) + tuple(t * m for t, m in zip(ntiles, tile)))
    return y[(slice(None), slice(None)) + tuple(slice(0, q) for q in counts)]


def run(problem, operands, xp=np):
    """``y`` ``(N, K, *O)`` of a forward ``problem`` by Winograd tiles."""
    plan = plan_tiles(problem)
    if isinstance(plan, str):
        raise ValueError(f"method='winograd' cannot run this problem: {plan}")
    cdtype = _compute_dtype(problem.dtype)
    w = xp.asarray(oriented_weights(problem, operands.filter)).astype(
        np.complex128 if problem.dtype.kind == "c" else np.float64)
    x = pad_input(problem, operands.activation)
    y = xp.zeros((problem.batch, problem.out_channels) + tuple(problem.out_shape), dtype=cdtype)
    for pieces, tile in plan:
        xv = x[(slice(None), slice(None)) + tuple(
            slice(p.in_start, None, p.in_step) for p in pieces)]
        wv = w[(slice(None), slice(None)) + tuple(p.taps for p in pieces)]
        part = _dense(xv, wv, problem.groups, tile, tuple(p.count for p in pieces), cdtype, xp)
        y[(slice(None), slice(None)) + tuple(
            slice(p.out_start, None, p.out_step) for p in pieces)] += part
    return y.astype(problem.dtype, copy=False)
