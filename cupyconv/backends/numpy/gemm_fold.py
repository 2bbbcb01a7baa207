"""The CPU ``gemm`` engine's extended-grid products with kernel taps folded into the
GEMM's rows.

On the extended grid of :mod:`~cupyconv.backends.numpy.gemm_grid` a tap of the
flattened trailing axes is a flat offset.  The taps of the last ``f`` of those axes
(set ``A``, offsets ``off_a``) leave the columns for the GEMM's rows; the other taps
(set ``B``, offsets ``off_b``) stay in the columns, which run ``max off_a`` positions
past each extended lead row:

- forward (:func:`folded_forward`): ``Z[(k, a), q] = sum_{c, b} W[k, c, a, b]
  X[c, q + off_b]``, then ``Y[k, q] = sum_a Z[(k, a), q + off_a]`` (``|A|`` shifted
  adds, in tap order);
- float32 weight gradient (:func:`folded_grad_weight`): ``dW[(c, b), (k, a)] = sum_q
  X[c, q + off_b] dy[k, q - off_a]``, ``cols_B . D^T`` with ``D`` the ``|A|`` shifted
  copies of the extended ``dy``.

The GEMM gets ``K/G * |A|`` rows against ``K/G``, and the columns ``|A|`` times fewer:
a GEMM a few output channels wide runs well below BLAS's rate, and the column copy is
the other large cost of those layers.  :func:`fold_axes` decides ``f``.
"""
from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..arrays import grouped_weights, oriented_weights, reused
from .blas import matmul, matmul_into
from .gemm_grid import (flat_columns, flat_plan, flat_source, grid_axes, grouped_index,
                        note_workspace, phase_timer, row_positions)
from .threads import Scratch, parallel_map

__all__ = ["FOLD_MIN_DEPTH", "FOLD_MAX_ROWS", "FOLD_MIN_ROWS", "FOLD_MAX_TAIL", "fold_axes",
           "fold_offsets", "fold_steps", "fold_row_bytes", "fold_plan", "folded_forward",
           "folded_grad_weight"]

#: Least GEMM depth (``C/G * taps``) at which the taps fold: below it the folded GEMM is
#: too shallow (2-D 8->8 64^2 3x3, depth 72, one core: 0.6-1.8x the unfolded time).
FOLD_MIN_DEPTH = 96
#: Most GEMM rows (``K/G * |A|``) the folding aims at.
FOLD_MAX_ROWS = 72
#: Least GEMM rows of a fold: fewer run near BLAS's matrix-vector rate (single-channel
#: 3-D 48^3 7^3 folded to 7 rows, one core: the GEMM at 20 GMAC/s against 45-50 at 24-72
#: rows; 3.4 ms against the unfolded 6.3, and the FFT's 1.9).
FOLD_MIN_ROWS = 8
#: Most positions the folded columns may add past an extended lead row (``max off_a``),
#: relative to its length.
FOLD_MAX_TAIL = 0.35


def fold_steps(problem, f):
    """The flat step, on the padded grid, of one tap along each of the last ``f`` axes."""
    r, padded = problem.ndim, problem.padded_shape()
    return [problem.dilation[a] * math.prod(padded[a + 1:]) for a in range(r - f, r)]


def fold_offsets(problem, f):
    """The flat offsets, on the padded grid, of the taps of the last ``f`` axes, in
    :func:`numpy.ndindex` order."""
    step = fold_steps(problem, f)
    return [sum(t * s for t, s in zip(tap, step))
            for tap in np.ndindex(*problem.kernel_shape[problem.ndim - f:])]


def fold_row_bytes(problem, e, f):
    """Workspace bytes of one lead position's extended row, folded: its columns, its
    product and the shifted sum (forward) or the shifted ``dy`` (weight gradient)."""
    r, g, kg = problem.ndim, problem.groups, problem.gemm_n
    full = row_positions(problem, e, problem.padded_shape())
    taps = math.prod(problem.kernel_shape[r - f:])
    ext = full + max(fold_offsets(problem, f))
    depth = problem.gemm_k // taps
    return problem.dtype.itemsize * g * ((depth + kg * taps) * ext + kg * full)


def fold_axes(problem, e, limit):
    """How many of the ``e`` flattened trailing axes fold their taps into the GEMM's rows,
    or 0: the most ``f`` whose rows ``K/G * |A|`` stay within :data:`FOLD_MAX_ROWS` and
    within the folded depth ``C/G * taps / |A|``, and whose tail (``max off_a``) within
    :data:`FOLD_MAX_TAIL` of an extended lead row, for a GEMM of depth at least
    :data:`FOLD_MIN_DEPTH`; where its rows reach :data:`FOLD_MIN_ROWS` and one folded
    lead row fits ``limit`` bytes.

    One core, float32, least of 5, ms unfolded / ``f = 1`` / ``f = 2`` (rows x depth of
    the folded GEMMs): 4-D 4->8 10^4 forward 3.8 / 3.1 (24 x 108) / 5.1 (72 x 36); 4-D
    8->8 12^4 forward 9.7 / 6.9 (24 x 216) / 7.4 (72 x 72), weight gradient 8.5 / 6.3 /
    5.5 (5.2 / 5.7 in a rerun alternating the two: within this machine's noise); 5-D
    4->4 7^5 forward 9.0 / 5.2 / 4.1 (36 x 108); 3-D 8->8 16^3 forward 1.0 / 0.7 (24 x
    72) / 0.9 (72 x 24).
    """
    r, kg = problem.ndim, problem.gemm_n
    if problem.gemm_k < FOLD_MIN_DEPTH:
        return 0
    full = row_positions(problem, e, problem.padded_shape())
    best = 0
    for f in range(1, e + 1):
        taps = math.prod(problem.kernel_shape[r - f:])
        if taps == 1:
            continue
        rows, depth = kg * taps, problem.gemm_k // taps
        if rows > min(FOLD_MAX_ROWS, depth) or (
                max(fold_offsets(problem, f)) > FOLD_MAX_TAIL * full):
            break
        best = f if rows >= FOLD_MIN_ROWS else 0
    return best if best and fold_row_bytes(problem, e, best) <= limit else 0


def fold_plan(problem, limit):
    """``(e, f)``: the trailing axes of the extended grid (:func:`~.gemm_grid.grid_axes`
    under the problem's whole column bytes) and the last of them whose taps fold
    (:func:`fold_axes` under ``limit``), or ``(0, 0)``."""
    e = grid_axes(problem, problem.column_bytes())
    f = fold_axes(problem, e, limit) if e else 0
    return (e, f) if f else (0, 0)


def _folded_source(problem, x, e, f):
    """``(view, full, offsets)``: :func:`~.gemm_grid.flat_source`'s window view with the
    last ``f`` axes' taps at their first and ``full + max offsets`` positions per lead
    row (the buffer's zero tail covers them: the last position read is the unfolded
    view's)."""
    view, full = flat_source(problem, x, e)
    offsets = fold_offsets(problem, f)
    shape = view.shape[:view.ndim - 1 - f] + (1,) * f + (full + max(offsets),)
    return as_strided(view, shape=shape, strides=view.strides, writeable=False), full, \
        offsets


def _plan(problem, e, f, limit, target):
    return flat_plan(problem, e, fold_row_bytes(problem, e, f), limit, target)


def folded_forward(problem, x, w, limit, target, stats, e, f):
    """The forward on the extended grid of the trailing ``e`` axes with the taps of the
    last ``f`` folded into the GEMM's rows (:func:`fold_axes`): per block
    ``Z = W_fold . cols_B`` per group, then the ``|A|`` shifted slices of ``Z`` summed in
    tap order, the extended positions cropped as the sum is written into ``y``."""
    r, g, kg = problem.ndim, problem.groups, problem.gemm_n
    out = tuple(problem.out_shape)
    rows_shape = (out[r - e],) + problem.padded_shape()[r - e + 1:]    # an extended row
    inside = (Ellipsis,) + tuple(slice(0, o) for o in out[r - e:])
    y = np.empty(problem.logical_result_shape, dtype=x.dtype)
    by_group = y.reshape((problem.batch, g, kg) + out)
    with phase_timer(stats, "pad"):
        view, full, offsets = _folded_source(problem, x, e, f)
    ext, taps = view.shape[-1], len(offsets)
    wg = grouped_weights(problem, oriented_weights(problem, w))        # (G, Kg, Cg, *KS)
    order = (0, 1) + tuple(range(3 + r - f, 3 + r)) + (2,) + tuple(range(3, 3 + r - f))
    wmat = np.ascontiguousarray(wg.transpose(order)).reshape(g, kg * taps, -1)
    scratch = Scratch()

    def block(index):
        with phase_timer(stats, "column copy"):
            cols, box = flat_columns(problem, view, index, scratch, e)
        rows = cols.shape[2] // ext
        res = scratch.take("product", (g * kg * taps * rows * ext,), y.dtype)
        with phase_timer(stats, "GEMM"):
            matmul_into(wmat, cols, res.reshape(g, kg * taps, rows * ext))
        with phase_timer(stats, "shifted adds"):
            z = res.reshape(g, kg, taps, rows, ext)
            acc = scratch.take("sum", (g * kg * rows * full,), y.dtype).reshape(
                g, kg, rows, full)
            np.copyto(acc, z[:, :, 0, :, offsets[0]:offsets[0] + full])
            for a in range(1, taps):                               # in tap order
                np.add(acc, z[:, :, a, :, offsets[a]:offsets[a] + full], out=acc)
        with phase_timer(stats, "write back"):                     # (G, Kg, nb, *Ob, *O)
            np.moveaxis(by_group[grouped_index(index)], 0, 2)[...] = acc.reshape(
                (g, kg) + box + rows_shape)[inside]
        return cols.nbytes + res.nbytes + acc.nbytes

    indices, lanes = _plan(problem, e, f, limit, target)
    note_workspace(stats, parallel_map(block, indices, lanes), lanes)
    return y


def _shifted_dy(problem, dy, e, f):
    """``(dy_pad, steps)``: ``dy`` channels-last on the extended grid of the trailing ``e``
    axes, ``(N, G, *O_lead, L, K/G)`` with ``L = full + 2 max off_a`` and the lead row's
    ``full`` positions at ``max off_a`` (zeros around them and between the output's rows),
    and the flat steps of the last ``f`` axes' taps (:func:`fold_steps`)."""
    r, g, kg = problem.ndim, problem.groups, problem.gemm_n
    out, lead, padded = tuple(problem.out_shape), r - e, problem.padded_shape()
    trail = (out[lead],) + tuple(padded[lead + 1:])
    full, mo = math.prod(trail), max(fold_offsets(problem, f))
    pad = reused("shifted output gradient", (problem.batch, g) + out[:lead]
                 + (full + 2 * mo, kg), dy.dtype)
    pad.fill(0)
    inside = pad[..., mo:mo + full, :].reshape(pad.shape[:-2] + trail + (kg,))
    inside[(Ellipsis,) + tuple(slice(0, o) for o in out[lead:]) + (slice(None),)] = \
        np.moveaxis(dy.reshape((problem.batch, g, kg) + out), 2, -1)
    return pad, fold_steps(problem, f)


def folded_grad_weight(problem, x, dy, limit, target, e, f):
    """The weight gradient of a real ``problem`` on the extended grid of the trailing
    ``e`` axes with the taps of the last ``f`` folded (:func:`fold_axes`), ``(G, C/G *
    taps, K/G)`` as :func:`~.gemm_grid.flat_grad_weight` returns it, with its block
    bytes and lanes: per block ``cols_B . D^T``, ``D^T`` ``(positions, |A| * K/G)`` the
    extended ``dy`` shifted by each ``off_a`` (zero elsewhere; ``x`` and the boundary
    finite, :func:`~.gemm_grid.finite_operand`, so the extra positions add nothing),
    copied row-major from a window view of :func:`_shifted_dy` (the taps in reverse
    order, so that a row's taps of the last axis and channels are one run), so that both
    operands are in BLAS's faster orientation; the blocks summed in block order."""
    r, g, kg = problem.ndim, problem.groups, problem.gemm_n
    cg, ks = problem.in_channels // g, tuple(problem.kernel_shape)
    view, full, offsets = _folded_source(problem, x, e, f)
    ext, taps = view.shape[-1], len(offsets)
    pad, steps = _shifted_dy(problem, dy, e, f)
    scratch = Scratch()

    def block(index):
        cols, _ = flat_columns(problem, view, index, scratch, e)   # (G, Cg * B, M)
        part = pad[index[:1] + (slice(None),) + index[1:]]          # (nb, G, *Ob, L, Kg)
        st = part.strides
        src = as_strided(part, shape=(g,) + part.shape[:1] + part.shape[2:-2] + (ext,)
                         + ks[r - f:] + (kg,),
                         strides=(st[1], st[0]) + st[2:-2] + (st[-2],)
                         + tuple(s * st[-2] for s in steps) + (st[-1],), writeable=False)
        d = scratch.take("shifted", (src.size,), cols.dtype).reshape(src.shape)
        np.copyto(d, src)
        return matmul(cols, d.reshape(g, -1, taps * kg)), cols.nbytes + d.nbytes

    indices, lanes = _plan(problem, e, f, limit, target)
    parts = parallel_map(block, indices, lanes)
    dw = parts[0][0]
    for part, _ in parts[1:]:                                      # in block order
        dw = dw + part
    # (G, Cg, *KS_B, *KS_A reversed, Kg) -> (G, Cg, *KS, Kg)
    dw = dw.reshape((g, cg) + ks + (kg,))[(Ellipsis,) + (slice(None, None, -1),) * f
                                          + (slice(None),)]
    return np.ascontiguousarray(dw).reshape(g, -1, kg), [n for _, n in parts], lanes
