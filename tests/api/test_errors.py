"""Bad input: a table of cases pinned by exception type AND message
(PyTorch OpInfo ``ErrorInput`` style), each raising before any work.

"Before any work" is enforced by fault injection: every backend's ``run``
and the algorithms behind it are replaced by functions that fail the test
if called (the dispatcher itself may run: it validates ``workspace_limit``
and chooses, but computes nothing).
"""
from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

import cupyconv
from cupyconv.backends import fft_conv
from cupyconv.backends.cuda import CudaBackend, algorithms, gradients
from cupyconv.backends.numpy import NumpyBackend, direct, gemm
from helpers import FakeCupyArray

V1 = np.ones(5)
X = np.ones((2, 4, 6, 6))              # (N, C_in, H, W)
W = np.ones((6, 2, 3, 3))              # groups=2 compatible
conv, convolve, correlate = cupyconv.conv, cupyconv.convolve, cupyconv.correlate

#: (id, thunk, exception type, message regex)
SIGNAL_ERRORS = [
    ("rank-mismatch", lambda: convolve(V1, np.ones((2, 2))), ValueError,
     r"in1 and in2 should have the same dimensionality; got in1.shape=\(5,\) and "
     r"in2.shape=\(2, 2\)"),
    ("rank-mismatch-0d", lambda: correlate(np.ones(1), np.array(2.0)), ValueError,
     r"same dimensionality"),
    ("unknown-mode", lambda: convolve(V1, V1, mode="circular"), ValueError,
     r"Acceptable mode flags are 'full', 'same' or 'valid', not mode='circular'"),
    ("unknown-method", lambda: correlate(V1, V1, method="hartley"), ValueError,
     r"Acceptable method flags are 'auto', 'direct', 'implicit_gemm', 'gemm', 'fft', "
     r"'separable' or 'winograd'; got method='hartley'"),
    ("valid-neither-covers", lambda: convolve(np.ones((2, 5)), np.ones((3, 2)), "valid"),
     ValueError, r"For 'valid' mode, one must be at least as large as the other in every "
                 r"dimension; got in1.shape=\(2, 5\), in2.shape=\(3, 2\)"),
    ("none-input", lambda: convolve(None, V1), TypeError,
     r"in1 must be array-like \(an array, a number or nested sequences of numbers\); got "
     r"NoneType None"),
    ("dict-input", lambda: correlate(V1, {"a": 1}), TypeError, r"in2 must be array-like"),
    ("object-dtype", lambda: convolve(np.array([1, 2], dtype=object), np.ones(2)), TypeError,
     r"in1 has dtype object, which is not supported"),
    ("str-dtype", lambda: convolve(np.ones(2), np.array(["a", "b"])), TypeError,
     r"in2 has dtype <U1, which is not supported"),
    ("bytes-dtype", lambda: correlate(np.array([b"a", b"b"]), np.ones(2)), TypeError,
     r"in1 has dtype \|S1, which is not supported"),
    ("datetime", lambda: convolve(np.ones(3), np.array(["2020-01-01"], "datetime64[D]")),
     TypeError, r"in2 has dtype datetime64\[D\], which is not supported"),
    ("numpy-and-cupy", lambda: convolve(V1, FakeCupyArray((3,))), TypeError,
     r"in1 is a NumPy \(CPU\) array, in2 is a CuPy \(GPU\) array"),
    ("cupy-and-numpy", lambda: correlate(FakeCupyArray((3,)), V1), TypeError,
     r"in1 is a CuPy \(GPU\) array, in2 is a NumPy \(CPU\) array"),
    ("axes-empty", lambda: convolve(np.ones((2, 3)), np.ones((2, 2)), axes=[]), ValueError,
     r"when provided, axes cannot be empty"),
    ("axes-out-of-range", lambda: convolve(np.ones((2, 3)), np.ones((2, 2)), axes=2),
     ValueError, r"axes entry 2 is out of range for arrays with 2 dimensions"),
    ("axes-negative-out-of-range",
     lambda: convolve(np.ones((2, 3)), np.ones((2, 2)), axes=[-3]), ValueError,
     r"axes entry -3 is out of range"),
    ("axes-repeated", lambda: convolve(np.ones((2, 3)), np.ones((2, 2)), axes=[1, -1]),
     ValueError, r"axes must be unique"),
    ("axes-not-int", lambda: convolve(np.ones((2, 3)), np.ones((2, 2)), axes=[0.5]),
     TypeError, r"axes must be integers, got axes=\[0.5\]"),
    ("axes-bool", lambda: convolve(np.ones((2, 3)), np.ones((2, 2)), axes=[True]),
     TypeError, r"axes must be integers"),
    ("axes-batch-mismatch", lambda: convolve(np.ones((3, 4)), np.ones((2, 2)), axes=1),
     ValueError, r"incompatible shapes for in1 and in2: \(3, 4\) and \(2, 2\) \(axis 0 is "
                 r"not convolved and must match or be 1\)"),
    ("out-wrong-shape", lambda: convolve(V1, V1, out=np.empty(8)), ValueError,
     r"out has shape \(8,\), expected \(9,\)"),
    ("out-complex-into-real", lambda: convolve(V1, V1 * 1j, out=np.empty(9)), TypeError,
     r"out has real dtype float64 but the result is complex \(complex128\)"),
    ("out-float-into-int", lambda: correlate(V1, V1, out=np.empty(9, np.int64)), TypeError,
     r"cannot write a float64 result into out of dtype int64"),
    ("out-on-other-device", lambda: convolve(V1, V1, out=FakeCupyArray((9,))), TypeError,
     r"out is a CuPy \(GPU\) array"),
    ("out-0d-wrong-shape", lambda: convolve(2.0, 3.0, out=np.empty(1)), ValueError,
     r"out has shape \(1,\), expected \(\)"),
    ("choose-unknown-mode", lambda: cupyconv.choose_conv_method(V1, V1, mode="x"), ValueError,
     r"Acceptable mode flags"),
    ("choose-rank-mismatch", lambda: cupyconv.choose_conv_method(V1, np.ones((1, 1))),
     ValueError, r"same dimensionality"),
]

CONV_ERRORS = [
    ("rank-mismatch", lambda: conv(X, W[0]), ValueError,
     r"x and w must have the same number of dimensions; got x.shape=\(2, 4, 6, 6\) "
     r"\(ndim 4\) and w.shape=\(2, 3, 3\) \(ndim 3\)"),
    ("no-spatial-axis", lambda: conv(np.ones((2, 3)), np.ones((4, 3))), ValueError,
     r"at least one spatial axis; got x.ndim=2"),
    ("rank-9-beyond-max", lambda: conv(np.ones((1, 1) + (1,) * 9), np.ones((1, 1) + (1,) * 9)),
     ValueError, r"spatial rank 9 is not supported; the maximum is 8"),
    ("unknown-padding-mode", lambda: conv(X, W, groups=2, padding_mode="mirrored"), ValueError,
     r"padding_mode must be 'constant', 'reflect', 'symmetric', 'wrap' or 'edge' \(or "
     r"PyTorch's 'zeros', 'replicate' or 'circular'\); got 'mirrored'"),
    ("unknown-layout", lambda: conv(X, W, groups=2, layout="NHWC"), ValueError,
     r"layout must be 'channels_first' or 'channels_last'; got 'NHWC'"),
    ("unknown-method", lambda: conv(X, W, groups=2, method="hartley"), ValueError,
     r"Acceptable method flags .*got method='hartley'"),
    ("stride-zero", lambda: conv(X, W, groups=2, stride=0), ValueError,
     r"stride must be >= 1 on every axis; got stride\[0\]=0 \(non-positive stride is not "
     r"supported\)"),
    ("stride-negative-axis1", lambda: conv(X, W, groups=2, stride=(1, -2)), ValueError,
     r"got stride\[1\]=-2 \(non-positive stride"),
    ("stride-wrong-length", lambda: conv(X, W, groups=2, stride=(1, 1, 1)), ValueError,
     r"stride must have one entry per spatial axis \(2\), got 3"),
    ("stride-float", lambda: conv(X, W, groups=2, stride=(1, 1.5)), TypeError,
     r"stride\[1\] must be an int, got 1.5"),
    ("dilation-zero", lambda: conv(X, W, groups=2, dilation=(0, 1)), ValueError,
     r"dilation must be >= 1 on every axis; got dilation\[0\]=0 \(dilation should be "
     r"greater than zero\)"),
    ("padding-negative", lambda: conv(X, W, groups=2, padding=-1), ValueError,
     r"negative padding is not supported; got padding\[0\]=\(-1, -1\)"),
    ("padding-negative-after", lambda: conv(X, W, groups=2, padding=((0, 0), (1, -1))),
     ValueError, r"negative padding is not supported; got padding\[1\]=\(1, -1\)"),
    ("padding-bad-string", lambda: conv(X, W, groups=2, padding="full"), ValueError,
     r"padding must be an int, a sequence, 'valid' or 'same' \(any case\); got 'full'"),
    ("padding-wrong-length", lambda: conv(X, W, groups=2, padding=(1, 1, 1)), ValueError,
     r"padding must have one entry per spatial axis \(2\), got 3"),
    ("padding-triple", lambda: conv(X, W, groups=2, padding=((1, 1, 1), (0, 0))), ValueError,
     r"padding\[0\] must be an int or a \(before, after\) pair"),
    ("groups-not-dividing-cin", lambda: conv(np.ones((1, 3, 5)), np.ones((4, 1, 2)), groups=2),
     ValueError, r"input channels C_in=3 are not divisible by groups=2"),
    ("groups-not-dividing-cout", lambda: conv(np.ones((1, 4, 5)), np.ones((3, 2, 2)), groups=2),
     ValueError, r"output channels C_out=3 are not divisible by groups=2"),
    ("groups-zero", lambda: conv(X, W, groups=0), ValueError, r"groups must be >= 1, got groups=0"),
    ("groups-float", lambda: conv(X, W, groups=2.0), TypeError, r"groups must be an int, got 2.0"),
    ("cin-mismatch", lambda: conv(X, W, groups=1), ValueError,
     r"weight channel axis has size 2, expected C_in/groups = 4/1 = 4"),
    ("cin-mismatch-channels-last", lambda: conv(np.ones((1, 5, 5, 3)), np.ones((2, 2, 2, 4)),
                                                layout="channels_last"),
     ValueError, r"weight channel axis has size 4, expected C_in/groups = 3/1 = 3"),
    ("channels-last-arrays-without-layout",
     lambda: conv(np.ones((2, 6, 6, 8)), np.ones((4, 3, 3, 8))), ValueError,
     r"weight channel axis has size 3, expected C_in/groups = 6/1 = 6; the channel axes fit "
     r"layout='channels_last' \(C_in=8, C_in/groups=8\): pass layout='channels_last'"),
    ("channels-last-arrays-groups-without-layout",
     lambda: conv(np.ones((2, 5, 5, 8)), np.ones((4, 3, 3, 4)), groups=2), ValueError,
     r"input channels C_in=5 are not divisible by groups=2; the channel axes fit "
     r"layout='channels_last' \(C_in=8, C_in/groups=4\)"),
    ("channels-first-arrays-as-channels-last",
     lambda: conv(np.ones((2, 8, 6, 6)), np.ones((4, 8, 3, 3)), layout="channels_last"),
     ValueError, r"pass layout='channels_first'"),
    ("empty-output-axis1", lambda: conv(np.ones((1, 1, 8, 2)), np.ones((1, 1, 3, 3))), ValueError,
     r"empty output on spatial axis 1: padded input size 2 \(size 2 \+ padding \(0, 0\)\) is "
     r"smaller than the dilated kernel size 3 \(kernel 3, dilation 1\)"),
    ("empty-output-dilation", lambda: conv(np.ones((1, 1, 5)), np.ones((1, 1, 3)), dilation=3),
     ValueError, r"empty output on spatial axis 0: .* dilated kernel size 7 \(kernel 3, "
                 r"dilation 3\)"),
    ("kernel-empty-axis", lambda: conv(np.ones((1, 1, 5)), np.ones((1, 1, 0))), ValueError,
     r"w has an empty spatial axis 0 \(size 0\)"),
    ("bias-wrong-shape", lambda: conv(X, W, np.ones(5), groups=2), ValueError,
     r"bias must have shape \(C_out,\) = \(6,\); got \(5,\)"),
    ("bias-2d", lambda: conv(X, W, np.ones((6, 1)), groups=2), ValueError,
     r"bias must have shape \(C_out,\) = \(6,\); got \(6, 1\)"),
    ("out-wrong-shape", lambda: conv(X, W, groups=2, out=np.empty((2, 6, 4, 5))), ValueError,
     r"out has shape \(2, 6, 4, 5\), expected \(2, 6, 4, 4\)"),
    ("out-layout-shape", lambda: conv(X, W, groups=2, out=np.empty((2, 4, 4, 6))), ValueError,
     r"expected \(2, 6, 4, 4\)"),
    ("out-complex-into-real", lambda: conv(X * 1j, W, groups=2, out=np.empty((2, 6, 4, 4))),
     TypeError, r"out has real dtype float64 but the result is complex \(complex128\)"),
    ("object-dtype", lambda: conv(X.astype(object), W, groups=2), TypeError,
     r"x has dtype object, which is not supported"),
    ("datetime-bias", lambda: conv(X, W, np.array(["2020"] * 6, "datetime64[D]"), groups=2),
     TypeError, r"bias has dtype datetime64\[D\], which is not supported"),
    ("cval-complex-real-data", lambda: conv(X, W, groups=2, padding=1, cval=1j), TypeError,
     r"cval=1j is complex but the inputs are real \(float64\)"),
    ("cval-fraction-int-data", lambda: conv(X.astype(int), W.astype(int), groups=2, cval=0.5),
     TypeError, r"cval=0.5 is not an integer but the inputs are integers \(int64\)"),
    ("cval-not-a-number", lambda: conv(X, W, groups=2, cval="zero"), TypeError,
     r"cval must be a number, got 'zero'"),
    ("cval-with-reflect", lambda: conv(X, W, groups=2, padding=1, padding_mode="reflect",
                                       cval=1.0), ValueError,
     r"cval=1.0 is only used with padding_mode='constant'; got padding_mode='reflect'"),
    ("workspace-limit-zero", lambda: conv(X, W, groups=2, workspace_limit=0), ValueError,
     r"workspace_limit must be >= 1, got workspace_limit=0"),
    ("workspace-limit-negative", lambda: conv(X, W, groups=2, workspace_limit=-1), ValueError,
     r"workspace_limit must be >= 1, got workspace_limit=-1"),
    ("workspace-limit-float", lambda: conv(X, W, groups=2, workspace_limit=1.5), TypeError,
     r"workspace_limit must be an int, got 1.5"),
    ("numpy-x-cupy-w", lambda: conv(X, FakeCupyArray(W.shape)), TypeError,
     r"x is a NumPy \(CPU\) array, w is a CuPy \(GPU\) array; move them with cupy.asarray"),
    ("cupy-bias", lambda: conv(X, W, FakeCupyArray((6,)), groups=2), TypeError,
     r"bias is a CuPy \(GPU\) array"),
    ("ndimage-mode-name", lambda: conv(X, W, groups=2, padding=1, padding_mode="mirror"),
     ValueError, r"padding_mode='mirror' is scipy.ndimage's name; padding_mode takes NumPy's "
     r"names: use 'reflect' \(ndimage's 'reflect' is NumPy's 'symmetric'"),
    ("ndimage-nearest-name", lambda: conv(X, W, groups=2, padding=1, padding_mode="nearest"),
     ValueError, r"use 'edge'"),
]


#: Gradients, transposed convolution and plans (the same rules, same messages).
DY = np.ones((2, 6, 4, 4))
GRAD_ERRORS = [
    ("grad-input-method-direct",
     lambda: cupyconv.conv_grad_input(DY, W, X.shape, groups=2, method="direct"), ValueError,
     r"Acceptable method flags are 'auto', 'implicit_gemm', 'gemm', 'fft' or 'winograd'; "
     r"got method='direct'"),
    ("grad-weight-method-implicit-on-numpy",       # the CUDA path only
     lambda: cupyconv.conv_grad_weight(X, DY, W.shape, groups=2, method="implicit_gemm"),
     ValueError, r"method='implicit_gemm' cannot compute the grad_weight on the numpy "
                 r"backend; choose 'auto', 'gemm' or 'fft'"),
    ("transpose-method-direct", lambda: cupyconv.conv_transpose(DY, W[:, :1], method="direct"),
     ValueError, r"Acceptable method flags are 'auto', 'implicit_gemm', 'gemm', 'fft' or "
                 r"'winograd'"),
    ("grad-input-workspace-zero",
     lambda: cupyconv.conv_grad_input(DY, W, X.shape, groups=2, workspace_limit=0), ValueError,
     r"workspace_limit must be >= 1"),
    ("grad-weight-workspace-float",
     lambda: cupyconv.conv_grad_weight(X, DY, W.shape, groups=2, workspace_limit=1.5),
     TypeError, r"workspace_limit must be an int"),
    ("grad-weight-cval-with-wrap",
     lambda: cupyconv.conv_grad_weight(X, DY, W.shape, groups=2, padding=1,
                                       padding_mode="wrap", cval=2), ValueError,
     r"cval=2 is only used with padding_mode='constant'"),
    ("grad-input-shape-float",
     lambda: cupyconv.conv_grad_input(DY, W, (2, 4, 6.0, 6), groups=2), TypeError,
     r"input_shape\[2\] must be an int, got 6.0"),
    ("plan-workspace-negative",
     lambda: cupyconv.plan_conv(X.shape, W.shape, np.float64, groups=2, workspace_limit=-1),
     ValueError, r"workspace_limit must be >= 1"),
    ("plan-shape-float",
     lambda: cupyconv.plan_conv((2, 4, 6, 6.5), W.shape, np.float64, groups=2), TypeError,
     r"x_shape\[3\] must be an int, got 6.5"),
    ("plan-cval-with-edge",
     lambda: cupyconv.plan_conv(X.shape, W.shape, np.float64, groups=2, padding_mode="edge",
                                cval=1), ValueError, r"only used with padding_mode='constant'"),
    ("plan-unsafe-x-dtype",
     lambda: cupyconv.plan_conv(X.shape, W.shape, np.float32, groups=2)(X, W.astype(np.float32)),
     TypeError, r"x has dtype float64, which a plan for float32 cannot hold exactly; make a "
                r"plan for float64"),
    ("plan-unsafe-w-dtype",
     lambda: cupyconv.plan_conv(X.shape, W.shape, np.int32, groups=2)(
         X.astype(np.int8), W.astype(np.int64)), TypeError,
     r"w has dtype int64, which a plan for int32 cannot hold exactly"),
    ("plan-complex-into-real",
     lambda: cupyconv.plan_conv(X.shape, W.shape, np.float64, groups=2)(X * 1j, W), TypeError,
     r"x has dtype complex128, which a plan for float64 cannot hold exactly; make a plan "
     r"for complex128"),
    ("plan-wrong-shape",
     lambda: cupyconv.plan_conv(X.shape, W.shape, np.float64, groups=2)(X[:1], W), ValueError,
     r"x has shape \(1, 4, 6, 6\); the plan was made for \(2, 4, 6, 6\)"),
    ("plan-object-dtype", lambda: cupyconv.plan_conv(X.shape, W.shape, object), TypeError,
     r"^dtype object is not supported; use bool"),
]


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if any algorithm starts: errors must come first."""
    def forbidden(*args, **kwargs):
        raise AssertionError("work started before the input was rejected")
    for backend in (NumpyBackend, CudaBackend):
        monkeypatch.setattr(backend, "run", forbidden)
    for module, name in ((direct, "conv_direct"), (gemm, "run"), (fft_conv, "run"),
                         (algorithms, "run"), (gradients, "grad_input"),
                         (gradients, "grad_weight")):
        monkeypatch.setattr(module, name, forbidden)


@pytest.mark.parametrize("thunk,exc,regex", [c[1:] for c in SIGNAL_ERRORS],
                         ids=[c[0] for c in SIGNAL_ERRORS])
def test_signal_errors(thunk, exc, regex, no_work):
    with pytest.raises(exc, match=regex):
        thunk()


@pytest.mark.parametrize("thunk,exc,regex", [c[1:] for c in CONV_ERRORS],
                         ids=[c[0] for c in CONV_ERRORS])
def test_conv_errors(thunk, exc, regex, no_work):
    with pytest.raises(exc, match=regex):
        thunk()


@pytest.mark.parametrize("thunk,exc,regex", [c[1:] for c in GRAD_ERRORS],
                         ids=[c[0] for c in GRAD_ERRORS])
def test_grad_and_plan_errors(thunk, exc, regex, no_work):
    with pytest.raises(exc, match=regex):
        thunk()


@pytest.mark.parametrize("limit, exc", [(0, ValueError), (-1, ValueError), (1.5, TypeError)])
def test_workspace_limit_checked_for_empty_problems(limit, exc):
    """An empty problem computes nothing, but a bad workspace_limit is still an error
    (as it is for every other problem): the argument is validated, not ignored."""
    x0 = np.ones((0, 4, 6, 6))
    with pytest.raises(exc, match="workspace_limit"):
        conv(x0, W, groups=2, workspace_limit=limit)
    with pytest.raises(exc, match="workspace_limit"):
        cupyconv.conv_grad_input(np.ones((0, 6, 4, 4)), W, x0.shape, groups=2,
                                 workspace_limit=limit)


def test_safe_casts_into_a_plan_run(rng):
    """The other side of plan-unsafe-*: inputs that cast safely are accepted."""
    plan = cupyconv.plan_conv(X.shape, W.shape, np.float64, groups=2, backend="numpy")
    want = cupyconv.conv(X, W, groups=2)
    np.testing.assert_array_equal(plan(X.astype(np.float32), W.astype(np.int16)), want)
    np.testing.assert_array_equal(plan(X.astype(np.uint8), W.astype(np.bool_)), want)


def test_checks_are_raises_not_asserts():
    """``python -O`` strips asserts; validation code must not use them."""
    import ast
    import importlib
    import inspect
    import pkgutil

    for pkg_name in ("cupyconv.core", "cupyconv.api", "cupyconv.dispatch"):
        pkg = importlib.import_module(pkg_name)
        for info in pkgutil.iter_modules(pkg.__path__):
            mod = importlib.import_module(f"{pkg_name}.{info.name}")
            tree = ast.parse(inspect.getsource(mod))
            asserts = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Assert)]
            assert not asserts, f"{mod.__name__} uses assert at lines {asserts}"


def test_max_rank_8_is_accepted():
    """The boundary itself works: 8 spatial axes (SPEC: at least 8-D)."""
    shape = (1, 1) + (2,) * 8
    y = cupyconv.conv(np.ones(shape), np.ones(shape), method="direct")
    assert y.shape == (1, 1) + (1,) * 8 and y.ravel()[0] == 256
    assert cupyconv.MAX_RANK == 8


@pytest.mark.parametrize("thunk", [lambda: conv(X, W, groups=1),
                                   lambda: conv(np.ones((1, 5, 5, 3)), np.ones((2, 2, 2, 4)),
                                                layout="channels_last")],
                         ids=["channels-first-mismatch", "channels-last-mismatch"])
def test_no_layout_hint_where_the_other_layout_does_not_fit(thunk, no_work):
    with pytest.raises(ValueError, match="weight channel axis") as info:
        thunk()
    assert "layout=" not in str(info.value)


def test_cuda_backend_without_cupy_gives_the_install_hint_of_info(monkeypatch):
    """``use_backend('cuda')`` and ``python -m cupyconv info`` say the same install line."""
    from cupyconv import _cli
    from cupyconv._compile.compat import GPU_INSTALL
    from cupyconv.dispatch.backends import backend_reasons
    monkeypatch.setitem(sys.modules, "cupy", None)           # import cupy -> ImportError
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    backend_reasons.cache_clear()                            # probed once per process
    try:
        with pytest.raises(ValueError, match=r"backend 'cuda' is not available here: CuPy is "
                                             r"not installed .*For the GPU: ") as info:
            with cupyconv.use_backend("cuda"):
                pass
    finally:
        backend_reasons.cache_clear()
    assert GPU_INSTALL in str(info.value)
    assert _cli._cupy_status()[1] == [f"CuPy: not installed. For the GPU: {GPU_INSTALL}"]


@pytest.mark.parametrize("name", ["same", "SAME", "Same", "valid", "VALID"])
def test_padding_names_in_any_case_are_tensorflows(name):
    """TensorFlow's ``"SAME"``/``"VALID"`` give the lower-case names' result."""
    y = conv(X, W, groups=2, stride=2, padding=name)
    np.testing.assert_array_equal(y, conv(X, W, groups=2, stride=2, padding=name.lower()))


@pytest.mark.parametrize("name", ["same", "SAME", "Same", "valid", "VALID"])
def test_conv_transpose_padding_names_in_any_case(name):
    """``conv_transpose``'s ``"SAME"`` is its own ``"same"`` (output = input * stride),
    not the forward convolution's rule."""
    x, w = np.ones((1, 1, 5, 5)), np.ones((1, 1, 3, 3))
    y = cupyconv.conv_transpose(x, w, stride=2, padding=name)
    np.testing.assert_array_equal(y, cupyconv.conv_transpose(x, w, stride=2,
                                                             padding=name.lower()))


@pytest.mark.parametrize("call", ["gaussian_filter", "gaussian_laplace"])
def test_a_sigma_of_the_wrong_length_is_named(call):
    """SciPy's ``RuntimeError`` and words, naming ``sigma`` and both lengths."""
    import scipy.ndimage
    with pytest.raises(RuntimeError, match="must have length equal to input rank"):
        getattr(scipy.ndimage, call)(np.ones((5, 5)), [1, 2, 3])
    with pytest.raises(RuntimeError, match=r"^sequence argument must have length equal to "
                                           r"input rank \(sigma has 3 values for 2 axes "
                                           r"filtered\)$"):
        getattr(cupyconv.ndimage, call)(np.ones((5, 5)), [1, 2, 3])
