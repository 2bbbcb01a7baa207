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

Both are launch programs (:mod:`cupyconv._kernels.program`), memoised per problem,
``dy``/``x`` strides, chunk and runner: the weights as one contiguous matrix (a library
step), then per chunk the GEMM (cuBLAS, or the implicit GEMM kernel on the chunk's ``dy``
matrix) and the col2vol launch, or the vol2col launch and the GEMM summed into ``dw``.
A compiled call replays them; an out-of-memory that halved the chunk is not kept.
"""
from __future__ import annotations

import functools
import math

from ..._kernels import grad_launch, launch, program, splitk_launch
from ..._kernels.program import Call, Program
from ..._lru import memoized
from ..base import OutOfMemoryError
from .algorithms import gemm_batch_chunk
from . import implicit_grads

__all__ = ["grad_input", "grad_weight", "grad_input_program", "grad_weight_program",
           "clear_program_cache"]


def _chunked(problem, runner, workspace_limit, build, bound):
    """Execute ``build(images_per_chunk)`` on ``bound``; an out-of-memory of its column
    buffer halves the chunk (after freeing the pool's cached blocks) down to one image.
    Returns the result."""
    nb = gemm_batch_chunk(problem, workspace_limit)
    if nb < 1:
        raise OutOfMemoryError(
            f"the gradient needs {problem.column_bytes(1)} bytes of columns per image; "
            f"workspace_limit is {workspace_limit} bytes")
    while True:
        prog = build(nb)
        try:
            return program.execute(prog, runner.xp, dict(bound),
                                   workspace=runner.workspace)[prog.result]
        except OutOfMemoryError:
            if nb == 1:
                raise
            program.refuse("the column buffer was halved after an out-of-memory",
                           transient=True)
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


def _columns(problem, col, count):
    """The first ``count`` images' columns of ``col`` as ``(G, C/G*taps, count*prod(O))``."""
    g, kdim = problem.groups, problem.gemm_k
    size = g * kdim * count * math.prod(problem.out_shape)
    return col[:size].reshape(g, kdim, size // (g * kdim))


def _weights_t(xp, problem, contiguous, w):
    """``W^H`` per group, ``(G, C/G*taps, K/G)``: a transposed view of the contiguous
    weight matrix (``contiguous``: a contiguous copy, as the implicit GEMM reads it)."""
    wmat = xp.ascontiguousarray(w).reshape(problem.groups, problem.gemm_n, problem.gemm_k)
    if problem.conjugate and wmat.dtype.kind == "c":
        wmat = xp.conj(wmat)
    wt = wmat.transpose(0, 2, 1)
    return xp.ascontiguousarray(wt) if contiguous else wt


def _dgrad_gemm(xp, matmul, problem, n0, count, wt, dy, col):
    """``cols = W^H dy`` of one chunk on ``matmul`` (cuBLAS on CuPy)."""
    matmul(wt, _dy_matrix(xp, problem, dy, n0, count), out=_columns(problem, col, count),
           precision=problem.precision)


def grad_input(problem, dy, w, runner, workspace_limit, flags=None):
    """``dx`` ``(N, C, *S)`` = ``col2vol(W^H dy)``; ``flags`` (the implicit GEMM's
    tensor-core switches, :func:`.implicit_choice.tensor_core_flags`): the batched product on
    the implicit GEMM kernel, else ``runner.matmul`` (cuBLAS on CuPy)."""
    dys = launch.operand_strides(problem, dy, "y")
    return _chunked(problem, runner, workspace_limit,
                    lambda nb: grad_input_program(problem, dys, runner, nb, flags),
                    dict(dy=dy, w=w))


def grad_input_program(problem, dys, runner, nb, flags=None):
    """The :class:`~cupyconv._kernels.program.Program` of :func:`grad_input` for a ``dy``
    with strides ``dys`` and ``nb`` images per chunk (memoised)."""
    if flags is None:
        return _dgrad_build(problem, dys, nb, runner)
    parts = tuple(implicit_grads.column_program(problem, count, runner, flags)
                  for _, count in _chunks(problem, nb))
    return grad_launch.composed(("dgrad columns", problem, dys, nb, runner), parts,
                                lambda: _dgrad_compose(problem, dys, nb, runner, parts))


@memoized()
def _dgrad_build(problem, dys, nb, runner):
    xp = runner.xp
    steps = [Call(functools.partial(_weights_t, xp, problem, False), ("w",), "wt")]
    for n0, count in _chunks(problem, nb):
        steps.append(Call(functools.partial(_dgrad_gemm, xp, runner.matmul, problem, n0, count),
                          ("wt", "dy", "col")))
        steps += _col2vol(runner, problem, n0, count)
    return _dgrad_program(problem, nb, steps)


def _dgrad_compose(problem, dys, nb, runner, parts):
    """The input gradient's program with the implicit GEMM as the chunks' GEMM: the
    weights transposed into a workspace, per chunk ``dy``'s matrix (a copy), the kernel's
    launches into the column buffer (``parts``: :func:`.implicit_grads.column_program`),
    col2vol."""
    xp = runner.xp
    steps = [Call(functools.partial(_weights_t, xp, problem, True), ("w",), "wt")]
    for (n0, count), part in zip(_chunks(problem, nb), parts):
        steps.append(Call(functools.partial(_dy_matrix, xp, problem, n0=n0, count=count),
                          ("dy",), "dym"))
        steps += grad_launch.retarget(part.launches, {"x": "dym", "w": "wt", "y": "col"})
        steps += _col2vol(runner, problem, n0, count)
    return _dgrad_program(problem, nb, steps)


def _col2vol(runner, problem, n0, count):
    step = launch.col2vol_step(runner.loader, problem, _dx_strides(problem), n0, count,
                               ("col", "dx"))
    return [] if step is None else [step]


def _dx_strides(problem):
    """:func:`~cupyconv._kernels.launch.operand_strides` of the contiguous ``dx``."""
    return launch.operand_strides(problem, grad_launch.fresh_like(problem.x_shape,
                                                                  problem.dtype), "x")


def _dgrad_program(problem, nb, steps):
    return Program("grad_input columns", ("dy", "w"), (
        ("dx", tuple(problem.x_shape), problem.dtype),
        ("col", (problem.groups * problem.gemm_k * nb * math.prod(problem.out_shape),),
         problem.dtype)), tuple(steps), "dx")


def _wgrad_gemm(xp, matmul, problem, n0, count, dy, col, dw):
    """``dw (+)= dy . cols^H`` of one chunk (the first chunk writes, the others add, in
    batch order)."""
    cols = _columns(problem, col, count)
    if problem.conjugate and cols.dtype.kind == "c":
        cols = xp.conj(cols)
    part = matmul(_dy_matrix(xp, problem, dy, n0, count), cols.transpose(0, 2, 1),
                  precision=problem.precision)
    view = dw.reshape(part.shape)
    if n0 == 0:
        view[...] = part
    else:
        view += part


def grad_weight(problem, x, dy, runner, workspace_limit):
    """``dw`` ``(K, C/G, *KS)`` = sum over batch chunks of ``dy . vol2col(x)^H``."""
    launch.check_dtype(problem, x=x)
    launch.check_addressable(x=x)
    xs = launch.operand_strides(problem, x, "x")
    return _chunked(problem, runner, workspace_limit,
                    lambda nb: grad_weight_program(problem, xs, runner, nb),
                    dict(x=x, dy=dy))


@memoized()
def grad_weight_program(problem, xs, runner, nb):
    """The :class:`~cupyconv._kernels.program.Program` of :func:`grad_weight` for an ``x``
    with strides ``xs`` and ``nb`` images per chunk (memoised)."""
    xp = runner.xp
    steps = []
    for n0, count in _chunks(problem, nb):
        step = launch.vol2col_step(runner.loader, problem, xs, n0, count, ("x", "col"))
        if step is not None:
            steps.append(step)
        steps.append(Call(functools.partial(_wgrad_gemm, xp, runner.matmul, problem, n0, count),
                          ("dy", "col", "dw")))
    return Program("grad_weight columns", ("x", "dy"), (
        ("dw", tuple(problem.w_shape), problem.dtype),
        ("col", (problem.groups * problem.gemm_k * nb * math.prod(problem.out_shape),),
         problem.dtype)), tuple(steps), "dw")


def clear_program_cache():
    """Forget the memoised gradient programs (they hold the runners' kernels)."""
    _dgrad_build.cache_clear()
    grad_weight_program.cache_clear()
    grad_launch.clear_program_cache()
    splitk_launch.clear_program_cache()      # the split-K weight gradient's reduction
