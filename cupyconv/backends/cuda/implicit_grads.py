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
  extent ``d (k - 1)``): ``dx`` is the forward convolution of ``dy`` (channels ``K``)
  with the channel-transposed, flipped kernel, padded by ``d (k - 1) - p`` on each side
  (:mod:`cupyconv.backends.grad_forward`, shared with Winograd); its output is ``S``
  exactly, no column buffer (the transposed weights are its one workspace). Every other
  input gradient (strides, the other padding modes: adjoints that are not convolutions
  of ``dy``) runs the column-buffer algorithm of :mod:`.gradients` with its GEMM ``W^T
  dy`` on the implicit GEMM too: per batch chunk a rank-1, 1-tap forward problem
  (``groups`` = G, ``K/G`` input channels, ``C/G * prod(KS)`` output channels, the
  chunk's output positions as its length), then ``col2vol`` (:func:`column_program`,
  retargeted by :func:`.gradients.grad_input_program`); the workspace is the gemm
  algorithm's column buffer.

Both take the re-layout step of the forward pass (:func:`.relayout.relaid`): where a
multistage tile fits the role-swapped problem (the weight gradient's channels are the
batch, the input gradient's the output channels) and the cost model says it pays, the
operands are re-laid channels-last by the re-layout kernel, TF32 rounding fused.

One launch per group for the weight gradient (its batch differs per group), one launch
for the input gradient. Both are launch programs (:func:`grad_input_program`,
:func:`grad_weight_program`): the forward kernel's launches retargeted onto the
gradient's operands (a pointer into ``dy`` at the crop's offset, into ``x`` and ``dy``
at each group's), the transposed weights written into a workspace and each group's
window copied into ``dw`` as library steps. No split-K yet: the weight gradient's
reduction runs over all ``N * prod(O)`` positions inside each CTA, so its grid is only
``ceil(C/G * taps / BM) * ceil(K/G / BN)`` CTAs (the cost model counts that).
"""
from __future__ import annotations

import functools
import math

from ..._kernels import grad_launch, launch, program
from ..._kernels.grad_launch import fresh_like, pointer_at
from ..._kernels.program import Call, Program
from ..._vocabulary import GRAD_INPUT, GRAD_WEIGHT
from ...core.problem import ConvProblem
from ..grad_forward import grad_input_forward, transposed_weights_into

__all__ = ["can_implement", "column_program", "column_problem", "forward_problem",
           "is_convolution", "needs_columns", "run", "grad_input_program", "grad_weight_program"]


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


def column_program(problem, count, runner, flags):
    """The implicit GEMM's program of :func:`column_problem` (``count`` images) on
    contiguous operands, for :func:`.gradients.grad_input_program` to retarget: ``x`` the
    chunk's ``dy`` matrix ``(G, K/G, cols)``, ``w`` ``W^T`` ``(G, C/G*taps, K/G)``, ``y``
    the column buffer."""
    fwd = column_problem(problem, count)
    return launch.implicit_gemm_program(
        runner.loader, fwd, fresh_like(fwd.x_shape, fwd.dtype),
        fresh_like(fwd.w_shape, fwd.dtype), fresh_like(fwd.y_shape, fwd.dtype), **flags)


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


def run(problem, operands, runner, flags):
    """The gradient ``problem`` on the implicit GEMM, without a column buffer (its one
    workspace, through ``runner.workspace``, is ``W'`` for the input gradient or the
    forward output ``y`` for the weight gradient: weight-sized; not for the input
    gradients :func:`needs_columns` names: those run :func:`.gradients.grad_input` with
    the kernel as its GEMM); ``flags`` are the launcher's tensor-core switches
    (:func:`.algorithms.tensor_core_flags`).  Builds (memoised) and executes the
    gradient's program."""
    if problem.op == GRAD_INPUT:
        dy, w = operands.output, operands.filter
        prog = grad_input_program(problem, dy, w, runner, flags)
        bound = dict(dy=dy, w=w)
    else:
        x, dy = operands.activation, operands.output
        prog = grad_weight_program(problem, x, dy, runner, flags)
        bound = dict(x=x, dy=dy)
    return program.execute(prog, runner.xp, bound, workspace=runner.workspace)[prog.result]


def grad_input_program(problem, dy, w, runner, flags):
    """The input gradient's program: ``W'`` (:func:`transposed_weights_into`) into a
    workspace, then the forward kernel on ``dy`` cropped (a pointer into ``dy``) into
    ``dx``."""
    launch.check_dtype(problem, dy=dy, w=w)
    fwd, window = grad_input_forward(problem)
    crop = dy[(slice(None), slice(None)) + window]
    part = launch.implicit_gemm_program(runner.loader, fwd, crop,
                                        fresh_like(fwd.w_shape, fwd.dtype), **flags)
    offset = grad_launch.byte_offset(crop, dy)

    def build():
        return Program("grad_input implicit_gemm", ("dy", "w"), (
            ("dx", tuple(fwd.y_shape), problem.dtype), ("wt", tuple(fwd.w_shape), problem.dtype)),
            (Call(functools.partial(transposed_weights_into, problem), ("w", "wt")),)
            + grad_launch.retarget(part.launches, {"x": pointer_at("dy", offset), "w": "wt",
                                                   "y": "dx"}), "dx")
    return grad_launch.composed(("dgrad", problem, offset), (part,), build)


def grad_weight_program(problem, x, dy, runner, flags):
    """The weight gradient's program: per group the forward kernel on that group of ``x``
    and ``dy`` (pointers at the group's offsets, first two axes swapped) into a workspace
    ``y``, whose first ``KS`` positions (reversed for a flipped problem) are copied into
    the group's rows of ``dw``."""
    launch.check_dtype(problem, x=x, dy=dy)
    fwd = forward_problem(problem)
    g = problem.groups
    kg, cg = problem.out_channels // g, problem.in_channels // g
    parts, offsets = [], []
    for gi in range(g):
        x_g = _swap01(x[:, gi * cg:(gi + 1) * cg])     # (C/G, N, *S)
        dy_g = _swap01(dy[:, gi * kg:(gi + 1) * kg])   # (K/G, N, *O)
        parts.append(launch.implicit_gemm_program(runner.loader, fwd, x_g, dy_g, **flags))
        offsets.append((grad_launch.byte_offset(x_g, x), grad_launch.byte_offset(dy_g, dy)))

    def build():
        steps = []
        for gi, (part, (ox, ody)) in enumerate(zip(parts, offsets)):
            steps += grad_launch.retarget(part.launches, {"x": pointer_at("x", ox),
                                                          "w": pointer_at("dy", ody)})
            steps.append(Call(functools.partial(_window_into, problem, gi), ("y", "dw")))
        return Program("grad_weight implicit_gemm", ("x", "dy"), (
            ("dw", tuple(problem.w_shape), problem.dtype),
            ("y", tuple(fwd.y_shape), problem.dtype)), tuple(steps), "dw")
    return grad_launch.composed(("wgrad", problem, tuple(offsets)), parts, build)


def _window_into(problem, gi, y, dw):
    """``dw``'s rows of group ``gi`` = the first ``KS`` positions of the forward output
    ``y`` (reversed for a convolve-style, flipped, problem), first two axes swapped."""
    kg = problem.out_channels // problem.groups
    window = (slice(None), slice(None)) + tuple(slice(0, k) for k in problem.kernel_shape)
    if problem.flip:            # convolve-style: the taps were read reversed
        window = window[:2] + tuple(slice(k - 1, None, -1) for k in problem.kernel_shape)
    dw[gi * kg:(gi + 1) * kg] = _swap01(y[window])


def _swap01(a):
    return a.transpose((1, 0) + tuple(range(2, a.ndim)))
