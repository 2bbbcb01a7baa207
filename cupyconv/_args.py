"""Argument normalisation and validation shared by every public function.

Every check raises ``ValueError``/``TypeError`` naming the argument (and the
axis), never ``assert``, and runs before any work is done.
"""
from __future__ import annotations

import numbers

import numpy as np

__all__ = [
    "array_module_of", "normalize_per_axis", "normalize_padding",
    "normalize_padding_mode", "normalize_layout", "check_dtype",
    "result_dtype", "compute_dtype", "normalize_method", "METHODS",
]

_SUPPORTED_DTYPES = frozenset(np.dtype(t) for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
    np.uint32, np.uint64, np.float16, np.float32, np.float64, np.complex64,
    np.complex128))

#: Algorithm names accepted by ``method=``.
METHODS = ("auto", "direct", "fft", "gemm", "implicit_gemm")


def _is_cupy_array(a):
    return type(a).__module__.startswith("cupy")


def array_module_of(**arrays):
    """Return ``numpy`` or ``cupy`` for the given named arrays.

    ``None`` values are ignored.  Mixing NumPy and CuPy arrays raises a
    ``TypeError`` that says which argument is on which device.
    """
    where = {}
    for name, a in arrays.items():
        if a is None:
            continue
        where[name] = "cupy" if _is_cupy_array(a) else "numpy"
    kinds = set(where.values())
    if len(kinds) > 1:
        desc = ", ".join(
            f"{n} is a {'CuPy (GPU)' if k == 'cupy' else 'NumPy (CPU)'} array"
            for n, k in where.items())
        raise TypeError(
            f"all arrays must live on the same device: {desc}; move them with "
            "cupy.asarray() or cupy.asnumpy() first")
    if kinds == {"cupy"}:
        import cupy
        return cupy
    return np


def _as_int(value, name):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {value!r}")
    return int(value)


def normalize_per_axis(value, ndim, name, minimum=1):
    """Normalise ``stride``/``dilation`` (int or one int per axis) to a tuple."""
    if isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)):
        values = (int(value),) * ndim
    else:
        try:
            values = tuple(value)
        except TypeError:
            raise TypeError(
                f"{name} must be an int or a sequence of {ndim} ints, got {value!r}") from None
        if len(values) != ndim:
            raise ValueError(
                f"{name} must have one entry per spatial axis ({ndim}), got {len(values)}")
        values = tuple(_as_int(v, f"{name}[{i}]") for i, v in enumerate(values))
    for i, v in enumerate(values):
        if v < minimum:
            what = {"stride": "non-positive stride is not supported",
                    "dilation": "dilation should be greater than zero"}.get(name, "")
            raise ValueError(
                f"{name} must be >= {minimum} on every axis; got {name}[{i}]={v}"
                + (f" ({what})" if what else ""))
    return values


def normalize_padding(padding, ndim, in_shape, kernel_shape, stride, dilation):
    """Normalise ``padding`` to ``((before, after), ...)`` per spatial axis.

    Accepts an int, one int per axis, NumPy ``pad_width`` style pairs,
    ``"valid"`` (no padding) or ``"same"`` (output size ``ceil(S/stride)``,
    the extra padding after, as TensorFlow and PyTorch do).
    """
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * ndim
        if padding == "same":
            pads = []
            for s, k, st, d in zip(in_shape, kernel_shape, stride, dilation):
                out = -(-s // st)
                total = max((out - 1) * st + d * (k - 1) + 1 - s, 0)
                pads.append((total // 2, total - total // 2))
            return tuple(pads)
        raise ValueError(
            f"padding must be an int, a sequence, 'valid' or 'same'; got {padding!r}")
    if isinstance(padding, numbers.Integral) and not isinstance(padding, (bool, np.bool_)):
        pads = ((int(padding), int(padding)),) * ndim
    else:
        try:
            items = list(padding)
        except TypeError:
            raise TypeError(f"padding must be an int or a sequence, got {padding!r}") from None
        if len(items) == 1 and ndim != 1 and not isinstance(items[0], numbers.Integral):
            items = items * ndim          # numpy.pad's ((b, a),) broadcast
        if len(items) == 2 and ndim != 2 and all(
                isinstance(v, numbers.Integral) for v in items):
            items = [tuple(items)] * ndim  # numpy.pad's (b, a) broadcast
        if len(items) != ndim:
            raise ValueError(
                f"padding must have one entry per spatial axis ({ndim}), got {len(items)}")
        pads = []
        for i, item in enumerate(items):
            if isinstance(item, numbers.Integral):
                v = _as_int(item, f"padding[{i}]")
                pads.append((v, v))
            else:
                pair = tuple(item)
                if len(pair) != 2:
                    raise ValueError(
                        f"padding[{i}] must be an int or a (before, after) pair, got {item!r}")
                pads.append((_as_int(pair[0], f"padding[{i}][0]"),
                             _as_int(pair[1], f"padding[{i}][1]")))
        pads = tuple(pads)
    for i, (b, a) in enumerate(pads):
        if b < 0 or a < 0:
            raise ValueError(
                f"negative padding is not supported; got padding[{i}]=({b}, {a})")
    return pads


def normalize_padding_mode(mode):
    from ._problem import PADDING_MODES
    if mode not in PADDING_MODES:
        raise ValueError(
            f"padding_mode must be one of {', '.join(map(repr, PADDING_MODES))}; got {mode!r}")
    return mode


def normalize_layout(layout):
    from ._problem import LAYOUTS
    if layout not in LAYOUTS:
        raise ValueError(
            f"layout must be 'channels_first' or 'channels_last'; got {layout!r}")
    return layout


def normalize_method(method, allowed=METHODS):
    if method not in allowed:
        raise ValueError(
            f"Acceptable method flags are {', '.join(map(repr, allowed))}; got method={method!r}")
    return method


def check_dtype(a, name):
    """Reject dtypes no kernel can compute (object, strings, long double...)."""
    dt = a.dtype
    if dt in _SUPPORTED_DTYPES:
        return dt
    raise TypeError(
        f"{name} has dtype {dt}, which is not supported; use bool, integer, "
        "float16/32/64 or complex64/128 (object, string, long double and datetime "
        "inputs are rejected rather than silently downcast)")


def result_dtype(*dtypes):
    """The dtype ``scipy.signal.convolve(method='direct')`` returns."""
    return np.result_type(*dtypes)


def compute_dtype(dtype):
    """The dtype the arithmetic runs in for a given result dtype.

    float16 accumulates in float32; integers and bool in int64 (exact, with
    two's-complement wraparound identical to scipy's once cast back).
    """
    dtype = np.dtype(dtype)
    if dtype == np.float16:
        return np.dtype(np.float32)
    if dtype.kind in "biu":
        return np.dtype(np.uint64) if dtype == np.uint64 else np.dtype(np.int64)
    return dtype


def cast_result(y, dtype):
    """Cast the computed ``y`` to the result dtype (bool means nonzero)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return y != 0
    if y.dtype == dtype:
        return y
    return y.astype(dtype, copy=False)
