"""The ``gemm`` algorithm on the CPU, for every operation.

- forward: vol2col (the strided window view of ``pad_input(x)`` copied into
  a column buffer) + one BLAS ``matmul`` per group; the buffer is chunked
  over images, then output rows, so it never exceeds the workspace limit.
- input gradient, ``dx = A^H dy``: one GEMM ``W^H dy`` per image chunk and
  group gives the column buffer; a loop over the kernel taps adds each tap's
  columns into a zero-padded input (a strided slice per tap: the slices of
  one tap never overlap), and the padding is folded back onto the source
  elements (:func:`~cupyconv.backends.arrays.fold_padding`).
- weight gradient, ``dw = dy . cols^H``: the forward's column buffer and one
  GEMM per group and image chunk, summed in chunk order.

No reduction depends on thread timing: results are bitwise reproducible.
``problem.conjugate=False`` gives the plain transpose (``conv_transpose``).
"""
from __future__ import annotations

import math

import numpy as np

from ..._vocabulary import FORWARD, GRAD_INPUT
from ..arrays import fold_padding, grouped_weights, oriented_weights, pad_input, zeros_result
from ..base import OutOfMemoryError
from .direct import operand_views, windows

__all__ = ["run", "min_workspace_bytes", "workspace_bytes", "position_bytes", "CHUNK_BYTES"]

#: Column-buffer chunk the CPU aims for under a larger limit: big enough for BLAS
#: efficiency, small enough that a default limit (half the host's memory) is never
#: taken whole by one buffer.
CHUNK_BYTES = 64 * 2**20


def position_bytes(problem):
    """Column bytes of one output position (all groups): the forward's smallest chunk."""
    return problem.dtype.itemsize * problem.groups * problem.gemm_k


def min_workspace_bytes(problem):
    """Least workspace: one output position (forward) or one image (gradients)."""
    if problem.op == FORWARD:
        return position_bytes(problem)
    return problem.column_bytes(1)


def _target(problem, limit):
    """Chunk bytes aimed for: ``CHUNK_BYTES`` or the limit if smaller, at least the least chunk."""
    return max(min(limit, CHUNK_BYTES), min(min_workspace_bytes(problem), limit))


def workspace_bytes(problem, limit):
    """Column-buffer bytes under ``limit`` (chunks of about :data:`CHUNK_BYTES`)."""
    return min(problem.column_bytes(), max(_target(problem, limit), min_workspace_bytes(problem)))


def _chunks(problem, limit):
    """Index tuples over ``(N, *O)`` whose column buffer fits ``limit`` bytes.

    The leading axes of ``(N, O_0, O_1, ...)`` are fixed one index at a time
    and the first axis whose remaining block fits is split into runs, so the
    buffer stays under the limit down to a single output position.
    """
    sizes = (problem.batch,) + tuple(problem.out_shape)
    per_position = position_bytes(problem)
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


def _forward(problem, x, w, limit, stats):
    y = zeros_result(problem, np, x.dtype)
    view, wg, yg = operand_views(problem, x, w, y)
    g, kg, kdim, r = problem.groups, problem.gemm_n, problem.gemm_k, problem.ndim
    wmat = np.ascontiguousarray(wg.reshape(g, kg, kdim).transpose(0, 2, 1))  # (G, Kdim, Kg)
    peak = 0
    # (N, G, Cg, *O, *KS) -> (G, N, *O, Cg, *KS): columns are (M, Kdim) per group
    order = (1, 0) + tuple(range(3, 3 + r)) + (2,) + tuple(range(3 + r, 3 + 2 * r))
    for index in _chunks(problem, _target(problem, limit)):
        part = view[index[:1] + (slice(None), slice(None)) + index[1:]]
        cols = np.ascontiguousarray(part.transpose(order))
        peak = max(peak, cols.nbytes)
        m = cols.size // (g * kdim)
        res = np.matmul(cols.reshape(g, m, kdim), wmat)               # (G, M, Kg)
        res = res.reshape((g,) + part.shape[:1] + part.shape[3:3 + r] + (kg,))
        res = res.transpose((1, 0, r + 2) + tuple(range(2, r + 2)))   # (nb, G, Kg, *O)
        yg[index[:1] + (slice(None), slice(None)) + index[1:]] = res
    stats["peak_workspace"] = max(stats.get("peak_workspace", 0), peak)
    return y


def _image_chunk(problem, limit):
    """Images per gradient chunk; one image's columns must fit."""
    per_image = problem.column_bytes(1)
    if per_image > limit:
        raise OutOfMemoryError(
            f"the gradient needs {per_image} bytes of columns per image; "
            f"workspace_limit is {limit} bytes")
    return max(1, min(problem.batch, _target(problem, limit) // max(per_image, 1)))


def _tap_slices(problem, tap):
    """The strided slice of the padded input that kernel tap ``tap`` reads."""
    return tuple(slice(t * d, t * d + st * (o - 1) + 1, st)
                 for t, d, st, o in zip(tap, problem.dilation, problem.stride,
                                        problem.out_shape))


def _adjoint(problem, a):
    return a.conj() if problem.conjugate and a.dtype.kind == "c" else a


def _grad_input(problem, dy, w, limit, stats):
    g, kg, cg = problem.groups, problem.gemm_n, problem.in_channels // problem.groups
    positions = math.prod(problem.out_shape)
    wmat = grouped_weights(problem, oriented_weights(problem, w)).reshape(g, kg, problem.gemm_k)
    wt = _adjoint(problem, wmat).transpose(0, 2, 1)                 # (G, Kdim, Kg)
    padded = problem.padded_shape()
    xpad = np.zeros((problem.batch, problem.in_channels) + padded, dtype=problem.dtype)
    nb = _image_chunk(problem, limit)
    lead = (slice(None),) * 3
    for n0 in range(0, problem.batch, nb):
        count = min(nb, problem.batch - n0)
        col = np.matmul(wt, dy[n0:n0 + count].reshape(count, g, kg, positions))
        stats["peak_workspace"] = max(stats.get("peak_workspace", 0), col.nbytes)
        col = col.reshape((count, g, cg) + problem.kernel_shape + problem.out_shape)
        target = xpad[n0:n0 + count].reshape((count, g, cg) + padded)
        for tap in np.ndindex(*problem.kernel_shape):
            target[lead + _tap_slices(problem, tap)] += col[lead + tap]
    return fold_padding(problem, xpad)


def _grad_weight(problem, x, dy, limit, stats):
    g, kg, kdim, r = problem.groups, problem.gemm_n, problem.gemm_k, problem.ndim
    positions = math.prod(problem.out_shape)
    view = windows(problem, pad_input(problem, x))                 # (N, G, Cg, *O, *KS)
    order = (1, 0) + tuple(range(3, 3 + r)) + (2,) + tuple(range(3 + r, 3 + 2 * r))
    dw = None
    nb = _image_chunk(problem, limit)
    for n0 in range(0, problem.batch, nb):
        count = min(nb, problem.batch - n0)
        cols = np.ascontiguousarray(view[n0:n0 + count].transpose(order))
        stats["peak_workspace"] = max(stats.get("peak_workspace", 0), cols.nbytes)
        cols = _adjoint(problem, cols.reshape(g, count * positions, kdim))
        dyc = dy[n0:n0 + count].reshape(count, g, kg, positions).transpose(1, 2, 0, 3)
        part = np.matmul(dyc.reshape(g, kg, count * positions), cols)   # (G, Kg, Kdim)
        dw = part if dw is None else dw + part
    dw = dw.reshape((problem.out_channels, problem.in_channels // g) + problem.kernel_shape)
    return np.ascontiguousarray(oriented_weights(problem, dw))


def run(problem, operands, limit, stats):
    """The result of ``problem.op`` by vol2col + BLAS under ``limit`` bytes of columns."""
    if problem.op == FORWARD:
        return _forward(problem, operands.activation, operands.filter, limit, stats)
    if problem.op == GRAD_INPUT:
        return _grad_input(problem, operands.output, operands.filter, limit, stats)
    return _grad_weight(problem, operands.activation, operands.output, limit, stats)
