"""Unusual inputs and settings: settings and operators refused when they are given
(not at the first call), non-native byte order computed as native, Winograd on long
double computed in long double, and a warning for non-finite data under the spreading
methods."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

import cupyconv

F32 = np.float32


# ------------------------------------------------ errors at the right time
#: Settings and values that must be refused on assignment, with the words the
#: message must contain (the setting and its allowed values).
BAD_SETTINGS = [
    ("precision", "bogus", ValueError, "'highest' or 'tf32'"),
    ("precision", None, ValueError, "'highest' or 'tf32'"),
    ("autotune", 1, TypeError, "True or False"),
    ("autotune", "yes", TypeError, "True or False"),
    ("workspace_limit", 0, ValueError, "positive int"),
    ("workspace_limit", 1.5, TypeError, "positive int"),
    ("workspace_limit", True, TypeError, "positive int"),
    ("winograd_max_error_growth", -1.0, ValueError, ">= 0"),
    ("winograd_max_error_growth", float("nan"), ValueError, ">= 0"),
    ("winograd_max_error_growth", "10", TypeError, ">= 0"),
    ("ndimage_integers", "exactly", ValueError, "'scipy' or 'exact'"),
    ("compiled_calls", 1, TypeError, "True or False"),
    ("prebuilt_launches", "no", TypeError, "True or False"),
    ("compiled_call_bytes", -1, ValueError, "int number of bytes >= 0"),
    ("compiled_call_bytes", 2.0, TypeError, "int number of bytes >= 0"),
    ("compiled_call_bytes", True, TypeError, "int number of bytes >= 0"),
    ("cuda_graphs", 1, TypeError, "True or False"),
    ("cpu_threads", 0, ValueError, "None or an int >= 1"),
    ("cpu_threads", True, TypeError, "None or an int >= 1"),
    ("progress", "off", TypeError, "True or False"),
]


@pytest.mark.parametrize("name, value, error, words", BAD_SETTINGS)
def test_config_is_validated_on_assignment(restore_config, name, value, error, words):
    before = getattr(cupyconv.config, name)
    with pytest.raises(error, match=f"cupyconv.config.{name}") as info:
        setattr(cupyconv.config, name, value)
    assert words in str(info.value)
    assert getattr(cupyconv.config, name) == before            # nothing was stored


def test_config_accepts_its_values_and_rejects_unknown_names(restore_config):
    config = cupyconv.config
    config.autotune = np.bool_(True)
    config.workspace_limit = np.int64(1 << 20)
    config.winograd_max_error_growth = 0
    config.precision = "tf32"
    assert (config.autotune, config.workspace_limit, config.precision) == (True, 1 << 20, "tf32")
    assert type(config.autotune) is bool and type(config.workspace_limit) is int
    with pytest.raises(AttributeError, match="no setting 'autotun'.*'autotune'"):
        config.autotun = True
    with pytest.raises(AttributeError, match="cannot be deleted"):
        del config.precision
    settings = {"autotune", "workspace_limit", "winograd_max_error_growth", "precision",
                "ndimage_integers", "compiled_calls", "prebuilt_launches",
                "compiled_call_bytes", "cuda_graphs", "cpu_threads", "progress", "kernels"}
    assert set(config.in_force._fields) == settings
    assert {k for k in vars(config) if not k.startswith("_")} == settings | {"in_force",
                                                                              "in_force_id"}


def test_the_settings_in_force_follow_every_assignment_and_cannot_be_assigned(
        restore_config):
    """``config.in_force`` (every setting, by name) and ``config.in_force_id`` follow each
    assignment of a setting; assigning or deleting them is refused, and nothing changes."""
    config = cupyconv.config
    config.precision = "tf32"
    config.workspace_limit = 4096
    assert config.in_force.precision == "tf32" and config.in_force.workspace_limit == 4096
    assert config.in_force == tuple(getattr(config, k) for k in config.in_force._fields)
    assert pickle.loads(pickle.dumps(config.in_force)) == config.in_force
    before = (config.in_force, config.in_force_id)
    for name in ("in_force", "in_force_id"):
        with pytest.raises(AttributeError, match=f"config.{name} is read-only"):
            setattr(config, name, 0)
        with pytest.raises(AttributeError, match=f"config.{name} is read-only"):
            delattr(config, name)
    assert (config.in_force, config.in_force_id) == before


def test_reading_the_settings_in_force_runs_no_python_code():
    """A compiled call's key reads ``config.in_force_id`` on every call: it is a plain
    module attribute, not a property whose frame the call would pay."""
    import sys
    calls = []
    sys.setprofile(lambda frame, event, arg: calls.append(event))
    try:
        cupyconv.config.in_force_id
        cupyconv.config.in_force
    finally:
        sys.setprofile(None)
    assert "call" not in calls


def _layer(dtype):
    return np.ones((1, 1, 6, 6), dtype), np.ones((1, 1, 3, 3), dtype)


def test_operator_fails_at_construction():
    with pytest.raises(ValueError, match="precision='tf32'.*the data is float64"):
        cupyconv.ConvOperator(np.ones((3, 3)), (8, 8), precision="tf32")
    with pytest.raises(ValueError, match="precision must be one of"):
        cupyconv.ConvOperator(np.ones((3, 3), F32), (8, 8), precision="fast")
    with pytest.raises(ValueError, match="precision='tf32'.*the data is float64"):
        cupyconv.ConvOperator.from_conv(np.ones((1, 1, 3)), (1, 1, 5), precision="tf32")
    with pytest.raises(TypeError, match="w has dtype object"):
        cupyconv.ConvOperator.from_conv(np.ones((1, 1, 3), dtype=object), (1, 1, 5))
    op = cupyconv.ConvOperator(np.ones((3, 3), F32), (8, 8), precision="tf32")   # float32: fine
    assert op.matvec(np.ones(64, F32)).dtype == F32


INT_TF32_CALLS = {
    "grad_input": lambda x, w: cupyconv.conv_grad_input(np.ones((1, 1, 4, 4), x.dtype), w,
                                                        x.shape, precision="tf32"),
    "grad_weight": lambda x, w: cupyconv.conv_grad_weight(x, np.ones((1, 1, 4, 4), x.dtype),
                                                          w.shape, precision="tf32"),
    "transpose": lambda x, w: cupyconv.conv_transpose(x, w, precision="tf32"),
    "conv": lambda x, w: cupyconv.conv(x, w, precision="tf32"),
}


@pytest.mark.parametrize("name", sorted(INT_TF32_CALLS))
def test_tf32_error_names_the_data_dtype(name):
    x, w = _layer(np.int32)
    with pytest.raises(ValueError, match="precision='tf32'") as info:
        INT_TF32_CALLS[name](x, w)
    assert "the data is int32" in str(info.value)


# ------------------------------------------------ non-native byte order
#: Big-endian dtypes (non-native on every machine the suite runs on, checked by _big).
BIG_ENDIAN = (">f8", ">f4", ">c16", ">i4")
#: Relative tolerance of a SciPy comparison, by result dtype, with its reason.
RESULT_RTOL = {
    np.dtype(np.float64): 1e-12,      # the libraries may pick direct vs fft (~1e-15 each)
    np.dtype(np.float32): 1e-5,       # fft's float32 roundoff on 42-element images
    np.dtype(np.complex128): 1e-12,   # as float64
    np.dtype(np.int32): 0.0,          # integers are exact on every path
}


def _big(rng, shape, dtype):
    a = rng.integers(-3, 4, size=shape) if np.dtype(dtype).kind == "i" else \
        rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    a = a.astype(dtype)
    assert not a.dtype.isnative
    return a


def _native(a):
    return a.astype(a.dtype.newbyteorder("="))


#: SciPy-named entry points: one body, run with scipy.signal and cupyconv.
SIGNAL_BODIES = {
    "convolve": lambda m, a, b: m.convolve(a, b),
    "correlate-same": lambda m, a, b: m.correlate(a, b, mode="same"),
    "convolve-valid-direct": lambda m, a, b: m.convolve(a, b, "valid", method="direct"),
    "convolve2d": lambda m, a, b: m.convolve2d(a, b, boundary="wrap"),
    "correlate2d": lambda m, a, b: m.correlate2d(a, b, mode="same"),
    "fftconvolve": lambda m, a, b: m.fftconvolve(a, b),
    "oaconvolve": lambda m, a, b: m.oaconvolve(a, b, mode="same"),
}


@pytest.mark.parametrize("dtype", BIG_ENDIAN)
@pytest.mark.parametrize("name", sorted(SIGNAL_BODIES))
def test_big_endian_signal_functions_match_scipy(name, dtype, rng):
    import scipy.signal

    a, b = _big(rng, (6, 7), dtype), _big(rng, (3, 2), dtype)
    ref = SIGNAL_BODIES[name](scipy.signal, a, b)
    got = SIGNAL_BODIES[name](cupyconv, a, b)
    assert got.dtype == ref.dtype and got.dtype.isnative
    rtol = RESULT_RTOL[ref.dtype]
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol * float(np.abs(ref).max()))
    assert cupyconv.choose_conv_method(a, b) == cupyconv.choose_conv_method(_native(a), b)


def _conv_calls(rng, dtype):
    """``{name: call(arrays)}`` of the conv-style entry points and their big-endian operands."""
    x, w = _big(rng, (2, 2, 6, 6), dtype), _big(rng, (3, 2, 3, 3), dtype)
    dy, bias = _big(rng, (2, 3, 4, 4), dtype), _big(rng, (3,), dtype)
    g = _big(rng, (8, 8), dtype)
    calls = {
        "conv": (lambda x, w, bias: cupyconv.conv(x, w, bias, padding=1), (x, w, bias)),
        "conv_grad_input": (lambda dy, w: cupyconv.conv_grad_input(dy, w, x.shape), (dy, w)),
        "conv_grad_weight": (lambda x, dy: cupyconv.conv_grad_weight(x, dy, w.shape), (x, dy)),
        "conv_grad_bias": (lambda dy: cupyconv.conv_grad_bias(dy), (dy,)),
        "conv_transpose": (lambda dy, w, b: cupyconv.conv_transpose(dy, w[:, :2], b[:2]),
                           (dy, w, bias)),
        "convolve_vjp": (lambda a, b, g: cupyconv.grad.convolve_vjp(a, b, g, "full"),
                         (x[0, 0], w[0, 0, :3, :3], g)),
        "plan_conv": (lambda x, w: cupyconv.plan_conv(x.shape, w.shape, x.dtype)(x, w), (x, w)),
        "ConvOperator": (lambda k, v: cupyconv.ConvOperator(k, (6, 6)).matvec(v),
                         (w[0, 0], x[0, 0].ravel())),
        "from_conv": (lambda w, v: cupyconv.ConvOperator.from_conv(w, x.shape, padding=1)
                      .rmatvec(v), (w, _big(rng, (2 * 3 * 36,), dtype))),
    }
    return calls


@pytest.mark.parametrize("dtype", [">f8", ">i4"])
def test_big_endian_conv_and_gradients_equal_native(dtype, rng):
    """The byte-swapped copy holds the same numbers: results are bitwise the native ones."""
    for name, (call, operands) in _conv_calls(rng, dtype).items():
        got = call(*operands)
        ref = call(*(_native(a) for a in operands))
        for g, r in zip(got if isinstance(got, tuple) else (got,),
                        ref if isinstance(ref, tuple) else (ref,)):
            assert g.dtype == r.dtype and g.dtype.isnative, name
            np.testing.assert_array_equal(g, r, err_msg=name)


def test_big_endian_out_arrays(rng):
    import scipy.signal

    a, b = _big(rng, (6, 7), ">f8"), _big(rng, (3, 2), ">f8")
    out = np.zeros((8, 8), ">f8")
    assert cupyconv.convolve(a, b, out=out) is out
    np.testing.assert_allclose(out, scipy.signal.convolve(a, b), rtol=1e-12)
    x, w = _big(rng, (1, 2, 5, 5), ">f4"), _big(rng, (3, 2, 3, 3), ">f4")
    y = np.zeros((1, 3, 3, 3), ">f4")
    assert cupyconv.conv(x, w, out=y) is y
    np.testing.assert_array_equal(y, cupyconv.conv(_native(x), _native(w)))
    with pytest.raises(TypeError, match="cannot write a float32 result into out of dtype >i4"):
        cupyconv.conv(x, w, out=y.astype(">i4"))


#: ``cupyconv.ndimage`` calls, one body run with scipy.ndimage and cupyconv.ndimage.
NDIMAGE_BODIES = {
    "correlate": lambda m, a, w: m.correlate(a, w, mode="nearest"),
    "convolve-output-array": lambda m, a, w: m.convolve(a, w, np.zeros(a.shape, ">f8")),
    "convolve-output-dtype": lambda m, a, w: m.convolve(a, w, output=">f4", mode="wrap"),
    "correlate1d": lambda m, a, w: m.correlate1d(a, w[0], axis=1),
    "gaussian_filter": lambda m, a, w: m.gaussian_filter(a, 1.0),
    "uniform_filter1d": lambda m, a, w: m.uniform_filter1d(a, 3, axis=0),
}


@pytest.mark.parametrize("dtype", [">f8", ">i4"])
@pytest.mark.parametrize("name", sorted(NDIMAGE_BODIES))
def test_big_endian_ndimage_matches_scipy(name, dtype, rng):
    import scipy.ndimage

    from cupyconv import ndimage

    a, w = _big(rng, (7, 6), dtype), _big(rng, (3, 3), ">f8")
    ref = NDIMAGE_BODIES[name](scipy.ndimage, a, w)
    got = NDIMAGE_BODIES[name](ndimage, a, w)
    assert got.dtype == ref.dtype          # SciPy's: native, or the output= asked for
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6 * float(np.abs(ref).max()))


def test_big_endian_dask(rng):
    da = pytest.importorskip("dask.array")
    import scipy.signal

    from cupyconv import dask as cdask

    a, b = _big(rng, (9, 8), ">f8"), _big(rng, (3, 3), ">f8")
    got = cdask.convolve(da.from_array(a, chunks=4), b, mode="same").compute()
    np.testing.assert_allclose(got, scipy.signal.convolve(a, b, mode="same"), rtol=1e-12)
    assert got.dtype == np.float64
    x, w, bias = _big(rng, (2, 2, 8, 8), ">f4"), _big(rng, (3, 2, 3, 3), ">f4"), \
        _big(rng, (3,), ">f4")
    got = cdask.conv(da.from_array(x, chunks=(1, 2, 4, 4)), w, bias, padding=1).compute()
    np.testing.assert_allclose(got, cupyconv.conv(_native(x), _native(w), _native(bias),
                                                  padding=1), rtol=1e-6, atol=1e-5)


# ------------------------------------------------ winograd on long double, non-finite
LONG_DOUBLE_IS_WIDER = np.finfo(np.longdouble).eps < np.finfo(np.float64).eps

#: Winograd calls on long double data, each with its long double ``direct``/``gemm`` reference.
WINOGRAD_CALLS = {
    "conv": lambda x, w, m: cupyconv.conv(x, w, padding=1, method=m),
    "conv-stride2": lambda x, w, m: cupyconv.conv(x, w, stride=2, method=m),
    "conv_grad_input": lambda x, w, m: cupyconv.conv_grad_input(
        x[:, :, :8, :8].repeat(2, axis=1)[:, :3], w, (1, 2, 10, 10),
        method=m if m == "winograd" else "gemm"),
    "convolve": lambda x, w, m: cupyconv.convolve(x[0, 0], w[0, 0], method=m),
}


@pytest.mark.skipif(not LONG_DOUBLE_IS_WIDER, reason="long double is float64 here")
@pytest.mark.parametrize("dtype", [np.longdouble, np.clongdouble])
@pytest.mark.parametrize("name", sorted(WINOGRAD_CALLS))
def test_winograd_computes_long_double(name, dtype, rng):
    x = rng.standard_normal((1, 2, 10, 10)).astype(dtype)
    w = rng.standard_normal((3, 2, 3, 3)).astype(dtype)
    if np.dtype(dtype).kind == "c":
        x, w = x + 1j * rng.standard_normal(x.shape), w - 1j * rng.standard_normal(w.shape)
    got = WINOGRAD_CALLS[name](x, w, "winograd")
    ref = WINOGRAD_CALLS[name](x, w, "direct")
    assert got.dtype == np.dtype(dtype)
    err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
    # long double's u is 5.4e-20; the tiles' error growth (<= 10 by the gate) times a few
    # units of roundoff stays far below float64's u (1.1e-16, where float64 transforms
    # left it: 4e-16 before the fix)
    assert err < 200 * float(np.finfo(np.longdouble).eps), err


@pytest.mark.parametrize("method", ["winograd", "fft"])
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")   # NumPy's own
def test_explicit_spreading_methods_warn_on_non_finite_data(method):
    x = np.ones((1, 1, 12, 12))
    x[0, 0, 3, 3] = np.inf
    w = np.ones((1, 1, 3, 3))
    with pytest.warns(RuntimeWarning, match=f"Use of {method} convolution on input with NAN "
                                            "or inf results in NAN or inf output"):
        y = cupyconv.conv(x, w, method=method)
    assert np.isnan(y).any()                  # what the warning is about
    with pytest.warns(RuntimeWarning, match=f"Use of {method} convolution"):
        cupyconv.conv_grad_input(x[:, :, :10, :10], w, (1, 1, 12, 12), method=method)
    with pytest.warns(RuntimeWarning, match=f"Use of {method} convolution"):
        cupyconv.convolve(x[0, 0], w[0, 0], method=method)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")        # finite data: no warning
        cupyconv.conv(np.ones((1, 1, 12, 12)), w, method=method)
    y = cupyconv.conv(x, w, method="direct")  # the local result, for contrast
    assert not np.isnan(y).any() and np.isinf(y).sum() == 9
