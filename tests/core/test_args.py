"""Argument rules shared by every public function (``cupyconv.core.args``).

Each rule is checked directly here; tests/api/test_errors.py checks that the
public functions apply them before any work.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from cupyconv._vocabulary import FORWARD, GRAD_INPUT, GRAD_WEIGHT
from cupyconv.core import args


# ------------------------------------------------------------------- ints

@pytest.mark.parametrize("value", [3, np.int64(3), np.uint8(3), np.int32(3)])
def test_as_int_accepts_integers(value):
    got = args.as_int(value, "n")
    assert got == 3 and type(got) is int


@pytest.mark.parametrize("value", [True, np.bool_(False), 3.0, 1.5, "3", None, np.float64(2)])
def test_as_int_rejects_non_integers(value):
    with pytest.raises(TypeError, match=r"n must be an int, got "):
        args.as_int(value, "n")


def test_as_int_minimum_and_magnitude():
    assert args.as_int(0, "n", minimum=0) == 0
    with pytest.raises(ValueError, match=r"n must be >= 1, got n=0"):
        args.as_int(0, "n", minimum=1)
    assert args.as_int(args.MAX_EXTENT, "n") == args.MAX_EXTENT
    with pytest.raises(ValueError, match=r"n=\d+ is too large"):
        args.as_int(args.MAX_EXTENT + 1, "n")
    with pytest.raises(ValueError, match=r"too large"):
        args.as_int(-args.MAX_EXTENT - 1, "n")


def test_normalize_shape():
    assert args.normalize_shape([2, np.int64(0), 5], "s") == (2, 0, 5)
    assert args.normalize_shape(np.array([4, 1]), "s") == (4, 1)
    with pytest.raises(TypeError, match=r"s\[1\] must be an int, got 2.0"):
        args.normalize_shape((1, 2.0), "s")
    with pytest.raises(ValueError, match=r"s\[0\] must be >= 0"):
        args.normalize_shape((-1,), "s")
    for bad in (5, "12", None):
        with pytest.raises(TypeError, match=r"s must be a sequence of ints"):
            args.normalize_shape(bad, "s")


@pytest.mark.parametrize("limit, want", [(None, None), (1, 1), (2**30, 2**30),
                                         (np.int64(4096), 4096)])
def test_workspace_limit_valid(limit, want):
    got = args.normalize_workspace_limit(limit)
    assert got == want and (got is None or type(got) is int)


@pytest.mark.parametrize("limit, exc, match", [
    (0, ValueError, r"workspace_limit must be >= 1, got workspace_limit=0"),
    (-1, ValueError, r"workspace_limit must be >= 1, got workspace_limit=-1"),
    (1.5, TypeError, r"workspace_limit must be an int, got 1.5"),
    (1024.0, TypeError, r"workspace_limit must be an int"),
    (True, TypeError, r"workspace_limit must be an int, got True"),
    ("1GB", TypeError, r"workspace_limit must be an int"),
])
def test_workspace_limit_invalid(limit, exc, match):
    with pytest.raises(exc, match=match):
        args.normalize_workspace_limit(limit)


def test_workspace_limit_names_its_source():
    with pytest.raises(ValueError, match=r"cupyconv.config.workspace_limit must be >= 1"):
        args.normalize_workspace_limit(0, "cupyconv.config.workspace_limit")


# ------------------------------------------------------------------- axes

@pytest.mark.parametrize("axes, ndim, want", [
    (None, 3, (0, 1, 2)), (1, 3, (1,)), (-1, 3, (2,)), ([2, 0], 3, (0, 2)),
    ((np.int64(1), -3), 3, (0, 1)), (np.array([1]), 2, (1,)),
])
def test_normalize_axes(axes, ndim, want):
    assert args.normalize_axes(axes, ndim) == want


@pytest.mark.parametrize("axes, exc, match", [
    ([], ValueError, r"when provided, axes cannot be empty"),
    (3, ValueError, r"axes entry 3 is out of range for arrays with 3 dimensions"),
    ([-4], ValueError, r"axes entry -4 is out of range"),
    ([0, -3], ValueError, r"axes must be unique"),
    ([0.5], TypeError, r"axes must be integers"),
    ([True], TypeError, r"axes must be integers"),
    (1.0, TypeError, r"axes must be an int or a sequence of ints"),
    ("0", TypeError, r"axes must be an int or a sequence of ints"),
])
def test_normalize_axes_errors(axes, exc, match):
    with pytest.raises(exc, match=match):
        args.normalize_axes(axes, 3)


# ----------------------------------------------------------------- method

def test_methods_per_op():
    """The gradients accept 'auto', 'implicit_gemm', 'gemm' and 'fft' (and the input
    gradient 'winograd'); the forward pass every algorithm."""
    for m in ("auto", "direct", "implicit_gemm", "gemm", "fft", "winograd"):
        assert args.normalize_method(m, FORWARD) == m
    allowed = {GRAD_INPUT: ("auto", "implicit_gemm", "gemm", "fft", "winograd"),
               GRAD_WEIGHT: ("auto", "implicit_gemm", "gemm", "fft")}
    for op, methods in allowed.items():
        for m in methods:
            assert args.normalize_method(m, op) == m
        for m in ("direct", "separable", None) + (("winograd",) if op == GRAD_WEIGHT else ()):
            with pytest.raises(ValueError, match=r"Acceptable method flags are 'auto', "
                                                 r"'implicit_gemm', 'gemm'(,| or) 'fft'"):
                args.normalize_method(m, op)


# ------------------------------------------------------------------- cval

@pytest.mark.parametrize("cval, compute, mode", [
    (0, np.float64, "constant"), (2.5, np.float32, "constant"), (1 + 2j, np.complex64, "constant"),
    (-3, np.int64, "constant"), (4.0, np.int64, "constant"), (np.nan, np.float64, "constant"),
    (0, np.float64, "reflect"), (0.0, np.int64, "wrap"), (0j, np.complex128, "edge"),
])
def test_check_cval_accepts(cval, compute, mode):
    assert args.check_cval(cval, compute, mode) is cval


@pytest.mark.parametrize("cval, compute, mode, exc, match", [
    (1j, np.float64, "constant", TypeError, r"cval=1j is complex but the inputs are real"),
    (0.5, np.int64, "constant", TypeError, r"cval=0.5 is not an integer but the inputs are "
                                           r"integers \(int64\)"),
    (np.nan, np.int64, "constant", TypeError, r"is not an integer"),
    (2**63, np.int64, "constant", ValueError, r"does not fit the integer dtype int64"),
    ("zero", np.float64, "constant", TypeError, r"cval must be a number, got 'zero'"),
    ([1.0], np.float64, "constant", TypeError, r"cval must be a number"),
    (None, np.float64, "constant", TypeError, r"cval must be a number"),
    (10**400, np.float64, "constant", ValueError, r"does not fit a float64"),
    (1, np.float64, "reflect", ValueError, r"cval=1 is only used with padding_mode='constant'; "
                                          r"got padding_mode='reflect'"),
    (np.nan, np.float64, "edge", ValueError, r"only used with padding_mode='constant'"),
    (2j, np.complex128, "wrap", ValueError, r"only used with padding_mode='constant'"),
])
def test_check_cval_rejects(cval, compute, mode, exc, match):
    with pytest.raises(exc, match=match):
        args.check_cval(cval, compute, mode)


# ----------------------------------------------------------------- dtypes

@pytest.mark.parametrize("dtypes, result, compute", [
    (("float16", "float16"), "float16", "float32"),
    (("int8", "int8"), "int8", "int64"),
    (("uint8", "int64"), "int64", "int64"),
    (("uint64", "uint8"), "uint64", "uint64"),
    (("bool", "bool"), "bool", "int64"),
    (("int32", "float32"), "float64", "float64"),
    (("complex64", "float64"), "complex128", "complex128"),
])
def test_result_and_compute_dtypes(dtypes, result, compute):
    assert args.result_dtype(*dtypes) == np.dtype(result)
    assert args.compute_dtype(result) == np.dtype(compute)
    # the problem (storage) dtype: float16 stays float16, the rest as compute_dtype
    storage = np.float16 if result == "float16" else compute
    assert args.problem_dtype(result) == np.dtype(storage)


@pytest.mark.parametrize("dtypes, want", [
    (("int32",), "float64"), (("bool", "bool"), "float64"), (("uint8", "int16"), "float64"),
    (("float32", "float32"), "float32"), (("float16",), "float16"),
    (("complex64", "float32"), "complex64"), (("complex64", "float64"), "complex128"),
    (("int64", "complex64"), "complex128"),
])
def test_gradient_dtype(dtypes, want):
    """As the forward result, except that integers and bool give float64."""
    assert args.gradient_dtype(*dtypes) == np.dtype(want)


def test_cast_result_bool_means_nonzero():
    y = np.array([0, 2, -1], np.int64)
    np.testing.assert_array_equal(args.cast_result(y, np.bool_), [False, True, True])
    assert args.cast_result(y, np.int64) is y


@pytest.mark.parametrize("dtype", [object, "U1", "S1", "datetime64[D]"])
def test_check_dtype_rejects(dtype):
    with pytest.raises(TypeError, match=r"a has dtype .*, which is not supported"):
        args.check_dtype(np.empty(1, dtype), "a")


@pytest.mark.parametrize("dtype", [np.longdouble, np.clongdouble])
def test_check_dtype_accepts_long_double(dtype):
    """Long double runs on the CPU, as SciPy's direct path (the CUDA path declines it)."""
    assert args.check_dtype(np.empty(1, dtype), "a") == np.dtype(dtype)


# ----------------------------------------------------------- output extents

@given(n=st.integers(0, 40), k=st.integers(1, 7), pb=st.integers(0, 6), pa=st.integers(0, 6),
       stride=st.integers(1, 5), dilation=st.integers(1, 4))
def test_output_shape_counts_the_windows_inside_the_padded_input(n, k, pb, pa, stride,
                                                                 dilation):
    """Per axis, the extent is the number of window starts ``o * stride`` whose dilated
    window ends inside the padded input (Python's ``range`` counts them); below 1 exactly
    where there is none."""
    got = args.output_shape((n, 3), (k, 1), ((pb, pa), (0, 0)), (stride, 1), (dilation, 1))
    span = dilation * (k - 1) + 1
    want = len(range(0, n + pb + pa - span + 1, stride))
    assert got[1] == 3
    assert max(got[0], 0) == want
