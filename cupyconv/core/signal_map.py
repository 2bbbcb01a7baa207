"""How a SciPy-style ``convolve``/``correlate`` call becomes one :class:`ConvProblem`.

The mapping depends on shapes, dtypes, mode and axes only, so it is computed
once per call signature (:func:`signal_call`, a bounded LRU) and applied to
the arrays of each call (:meth:`SignalCall.operands`, :meth:`SignalCall.finish`):

- the non-convolved (``axes``) dimensions broadcast and become the batch
  (one shared kernel) or the groups (one kernel per batch element);
- the mode becomes padding (``full``: ``K-1`` both sides; ``same``:
  ``(K//2, (K-1)//2)``; ``valid``: none, with scipy's input swap when
  ``in2`` covers ``in1``);
- ``correlate(a, b)`` is ``convolve(a, conj(flip(b)))``, which reproduces
  scipy's results for every mode, including the swapped ``valid`` case.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional, Tuple

import numpy as np

from .._vocabulary import SIGNAL_MODES, describe_choices
from . import args
from .problem import ConvProblem, Operands
from .._lru import cached

__all__ = ["SignalCall", "signal_call", "checked_call", "check_mode"]


def check_mode(mode):
    if not isinstance(mode, str) or mode not in SIGNAL_MODES:
        raise ValueError(
            f"Acceptable mode flags are {describe_choices(SIGNAL_MODES)}, not mode={mode!r}")
    return mode


@dataclasses.dataclass(frozen=True)
class SignalCall:
    """Shape-level plan of one ``convolve``/``correlate`` signature (no data).

    ``problem`` is ``None`` for two 0-d operands (the result is their product).
    """

    #: dtype of the result (``numpy.result_type`` of the inputs).
    result_dtype: np.dtype
    #: shape of the result, in the caller's axis order.
    result_shape: Tuple[int, ...]
    #: convolved axes (sorted, non-negative).
    axes: Tuple[int, ...]
    #: correlate (flip and conjugate ``in2``) instead of convolve.
    correlate: bool
    #: scipy's ``valid``-mode swap of the operands.
    swap: bool
    #: the batch (non-convolved) extents after broadcasting.
    batch_shape: Tuple[int, ...]
    #: transpose taking the caller's axes to ``batch + convolved``.
    order: Tuple[int, ...]
    #: one kernel per batch element (groups) instead of one shared kernel.
    per_kernel: bool
    #: the problem (``None`` for 0-d operands).
    problem: Optional[ConvProblem]

    def operands(self, in1, in2, xp):
        """Logical ``(N, C, *S)``/``(K, C/G, *KS)`` views of the operands in the compute
        dtype (a narrower integer input excepted: :func:`_activation`)."""
        if self.correlate:    # flip the convolved axes only: batch axes keep their order
            in2 = xp.flip(in2, axis=self.axes)
            in2 = xp.conj(in2) if in2.dtype.kind == "c" else in2
        if self.swap:
            in1, in2 = in2, in1
        p = self.problem
        s1, s2 = p.in_shape, p.kernel_shape
        if not self.batch_shape:                         # no batch axes: plain reshapes
            return Operands(activation=_activation(in1.reshape((1, 1) + s1), p.dtype),
                            filter=in2.reshape((1, 1) + s2).astype(p.dtype, copy=False))
        nb = math.prod(self.batch_shape)
        x = xp.broadcast_to(xp.transpose(in1, self.order), self.batch_shape + s1)
        w = xp.transpose(in2, self.order)
        if self.per_kernel:
            w = xp.broadcast_to(w, self.batch_shape + s2).reshape((nb, 1) + s2)
            x = x.reshape((1, nb) + s1)
        else:
            x = x.reshape((nb, 1) + s1)
            w = (w.reshape((1, 1) + s2) if nb and w.size
                 else xp.zeros((1, 1) + s2, dtype=w.dtype))     # an empty batch
        return Operands(activation=_activation(x, p.dtype),
                        filter=w.astype(p.dtype, copy=False))

    def finish(self, y, xp):
        """``(N, K, *O)`` back to the caller's axes (dtype unchanged)."""
        res = y.reshape(self.batch_shape + self.problem.out_shape)
        if self.order == tuple(range(len(self.order))):
            return res
        return xp.transpose(res, tuple(np.argsort(self.order)))


def _activation(x, dtype):
    """``x`` in the compute ``dtype``, except integer data narrower than an integer
    ``dtype`` (int32 data with an int64 kernel): kept, so the algorithm that can read it
    directly does (the CPU's separable passes); the backends widen it for the others
    (:func:`cupyconv.backends.arrays.in_compute_dtype`)."""
    if dtype.kind == "i" and x.dtype.kind in "iu" and np.can_cast(x.dtype, dtype, "safe"):
        return x
    return x.astype(dtype, copy=False)


def checked_call(shape1, dtype1, shape2, dtype2, mode, axes, correlate,
                 padding_mode="constant", cval=0, same_after=False) -> SignalCall:
    """:func:`signal_call` of ``mode`` and ``axes`` as a caller gave them: the mode checked
    (:func:`check_mode`), then the axes normalised (:func:`args.normalize_axes`; ``None``
    for 0-d operands)."""
    check_mode(mode)
    axes = None if len(shape1) == 0 else args.normalize_axes(axes, len(shape1))
    return signal_call(shape1, dtype1, shape2, dtype2, mode, axes, correlate, padding_mode,
                       cval, same_after)


@cached(maxsize=512)
def signal_call(shape1, dtype1, shape2, dtype2, mode, axes, correlate,
                padding_mode="constant", cval=0, same_after=False) -> SignalCall:
    """The :class:`SignalCall` of one signature (validates; memoised).

    ``axes`` must already be normalised (:func:`args.normalize_axes`) or
    ``None`` for 0-d operands.  ``padding_mode``/``cval`` extend ``in1`` beyond
    its edges (``convolve2d``'s ``boundary``/``fillvalue``); SciPy's
    ``convolve`` zero-fills.  ``same_after`` puts the larger half of an even
    kernel's ``same`` padding after the input: the window ``correlate2d``
    takes (its ``same`` starts at ``K//2`` of the full result, ``correlate``'s
    at ``(K-1)//2``).
    """
    result, storage = args.result_dtypes(dtype1, dtype2)
    if len(shape1) == len(shape2) == 0:
        return SignalCall(result, (), (), correlate, False, (), (), False, None)
    if len(shape1) != len(shape2):
        raise ValueError(f"in1 and in2 should have the same dimensionality; got in1.shape="
                         f"{tuple(shape1)} and in2.shape={tuple(shape2)}")
    nd = len(shape1)
    for a in axes:
        if shape1[a] == 0 or shape2[a] == 0:
            raise ValueError(
                f"in1 and in2 must be non-empty along the convolution axes; got "
                f"in1.shape={shape1}, in2.shape={shape2} (axis {a})")
    batch_axes = tuple([a for a in range(nd) if a not in axes])
    for a in batch_axes:
        if shape1[a] != shape2[a] and 1 not in (shape1[a], shape2[a]):
            raise ValueError(
                f"incompatible shapes for in1 and in2: {shape1} and {shape2} "
                f"(axis {a} is not convolved and must match or be 1)")
    s1, s2 = [], []
    for a in axes:
        s1.append(shape1[a])
        s2.append(shape2[a])
    s1, s2 = tuple(s1), tuple(s2)
    swap = False
    if mode == "valid" and not all(a >= b for a, b in zip(s1, s2)):
        if not all(b >= a for a, b in zip(s1, s2)):
            raise ValueError(
                "For 'valid' mode, one must be at least as large as the other "
                f"in every dimension; got in1.shape={shape1}, in2.shape={shape2}")
        swap, shape1, shape2, s1, s2 = True, shape2, shape1, s2, s1   # scipy's swap
    # broadcast: a 1 takes the other extent, including 0 (an empty batch)
    batch_shape, per_kernel = [], False
    for a in batch_axes:
        batch_shape.append(shape1[a] if shape2[a] == 1 else shape2[a])
        per_kernel = per_kernel or shape2[a] != 1
    batch_shape = tuple(batch_shape)
    nb = math.prod(batch_shape)
    per_kernel = nb > 0 and per_kernel
    padding = []
    for k in s2:
        if mode == "full":
            padding.append((k - 1, k - 1))
        elif mode == "same":
            padding.append(((k - 1) // 2, k // 2) if same_after else (k // 2, (k - 1) // 2))
    padding = tuple(padding) if mode in ("full", "same") else 0
    problem = ConvProblem.create(
        x_shape=((1, nb) if per_kernel else (nb, 1)) + s1, w_shape=(
            (nb, 1) if per_kernel else (1, 1)) + s2,
        padding=padding, groups=nb if per_kernel else 1, padding_mode=padding_mode,
        cval=cval if padding_mode == "constant" else 0,
        dtype=storage, flip=True)
    order = batch_axes + tuple(axes)
    full = batch_shape + problem.out_shape
    result_shape = tuple([full[i] for i in np.argsort(order)])
    return SignalCall(result, result_shape, tuple(axes), correlate, swap, batch_shape,
                      order, per_kernel, problem)
