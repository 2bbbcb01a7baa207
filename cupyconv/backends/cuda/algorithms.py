"""The forward algorithms of the CUDA path, written once against a runner.

Each takes a channels-first forward :class:`~cupyconv.core.ConvProblem`,
the logical views ``x`` ``(N, C, *S)`` and ``w`` ``(K, C/G, *KS)`` (any
strides: the kernels index them as they are), a runner and a workspace
limit, and returns ``y`` ``(N, K, *O)``.  (``fft`` is the shared
:mod:`cupyconv.backends.fft_conv`; ``separable`` is :mod:`.separable`, one direct-kernel
pass per axis; ``winograd`` is :mod:`.winograd`, transform kernels around a batched GEMM;
the gradients are in :mod:`.gradients`.)  The same code drives CuPy arrays
(``CupyRunner``) and NumPy arrays through the CPU emulation layer
(``EmulatedRunner``).
"""
from __future__ import annotations

import math

from ..._kernels import launch
from ..._vocabulary import FORWARD
from ..base import OutOfMemoryError
from . import implicit_grads, relayout, separable, winograd

__all__ = ["can_implement", "gemm_batch_chunk", "run", "tensor_core_flags"]


def _fft_ok(problem):
    grad_input = problem.op == "grad_input"
    if problem.padding_mode != "constant" or (problem.cval != 0 and not grad_input):
        return False, ("the FFT path supports zero constant padding only (other "
                       "boundaries would need a padded copy of the input)")
    return True, ""


def can_implement(problem, algorithm, device):
    """``(ok, reason)`` for ``algorithm`` on ``problem`` (any op) on ``device``."""
    if algorithm == "direct":
        return launch.can_implement_direct(problem, device.smem_per_block)
    if algorithm == "implicit_gemm":
        if problem.op != FORWARD:
            return implicit_grads.can_implement(problem)
        return launch.can_implement_implicit_gemm(problem)
    if algorithm == "gemm":
        return launch.can_implement_vol2col(problem)
    if algorithm == "fft":
        return _fft_ok(problem)
    if algorithm == "separable":
        return separable.can_implement(problem, device.smem_per_block)
    if algorithm == "winograd":
        return winograd.can_implement(problem, device)
    raise ValueError(f"unknown algorithm {algorithm!r}")


def gemm_batch_chunk(problem, workspace_limit):
    """Images per vol2col chunk so the column buffer fits ``workspace_limit``.

    Returns 0 when not even one image's columns fit.
    """
    per_image = problem.column_bytes(1)
    if workspace_limit is None:
        return problem.batch
    return int(min(problem.batch, workspace_limit // max(per_image, 1)))


def _direct(problem, x, w, runner, workspace_limit):
    y = runner.xp.empty((problem.batch, problem.out_channels) + problem.out_shape,
                        dtype=problem.dtype)
    launch.run_direct(runner.loader, problem, x, w, y,
                      smem_limit=runner.static.smem_per_block)
    return y


def tensor_core_flags(problem, device):
    """The implicit GEMM's tensor-core switches for ``problem`` on ``device``: the atoms
    exist (sm_80+), and float32 asked for TF32."""
    return dict(mma=device.arch >= 80, tf32=problem.precision == "tf32")


def _implicit_gemm(problem, x, w, runner, workspace_limit):
    y = runner.xp.empty((problem.batch, problem.out_channels) + problem.out_shape,
                        dtype=problem.dtype)
    flags = tensor_core_flags(problem, runner.static)
    x, w = relayout.relaid(problem, x, w, runner.xp, **flags)   # channels-last for variant 4
    launch.run_implicit_gemm_fprop(runner.loader, problem, x, w, y, **flags)
    return y


def _gemm(problem, x, w, runner, workspace_limit):
    """vol2col kernel into a column buffer, then ``xp.matmul`` (cuBLAS) per group."""
    xp = runner.xp
    nb = gemm_batch_chunk(problem, workspace_limit)
    if nb < 1:
        raise OutOfMemoryError(
            f"gemm needs {problem.column_bytes(1)} bytes of columns per image; "
            f"workspace_limit is {workspace_limit}")
    g, kg, kdim = problem.groups, problem.gemm_n, problem.gemm_k
    positions = math.prod(problem.out_shape)
    y = xp.empty((problem.batch, problem.out_channels, positions), dtype=problem.dtype)
    wmat = xp.ascontiguousarray(w).reshape(g, kg, kdim)
    col = runner.workspace((g * kdim * nb * positions,), problem.dtype)
    yg = y.reshape(problem.batch, g, kg, positions)
    for n0 in range(0, problem.batch, nb):
        count = min(nb, problem.batch - n0)
        launch.run_vol2col(runner.loader, problem, x, col, n0=n0, n_count=count)
        cols = col[: g * kdim * count * positions].reshape(g, kdim, count * positions)
        res = runner.matmul(wmat, cols, precision=problem.precision).reshape(g, kg, count, positions)
        yg[n0:n0 + count] = res.transpose(2, 0, 1, 3)
    return y.reshape((problem.batch, problem.out_channels) + problem.out_shape)


_IMPLS = {"direct": _direct, "implicit_gemm": _implicit_gemm, "gemm": _gemm,
          "separable": separable.run, "winograd": winograd.run}


def run(problem, x, w, algorithm, runner, workspace_limit=None):
    """Run one forward algorithm; out-of-memory surfaces as :class:`OutOfMemoryError`."""
    return _IMPLS[algorithm](problem, x, w, runner, workspace_limit)
