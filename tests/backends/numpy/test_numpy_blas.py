"""The CPU GEMM (``cupyconv.backends.numpy.blas``): oneMKL where installed, else
``numpy.matmul``.  One body against ``numpy.matmul`` on both paths, every operand
layout the gemm blocks pass (contiguous, transposed views, row-strided slices, stacks)
and the ones that must fall back (broadcast, reversed, other dtypes); and the gemm
blocks' results on the oneMKL path against the NumPy one."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

import cupyconv
from cupyconv.backends.numpy import blas

PATHS = ["mkl", "numpy"]


def _on(path, mp):
    """Select the GEMM path under test on the monkeypatch ``mp``: oneMKL (skipped where
    it does not load; used whatever the CPU's vendor) or NumPy's."""
    if path == "mkl":
        funcs = blas.load_mkl()
        if funcs is None:
            pytest.skip("oneMKL is not installed (pip install mkl)")
        mp.setattr(blas, "mkl", lambda: funcs)
    else:
        mp.setattr(blas, "mkl", lambda: None)


def _layout(a, how):
    """``a`` (2-D or a stack) laid out ``how``, the same values."""
    if how == "contiguous":
        return np.ascontiguousarray(a)
    if how == "transposed":      # the transpose of a C-contiguous array (BLAS 'T')
        return np.ascontiguousarray(np.swapaxes(a, -1, -2)).swapaxes(-1, -2)
    if how == "row-strided":     # rows of a wider array (lda > columns)
        wide = np.zeros(a.shape[:-1] + (a.shape[-1] + 3,), a.dtype)
        wide[..., :a.shape[-1]] = a
        return wide[..., :a.shape[-1]]
    if how == "reversed":        # negative strides: falls back to numpy.matmul
        return np.ascontiguousarray(a[..., ::-1])[..., ::-1]
    raise ValueError(how)


LAYOUTS = ["contiguous", "transposed", "row-strided", "reversed"]
#: relative tolerance per dtype: one rounding per product and per sum of up to 40 terms,
#: in whichever order the library sums (oneMKL and OpenBLAS block differently)
RTOL = {np.float32: 2e-5, np.float64: 1e-13, np.complex64: 2e-5, np.int64: 0}


@given(m=st.integers(1, 40), k=st.integers(1, 40), n=st.integers(1, 40),
       stack=st.sampled_from([None, 1, 3]), dtype=st.sampled_from(list(RTOL)),
       la=st.sampled_from(LAYOUTS), lb=st.sampled_from(LAYOUTS),
       lo=st.sampled_from(LAYOUTS[:3]), seed=st.integers(0, 2**16))
@pytest.mark.parametrize("path", PATHS)
def test_matmul_is_numpys(path, m, k, n, stack, dtype, la, lb, lo, seed):
    """``matmul``, and ``matmul_into`` an ``out`` of any layout (row-strided: rows of a
    wider array, as the gemm blocks write into ``y``; transposed: falls back)."""
    with pytest.MonkeyPatch.context() as mp:
        _on(path, mp)
        _check_matmul(m, k, n, stack, dtype, la, lb, seed, lo)


def _check_matmul(m, k, n, stack, dtype, la, lb, seed, lo="contiguous"):
    rng = np.random.default_rng(seed)
    lead = () if stack is None else (stack,)
    a = (rng.standard_normal(lead + (m, k)) * 8).astype(dtype)
    b = (rng.standard_normal(lead + (k, n)) * 8).astype(dtype)
    want = np.matmul(a, b)
    got = blas.matmul(_layout(a, la), _layout(b, lb))
    assert got.shape == want.shape and got.dtype == want.dtype
    scale = np.abs(a).max() * np.abs(b).max() * k
    np.testing.assert_allclose(got, want, rtol=0, atol=RTOL[dtype] * scale)
    out = _layout(np.full(want.shape, -1, dtype), lo)
    blas.matmul_into(_layout(a, la), _layout(b, lb), out)
    np.testing.assert_allclose(out, want, rtol=0, atol=RTOL[dtype] * scale)


#: (name, x shape, w shape, geometry): ungrouped narrow (positions as rows), wide
#: (columns), grouped, strided input gradient (col2im).
CASES = [
    ("2-D narrow", (2, 5, 9, 8), (6, 5, 3, 3), dict(padding=1)),
    ("3-D wide", (1, 4, 5, 6, 5), (40, 4, 2, 3, 2), dict(padding=(1, 0, 1))),
    ("1-D grouped", (3, 6, 17), (4, 3, 5), dict(groups=2, dilation=2)),
    ("2-D strided", (2, 3, 11, 9), (4, 3, 3, 2), dict(stride=2, padding=1)),
]


@pytest.mark.parametrize("name,xs,ws,geo", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gemm_blocks_agree_across_paths(name, xs, ws, geo, dtype, rng, monkeypatch):
    """conv and both gradients by gemm on oneMKL within the dtype's bound of the same
    calls on numpy.matmul (skipped without oneMKL)."""
    _on("mkl", monkeypatch)
    x = rng.standard_normal(xs).astype(dtype)
    w = rng.standard_normal(ws).astype(dtype)
    y = cupyconv.conv(x, w, method="fft", **geo)
    dy = rng.standard_normal(y.shape).astype(dtype)

    def calls():
        return (cupyconv.conv(x, w, method="gemm", **geo),
                cupyconv.conv_grad_input(dy, w, xs, method="gemm", **geo),
                cupyconv.conv_grad_weight(x, dy, ws, method="gemm", **geo))
    fast = calls()
    monkeypatch.setattr(blas, "mkl", lambda: None)
    for a, b in zip(fast, calls()):
        tol = RTOL[dtype] * 10 * np.abs(b).max()
        np.testing.assert_allclose(a, b, rtol=0, atol=tol)


@pytest.mark.parametrize("intel", [True, False])
@pytest.mark.parametrize("env", [None, "1", "0"])
def test_mkl_is_used_on_intel_cpus_or_when_asked(intel, env, monkeypatch):
    """oneMKL runs the blocks on an Intel CPU or under ``CUPYCONV_MKL=1``, never under
    ``CUPYCONV_MKL=0``; elsewhere ``numpy.matmul`` (OpenBLAS) does."""
    if blas.load_mkl() is None:
        pytest.skip("oneMKL is not installed (pip install mkl)")
    monkeypatch.setattr(blas, "intel_cpu", lambda: intel)
    if env is None:
        monkeypatch.delenv("CUPYCONV_MKL", raising=False)
    else:
        monkeypatch.setenv("CUPYCONV_MKL", env)
    used = blas.mkl.__wrapped__()      # the policy, past the process-wide cache
    want = env != "0" and (intel or env == "1")
    assert (used is not None) is want
    if want:
        assert set(used) == set(blas.MKL_DTYPES)
