"""How a ``scipy.ndimage`` filter pass becomes one :class:`ConvProblem`.

Every linear filter of :mod:`cupyconv.ndimage` is, per pass, one correlation
of the input with a kernel of the same rank (``1`` on the axes it does not
filter), without flip, with the output the size of the input.  SciPy puts the
kernel's centre at ``K // 2 + origin``, so the pass is the problem with padding
``(K//2 + origin, K - 1 - K//2 - origin)`` per axis and the engine's boundary
mode of :data:`~cupyconv._vocabulary.NDIMAGE_MODES` (``reflect`` is
``symmetric``, ``mirror`` is ``reflect``, ``nearest`` is ``edge``...).

Leading axes that the kernel does not touch (extent 1) become the problem's
batch (a reshape, a view for the usual contiguous input); the others stay
spatial axes with a kernel extent of 1 and no padding, so an axis-``k``
1-D pass is a view of the input, never a transposed copy.  Only inputs of more
than :data:`~cupyconv._vocabulary.MAX_RANK` axes move every untouched axis to
the batch (a transpose).  The mapping depends on shapes, dtype, origins and
mode only and is memoised per signature (:func:`filter_call`).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Tuple

import numpy as np

from .._vocabulary import MAX_RANK, NDIMAGE_MODES, describe_choices
from .problem import ConvProblem, Operands
from .._lru import cached

__all__ = ["FilterCall", "filter_call", "engine_mode", "invalid_origin"]


def engine_mode(mode):
    """The engine's padding mode of one ``scipy.ndimage`` mode name.

    Raises ``RuntimeError`` as ``scipy.ndimage`` does (for a drop-in), naming
    the valid modes.
    """
    if not isinstance(mode, str) and np.iterable(mode):
        raise RuntimeError("A sequence of modes is not supported")
    if not isinstance(mode, str) or mode not in NDIMAGE_MODES:
        raise RuntimeError(f"boundary mode not supported: mode={mode!r}; choose "
                           f"{describe_choices(tuple(NDIMAGE_MODES))}")
    return NDIMAGE_MODES[mode]


def invalid_origin(origin, size):
    """SciPy's rule: the centre ``size // 2 + origin`` must lie inside the kernel."""
    return origin < -(size // 2) or origin > (size - 1) // 2


@dataclasses.dataclass(frozen=True)
class FilterCall:
    """Shape-level plan of one filter pass (no data)."""

    #: the input's shape (the result's too).
    shape: Tuple[int, ...]
    #: transpose taking the input's axes to ``batch + spatial`` order.
    order: Tuple[int, ...]
    #: the problem: ``(N, 1, *S)`` input, ``(1, 1, *KS)`` kernel, same-size output.
    problem: ConvProblem

    @property
    def _identity(self):
        return self.order == tuple(range(len(self.order)))

    def operands(self, x, w, xp):
        """Logical ``(N, 1, *S)``/``(1, 1, *KS)`` views of input and kernel (compute dtype)."""
        if not self._identity:
            x, w = xp.transpose(x, self.order), xp.transpose(w, self.order)
        p = self.problem
        x = x.reshape((p.batch, 1) + p.in_shape)
        w = w.reshape((1, 1) + p.kernel_shape)
        return Operands(activation=x.astype(p.dtype, copy=False),
                        filter=w.astype(p.dtype, copy=False))

    def finish(self, y, xp):
        """``(N, 1, *S)`` back to the input's shape and axis order."""
        res = y.reshape(tuple(self.shape[a] for a in self.order) if self.shape else ())
        return res if self._identity else xp.transpose(res, tuple(np.argsort(self.order)))


@cached(maxsize=512)
def filter_call(shape, kernel_shape, origins, mode, cval, dtype) -> FilterCall:
    """The :class:`FilterCall` of one pass (memoised).

    ``shape``, ``kernel_shape`` and ``origins`` have one entry per input axis
    (origins already validated, 0 where the kernel extent is 1); ``mode`` is
    an engine padding mode; ``dtype`` is the compute dtype.
    """
    nd = len(shape)
    if nd == 0:                                    # a 0-d input: one element
        call = filter_call((1,), (1,), (0,), mode, cval, dtype)
        return FilterCall((), call.order, call.problem)
    untouched = [a for a in range(nd) if kernel_shape[a] == 1]
    lead = 0
    while lead < nd - 1 and kernel_shape[lead] == 1:
        lead += 1
    if nd - lead <= MAX_RANK:
        order = tuple(range(nd))
    else:                                          # every untouched axis to the batch
        keep = [a for a in range(nd) if kernel_shape[a] != 1] or [nd - 1]
        lead = nd - len(keep)
        if len(keep) > MAX_RANK:
            raise ValueError(
                f"the kernel extends over {len(keep)} axes; at most {MAX_RANK} are "
                "supported (cupyconv.MAX_RANK)")
        order = tuple(a for a in untouched if a not in keep) + tuple(keep)
    batch = math.prod(shape[a] for a in order[:lead])
    spatial = tuple(shape[a] for a in order[lead:])
    ks = tuple(kernel_shape[a] for a in order[lead:])
    org = tuple(origins[a] for a in order[lead:])
    padding = tuple((k // 2 + o, k - 1 - k // 2 - o) for k, o in zip(ks, org))
    problem = ConvProblem.create(
        x_shape=(batch, 1) + spatial, w_shape=(1, 1) + ks, padding=padding,
        padding_mode=mode, cval=cval if mode == "constant" else 0, dtype=dtype, flip=False)
    return FilterCall(tuple(shape), order, problem)
