"""The ``gemm`` algorithm on the CPU, for every operation.

The column buffer is built in cache-sized blocks, each feeding one large BLAS GEMM:

- a block is a box of output positions over ``(N, O_0, ..., O_{r-1})``
  (:func:`blocks`): the leading axes are fixed one index at a time and the first axis
  whose remaining box fits is split into runs, so a block may hold several images
  (the batch folded into the GEMM's columns), some rows of one image, or part of a row;
- its columns are one strided copy of a window view of the padded input
  (:func:`columns`): ungrouped, channels-last ``(positions, taps * C)`` from the input
  made channels-last once (:func:`padded_last`; the copy's inner runs are a tap row's
  channels), so the GEMM is ``cols @ W`` with the output channels the narrow side,
  BLAS's faster orientation for a few output channels; grouped or wide,
  ``(G, C/G * taps, positions)`` whose copy runs along an output row
  (:func:`positions_as_rows` decides);
- forward: ``y = cols . W`` (positions as rows) or ``W . cols`` per group, the groups as the
  batch of one ``matmul``, each block's result transposed into ``y`` in place;
- weight gradient, ``dw = dy . cols^H``: the same blocks, summed in block order;
- input gradient, ``dx = A^H dy``: a stride-1 problem is the forward problem of the
  flipped, channel-transposed kernel (:func:`~cupyconv.core.transpose.transpose`), run
  by the same blocked forward (with a padding mode other than constant, over the whole
  padded input, the padding then folded back onto the source elements,
  :func:`~cupyconv.backends.arrays.fold_padding`); a strided one runs ``W^H dy`` per
  block and adds each tap's columns into a zero-padded input (a strided slice per tap;
  the slices of one tap never overlap), the padding folded back likewise;
- where those copies or adds would run over short rows (few channels, short output
  rows), the forward and the col2im run on extended grids instead
  (:mod:`~cupyconv.backends.numpy.gemm_grid`: one contiguous slice per channel and tap);
  there the forward and the float32 weight gradient of a GEMM a few output channels wide
  fold the taps of the last axes into its rows (:mod:`~cupyconv.backends.numpy.gemm_fold`).

A block's bytes aim at :data:`CHUNK_BYTES` (about the L2 cache of one core: the GEMM
reads its columns from cache; :data:`WEIGHT_BLOCKS` times that for the weight gradient,
whose GEMMs reduce over the block), or the workspace limit over the cores when smaller,
down to one output position (:func:`plan_blocks`).  No reduction depends on thread timing: results are bitwise reproducible.
``problem.conjugate=False`` gives the plain transpose (``conv_transpose``).
"""
from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..._vocabulary import FORWARD, GRAD_INPUT, GRAD_WEIGHT
from ..arrays import (all_finite, fold_padding, grouped_weights, oriented_weights, pad_input,
                      reused, zeros_result)
from ...core.transpose import transpose, transposed_weights, upsampled
from .blas import matmul, matmul_into
from .direct import tap_slices, windows
from .gemm_fold import FOLD_MIN_DEPTH, fold_plan, folded_forward, folded_grad_weight
from .gemm_grid import (boxes, fill_faces, finite_operand, flat_forward, flat_grad_weight,
                        grid_axes, grouped_index, note_workspace, phase_grad_input,
                        phase_timer, position_bytes)
from .gemm_stride import (stride_fold_applies, stride_folded_forward,
                          stride_folded_grad_input, stride_folded_grad_weight)
from .threads import Scratch, parallel_map, workers

__all__ = ["run", "min_workspace_bytes", "workspace_bytes", "position_bytes", "blocks",
           "stride_folds",
           "plan_blocks", "as_run", "WEIGHT_BLOCKS",
           "columns", "padded_last", "windows_last", "weight_matrix", "forward_applies",
           "transposed",
           "positions_as_rows", "column_source", "ROWS_MAX_CHANNELS", "block_start",
           "CHUNK_BYTES", "PAD_PIECE", "PAD_BY_CHANNEL"]

#: Column-buffer block the CPU aims for under a larger limit: about one core's L2 cache
#: (2 MiB on the development VM), where BLAS reads it fastest (float32 ``(64, 576) @ (576,
#: M)`` on OpenBLAS: 170-250 GFLOP/s for M = 1024, 2.3 MiB of columns, 40-60 for M =
#: 16384).  Whole layers on oneMKL, one core, process CPU time, least of 5 and of 7 at
#: load 3.4-4.0 (two runs): 2 MiB against 1 MiB 3-D 32^3 43.3 / 56.5 ms against 57.8 /
#: 58.1, 4-D 12^4 38.8 / 37.9 against 42.5 / 40.5, 2-D 56^2 22.4 / 22.0 against 22.8 /
#: 22.5, 1-D 25.4 / 24.3 against 26.0 / 25.7 (4 MiB: 1-D 28.8).  A default limit (half
#: the host's memory) is never taken whole by one buffer.
CHUNK_BYTES = 2**21


def forward_applies(problem):
    """Whether an input gradient runs as the blocked forward problem of
    :func:`~cupyconv.core.transpose.transpose` (stride 1: with constant padding the
    forward whose output is ``x``'s extent, with another padding mode the forward over
    the whole padded input, folded back by :func:`~cupyconv.backends.arrays.fold_padding`;
    :func:`transposed`), else by columns and their scatter back (col2im)."""
    return (problem.op == GRAD_INPUT and all(s == 1 for s in problem.stride)
            and all(n > 0 for n in problem.in_shape))


def transposed(problem):
    """The :class:`~cupyconv.core.transpose.Transposed` an input gradient of
    :func:`forward_applies` runs: over the whole padded input (``fold``) unless the
    padding is constant."""
    return transpose(problem, whole=problem.padding_mode != "constant")


def min_workspace_bytes(problem):
    """Least workspace: one output position's columns (the forward problem's for an input
    gradient that runs as one, :func:`forward_applies`)."""
    if forward_applies(problem):
        return position_bytes(_as_forward(problem))
    return position_bytes(problem)


def _as_forward(problem):
    return transposed(problem).forward


def as_run(problem):
    """The problem whose blocks run: an input gradient of :func:`forward_applies` as its
    forward problem, any other as it is."""
    return _as_forward(problem) if forward_applies(problem) else problem


#: The weight gradient's blocks are this many times larger: each block's GEMM reduces
#: over its positions, and longer reductions pay (one core, float32, weight gradient of
#: 3-D N=2 C=K=32 32^3 3^3: 191 ms at 1 MiB, 147 at 4 MiB; 2-D N=8 C=K=64 56^2: 57, 53;
#: 4 MiB as before :data:`CHUNK_BYTES` became 2 MiB).
WEIGHT_BLOCKS = 2


def stride_folds(problem, limit):
    """Whether ``problem`` runs with its strided last axis folded
    (:func:`~cupyconv.backends.numpy.gemm_stride.stride_fold_applies`; a last axis of
    stride 1 is refused here, without entering that module)."""
    return problem.stride[-1] > 1 and stride_fold_applies(problem, limit)


def _target(problem, limit, least=None):
    """Block bytes aimed for: ``CHUNK_BYTES`` (times :data:`WEIGHT_BLOCKS` for a weight
    gradient) or the limit if smaller, at least one position (``least``: the
    :func:`min_workspace_bytes` of ``problem``, when known)."""
    chunk = CHUNK_BYTES * (WEIGHT_BLOCKS if problem.op == GRAD_WEIGHT else 1)
    least = min_workspace_bytes(problem) if least is None else least
    return max(min(limit, chunk), min(least, limit))


def workspace_bytes(problem, limit):
    """Column-buffer bytes under ``limit`` (blocks of about :data:`CHUNK_BYTES`)."""
    run = as_run(problem)
    least = position_bytes(run)
    return min(run.column_bytes(), max(_target(problem, limit, least), least))


def blocks(problem, limit):
    """Index tuples over ``(N, *O)`` whose column buffer fits ``limit`` bytes.

    The leading axes of ``(N, O_0, O_1, ...)`` are fixed one index at a time and the
    first axis whose remaining box fits is split into runs, so the buffer stays under
    the limit down to a single output position.
    """
    return boxes((problem.batch,) + tuple(problem.out_shape), position_bytes(problem), limit)


#: Elements per piece of :func:`padded_last`'s copy on the pool (the copy is a transpose
#: of the whole input: serial, it was 8% of the 3-D layer's one-core time and all of it
#: on two cores).
PAD_PIECE = 1 << 18
#: Input channels up to which :func:`padded_last` copies one channel at a time (each copy
#: reads a contiguous row and writes every ``C``-th element) instead of the whole
#: channels-last transpose (whose inner loop runs over ``C`` elements).  One core,
#: float32, 2 images, ms, transpose / by channel: 2 channels 14^4 0.27 / 0.07, 4
#: channels 14^4 0.31 / 0.15, 4 channels 64^3 2.1 / 0.8, 3 channels 224^2 0.37 / 0.09;
#: 8 channels 12^4 0.19 / 0.21, 16 channels 12^4 0.27 / 0.56.
PAD_BY_CHANNEL = 4


def padded_last(problem, x):
    """The padded input channels-last, ``(N, *padded, C)`` C-contiguous: one copy (a
    constant boundary's faces filled first (:func:`~.gemm_grid.fill_faces`), the input
    copied into the inside in pieces of an image's leading rows on the pool, one channel
    at a time up to :data:`PAD_BY_CHANNEL` channels; else :func:`numpy.pad` then the
    transpose).  Its columns' inner runs are channels and taps along the last axis."""
    if problem.padding_mode != "constant" or not any(b or a for b, a in problem.padding):
        return np.ascontiguousarray(np.moveaxis(pad_input(problem, x), 1, -1))
    out = reused("padded channels-last input",
                 (problem.batch,) + problem.padded_shape() + (problem.in_channels,), x.dtype)
    fill_faces(problem, out, 1)
    inside = out[(slice(None),) + tuple([slice(b, b + n) for (b, _), n in
                                         zip(problem.padding, problem.in_shape)])]
    src = np.moveaxis(x, 1, -1)
    step = max(1, PAD_PIECE // max(1, math.prod(src.shape[2:])))
    pieces = [(n, slice(i, i + step)) for n in range(problem.batch)
              for i in range(0, problem.in_shape[0], step)]

    by_channel = problem.in_channels <= PAD_BY_CHANNEL

    def piece(at):
        dst, part = inside[at], src[at]
        if not by_channel:
            dst[...] = part
            return
        for c in range(problem.in_channels):      # each a contiguous plane of ``x``
            dst[..., c] = part[..., c]

    parallel_map(piece, pieces)
    return out


def windows_last(problem, xcl):
    """Strided view ``(N, *O, *KS, G, C/G)`` of every (output, tap) pair of the
    channels-last padded input ``xcl`` (:func:`padded_last`)."""
    g = problem.groups
    cg = problem.in_channels // g
    sn, sp, sc = xcl.strides[0], xcl.strides[1:-1], xcl.strides[-1]
    shape = ((problem.batch,) + tuple(problem.out_shape) + tuple(problem.kernel_shape)
             + (g, cg))
    strides = ((sn,) + tuple([st * s for st, s in zip(problem.stride, sp)])
               + tuple([d * s for d, s in zip(problem.dilation, sp)]) + (cg * sc, sc))
    return as_strided(xcl, shape=shape, strides=strides, writeable=False)


#: Output channels up to which an ungrouped problem's columns are channels-last,
#: positions as rows (:func:`positions_as_rows`).  One core, float32, interleaved
#: (load 10-11, lower quartile of 18): rows / columns 0.66x the time at K = 16 (4-D
#: 12^4), 0.85x at 32 (3-D 32^3); 0.97x at 64 (2-D 56^2 forward) but 1.06x for its
#: weight gradient, 1.05x at 128 (1-D): from 64 channels the GEMM gains no more than
#: the transposes of the input and the result cost.
ROWS_MAX_CHANNELS = 32


def positions_as_rows(problem):
    """Whether the columns are channels-last, positions as rows (:func:`columns`): an
    ungrouped problem of at most :data:`ROWS_MAX_CHANNELS` output channels.  A grouped
    one keeps positions as columns, whose copy runs along output rows: channels-last,
    its runs would be C/G elements (one, depthwise: 59.5 ms against the row runs' ~16
    and the tap loop's 12 on 8 x 64 x 56^2 3x3, one core)."""
    return problem.groups == 1 and problem.gemm_n <= ROWS_MAX_CHANNELS


def column_source(problem, x):
    """The window view the columns are copied from: :func:`windows_last` of
    :func:`padded_last` where :func:`positions_as_rows`, else
    :func:`~cupyconv.backends.numpy.direct.windows` of the padded input."""
    if positions_as_rows(problem):
        return windows_last(problem, padded_last(problem, x))
    return windows(problem, pad_input(problem, x))


def columns(problem, view, index, scratch=None):
    """``(cols, box)``: the columns of block ``index`` of :func:`column_source`'s view
    (one copy, into ``scratch``'s buffer when given: a
    :class:`~cupyconv.backends.numpy.threads.Scratch`) and the block's box ``(nb, *Ob)``.

    Where :func:`positions_as_rows`: ``(1, positions, taps * C)`` from the channels-last
    view ``(N, *O, *KS, 1, C)``, whose copy runs over a tap row's channels (contiguous),
    feeding BLAS its faster orientation, ``cols @ W`` with the output channels the
    narrow side (one core, float32, quiet: ``(M, 864) @ (864, 32)`` 100-108 GFLOP/s
    against 73-78 for ``(32, 864) @ (864, M)``).  Else ``(G, C/G * taps, positions)``
    from the view ``(N, G, C/G, *O, *KS)``, the copy innermost along a row.
    """
    r = problem.ndim
    if positions_as_rows(problem):
        src = view[index]                                       # (nb, *Ob, *KS, 1, C)
        box = src.shape[:1 + r]
    else:
        part = view[grouped_index(index)]                            # (nb, G, Cg, *Ob, *KS)
        order = (1, 2) + tuple(range(3 + r, 3 + 2 * r)) + (0,) + tuple(range(3, 3 + r))
        src = part.transpose(order)                             # (G, Cg, *KS, nb, *Ob)
        box = part.shape[:1] + part.shape[3:3 + r]
    if scratch is None:
        cols = np.empty(src.shape, dtype=src.dtype)
    else:
        cols = scratch.take("columns", (src.size,), src.dtype).reshape(src.shape)
    np.copyto(cols, src)
    if positions_as_rows(problem):
        return cols.reshape(1, math.prod(box), -1), box
    return cols.reshape(problem.groups, -1, math.prod(box)), box


def block_start(problem, index):
    """The flat output position (within one image) of block ``index``'s first one: the
    block's positions of each image are that and the next ``prod(box[1:])``
    (:func:`blocks` fixes leading axes and splits one, the later axes whole)."""
    out = tuple(problem.out_shape)
    return sum(s.start * math.prod(out[a + 1:]) for a, s in enumerate(index[1:]))


def weight_matrix(problem, w):
    """The forward GEMM's weights, from ``w`` ``(K, C/G, *KS)``: ``(1, taps * C, K)``
    ordered as :func:`columns`' rows where :func:`positions_as_rows`, else ``(G, K/G,
    C/G * taps)``."""
    wg = grouped_weights(problem, oriented_weights(problem, w))   # (G, Kg, Cg, *KS)
    if not positions_as_rows(problem):
        return np.ascontiguousarray(wg).reshape(problem.groups, problem.gemm_n, -1)
    order = (0,) + tuple(range(3, 3 + problem.ndim)) + (2, 1)
    return np.ascontiguousarray(wg.transpose(order)).reshape(1, -1, problem.gemm_n)


def plan_blocks(problem, limit):
    """``(indices, lanes)``: the blocks (:func:`blocks`) and how many run at once.

    One block per core is in flight, so each aims at ``limit / cores`` (and at most
    :data:`CHUNK_BYTES`); when that is below one position's columns the blocks run one
    at a time under the whole limit.  The workspace in use stays under ``limit``.
    """
    target = _target(problem, limit)
    lanes = workers()
    if min(target, limit // lanes) < min_workspace_bytes(problem):
        lanes = 1
    indices = list(blocks(problem, min(target, limit // lanes)))
    return indices, max(1, min(lanes, len(indices)))


def _forward(problem, x, w, limit, stats):
    if problem.is_empty:
        return zeros_result(problem, np, x.dtype)
    capped = min(limit, problem.column_bytes())      # the extended grid's waste included
    e, f = fold_plan(problem, capped) if problem.gemm_k >= FOLD_MIN_DEPTH else (0, 0)
    if f:
        return folded_forward(problem, x, w, capped, _target(problem, capped), stats, e, f)
    e = grid_axes(problem, capped)
    if e:
        return flat_forward(problem, x, w, capped, _target(problem, capped), stats, e)
    if stride_folds(problem, capped):
        return stride_folded_forward(problem, x, w, capped, _target(problem, capped), stats)
    y = np.empty(problem.logical_result_shape, dtype=x.dtype)   # the blocks cover it
    with phase_timer(stats, "pad"):
        view = column_source(problem, x)
    g, kg = problem.groups, problem.gemm_n
    wmat = weight_matrix(problem, w)
    rows = positions_as_rows(problem)
    plane = math.prod(problem.out_shape)
    yg = y.reshape(problem.batch, g, kg, plane)
    scratch = Scratch()

    def block(index):
        with phase_timer(stats, "column copy"):
            cols, box = columns(problem, view, index, scratch)
        start, per = block_start(problem, index), math.prod(box[1:])
        images = range(index[0].start, index[0].start + box[0])
        if not rows:                       # (G, Kg, positions), straight into y's rows
            with phase_timer(stats, "GEMM"):
                for i, n in enumerate(images):
                    matmul_into(wmat, cols[:, :, i * per:(i + 1) * per],
                                yg[n, :, :, start:start + per])
            return cols.nbytes
        # cols @ W, (positions, K): the faster orientation (one core, float32, blocks of
        # 288 positions, (288, 864) @ (864, 32): 111 GFLOP/s against 88-95 for the
        # transposed product written into y's rows), then transposed into y
        res = scratch.take("product", (cols.shape[1], kg), y.dtype)
        with phase_timer(stats, "GEMM"):
            matmul_into(cols[0], wmat[0], res)
        with phase_timer(stats, "write back"):
            for i, n in enumerate(images):
                yg[n, 0, :, start:start + per] = res[i * per:(i + 1) * per].T
        return cols.nbytes

    indices, lanes = plan_blocks(problem, limit)
    note_workspace(stats, parallel_map(block, indices, lanes), lanes)
    return y


def _adjoint(problem, a):
    return a.conj() if problem.conjugate and a.dtype.kind == "c" else a


def _grad_input(problem, dy, w, limit, stats):
    if forward_applies(problem):
        t = transposed(problem)
        y = _forward(t.forward, upsampled(t, dy, np), transposed_weights(t, problem, w, np),
                     limit, stats)
        return fold_padding(problem, y) if t.fold else y
    capped = min(limit, problem.column_bytes())      # the extended grid's waste included
    if stride_folds(problem, capped) and all_finite(w):
        return stride_folded_grad_input(problem, dy, w, capped, _target(problem, capped),
                                        stats)
    g, kg, cg, r = problem.groups, problem.gemm_n, problem.in_channels // problem.groups, \
        problem.ndim
    wmat = grouped_weights(problem, oriented_weights(problem, w)).reshape(g, kg, problem.gemm_k)
    wt = np.ascontiguousarray(_adjoint(problem, wmat).transpose(0, 2, 1))  # (G, Cg*taps, Kg)
    e = grid_axes(problem, capped)
    if e and all_finite(wt):
        return phase_grad_input(problem, dy, wt, capped, _target(problem, capped), stats, e)
    padded = problem.padded_shape()
    xpad = np.zeros((problem.batch, problem.in_channels) + padded, dtype=problem.dtype)
    target = xpad.reshape((problem.batch, g, cg) + padded)
    dyg = dy.reshape((problem.batch, g, kg) + problem.out_shape)
    spatial = tuple(range(3, 3 + r))

    def columns_of(index):                                         # in parallel
        part = dyg[grouped_index(index)]                                # (nb, G, Kg, *Ob)
        box = part.shape[:1] + part.shape[3:]
        dyc = np.ascontiguousarray(part.transpose((1, 2, 0) + spatial))
        col = matmul(wt, dyc.reshape(g, kg, -1))               # (G, Cg*taps, M)
        return col.reshape((g, cg) + problem.kernel_shape + box), box

    def scatter(index, col, box):                                 # serially: taps overlap
        starts = [s.start * st for s, st in zip(index[1:], problem.stride)]
        lead = len(index) - 1          # the output axes the block fixes or splits
        for tap in np.ndindex(*problem.kernel_shape):
            sl = list(tap_slices(problem, tap))
            for a in range(lead):      # the block's rows: shifted, and as long as the block
                o = box[1 + a]
                sl[a] = slice(sl[a].start + starts[a], sl[a].start + starts[a]
                              + problem.stride[a] * (o - 1) + 1, problem.stride[a])
            dst = target[index[:1] + (slice(None), slice(None)) + tuple(sl)]
            dst += col[(slice(None), slice(None)) + tap].transpose((2, 0, 1) + spatial)

    indices, lanes = plan_blocks(problem, limit)
    for first in range(0, len(indices), lanes):                    # ``lanes`` in flight
        wave = indices[first:first + lanes]
        cols = parallel_map(columns_of, wave, lanes)
        note_workspace(stats, [col.nbytes for col, _ in cols], lanes)
        for index, (col, box) in zip(wave, cols):
            scatter(index, col, box)
    return fold_padding(problem, xpad)


def _grad_weight(problem, x, dy, limit, stats):
    g, kg, cg, r = problem.groups, problem.gemm_n, problem.in_channels // problem.groups, \
        problem.ndim
    capped = min(limit, problem.column_bytes())      # the extended grid's waste included
    e, f = fold_plan(problem, capped) if problem.gemm_k >= FOLD_MIN_DEPTH else (0, 0)
    e = e or grid_axes(problem, capped)
    if e and finite_operand(problem, x):
        target = _target(problem, capped)
        dw, sizes, lanes = (folded_grad_weight(problem, x, dy, capped, target, e, f) if f
                            else flat_grad_weight(problem, x, dy, capped, target, e))
        note_workspace(stats, sizes, lanes)
        dw = np.moveaxis(dw, 2, 1).reshape((problem.out_channels, cg) + problem.kernel_shape)
        return np.ascontiguousarray(oriented_weights(problem, dw))
    if stride_folds(problem, capped) and finite_operand(problem, x):
        return stride_folded_grad_weight(problem, x, dy, capped, _target(problem, capped),
                                         stats)
    view = column_source(problem, x)
    dyg = dy.reshape((problem.batch, g, kg) + problem.out_shape)
    rows = positions_as_rows(problem)
    spatial = tuple(range(3, 3 + r))
    scratch = Scratch()

    def block(index):
        cols, _ = columns(problem, view, index, scratch)
        dyc = np.ascontiguousarray(dyg[grouped_index(index)].transpose((1, 2, 0) + spatial))
        cols = _adjoint(problem, cols)            # rows: (1, M, taps*C); else (G, R, M)
        part = matmul(dyc.reshape(g, kg, -1), cols if rows else cols.transpose(0, 2, 1))
        return part, cols.nbytes                  # (G, Kg, taps * C) or (G, Kg, Cg * taps)

    indices, lanes = plan_blocks(problem, limit)
    parts = parallel_map(block, indices, lanes)
    note_workspace(stats, [n for _, n in parts], lanes)
    dw = parts[0][0]
    for part, _ in parts[1:]:                                      # in block order
        dw = dw + part
    if rows:                                                       # (K, *KS, C) -> (K, C, *KS)
        dw = np.moveaxis(dw.reshape((kg,) + problem.kernel_shape + (cg,)), -1, 1)
    dw = dw.reshape((problem.out_channels, cg) + problem.kernel_shape)
    return np.ascontiguousarray(oriented_weights(problem, dw))


def run(problem, operands, limit, stats):
    """The result of ``problem.op`` by blocked vol2col + BLAS under ``limit`` bytes of columns."""
    if problem.op == FORWARD:
        return _forward(problem, operands.activation, operands.filter, limit, stats)
    if problem.op == GRAD_INPUT:
        return _grad_input(problem, operands.output, operands.filter, limit, stats)
    return _grad_weight(problem, operands.activation, operands.output, limit, stats)
