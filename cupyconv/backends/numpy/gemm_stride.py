"""The CPU ``gemm`` engine's forward, input gradient and weight gradient with a strided
last axis whose taps fold into the GEMM's rows over whole padded input rows.

With a stride ``s > 1`` on the last axis no extended grid applies
(:mod:`~cupyconv.backends.numpy.gemm_grid` flattens stride-1 axes only), and with few
channels the column copy of :func:`~cupyconv.backends.numpy.gemm.columns` runs over a
kernel row's taps times the channels (12 elements for 3 taps of 4 channels).  Here the
last axis's ``K_r`` taps leave the columns for the GEMM's rows, and the columns run over
the first ``J = s (O_r - 1) + d (K_r - 1) + 1`` positions ``q`` of each padded input
row, ``t`` the taps of the other axes:

- forward (:func:`stride_folded_forward`): ``Z[(a, k), q] = sum_{c, t} W[k, c, t, a]
  X[c, t, q]``, then ``Y[k, o] = sum_a Z[(a, k), s o + d a]`` (``K_r`` strided adds, in
  tap order);
- weight gradient (:func:`stride_folded_grad_weight`): ``dW[(c, t), (a, k)] = sum_q
  X[c, t, q] D[(a, k), q]``, ``D`` zero but at ``q = s o + d a``, where it holds
  ``dy[k, o]``;
- input gradient (:func:`stride_folded_grad_input`): per lead tap ``t``, ``W_t^T . D``
  on the lead axes' phase grids, added into the tap's phase grid of the padded input.

The GEMM computes ``J / O_r`` (about ``s``) times the positions the output needs, but it
is ``K_r`` times wider, and a column's run is ``J`` contiguous elements, copied as one
element of a ``J``-element void dtype (one ``memmove``, not NumPy's strided loop over
a few elements).  :func:`stride_fold_applies` decides.
"""
from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..._vocabulary import FORWARD, GRAD_INPUT, GRAD_WEIGHT
from ..arrays import fold_padding, oriented_weights
from .blas import matmul, matmul_into
from .gemm_fold import FOLD_MAX_ROWS
from .gemm_grid import (FLAT_MIN_RUN, copy_rows, flat_plan, note_workspace, padded_grid,
                        phase_grid, phase_rows, phase_timer)
from .threads import Scratch, parallel_map

__all__ = ["FOLD_DTYPES", "STRIDE_FOLD_MAX_WASTE", "row_length", "stride_fold_waste",
           "stride_lead_bytes", "stride_fold_applies", "stride_folded_forward",
           "stride_folded_grad_weight", "stride_image_bytes",
           "stride_folded_grad_input"]

#: The dtypes each op folds in.  float64's forward and weight gradient ran no faster
#: (4-D 4->4 14^4 k3 s2, one core, 40 interleaved rounds, median: forward 1.06x and
#: weight gradient 1.00x the unfolded time, input gradient 0.84x): the GEMM's doubled
#: positions cost more there than the longer runs save.
FOLD_DTYPES = {FORWARD: (np.float32,), GRAD_WEIGHT: (np.float32,),
               GRAD_INPUT: (np.float32, np.float64)}
#: Most positions the folded GEMM may compute per output position along the last axis
#: (``J / O_r``): stride 2 gives about 2.
STRIDE_FOLD_MAX_WASTE = 2.5


def row_length(problem):
    """``J``: positions of a padded input row that the last axis's taps read."""
    return (problem.stride[-1] * (problem.out_shape[-1] - 1)
            + problem.dilation[-1] * (problem.kernel_shape[-1] - 1) + 1)


def stride_fold_waste(problem):
    """Positions the folded GEMM computes per output position: ``J / O_r``, times the
    lead axes' phase grid over the output's (``prod(M) / prod(O_lead)``) for an input
    gradient."""
    waste = row_length(problem) / problem.out_shape[-1]
    if problem.op == GRAD_INPUT:
        waste *= math.prod(_phases(problem)[1]) / math.prod(problem.out_shape[:-1])
    return waste


def stride_lead_bytes(problem):
    """Workspace bytes of one lead position ``(n, o_1)``: its columns and its product and
    sum (forward) or its ``D`` (weight gradient)."""
    kr, k = problem.kernel_shape[-1], problem.gemm_n
    rows = row_length(problem) * (problem.gemm_k // kr + kr * k)
    if problem.op == FORWARD:
        rows += k * problem.out_shape[-1]
    return problem.dtype.itemsize * math.prod(problem.out_shape[1:-1]) * rows


def stride_fold_applies(problem, limit):
    """Whether ``problem`` (a dtype of :data:`FOLD_DTYPES`, one group, two axes or more)
    folds its strided last axis: stride above 1 and more than one tap there,
    :func:`~.gemm.columns`' runs (a kernel row's taps times the channels) shorter than
    :data:`~.gemm_grid.FLAT_MIN_RUN`, the folded rows ``K_r * K`` within
    :data:`~.gemm_fold.FOLD_MAX_ROWS`, ``J / O_r`` within :data:`STRIDE_FOLD_MAX_WASTE`,
    and one lead position's workspace (an input gradient: one image's) within ``limit``
    bytes."""
    ks = problem.kernel_shape
    if (problem.dtype not in FOLD_DTYPES.get(problem.op, ()) or problem.groups != 1
            or problem.ndim < 2 or problem.is_empty or problem.stride[-1] < 2 or ks[-1] < 2):
        return False
    return (ks[-1] * problem.in_channels < FLAT_MIN_RUN
            and ks[-1] * problem.gemm_n <= FOLD_MAX_ROWS
            and row_length(problem) <= STRIDE_FOLD_MAX_WASTE * problem.out_shape[-1]
            and (stride_image_bytes(problem) if problem.op == GRAD_INPUT
                 else stride_lead_bytes(problem)) <= limit)


def _rows(problem, x):
    """``(rows, void)``: the padded input ``(N, C, *P_lead)`` as elements of the void
    dtype ``void``, each the first ``J`` elements of a padded row."""
    shape = (problem.batch, problem.in_channels) + problem.padded_shape()
    whole = padded_grid(problem, x, 0).reshape(shape)
    void = np.dtype((np.void, row_length(problem) * whole.itemsize))
    return np.ndarray(shape[:-1], dtype=void, buffer=whole, strides=whole.strides[:-1]), \
        void


def _box(problem, index):
    """``(images, o_1 slice)`` of a block index over ``(N, O_1)``."""
    return index[0], index[1] if len(index) > 1 else slice(0, problem.out_shape[0])


def _columns(problem, rows, void, index, scratch):
    """Block ``index``'s columns ``(C * taps_lead, nb * prod(Ob_lead) * J)`` (channel and
    lead taps major; images, lead positions and a row's ``J`` elements minor), one void
    element per (channel, lead tap, lead position), and the box ``(nb, *Ob_lead)``."""
    r, s, d = problem.ndim, problem.stride, problem.dilation
    images, lead = _box(problem, index)
    st = rows.strides
    start = rows[images.start:, :, lead.start * s[0]:]
    box = (images.stop - images.start, lead.stop - lead.start) + tuple(
        problem.out_shape[1:r - 1])
    shape = (problem.in_channels,) + tuple(problem.kernel_shape[:r - 1]) + box
    strides = ((st[1],) + tuple(d[a] * st[2 + a] for a in range(r - 1)) + (st[0],)
               + tuple(s[a] * st[2 + a] for a in range(r - 1)))
    src = as_strided(start, shape=shape, strides=strides, writeable=False)
    depth = math.prod(shape[:r])
    item = problem.dtype.itemsize
    flat = scratch.take("columns", (depth * math.prod(box) * void.itemsize // item,),
                        problem.dtype)
    np.copyto(flat.view(void).reshape(shape), src)
    return flat.reshape(depth, -1), box


def _shifted(problem, dy, index, box, scratch):
    """``D`` of block ``index`` over ``box`` (``(nb, *Ob_lead)``, or a larger lead box
    whose leading part holds the outputs), ``(K_r * K, nb * prod(box[1:]) * J)``: zero but
    ``D[(a, k), (.., s o + d a)] = dy[k, .., o]``."""
    k, kr = problem.gemm_n, problem.kernel_shape[-1]
    s, d = problem.stride[-1], problem.dilation[-1]
    span, jn = s * (problem.out_shape[-1] - 1) + 1, row_length(problem)
    dz = scratch.take("shifted", (kr * k * math.prod(box) * jn,), dy.dtype)
    dz.fill(0)
    dz = dz.reshape((kr, k) + box + (jn,))
    images, lead = _box(problem, index)
    src = np.moveaxis(dy[images, :, lead], 1, 0)                 # (K, nb, *Ob)
    inside = tuple(slice(0, n) for n in src.shape[2:-1])       # a larger box: zero past
    for a in range(kr):
        np.copyto(dz[(a, slice(None), slice(None)) + inside
                     + (slice(d * a, d * a + span, s),)], src)
    return dz.reshape(kr * k, -1)


def _plan(problem, limit, target):
    return flat_plan(problem, problem.ndim - 1, stride_lead_bytes(problem), limit, target)


def stride_folded_forward(problem, x, w, limit, target, stats):
    """The forward of :func:`stride_fold_applies`: per block over ``(N, O_1)``, ``Z =
    W_fold . cols``, then its ``K_r`` strided slices summed into ``y`` in tap order."""
    r, k = problem.ndim, problem.gemm_n
    kr, s, d = problem.kernel_shape[-1], problem.stride[-1], problem.dilation[-1]
    span, jn = s * (problem.out_shape[-1] - 1) + 1, row_length(problem)
    y = np.empty(problem.logical_result_shape, dtype=x.dtype)
    with phase_timer(stats, "pad"):
        rows, void = _rows(problem, x)
    wo = oriented_weights(problem, w)                        # (K, C, *KS_lead, K_r)
    order = (r + 1, 0, 1) + tuple(range(2, r + 1))
    wmat = np.ascontiguousarray(wo.transpose(order)).reshape(1, kr * k, -1)
    scratch = Scratch()

    def block(index):
        with phase_timer(stats, "column copy"):
            cols, box = _columns(problem, rows, void, index, scratch)
        z = scratch.take("product", (kr * k * cols.shape[1],), y.dtype)
        with phase_timer(stats, "GEMM"):
            matmul_into(wmat, cols[None], z.reshape(1, kr * k, -1))
        with phase_timer(stats, "shifted adds"):
            z = z.reshape((kr, k) + box + (jn,))
            acc = scratch.take("sum", (k * math.prod(box) * problem.out_shape[-1],),
                               y.dtype).reshape(z.shape[1:-1] + (problem.out_shape[-1],))
            np.add(z[0, ..., 0:span:s], z[1, ..., d:d + span:s], out=acc)
            for a in range(2, kr):                               # in tap order
                np.add(acc, z[a, ..., d * a:d * a + span:s], out=acc)
        with phase_timer(stats, "write back"):
            images, lead = _box(problem, index)
            np.moveaxis(y[images, :, lead], 1, 0)[...] = acc     # (K, nb, *Ob)
        return cols.nbytes + z.nbytes + acc.nbytes

    indices, lanes = _plan(problem, limit, target)
    note_workspace(stats, parallel_map(block, indices, lanes), lanes)
    return y


def stride_folded_grad_weight(problem, x, dy, limit, target, stats):
    """The weight gradient of :func:`stride_fold_applies` for a finite ``x`` and boundary
    constant (:func:`~.gemm_grid.finite_operand`: ``D``'s zeros meet every position of a
    padded row):
    per block ``cols . D^T``, the blocks summed in block order; ``(K, C, *KS)``."""
    r, k, c = problem.ndim, problem.gemm_n, problem.in_channels
    rows, void = _rows(problem, x)
    scratch = Scratch()

    def block(index):
        cols, box = _columns(problem, rows, void, index, scratch)
        dz = _shifted(problem, dy, index, box, scratch)
        return matmul(cols, dz.T), cols.nbytes + dz.nbytes

    indices, lanes = _plan(problem, limit, target)
    parts = parallel_map(block, indices, lanes)
    note_workspace(stats, [n for _, n in parts], lanes)
    dw = parts[0][0]
    for part, _ in parts[1:]:                                    # in block order
        dw = dw + part
    # (C, *KS_lead, K_r, K) -> (K, C, *KS)
    dw = dw.reshape((c,) + tuple(problem.kernel_shape) + (k,))
    dw = dw.transpose((r + 1, 0) + tuple(range(1, r + 1)))
    return np.ascontiguousarray(oriented_weights(problem, dw))


def _phases(problem):
    """The lead axes' strides and rows per phase of the padded input (``M``,
    :func:`~.gemm_grid.phase_grid`)."""
    return tuple(problem.stride[:-1]), phase_grid(problem)[:-1]


def stride_image_bytes(problem):
    """Workspace bytes of one image of the folded input gradient: its ``D``, its phase
    grids and one tap's product."""
    kr, jn = problem.kernel_shape[-1], row_length(problem)
    strides, m = _phases(problem)
    grids = problem.in_channels * (math.prod(strides) + 1)
    return problem.dtype.itemsize * math.prod(m) * jn * (kr * problem.gemm_n + grids)


def stride_folded_grad_input(problem, dy, w, limit, target, stats):
    """The input gradient of a strided problem that :func:`stride_fold_applies` to but for
    its op, with finite weights (``D``'s zeros meet every weight).  Per block of images,
    ``D`` on the lead axes' phase grid (``M_a >= O_a`` rows, zero past the output's);
    per lead tap ``t`` in tap order, ``W_t^T . D`` (``(C, K_r * K)`` by ``D``: the last
    axis's taps summed in the product, over whole padded rows) added into the tap's
    phase grid of the padded input as one flat shifted slice per channel (the shift
    crosses only the zero rows of ``D``; a phase's first tap writes its product there);
    the grids copied row by row into ``dx`` (constant padding) or into the padded input,
    whose padding is folded back.  The blocks run one after another."""
    r, c = problem.ndim, problem.in_channels
    kr, jn = problem.kernel_shape[-1], row_length(problem)
    strides, m = _phases(problem)
    wo = oriented_weights(problem, w)                            # (K, C, *KS_lead, K_r)
    wt = np.ascontiguousarray(wo.transpose(tuple(range(2, r + 1)) + (1, r + 1, 0)))
    wt = wt.reshape(-1, c, kr * problem.gemm_n)                  # (taps, C, K_r * K)
    steps = [math.prod(m[a + 1:]) * jn for a in range(r - 1)]
    taps = []                                                    # (phase, flat shift)
    for tap in np.ndindex(*problem.kernel_shape[:-1]):
        at = [dl * t for dl, t in zip(problem.dilation, tap)]
        taps.append((tuple(v % st for v, st in zip(at, strides)),
                     sum(v // st * step for v, st, step in zip(at, strides, steps))))
    scratch = Scratch()

    def block(index):
        images = index[0]
        nb = images.stop - images.start
        dz = _shifted(problem, dy, (images,), (nb,) + m, scratch)
        flat = dz.shape[1]
        grids = scratch.take("phase grids", (math.prod(strides) * c * flat,), dy.dtype)
        grids = grids.reshape(strides + (c, flat))
        product = scratch.take("product", (c * flat,), dy.dtype)
        written = set()
        with phase_timer(stats, "tap products"):
            for t, (phase, shift) in enumerate(taps):            # in tap order
                dst = grids[phase][:, shift:]
                if phase not in written:       # a phase's first tap: its product in place
                    grids[phase][:, :shift] = 0
                    matmul_into(wt[t], dz[:, :flat - shift], dst)
                    written.add(phase)
                    continue
                part = product[:c * (flat - shift)].reshape(c, -1)
                matmul_into(wt[t], dz[:, :flat - shift], part)
                np.add(dst, part, out=dst)
            for phase in np.ndindex(*strides):                   # phases no tap reaches
                if phase not in written:
                    grids[phase] = 0
        with phase_timer(stats, "interleave"):
            _interleave(problem, grids.reshape(strides + (c, nb) + m + (jn,)),
                        np.moveaxis(into[images], 0, 1), crop)
        return dz.nbytes + product.nbytes + grids.nbytes

    # constant padding: the grids' rows go straight into dx, the padding dropped
    crop = problem.padding_mode == "constant"
    into = np.empty((problem.batch, c) + (problem.in_shape if crop
                                          else problem.padded_shape()), dtype=dy.dtype)
    # one lane on any number of cores: a block is some 60 short NumPy calls over an
    # image's grids, and two lanes took longer (14^4 s2 float32 on the 2-core VM, wall:
    # 1.28-1.43 ms against 1.74-1.75)
    indices, _ = flat_plan(problem, r, stride_image_bytes(problem), limit, target)
    lanes = 1
    note_workspace(stats, parallel_map(block, indices, lanes), lanes)
    return into if crop else fold_padding(problem, into)


def _interleave(problem, grids, into, crop):
    """Copy the phase grids ``grids`` (``(*s_lead, C, nb, *M, J)``) row by row into
    ``into`` (``(C, nb, ...)``): the padded input's images, or with ``crop`` its inside
    (``dx``), zero where no row of the grids reaches."""
    strides, jn = problem.stride[:-1], grids.shape[-1]
    starts = [b if crop else 0 for b, _ in problem.padding]
    last, start = into.shape[-1], starts[-1]
    have = max(0, min(last, jn - start))
    if have < last:
        into[..., have:] = 0
    for phase in np.ndindex(*strides):
        dst, first = phase_rows(phase, strides, starts, into.shape[2:-1])
        part = into[(slice(None),) * 2 + dst + (slice(0, have),)]
        copy_rows(part, grids[phase][(slice(None),) * 2 + tuple(
            slice(m, m + n) for m, n in zip(first, part.shape[2:-1]))
            + (slice(start, start + have),)])
