"""The NumPy ``winograd`` algorithm on layers with channels: Winograd minimal filtering
along the last axis only, the other axes' taps summed by the ``gemm`` engine.

F(m, r) along the last axis (its ``r`` taps at stride and dilation 1) turns a forward
problem into ``alpha = m + r - 1`` problems with one tap along that axis, one per
transform position; they are the groups of one grouped problem:

1. the padded input in the problem's boundary mode, its last axis extended with zeros
   to ``m T + r - 1`` samples (``T = ceil(O / m)`` tiles; the extra samples reach only
   outputs past ``O``, which are cropped);
2. ``B^T`` over every tile: the tiles (``alpha`` samples every ``m``) gathered one void
   element each, then one GEMM per image: ``V`` ``(N, alpha, C, *P_lead, T)``;
3. the weights through ``G`` along their last axis, in float64: ``U`` ``(alpha K, C/G,
   *K_lead, 1)``;
4. ``M = conv(V, U)`` by :func:`.gemm.run` on :func:`inner_problem`: ``alpha G`` groups,
   the lead axes' stride and dilation, no padding, one tap on the tile axis; the
   engine's extended grid, folded taps and blocks apply to it as to any problem;
5. ``A^T`` over the transform positions, one GEMM per image, the last axis cropped to
   ``O``.

The GEMMs make ``alpha / m`` products per output along the last axis instead of ``r``
(F(4, 3): 1.5 against 3); the transforms and copies around them cost the rest, so the
cost model (:func:`.cost.winograd_axis_pays`) takes this path over the N-D tiles of
:mod:`cupyconv.backends.winograd_conv` where it is the cheaper (layers of 8 channels
and more).  The tile ``m`` along the axis (:data:`AXIS_TILES`) is the one that makes the
fewest transform positions ``alpha T`` for the axis's outputs within the error gate of
the N-D path (:func:`~cupyconv.backends.winograd_conv.growth_limit`, 1-D growth).

An input gradient (stride 1, constant padding) runs its forward problem
(:func:`~cupyconv.core.transpose.transpose`), as the N-D path does.
"""
from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..._lru import cached, memoized
from ..._vocabulary import FORWARD, GRAD_INPUT
from ...core.problem import ConvProblem, Operands
from ...core.transpose import transpose, transposed_weights, upsampled
from ...core.winograd import MAX_TAPS, error_growth, transforms
from ..arrays import reused
from ..winograd_conv import grad_input_applies, growth_limit, wide_weights
from . import gemm
from .gemm_grid import pad_into

__all__ = ["applies", "forward_problem", "tile", "growth", "inner_problem", "run",
           "workspace_bytes", "stage_elements"]

#: The dtypes this path computes in (its own: no widening, no half floats).
DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
#: The tiles' outputs ``m`` it considers.  Not F(6, r): on a last axis of 12 outputs
#: F(6, 3) makes 16 transform positions against F(4, 3)'s 18 (the layer 6% faster, one
#: core) at twice the error growth (7.8x direct's against 3.7x), which ``auto`` would
#: take on most layers with channels.
AXIS_TILES = (2, 4)


def forward_problem(problem):
    """The forward problem the path runs for ``problem`` (an input gradient's transposed
    forward, :func:`~cupyconv.core.transpose.transpose`), or ``None`` where the path
    does not apply (:func:`applies`)."""
    if problem.op == GRAD_INPUT:
        if not grad_input_applies(problem)[0] or not all(n > 0 for n in problem.in_shape):
            return None
        problem = transpose(problem).forward
    elif problem.op != FORWARD:
        return None
    if (problem.dtype not in DTYPES or problem.ndim < 2 or problem.is_empty
            or problem.stride[-1] != 1 or problem.dilation[-1] != 1
            or not 1 < problem.kernel_shape[-1] <= MAX_TAPS
            or not np.isfinite(problem.cval) or tile(problem) is None):
        return None
    return problem


def applies(problem):
    """Whether the path computes ``problem``: a forward (or stride-1, constant-padded
    input gradient) of float32 or float64 data with two spatial axes or more, at
    stride and dilation 1 along the last, whose taps there have a tile within the error
    gate."""
    return forward_problem(problem) is not None


def tile(problem):
    """The outputs ``m`` of a tile along the last axis of a forward ``problem``, or
    ``None`` (no tile within the error gate)."""
    return _tile(problem.kernel_shape[-1], problem.out_shape[-1],
                 growth_limit(problem.dtype))


@cached(maxsize=1024)
def _tile(r, out, limit):
    best = None
    for m in AXIS_TILES:
        if error_growth(transforms(m, r)) > limit:
            continue
        positions = (m + r - 1) * -(-out // m)
        if best is None or positions < best[0]:
            best = (positions, m)
    return None if best is None else best[1]


def growth(problem):
    """The error growth of the tile the path runs for ``problem`` (1-D, relative to
    direct summation's: :func:`~cupyconv.core.winograd.error_growth`)."""
    fwd = forward_problem(problem)
    return error_growth(transforms(tile(fwd), fwd.kernel_shape[-1]))


def inner_problem(problem):
    """The grouped problem of step 4 for a forward ``problem``: ``V`` ``(N, alpha C,
    *P_lead, T)`` by ``U`` ``(alpha K, C/G, *K_lead, 1)`` in ``alpha G`` groups (for the
    tile the error gate gives now)."""
    return _inner_problem(problem, tile(problem))


@memoized()
def _inner_problem(problem, m):
    r = problem.kernel_shape[-1]
    alpha, tiles = m + r - 1, -(-problem.out_shape[-1] // m)
    cg = problem.in_channels // problem.groups
    return ConvProblem.create(
        x_shape=(problem.batch, alpha * problem.in_channels)
        + problem.padded_shape()[:-1] + (tiles,),
        w_shape=(alpha * problem.out_channels, cg) + problem.kernel_shape[:-1] + (1,),
        stride=problem.stride[:-1] + (1,), dilation=problem.dilation[:-1] + (1,),
        groups=alpha * problem.groups, dtype=problem.dtype)


def stage_elements(problem):
    """``(padded, tiles, transformed, products)``: the elements of a forward ``problem``'s
    padded input (last axis extended), of one image's gathered tiles, of the transformed
    input ``V`` and of the products ``M`` (the cost model's and the workspace's counts)."""
    inner = inner_problem(problem)
    m, tiles = tile(problem), inner.in_shape[-1]
    alpha = m + problem.kernel_shape[-1] - 1
    lead = math.prod(problem.padded_shape()[:-1])
    padded = problem.batch * problem.in_channels * lead * (m * tiles + alpha - m)
    gathered = problem.in_channels * lead * tiles * alpha
    return (padded, gathered, problem.batch * gathered,
            problem.batch * inner.out_channels * math.prod(inner.out_shape))


def workspace_bytes(problem, limit):
    """Bytes the path holds at once for ``problem`` beside its result: the padded input,
    one image's tiles, ``V``, the engine's workspace under ``limit`` and ``M``."""
    fwd = forward_problem(problem)
    if fwd is None:
        return 0
    padded, gathered, transformed, products = stage_elements(fwd)
    return (fwd.dtype.itemsize * (padded + gathered + transformed + products)
            + gemm.workspace_bytes(inner_problem(fwd), limit))


def run(problem, operands, limit, stats):
    """``y`` ``(N, K, *O)`` of a forward ``problem`` (``dx`` of an input gradient) by
    Winograd tiles along the last axis, the rest by :func:`.gemm.run` under ``limit``
    bytes of its workspace."""
    if problem.op == GRAD_INPUT:
        t = transpose(problem)
        x = upsampled(t, operands.output, np)
        w = transposed_weights(t, problem, operands.filter, np)
        return _forward(t.forward, x, w, limit, stats)
    return _forward(problem, operands.activation, operands.filter, limit, stats)


def _forward(problem, x, w, limit, stats):
    m, r = tile(problem), problem.kernel_shape[-1]
    at, g, bt = transforms(m, r).arrays(np.float64)
    inner = inner_problem(problem)
    v = _transformed(problem, x, bt.astype(x.dtype), m, inner.in_shape[-1])
    u = np.tensordot(g, wide_weights(problem, w), axes=([1], [problem.ndim + 1]))
    u = u.astype(x.dtype).reshape(inner.w_shape)             # (alpha K, C/G, *K_lead, 1)
    products = gemm.run(inner, Operands(activation=v, filter=u), limit, stats)
    return _outputs(problem, products, at.astype(x.dtype), m)


def _transformed(problem, x, bt, m, tiles):
    """``V`` ``(N, alpha C, *P_lead, T)`` of steps 1 and 2 (in reused buffers)."""
    alpha = bt.shape[0]
    padded = problem.padded_shape()
    shape = (problem.batch, problem.in_channels) + padded[:-1] + (m * tiles + alpha - m,)
    xp = reused("winograd axis input", shape, x.dtype)
    xp[..., padded[-1]:] = 0
    pad_into(problem, xp[..., :padded[-1]], x)
    item = x.itemsize
    window = np.dtype((np.void, alpha * item))
    gathered = reused("winograd axis tiles", shape[1:-1] + (tiles, alpha), x.dtype)
    v = reused("winograd axis transformed input",
               (problem.batch, alpha * problem.in_channels) + padded[:-1] + (tiles,), x.dtype)
    for n in range(problem.batch):
        image = xp[n]
        windows = np.ndarray(shape=(image.size - alpha + 1,), dtype=window, buffer=image,
                             strides=(item,))
        gathered.view(window)[..., 0] = as_strided(
            windows, shape=gathered.shape[:-1], strides=image.strides[:-1] + (m * item,))
        np.matmul(bt, gathered.reshape(-1, alpha).T, out=v[n].reshape(alpha, -1))
    return v


def _outputs(problem, products, at, m):
    """``y`` from the products ``M`` ``(N, alpha K, *O_lead, T)``: ``A^T`` over the
    transform positions, the last axis cropped."""
    out = problem.out_shape[-1]
    y = np.empty(problem.logical_result_shape, dtype=products.dtype)
    alpha, tiles = at.shape[1], products.shape[-1]
    whole = (problem.out_channels,) + problem.out_shape[:-1] + (tiles * m,)
    for n in range(problem.batch):
        flat = products[n].reshape(alpha, -1).T                # (K * O_lead * T, alpha)
        if tiles * m == out:
            np.matmul(flat, at.T, out=y[n].reshape(-1, m))
        else:
            y[n] = np.matmul(flat, at.T).reshape(whole)[..., :out]
    return y
