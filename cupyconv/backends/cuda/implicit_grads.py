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
  the channel-transposed, flipped kernel, padded by ``d (k - 1) - p`` on each side; its
  output is ``S`` exactly.  (Strided or non-constant-mode adjoints are not convolutions
  of ``dy``: those stay on the column buffer, :mod:`.gradients`.)

One launch per group for the weight gradient (its batch differs per group), one launch
for the input gradient.  No split-K yet: the weight gradient's reduction runs over all
``N * prod(O)`` positions inside each CTA, so its grid is only
``ceil(C/G * taps / BM) * ceil(K/G / BN)`` CTAs (the cost model counts that).
"""
from __future__ import annotations

from ..._kernels import launch
from ..._vocabulary import GRAD_INPUT, GRAD_WEIGHT
from ...core.problem import ConvProblem

__all__ = ["can_implement", "forward_problem", "run"]


def can_implement(problem):
    """``(ok, reason)`` for a gradient ``problem`` on the implicit GEMM."""
    if problem.dtype.kind == "c":
        return False, ("the implicit GEMM's gradients take real dtypes (complex gradients "
                       "use the conjugate; the column-buffer path has it)")
    if problem.op == GRAD_INPUT:
        if any(s != 1 for s in problem.stride):
            return False, ("the input gradient on the implicit GEMM needs stride 1 (a strided "
                           "adjoint is not a convolution of dy)")
        if problem.padding_mode != "constant":
            return False, ("the input gradient on the implicit GEMM needs constant padding (the "
                           f"adjoint of {problem.padding_mode!r} folds onto the edges)")
        for (before, after), k, d in zip(problem.padding, problem.kernel_shape, problem.dilation):
            if max(before, after) > d * (k - 1):
                return False, ("the input gradient on the implicit GEMM needs padding of at most "
                               "dilation * (kernel - 1) per side")
    elif problem.op != GRAD_WEIGHT:
        raise ValueError(f"not a gradient: {problem.op}")
    return launch.can_implement_implicit_gemm(forward_problem(problem))


def forward_problem(problem):
    """The forward problem the implicit GEMM runs for the gradient ``problem`` (per group
    for the weight gradient, whose ``groups`` is 1)."""
    g = problem.groups
    common = dict(dtype=problem.dtype, precision=problem.precision, layout="channels_first")
    if problem.op == GRAD_WEIGHT:
        return ConvProblem.create(
            x_shape=(problem.in_channels // g, problem.batch) + problem.in_shape,
            w_shape=(problem.out_channels // g, problem.batch) + problem.out_shape,
            stride=problem.dilation, dilation=problem.stride, padding=problem.padding,
            padding_mode=problem.padding_mode, cval=problem.cval, **common)
    pads = tuple((d * (k - 1) - b, d * (k - 1) - a) for (b, a), k, d in
                 zip(problem.padding, problem.kernel_shape, problem.dilation))
    return ConvProblem.create(
        x_shape=(problem.batch, problem.out_channels) + problem.out_shape,
        w_shape=(problem.in_channels, problem.out_channels // g) + problem.kernel_shape,
        dilation=problem.dilation, padding=pads, groups=g, flip=not problem.flip, **common)


def _swap01(a):
    return a.transpose((1, 0) + tuple(range(2, a.ndim)))


def _transposed_weights(xp, problem, w):
    """``(C, K/G, *KS)``: per group the kernel with its two channel axes swapped."""
    g = problem.groups
    kg, cg = problem.out_channels // g, problem.in_channels // g
    if g == 1:
        return _swap01(w)                                            # a view
    parts = w.reshape((g, kg, cg) + problem.kernel_shape)
    return xp.ascontiguousarray(parts.transpose((0, 2, 1) + tuple(range(3, parts.ndim)))).reshape(
        (problem.in_channels, kg) + problem.kernel_shape)


def run(problem, operands, runner, flags):
    """The gradient ``problem`` on the implicit GEMM; ``flags`` are the launcher's
    tensor-core switches (:func:`.algorithms.tensor_core_flags`)."""
    xp = runner.xp
    fwd = forward_problem(problem)
    if problem.op == GRAD_INPUT:
        dx = xp.empty(fwd.y_shape, dtype=problem.dtype)
        launch.run_implicit_gemm_fprop(runner.loader, fwd, operands.output,
                                       _transposed_weights(xp, problem, operands.filter), dx,
                                       **flags)
        return dx
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
        launch.run_implicit_gemm_fprop(runner.loader, fwd, x_g, dy_g, y, **flags)
        dw[gi * kg:(gi + 1) * kg] = _swap01(y[window])
    return dw

