"""``cupyconv.conv`` against the independent tap-loop reference
(``helpers.ref_conv``: ``np.pad`` + one strided slice per kernel tap), and
the identities of reliability.md (c): grouped == concatenated per-group
convs, ``padding="same"/"valid"`` == explicit padding.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

import cupyconv
from helpers import assert_matches_reference, conv_bounds, random_array, ref_conv, small_ints
from problem_lists import KERNEL_LARGER_PROBLEMS, SIZE_ONE_PROBLEMS, TILE_NONMULTIPLE_PROBLEMS

METHODS = ("direct", "gemm", "fft", "auto", "implicit_gemm")
PADDING_MODES = ("constant", "reflect", "symmetric", "wrap", "edge")
#: cval for the constant mode: nonzero, so a forgotten fill value shows up.
CVAL = 2.0


def exact_dtype(method):
    """Small integers are summed exactly by tap loops in float64, but an FFT
    in float64 is only accurate to ~u*log(L); the FFT path is exact (rounded)
    for integer dtypes, so exact comparisons give it int64 data."""
    return np.int64 if method == "fft" else np.float64


@st.composite
def conv_cases(draw, padding_mode, dtypes=("float64", "float32", "complex128", "int64")):
    """A random geometry; pads may exceed the axis (numpy.pad wraps/reflects
    repeatedly), so wrap/symmetric/reflect see pads larger than the input."""
    r = draw(st.integers(1, 3))
    groups = draw(st.integers(1, 3))
    cg, kg = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    n = draw(st.integers(1, 2))
    s = [draw(st.integers(1, 6 if r < 3 else 4)) for _ in range(r)]
    ks = [draw(st.integers(1, 3)) for _ in range(r)]
    stride = [draw(st.integers(1, 3)) for _ in range(r)]
    dilation = [draw(st.integers(1, 2)) for _ in range(r)]
    pads = [(draw(st.integers(0, 7)), draw(st.integers(0, 7))) for _ in range(r)]
    layout = draw(st.sampled_from(["channels_first", "channels_last"]))
    dtype = np.dtype(draw(st.sampled_from(dtypes)))
    use_bias = draw(st.booleans())
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x_shape = (n, groups * cg) + tuple(s)
    w_shape = (groups * kg, cg) + tuple(ks)
    if layout == "channels_last":
        x_shape = (n,) + tuple(s) + (groups * cg,)
        w_shape = (groups * kg,) + tuple(ks) + (cg,)
    x = random_array(rng, x_shape, dtype)
    w = random_array(rng, w_shape, dtype)
    bias = random_array(rng, (groups * kg,), dtype) if use_bias else None
    kw = dict(stride=stride, padding=pads, dilation=dilation, groups=groups,
              padding_mode=padding_mode, layout=layout)
    if padding_mode == "constant":
        kw["cval"] = CVAL
    return x, w, bias, kw


def check_conv(y, x, w, bias, kw, algorithm, what=""):
    """``y`` vs ``ref_conv`` with the dtype's bound (exact for integers)."""
    exact = y.dtype.kind in "biu"
    ref = ref_conv(x, w, bias, dtype=object if exact else None, **kw)
    assert_matches_reference(y, ref, conv_bounds(x, w, bias, **kw), y.dtype, algorithm, what)


@pytest.mark.parametrize("padding_mode", PADDING_MODES)
@pytest.mark.parametrize("method", METHODS)
@given(data=st.data())
def test_conv_matches_reference(method, padding_mode, data):
    x, w, bias, kw = data.draw(conv_cases(padding_mode))
    if 0 in ref_conv(x, w, **kw).shape:      # the dilated kernel overhangs the padded input
        with pytest.raises(ValueError, match=r"empty output on spatial axis \d"):
            cupyconv.conv(x, w, bias, method=method, **kw)
        return
    y = cupyconv.conv(x, w, bias, method=method, **kw)
    assert y.dtype == np.result_type(x, w, *([] if bias is None else [bias]))
    check_conv(y, x, w, bias, kw, None if method == "auto" else method, f"conv {method}")


@pytest.mark.parametrize("method", METHODS)
@given(data=st.data())
def test_conv_out_argument(method, data):
    """``out=`` receives the same values and is returned."""
    x, w, bias, kw = data.draw(conv_cases("constant", dtypes=("float64", "int64")))
    y_shape = ref_conv(x, w, **kw).shape
    if 0 in y_shape:         # the dilated kernel overhangs the padded input: nothing to write
        with pytest.raises(ValueError, match=r"empty output on spatial axis \d"):
            cupyconv.conv(x, w, bias, method=method, out=np.empty(y_shape), **kw)
        return
    y = cupyconv.conv(x, w, bias, method=method, **kw)
    out = np.full(y.shape, 99, dtype=y.dtype)
    res = cupyconv.conv(x, w, bias, method=method, out=out, **kw)
    assert res is out
    np.testing.assert_array_equal(out, y)


NAMED_PROBLEMS = (SIZE_ONE_PROBLEMS + KERNEL_LARGER_PROBLEMS + TILE_NONMULTIPLE_PROBLEMS)


@pytest.mark.parametrize("x_shape,w_shape", NAMED_PROBLEMS)
@pytest.mark.parametrize("method", ["direct", "gemm", "fft"])
def test_named_problems_exact(x_shape, w_shape, method, rng):
    """Curated edge-case problems, small integers in float64: bit-exact."""
    x = small_ints(rng, x_shape, exact_dtype(method))
    w = small_ints(rng, w_shape, exact_dtype(method))
    r = len(x_shape) - 2
    pads = tuple((k - 1, k // 2) for k in w_shape[2:])    # asymmetric, covers k > S
    y = cupyconv.conv(x, w, padding=pads, method=method)
    np.testing.assert_array_equal(y, ref_conv(x, w, padding=pads))
    # and as convolution-vs-correlation mode (CUTLASS runs each problem twice)
    y2 = cupyconv.conv(x, np.flip(w, axis=tuple(range(2, 2 + r))), padding=pads, method=method)
    np.testing.assert_array_equal(
        y2, ref_conv(x, np.flip(w, axis=tuple(range(2, 2 + r))), padding=pads))


@pytest.mark.parametrize("mode", ["reflect", "symmetric", "wrap"])
@pytest.mark.parametrize("method", ["direct", "gemm", "fft"])
def test_pads_larger_than_axis(mode, method, rng):
    """numpy.pad repeats reflect/symmetric/wrap when the pad exceeds the axis."""
    x = small_ints(rng, (1, 2, 3, 2), exact_dtype(method))
    w = small_ints(rng, (2, 2, 2, 3), exact_dtype(method))
    pads = ((7, 5), (4, 9))
    y = cupyconv.conv(x, w, padding=pads, padding_mode=mode, method=method)
    np.testing.assert_array_equal(y, ref_conv(x, w, padding=pads, padding_mode=mode))


def test_reflect_on_size_one_axis_follows_numpy(rng):
    """reflect on a length-1 axis: numpy.pad repeats the element; so do we."""
    x = small_ints(rng, (1, 1, 1, 4), np.float64)
    w = small_ints(rng, (1, 1, 3, 3), np.float64)
    y = cupyconv.conv(x, w, padding=2, padding_mode="reflect", method="direct")
    np.testing.assert_array_equal(y, ref_conv(x, w, padding=2, padding_mode="reflect"))


# ---------------------------------------------------------------- identities

@pytest.mark.parametrize("method", ["direct", "gemm", "fft"])
@pytest.mark.parametrize("layout", ["channels_first", "channels_last"])
def test_grouped_equals_concatenated_groups(method, layout, rng):
    g, cg, kg = 3, 2, 2
    x = small_ints(rng, (2, g * cg, 7, 5), exact_dtype(method))
    w = small_ints(rng, (g * kg, cg, 3, 2), exact_dtype(method))
    kw = dict(stride=(2, 1), padding=((1, 0), (0, 2)), dilation=(1, 2), method=method)
    y = cupyconv.conv(x, w, groups=g, **kw)
    parts = [cupyconv.conv(x[:, i * cg:(i + 1) * cg], w[i * kg:(i + 1) * kg], **kw)
             for i in range(g)]
    np.testing.assert_array_equal(y, np.concatenate(parts, axis=1))
    if layout == "channels_last":
        yl = cupyconv.conv(np.moveaxis(x, 1, -1), np.moveaxis(w, 1, -1), groups=g,
                           layout=layout, **kw)
        np.testing.assert_array_equal(yl, np.moveaxis(y, 1, -1))


def jax_same_pads(in_shape, kernel_shape, strides, dilations):
    """JAX's SAME rule, transcribed from ``jax._src.lax.lax.padtype_to_pads`` (JAX 0.4.x).

    ``conv_general_dilated`` passes it the dilated window
    (``core.dilate_dim(k, d) = 1 + d * (k - 1)``); ``padtype_to_pads`` then takes
    ``out_shape = ceil(in_shape / window_strides)``, ``pad_sizes = max((out_shape - 1)
    * window_strides + window_shape - in_shape, 0)`` and, for ``SAME`` (not
    ``SAME_LOWER``), ``(pad_size // 2, pad_size - pad_size // 2)``: the odd one after.
    TensorFlow's ``SAME`` (``tf.nn.convolution``) is the same rule.  JAX is not a test
    dependency, so the formula is written out here, independent of cupyconv's
    ``core.args.same_padding``.
    """
    window = [1 + d * (k - 1) for k, d in zip(kernel_shape, dilations)]
    out_shape = [-(-n // s) for n, s in zip(in_shape, strides)]
    pad_sizes = [max((o - 1) * s + w - n, 0)
                 for o, s, w, n in zip(out_shape, strides, window, in_shape)]
    return [(p // 2, p - p // 2) for p in pad_sizes]


def _same_pads(s, k, stride, dilation):
    return jax_same_pads([s], [k], [stride], [dilation])[0]


@st.composite
def same_cases(draw):
    """Rank 1-3, strides 1-4 (mostly > 1), dilation 1-2, kernels 1-4, S 1-9."""
    r = draw(st.integers(1, 3))
    s = [draw(st.integers(1, 9 if r < 3 else 5)) for _ in range(r)]
    k = [draw(st.integers(1, 4)) for _ in range(r)]
    stride = [draw(st.integers(1, 4)) for _ in range(r)]
    dilation = [draw(st.integers(1, 2)) for _ in range(r)]
    layout = draw(st.sampled_from(["channels_first", "channels_last"]))
    mode = draw(st.sampled_from(["constant", "reflect", "edge"]))
    return s, k, stride, dilation, layout, mode


@given(case=same_cases(), seed=st.integers(0, 2**16))
def test_same_padding_is_jax_same(case, seed):
    """``padding='same'`` with any stride is JAX's/TensorFlow's SAME: ``ceil(S / stride)``
    outputs, the pads of ``lax.padtype_to_pads``; shapes and values equal an explicit call."""
    s, k, stride, dilation, layout, mode = case
    rng = np.random.default_rng(seed)
    x = small_ints(rng, (2, 3, *s), np.float64)
    w = small_ints(rng, (2, 3, *k), np.float64)
    if layout == "channels_last":
        x, w = np.moveaxis(x, 1, -1), np.moveaxis(w, 1, -1)
    pads = jax_same_pads(s, k, stride, dilation)
    if mode == "reflect" and any(n == 1 and p != (0, 0) for n, p in zip(s, pads)):
        mode = "edge"                          # numpy.pad cannot reflect a length-1 axis
    geo = dict(stride=stride, dilation=dilation, layout=layout, padding_mode=mode)
    y = cupyconv.conv(x, w, padding="same", **geo)
    spatial = y.shape[1:-1] if layout == "channels_last" else y.shape[2:]
    assert spatial == tuple(-(-n // st_) for n, st_ in zip(s, stride))
    np.testing.assert_array_equal(y, cupyconv.conv(x, w, padding=pads, **geo))
    np.testing.assert_array_equal(y, ref_conv(x, w, padding=pads, **geo))


SAME_CASES = [
    # (S, K, stride, dilation): odd/even kernels, stride > kernel, S < K
    (7, 3, 1, 1), (7, 4, 1, 1), (8, 2, 1, 1), (13, 3, 2, 1), (13, 4, 3, 1),
    (5, 2, 4, 1), (9, 3, 1, 2), (4, 5, 1, 1), (17, 1, 5, 1), (1, 3, 1, 1),
]


@pytest.mark.parametrize("s,k,stride,dilation", SAME_CASES)
@pytest.mark.parametrize("method", ["direct", "gemm", "fft"])
def test_same_padding_equals_explicit(s, k, stride, dilation, method, rng):
    x = small_ints(rng, (2, 3, s), exact_dtype(method))
    w = small_ints(rng, (2, 3, k), exact_dtype(method))
    y = cupyconv.conv(x, w, padding="same", stride=stride, dilation=dilation, method=method)
    assert y.shape[-1] == math.ceil(s / stride)
    pads = [_same_pads(s, k, stride, dilation)]
    explicit = cupyconv.conv(x, w, padding=pads, stride=stride, dilation=dilation,
                             method=method)
    np.testing.assert_array_equal(y, explicit)
    np.testing.assert_array_equal(y, ref_conv(x, w, padding=pads, stride=stride,
                                              dilation=dilation))


@pytest.mark.parametrize("method", ["direct", "gemm", "fft"])
def test_same_padding_nd_and_valid(method, rng):
    x = small_ints(rng, (1, 2, 7, 6, 5), exact_dtype(method))
    w = small_ints(rng, (3, 2, 2, 3, 4), exact_dtype(method))
    stride = (2, 1, 3)
    y = cupyconv.conv(x, w, padding="same", stride=stride, method=method)
    assert y.shape[2:] == tuple(math.ceil(s / st) for s, st in zip((7, 6, 5), stride))
    pads = [_same_pads(s, k, st, 1) for s, k, st in zip((7, 6, 5), (2, 3, 4), stride)]
    np.testing.assert_array_equal(y, ref_conv(x, w, padding=pads, stride=stride))
    np.testing.assert_array_equal(cupyconv.conv(x, w, padding="valid", method=method),
                                  cupyconv.conv(x, w, padding=0, method=method))


def test_padding_spellings_agree(rng):
    """int, per-axis ints, numpy-style (b, a) and ((b, a),) broadcasts."""
    x = small_ints(rng, (1, 1, 5, 6, 4), np.float64)
    w = small_ints(rng, (1, 1, 2, 2, 2), np.float64)
    base = cupyconv.conv(x, w, padding=((1, 1),) * 3)
    for p in (1, [1, 1, 1], (1, 1), ((1, 1),), [(1, 1), (1, 1), (1, 1)]):
        np.testing.assert_array_equal(cupyconv.conv(x, w, padding=p), base)


@pytest.mark.parametrize("method", ["direct", "gemm", "fft"])
def test_conv_equals_convolve_with_flipped_kernel(method, rng):
    """Single channel: conv (xcorr) with flipped taps == scipy-style convolve."""
    x = small_ints(rng, (9, 8), exact_dtype(method))
    k = small_ints(rng, (3, 4), exact_dtype(method))
    y = cupyconv.conv(x[None, None], np.flip(k)[None, None], padding=((2, 2), (3, 3)),
                      method=method)[0, 0]
    np.testing.assert_array_equal(y, cupyconv.convolve(x, k, method=method))

