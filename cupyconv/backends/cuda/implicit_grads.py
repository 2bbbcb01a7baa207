"""The gradients as forward problems of the implicit GEMM (its tensor-core tiles included).

Both gradients of a convolution are themselves convolutions, so the forward kernel
(``implicit_gemm_fprop``, with its DMMA / TF32 / float16 tiles) computes them without a
column buffer; :func:`forward_problem` derives the forward problem, :func:`run` launches
it on the role-swapped views.

- **weight gradient** (any stride, dilation, padding mode): ``dw[k, c, t] = sum over n, o
  of dy[n, k, o] * xpad[n, c, o * s + d * t]`` is, per group, a forward convolution whose
  *batch* is the group's input channels, whose *input channels* are the images, whose
  *weights* are ``dy`` (out channels ``K/G``, taps = the output positions): the input
  ``x`` transposed to ``(C/G, N, *S)``, the same padding and boundary mode, stride = the
  forward's dilation, dilation = the forward's stride.  Its output has at least ``KS``
  positions per axis (more where the forward's floor division dropped a partial step):
  the first ``KS`` are ``dw`` (reversed for a flipped, ``convolve``-style, problem).
- **input gradient** (stride 1, constant padding, padding at most the dilated kernel's
  extent ``d (k - 1)``): ``dx`` is the forward convolution of ``dy`` (channels ``K``) with
  the channel-transposed, flipped kernel, padded by ``d (k - 1) - p`` on each side
  (:mod:`cupyconv.backends.grad_forward`, shared with Winograd); its output is ``S``
  exactly, no workspace.  Every other input gradient (strides, the other
  padding modes: adjoints that are not convolutions of ``dy``) runs the column-buffer
  algorithm of :mod:`.gradients` with its GEMM ``W^T dy`` on the implicit GEMM too: per
  batch chunk a rank-1, 1-tap forward problem (``groups`` = G, ``K/G`` input channels,
  ``C/G * prod(KS)`` output channels, the chunk's output positions as its length), then
  ``col2vol`` (:func:`column_gemm`; the backend runs it); the workspace is the gemm
  algorithm's column buffer.

Both take the re-layout step of the forward pass (:func:`.relayout.relaid`): where a
multistage tile fits the role-swapped problem (the weight gradient's channels are the
batch, the input gradient's the output channels) and the cost model says it pays, the
operands are re-laid channels-last by the re-layout kernel, TF32 rounding fused.

One launch per group for the weight gradient (its batch differs per group), one launch
for the input gradient.  No split-K yet: the weight gradient's reduction runs over all
``N * prod(O)`` positions inside each CTA, so its grid is only
``ceil(C/G * taps / BM) * ceil(K/G / BN)`` CTAs (the cost model counts that).
"""
from __future__ import annotations

import math

from ..._kernels import launch
from ..._vocabulary import GRAD_INPUT, GRAD_WEIGHT
from ...core.problem import ConvProblem
from ..grad_forward import grad_input_forward, grad_input_operands
from . import relayout

__all__ = ["can_implement", "column_gemm", "column_problem", "forward_problem", "is_convolution",
           "needs_columns", "run"]


def is_convolution(problem):
    """Whether the input gradient ``problem`` is a forward convolution of ``dy`` (stride 1,
    constant padding of at most ``dilation * (kernel - 1)`` per side); else it runs the
    column-buffer algorithm with the implicit GEMM as its GEMM."""
    return (all(s == 1 for s in problem.stride) and problem.padding_mode == "constant"
            and all(max(pair) <= d * (k - 1) for pair, k, d in
                    zip(problem.padding, problem.kernel_shape, problem.dilation)))


def can_implement(problem):
    """``(ok, reason)`` for a gradient ``problem`` on the implicit GEMM."""
    if problem.dtype.kind == "c":
        return False, ("the implicit GEMM's gradients take real dtypes (complex gradients "
                       "use the conjugate; the column-buffer path has it)")
    if problem.op not in (GRAD_INPUT, GRAD_WEIGHT):
        raise ValueError(f"not a gradient: {problem.op}")
    if problem.op == GRAD_INPUT and not is_convolution(problem):
        return launch.can_implement_implicit_gemm(column_problem(problem, 1))
    return launch.can_implement_implicit_gemm(forward_problem(problem))


def needs_columns(problem):
    """Whether ``problem`` runs the column-buffer algorithm (an input gradient that is not a
    convolution of ``dy``), with its workspace."""
    return problem.op == GRAD_INPUT and not is_convolution(problem)


def _gemm_problem(problem, g, rows, inner, cols):
    """The 1-tap, rank-1 forward problem whose output ``(1, g * rows, cols)`` is the batched
    product ``a[g] @ b[g]`` of ``a`` ``(g, rows, inner)`` (the weights) and ``b``
    ``(g, inner, cols)`` (the input): ``inner`` channels per group, ``cols`` positions."""
    return ConvProblem.create(x_shape=(1, g * inner, cols), w_shape=(g * rows, inner, 1),
                              groups=g, dtype=problem.dtype, precision=problem.precision)


def column_problem(problem, count):
    """The forward problem whose output is the column buffer of ``count`` images of the
    input gradient ``problem``: ``cols[g] = W_g^T dy_g`` (:func:`.gradients.grad_input`)."""
    return _gemm_problem(problem, problem.groups, problem.gemm_k, problem.gemm_n,
                         count * math.prod(problem.out_shape))


def column_gemm(problem, runner, flags):
    """``gemm(a, b, out)`` for :func:`.gradients.grad_input` on the kernel: ``out[g] =
    a[g] @ b[g]`` with ``a`` = W^T ``(G, C/G*taps, K/G)`` and ``b`` = dy ``(G, K/G, cols)``."""
    xp = runner.xp

    def gemm(a, b, out):
        g, rows, inner = a.shape
        cols = b.shape[2]
        launch.run_implicit_gemm_fprop(
            runner.loader, _gemm_problem(problem, g, rows, inner, cols),
            xp.ascontiguousarray(b).reshape(1, g * inner, cols),
            xp.ascontiguousarray(a).reshape(g * rows, inner, 1), out.reshape(1, g * rows, cols),
            **flags)
    return gemm


def forward_problem(problem):
    """The forward problem the implicit GEMM runs for the gradient ``problem`` (per group
    for the weight gradient, whose ``groups`` is 1; the input gradient's is
    :func:`~cupyconv.backends.grad_forward.grad_input_forward`'s, shared with Winograd)."""
    if problem.op == GRAD_INPUT:
        return grad_input_forward(problem)[0]
    g = problem.groups
    return ConvProblem.create(
        x_shape=(problem.in_channels // g, problem.batch) + problem.in_shape,
        w_shape=(problem.out_channels // g, problem.batch) + problem.out_shape,
        stride=problem.dilation, dilation=problem.stride, padding=problem.padding,
        padding_mode=problem.padding_mode, cval=problem.cval, dtype=problem.dtype,
        precision=problem.precision)


def _swap01(a):
    return a.transpose((1, 0) + tuple(range(2, a.ndim)))


def run(problem, operands, runner, flags, relay_pays=None):
    """The gradient ``problem`` on the implicit GEMM, without workspace (not for the input
    gradients :func:`needs_columns` names: those run :func:`.gradients.grad_input` with
    :func:`column_gemm`); ``flags`` are the launcher's tensor-core switches
    (:func:`.algorithms.tensor_core_flags`); ``relay_pays(weights)``: whether re-laying the
    role-swapped operands for a multistage tile pays (``cost.relayout_pays`` of the
    gradient problem; default always)."""
    xp, rounds = runner.xp, relayout.rounds_here(problem)
    if problem.op == GRAD_INPUT:
        fwd, dy, wt = grad_input_operands(problem, operands.output, operands.filter, xp)
        dy, wt = relayout.relaid(fwd, dy, wt, runner, **flags, round_tf32=rounds,
                                 pays=relay_pays)
        dx = xp.empty(fwd.y_shape, dtype=problem.dtype)
        launch.run_implicit_gemm_fprop(runner.loader, fwd, dy, wt, dx, **flags)
        return dx
    fwd = forward_problem(problem)
    g = problem.groups
    kg, cg = problem.out_channels // g, problem.in_channels // g
    dw = xp.empty((problem.out_channels, cg) + problem.kernel_shape, dtype=problem.dtype)
    window = (slice(None), slice(None)) + tuple(slice(0, k) for k in problem.kernel_shape)
    if problem.flip:            # convolve-style: the taps were read reversed
        window = window[:2] + tuple(slice(k - 1, None, -1) for k in problem.kernel_shape)
    y = xp.empty(fwd.y_shape, dtype=problem.dtype)
    for gi in range(g):
        x_g = _swap01(operands.activation[:, gi * cg:(gi + 1) * cg])     # (C/G, N, *S)
        dy_g = _swap01(operands.output[:, gi * kg:(gi + 1) * kg])        # (K/G, N, *O)
        x_g, dy_g = relayout.relaid(fwd, x_g, dy_g, runner, **flags, round_tf32=rounds,
                                    pays=relay_pays)
        launch.run_implicit_gemm_fprop(runner.loader, fwd, x_g, dy_g, y, **flags)
        dw[gi * kg:(gi + 1) * kg] = _swap01(y[window])
    return dw

