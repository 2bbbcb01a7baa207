"""Gradients of ``conv`` on the NumPy (CPU) backend.

Every function takes a channels-first :class:`~cupyconv._problem.ConvProblem`
and logical channels-first views in the compute dtype, like
:mod:`cupyconv._numpy_backend`.

- :func:`grad_input` -- ``dx = A^T dy``: one GEMM ``W^T dy`` per image and
  group gives the column buffer; a loop over the kernel taps adds each tap's
  columns into a zero-padded input (a strided slice per tap: the slices of
  one tap never overlap, so no position is written twice by one add); the
  padding is then folded back onto the source elements with the adjoint of
  :func:`numpy.pad` (:func:`fold_padding`).
- :func:`grad_weight` -- ``dw = dy . cols^T``: the forward ``gemm`` column
  buffer (a copy of the strided window view of ``pad_input(x)``) and one
  GEMM per group and batch chunk, summed in chunk order.

No reduction depends on thread timing: results are bitwise reproducible.
Complex arithmetic uses the adjoint (conjugate transpose): ``dx = A^H dy``,
``dw = dy . cols^H`` (PyTorch's convention; ``conjugate=False`` gives the
plain transpose, which ``conv_transpose`` needs).
"""
from __future__ import annotations

import math

import numpy as np

from ._engine.algorithms import gemm_batch_chunk
from ._numpy_backend import (DEFAULT_CHUNK_BYTES, _grouped_weights, _oriented_weights,
                             _windows, pad_input)

__all__ = ["grad_input", "grad_weight", "fold_padding", "batch_chunk", "run"]


def batch_chunk(problem, workspace_limit):
    """Images per column-buffer chunk (at least one)."""
    limit = DEFAULT_CHUNK_BYTES if workspace_limit is None else int(workspace_limit)
    return max(1, gemm_batch_chunk(problem, limit))


def _axis_index(ndim, axis, index):
    return (slice(None),) * axis + (index,)


def fold_padding(problem, xpad):
    """Adjoint of ``pad_input``'s linear part: ``(N, C, *padded)`` -> ``(N, C, *S)``.

    Each padded position adds onto the source element :func:`numpy.pad` read
    it from (per axis: ``numpy.pad(arange(S), pads, mode)`` is that map, so
    repeated reflections of pads wider than the axis fold back exactly);
    constant padding contributes nothing.  Axes fold one after another, in a
    fixed order.
    """
    out = xpad
    for i, (pb, pa) in enumerate(problem.padding):
        if not (pb or pa):
            continue
        axis, s = 2 + i, problem.in_shape[i]
        center = out[_axis_index(out.ndim, axis, slice(pb, pb + s))]
        if problem.padding_mode == "constant":
            out = center
            continue
        source = np.pad(np.arange(s), (pb, pa), mode=problem.padding_mode)
        res = center.copy()
        for j in list(range(pb)) + list(range(pb + s, pb + s + pa)):
            res[_axis_index(out.ndim, axis, int(source[j]))] += out[_axis_index(out.ndim, axis, j)]
        out = res
    return np.ascontiguousarray(out)


def _tap_slices(problem, tap):
    """The strided slice of the padded input that kernel tap ``tap`` reads."""
    return tuple(slice(t * d, t * d + st * (o - 1) + 1, st)
                 for t, d, st, o in zip(tap, problem.dilation, problem.stride,
                                        problem.out_shape))


def grad_input(problem, dy, w, *, conjugate=True, workspace_limit=None):
    """``dx`` ``(N, C, *S)`` for ``dy`` ``(N, K, *O)`` and ``w`` ``(K, C/G, *KS)``."""
    g, kg, cg = problem.groups, problem.gemm_n, problem.in_channels // problem.groups
    positions = math.prod(problem.out_shape)
    wmat = _grouped_weights(problem, _oriented_weights(problem, w)).reshape(g, kg, problem.gemm_k)
    if conjugate and wmat.dtype.kind == "c":
        wmat = wmat.conj()
    wt = wmat.transpose(0, 2, 1)                                    # (G, Kdim, Kg)
    padded = tuple(s + pb + pa for s, (pb, pa) in zip(problem.in_shape, problem.padding))
    xpad = np.zeros((problem.batch, problem.in_channels) + padded, dtype=problem.dtype)
    nb = batch_chunk(problem, workspace_limit)
    lead = (slice(None),) * 3
    for n0 in range(0, problem.batch, nb):
        count = min(nb, problem.batch - n0)
        dyc = dy[n0:n0 + count].reshape(count, g, kg, positions)
        col = np.matmul(wt, dyc)                                    # (n, G, Kdim, P)
        col = col.reshape((count, g, cg) + problem.kernel_shape + problem.out_shape)
        target = xpad[n0:n0 + count].reshape((count, g, cg) + padded)
        for tap in np.ndindex(*problem.kernel_shape):
            target[lead + _tap_slices(problem, tap)] += col[lead + tap]
    return fold_padding(problem, xpad)


def grad_weight(problem, x, dy, *, conjugate=True, workspace_limit=None):
    """``dw`` ``(K, C/G, *KS)`` for ``x`` ``(N, C, *S)`` and ``dy`` ``(N, K, *O)``."""
    g, kg, kdim, r = problem.groups, problem.gemm_n, problem.gemm_k, problem.ndim
    positions = math.prod(problem.out_shape)
    view = _windows(problem, pad_input(problem, x))                # (N, G, Cg, *O, *KS)
    # (N, G, Cg, *O, *KS) -> (G, N, *O, Cg, *KS): the forward gemm's column order
    order = (1, 0) + tuple(range(3, 3 + r)) + (2,) + tuple(range(3 + r, 3 + 2 * r))
    dw = None
    nb = batch_chunk(problem, workspace_limit)
    for n0 in range(0, problem.batch, nb):
        count = min(nb, problem.batch - n0)
        cols = np.ascontiguousarray(view[n0:n0 + count].transpose(order))
        cols = cols.reshape(g, count * positions, kdim)
        if conjugate and cols.dtype.kind == "c":
            cols = cols.conj()
        dyc = dy[n0:n0 + count].reshape(count, g, kg, positions).transpose(1, 2, 0, 3)
        part = np.matmul(dyc.reshape(g, kg, count * positions), cols)   # (G, Kg, Kdim)
        if dw is None:
            dw = part
        else:
            dw += part
    dw = dw.reshape((problem.out_channels, problem.in_channels // g) + problem.kernel_shape)
    return np.ascontiguousarray(_oriented_weights(problem, dw))


_IMPLS = {"input": grad_input, "weight": grad_weight}


def run(kind, problem, a, b, **kwargs):
    """``kind`` is ``"input"`` (a=dy, b=w) or ``"weight"`` (a=x, b=dy)."""
    return _IMPLS[kind](problem, a, b, **kwargs)
