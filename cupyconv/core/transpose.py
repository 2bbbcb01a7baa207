"""Gradients as forward problems: the transposition of a convolution, in one place.

Both gradients of a convolution (and ``conv_transpose``, the input gradient without the
conjugation) are themselves convolutions.  :func:`transpose` turns a gradient problem
into a :class:`Transposed`: the forward problem that computes it, which array it reads
as its input and which as its weights, and which part of its output is the result.
Every algorithm that computes a gradient with its forward machinery (the FFT, Winograd,
the NumPy GEMM, the implicit GEMM) takes that forward problem from here, and the array
helpers below apply the operand map (JAX's ``_conv_general_dilated_transpose_lhs/rhs``).

**Input gradient** ``dx = A^H dy``: the forward problem reads ``dy`` upsampled by the
stride (``s - 1`` zeros between samples, :func:`upsampled`) as its input and the weights
with their channels swapped per group, ``W'[g, c, k] = W[g, k, c]`` (conjugated for the
complex adjoint, :func:`transposed_weights`), as its weights; its orientation is the
problem's reversed (``flip`` toggled: the taps run backwards), its dilation the
problem's, its stride 1.  Per axis, with ``span = d (k - 1)``, ``P`` the padded input
extent and ``U = (O - 1) s + 1`` the upsampled ``dy``'s:

- *whole* (any padding mode): padding ``(span, P - U)``; the output covers the padded
  input, which the padding mode's adjoint folds back onto ``x`` (``fold``);
- *exact* (constant padding): padding ``(span - pb, P - U - pa)``; the output is ``x``'s
  extent exactly.  A negative padding crops the upsampled ``dy`` instead (``window``):
  outputs that read only padding contribute nothing.

**Weight gradient** ``dw[k, c, t] = sum over n, o of dy[n, k, o] xpad[n, c, o s + t d]``:
a forward problem whose *batch* is a group's input channels, whose *input channels* are
the images, whose *weights* are ``dy`` (the output positions as taps), with stride and
dilation swapped and the problem's padding and boundary mode.  Its first ``KS``
positions per axis (reversed for a flipped problem, ``result``), first two axes swapped,
are ``dw``.

- *whole*: one grouped forward over ``x`` regrouped ``(C/G, G N, *S)``
  (:func:`regrouped_input`, conjugated for the complex adjoint) and ``dy``
  ``(K, N, *O)``; it computes the positions past ``KS`` too;
- *per group* (``per_group``): one forward per group (``groups`` 1) on the group's views
  (:func:`group_views`), its input cut to what the first ``KS`` outputs read
  (``window``); with ``splits`` > 1 the images fall into ``splits`` equal groups of the
  same forward problem (split-K: its weights are the group's ``dy`` in split order).

:func:`column_forward` is the column-buffer algorithm's GEMM ``W^T dy`` of an input
gradient as a 1-tap forward problem.  :func:`conv_transpose_geometry` is the convolution
that ``conv_transpose`` transposes (its input gradient, without the conjugation).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Tuple

from .._lru import cached
from .._vocabulary import FORWARD, GRAD_INPUT, GRAD_WEIGHT
from . import args
from .problem import ConvProblem, layout_shape

__all__ = ["Transposed", "transpose", "checked_splits", "column_forward",
           "conv_transpose_geometry", "forward_operands", "upsampled", "transposed_weights",
           "transposed_weights_into", "regrouped_input", "group_views", "split_images",
           "weights_window"]

#: Transposed problems kept (each call of a gradient asks several times).
TRANSPOSED_PROBLEMS = 256


@dataclasses.dataclass(frozen=True)
class Transposed:
    """A gradient problem as a forward problem (module docstring).

    Attributes
    ----------
    forward : ConvProblem
        The forward problem that computes the gradient (one group's where ``per_group``).
    x, w : str
        The roles (:data:`~cupyconv.core.problem.ROLES` names) of the arrays the forward
        problem reads as its input and as its weights.
    upsample : tuple of int
        Per spatial axis, the step at which ``x``'s samples are placed (zeros between).
    window : tuple of slice
        Per spatial axis, the part of the (upsampled, regrouped) input the forward reads.
    result : tuple of slice
        Per spatial axis, the part of the forward output that is the gradient (reversed
        steps for a flipped weight gradient).
    fold : bool
        The forward output covers the padded input: the padding mode's adjoint folds it
        back onto ``x`` (input gradient, *whole*).
    conjugate : bool
        The transposed operand is conjugated (the complex adjoint).
    per_group : bool
        ``forward`` is one group's problem, run once per group.
    splits : int
        The images split into that many groups of ``forward`` (weight gradient, split-K).
    """

    forward: ConvProblem
    x: str
    w: str
    upsample: Tuple[int, ...]
    window: Tuple[slice, ...]
    result: Tuple[slice, ...]
    fold: bool = False
    conjugate: bool = False
    per_group: bool = False
    splits: int = 1


@cached(maxsize=TRANSPOSED_PROBLEMS)
def transpose(problem, whole=False, splits=1):
    """The :class:`Transposed` of ``problem`` (memoised on the arguments as passed:
    ``transpose(p)`` and ``transpose(p, splits=1)`` are two entries, so the callers of one
    path pass ``splits`` alike; the implicit GEMM's always by keyword).

    ``whole``: the forward problem over the whole padded input (input gradient, any
    padding mode, folded back) or the whole input of all groups at once (weight
    gradient, the positions past ``KS`` computed too), the shape the FFT transforms;
    else the least forward problem: the input gradient's output exactly ``x``'s extent
    (constant padding only), the weight gradient per group with its input cut and its
    images in ``splits`` groups.  A ``forward`` problem is its own transposition.
    """
    if problem.op == GRAD_INPUT:
        return _grad_input(problem, whole)
    if problem.op == GRAD_WEIGHT:
        return _grad_weight_whole(problem) if whole else _grad_weight(problem, splits)
    if problem.op != FORWARD:
        raise ValueError(f"not an operation: {problem.op!r}")
    everything = (slice(None),) * problem.ndim
    return Transposed(problem, "activation", "filter", (1,) * problem.ndim, everything,
                      everything)


def _adjoint(problem):
    return problem.conjugate and problem.is_complex


def _grad_input(problem, whole):
    if not whole and problem.padding_mode != "constant":
        raise ValueError("the exact input gradient as a forward problem takes constant "
                         f"padding; got padding_mode={problem.padding_mode!r}")
    window, pads = [], []
    for k, d, s, (pb, pa), o, n in zip(problem.kernel_shape, problem.dilation,
                                       problem.stride, problem.padding, problem.out_shape,
                                       problem.padded_shape()):
        span, up = d * (k - 1), (o - 1) * s + 1
        lo, hi = (span, n - up) if whole else (span - pb, n - up - pa)
        window.append(slice(max(-lo, 0), up - max(-hi, 0)))
        pads.append((max(lo, 0), max(hi, 0)))
    g = problem.groups
    fwd = _forward_problem(
        problem, (problem.batch, problem.out_channels) + tuple([w.stop - w.start for w in window]),
        (problem.in_channels, problem.out_channels // g) + problem.kernel_shape,
        stride=(1,) * problem.ndim, padding=tuple(pads), dilation=problem.dilation, groups=g,
        flip=not problem.flip, padding_mode="constant", cval=0)
    target = problem.padded_shape() if whole else problem.in_shape
    if fwd.out_shape != target:
        raise RuntimeError(  # a programming error in this function, not user input
            f"input gradient as a forward problem: output {fwd.out_shape} != {target}")
    return Transposed(fwd, "output", "filter", problem.stride, tuple(window),
                      (slice(None),) * problem.ndim, fold=whole, conjugate=_adjoint(problem))


def _result_window(problem):
    """The first ``KS`` positions per axis, reversed for a flipped (``convolve``) problem."""
    if problem.flip:
        return tuple([slice(k - 1, None, -1) for k in problem.kernel_shape])
    return tuple([slice(0, k) for k in problem.kernel_shape])


def _grad_weight_whole(problem):
    g = problem.groups
    fwd = ConvProblem.create(
        x_shape=(problem.in_channels // g, g * problem.batch) + problem.in_shape,
        w_shape=(problem.out_channels, problem.batch) + problem.out_shape,
        stride=problem.dilation, dilation=problem.stride, padding=problem.padding,
        padding_mode=problem.padding_mode, cval=problem.cval, groups=g,
        dtype=problem.dtype, precision=problem.precision)
    return Transposed(fwd, "activation", "output", (1,) * problem.ndim,
                      (slice(None),) * problem.ndim, _result_window(problem),
                      conjugate=_adjoint(problem))


def _grad_weight(problem, splits):
    g, splits = problem.groups, checked_splits(problem, splits)
    in_shape, padding = _weight_input(problem)
    kg = problem.out_channels // g
    fwd = _forward_problem(
        problem, (problem.in_channels // g, problem.batch) + in_shape,
        (splits * kg, problem.batch // splits) + problem.out_shape,
        stride=problem.dilation, dilation=problem.stride, padding=padding,
        padding_mode=problem.padding_mode, cval=problem.cval, groups=splits, flip=False)
    return Transposed(fwd, "activation", "output", (1,) * problem.ndim,
                      tuple([slice(0, n) for n in in_shape]), _result_window(problem),
                      conjugate=_adjoint(problem), per_group=True, splits=splits)


def _forward_problem(problem, x_shape, w_shape, **geometry):
    """The channels-first forward :class:`ConvProblem` of ``x_shape``, ``w_shape`` and the
    normalised ``geometry`` (stride, dilation, padding pairs, groups, padding mode, cval,
    flip) derived from the valid ``problem``: built directly, without
    :meth:`ConvProblem.create`'s re-validation, its output extent per axis that of the
    padded input.  Where an extent is empty (an empty ``problem``, or an input gradient
    whose window is empty) it goes through :meth:`ConvProblem.create`, which rejects
    what is not a convolution."""
    out = args.output_shape(x_shape[2:], w_shape[2:], geometry["padding"],
                            geometry["stride"], geometry["dilation"])
    if problem.is_empty or min(x_shape[2:] + out) < 1:
        return ConvProblem.create(x_shape=x_shape, w_shape=w_shape, dtype=problem.dtype,
                                  precision=problem.precision, **geometry)
    return dataclasses.replace(
        problem, batch=x_shape[0], in_channels=x_shape[1], out_channels=w_shape[0],
        in_shape=x_shape[2:], kernel_shape=w_shape[2:], out_shape=out, layout="channels_first",
        op=FORWARD, conjugate=True, **geometry)


def checked_splits(problem, splits):
    """``splits`` as an int: a divisor of the batch (the split-K of the weight gradient
    splits the images into equal parts)."""
    splits = int(splits)
    if splits < 1 or problem.batch % splits:
        raise ValueError(f"the weight gradient's split-K takes a divisor of the batch "
                         f"({problem.batch}); got {splits}")
    return splits


def _weight_input(problem):
    """``(spatial shape, padding)`` of the per-group weight gradient's forward input: per
    axis, the padded extent its first ``KS`` outputs read, ``(KS - 1) * dilation +
    stride * (O - 1) + 1``.  The right padding is cut to it; where it ends inside the
    input, the input is cut too (a view of its first positions), unless the left padding
    of the boundary mode reads beyond the cut (``wrap`` reads the axis' end; ``reflect``
    and ``symmetric`` need the positions they mirror)."""
    if problem.is_empty:
        return problem.in_shape, problem.padding
    shape, padding = [], []
    for n, (lo, hi), k, s, d, o in zip(problem.in_shape, problem.padding,
                                        problem.kernel_shape, problem.stride,
                                        problem.dilation, problem.out_shape):
        need = (k - 1) * d + s * (o - 1) + 1
        if need > lo + n:                        # the input whole, part of the right pad
            shape.append(n)
            padding.append((lo, need - lo - n))
            continue
        keep = max(need - lo, 1)
        shape.append(keep if _boundary_kept(problem.padding_mode, lo, keep) else n)
        padding.append((lo, 0))
    return tuple(shape), tuple(padding)


def _boundary_kept(mode, lo, keep):
    """Whether ``lo`` positions of left padding in ``mode`` read only the first ``keep``
    positions of the input (so the input may be cut to them)."""
    if lo == 0 or mode in ("constant", "edge"):
        return True
    return (mode == "symmetric" and keep >= lo) or (mode == "reflect" and keep > lo)


def column_forward(problem, count):
    """The 1-tap, rank-1 forward problem whose output ``(1, G * C/G * taps, cols)`` is the
    column buffer of ``count`` images of the input gradient ``problem``: per group the
    product ``W_g^T dy_g`` of ``W^T`` ``(G, C/G * taps, K/G)`` (its weights) and ``dy``'s
    matrix ``(G, K/G, cols)`` (its input), ``cols = count * prod(O)`` positions."""
    g = problem.groups
    return ConvProblem.create(
        x_shape=(1, g * problem.gemm_n, count * math.prod(problem.out_shape)),
        w_shape=(g * problem.gemm_k, problem.gemm_n, 1), groups=g, dtype=problem.dtype,
        precision=problem.precision)


def conv_transpose_geometry(x_shape, w_shape, stride, padding, output_padding, dilation,
                            groups, layout):
    """``(input_shape, geometry)`` of ``conv_transpose`` (PyTorch's ``ConvTransposeNd``)
    of ``x`` ``(N, C_in, *S)`` with ``w`` ``(C_in, C_out/G, *KS)`` (``layout`` order,
    normalised): the shape of its output, the input of the convolution it transposes,
    per axis ``(S - 1) stride - pb - pa + dilation (KS - 1) + output_padding + 1``, and
    that convolution's ``stride``, ``padding`` (pairs), ``dilation`` and ``groups``.

    Raises
    ------
    ValueError
        Naming the argument and the axis for every inconsistency.
    """
    if len(x_shape) != len(w_shape) or len(x_shape) < 3:
        raise ValueError(
            f"x must be (N, C_in, *spatial) and w (C_in, C_out/groups, *kernel) of the same "
            f"rank >= 3; got x.ndim={len(x_shape)}, w.ndim={len(w_shape)}")
    r = len(x_shape) - 2
    stride = args.normalize_per_axis(stride, r, "stride")
    dilation = args.normalize_per_axis(dilation, r, "dilation")
    cl = layout == "channels_last"
    n, c_in, s = x_shape[0], x_shape[-1 if cl else 1], x_shape[1:-1] if cl else x_shape[2:]
    wc, cog, ks = w_shape[0], w_shape[-1 if cl else 1], w_shape[1:-1] if cl else w_shape[2:]
    if wc != c_in:
        raise ValueError(f"w has {wc} input channels (axis 0) but x has C_in={c_in}")
    pads, out_pad = args.normalize_transpose_padding(padding, output_padding, s, ks, stride,
                                                     dilation)
    out = []
    for i in range(r):
        if out_pad[i] >= max(stride[i], dilation[i]):
            raise ValueError(
                f"output_padding must be smaller than either stride or dilation; got "
                f"output_padding[{i}]={out_pad[i]}, stride[{i}]={stride[i]}, "
                f"dilation[{i}]={dilation[i]}")
        o = ((s[i] - 1) * stride[i] - sum(pads[i]) + dilation[i] * (ks[i] - 1)
             + out_pad[i] + 1)
        if o < 1:
            raise ValueError(f"empty output on spatial axis {i}: size {o} from input size "
                             f"{s[i]}, padding {pads[i]} and kernel {ks[i]}")
        out.append(o)
    groups = args.as_int(groups, "groups", minimum=1)
    if c_in % groups:
        raise ValueError(f"x has C_in={c_in} channels, not divisible by groups={groups}")
    input_shape = layout_shape(layout, n, cog * groups, out)
    return input_shape, dict(stride=stride, padding=pads, dilation=dilation, groups=groups)


# ------------------------------------------------------------ the operand map on arrays
def forward_operands(t, problem, operands, xp):
    """``(x, w)``: the arrays the forward problem of ``t`` reads, from the gradient
    ``problem``'s :class:`~cupyconv.core.roles.Operands` (roles ``t.x`` and ``t.w``; views
    where no upsampling or conjugation copies).  A ``per_group`` transposition reads each
    group's views instead (:func:`group_views`)."""
    if t.per_group:
        raise ValueError("a per-group transposition reads group_views(), one group at a time")
    x, w = operands.get(t.x), operands.get(t.w)
    if problem.op == GRAD_INPUT:
        return upsampled(t, x, xp), transposed_weights(t, problem, w, xp)
    if problem.op == GRAD_WEIGHT:
        return regrouped_input(t, problem, x, xp), w.swapaxes(0, 1)
    return x, w


def upsampled(t, a, xp):
    """The input gradient's ``dy`` ``a`` as :attr:`Transposed.forward` reads it: ``s - 1``
    zeros between samples (a new array where any stride is above 1), cut to the window
    (a view)."""
    if any(s > 1 for s in t.upsample):
        up = xp.zeros(a.shape[:2] + tuple((o - 1) * s + 1 for o, s in
                                          zip(a.shape[2:], t.upsample)), dtype=a.dtype)
        up[(Ellipsis,) + tuple(slice(None, None, s) for s in t.upsample)] = a
        a = up
    return a[(slice(None), slice(None)) + t.window]


def _swapped(problem, w):
    """``w`` ``(K, C/G, *KS)`` as ``(G, C/G, K/G, *KS)`` (a view)."""
    g = problem.groups
    kg, cg = problem.out_channels // g, problem.in_channels // g
    return w.reshape((g, kg, cg) + problem.kernel_shape).swapaxes(1, 2)


def transposed_weights(t, problem, w, xp):
    """The input gradient's weights ``W'[g*C/G + c, k] = W[g*K/G + k, c]`` (conjugated for
    the complex adjoint) in the forward problem's ``w_shape``."""
    wt = _swapped(problem, w).reshape(t.forward.w_shape)
    return xp.conj(wt) if t.conjugate else wt


def transposed_weights_into(problem, w, out):
    """Write :func:`transposed_weights` into ``out`` (C-contiguous, the forward problem's
    ``w_shape``): the step of a launch program (no allocation)."""
    view = out.reshape((problem.groups, problem.in_channels // problem.groups,
                        problem.out_channels // problem.groups) + problem.kernel_shape)
    view[...] = _swapped(problem, w)
    if problem.conjugate and out.dtype.kind == "c":
        out.imag *= -1
    return out


def regrouped_input(t, problem, x, xp):
    """The weight gradient's ``x`` ``(N, C, *S)`` as the whole forward problem's input
    ``(C/G, G N, *S)`` (conjugated for the complex adjoint)."""
    g, n = problem.groups, problem.batch
    cg = problem.in_channels // g
    xt = x.reshape((n, g, cg) + problem.in_shape).transpose(
        (2, 1, 0) + tuple(range(3, 3 + problem.ndim)))
    xt = xt.reshape(t.forward.x_shape)
    return xp.conj(xt) if t.conjugate else xt


def group_views(t, problem, x, dy):
    """Per group ``(x_g, dy_g)``: the per-group weight gradient's forward operands, views
    of ``x`` ``(C/G, N, *S')`` (cut to the window) and ``dy`` ``(K/G, N, *O)``."""
    g = problem.groups
    kg, cg = problem.out_channels // g, problem.in_channels // g
    return [(x[(slice(None), slice(gi * cg, (gi + 1) * cg)) + t.window].swapaxes(0, 1),
             dy[:, gi * kg:(gi + 1) * kg].swapaxes(0, 1)) for gi in range(g)]


def split_images(t, dy_g):
    """One group's ``dy_g`` ``(K/G, N, *O)`` (:func:`group_views`) as the split-K forward
    problem's weights: ``(splits, K/G, N/splits, *O)``, part ``s`` the images
    ``s N/splits ...`` (a view; C-contiguous, it is the ``(splits K/G, N/splits, *O)``
    weights, whose output is the ``splits`` partial products side by side)."""
    kg, n = dy_g.shape[:2]
    return dy_g.reshape((kg, t.splits, n // t.splits) + dy_g.shape[2:]).swapaxes(0, 1)


def weights_window(t, y):
    """The weight gradient (or one group's rows of it) in the forward output ``y``: its
    result window with the first two axes swapped (a view)."""
    return y[(slice(None), slice(None)) + t.result].swapaxes(0, 1)
