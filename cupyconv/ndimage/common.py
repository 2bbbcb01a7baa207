"""Argument rules and the one-pass driver shared by the ``cupyconv.ndimage`` filters:
SciPy's ``output`` handling, origins, axes, ``cval`` checks, the compute dtype, and
:func:`run_filter`'s single problem per pass."""
from __future__ import annotations

import functools
import operator
import warnings

import numpy as np
# SciPy's functions bound at import (a drop-in swapped into scipy.ndimage must not recurse)
from scipy.ndimage import correlate1d as scipy_correlate1d
from scipy.ndimage import uniform_filter1d as scipy_uniform_filter1d

from .. import config
from .._dtypes import is_half_float
from .._kernels import program
from .._vocabulary import NDIMAGE_NAMES
from ..backends.numpy.direct import SCIPY_STRIDE_BYTES
from ..core import args
from ..core.ndimage_map import filter_call, invalid_origin
from ..dispatch import backend_for, choose, precheck, run
from ..dispatch.dispatcher import ranked_for_data
from .footprint import kept_sum, kept_weights

__all__ = ["INPUT_KINDS", "SINGLE", "EXACT_WEIGHT", "as_arrays", "Fresh", "get_output", "between_passes", "empty_result", "copy_input", "normalize_sequence", "check_axes", "AxisError", "normalize_axis", "normalize_origin", "check_origin", "check_complex_cval", "check_cval", "compute_dtype", "integral", "integral_scalar", "cval_for", "tap_sum", "c_bool", "c_cast", "store_output", "scipy_line_pass", "run_filter"]


#: Input dtypes a filter computes (SciPy's, plus float16, which runs in float32; bfloat16 too,
#: :func:`_computes`).
INPUT_KINDS = frozenset(np.dtype(t) for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
    np.uint64, np.float16, np.float32, np.float64, np.complex64, np.complex128))
SINGLE = frozenset(np.dtype(t) for t in (np.float16, np.float32, np.complex64))


def _computes(dtype):
    """Whether a filter computes ``dtype`` (:data:`INPUT_KINDS` or bfloat16)."""
    return dtype in INPUT_KINDS or is_half_float(dtype)


#: Largest integer-valued weight computed exactly in int64.
EXACT_WEIGHT = 2**31


# ------------------------------------------------------------------ arguments
_NO_WEIGHTS = object()


def as_arrays(input, weights=_NO_WEIGHTS):
    """``(xp, input, weights)`` as arrays of one module; unsupported dtypes raise.

    ``weights=None`` is SciPy's ``np.asarray(None, dtype=float64)``, a 0-d array, which
    the filters' rank checks then refuse with SciPy's ``RuntimeError``; without
    ``weights`` (a filter that builds its own) the third item is ``None``.
    """
    xp = args.array_module_of(input=input, weights=None if weights is _NO_WEIGHTS else weights)
    input = args.as_array(xp, input)
    if not _computes(input.dtype):
        raise RuntimeError(
            f"array type not supported: input has dtype {input.dtype}; use bool, integer, "
            "float16/32/64, bfloat16 or complex64/128")
    if weights is _NO_WEIGHTS:
        return xp, input, None
    if weights is None:
        weights = xp.full((), np.nan)
    else:
        weights = args.as_array(xp, weights)
        if weights.dtype.kind not in "biufc" and not is_half_float(weights.dtype):
            raise RuntimeError(f"array type not supported: weights have dtype {weights.dtype}")
    return xp, input, weights


class Fresh:
    """An output SciPy would allocate (``output=None`` or a dtype): the result array is
    returned as computed instead of being copied into zeros first.  Between the passes of
    a multi-pass filter it stands for SciPy's output array (same dtype, same checks)."""

    def __init__(self, dtype, shape):
        self.dtype, self.shape = np.dtype(dtype), tuple(shape)


def get_output(output, input, xp, complex_output=False):
    """SciPy's ``_ni_support.get_output``: the user's array, or a :class:`Fresh` one."""
    shape = input.shape
    if output is None:
        dtype = np.promote_types(input.dtype, np.complex64) if complex_output else input.dtype
        return Fresh(dtype, shape)
    if isinstance(output, Fresh):
        if complex_output and output.dtype.kind != "c":
            raise RuntimeError("output must have complex dtype")
        return output
    if isinstance(output, (type, np.dtype)):
        dtype = np.dtype(output)
        if complex_output and dtype.kind != "c":
            program.refuse("the call warns")
            warnings.warn("promoting specified output dtype to complex", stacklevel=4)
            dtype = np.promote_types(dtype, np.complex64)
        return Fresh(dtype, shape)
    if isinstance(output, str):
        dtype = np.dtype(output)
        if complex_output and dtype.kind != "c":
            raise RuntimeError("output must have complex dtype")
        if not issubclass(dtype.type, np.number):
            raise RuntimeError("output must have numeric dtype")
        return Fresh(dtype, shape)
    args.array_module_of(input=input, output=output)
    output = args.as_array(xp, output, native=False)      # written into: kept as it is
    if tuple(output.shape) != tuple(shape):
        raise RuntimeError(f"output shape not correct: output has shape "
                           f"{tuple(output.shape)}, the input {tuple(shape)}")
    if complex_output and output.dtype.kind != "c":
        raise RuntimeError("output must have complex dtype")
    return output


def between_passes(output, shape):
    """SciPy's output array as the next pass of a multi-pass filter reads it: the
    output's dtype, except that a bool output holds the C cast's raw byte (0-255), which
    the next pass reads as a number: uint8 stands for it."""
    return Fresh(np.uint8 if output.dtype == np.bool_ else output.dtype, shape)


def copy_input(input, output, xp):
    """SciPy's ``output[...] = input[...]`` (no axis filtered)."""
    if isinstance(output, Fresh):
        return input.astype(output.dtype, copy=True)
    output[...] = input[...]
    return output


def normalize_sequence(value, rank, name=None):
    """One entry per axis (SciPy's ``normalize_sequence``; its ``RuntimeError`` keeps
    SciPy's words and names the argument, ``name``, and both lengths)."""
    if not isinstance(value, str) and np.iterable(value):
        values = list(value)
        if len(values) != rank:
            where = "" if name is None else (
                f" ({name} has {len(values)} values for {rank} axes filtered)")
            raise RuntimeError("sequence argument must have length equal to input rank"
                               + where)
        return values
    return [value] * rank


def check_axes(axes, ndim):
    """SciPy's ``check_axes``: axes as given (order kept), non-negative, unique."""
    if axes is None:
        return tuple(range(ndim))
    if np.isscalar(axes):
        axes = (operator.index(axes),)
    elif np.iterable(axes):
        axes = tuple(operator.index(ax) for ax in axes)
        for ax in axes:
            if ax < -ndim or ax > ndim - 1:
                raise ValueError(f"specified axis: {ax} is out of range")
        axes = tuple(ax % ndim if ax < 0 else ax for ax in axes)
    else:
        raise ValueError("axes must be an integer, iterable of integers, or None")
    if len(set(axes)) != len(axes):
        raise ValueError("axes must be unique")
    return axes


AxisError = getattr(np, "exceptions", np).AxisError


def normalize_axis(axis, ndim):
    """``axis`` as a non-negative index (NumPy's ``AxisError`` out of range, as SciPy)."""
    axis = operator.index(axis)
    if not -ndim <= axis < ndim:
        raise AxisError(axis, ndim)
    return axis % ndim


def normalize_origin(value):
    """An origin as an int; a fractional one is invalid (``ValueError``, as SciPy)."""
    if isinstance(value, (float, np.floating)):
        if not float(value).is_integer():
            raise ValueError(f"Invalid origin; origin must be an integer, got origin={value}")
        return int(value)
    return operator.index(value)


def check_origin(origin, size, what):
    if invalid_origin(origin, size):
        raise ValueError(
            f"Invalid origin; origin must satisfy -({what} // 2) <= origin <= ({what}-1) // 2; "
            f"got origin={origin} for a kernel of size {size}")


def check_complex_cval(cval, input):
    """A complex computation of a real input takes no complex ``cval`` (SciPy: ValueError)."""
    if input.dtype.kind != "c" and np.iscomplexobj(cval):
        raise ValueError("Cannot provide a complex-valued cval when the input is real.")


def check_cval(cval, input):
    if isinstance(cval, (str, bytes)) or np.ndim(cval) != 0:
        raise TypeError(f"cval must be a real number, got {cval!r}")
    if input.dtype.kind != "c" and np.iscomplexobj(cval):
        raise TypeError(f"cval must be a real number for a real input, got {cval!r}")


# ------------------------------------------------------------------ one pass
def compute_dtype(in_dtype, weights, mode, cval, out_dtype, xp=np):
    """The dtype a pass computes in.

    Integer or bool input with integer-valued weights (and an integer ``cval`` where it
    is used) runs in integer arithmetic where SciPy's double sum is exact too: while
    ``M * sum|w| < 2**53``, ``M`` the input dtype's largest magnitude (and ``|cval|``).
    There float32 for 8/16-bit data into an integer output while every sum stays below
    2**24, int64 otherwise; both give SciPy's integers exactly.  Past that bound (64-bit
    data, or 32-bit data with weights of 2**22 and more) the pass computes in float64,
    rounding as SciPy does, unless :data:`cupyconv.config.ndimage_integers` is
    ``"exact"`` (then int64, exact modulo 2**64).  float32/complex64 when the input and
    the output are both single (or half) precision; float64/complex128 otherwise, as
    SciPy (which always accumulates in double).
    """
    in_dtype, out_dtype = args.native_dtype(in_dtype), args.native_dtype(out_dtype)
    cplx = in_dtype.kind == "c" or weights.dtype.kind == "c"
    if (not cplx and in_dtype.kind in "biu" and integral(weights, xp)
            and (mode != "constant" or integral_scalar(cval))):
        info = np.iinfo(in_dtype) if in_dtype.kind != "b" else np.iinfo(np.uint8)
        m = max(-int(info.min), int(info.max), abs(int(np.real(cval))))
        bound = m * float(xp.abs(weights.astype(np.float64)).sum())
        if out_dtype.kind in "biu" and in_dtype.itemsize <= 2 and bound < 2**24:
            # 8/16-bit data: float32 holds every partial sum exactly, and then a uniform
            # filter's one division is within 2**-24 * max|x| < 1 / size of the true
            # quotient: the same truncated integers as int64, at half the memory traffic
            return np.dtype(np.float32)
        if bound < 2**53 or config.ndimage_integers == "exact":
            return np.dtype(np.int64)
    single = all(d in SINGLE or is_half_float(d) for d in (in_dtype, out_dtype))
    if cplx:
        return np.dtype(np.complex64 if single else np.complex128)
    return np.dtype(np.float32 if single else np.float64)


def integral(w, xp):
    program.host_read("an integer filter's compute dtype depends on the weights' values", w)
    if w.dtype.kind in "bu" or (w.dtype.kind == "i"):
        return w.size == 0 or int(xp.abs(w.astype(np.float64)).max()) < EXACT_WEIGHT
    if w.dtype.kind != "f" or w.size == 0:
        return False
    return bool(xp.all(xp.trunc(w) == w)) and float(xp.abs(w).max()) < EXACT_WEIGHT


def integral_scalar(c):
    c = complex(c)
    return c.imag == 0 and np.isfinite(c.real) and c.real.is_integer() and abs(c.real) < 2**53


def cval_for(cval, dtype):
    if dtype.kind == "c":
        return complex(cval)
    if dtype.kind in "iu":
        return int(np.real(cval))
    return float(np.real(cval))


def tap_sum(problem, operands, backend):
    """The algorithm for a float result truncated to integers: ``direct`` (SciPy's
    summation order on the CPU) when it can run, else the best other tap sum; never
    the FFT, whose roundoff would turn an exact 3 into 2.9999... and then 2."""
    prepared, ops = backend.prepare(problem, operands)
    ranked = [n for n in ranked_for_data(choose(prepared, backend), prepared, ops,
                                         backend=backend) if n != "fft"]
    return "direct" if "direct" in ranked or not ranked else ranked[0]


def c_bool(y, xp):
    """SciPy's store of a pass's value into a bool output: the C cast to ``npy_bool``, an
    unsigned char, which x86-64 computes as the low byte of the value truncated to int32
    (out of range and non-finite: 0x80000000).  True where that byte is nonzero: 256,
    2**31 and NaN give False, -1 True.  Spelled out in array operations, as a float to
    uint8 ``astype`` is not the same on every device."""
    t = xp.trunc(y) if y.dtype.kind == "f" else y
    with np.errstate(invalid="ignore"):
        return (xp.abs(t) < 2**31) & (xp.fmod(t, 256) != 0)


def store_output(y, output, xp):
    """``y`` in ``output``'s dtype with SciPy's C cast (:func:`c_cast`), written into
    ``output`` when it is the caller's array."""
    if isinstance(output, Fresh):         # a host step: a compiled call replays it
        if y.dtype == output.dtype and y.flags.c_contiguous:
            return y
        return program.host_step("store", functools.partial(_stored, output.dtype, xp), y)
    output[...] = _stored(output.dtype, xp, y)
    return output


def _stored(dtype, xp, y):
    """``y`` in ``dtype`` by SciPy's C cast, contiguous."""
    with np.errstate(invalid="ignore", over="ignore"):
        value = c_cast(y, dtype, xp)
    return xp.ascontiguousarray(value)


#: The C conversion of a double to each integer type as gcc emits it on x86-64:
#: ``(bound, result dtype of cvttsd2si)``: values whose magnitude is below ``bound``
#: truncate toward zero, the others (and NaN) give that type's minimum, and a
#: narrower type keeps the low bytes (int8/16, uint8/16 and ``npy_bool`` through a
#: 32-bit conversion, uint32 through a 64-bit one).
_C_CONVERSION = {1: (2.0**31, np.int32), 2: (2.0**31, np.int32), 4: (2.0**31, np.int32),
                 8: (2.0**63, np.int64)}


def c_cast(y, dtype, xp, spelled_out=False):
    """``y`` (the float or int64 values of a pass) in integer, bool or float ``dtype`` as
    SciPy's C store ``(type)double`` gives it on x86-64 (:data:`_C_CONVERSION`).

    The int64 values of an exact integer pass are the double SciPy would have
    computed (they are below 2**53), so they follow the same rule: an int32 output of
    2**31 is INT_MIN, an int8 output of 2**31 is 0 (INT_MIN's low byte).  A float into
    an integer type on the NumPy backend is NumPy's ``astype``, which is that same C
    conversion on the CPU (checked against SciPy in the tests), except into uint32
    (NumPy saturates there); elsewhere (CuPy, whose casts saturate, or
    ``spelled_out=True``) the rule is spelled out in array operations (``where`` and
    integer-to-integer casts, which wrap on every device).
    """
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return c_bool(y, xp)
    if dtype.kind not in "iu":
        return y.astype(dtype, copy=False)
    if y.dtype.kind == "f" and xp is np and dtype != np.uint32 and not spelled_out:
        return y.astype(dtype, copy=False)
    if dtype == np.uint64 and y.dtype.kind == "f":
        return _c_uint64(y, xp)
    bound, through = _C_CONVERSION[8 if dtype == np.uint32 else dtype.itemsize]
    if y.dtype.kind == "f":
        t = xp.trunc(y)
        t = xp.where(xp.abs(t) < bound, t, -bound)
    elif bound < 2.0**63:
        t = xp.where((y >= -int(bound)) & (y < int(bound)), y, -int(bound))
    else:
        t = y
    return t.astype(through, copy=False).astype(dtype, copy=False)


def _c_uint64(y, xp):
    """gcc's double to uint64: below 2**63 (NaN too) the signed conversion, else the
    signed conversion of ``y - 2**63`` with the top bit flipped (2**64 and past: 0)."""
    t = xp.trunc(y)
    small = xp.where(xp.abs(t) < 2.0**63, t, -2.0**63).astype(np.int64).astype(np.uint64)
    high = t - 2.0**63
    high = xp.where(xp.abs(high) < 2.0**63, high, -2.0**63).astype(np.int64).astype(np.uint64)
    return xp.where(t >= 2.0**63, high ^ np.uint64(2**63), small)


#: A moving average of 8- or 16-bit integers along an axis whose stride is past
#: ``SCIPY_STRIDE_BYTES`` runs as the engine's float32 tap sum up to this window: SciPy's
#: running sum is O(1) per output but copies such lines element by element (measured
#: 2026-12-01, uint8/int16 1024^2 axis 0 and 128^3 axes 0-1, windows 3-21: the tap sum
#: 1.5-16x faster; at 41 about level; along the last axis SciPy is 1.3-6x faster).
ENGINE_WINDOW = 21


def scipy_line_pass(backend, input, weights, output, dtype, divide=None):
    """Whether a pass is best left to ``scipy.ndimage`` itself: a 1-D pass on the CPU
    (the ``numpy`` backend; ``emulated`` runs the CUDA kernels, as on CuPy arrays) of
    integer data into an integer output, with weights that make the engine compute in
    float64 (SciPy reads the integer lines straight into its double line buffer; the
    engine would first convert the whole image to float64, 2-3x the memory traffic:
    measured 0.64x SciPy's time on a uint8 Gaussian; the exact float32 passes of
    integer taps on 8/16-bit data, a uint8 Sobel's, stay in the engine, 2.5-3.5x faster
    than SciPy's) or as a moving average (``divide``: SciPy's running sum costs O(1)
    per output, the engine's tap sum O(size); except short windows of 8/16-bit data
    along strided axes, :data:`ENGINE_WINDOW`).  The result is SciPy's truncation
    either way."""
    if not (backend.name == "numpy" and input.dtype.kind in "iu" and output.dtype.kind in "iu"
            and input.ndim == weights.ndim and sum(n > 1 for n in weights.shape) == 1):
        return False
    if divide is not None:
        axis = next(a for a, n in enumerate(weights.shape) if n > 1)
        return not (input.dtype.itemsize <= 2 and int(divide) <= ENGINE_WINDOW
                    and abs(input.strides[axis]) > SCIPY_STRIDE_BYTES)
    return dtype == np.float64 and weights.dtype.kind in "fiu"


def _scipy_line(input, weights, origins, mode, cval, output, divide):
    axis = next(a for a, n in enumerate(weights.shape) if n > 1)
    target = np.empty(input.shape, output.dtype) if isinstance(output, Fresh) else output
    if divide is not None:      # a moving average: weights are `divide` ones
        scipy_uniform_filter1d(input, int(divide), axis, target, NDIMAGE_NAMES[mode],
                               float(np.real(cval)), origins[axis])
    else:
        scipy_correlate1d(input, weights.reshape(-1).astype(np.float64), axis, target,
                          NDIMAGE_NAMES[mode], float(np.real(cval)), origins[axis])
    return target


def empty_result(output, xp):
    """The result of a filter of an empty input: ``output`` as allocated or given."""
    return xp.zeros(output.shape, output.dtype) if isinstance(output, Fresh) else output


def run_filter(xp, input, weights, origins, mode, cval, output, divide=None,
               plus_zero=False, footprint=False):
    """One pass: correlate ``input`` with the same-rank ``weights`` (already flipped or
    conjugated as the caller needs) and store it into ``output``; ``divide`` scales the
    sum afterwards (the uniform filter's exact sum, then one division, as SciPy).
    ``plus_zero``: a zero result is +0.0, as SciPy's N-D ``correlate``, whose sums start
    from +0.0 (its 1-D passes start from a tap's product, as the engine's tap loop); a
    host step makes it so unless the algorithm that ran sums from +0.0 itself
    (``Backend.plus_zero_sums``: the CUDA kernels).  ``footprint``: the taps SciPy's N-D
    ``correlate`` leaves out add nothing (:mod:`.footprint`)."""
    if output.dtype.kind == "c" and input.dtype.kind != "c" and weights.dtype.kind != "c":
        raise RuntimeError(f"array type not supported: a real filter writes no complex output "
                           f"(output has dtype {output.dtype}), as in SciPy")
    if not _computes(args.native_dtype(output.dtype)):
        raise RuntimeError(f"array type not supported: output has dtype {output.dtype}")
    if input.size == 0:
        return empty_result(output, xp)
    if footprint:
        weights = kept_weights(weights)
    dtype = compute_dtype(input.dtype, weights, mode, cval, output.dtype, xp)
    backend = backend_for(xp)
    if scipy_line_pass(backend, input, weights, output, dtype, divide):
        return _scipy_line(input, weights, origins, mode, cval, output, divide)
    if weights.size == 1 and divide is None:   # one tap: SciPy's input * weight
        y = program.host_step("scale", functools.partial(_one_tap, dtype, footprint), input,
                              weights)
        return store_output(_signed_zero(y, plus_zero), output, xp)
    call = filter_call(tuple(input.shape), tuple(weights.shape), tuple(origins), mode,
                       cval_for(cval, dtype) if mode == "constant" else 0, dtype)
    precheck(call.problem, backend)        # before the input is cast to the compute dtype
    operands = call.operands(input, weights, xp)
    if program.is_constant(weights):        # taps from the key (sigma): cast once, kept
        program.constant(operands.filter)
    method = "auto"
    if (output.dtype.kind in "biu" and dtype.kind == "f") or _line_on_cpu(backend, weights):
        method = tap_sum(call.problem, operands, backend)
    y, algorithm = run(call.problem, operands, backend, method=method)
    if footprint:
        y = kept_sum(call.problem, y, operands.activation, operands.filter)
    y = call.finish(y, xp)
    if divide is not None:                 # a host step: a compiled call replays it
        y = program.host_step("divide", functools.partial(_divided, divide), y)
    plus_zero = plus_zero and not backend.plus_zero_sums(algorithm)
    return store_output(_signed_zero(y, plus_zero), output, xp)


def _signed_zero(y, plus_zero):
    """``y`` with -0.0 made +0.0 where ``plus_zero`` asks for it (a float result)."""
    if plus_zero and y.dtype.kind in "fc":   # a host step: a compiled call replays it
        return program.host_step("plus zero", _plus_zero, y)
    return y


def _plus_zero(y):
    y += 0.0
    return y


def _line_on_cpu(backend, weights):
    """Whether a 1-D pass of at most :data:`LINE_TAPS` taps on the CPU runs the tap loop
    (SciPy's summation order, so float64 results are SciPy's) instead of the automatic
    choice, which picks ``gemm`` for such passes although its column matrix costs more
    than the taps (docs/benchmarks/ndimage_speed.md: the derivative filters)."""
    return (backend.name == "numpy" and sum(n > 1 for n in weights.shape) == 1
            and weights.size <= LINE_TAPS)


#: The longest 1-D pass the CPU path runs as the tap loop without asking the cost model
#: (a Gaussian's up to sigma 1.75 at truncate 4).
LINE_TAPS = 15


def _one_tap(dtype, footprint, x, w):
    """A one-tap pass: every output is its input times the tap, as SciPy's loop
    computes it (a zero keeps the product's sign); with ``footprint`` a zero tap of NumPy
    weights is left out (:mod:`.footprint`): +0.0 everywhere, NaN and infinite inputs
    too."""
    tap = w.reshape(()).astype(dtype)
    if footprint and isinstance(w, np.ndarray) and tap == 0:
        return np.zeros(x.shape, dtype)
    return x.astype(dtype) * tap


def _divided(divide, y):
    """The window sum over its size, with SciPy's sign of zero: SciPy's running sum
    starts from +0.0, so its zero averages are +0.0 (``+= 0.0`` turns -0.0 into +0.0
    and leaves every other value as it is)."""
    mean = y / divide
    mean += 0.0
    return mean


# ------------------------------------------------------------ N-D correlation
