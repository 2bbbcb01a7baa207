"""Gradients of ``conv`` on the CUDA path, written once against a runner.

Like :mod:`.algorithms`, the same code drives CuPy arrays (``CupyRunner``:
cuBLAS through ``cupy.matmul``, the NVRTC-compiled kernels) and NumPy
arrays through the CPU emulation layer (``EmulatedRunner``).

- input gradient: per batch chunk, ``col = W^H dy`` (one batched GEMM over
  the groups) into the column buffer ``[G][(C/G)*prod(KS)][n*prod(O)]``,
  then ``col2vol`` -- vol2col's exact adjoint as a deterministic gather
  that folds every padding mode back onto the source elements.
- weight gradient: per batch chunk, ``vol2col(x)`` then
  ``dw += dy . col^H`` per group, chunks summed in batch order.

The column buffer is chunked over images to fit the workspace limit; when
its allocation fails the chunk is halved (after freeing the pool's cached
blocks) down to one image.  No atomics anywhere: two runs give bitwise
identical gradients.
"""
from __future__ import annotations

import math

from ..._kernels import launch
from ..base import OutOfMemoryError
from .algorithms import gemm_batch_chunk

__all__ = ["grad_input", "grad_weight"]


def _column_buffer(problem, runner, workspace_limit):
    """``(col, images_per_chunk)``, halving the chunk on out-of-memory."""
    nb = gemm_batch_chunk(problem, workspace_limit)
    if nb < 1:
        raise OutOfMemoryError(
            f"the gradient needs {problem.column_bytes(1)} bytes of columns per image; "
            f"workspace_limit is {workspace_limit} bytes")
    positions = math.prod(problem.out_shape)
    while True:
        try:
            return runner.workspace((problem.groups * problem.gemm_k * nb * positions,),
                                    problem.dtype), nb
        except OutOfMemoryError:
            if nb == 1:
                raise
            runner.free_cached()
            nb = max(1, nb // 2)


def _chunks(problem, nb):
    for n0 in range(0, problem.batch, nb):
        yield n0, min(nb, problem.batch - n0)


def _dy_matrix(xp, problem, dy, n0, count):
    """``dy[n0:n0+count]`` as ``(G, K/G, count*prod(O))`` (a copy)."""
    positions = math.prod(problem.out_shape)
    part = dy[n0:n0 + count].reshape(count, problem.groups, problem.gemm_n, positions)
    return xp.ascontiguousarray(part.transpose(1, 2, 0, 3)).reshape(
        problem.groups, problem.gemm_n, count * positions)


def grad_input(problem, dy, w, runner, workspace_limit, gemm=None):
    """``dx`` ``(N, C, *S)`` = ``col2vol(W^H dy)``; ``gemm(a, b, out)`` computes the
    batched product (default: ``runner.matmul``, cuBLAS on CuPy)."""
    xp = runner.xp
    g, kdim = problem.groups, problem.gemm_k
    positions = math.prod(problem.out_shape)
    wmat = xp.ascontiguousarray(w).reshape(g, problem.gemm_n, kdim)
    if problem.conjugate and wmat.dtype.kind == "c":
        wmat = xp.conj(wmat)
    wt = wmat.transpose(0, 2, 1)                                     # (G, Kdim, Kg)
    dx = xp.empty((problem.batch, problem.in_channels) + problem.in_shape, dtype=problem.dtype)
    col, nb = _column_buffer(problem, runner, workspace_limit)
    for n0, count in _chunks(problem, nb):
        cols = col[: g * kdim * count * positions].reshape(g, kdim, count * positions)
        if gemm is None:
            runner.matmul(wt, _dy_matrix(xp, problem, dy, n0, count), out=cols,
                          precision=problem.precision)
        else:
            gemm(wt, _dy_matrix(xp, problem, dy, n0, count), cols)
        launch.run_col2vol(runner.loader, problem, col, dx, n0=n0, n_count=count)
    return dx


def grad_weight(problem, x, dy, runner, workspace_limit):
    """``dw`` ``(K, C/G, *KS)`` = sum over batch chunks of ``dy . vol2col(x)^H``."""
    xp = runner.xp
    g, kdim = problem.groups, problem.gemm_k
    positions = math.prod(problem.out_shape)
    col, nb = _column_buffer(problem, runner, workspace_limit)
    dw = None
    for n0, count in _chunks(problem, nb):
        launch.run_vol2col(runner.loader, problem, x, col, n0=n0, n_count=count)
        cols = col[: g * kdim * count * positions].reshape(g, kdim, count * positions)
        if problem.conjugate and cols.dtype.kind == "c":
            cols = xp.conj(cols)
        part = runner.matmul(_dy_matrix(xp, problem, dy, n0, count), cols.transpose(0, 2, 1),
                             precision=problem.precision)
        if dw is None:
            dw = part
        else:
            dw += part
    return dw.reshape((problem.out_channels, problem.in_channels // g) + problem.kernel_shape)
