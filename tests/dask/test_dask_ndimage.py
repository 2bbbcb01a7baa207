"""cupyconv.dask.ndimage's filters equal the in-memory cupyconv.ndimage ones.

Each drawn call (filter, dtype, chunks, among them chunks smaller than the filter's
halo, every mode including the periodic ones, one mode or one per axis, ``axes``,
origins at their bounds) runs on a Dask array and in memory on the whole array: integer
results must be identical, float ones within the filter's roundoff (a block may choose
another algorithm than the whole array).  A halo one short of the filter's reach would
change the values next to every inner block edge.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from cupyconv import ndimage as ndi
from dask_strategies import chunkings
from ndimage_strategies import MODES, draw_axes, draw_mode

da = pytest.importorskip("dask.array")
dndi = pytest.importorskip("cupyconv.dask.ndimage")

DTYPES = ("float64", "float32", "int16", "uint8")
FILTERS = ("gaussian_filter", "uniform_filter", "correlate", "convolve", "sobel", "prewitt",
           "laplace", "gaussian_laplace", "gaussian_gradient_magnitude")


def draw_call(data, name, nd, rng):
    """``(args, kwargs, scale)`` of one call; ``scale`` bounds ``sum|w|`` per axis."""
    kw = dict(cval=data.draw(st.sampled_from((0.0, 2.5))))
    if name in ("sobel", "prewitt"):
        kw.update(axis=data.draw(st.integers(-nd, nd - 1)), mode=draw_mode(data, nd))
        return (), kw, 4.0 ** nd
    axes = draw_axes(data, nd)
    n = nd if axes is None else len(axes)
    kw.update(axes=axes)
    if name == "laplace":
        kw.update(mode=draw_mode(data, n))
        return (), kw, 4.0 * n
    if name in ("correlate", "convolve"):
        shape = tuple(data.draw(st.integers(1, 5)) for _ in range(n))
        kw.update(mode=data.draw(st.sampled_from(MODES)),
                  origin=[data.draw(st.sampled_from((-(k // 2), (k - 1) // 2, 0)))
                          for k in shape])
        return (rng.integers(-3, 4, shape).astype(np.float64),), kw, 3.0 ** n * 5 ** n
    if name == "uniform_filter":
        sizes = [data.draw(st.integers(1, 6)) for _ in range(n)]
        kw.update(mode=draw_mode(data, n),
                  origin=[data.draw(st.sampled_from((-(k // 2), (k - 1) // 2))) for k in sizes])
        return (sizes,), kw, 1.0
    sigma = data.draw(st.sampled_from((0.7, 1.5, 2.5)))
    kw.update(mode=draw_mode(data, n), truncate=data.draw(st.sampled_from((4.0, 2.0))))
    if name == "gaussian_filter":
        kw.update(order=data.draw(st.sampled_from((0, 1))))
        return (sigma,), kw, 2.0 ** n
    if name == "gaussian_gradient_magnitude":
        return (sigma,), kw, 4.0 * nd
    return (sigma,), kw, 4.0 * n


@pytest.mark.parametrize("name", FILTERS)
@given(data=st.data())
def test_dask_filter_equals_in_memory(name, data):
    nd = data.draw(st.integers(1, 3))
    shape = tuple(data.draw(st.integers(1, {1: 30, 2: 12, 3: 7}[nd])) for _ in range(nd))
    chunks = tuple(data.draw(chunkings(n)) for n in shape)     # sizes down to 1
    dtype = np.dtype(data.draw(st.sampled_from(DTYPES)))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    x = (rng.integers(0, 200, shape) if dtype.kind in "iu" else
         rng.standard_normal(shape) * 10).astype(dtype)
    args, kw, scale = draw_call(data, name, nd, rng)
    try:
        ref = getattr(ndi, name)(x, *args, **kw)
    except (ValueError, RuntimeError, TypeError) as exc:
        with pytest.raises(type(exc)):
            getattr(dndi, name)(da.from_array(x, chunks=chunks), *args, **kw)
        return
    lazy = getattr(dndi, name)(da.from_array(x, chunks=chunks), *args, **kw)
    assert lazy.dtype == ref.dtype and lazy.shape == ref.shape
    got = lazy.compute()
    what = f"{name}{args} {kw} {dtype} chunks={chunks}"
    assert got.dtype == ref.dtype, what
    if ref.dtype.kind in "biu":
        np.testing.assert_array_equal(got, ref, err_msg=what)
        return
    u = np.finfo(ref.dtype).eps
    bound = 64 * u * scale * max(float(np.abs(x).max()), 2.5) * 40
    np.testing.assert_allclose(got, ref, rtol=0, atol=bound, err_msg=what)


def test_halo_smaller_than_the_filter_changes_the_values():
    """The comparison above can fail: one block edge short of the halo differs."""
    x = np.random.default_rng(0).standard_normal((40,))
    ref = ndi.gaussian_filter(x, 2.0)
    blocks = [ndi.gaussian_filter(x[max(0, i - 7):i + 27], 2.0) for i in (0, 20)]
    short = np.concatenate([blocks[0][:20], blocks[1][7:27]])
    assert not np.allclose(short, ref)
    np.testing.assert_allclose(
        dndi.gaussian_filter(da.from_array(x, chunks=5), 2.0).compute(), ref, atol=1e-12)


def test_output_dtype_and_refusals():
    x = da.from_array(np.arange(24, dtype=np.uint8).reshape(4, 6), chunks=2)
    assert dndi.sobel(x, output=np.int16).dtype == np.int16
    np.testing.assert_array_equal(dndi.sobel(x, output=np.int16).compute(),
                                  ndi.sobel(x.compute(), output=np.int16))
    with pytest.raises(TypeError, match="dtype"):
        dndi.uniform_filter(x, 3, output=np.empty((4, 6)))
    with pytest.raises(TypeError, match="in-memory"):
        dndi.correlate(x, x)
    with pytest.raises(RuntimeError):
        dndi.gaussian_filter(x, 1.0, mode="circular")      # the in-memory filter's error
