"""Deep-learning ``conv`` on Dask arrays (batch and spatial chunking)."""
from __future__ import annotations

import math
from typing import Any, Optional

from ..core import args as arguments
from ..api.conv import conv as conv_in_memory, prepare_conv
from . import _blocks
from .._typing import ArrayLike, IntOrSeq, Padding, Scalar

__all__ = ["conv"]


def _conv_block(block, *, w, bias, stride, dilation, groups, layout, method,
                workspace_limit, result, block_id=None):
    """``cupyconv.conv`` of one padded, extended block (``padding=0``)."""
    y = _blocks.guard_memory(conv_in_memory, block, block_id, "cupyconv.conv", w, bias,
                             stride=stride, dilation=dilation, groups=groups, layout=layout,
                             method=method, workspace_limit=workspace_limit)
    return arguments.cast_result(y, result)


def conv(x: ArrayLike, w: ArrayLike, bias: Optional[ArrayLike] = None, *, stride: IntOrSeq = 1,
         padding: Padding = 0, dilation: IntOrSeq = 1, groups: int = 1,
         padding_mode: str = "constant", cval: Scalar = 0, layout: str = "channels_first",
         method: str = "auto", workspace_limit: Optional[int] = None) -> Any:
    """Batched multi-channel N-D convolution of a Dask array (no flip).

    Lazy counterpart of :func:`cupyconv.conv`: the values, dtype and errors
    are those of the in-memory function on the whole array.

    Parameters
    ----------
    x : dask.array.Array
        Input ``(N, C_in, *S)`` (``channels_first``) or ``(N, *S, C_in)``
        (``channels_last``) with NumPy or CuPy chunks.  The batch and
        spatial axes may be chunked in any way; the channel axis is made one
        chunk.
    w : ndarray
        Weights, a NumPy or CuPy array (not Dask), ``(C_out, C_in/groups, *K)``
        or ``(C_out, *K, C_in/groups)``.
    bias : ndarray, optional
        ``(C_out,)``, in memory.
    stride, padding, dilation, groups, padding_mode, cval, layout, method, workspace_limit
        As :func:`cupyconv.conv`; `method` and `workspace_limit` apply to
        every block.

    Returns
    -------
    dask.array.Array
        ``(N, C_out, *O)`` or ``(N, *O, C_out)``; the batch axis keeps its
        chunks, spatial output chunks follow the input's (divided by the
        stride), the channel axis is one chunk.

    Raises
    ------
    TypeError
        `w` or `bias` is a Dask collection, NumPy and CuPy mixed, or an
        unsupported dtype.
    ValueError
        Exactly where :func:`cupyconv.conv` raises.

    See Also
    --------
    cupyconv.conv, convolve

    Notes
    -----
    The padding (any `padding_mode`) is applied once at the array edges with
    :func:`dask.array.pad`; each spatial axis is cut so that block starts are
    multiples of the stride in the padded coordinate, every block is
    extended by the halo ``dilation*(K-1) + 1 - stride`` (when positive)
    from its neighbours and runs ``cupyconv.conv(..., padding=0)``.

    Examples
    --------
    >>> import numpy as np, dask.array as da, cupyconv.dask as cdask
    >>> x = da.ones((4, 3, 32, 32), chunks=(2, 3, 16, 16))
    >>> y = cdask.conv(x, np.ones((8, 3, 3, 3)), stride=2, padding="same")
    >>> y.shape, y.chunks[2]
    ((4, 8, 16, 16), (8, 8))
    """
    arguments.normalize_method(method)
    _blocks.check_kernel(w, "w")
    if bias is not None:
        _blocks.check_kernel(bias, "bias")
    x = _blocks.as_dask_array(x, "x")
    xp = arguments.array_module_of(x=x._meta, w=w, bias=bias)
    w = arguments.as_array(xp, w)
    bias = None if bias is None else arguments.as_array(xp, bias)
    operands = {"x": x, "w": w} if bias is None else {"x": x, "w": w, "bias": bias}
    for name, a in operands.items():
        arguments.check_dtype(a, name)
    result = arguments.result_dtype(x.dtype, w.dtype)   # a bias is cast to it
    storage = arguments.problem_dtype(result)   # float16 blocks stay float16
    # The in-memory code validates the geometry on zero-stride stand-ins.
    stand = {name: _blocks.stand_in(a.shape, storage) for name, a in operands.items()}
    problem = prepare_conv(
        stand["x"], stand["w"], stand.get("bias"), stride=stride, padding=padding,
        dilation=dilation, groups=groups, padding_mode=padding_mode, cval=cval,
        layout=layout, out_dtype=result)[0]
    meta = _blocks.meta_like(xp, x.ndim, result)
    if math.prod(problem.y_shape) == 0:
        return _blocks.empty_result(xp, problem.y_shape, result)
    if problem.layout == "channels_first":
        chan, spatial = 1, range(2, x.ndim)
    else:
        chan, spatial = x.ndim - 1, range(1, x.ndim - 1)
    x = x.astype(storage).rechunk({chan: -1})
    pad_width = [(0, 0)] * x.ndim
    plans = {}
    for i, ax in enumerate(spatial):
        pad_width[ax] = problem.padding[i]
        span = problem.dilation[i] * (problem.kernel_shape[i] - 1) + 1
        plans[ax] = _blocks.plan_axis(x.chunks[ax], problem.padding[i], span,
                                      problem.stride[i])
    x = _blocks.pad(x, pad_width, problem.padding_mode, cval)
    return _blocks.map_halo_blocks(
        _conv_block, x, plans, {chan: (problem.out_channels,)}, result, meta,
        w=w, bias=bias, stride=problem.stride, dilation=problem.dilation,
        groups=problem.groups, layout=problem.layout, method=method,
        workspace_limit=workspace_limit, result=result)
