"""float16 channels-last negative-stride views: the tap sums round once.

The float16 contract (docs/semantics.md, "Precision contract"): products exact in
float32, sums in float32, one rounding to float16 at the end.  Per element that gives

    |y - ref| <= 2**-11 |ref| + (1 + 2**-11) * 2 K 2**-24 (|x| conv |w|) + 2**-25

(``2**-25``: half the float16 subnormal spacing, where the result is below 2**-14).  The
float32 term scales with ``|x| conv |w|``, not with ``y``: under cancellation the error
relative to ``|ref|`` may exceed ``2**-11 + 2 K 2**-24`` by the ratio of the two, so that
is no bound; the relative-norm bound is taken against ``|x| conv |w|``.  A layout or view
that made the path round twice (half intermediates) would miss the correctly rounded
reference on about a fifth of the outputs; here the tap-sum algorithms must hit it but
for near-ties.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import cupyconv
from helpers import conv_bounds, ref_conv, rel_norm_error

BACKENDS = [b for b in ("numpy", "emulated") if b in cupyconv.available_backends()]
F16 = np.dtype(np.float16)
U16, U32, SUBNORMAL_HALF_SPACING = 2.0**-11, 2.0**-24, 2.0**-25


def _derived_bound(ref, abs_conv, k):
    return (U16 * np.abs(ref) + (1 + U16) * 2 * k * U32 * abs_conv
            + SUBNORMAL_HALF_SPACING)


def _check(y, x, w, what, **geometry):
    ref = ref_conv(x.astype(np.float64), w.astype(np.float64), layout="channels_last",
                   **geometry)
    bounds = conv_bounds(x, w, layout="channels_last", **geometry)
    err = np.abs(y.astype(np.float64) - ref)
    assert (err <= _derived_bound(ref, bounds.abs_conv, bounds.k)).all(), what
    assert rel_norm_error(y, ref, bounds.abs_conv) <= (
        U16 + 2 * bounds.k * U32 + SUBNORMAL_HALF_SPACING * np.sqrt(y.size)
        / max(np.linalg.norm(bounds.abs_conv), 1e-300)), what
    keep = np.abs(ref) >= bounds.abs_conv / 16          # no heavy cancellation
    if keep.any():
        assert np.mean(y[keep] == ref[keep].astype(F16)) >= 0.98, what


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("method", ["direct", "implicit_gemm", "gemm"])
@settings(max_examples=6)
@given(seed=st.integers(0, 2**16), flips=st.tuples(*[st.booleans()] * 4),
       scale=st.sampled_from([1.0, 2.0**-10, 2.0**8]))
def test_a_float16_channels_last_reversed_view_rounds_once(backend, method, seed, flips,
                                                           scale):
    rng = np.random.default_rng(seed)
    base = (rng.standard_normal((2, 7, 6, 4)) * scale).astype(F16)
    x = base[tuple(slice(None, None, -1 if f else 1) for f in flips)]   # negative strides
    w = rng.standard_normal((5, 3, 3, 4)).astype(F16)
    geometry = dict(padding=1)
    with cupyconv.use_backend(backend):
        y = cupyconv.conv(x, w, layout="channels_last", method=method, **geometry)
    assert y.dtype == F16
    _check(y, x, w, f"{backend} {method} {flips} x{scale}", **geometry)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("method", ["direct", "implicit_gemm", "gemm"])
def test_cancellation_is_bounded_by_the_magnitudes_summed(backend, method):
    """``2**15 + 2**-10 - 2**15``: the float32 sum may lose ``2**-10`` entirely (the
    summation order decides: some algorithms do), an error of 100% of the result, far
    past ``2**-11 + 2 K 2**-24`` relative to it, and within ``2 K 2**-24 (|x| conv |w|)``."""
    x = np.array([2.0**15, 2.0**-10, -(2.0**15)], F16).reshape(1, 1, 3, 1)[:, :, ::-1]
    w = np.ones((1, 1, 3, 1), F16)                         # (K, kh, kw, C)
    with cupyconv.use_backend(backend):
        y = cupyconv.conv(x, w, layout="channels_last", method=method)
    _check(y, x, w, f"{backend} {method}")
