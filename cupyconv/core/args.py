"""Argument normalisation, validation and dtype rules shared by every public function.

Every check raises ``ValueError``/``TypeError`` naming the argument (and the
axis), never ``assert``, and runs before any work is done.  Valid choices in
messages come from :mod:`cupyconv._vocabulary`.
"""
from __future__ import annotations

import numbers
import operator

import numpy as np

from .. import config
from .interop import DLPACK_CUDA_DEVICES, gpu_interop, is_cupy_array
from .._dtypes import bfloat16, is_bfloat16, is_half_float
from .._vocabulary import (LAYOUTS, MAX_RANK, NDIMAGE_MODES, PADDING_MODE_ALIASES, PADDING_MODES,
                           PRECISIONS, describe_choices,
                           methods_for)

__all__ = [
    "array_module_of", "as_array", "checked_arrays", "native_dtype", "gpu_interop", "DLPACK_CUDA_DEVICES", "as_int", "normalize_shape", "normalize_per_axis", "normalize_padding", "normalize_transpose_padding",
    "normalize_padding_mode", "normalize_layout", "normalize_method", "normalize_axes",
    "normalize_workspace_limit", "check_dtype", "check_cval", "result_dtype", "gradient_dtype",
    "result_dtypes", "gradient_arguments", "compute_dtype", "problem_dtype", "cast_result", "MAX_EXTENT", "LONG_DOUBLE",
    "conv_geometry", "with_precision", "output_shape",
]

_SUPPORTED_DTYPES = frozenset(np.dtype(t) for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
    np.uint32, np.uint64, np.float16, np.float32, np.float64, np.complex64,
    np.complex128, np.longdouble, np.clongdouble))  # long double: the CPU only
#: Long double dtypes (``float128`` on x86-64 Linux): NumPy computes them, no CUDA kernel does.
LONG_DOUBLE = frozenset(np.dtype(t) for t in (np.longdouble, np.clongdouble)) - frozenset(
    np.dtype(t) for t in (np.float64, np.complex128))

#: Largest extent, stride, dilation or padding accepted: offsets built from
#: them must stay far inside int64 (the kernels' widest index type).
MAX_EXTENT = 2**40


def array_module_of(**arrays):
    """Return ``numpy`` or ``cupy`` for the given named arrays.

    ``None`` values are ignored.  GPU arrays of other libraries (see
    :func:`gpu_interop`) count as CuPy arrays: :func:`as_array` wraps them
    without a copy.  Mixing CPU and GPU arrays raises a ``TypeError`` that
    says which argument is on which device.
    """
    where, kinds = {}, set()
    for name, a in arrays.items():
        if a is None:
            continue
        if type(a) is np.ndarray:
            where[name] = "numpy"
        elif is_cupy_array(a):
            where[name] = "cupy"
        else:
            where[name] = "gpu" if gpu_interop(a) else "numpy"
        kinds.add("cupy" if where[name] == "gpu" else where[name])
    if len(kinds) > 1:
        what = {"cupy": "a CuPy (GPU) array", "numpy": "a NumPy (CPU) array"}
        desc = ", ".join(
            f"{n} is " + (what[k] if k in what else
                          f"a GPU array ({type(arrays[n]).__module__}.{type(arrays[n]).__name__})")
            for n, k in where.items())
        raise TypeError(
            f"all arrays must live on the same device: {desc}; move them with "
            "cupy.asarray() or cupy.asnumpy() first")
    if kinds == {"cupy"}:
        import cupy  # optional dependency: only reached with CuPy arrays in hand
        return cupy
    return np


def as_array(xp, a, *, native=True):
    """``a`` as an array of ``xp`` (from :func:`array_module_of`), without a copy when on the GPU.

    With ``xp`` CuPy, a GPU array of another library is wrapped, not copied:
    ``cupy.asarray`` for ``__cuda_array_interface__`` (CuPy waits for the
    stream the producer exports, CAI v3), ``cupy.from_dlpack`` for a CUDA
    ``__dlpack__`` (the producer is asked to make the data ready on CuPy's
    current stream).  The result of the call is then a CuPy array that
    shares the memory.  Everything else is ``xp.asarray(a)``.

    Data in non-native byte order (``a.astype(">f8")`` on a little-endian
    machine) becomes one byte-swapped copy in the native dtype, the only
    dtypes the kernels and the dtype rules know (SciPy computes such data
    and returns native results too).  ``native=False`` keeps an array as it
    is, for one the caller writes into (``output=``).
    """
    if xp is not np and gpu_interop(a) == "dlpack":
        return xp.from_dlpack(a)
    a = xp.asarray(a)
    if native and not a.dtype.isnative:
        return a.astype(native_dtype(a.dtype))
    return a


def checked_arrays(optional=(), **arrays):
    """``(xp, *arrays)``: the array module of the named arrays (:func:`array_module_of`),
    then each as an array of it (:func:`as_array`), then each dtype checked
    (:func:`check_dtype`, naming it); a ``None`` named in ``optional`` (an absent bias)
    stays ``None``."""
    xp = array_module_of(**arrays)
    out = [None if a is None and name in optional else as_array(xp, a)
           for name, a in arrays.items()]
    for name, a in zip(arrays, out):
        if a is not None:
            check_dtype(a, name)
    return (xp, *out)


def native_dtype(dtype):
    """``dtype`` in native byte order (``>f8`` -> ``float64``; native ones unchanged)."""
    dtype = np.dtype(dtype)
    return dtype if dtype.isnative else dtype.newbyteorder("=")


def as_int(value, name, minimum=None):
    """``value`` as a Python int; bools, floats and strings are a ``TypeError``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {name}={value}")
    if abs(value) > MAX_EXTENT:
        raise ValueError(f"{name}={value} is too large (at most {MAX_EXTENT})")
    return value


def _sequence(value, name, what):
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{name} must be {what}, got {value!r}")
    return tuple(value)


def _ints(items, name, minimum=None):
    """The tuple ``items`` as Python ints, each checked as :func:`as_int` checks it
    (``name[i]`` in a message); plain ints in range pass as they are."""
    low = -MAX_EXTENT if minimum is None else max(minimum, -MAX_EXTENT)
    for v in items:
        if type(v) is not int or not low <= v <= MAX_EXTENT:
            return tuple([as_int(v, f"{name}[{i}]", minimum) for i, v in enumerate(items)])
    return items


def normalize_shape(shape, name):
    """A shape argument: a sequence of non-negative ints."""
    if type(shape) is not tuple:
        shape = _sequence(shape, name, "a sequence of ints")
    return _ints(shape, name, minimum=0)


def normalize_per_axis(value, ndim, name, minimum=1):
    """Normalise ``stride``/``dilation`` (int or one int per axis) to a tuple."""
    if type(value) is int and abs(value) <= MAX_EXTENT:     # as_int's checks passed
        values = (value,) * ndim
    elif isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)):
        values = (as_int(value, name),) * ndim
    else:
        values = value if type(value) is tuple else _sequence(
            value, name, f"an int or a sequence of {ndim} ints")
        if len(values) != ndim:
            raise ValueError(
                f"{name} must have one entry per spatial axis ({ndim}), got {len(values)}")
        values = _ints(values, name)
    for i, v in enumerate(values):
        if v < minimum:
            what = {"stride": "non-positive stride is not supported",
                    "dilation": "dilation should be greater than zero"}.get(name, "")
            raise ValueError(
                f"{name} must be >= {minimum} on every axis; got {name}[{i}]={v}"
                + (f" ({what})" if what else ""))
    return values


def same_padding(in_shape, kernel_shape, stride, dilation):
    """Per-axis ``(before, after)`` of JAX's/TensorFlow's SAME: ``ceil(S/stride)`` outputs,
    ``total // 2`` before, the rest after (``jax.lax.padtype_to_pads``)."""
    pads = []
    for s, k, st, d in zip(in_shape, kernel_shape, stride, dilation):
        out = -(-s // st)
        total = max((out - 1) * st + d * (k - 1) + 1 - s, 0)
        pads.append((total // 2, total - total // 2))
    return tuple(pads)


def normalize_padding(padding, ndim, in_shape, kernel_shape, stride, dilation):
    """Normalise ``padding`` to ``((before, after), ...)`` per spatial axis.

    Accepts an int, one int per axis, NumPy ``pad_width`` style pairs,
    ``"valid"`` (no padding) or ``"same"`` (output size ``ceil(S/stride)`` for any
    stride, the extra padding after: JAX's and TensorFlow's SAME, :func:`same_padding`);
    the two names in any case (TensorFlow's ``"SAME"``, ``"VALID"``).
    """
    if isinstance(padding, str):
        padding = padding.lower()
        if padding == "valid":
            return ((0, 0),) * ndim
        if padding == "same":
            return same_padding(in_shape, kernel_shape, stride, dilation)
        raise ValueError(
            f"padding must be an int, a sequence, 'valid' or 'same' (any case); got "
            f"{padding!r}")
    if type(padding) is tuple and len(padding) == ndim and _plain_pairs(padding):
        return padding
    if isinstance(padding, numbers.Integral) and not isinstance(padding, (bool, np.bool_)):
        v = as_int(padding, "padding")
        pads = ((v, v),) * ndim
    else:
        items = list(_sequence(padding, "padding", "an int, a sequence, 'valid' or 'same'"))
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
                v = as_int(item, f"padding[{i}]")
                pads.append((v, v))
                continue
            pair = item if type(item) is tuple else _sequence(
                item, f"padding[{i}]", "an int or a (before, after) pair")
            if len(pair) != 2:
                raise ValueError(
                    f"padding[{i}] must be an int or a (before, after) pair, got {item!r}")
            pads.append(_ints(pair, f"padding[{i}]"))
        pads = tuple(pads)
    for i, (b, a) in enumerate(pads):
        if b < 0 or a < 0:
            raise ValueError(
                f"negative padding is not supported; got padding[{i}]=({b}, {a})")
    return pads


def _plain_pairs(pads):
    """Whether ``pads`` is ``((before, after), ...)`` of plain ints in range, as
    :func:`normalize_padding` returns it (it is then returned as it is)."""
    for pair in pads:
        if type(pair) is not tuple or len(pair) != 2:
            return False
        b, a = pair
        if (type(b) is not int or type(a) is not int or not 0 <= b <= MAX_EXTENT
                or not 0 <= a <= MAX_EXTENT):
            return False
    return True


def normalize_transpose_padding(padding, output_padding, s, ks, stride, dilation):
    """``(pads, output_padding)`` of ``conv_transpose``'s padding forms (``'same'``: the
    output is the input size times the stride, TensorFlow's SAME; else
    :func:`normalize_padding`'s)."""
    r = len(s)
    if isinstance(padding, str) and padding.lower() == "same":     # any case, as conv's
        pads, extra = [], []
        for k, st, d in zip(ks, stride, dilation):
            total = d * (k - 1) + 1 - st          # output = S * stride (TensorFlow's SAME)
            pads.append((total // 2, total - total // 2) if total >= 0 else (0, 0))
            extra.append(max(-total, 0))
        if any(normalize_per_axis(output_padding, r, "output_padding", minimum=0)):
            raise ValueError("output_padding must be 0 with padding='same' (the output "
                             "size is input size * stride)")
        return tuple(pads), tuple(extra)
    pads = normalize_padding(padding, r, s, ks, stride, dilation)
    return pads, normalize_per_axis(output_padding, r, "output_padding", minimum=0)


def normalize_padding_mode(mode):
    """The engine's name of a ``padding_mode``: ``numpy.pad``'s, or PyTorch's alias; a
    ``scipy.ndimage`` name that is neither (``'mirror'``, ``'nearest'``, ``'grid-*'``) is
    answered with the name that means the same here (ndimage's ``'reflect'`` is NumPy's
    ``'symmetric'``, so ndimage names are not accepted as they are)."""
    if isinstance(mode, str) and mode in PADDING_MODE_ALIASES:
        return PADDING_MODE_ALIASES[mode]
    if isinstance(mode, str) and mode not in PADDING_MODES and mode in NDIMAGE_MODES:
        raise ValueError(
            f"padding_mode={mode!r} is scipy.ndimage's name; padding_mode takes NumPy's "
            f"names: use {NDIMAGE_MODES[mode]!r} (ndimage's 'reflect' is NumPy's "
            "'symmetric'; docs/semantics.md, 'Boundary modes')")
    if not isinstance(mode, str) or mode not in PADDING_MODES:
        raise ValueError(
            f"padding_mode must be {describe_choices(PADDING_MODES)} (or PyTorch's "
            f"{describe_choices(tuple(PADDING_MODE_ALIASES))}); got {mode!r}")
    return mode


def normalize_layout(layout):
    if not isinstance(layout, str) or layout not in LAYOUTS:
        raise ValueError(f"layout must be {describe_choices(LAYOUTS)}; got {layout!r}")
    return layout


def normalize_method(method, op="forward"):
    """``method`` checked against the vocabulary's methods for ``op``."""
    allowed = methods_for(op)
    if not isinstance(method, str) or method not in allowed:
        raise ValueError(
            f"Acceptable method flags are {describe_choices(allowed)}; got method={method!r}")
    return method


def normalize_axes(axes, ndim):
    """Convolved axes (``None``: all) as a sorted tuple of non-negative ints."""
    if axes is None:
        return tuple(range(ndim))
    if isinstance(axes, (str, bytes, float)):
        raise TypeError(f"axes must be an int or a sequence of ints, got {axes!r}")
    if np.ndim(axes) == 0:
        axes = (axes,)
    out = []
    items = list(axes) if isinstance(axes, (list, tuple)) else np.asarray(axes).ravel().tolist()
    for a in items:
        try:
            a = operator.index(a) if not isinstance(a, (bool, np.bool_)) else None
        except TypeError:
            a = None
        if a is None:
            raise TypeError(f"axes must be integers, got axes={axes!r}")
        if not -ndim <= a < ndim:
            raise ValueError(f"axes entry {a} is out of range for arrays with {ndim} dimensions")
        out.append(a % ndim)
    if not out:
        raise ValueError("when provided, axes cannot be empty")
    if len(set(out)) != len(out):
        raise ValueError(f"axes must be unique, got {axes}")
    return tuple(sorted(out))


def normalize_workspace_limit(limit, name="workspace_limit"):
    """``None`` or a positive int number of bytes."""
    if limit is None:
        return None
    return as_int(limit, name, minimum=1)


def check_dtype(a, name):
    """Reject dtypes nothing can compute (object, strings, datetimes...).

    Long double is accepted: the NumPy backend computes it (as SciPy's direct path
    does); the CUDA path declines it with the reason (``Backend.can_implement``).
    """
    dt = a.dtype
    if dt in _SUPPORTED_DTYPES or is_bfloat16(dt):
        return dt
    if dt.kind == "O" and a.ndim == 0:           # None, a dict, ...: not an array at all
        raise TypeError(f"{name} must be array-like (an array, a number or nested sequences "
                        f"of numbers); got {type(a.item()).__name__} {a.item()!r:.60}")
    what = f"dtype {dt} is" if name == "dtype" else f"{name} has dtype {dt}, which is"
    raise TypeError(
        f"{what} not supported; use bool, integer, "
        "float16/32/64, " + ("bfloat16, " if bfloat16() is not None else "") +
        "complex64/128 or long double (object, string and datetime "
        "inputs are rejected rather than silently converted)")


def check_cval(cval, compute, padding_mode="constant"):
    """Validate ``cval`` (returned unchanged): a number representable in the compute dtype.

    numpy.pad would silently drop an imaginary part or truncate a fraction;
    a nonzero ``cval`` with a non-constant ``padding_mode`` would be ignored.
    """
    if isinstance(cval, (str, bytes)) or np.ndim(cval) != 0:
        raise TypeError(f"cval must be a number, got {cval!r}")
    try:
        c = complex(cval)
    except (TypeError, ValueError):
        raise TypeError(f"cval must be a number, got {cval!r}") from None
    except OverflowError:
        raise ValueError(f"cval={cval!r} does not fit a float64") from None
    compute = np.dtype(compute)
    if c.imag != 0 and compute.kind != "c":
        raise TypeError(
            f"cval={cval!r} is complex but the inputs are real ({compute}); "
            "pass complex x or w, or a real cval")
    if compute.kind in "biu":
        if not float(c.real).is_integer():
            raise TypeError(
                f"cval={cval!r} is not an integer but the inputs are integers ({compute}); "
                "it would be truncated")
        info = np.iinfo(compute)
        if not info.min <= c.real <= info.max:
            raise ValueError(f"cval={cval!r} does not fit the integer dtype {compute}")
    if padding_mode != "constant" and c != 0:
        raise ValueError(
            f"cval={cval!r} is only used with padding_mode='constant'; got "
            f"padding_mode={padding_mode!r}")
    return cval


def result_dtype(*dtypes):
    """The dtype ``scipy.signal.convolve(method='direct')`` returns."""
    return np.result_type(*dtypes)


def gradient_dtype(*dtypes):
    """Result dtype of a gradient: as the forward's, but integers and bool give float64."""
    dtype = np.result_type(*dtypes)
    return np.dtype(np.float64) if dtype.kind in "biu" else dtype


def result_dtypes(*dtypes, gradient=False):
    """``(result dtype, problem dtype)`` of a call on arrays of ``dtypes``: its
    :func:`result_dtype` (:func:`gradient_dtype` with ``gradient``) and that dtype's
    :func:`problem_dtype`."""
    result = gradient_dtype(*dtypes) if gradient else result_dtype(*dtypes)
    return result, problem_dtype(result)


def gradient_arguments(method, op, shape_name, shape, padding_mode=None, cval=0, **arrays):
    """``(xp, *arrays, result dtype, problem dtype, shape)``: the checks a gradient call
    starts with, in this order: ``method`` for ``op`` (:func:`normalize_method`), the
    arrays (:func:`checked_arrays`), their dtypes (:func:`result_dtypes`, ``gradient``),
    ``cval`` when a ``padding_mode`` is given (:func:`check_cval`: a number even where it
    is ignored), then the shape argument ``shape_name`` (:func:`normalize_shape`)."""
    normalize_method(method, op)
    checked = checked_arrays(**arrays)
    result, storage = result_dtypes(*[a.dtype for a in checked[1:]], gradient=True)
    if padding_mode is not None:
        check_cval(cval, storage, padding_mode)
    return (*checked, result, storage, normalize_shape(shape, shape_name))


def compute_dtype(dtype):
    """The dtype the arithmetic (the accumulation) runs in for a given result dtype.

    float16 and bfloat16 accumulate in float32; integers and bool in int64 (exact, with
    two's-complement wraparound identical to scipy's once cast back).
    """
    dtype = np.dtype(dtype)
    if is_half_float(dtype):
        return np.dtype(np.float32)
    return problem_dtype(dtype)


def problem_dtype(dtype):
    """The dtype of a problem (its operands as the engine receives them) for a result dtype.

    As :func:`compute_dtype`, except that float16 (and bfloat16) stays: its operands are not
    widened before dispatch.  The CUDA path computes it natively (half storage, float32
    accumulation, one rounding); the CPU backends cast the operands to float32 once in
    ``Backend.prepare`` (docs/semantics.md, "Precision contract").
    """
    dtype = np.dtype(dtype)
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


def normalize_precision(precision, dtype, data=()):
    """``precision=`` checked against the result dtype; ``None`` is ``config.precision``
    for float32 data and ``"highest"`` for every other dtype (as PyTorch's ``allow_tf32``).

    ``data``: the dtypes of the arrays the result is computed from, named in
    the error when they are not the result's (int32 gradients compute in float64).

    Raises
    ------
    ValueError
        For an unknown value, or ``"tf32"`` on data that is not float32.
    """
    dtype = np.dtype(dtype)
    if precision is None:               # the process-wide default applies to float32 only
        precision = config.precision if dtype == np.float32 else "highest"
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {describe_choices(PRECISIONS)}; "
                         f"got {precision!r}")
    if precision == "tf32" and dtype != np.float32:
        names = list(dict.fromkeys(np.dtype(d).name for d in data)) or [dtype.name]
        what = " and ".join(names)
        if names != [dtype.name]:
            what += f", computed in {dtype.name}"
        raise ValueError(f"precision='tf32' computes float32 data with TF32 operands; the data "
                         f"is {what} (use precision='highest')")
    return precision


def with_precision(problem, precision, result_dtype, *data):
    """``problem`` carrying ``precision=`` (``None``: ``config.precision``), checked
    against the result dtype (``"tf32"`` is for float32 data only; the error names
    the dtypes of the ``data`` arrays)."""
    precision = normalize_precision(precision, result_dtype,   # (read on an error only)
                                    (a.dtype for a in data if a is not None))
    return problem if precision == problem.precision else problem.with_(precision=precision)


def conv_geometry(x_shape, w_shape, stride, padding, dilation, groups, padding_mode, cval,
                  layout, dtype, precision):
    """The fields of a :class:`~cupyconv.core.problem.ConvProblem` but ``flip``, ``op`` and
    ``conjugate``: each argument normalised and checked in one pass, the output extents
    derived (``ConvProblem.create`` documents the arguments and the errors)."""
    layout = normalize_layout(layout)
    x_shape = normalize_shape(x_shape, "x_shape")
    w_shape = normalize_shape(w_shape, "w_shape")
    if len(x_shape) != len(w_shape):
        raise ValueError(
            f"x and w must have the same number of dimensions; got x.ndim="
            f"{len(x_shape)} and w.ndim={len(w_shape)}")
    ndim = len(x_shape) - 2
    if ndim < 1:
        raise ValueError(
            "x must have shape (N, C, *spatial) with at least one spatial "
            f"axis; got x.ndim={len(x_shape)}")
    if ndim > MAX_RANK:
        raise ValueError(
            f"spatial rank {ndim} is not supported; the maximum is {MAX_RANK}")
    if layout == "channels_first":
        n, c, s = x_shape[0], x_shape[1], x_shape[2:]
        k, cg, ks = w_shape[0], w_shape[1], w_shape[2:]
    else:
        n, c, s = x_shape[0], x_shape[-1], x_shape[1:-1]
        k, cg, ks = w_shape[0], w_shape[-1], w_shape[1:-1]
    groups = _check_groups(groups, c, k, cg, layout, x_shape, w_shape)
    for i, ki in enumerate(ks):
        if ki < 1:
            raise ValueError(
                f"w has an empty spatial axis {i} (size {ki}); kernel extents must be >= 1")
    stride = normalize_per_axis(stride, ndim, "stride")
    dilation = normalize_per_axis(dilation, ndim, "dilation")
    padding = normalize_padding(padding, ndim, s, ks, stride, dilation)
    padding_mode = normalize_padding_mode(padding_mode)
    dtype = np.dtype(dtype)
    cval = check_cval(cval, dtype, padding_mode)
    out = output_shape(s, ks, padding, stride, dilation)
    if min(out) < 1:
        out = _empty_output(out, s, ks, padding, dilation)
    if padding_mode in ("reflect", "symmetric", "wrap", "edge"):
        for i in range(ndim):
            if s[i] == 0 and (padding[i][0] or padding[i][1]):
                raise ValueError(
                    f"padding_mode={padding_mode!r} cannot extend the empty "
                    f"spatial axis {i}")
    return dict(ndim=ndim, batch=n, in_channels=c, out_channels=k, groups=groups,
                in_shape=tuple(s), kernel_shape=tuple(ks), out_shape=out,
                stride=stride, dilation=dilation, padding=padding,
                padding_mode=padding_mode, cval=cval, layout=layout, dtype=dtype,
                precision=normalize_precision(precision, dtype))


def output_shape(in_shape, kernel_shape, padding, stride, dilation):
    """Per spatial axis the output extent ``(S + pb + pa - d (KS - 1) - 1) // stride + 1``
    (``padding`` as pairs), below 1 where the padded input is shorter than the dilated
    kernel; plain arithmetic, so symbolic sizes (``torch.SymInt``) pass through."""
    out = []
    for n, k, (pb, pa), st, d in zip(in_shape, kernel_shape, padding, stride, dilation):
        out.append((n + pb + pa - d * (k - 1) - 1) // st + 1)
    return tuple(out)


def _empty_output(out, s, ks, padding, dilation):
    """``out`` with 0 on each empty input axis; a ValueError where another axis has none."""
    for i, o in enumerate(out):
        if o < 1 and s[i]:
            span, padded = dilation[i] * (ks[i] - 1) + 1, s[i] + sum(padding[i])
            raise ValueError(
                f"empty output on spatial axis {i}: padded input size {padded} "
                f"(size {s[i]} + padding {padding[i]}) is smaller than the "
                f"dilated kernel size {span} (kernel {ks[i]}, dilation {dilation[i]})")
    return tuple([max(o, 0) for o in out])


def _check_groups(groups, c, k, cg, layout, x_shape, w_shape):
    """``groups`` as an int that divides ``C_in = c`` and ``C_out = k`` with ``cg`` the
    weight's channel axis; the errors name the other layout where the arrays fit it."""
    groups = as_int(groups, "groups")
    if groups < 1:
        raise ValueError(f"groups must be >= 1, got groups={groups}")
    if c % groups == 0 and k % groups == 0 and cg == c // groups:
        return groups
    # (name, C_in, C_in/groups) that the arrays would have in the other layout
    other = (("channels_last", x_shape[-1], w_shape[-1]) if layout == "channels_first"
             else ("channels_first", x_shape[1], w_shape[1]))
    hint = ""
    if other[1] % groups == 0 and other[2] == other[1] // groups:
        hint = (f"; the channel axes fit layout={other[0]!r} (C_in={other[1]}, "
                f"C_in/groups={other[2]}): pass layout={other[0]!r}")
    if c % groups:
        raise ValueError(
            f"input channels C_in={c} are not divisible by groups={groups}{hint}")
    if k % groups:
        raise ValueError(
            f"output channels C_out={k} are not divisible by groups={groups}")
    raise ValueError(
        f"weight channel axis has size {cg}, expected C_in/groups = {c}/{groups} "
        f"= {c // groups}{hint}")
