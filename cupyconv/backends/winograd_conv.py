"""The ``winograd`` algorithm, array-module generic (NumPy on the CPU), and the planning
the GPU path (:mod:`cupyconv.backends.cuda.winograd`, transform kernels) shares with it.

A forward problem is padded once in its boundary mode, then split per axis into dense
stride-1 pieces (:func:`cupyconv.core.winograd.axis_pieces`: polyphase for the stride,
residues for the dilation); the N-D pieces are the products of the axes' pieces.  Each
piece is one Winograd convolution with the per-axis tiles of
:func:`~cupyconv.core.winograd.best_tile`:

1. input tiles (``alpha`` samples every ``m``) as a strided view, then ``B^T`` along each
   axis (the input transform);
2. the weights through ``G`` along each axis, in float64 (long double for long double
   data), once;
3. per transform position a batched GEMM over channels (per group);
4. ``A^T`` along each axis (the output transform), tiles back into the output.

Phases of a stride add into the output; residues of a dilation fill disjoint outputs.

The input gradient of a stride-1 problem with constant padding is a stride-1 forward
correlation of ``dy`` with the flipped, channel-transposed kernel
(:func:`~cupyconv.core.transpose.transpose`, shared with the implicit
GEMM), which runs the same way.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from .._dtypes import is_half_float
from .. import config
from .._vocabulary import GRAD_INPUT
from ..core.winograd import (MAX_ERROR_GROWTH, MAX_PIECES, MAX_TAPS, axis_pieces, best_tile,
                             error_growth, piece_count, transforms)
from .arrays import host_scan, oriented_weights, pad_input
from ..core.transpose import transpose, transposed_weights, upsampled
from .._lru import cached

__all__ = ["can_implement", "data_ok", "plan_tiles", "run", "workspace_bytes", "growth_limit",
           "grad_input_applies", "transform_weights", "kron_applies", "weight_transform",
           "compute_dtype", "wide_weights", "wide_real"]


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


def plan_tiles(problem, max_alpha=None):
    """``((pieces, tile), ...)`` per N-D piece of a forward ``problem``, or a reason string
    when a piece has no tile within the error gate (and ``alpha <= max_alpha``);
    memoised per problem, bound and error limit (every call plans)."""
    return _plan_tiles(problem, max_alpha, growth_limit(problem.dtype))


@cached(maxsize=1024)
def _plan_tiles(problem, max_alpha, limit):
    plan, tiles = [], {}
    for pieces in _pieces(problem):
        rs = tuple(p.r for p in pieces)
        if all(r == 1 for r in rs):
            plan.append((pieces, (1,) * len(rs)))
            continue
        if rs not in tiles:
            tiles[rs] = best_tile(rs, np.dtype(problem.dtype).itemsize, limit, max_alpha)
        tile = tiles[rs]
        if tile is None and max(rs) > MAX_TAPS:
            return f"winograd tiles are built for kernels of at most {MAX_TAPS} taps per axis"
        if tile is None:
            smallest = math.prod(error_growth(transforms(2, r)) for r in rs if r > 1)
            return (f"the smallest Winograd tiles F(2, r) of the kernel {rs} have an error "
                    f"growth of {smallest:.3g}x direct's, above the limit of {limit:g} "
                    f"(config.winograd_max_error_growth)")
        plan.append((pieces, tile))
    return tuple(plan)


def grad_input_applies(problem):
    """``(ok, reason)``: whether the input gradient of ``problem`` is a stride-1 forward
    correlation (stride 1, constant padding; ``cval`` does not enter a gradient)."""
    if any(s != 1 for s in problem.stride):
        return False, ("winograd computes the input gradient of stride-1 problems only "
                       f"(stride {problem.stride}); gemm and fft take the others")
    if problem.padding_mode != "constant":
        return False, ("winograd computes the input gradient with constant padding only "
                       f"(padding_mode={problem.padding_mode!r}); gemm takes the others")
    return True, ""


def can_implement(problem, max_alpha=None):
    """``(ok, reason)`` for ``problem`` (float/complex data, finite ``cval``, a tile within
    the error gate for every piece; the input gradient of stride-1, constant-padded
    problems through :func:`~cupyconv.core.transpose.transpose`).  ``max_alpha`` bounds
    the tiles (GPU)."""
    if problem.op == GRAD_INPUT:
        ok, why = grad_input_applies(problem)
        if not ok:
            return ok, why
        if problem.dtype.kind in "fc" and all(n > 0 for n in problem.in_shape):
            problem = transpose(problem).forward
    if problem.dtype.kind not in "fc":
        return False, (f"winograd computes float and complex data only (the transforms' "
                       f"fractions would not keep {problem.dtype} exact)")
    if not np.isfinite(complex(problem.cval)):
        return False, "a non-finite cval would spread through the Winograd tiles"
    if all(k == 1 for k in problem.kernel_shape):
        return False, "a 1-tap kernel saves no multiplications"
    if max(problem.kernel_shape) > MAX_TAPS:
        return False, f"winograd tiles are built for kernels of at most {MAX_TAPS} taps per axis"
    pieces = math.prod(piece_count(problem.kernel_shape[a], problem.stride[a],
                                   problem.dilation[a], problem.out_shape[a])
                       for a in range(problem.ndim))
    if pieces > MAX_PIECES:
        return False, (f"the stride {problem.stride} and dilation {problem.dilation} split "
                       f"the problem into {pieces} Winograd pieces (at most {MAX_PIECES})")
    plan = plan_tiles(problem, max_alpha)
    if isinstance(plan, str):
        return False, plan
    return True, ""


def data_ok(operands, scan=None):
    """Non-finite data would spread to a whole tile (outputs that never read it).
    ``scan``: the backend's one read of the operands (``Backend.scan``; default the host's
    :func:`~.arrays.host_scan`)."""
    arrays = [a for a in (operands.activation, operands.filter, operands.output)
              if a is not None]
    if not arrays or (host_scan if scan is None else scan)(arrays).all_finite:
        return True, ""
    return False, "non-finite data would spread to whole Winograd tiles"


def compute_dtype(dtype):
    """The dtype the transforms and the GEMM run in (float32 for float16)."""
    return np.dtype(np.float32) if is_half_float(dtype) else np.dtype(dtype)


def wide_real(dtype):
    """The real dtype of the transform matrices and the weight transform for data of
    ``dtype``: float64, or long double for long double data (which computes in it
    throughout, as every other algorithm does)."""
    real = np.dtype(dtype).type(0).real.dtype
    return real if real.itemsize > 8 else np.dtype(np.float64)


def workspace_bytes(problem):
    """The padded input, transformed input and products of the largest piece (x2 for the
    transforms' temporaries)."""
    if problem.op == GRAD_INPUT:
        problem = transpose(problem).forward
    plan = plan_tiles(problem)
    if isinstance(plan, str):
        return 0
    item = compute_dtype(problem.dtype).itemsize
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


@cached(maxsize=256)
def weight_transform(tile, taps, real=np.dtype(np.float64)):
    """The N-D ``G``: the Kronecker product of the axes' ``G`` (``real``, by default
    float64; read-only), ``(prod alpha, prod r)``.  Row-major over the axes on both sides,
    so ``G_kron @ w.reshape(-1)`` is ``G`` applied along every axis of one ``(k, c)`` kernel."""
    g = np.ones((1, 1), real)
    for m, r in zip(tile, taps):
        g = np.kron(g, transforms(m, r).arrays(real)[1])
    g.flags.writeable = False
    return g


#: The largest N-D ``G`` (bytes) :func:`transform_weights` builds: it grows as
#: ``(alpha r)^N`` (3-D F(4,3): 46 KiB; 4-D F(2,3): 166 KiB; 4-D F(4,3): 820 KiB, 8-D
#: F(2,3): 3.4 GB), so larger ones apply the axes' ``G`` one at a time.
KRON_BYTES = 1 << 18


def kron_applies(tile, taps):
    """Whether :func:`transform_weights` takes the N-D ``G`` (:func:`weight_transform`,
    at most :data:`KRON_BYTES`) for these tiles and taps."""
    npos = math.prod(m + r - 1 for m, r in zip(tile, taps))
    return 8 * npos * math.prod(taps) <= KRON_BYTES


def transform_weights(w, groups, tile, cdtype, xp, constant=None, matmul=None, kron=None):
    """``U`` ``(P, G, K/G, Cg)`` in ``cdtype``: the weights ``w`` ``(K, Cg, *r)``
    (:func:`wide_weights`) through ``G`` along each axis in their precision, transform positions
    first (row-major over the axes' ``alpha``): one GEMM with :func:`weight_transform`
    (one GEMM per axis past :data:`KRON_BYTES`).  ``constant`` turns a host matrix into
    an ``xp`` array (default ``xp.asarray``; the CUDA runner's keeps it on the device);
    ``matmul`` computes the GEMM (default ``xp.matmul``; the CUDA runner's, cuBLAS);
    ``kron``: the N-D ``G`` already on ``xp`` (a program's constant), when it applies."""
    constant = xp.asarray if constant is None else constant
    real = wide_real(w.dtype)
    matmul = xp.matmul if matmul is None else matmul
    k, cg = w.shape[:2]
    taps = tuple(w.shape[2:])
    npos = math.prod(m + r - 1 for m, r in zip(tile, taps))
    if kron_applies(tile, taps):
        if kron is None:
            kron = constant(weight_transform(tuple(tile), taps, real))
        u = matmul(kron, w.reshape(k * cg, -1).T)            # (P, K * Cg)
    else:
        u = w
        for a, (m, r) in enumerate(zip(tile, taps)):
            u = _along(u, constant(transforms(m, r).arrays(real)[1]), 2 + a, xp)
        u = xp.moveaxis(u.reshape(k * cg, npos), 0, 1)        # (P, K * Cg)
    return xp.ascontiguousarray(u.astype(cdtype, copy=False)).reshape(
        npos, groups, k // groups, cg)


def _dense(xv, w, groups, tile, counts, cdtype, xp):
    """Stride-1 correlation of ``xv`` ``(N, C, *L)`` with ``w`` ``(K, Cg, *r)`` (float64
    weights), ``counts`` outputs per axis, by Winograd tiles ``tile``."""
    rank = len(tile)
    rs = w.shape[2:]
    real = np.dtype(cdtype).type(0).real.dtype
    mats = [transforms(m, r).arrays(wide_real(cdtype)) for m, r in zip(tile, rs)]
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
    npos, tprod = math.prod(alphas), math.prod(ntiles)
    # (alpha..., C, N, T...) -> (P, G, Cg, N*T); U: (P, G, Kg, Cg)
    v = xp.transpose(v, tuple(range(2 + rank, 2 + 2 * rank)) + (1, 0) + spatial)
    v = v.reshape(npos, groups, c // groups, n * tprod)
    prod = xp.matmul(transform_weights(w, groups, tile, cdtype, xp), v).reshape(tuple(alphas) + (k, n) + tuple(ntiles))
    for a, (at, _, _) in enumerate(mats):
        prod = _along(prod, xp.asarray(at.astype(real)), a, xp)   # (m..., K, N, T...)
    order = (rank + 1, rank) + tuple(q for a in range(rank) for q in (rank + 2 + a, a))
    y = xp.transpose(prod, order).reshape((n, k) + tuple(t * m for t, m in zip(ntiles, tile)))
    return y[(slice(None), slice(None)) + tuple(slice(0, q) for q in counts)]


def wide_weights(problem, w, xp=np):
    """The oriented weights in float64 (complex128 for complex data; long double for
    long double data): the weight transform's precision."""
    real = wide_real(problem.dtype)
    wide = np.result_type(real, np.complex64) if problem.dtype.kind == "c" else real
    return xp.asarray(oriented_weights(problem, w)).astype(wide, copy=False)  # read only


def run(problem, operands, xp=np):
    """``y`` ``(N, K, *O)`` of a forward ``problem`` (``dx`` ``(N, C, *S)`` of an input
    gradient, :func:`~cupyconv.core.transpose.transpose`) by Winograd tiles."""
    if problem.op == GRAD_INPUT:
        t = transpose(problem)
        x = upsampled(t, operands.output, xp)
        w = transposed_weights(t, problem, operands.filter, xp)
        return run(t.forward, operands.replace(activation=x, filter=w, output=None), xp)
    plan = plan_tiles(problem)
    if isinstance(plan, str):
        raise ValueError(f"method='winograd' cannot run this problem: {plan}")
    cdtype = compute_dtype(problem.dtype)
    w = wide_weights(problem, operands.filter, xp)
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
