"""Hypothesis strategies and comparisons shared by the Dask tests."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import helpers


@st.composite
def chunkings(draw, n):
    """A chunking of an axis of length ``n``: sizes >= 1 summing to n (``(0,)`` if n == 0)."""
    if n == 0:
        return (0,)
    cuts = draw(st.sets(st.integers(1, n - 1), max_size=min(n - 1, 4))) if n > 1 else set()
    return tuple(np.diff([0] + sorted(cuts) + [n]).tolist())


def assert_matches(y, ref, abs_conv, k, dtype, what=""):
    """Exact for integer/bool results, else within ``c*K*u*(|x| conv |w|)``.

    ``auto`` may pick FFT for one block and a direct sum for the whole
    array (or the reverse), so the bound is a norm-wise one over the block:
    ``64*K*u*max(|x| conv |w|)``.
    """
    y, ref = np.asarray(y), np.asarray(ref)
    assert y.shape == ref.shape, (what, y.shape, ref.shape)
    assert y.dtype == ref.dtype, (what, y.dtype, ref.dtype)
    if helpers.is_exact_dtype(dtype):
        np.testing.assert_array_equal(y, ref, err_msg=what)
        return
    u = helpers.unit_roundoff(dtype)
    scale = float(np.max(np.abs(abs_conv), initial=0.0))
    tol = 64 * max(k, 1) * u * scale + np.finfo(np.dtype(dtype)).tiny
    np.testing.assert_allclose(y.astype(np.complex128), ref.astype(np.complex128),
                               rtol=0, atol=tol, err_msg=what)
