"""``convolve``/``correlate`` on Dask arrays (scipy semantics, ``axes``)."""
from __future__ import annotations

from typing import Any, Optional

import dask.array as da
import numpy as np

from ..core import args as arguments
from ..api.signal import convolve as convolve_in_memory, correlate as correlate_in_memory
from ..core.signal_map import check_mode, signal_call
from . import _blocks
from .._typing import ArrayLike, Axes

__all__ = ["convolve", "correlate"]


def _signal_block(block, kernel, *, operation, mode, method, axes, kernel_bounds,
                  block_id=None):
    """Run the in-memory ``operation`` on one extended block.

    ``kernel_bounds`` maps a batch axis along which the kernel is not 1 to
    the block boundaries of that axis: the block gets its slice of the kernel.
    """
    if kernel_bounds:
        index = [slice(None)] * kernel.ndim
        for ax, bounds in kernel_bounds.items():
            i = block_id[ax]
            index[ax] = slice(bounds[i], bounds[i + 1])
        kernel = kernel[tuple(index)]
    what = f"cupyconv.{getattr(operation, '__name__', 'convolve')}"
    return _blocks.guard_memory(operation, block, block_id, what, kernel, mode=mode,
                                method=method, axes=axes)


def _dask_signal(in1, in2, mode, method, axes, correlate):
    arguments.normalize_method(method)
    _blocks.check_kernel(in2, "in2")
    x = _blocks.as_dask_array(in1, "in1")
    xp = arguments.array_module_of(in1=x._meta, in2=in2)
    in2 = arguments.as_array(xp, in2)
    arguments.check_dtype(x, "in1")
    arguments.check_dtype(in2, "in2")
    result = arguments.result_dtype(x.dtype, in2.dtype)
    # The in-memory planner validates mode/axes/shapes (and decides scipy's
    # valid-mode swap) from the shapes alone.
    storage = arguments.problem_dtype(result)
    check_mode(mode)
    norm_axes = None if x.ndim == 0 else arguments.normalize_axes(axes, x.ndim)
    call = signal_call(tuple(x.shape), storage, tuple(in2.shape), storage,
                       mode, norm_axes, correlate)
    operation = correlate_in_memory if correlate else convolve_in_memory
    meta = _blocks.meta_like(xp, x.ndim, result)
    if call.problem is None:          # 0-d operands
        return x.map_blocks(_signal_block, kernel=in2, operation=operation, mode=mode,
                            method=method, axes=None, kernel_bounds=None, dtype=result,
                            meta=meta)
    problem, conv_axes = call.problem, call.axes
    batch_axes = [a for a in range(x.ndim) if a not in conv_axes]
    shape = list(x.shape)
    for a, n in zip(batch_axes, call.batch_shape):
        shape[a] = n
    out_shape = list(shape)
    for a, n in zip(conv_axes, problem.out_shape):
        out_shape[a] = n
    if 0 in out_shape:
        return _blocks.empty_result(xp, tuple(out_shape), result)
    if tuple(shape) != x.shape:
        x = da.broadcast_to(x, tuple(shape))
    swapped = tuple(problem.in_shape) != tuple(x.shape[a] for a in conv_axes)
    plans = {}
    pad_width = [(0, 0)] * x.ndim
    for i, a in enumerate(conv_axes):
        if swapped:    # valid mode with in2 covering in1: in1 is the small operand
            plans[a] = _blocks.single_block_plan(x.shape[a], problem.out_shape[i])
        else:
            pad_width[a] = problem.padding[i]
            plans[a] = _blocks.plan_axis(x.chunks[a], problem.padding[i],
                                         problem.kernel_shape[i])
    kernel_bounds = {
        a: tuple(int(v) for v in np.cumsum((0,) + x.chunks[a]))
        for a in batch_axes if in2.shape[a] != 1}
    x = _blocks.pad(x, pad_width)
    return _blocks.map_halo_blocks(
        _signal_block, x, plans, {}, result, meta, kernel=in2, operation=operation,
        mode="valid", method=method, axes=conv_axes, kernel_bounds=kernel_bounds or None)


def convolve(in1: ArrayLike, in2: ArrayLike, mode: str = "full", method: str = "auto", *,
             axes: Optional[Axes] = None) -> Any:
    """Convolve a Dask array with an in-memory kernel.

    Lazy counterpart of :func:`cupyconv.convolve` (and so of
    :func:`scipy.signal.convolve`): the values, dtype and errors are those
    of the in-memory function on the whole arrays.

    Parameters
    ----------
    in1 : dask.array.Array
        First input, with NumPy or CuPy chunks, chunked in any way (an
        in-memory array is wrapped as one chunk).
    in2 : ndarray
        Kernel: a NumPy or CuPy array (the same kind as the chunks of
        `in1`), with the same number of dimensions.  Not a Dask array.
    mode : {'full', 'valid', 'same'}, optional
        As :func:`cupyconv.convolve`, including the ``valid`` swap when
        `in2` covers `in1`.
    method : {'auto', 'direct', 'fft', 'gemm', 'implicit_gemm'}, optional
        Algorithm of every block (``auto`` decides per block).
    axes : int or sequence of int, optional
        Convolve only along these axes; the others are batch axes that must
        match or be 1 (a kernel that is not 1 along a batch axis is sliced
        to each block).

    Returns
    -------
    dask.array.Array
        Lazy result with chunks of the same kind as `in1`'s.  Along the
        convolved axes ``same`` keeps `in1`'s chunks, ``full`` adds ``K-1``
        to the last, ``valid`` removes it (chunks smaller than ``K-1`` are
        merged); batch axes keep their chunks.

    Raises
    ------
    TypeError
        `in2` is a Dask collection, NumPy and CuPy mixed, or an
        unsupported dtype.
    ValueError
        Exactly where :func:`cupyconv.convolve` raises.

    See Also
    --------
    cupyconv.convolve, correlate, conv

    Notes
    -----
    The input is zero-padded to the geometry of `mode` at the array edges
    and every block, extended by ``K-1`` elements of its neighbours through
    :func:`dask.array.overlap.overlap`, runs ``cupyconv.convolve(...,
    mode="valid")``.  See docs/dask.md for the memory each block needs.

    Examples
    --------
    >>> import numpy as np, dask.array as da, cupyconv.dask as cdask
    >>> x = da.ones((10, 10), chunks=4)
    >>> y = cdask.convolve(x, np.ones((3, 3)), mode="same")
    >>> y.chunks, float(y[5, 5].compute())
    (((4, 4, 2), (4, 4, 2)), 9.0)
    """
    return _dask_signal(in1, in2, mode, method, axes, correlate=False)


def correlate(in1: ArrayLike, in2: ArrayLike, mode: str = "full", method: str = "auto", *,
              axes: Optional[Axes] = None) -> Any:
    """Cross-correlate a Dask array with an in-memory kernel.

    Lazy counterpart of :func:`cupyconv.correlate`; parameters, result and
    errors as in :func:`convolve`.

    Examples
    --------
    >>> import numpy as np, dask.array as da, cupyconv.dask as cdask
    >>> x = da.arange(6, chunks=2)
    >>> cdask.correlate(x, np.array([1, 2]), mode="valid").compute()
    array([ 2,  5,  8, 11, 14])
    """
    return _dask_signal(in1, in2, mode, method, axes, correlate=True)
