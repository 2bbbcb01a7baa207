"""``scipy.ndimage``'s linear filters on Dask arrays (as dask-image offers them).

``gaussian_filter``, ``uniform_filter``, ``convolve``, ``correlate`` and the derivative
filters ``sobel``, ``prewitt``, ``laplace``, ``gaussian_laplace`` and
``gaussian_gradient_magnitude`` take :mod:`cupyconv.ndimage`'s arguments (``output``
only as a dtype) and return a lazy Dask array whose values are those of the in-memory
filter on the whole array: each block is extended by the filter's halo
(:func:`dask.array.map_overlap`), filtered in memory, and trimmed back.

The halo of an axis is how far the filter reads along it: ``max(K//2 + origin,
K - 1 - K//2 - origin)`` for a kernel or window of extent ``K`` (``convolve`` maps the
origin as SciPy), the Gaussian's radius (``int(truncate * sigma + 0.5)`` unless
``radius`` is given), 1 for the difference filters.  A multi-pass filter's passes run
along different axes, so the halo of an axis is its own pass's, not a sum.

At the array's edges the in-memory filter applies ``mode`` itself (the blocks are not
extended there), except the periodic modes (``wrap``, ``grid-wrap``), where the block
borrows the other end's data.  Blocks shorter than the halo are merged by Dask
(``map_overlap`` rechunks), and an axis the halo covers whole is one block.  Values
agree with the in-memory call's to the filter's own roundoff (a block may choose
another algorithm than the whole array); integer results are identical.
"""
from __future__ import annotations

import operator

import dask.array as da
import numpy as np

from .. import ndimage as in_memory
from ..core import args as arguments
from . import _blocks

__all__ = ["correlate", "convolve", "gaussian_filter", "uniform_filter", "sobel", "prewitt",
           "laplace", "gaussian_laplace", "gaussian_gradient_magnitude"]

#: Modes whose boundary reads the other end of the axis.
PERIODIC = frozenset(("wrap", "grid-wrap"))
#: An axis read with periodic and other modes by different passes: kept one block.
MIXED = "mixed"


def _filter_block(block, *, filter_name, filter_args, filter_kwargs, block_id=None):
    """The in-memory filter ``filter_name`` of one extended block."""
    return _blocks.guard_memory(getattr(in_memory, filter_name), block, block_id,
                                f"cupyconv.ndimage.{filter_name}", *filter_args,
                                **filter_kwargs)


def _per_axis(value, axes, ndim, fill):
    """``value`` (one, or one per entry of ``axes``) spread over the input's axes."""
    values = in_memory.common.normalize_sequence(value, len(axes))
    full = [fill] * ndim
    for v, ax in zip(values, axes):
        full[ax] = v
    return full


def _window_halo(k, origin):
    """How far a window of extent ``k`` centred at ``k // 2 + origin`` reads."""
    return max(k // 2 + origin, k - 1 - k // 2 - origin, 0)


def _gaussian_halo(sigma, truncate, radius):
    if float(sigma) <= 1e-15:
        return 0
    return int(radius) if radius is not None else int(truncate * float(sigma) + 0.5)


def _gaussian_halos(sigma, ndim, axes, truncate=4.0, radius=None, **_):
    axes = in_memory.common.check_axes(axes, ndim)
    sigmas = _per_axis(sigma, axes, ndim, 0.0)
    radii = _per_axis(radius, axes, ndim, None)
    return [_gaussian_halo(s, truncate, r) for s, r in zip(sigmas, radii)]


def _run(name, input, args, kwargs, halos, modes):
    """Map the in-memory filter ``name`` over ``input``'s blocks extended by ``halos``
    (one per axis) with the boundary each axis's mode needs."""
    output = kwargs.get("output")
    if output is not None and not isinstance(output, (type, np.dtype, str)):
        raise TypeError("output must be None or a dtype for a Dask array, got "
                        f"{type(output).__name__}: the result is a new lazy array")
    x = _blocks.as_dask_array(input, "input")
    xp = arguments.array_module_of(input=x._meta)
    # the in-memory filter checks every argument (and gives the dtype) on one element
    probe = getattr(in_memory, name)(xp.zeros((1,) * x.ndim, dtype=x.dtype), *args, **kwargs)
    meta = _blocks.meta_like(xp, x.ndim, probe.dtype)
    block_kw = dict(filter_name=name, filter_args=args, filter_kwargs=kwargs)
    if x.ndim == 0 or x.size == 0:
        return x.map_blocks(_filter_block, dtype=probe.dtype, meta=meta, **block_kw)
    depth, boundary, whole = {}, {}, {}
    for ax, (h, mode) in enumerate(zip(halos, modes)):
        if (h >= x.shape[ax] or (h and mode == MIXED)) and x.numblocks[ax] > 1:
            whole[ax] = -1                   # the halo covers the axis: one block
        elif h and x.numblocks[ax] > 1:
            depth[ax] = h
            boundary[ax] = "periodic" if mode in PERIODIC else "none"
    if whole:
        x = x.rechunk(whole)
    if not depth:
        return x.map_blocks(_filter_block, dtype=probe.dtype, meta=meta, **block_kw)
    return da.map_overlap(_filter_block, x, depth=depth, boundary=boundary, trim=True,
                          dtype=probe.dtype, meta=meta, **block_kw)


def _modes(mode, n):
    return in_memory.common.normalize_sequence(mode, n)


def _correlate_or_convolve(name, input, weights, output, mode, cval, origin, axes):
    _blocks.check_kernel(weights, "weights")
    x = _blocks.as_dask_array(input, "input")
    weights = np.asarray(weights) if not hasattr(weights, "shape") else weights
    axes_ = in_memory.common.check_axes(axes, x.ndim)
    # as in memory (and SciPy): the kernel's axes are the filtered ones in increasing
    # order, the origins follow `axes` as given
    origins = _per_axis(origin, axes_ if len(axes_) < x.ndim else range(x.ndim), x.ndim, 0)
    halos = [0] * x.ndim
    if weights.ndim == len(axes_):
        for ax, k in zip(sorted(axes_), weights.shape):
            o = operator.index(origins[ax])
            if name == "convolve":
                o = -o - (0 if k & 1 else 1)
            halos[ax] = _window_halo(k, o)
    kwargs = dict(output=output, mode=mode, cval=cval, origin=origin, axes=axes)
    return _run(name, x, (weights,), kwargs, halos, [mode] * x.ndim)


def correlate(input, weights, output=None, mode="reflect", cval=0.0, origin=0, *, axes=None):
    """:func:`cupyconv.ndimage.correlate` of a Dask array with an in-memory kernel."""
    return _correlate_or_convolve("correlate", input, weights, output, mode, cval, origin, axes)


def convolve(input, weights, output=None, mode="reflect", cval=0.0, origin=0, *, axes=None):
    """:func:`cupyconv.ndimage.convolve` of a Dask array with an in-memory kernel."""
    return _correlate_or_convolve("convolve", input, weights, output, mode, cval, origin, axes)


def gaussian_filter(input, sigma, order=0, output=None, mode="reflect", cval=0.0,
                    truncate=4.0, *, radius=None, axes=None):
    """:func:`cupyconv.ndimage.gaussian_filter` of a Dask array (halo: the radius)."""
    x = _blocks.as_dask_array(input, "input")
    axes_ = in_memory.common.check_axes(axes, x.ndim)
    halos = _gaussian_halos(sigma, x.ndim, axes, truncate, radius)
    kwargs = dict(output=output, mode=mode, cval=cval, truncate=truncate, radius=radius,
                  axes=axes)
    return _run("gaussian_filter", x, (sigma, order), kwargs, halos,
                _per_axis(mode, axes_, x.ndim, None))


def uniform_filter(input, size=3, output=None, mode="reflect", cval=0.0, origin=0, *,
                   axes=None):
    """:func:`cupyconv.ndimage.uniform_filter` of a Dask array (halo: the window's reach)."""
    x = _blocks.as_dask_array(input, "input")
    axes_ = in_memory.common.check_axes(axes, x.ndim)
    sizes = _per_axis(size, axes_, x.ndim, 1)
    origins = _per_axis(origin, axes_, x.ndim, 0)
    halos = [_window_halo(operator.index(s), operator.index(o)) for s, o in zip(sizes, origins)]
    kwargs = dict(output=output, mode=mode, cval=cval, origin=origin, axes=axes)
    return _run("uniform_filter", x, (size,), kwargs, halos,
                _per_axis(mode, axes_, x.ndim, None))


def _difference(name, input, axis, output, mode, cval):
    x = _blocks.as_dask_array(input, "input")
    kwargs = dict(axis=axis, output=output, mode=mode, cval=cval)
    return _run(name, x, (), kwargs, [1] * x.ndim, _modes(mode, x.ndim))


def sobel(input, axis=-1, output=None, mode="reflect", cval=0.0):
    """:func:`cupyconv.ndimage.sobel` of a Dask array (halo 1 on every axis)."""
    return _difference("sobel", input, axis, output, mode, cval)


def prewitt(input, axis=-1, output=None, mode="reflect", cval=0.0):
    """:func:`cupyconv.ndimage.prewitt` of a Dask array (halo 1 on every axis)."""
    return _difference("prewitt", input, axis, output, mode, cval)


def laplace(input, output=None, mode="reflect", cval=0.0, *, axes=None):
    """:func:`cupyconv.ndimage.laplace` of a Dask array (halo 1 on the filtered axes)."""
    x = _blocks.as_dask_array(input, "input")
    axes_ = in_memory.common.check_axes(axes, x.ndim)
    kwargs = dict(output=output, mode=mode, cval=cval, axes=axes)
    return _run("laplace", x, (), kwargs, _per_axis(1, axes_, x.ndim, 0),
                _per_axis(mode, axes_, x.ndim, None))


def _every_mode(mode, axes_, ndim):
    """A Gaussian sum's modes: each term smooths every axis it reads with its own mode,
    so an axis is periodic when every term's mode is, not when none is, and ``MIXED``
    (one block) otherwise."""
    periodic = {m in PERIODIC for m in _modes(mode, len(axes_))}
    return [MIXED if len(periodic) > 1 else ("wrap" if True in periodic else "reflect")] * ndim


def gaussian_laplace(input, sigma, output=None, mode="reflect", cval=0.0, *, axes=None,
                     **kwargs):
    """:func:`cupyconv.ndimage.gaussian_laplace` of a Dask array (halo: the radius)."""
    x = _blocks.as_dask_array(input, "input")
    axes_ = in_memory.common.check_axes(axes, x.ndim)
    halos = _gaussian_halos(sigma, x.ndim, axes, **kwargs)
    kw = dict(kwargs, output=output, mode=mode, cval=cval, axes=axes)
    return _run("gaussian_laplace", x, (sigma,), kw, halos, _every_mode(mode, axes_, x.ndim))


def gaussian_gradient_magnitude(input, sigma, output=None, mode="reflect", cval=0.0, *,
                                axes=None, **kwargs):
    """:func:`cupyconv.ndimage.gaussian_gradient_magnitude` of a Dask array (halo: the
    radius on every axis `sigma` smooths: all of them, as in the in-memory filter)."""
    x = _blocks.as_dask_array(input, "input")
    axes_ = in_memory.common.check_axes(axes, x.ndim)
    halos = _gaussian_halos(sigma, x.ndim, None, **kwargs)
    kw = dict(kwargs, output=output, mode=mode, cval=cval, axes=axes)
    return _run("gaussian_gradient_magnitude", x, (sigma,), kw, halos,
                _every_mode(mode, axes_, x.ndim))
