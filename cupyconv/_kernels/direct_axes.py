"""Fewer, better-shaped axes for the direct kernel's launches.

The direct kernel tiles the last two spatial axes (``H``, ``W``) and loops over the
others: one block per outer output position, the input tile restaged for every outer
kernel tap.  A problem whose kernel spans only some of its axes (a 1-D pass of a
separable filter, ``ndimage.correlate1d``, a kernel with unit extents) was badly shaped
for it: a pass along an outer axis restaged a whole ``H x W`` tile per tap (a 7-tap pass
read its input 7 times), a short inner plane left most of a 64 x 64 tile idle (a 40 x 40
plane: 2.56x the threads), and the last-axis pass over many short rows ran one row of
40 per 1 x 2048 tile.

:func:`reduced` re-views such a problem as an equivalent one on other axes (strides
only: the arrays are passed as they are): axes of extent 1 where the kernel has one tap
go, and adjacent axes where the kernel has one tap (stride 1, no padding: output =
input there) merge into one wherever ``x`` and ``y`` can both step through them with a
single stride; with one input and one output channel the batch is just one more such
axis with its own stride, so it joins them (channels tie it to the channel axis
otherwise).  A filter along axis ``a`` of an ``(L, S_a, T)`` volume then runs with
``H = S_a`` and ``W = T`` (for the last axis of a single-channel volume ``H = L``,
``W = S_a``): every tap's input is staged once per tile and the tiles fill.  The
boundary modes never see a merged axis (no padding there), so every padding mode is
unchanged.  The rank never grows past ``max(rank, 2)`` (the packaged kernels cover
ranks 1-4: a rank-1 pass over many rows becomes rank 2, nothing becomes a rank that was
not asked for before).
"""
from __future__ import annotations

from typing import NamedTuple, Tuple
from .._lru import cached

__all__ = ["reduced"]


class _Axis(NamedTuple):
    n_in: int
    n_out: int
    k: int
    stride: int
    dilation: int
    pad: Tuple[int, int]
    xs: int           # element strides of x, y and w along the axis
    ys: int
    ws: int

    @property
    def one_tap(self):
        return self.k == 1 and self.stride == 1 and self.pad == (0, 0)


def _merge(axes):
    """Drop one-tap axes of extent 1 and merge adjacent one-tap axes that ``x`` and ``y``
    step through with one stride each."""
    kept = [a for a in axes if not (a.one_tap and a.n_in == 1)] or [axes[-1]]
    out = [kept[0]]
    for a in kept[1:]:
        b = out[-1]
        if (a.one_tap and b.one_tap and b.xs == a.xs * a.n_in and b.ys == a.ys * a.n_out):
            out[-1] = a._replace(n_in=b.n_in * a.n_in, n_out=b.n_out * a.n_out)
        else:
            out.append(a)
    return out


@cached(maxsize=1024)
def reduced(problem, xs, ws, ys, max_rank):
    """``(problem, xs, ws, ys)`` re-viewed for the direct kernel (module docstring), or
    ``None`` when that gains nothing: a forward, channels-first problem (the batch joins
    the axes only with one input and one output channel), within ``max_rank``.  ``xs``, ``ws``, ``ys`` and the result's
    are :func:`~cupyconv._kernels.launch.operand_strides` of ``x``, ``w`` and ``y``: the
    element strides and extents the kernel addresses the arrays with (element
    ``[0, ..., 0]`` is the same in both views, so the arrays themselves are passed as
    they are).  Memoised."""
    if problem.op != "forward" or problem.layout != "channels_first":
        return None
    (xn, xc, xsp), (yn, yc, ysp), (wk, wc, wsp) = xs[0], ys[0], ws[0]
    spatial = [_Axis(*geo) for geo in zip(problem.in_shape, problem.out_shape,
                                          problem.kernel_shape, problem.stride,
                                          problem.dilation, problem.padding, xsp, ysp, wsp)]
    joins = problem.in_channels == 1 and problem.out_channels == 1 and problem.batch > 1
    if joins:       # one channel: the batch is one more one-tap axis with its own stride
        axes = _merge([_Axis(problem.batch, problem.batch, 1, 1, 1, (0, 0), xn, yn, 0)]
                      + spatial)
    else:           # channels tie the batch to them: the spatial axes alone
        axes = _merge(spatial)
    if len(axes) > max(problem.ndim, 2) or len(axes) > max_rank or axes == spatial:
        return None                               # nothing to gain: the problem as given
    n = 1 if joins else problem.batch
    p = problem.with_(ndim=len(axes), batch=n,
                      in_shape=tuple(a.n_in for a in axes),
                      kernel_shape=tuple(a.k for a in axes),
                      out_shape=tuple(a.n_out for a in axes),
                      stride=tuple(a.stride for a in axes),
                      dilation=tuple(a.dilation if a.k > 1 else 1 for a in axes),
                      padding=tuple(a.pad for a in axes))
    if joins:
        xn = yn = 0
    cg = problem.in_channels // problem.groups
    return (p, ((xn, xc, tuple(a.xs for a in axes)), (n, problem.in_channels, p.in_shape)),
            ((wk, wc, tuple(a.ws for a in axes)), (problem.out_channels, cg, p.kernel_shape)),
            ((yn, yc, tuple(a.ys for a in axes)), (n, problem.out_channels, p.out_shape)))
