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

import functools
import math

from ..._kernels import launch, program, wgmma_launch
from ..._kernels.program import Call, Program
from ..._lru import memoized
from ..base import OutOfMemoryError
from . import relayout, separable, winograd
from .implicit_choice import tensor_core_flags

__all__ = ["gemm_batch_chunk", "gemm_program", "clear_program_cache", "run",
           "tensor_core_flags", "direct", "implicit_gemm", "gemm",
           "gemm_applies", "fft_applies"]


def fft_applies(problem, device=None):
    """``(ok, reason)``: the CUDA path's FFT pads with zeros only."""
    grad_input = problem.op == "grad_input"
    if problem.padding_mode != "constant" or (problem.cval != 0 and not grad_input):
        return False, ("the FFT path supports zero constant padding only (other "
                       "boundaries would need a padded copy of the input)")
    return True, ""


def gemm_applies(problem, device=None):
    """``(ok, reason)`` of the vol2col column buffer."""
    return launch.can_implement_vol2col(problem)


def gemm_batch_chunk(problem, workspace_limit):
    """Images per vol2col chunk so the column buffer fits ``workspace_limit``.

    Returns 0 when not even one image's columns fit.
    """
    per_image = problem.column_bytes(1)
    if workspace_limit is None:
        return problem.batch
    return int(min(problem.batch, workspace_limit // max(per_image, 1)))


def _execute(prog, x, w, runner):
    """Execute a forward program on ``x`` and ``w``; returns the ``y`` it allocated."""
    return program.execute(prog, runner.xp, dict(x=x, w=w, bias=None))[prog.result]


def direct(problem, x, w, runner, workspace_limit):
    """The direct kernel's program, built and executed."""
    prog = launch.direct_program(runner.loader, problem, x, w,
                                 smem_limit=runner.static.smem_per_block)
    return _execute(prog, x, w, runner)


def implicit_gemm(problem, x, w, runner, workspace_limit, config=None):
    """The implicit GEMM, built and executed: the backend's record ``config`` as it is
    (``implicit_choice.choose_kernel``): the operands it names re-laid channels-last
    (``relayout.relaid``), then its tile (``relayout.tile_program``); without one, the
    re-layout candidate and the tile on the operands as they then are."""
    flags = tensor_core_flags(problem, runner.static)
    x, w = relayout.relaid(problem, x, w, runner, **flags,
                           choice=False if config is None else config.relayout,
                           round_tf32=relayout.rounds_here(problem))
    return _execute(relayout.tile_program(problem, x, w, runner, flags, config), x, w, runner)


def gemm(problem, x, w, runner, workspace_limit):
    """vol2col kernel into a column buffer, then ``runner.matmul`` (cuBLAS) per group:
    builds (memoised) and executes the :func:`gemm_program`."""
    prog = gemm_program(problem, x, runner, workspace_limit)
    return program.execute(prog, runner.xp, dict(x=x, w=w),
                           workspace=runner.workspace)[prog.result]


def gemm_program(problem, x, runner, workspace_limit):
    """The :class:`~cupyconv._kernels.program.Program` of the forward ``gemm``: the
    weights as one contiguous ``(G, K/G, C/G*taps)`` matrix (a library call), then per
    batch chunk the vol2col launch into the column buffer and the GEMM written into
    ``y``'s chunk (memoised per problem, ``x`` strides, chunk and runner)."""
    nb = gemm_batch_chunk(problem, workspace_limit)
    if nb < 1:
        raise OutOfMemoryError(
            f"gemm needs {problem.column_bytes(1)} bytes of columns per image; "
            f"workspace_limit is {workspace_limit}")
    launch.check_dtype(problem, x=x)
    launch.check_addressable(x=x)
    return _gemm_build(problem, launch.operand_strides(problem, x, "x"), nb, runner)


@memoized()
def _gemm_build(problem, xs, nb, runner):
    g, kg, kdim = problem.groups, problem.gemm_n, problem.gemm_k
    positions = math.prod(problem.out_shape)
    steps = [Call(functools.partial(_weight_matrix, runner.xp, (g, kg, kdim)), ("w",), "wmat")]
    for n0 in range(0, problem.batch, nb):
        count = min(nb, problem.batch - n0)
        step = launch.vol2col_step(runner.loader, problem, xs, n0, count, ("x", "col"))
        if step is not None:
            steps += [step, Call(functools.partial(
                _chunk_product, runner.matmul, problem.precision, n0, count, (g, kg, kdim),
                positions), ("wmat", "col", "y"))]
    return Program("gemm", ("x", "w"), (
        ("y", tuple(problem.y_shape), problem.dtype),
        ("col", (g * kdim * nb * positions,), problem.dtype)), tuple(steps), "y")


def clear_program_cache():
    """Forget the memoised ``gemm`` and wgmma programs (they hold the runners' kernels)."""
    _gemm_build.cache_clear()
    wgmma_launch.clear_program_cache()


def _weight_matrix(xp, shape, w):
    return xp.ascontiguousarray(w).reshape(shape)


def _chunk_product(matmul, precision, n0, count, gkk, positions, wmat, col, y):
    """``y[n0:n0+count]`` = the GEMM of the weight matrix with the chunk's columns."""
    g, kg, kdim = gkk
    cols = col[: g * kdim * count * positions].reshape(g, kdim, count * positions)
    res = matmul(wmat, cols, precision=precision).reshape(g, kg, count, positions)
    y.reshape(y.shape[0], g, kg, positions)[n0:n0 + count] = res.transpose(2, 0, 1, 3)


_IMPLS = {"direct": direct, "implicit_gemm": implicit_gemm, "gemm": gemm,
          "separable": separable.run, "winograd": winograd.run}


def run(problem, x, w, algorithm, runner, workspace_limit=None):
    """Run one forward algorithm (the implicit GEMM re-lays where it can); out-of-memory
    surfaces as :class:`OutOfMemoryError`."""
    return _IMPLS[algorithm](problem, x, w, runner, workspace_limit)
