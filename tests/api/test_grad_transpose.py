"""conv_transpose against its definition: a scatter-add loop written here.

PyTorch ConvTranspose semantics: input element x[n, i, s] adds
x[n, i, s] * w[i, o, t] (no conjugation) onto the output position
s*stride - pad_before + t*dilation of channel group(i)*C_out/G + o; positions
outside [0, O) are dropped.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import cupyconv
from helpers import explicit_pads, small_ints


def ref_conv_transpose(x, w, bias, stride, padding, output_padding, dilation, groups):
    n, cin = x.shape[:2]
    r = x.ndim - 2
    cog, ks = w.shape[1], w.shape[2:]
    stride, dilation, output_padding = (
        (v,) * r if np.isscalar(v) else tuple(v) for v in (stride, dilation, output_padding))
    pads = explicit_pads(padding, r)
    o = [(s - 1) * st - pb - pa + d * (k - 1) + op + 1 for s, st, (pb, pa), d, k, op in
         zip(x.shape[2:], stride, pads, dilation, ks, output_padding)]
    y = np.zeros((n, cog * groups) + tuple(o), dtype=np.result_type(x, w, np.float64))
    cig = cin // groups
    for i in range(cin):
        grp = i // cig
        for s in itertools.product(*map(range, x.shape[2:])):
            for t in itertools.product(*map(range, ks)):
                pos = tuple(si * st - pb + ti * d for si, st, (pb, _), ti, d in
                            zip(s, stride, pads, t, dilation))
                if all(0 <= p < oo for p, oo in zip(pos, o)):
                    for oc in range(cog):
                        y[(slice(None), grp * cog + oc) + pos] += (
                            x[(slice(None), i) + s] * w[(i, oc) + t])
    if bias is not None:
        y += bias.reshape((1, -1) + (1,) * r)
    return y


PROBLEMS = [   # x shape, w shape, geometry
    ((2, 3, 5), (3, 2, 3), dict(stride=2, padding=1, output_padding=1)),
    ((1, 4, 4, 3), (4, 1, 2, 3), dict(stride=(2, 3), padding=((1, 0), (0, 2)), groups=2,
                                      output_padding=(1, 2), dilation=(1, 2))),
    ((2, 2, 3, 2, 2), (2, 3, 2, 1, 2), dict(stride=(1, 2, 1), dilation=(2, 1, 3),
                                            output_padding=(1, 0, 2))),   # op >= stride, < dilation
    ((1, 2, 4), (2, 2, 1), dict(stride=3, output_padding=2)),
]


def _check_transpose(y, ref, method):
    """Tap sums of small integers are exact; the FFT (and ``auto``, which may pick
    it) is compared normwise at a few ulps of the result's scale."""
    assert y.shape == ref.shape and y.dtype == ref.dtype
    if method == "gemm":
        np.testing.assert_array_equal(y, ref)
    else:
        err = np.linalg.norm((y - ref).ravel()) / max(np.linalg.norm(ref.ravel()), 1.0)
        assert err <= 1e-13, (method, err)


@pytest.mark.parametrize("layout", ["channels_first", "channels_last"])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("method", ["gemm", "fft", "auto"])
@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: str(p[0]) if isinstance(p, tuple) else "")
def test_matches_scatter_add(rng, problem, method, dtype, layout):
    xs, ws, kw = problem
    x = small_ints(rng, xs, dtype)
    w = small_ints(rng, ws, dtype)
    bias = small_ints(rng, (ws[1] * kw.get("groups", 1),), dtype)
    ref = ref_conv_transpose(x, w, bias, kw.get("stride", 1), kw.get("padding", 0),
                             kw.get("output_padding", 0), kw.get("dilation", 1),
                             kw.get("groups", 1))
    if layout == "channels_last":
        x, w, ref = (np.moveaxis(a, 1, -1) for a in (x, w, ref))
    y = cupyconv.conv_transpose(x, w, bias, layout=layout, method=method, **kw)
    assert y.dtype == np.dtype(dtype)
    _check_transpose(y, ref, method)


def _tf_same(s, k, stride, dilation):
    """TensorFlow's SAME for a transposed convolution: ``S * stride`` outputs."""
    total = dilation * (k - 1) + 1 - stride
    pads = (total // 2, total - total // 2) if total >= 0 else (0, 0)
    return pads, max(-total, 0)


@pytest.mark.parametrize("s,k,stride,dilation", [(5, 3, 1, 1), (5, 4, 2, 1), (4, 3, 2, 2),
                                                 (3, 1, 3, 1), (6, 2, 3, 2)])
def test_same_padding_gives_s_times_stride(rng, s, k, stride, dilation):
    x, w = small_ints(rng, (2, 3, s), np.float64), small_ints(rng, (3, 2, k), np.float64)
    pads, extra = _tf_same(s, k, stride, dilation)
    ref = ref_conv_transpose(x, w, None, stride, [pads], extra, dilation, 1)
    y = cupyconv.conv_transpose(x, w, stride=stride, dilation=dilation, padding="same",
                                method="gemm")
    assert y.shape == (2, 2, s * stride)
    np.testing.assert_array_equal(y, ref)
    np.testing.assert_array_equal(
        cupyconv.conv_transpose(x, w, stride=stride, dilation=dilation, padding="valid",
                                method="gemm"),
        cupyconv.conv_transpose(x, w, stride=stride, dilation=dilation, padding=0,
                                method="gemm"))


@pytest.mark.parametrize("problem", PROBLEMS[:3], ids=lambda p: str(p[0]) if isinstance(p, tuple) else "")
def test_cuda_path(dev, rng, problem):
    xs, ws, kw = problem
    x, w = small_ints(rng, xs, np.float64), small_ints(rng, ws, np.float64)
    ref = cupyconv.conv_transpose(x, w, method="gemm", **kw)
    with dev.scope():
        y = cupyconv.conv_transpose(dev.to_dev(x), dev.to_dev(w), method="gemm", **kw)
    np.testing.assert_array_equal(dev.to_host(y), ref)


def test_output_padding_must_be_below_stride_or_dilation():
    x, w = np.ones((1, 1, 4)), np.ones((1, 1, 3))
    with pytest.raises(ValueError, match="output_padding"):
        cupyconv.conv_transpose(x, w, stride=2, output_padding=2)
    with pytest.raises(ValueError, match=r"output_padding must be 0 with padding='same'"):
        cupyconv.conv_transpose(x, w, stride=2, padding="same", output_padding=1)
    with pytest.raises(ValueError, match=r"padding must be an int, a sequence, 'valid' or "
                                         r"'same' \(any case\); got 'full'"):
        cupyconv.conv_transpose(x, w, padding="full")
    with pytest.raises(ValueError, match="C_in"):
        cupyconv.conv_transpose(np.ones((1, 2, 4)), w)


def test_is_the_input_gradient_of_conv(rng):
    """conv_transpose(dy, w) == conv_grad_input(dy, w) for real weights."""
    x_shape, w = (2, 4, 9, 8), rng.standard_normal((6, 2, 3, 3))
    kw = dict(stride=2, padding=1, groups=2)
    dy = rng.standard_normal(cupyconv.conv(np.zeros(x_shape), w, **kw).shape)
    np.testing.assert_allclose(cupyconv.conv_transpose(dy, w, output_padding=(0, 1), **kw),
                               cupyconv.conv_grad_input(dy, w, x_shape, **kw), rtol=1e-14)
