"""The CPU ``gemm`` engine's blocks, and its columns on extended grids.

Where the column copy of :func:`~cupyconv.backends.numpy.gemm.columns` would run over
short rows (a few channels, short output rows), the trailing stride-1 axes are flattened
on a grid of the padded input: a kernel tap there is a flat offset, so each (channel,
tap) column over a lead row of outputs is one contiguous slice.  The positions between
the output's rows are computed too (the grid's extra width, at most
:data:`FLAT_MAX_WASTE` of the output's) and cropped:

- forward (:func:`flat_forward`): the columns of the padded input on its own grid;
- float32 weight gradient (:func:`flat_grad_weight`): the same columns, ``dy`` zero at
  the extra positions;
- col2im input gradient (:func:`phase_grad_input`): on each phase grid of the stride,
  each tap's columns added as one slice per lead row, ``dy`` zero between its rows.

The blocks over ``(N, *O_lead)`` are planned as the gemm engine's are (:func:`boxes`).
"""
from __future__ import annotations

import contextlib
import math
import threading
import time

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..._vocabulary import GRAD_INPUT, GRAD_WEIGHT
from ..arrays import (all_finite, constant_value, fold_padding, grouped_weights,
                      oriented_weights, pad_input, reused)
from ..base import OutOfMemoryError
from .blas import matmul, matmul_into
from .threads import Scratch, parallel_map, workers

__all__ = ["position_bytes", "fill_faces", "FACES_FILL_SHARE", "boxes", "grouped_index",
           "note_workspace", "phase_timer",
           "FLAT_MIN_RUN", "FLAT_MAX_WASTE", "flat_axes", "row_positions", "flat_lead_bytes",
           "flat_forward",
           "scatter_axes", "phase_grid", "phase_row_bytes", "phase_grad_input",
           "flat_grad_weight", "grid_axes", "padded_grid", "pad_into", "copy_rows",
           "flat_source", "flat_plan",
           "flat_columns", "phase_rows", "finite_operand",
           "whole_images", "WHOLE_MIN_TAPS", "WHOLE_MAX_WASTE", "WHOLE_MANY_TAPS",
           "WHOLE_MANY_MAX_WASTE", "TAP_BY_TAP_WASTE"]


def position_bytes(problem):
    """Column bytes of one output position (all groups): the smallest block."""
    return problem.dtype.itemsize * problem.groups * problem.gemm_k


def boxes(sizes, per_position, limit):
    """Index tuples over the box ``sizes`` whose positions (``per_position`` bytes each)
    fit ``limit`` bytes: the leading axes fixed one index at a time, the first axis
    whose remaining box fits split into runs (:func:`~cupyconv.backends.numpy.gemm.blocks`)."""
    for axis in range(len(sizes)):
        block = per_position * math.prod(sizes[axis + 1:])
        if block <= limit or axis == len(sizes) - 1:
            break
    if block > limit:
        raise OutOfMemoryError(
            f"workspace_limit={limit} bytes cannot hold the columns of one output position "
            f"({block} bytes); raise the limit or use method='direct'")
    run = max(1, limit // max(block, 1))
    for prefix in np.ndindex(*sizes[:axis]):
        for i0 in range(0, sizes[axis], run):
            yield tuple(slice(i, i + 1) for i in prefix) + (
                slice(i0, min(sizes[axis], i0 + run)),)


def grouped_index(index):
    """A block's index into ``(N, G, C/G, *O, ...)`` arrays."""
    return index[:1] + (slice(None), slice(None)) + index[1:]


def _dy_block(ext, index):
    """The images ``index`` of the extended ``dy`` (``(N, G, Kg, ...)``), contiguous with
    the images after the groups' axes: ``(G, Kg, nb, ...)``."""
    return np.ascontiguousarray(np.moveaxis(ext[grouped_index(index)], 0, 2))


def note_workspace(stats, sizes, lanes):
    """Record the workspace in use: the largest block's bytes of ``sizes`` (one per
    block; at least one) times the blocks in flight."""
    stats["peak_workspace"] = max(stats.get("peak_workspace", 0), max(sizes) * lanes)


def phase_timer(stats, name):
    """A timer for ``name`` when ``stats`` holds a ``"phases"`` dict (the seconds of each
    call appended to ``stats["phases"][name]``, and added to the running thread's total
    in ``stats["phases"]["threads"][thread name]``; ``python -m benchmarks.cpu_vs_torch
    --phases``), else a no-op."""
    phases = stats.get("phases")
    if phases is None:
        return contextlib.nullcontext()
    return _Timer(phases.setdefault(name, []), phases.setdefault("threads", {}))


class _Timer:
    def __init__(self, into, threads):
        self.into, self.threads = into, threads

    def __enter__(self):
        self.start = time.perf_counter()

    def __exit__(self, *exc):
        took = time.perf_counter() - self.start
        self.into.append(took)
        name = threading.current_thread().name
        self.threads[name] = self.threads.get(name, 0.0) + took


#: Least run, in elements, of the column copy of :func:`columns` below which the forward
#: builds its columns on the extended grid instead (:func:`flat_axes`).
FLAT_MIN_RUN = 32
#: Most extra GEMM work the extended grid may add (its positions over the output's).
FLAT_MAX_WASTE = 1.3


def flat_axes(problem):
    """How many trailing axes the columns of a forward or weight gradient flatten on the
    extended grid, or 0.

    On the padded grid a tap of the trailing ``e`` axes is a flat offset, so the columns
    of one (channel, tap) over a run of output rows are one contiguous slice of the
    padded input: its positions are those of the output's trailing box laid out on the
    padded grid (``(O_{r-e} - 1) * prod(P_{r-e+1:}) + ...``), the extra ones computed and
    cropped.  Taken for a stride-1 trailing box where :func:`columns`' runs (a tap row's
    channels) are shorter than :data:`FLAT_MIN_RUN`: the fewest ``e >= 2`` axes whose
    run reaches it, while the extra positions stay within :data:`FLAT_MAX_WASTE`.
    """
    r = problem.ndim
    run = problem.kernel_shape[-1] * problem.in_channels // problem.groups
    if (r < 2 or problem.dilation[-1] != 1 or run >= FLAT_MIN_RUN or problem.is_empty
            or problem.op == GRAD_INPUT):
        return 0
    unit = 0                                       # trailing axes of stride 1
    while unit < r and problem.stride[r - 1 - unit] == 1:
        unit += 1
    return _fewest_axes(problem.padded_shape(), tuple(problem.out_shape), unit)


def _fewest_axes(grid, out, most):
    """The fewest ``e >= 2`` trailing axes (at most ``most``) over which ``out`` laid out on
    ``grid`` runs :data:`FLAT_MIN_RUN` elements, the extra positions within
    :data:`FLAT_MAX_WASTE`; 0 where the waste passes it first or no ``e`` does."""
    r = len(out)
    for e in range(2, min(most, r) + 1):
        length = _flat_length(grid[r - e:], out[r - e:])
        if length / math.prod(out[r - e:]) > FLAT_MAX_WASTE:
            return 0
        if length >= FLAT_MIN_RUN:
            return e
    return 0


def _flat_length(padded, out):
    """Flat positions from the first output to the last of a box ``out`` on ``padded``."""
    return 1 + sum([(o - 1) * math.prod(padded[a + 1:]) for a, o in enumerate(out)])


def row_positions(problem, e, grid):
    """Positions of one lead position's extended row on ``grid`` (the padded input's or
    the phase grids) flattened over its trailing ``e`` axes: ``O_{r-e} *
    prod(grid[r-e+1:])``."""
    r = problem.ndim
    return tuple(problem.out_shape)[r - e] * math.prod(grid[r - e + 1:])


def flat_lead_bytes(problem, e):
    """Column bytes of one lead position's extended row (the flat path's least block)."""
    return position_bytes(problem) * row_positions(problem, e, problem.padded_shape())


#: Share of a padded input's elements in its faces from which :func:`fill_faces` fills
#: the whole buffer instead (the inside is written next): the faces of the last axes are
#: many short runs.  One core, float32, 2 images, ms, faces / whole buffer: 4 channels
#: 14^4 (41% faces) 0.12 / 0.04, 8 channels 12^4 (46%) 0.07 / 0.04, 4 channels 64^3
#: (9%) 0.07 / 0.16, 32 channels 32^3 (17%) 0.06 / 0.17.
FACES_FILL_SHARE = 0.25


def fill_faces(problem, whole, first):
    """Write the constant boundary ``cval`` into the faces of ``whole``, the padded input
    whose spatial axes start at axis ``first``, for its inside to be copied next: face by
    face, or the whole buffer where the faces hold :data:`FACES_FILL_SHARE` of it."""
    cval = constant_value(problem, whole.dtype)
    padded = problem.padded_shape()
    if 1 - math.prod(problem.in_shape) / math.prod(padded) >= FACES_FILL_SHARE:
        whole.fill(cval)
        return
    for a, ((b, after), n) in enumerate(zip(problem.padding, padded)):
        lead = (slice(None),) * (first + a)
        whole[lead + (slice(0, b),)] = cval
        whole[lead + (slice(n - after, n),)] = cval


def padded_grid(problem, x, tail):
    """The padded input ``(N, C, *P)`` channels-first, flat in a reused buffer followed by
    ``tail`` zeros (which window views running past the image read); the buffer."""
    shape = (problem.batch, problem.in_channels) + problem.padded_shape()
    size = math.prod(shape)
    buf = reused("extended grid input", (size + tail,), x.dtype)
    buf[size:] = 0
    pad_into(problem, buf[:size].reshape(shape), x)
    return buf


def pad_into(problem, whole, x):
    """Write ``x`` padded in the problem's boundary mode into ``whole`` ``(N, C, *P)``
    (any view): the constant faces, then the inside row by row; another mode's
    :func:`~cupyconv.backends.arrays.pad_input` copied in."""
    if problem.padding_mode == "constant":
        fill_faces(problem, whole, 2)
        copy_rows(whole[(slice(None),) * 2 + tuple(
            slice(b, b + n) for (b, _), n in zip(problem.padding, problem.in_shape))], x)
    else:
        whole[...] = pad_input(problem, x)


def copy_rows(dst, src):
    """``dst[...] = src``; where the last axis of both is contiguous, each row copied as
    one element of a void dtype (one ``memmove`` per row: NumPy's strided loop over
    rows of 14 float32 took twice as long)."""
    item = dst.itemsize
    if (dst.ndim and dst.shape[-1] > 1 and dst.dtype == src.dtype
            and dst.strides[-1] == item and src.strides[-1] == item):
        row = np.dtype((np.void, dst.shape[-1] * item))
        np.copyto(dst.view(row), src.view(row))
        return
    dst[...] = src


def flat_source(problem, x, e):
    """``(view, full)``: the forward's window view ``(N, G, C/G, *O_lead, *KS, full)`` of
    the padded input on the extended grid of the trailing ``e`` axes (:func:`flat_axes`);
    ``full = O_{r-e} * prod(P_{r-e+1:})`` positions per lead box, the padded input copied
    into a buffer whose zero tail the last positions past the image read."""
    r, g = problem.ndim, problem.groups
    cg = problem.in_channels // g
    padded, out = problem.padded_shape(), tuple(problem.out_shape)
    full = row_positions(problem, e, padded)
    buf = padded_grid(problem, x, full)
    item = buf.itemsize
    sp = [item * math.prod(padded[a + 1:]) for a in range(r)]
    sc = item * math.prod(padded)
    shape = ((problem.batch, g, cg) + out[:r - e] + tuple(problem.kernel_shape) + (full,))
    strides = ((sc * problem.in_channels, cg * sc, sc)
               + tuple(st * s for st, s in zip(problem.stride[:r - e], sp))
               + tuple(d * s for d, s in zip(problem.dilation, sp)) + (item,))
    return as_strided(buf, shape=shape, strides=strides, writeable=False), full


def _extended(problem, a, grid, e):
    """``a`` ``(N, K, *O)`` laid out on the extended grid of the trailing ``e`` axes of
    ``grid``: ``(N, G, K/G, *O_lead, O_{r-e} * prod(grid[r-e+1:]))``, zeros between the
    output's rows."""
    g, kg = problem.groups, problem.gemm_n
    out, lead = tuple(problem.out_shape), problem.ndim - e
    trail = (out[lead],) + tuple(grid[lead + 1:])
    ext = reused("extended grid output", (problem.batch, g, kg) + out[:lead] + trail,
                 problem.dtype)
    ext.fill(0)
    ext[(Ellipsis,) + tuple(slice(0, o) for o in out[lead:])] = a.reshape(
        (problem.batch, g, kg) + out)
    return ext.reshape((problem.batch, g, kg) + out[:lead] + (math.prod(trail),))


def flat_plan(problem, e, per_row, limit, target):
    """``(indices, lanes)``: blocks over ``(N, *O_lead)`` of ``per_row`` workspace bytes
    per lead position, as :func:`~cupyconv.backends.numpy.gemm.plan_blocks` plans them:
    one block per core in flight, each aiming at ``target`` bytes under ``limit`` (the
    caller's limit and the column bytes, the extended grid's extra positions included)."""
    lanes = workers()
    if min(target, limit // lanes) < per_row:
        lanes = 1
    sizes = (problem.batch,) + tuple(problem.out_shape)[:problem.ndim - e]
    # a lead row is the least block: past the target where it is larger (within limit)
    indices = list(boxes(sizes, per_row, max(per_row, min(target, limit // lanes))))
    return indices, max(1, min(lanes, len(indices)))


def flat_columns(problem, view, index, scratch, e):
    """``(cols, box)``: block ``index``'s columns ``(G, C/G * taps, positions)`` of
    :func:`flat_source`'s view, one contiguous copy per (channel, tap) and lead row, and
    its box ``(nb, *Ob_lead)``."""
    r, lead = problem.ndim, problem.ndim - e
    part = view[grouped_index(index)]                             # (nb, G, Cg, *Ob, *KS, full)
    order = ((1, 2) + tuple(range(3 + lead, 3 + lead + r)) + (0,)
             + tuple(range(3, 3 + lead)) + (3 + lead + r,))
    src = part.transpose(order)                              # (G, Cg, *KS, nb, *Ob, full)
    cols = scratch.take("columns", (src.size,), src.dtype).reshape(src.shape)
    np.copyto(cols, src)
    return cols.reshape(problem.groups, -1, src.size // math.prod(src.shape[:2 + r])), \
        part.shape[:1] + part.shape[3:3 + lead]


def flat_forward(problem, x, w, limit, target, stats, e):
    """The forward on the extended grid of the trailing ``e`` axes (:func:`flat_axes`):
    per block ``W . cols`` per group, ``cols`` one contiguous copy per (channel, tap) and
    lead row, the extended positions cropped as the result is written into ``y``."""
    r, g, kg = problem.ndim, problem.groups, problem.gemm_n
    y = np.empty(problem.logical_result_shape, dtype=x.dtype)
    with phase_timer(stats, "pad"):
        view, full = flat_source(problem, x, e)
    wmat = np.ascontiguousarray(grouped_weights(problem, oriented_weights(problem, w))
                                ).reshape(g, kg, -1)
    out, padded = tuple(problem.out_shape), problem.padded_shape()
    trail = (out[r - e],) + padded[r - e + 1:]
    crop = tuple([slice(0, o) for o in out[r - e:]])
    yg = y.reshape((problem.batch, g, kg) + out)
    scratch = Scratch()

    def block(index):
        with phase_timer(stats, "column copy"):
            cols, box = flat_columns(problem, view, index, scratch, e)
        res = scratch.take("product", (g * kg * cols.shape[2],), y.dtype).reshape(g, kg, -1)
        with phase_timer(stats, "GEMM"):
            matmul_into(wmat, cols, res)
        with phase_timer(stats, "write back"):
            res = res.reshape((g, kg) + box + trail)
            dst = yg[grouped_index(index)]
            dst[...] = np.moveaxis(res[(Ellipsis,) + crop], 2, 0)
        return cols.nbytes

    indices, lanes = flat_plan(problem, e, position_bytes(problem) * full, limit, target)
    note_workspace(stats, parallel_map(block, indices, lanes), lanes)
    return y


#: The strided input gradient lays each image's ``dy`` out on its whole phase grid and adds
#: tap by tap (one contiguous slice per tap and image; :func:`phase_grad_input`), where
#: that grid has at most this many positions per output: 4-D 14^4 4->4 k3 s2 (1.46), one
#: core, least of 7: float32 2.6 ms against 3.7 by lead rows, float64 3.4 against 7.0.
TAP_BY_TAP_WASTE = 1.5


#: Taps from which the strided input gradient adds tap by tap over whole images on any
#: number of cores and up to :data:`WHOLE_MAX_WASTE` (below it, on one core only and up to
#: :data:`TAP_BY_TAP_WASTE`): the lead-row and col2im paths add each tap once per block,
#: and with many taps those adds outweigh their lanes and their fewer positions
#: (docs/benchmarks/repeat_calls.md).
WHOLE_MIN_TAPS = 27
#: Most positions per output of the whole images' phase grids for a kernel of
#: :data:`WHOLE_MIN_TAPS` taps or more, and for one of :data:`WHOLE_MANY_TAPS` or more
#: (whose other paths add each tap once per block all the more often).
WHOLE_MAX_WASTE = 2.0
WHOLE_MANY_TAPS, WHOLE_MANY_MAX_WASTE = 243, 4.0


def whole_images(problem, limit):
    """Whether the strided input gradient adds tap by tap over whole images' phase grids
    (:func:`phase_grad_input`): output rows shorter than :data:`FLAT_MIN_RUN`, the grids'
    positions per output within :data:`WHOLE_MAX_WASTE` for a kernel of
    :data:`WHOLE_MIN_TAPS` taps or more (:data:`WHOLE_MANY_MAX_WASTE` for
    :data:`WHOLE_MANY_TAPS` or more), else on one core within
    :data:`TAP_BY_TAP_WASTE`, and an image's ``dy`` and one product within ``limit``
    bytes."""
    r, out = problem.ndim, tuple(problem.out_shape)
    if (problem.op != GRAD_INPUT or r < 2 or problem.is_empty
            or out[-1] >= FLAT_MIN_RUN):
        return False
    waste = _flat_length(phase_grid(problem), out) / math.prod(out)
    taps = math.prod(problem.kernel_shape)
    if taps >= WHOLE_MIN_TAPS:
        fits = waste <= (WHOLE_MANY_MAX_WASTE if taps >= WHOLE_MANY_TAPS else WHOLE_MAX_WASTE)
    else:
        fits = workers() == 1 and waste <= TAP_BY_TAP_WASTE
    return fits and _image_bytes(problem) <= limit


def _image_bytes(problem):
    """Bytes of one image's ``dy`` and one tap's product on its whole phase grids."""
    return (phase_row_bytes(problem, problem.ndim) // position_bytes(problem)
            * (problem.in_channels + problem.out_channels) * problem.dtype.itemsize)


def phase_grid(problem):
    """Per axis the stride's phase grid of the padded input: ``ceil(P / s)``."""
    return tuple(-(-p // s) for p, s in zip(problem.padded_shape(), problem.stride))


def phase_row_bytes(problem, e):
    """Column bytes of one lead position's extended row on the phase grids."""
    return position_bytes(problem) * row_positions(problem, e, phase_grid(problem))


def scatter_axes(problem):
    """How many trailing axes the col2im input gradient flattens on its phase grids, or 0.

    Padded position ``o * s + t * d`` is ``(o + q) * s + phi`` with ``phi = t * d mod s``,
    ``q = t * d // s``: on the phase grid ``phi`` (``ceil(P / s)`` per axis) a tap adds
    at a stride-1 shift of the output, so with the output laid out on that grid's
    trailing ``e`` axes (zeros between its rows) each tap's add over a lead row is one
    contiguous slice.  Taken where the output rows are shorter than
    :data:`FLAT_MIN_RUN`: the fewest ``e >= 2`` axes whose run reaches it, the extra
    positions within :data:`FLAT_MAX_WASTE`.
    """
    r, out = problem.ndim, tuple(problem.out_shape)
    if r < 2 or problem.is_empty or out[-1] >= FLAT_MIN_RUN:
        return 0
    return _fewest_axes(phase_grid(problem), out, r)


def grid_axes(problem, limit):
    """How many trailing axes the gemm engine's columns of ``problem`` (the problem its
    blocks run, :func:`~cupyconv.backends.numpy.gemm.as_run`) flatten on an extended
    grid, or 0: the forward's and the weight gradient's on the padded input's grid
    (:func:`flat_axes`; the weight gradient's in dtypes narrower than 8 bytes only,
    :func:`flat_grad_weight`), the col2im input gradient's on the stride's phase grids
    (:func:`scatter_axes`); where one lead row of extended positions (the least block)
    fits ``limit`` bytes.  The operands' values are the caller's to check."""
    if problem.op == GRAD_INPUT:
        if whole_images(problem, limit):
            return problem.ndim
        e = scatter_axes(problem)
        return e if e and phase_row_bytes(problem, e) <= limit else 0
    if problem.op == GRAD_WEIGHT and problem.dtype.itemsize >= 8:
        return 0
    e = flat_axes(problem)
    return e if e and flat_lead_bytes(problem, e) <= limit else 0


def phase_grad_input(problem, dy, wt, limit, target, stats, e):
    """col2im on the stride's phase grids (:func:`scatter_axes`): per block ``W^H dy``
    on the extended positions (``dy`` zero between the output's rows), each tap added
    as one slice per lead row into its phase grid, the grids then interleaved into the
    padded input.  Where :func:`whole_images`, the grid is each image's whole phase grid
    and each tap's ``W_t^H dy`` is made and added in turn on one lane (one slice per tap
    and image block, in cache) instead of all taps' columns at once; those sums are the
    same on any number of cores."""
    r, g, kg = problem.ndim, problem.groups, problem.gemm_n
    out, grid = tuple(problem.out_shape), phase_grid(problem)
    image = _image_bytes(problem)
    whole = whole_images(problem, limit)
    e = r if whole else e
    cg, lead = problem.in_channels // g, problem.ndim - e
    full = row_positions(problem, e, grid)
    length = _flat_length(grid[lead:], out[lead:])
    ext = _extended(problem, dy, grid, e)
    phases = reused("phase grids", tuple(problem.stride) + (problem.batch, g, cg)
                    + grid[:lead] + (math.prod(grid[lead:]),), problem.dtype)
    phases.fill(0)
    taps = []
    for tap in np.ndindex(*problem.kernel_shape):
        pos = [t * d for t, d in zip(tap, problem.dilation)]
        q = [p // s for p, s in zip(pos, problem.stride)]
        off = sum(q[a] * math.prod(grid[a + 1:]) for a in range(lead, r))
        taps.append((tap, tuple(p % s for p, s in zip(pos, problem.stride)), q[:lead], off))

    def columns_of(index):                                         # in parallel
        dyc = _dy_block(ext, index)                                # (G, Kg, nb, *Ob, full)
        col = matmul(wt, dyc.reshape(g, kg, -1))                   # (G, Cg*taps, M)
        return col.reshape((g, cg) + problem.kernel_shape + dyc.shape[2:])

    def destination(index, box, phase, q, off):
        starts = [i.start for i in index] + [0] * (1 + lead - len(index))   # axes left whole
        images = (slice(starts[0], starts[0] + box[0]), slice(None), slice(None))
        rows = tuple(slice(i + a, i + a + n) for i, a, n in zip(starts[1:], q, box[1:]))
        return phases[phase][images + rows + (slice(off, off + length),)]

    def scatter(index, col):                                       # serially: taps overlap
        box = col.shape[2 + r:3 + r + lead]                        # (nb, *Ob)
        col = col.transpose((2 + r, 0, 1) + tuple(range(2, 2 + r))
                            + tuple(range(3 + r, 4 + r + lead)))[..., :length]
        for tap, phase, q, off in taps:                            # (nb, G, Cg, *KS, *Ob, L)
            dst = destination(index, box, phase, q, off)
            np.add(dst, col[(slice(None),) * 3 + tap], out=dst)

    if whole:           # one lane, whole images: each tap's product added while in cache
        per_tap = wt.reshape(g, cg, len(taps), kg)
        per_tap = [np.ascontiguousarray(per_tap[:, :, t]) for t in range(len(taps))]
        nb = max(1, min(target, limit) // image)        # images per block: dy and one product
        every = (slice(None),) * 2
        for images in [slice(n, min(n + nb, problem.batch))
                       for n in range(0, problem.batch, nb)]:
            dyc = _dy_block(ext, (images,))                        # (G, Kg, nb, full)
            rows = dyc.reshape(g, kg, -1)
            col = np.empty((g, cg) + dyc.shape[2:], dyc.dtype)
            added = col.transpose(2, 0, 1, 3)[..., :length]        # (nb, G, Cg, length)
            for w_tap, (_, phase, _, off) in zip(per_tap, taps):
                matmul_into(w_tap, rows, col.reshape(g, cg, -1))
                dst = phases[phase + (images,) + every + (slice(off, off + length),)]
                np.add(dst, added, out=dst)
            note_workspace(stats, [dyc.nbytes + col.nbytes], 1)
        return _interleaved(problem, phases, grid)
    indices, lanes = flat_plan(problem, e, position_bytes(problem) * full, limit, target)
    for first in range(0, len(indices), lanes):                    # ``lanes`` in flight
        wave = indices[first:first + lanes]
        cols = parallel_map(columns_of, wave, lanes)
        note_workspace(stats, [col.nbytes for col in cols], lanes)
        for index, col in zip(wave, cols):
            scatter(index, col)
    return _interleaved(problem, phases, grid)


def phase_rows(phase, strides, starts, extents):
    """``(rows, first)``: per axis, the slice of a target of ``extents`` rows (the padded
    input's from row ``starts``) that stride phase ``phase`` covers, and the phase grid's
    row that lands on its first row."""
    rows, first = [], []
    for p, s, b, n in zip(phase, strides, starts, extents):
        m = max(0, -(-(b - p) // s))           # the phase's first row at or past b
        rows.append(slice(p + s * m - b, n, s))
        first.append(m)
    return tuple(rows), first


def _interleaved(problem, phases, grid):
    """The input gradient from its phase grids: interleaved into the padded input and
    folded (:func:`~cupyconv.backends.arrays.fold_padding`), or with zero padding
    straight into the input's window."""
    g, cg = problem.groups, problem.in_channels // problem.groups
    window = problem.padding_mode == "constant"
    shape = tuple(problem.in_shape) if window else problem.padded_shape()
    start = [pb if window else 0 for pb, _ in problem.padding]
    res = np.empty((problem.batch, problem.in_channels) + shape, dtype=problem.dtype)
    target = res.reshape((problem.batch, g, cg) + shape)
    for phase in np.ndindex(*problem.stride):
        dst, src = phase_rows(phase, problem.stride, start, shape)
        part = target[(slice(None),) * 3 + dst]
        grids = phases[phase].reshape((problem.batch, g, cg) + grid)
        part[...] = grids[(slice(None),) * 3 + tuple(slice(m, m + n)
                                                     for m, n in zip(src, part.shape[3:]))]
    return res if window else fold_padding(problem, res)


def finite_operand(problem, x):
    """Whether ``x`` and the constant boundary are finite: a weight gradient whose
    columns run over positions no output reads (the extended grid's, a folded strided
    row's) meets them with zeros of ``dy``, which a non-finite value would turn into
    NaN."""
    cval = constant_value(problem, x.dtype) if problem.padding_mode == "constant" else 0
    return bool(np.isfinite(cval)) and all_finite(x)


def flat_grad_weight(problem, x, dy, limit, target, e):
    """The weight gradient of a real ``problem`` on the extended grid (:func:`flat_axes`),
    ``(G, C/G * taps, K/G)`` (transposed): per block ``cols . dy^T`` with ``dy`` zero at
    the extended positions (``x`` and the boundary finite, :func:`finite_operand`, so
    they add nothing), the blocks summed in
    block order (``(C * taps, positions) @ (positions, K)``: one core, float32, 49
    GFLOP/s against 25 for ``dy . cols^T`` on these columns).  The caller takes it for
    float32 only (real: the columns need no conjugation): in float64 that product ran
    21-24 GFLOP/s against the channels-last columns' 32 (4-D 12^4 layer, one core: 14.9
    ms against 12.8; float32 10.5 against 10.5, 4-D 10^4 6.0 against 8.1, 5-D 7^5 11.8
    against 16.5)."""
    view, full = flat_source(problem, x, e)
    ext = _extended(problem, dy, problem.padded_shape(), e)   # (N, G, Kg, *O_lead, full)
    scratch = Scratch()

    def block(index):
        cols, _ = flat_columns(problem, view, index, scratch, e)
        dyc = _dy_block(ext, index).reshape(problem.groups, problem.gemm_n, -1)
        return matmul(cols, dyc.transpose(0, 2, 1)), cols.nbytes

    indices, lanes = flat_plan(problem, e, position_bytes(problem) * full, limit, target)
    parts = parallel_map(block, indices, lanes)
    dw = parts[0][0]
    for part, _ in parts[1:]:                                      # in block order
        dw = dw + part
    return dw, [n for _, n in parts], lanes
