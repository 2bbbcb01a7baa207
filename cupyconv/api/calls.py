"""What every public function does around the dispatcher: operand views in, result out.

``conv``-style calls keep the user's layout: :func:`logical_views` gives the
channels-first views the problem describes (no copy unless a dtype cast is
needed), :func:`finish` adds the bias, restores the layout, casts to the
result dtype and honours ``out=`` (checked first by :func:`check_out`).
"""
from __future__ import annotations

import functools

import numpy as np

from .._kernels import program
from ..core import args

__all__ = ["check_out", "write_out", "channels_first", "logical_views", "finish"]


def check_out(out, shape, dtype, **arrays):
    """Validate ``out=`` against the result's shape and dtype, before any work."""
    if out is None:
        return
    if not (hasattr(out, "shape") and hasattr(out, "dtype") and hasattr(out, "flags")):
        raise TypeError(f"out must be a NumPy or CuPy array, got {type(out).__name__}")
    dtype = np.dtype(dtype)
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"out has shape {tuple(out.shape)}, expected {tuple(shape)}")
    if not getattr(out.flags, "writeable", True):     # CuPy arrays are always writeable
        raise ValueError("out is read-only")
    if dtype.kind == "c" and out.dtype.kind != "c":
        raise TypeError(f"out has real dtype {out.dtype} but the result is complex ({dtype})")
    if not np.can_cast(dtype, out.dtype, casting="same_kind"):
        raise TypeError(f"cannot write a {dtype} result into out of dtype {out.dtype}")
    args.array_module_of(out=out, **arrays)


def write_out(res, out, xp):
    """Copy ``res`` into ``out`` (already validated by :func:`check_out`), as a host step
    whose result is ``out`` itself, so that a compiled call replays the copy into the
    ``out`` of each call."""
    if out is None:
        return res
    return program.host_step("out", functools.partial(_copied, xp), res, out)


def _copied(xp, res, out):
    xp.copyto(out, res, casting="same_kind")
    return out


def channels_first(a, layout, xp):
    """Logical ``(lead, C, *S)`` view of an array in ``layout`` (no copy)."""
    return a if layout == "channels_first" else xp.moveaxis(a, -1, 1)


def logical_views(problem, xp, **arrays):
    """Channels-first views in the compute dtype of the named role arrays."""
    views = {}
    for role, a in arrays.items():
        if type(a) is not xp.ndarray or not a.dtype.isnative:     # (else as_array keeps it)
            a = args.as_array(xp, a)
        views[role] = channels_first(a, problem.layout, xp).astype(problem.dtype, copy=False)
    return views


def check_bias(bias, channels, xp, result_dtype):
    """``bias`` as an array of shape ``(channels,)`` (or ``None``), checked to cast to
    ``result_dtype``: the result dtype comes from x and w alone, and the bias is cast to
    it within its kind (a float64 bias on a float32 layer is added in float32); a bias of
    another kind (float on an integer result, complex on a real one) is refused."""
    if bias is None:
        return None
    bias = args.as_array(xp, bias)
    args.check_dtype(bias, "bias")
    if tuple(bias.shape) != (channels,):
        raise ValueError(f"bias must have shape (C_out,) = ({channels},); got {tuple(bias.shape)}")
    result_dtype = np.dtype(result_dtype)
    if not np.can_cast(bias.dtype, result_dtype, casting="same_kind"):
        raise TypeError(f"bias has dtype {bias.dtype}, which does not cast to the result dtype "
                        f"{result_dtype} of x and w (a bias is cast to the result dtype "
                        f"within its kind); pass bias.astype({result_dtype.name!r}) or x and "
                        f"w of a dtype that holds it")
    return bias


def finish(y, problem, xp, result_dtype, out=None, bias=None):
    """Add ``bias``, restore the layout, cast to ``result_dtype`` and honour ``out=``
    (the first three as one host step, which a compiled call replays)."""
    result_dtype = np.dtype(result_dtype)
    if (bias is not None or problem.layout == "channels_last" or y.dtype != result_dtype
            or result_dtype == np.bool_):
        y = program.host_step("finish", functools.partial(_finished, problem, xp, result_dtype),
                              y, bias)
    return write_out(y, out, xp)


def _finished(problem, xp, result_dtype, y, bias):
    if bias is not None:
        y = y + bias.astype(y.dtype, copy=False).reshape((1, -1) + (1,) * problem.ndim)
    if problem.layout == "channels_last":
        y = xp.ascontiguousarray(xp.moveaxis(y, 1, -1))
    return args.cast_result(y, result_dtype)
