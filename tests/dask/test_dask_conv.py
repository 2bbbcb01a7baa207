"""cupyconv.dask.conv equals cupyconv.conv for every geometry and chunking."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

import cupyconv
import helpers
from dask_strategies import assert_matches, chunkings

da = pytest.importorskip("dask.array")
cdask = pytest.importorskip("cupyconv.dask")


@st.composite
def conv_problems(draw):
    ndim = draw(st.integers(1, 3))
    layout = draw(st.sampled_from(["channels_first", "channels_last"]))
    dtype = np.dtype(draw(st.sampled_from([np.float64, np.float32, np.int16, np.complex64])))
    groups = draw(st.integers(1, 2))
    c_in = groups * draw(st.integers(1, 2))
    c_out = groups * draw(st.integers(1, 2))
    n = draw(st.integers(1, 3))
    budget = {1: 20, 2: 9, 3: 6}[ndim]
    s = [draw(st.integers(1, budget)) for _ in range(ndim)]
    k = [draw(st.integers(1, 4)) for _ in range(ndim)]
    stride = [draw(st.integers(1, 3)) for _ in range(ndim)]
    dilation = [draw(st.integers(1, 2)) for _ in range(ndim)]
    padding = draw(st.one_of(
        st.sampled_from(["same", "valid"]),
        st.integers(0, 3),
        st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)),
                 min_size=ndim, max_size=ndim)))
    padding_mode = draw(st.sampled_from(["constant", "reflect", "symmetric", "wrap", "edge"]))
    # a nonzero cval is an error with the other modes (it would be ignored)
    cval = draw(st.sampled_from([0, 2])) if padding_mode == "constant" else 0
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    if layout == "channels_first":
        x_shape, w_shape = (n, c_in, *s), (c_out, c_in // groups, *k)
    else:
        x_shape, w_shape = (n, *s, c_in), (c_out, *k, c_in // groups)
    x = helpers.random_array(rng, x_shape, dtype)
    w = helpers.random_array(rng, w_shape, dtype)
    bias = helpers.random_array(rng, (c_out,), dtype) if draw(st.booleans()) else None
    chunks = tuple(draw(chunkings(size)) for size in x_shape)
    geometry = dict(stride=stride, padding=padding, dilation=dilation, groups=groups,
                    padding_mode=padding_mode, cval=cval, layout=layout)
    return x, w, bias, chunks, geometry, dtype


def _empty_output(x, w, geometry):
    """Whether the dilated kernel overhangs the padded input on some axis (a ValueError)."""
    cl = geometry["layout"] == "channels_last"
    s = x.shape[1:-1] if cl else x.shape[2:]
    k = w.shape[1:-1] if cl else w.shape[2:]
    padding = geometry["padding"]
    if padding == "same":
        return False
    pads = helpers.explicit_pads(0 if padding == "valid" else padding, len(s))
    return any(si + pb + pa < d * (ki - 1) + 1
               for si, ki, d, (pb, pa) in zip(s, k, geometry["dilation"], pads))


@given(problem=conv_problems())
def test_matches_in_memory(problem):
    x, w, bias, chunks, geometry, dtype = problem
    xd = da.from_array(x, chunks=chunks)
    if _empty_output(x, w, geometry):         # the same error, before any graph is built
        with pytest.raises(ValueError, match="empty output on spatial axis") as core:
            cupyconv.conv(x, w, bias, **geometry)
        with pytest.raises(ValueError) as lazy:
            cdask.conv(xd, w, bias, **geometry)
        assert str(lazy.value) == str(core.value)
        return
    ref = cupyconv.conv(x, w, bias, **geometry)
    y = cdask.conv(xd, w, bias, **geometry)
    assert y.shape == ref.shape and y.dtype == ref.dtype
    abs_conv = cupyconv.conv(np.abs(x).astype(np.float64), np.abs(w).astype(np.float64),
                             None if bias is None else np.abs(bias).astype(np.float64),
                             **{**geometry, "cval": abs(geometry["cval"])})
    k = int(np.prod(w.shape[1:]))
    assert_matches(y.compute(), ref, abs_conv, k, dtype, "conv vs cupyconv")


def test_matches_reference_with_wide_reflect_padding():
    """Pads wider than the input (numpy.pad mirrors repeatedly; dask.pad does not)."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 1, 3, 4))
    w = rng.standard_normal((2, 1, 3, 2))
    for mode in ("reflect", "symmetric", "wrap", "edge"):
        pads = ((7, 5), (2, 9))
        y = cdask.conv(da.from_array(x, chunks=(1, 1, 2, 3)), w, padding=pads,
                       padding_mode=mode, stride=(2, 1))
        ref = helpers.ref_conv(x, w, padding=pads, padding_mode=mode, stride=(2, 1))
        np.testing.assert_allclose(y.compute(), ref, atol=1e-12, err_msg=mode)


def test_chunks_and_channel_axis():
    x = da.ones((4, 6, 33, 32), chunks=(1, 2, 10, 7))
    y = cdask.conv(x, np.ones((5, 6, 3, 3)), stride=2, padding="same")
    assert y.chunks[0] == x.chunks[0] and y.chunks[1] == (5,)
    assert sum(y.chunks[2]) == 17 and sum(y.chunks[3]) == 16
    np.testing.assert_allclose(y.compute(), cupyconv.conv(np.ones((4, 6, 33, 32)),
                                                          np.ones((5, 6, 3, 3)),
                                                          stride=2, padding="same"))


def test_errors_match_in_memory():
    x = np.ones((1, 2, 4, 4))
    for kwargs in (dict(w=np.ones((3, 2, 6, 1))),                   # kernel larger
                   dict(w=np.ones((3, 3, 2, 2))),                   # channel mismatch
                   dict(w=np.ones((3, 2, 2, 2)), stride=0),
                   dict(w=np.ones((3, 2, 2, 2)), padding_mode="mirror"),
                   dict(w=np.ones((3, 2, 2, 2)), bias=np.ones(2))):
        w = kwargs.pop("w")
        with pytest.raises(ValueError) as core:
            cupyconv.conv(x, w, **kwargs)
        with pytest.raises(ValueError) as lazy:
            cdask.conv(da.from_array(x, chunks=2), w, **kwargs)
        assert str(core.value) == str(lazy.value)
    with pytest.raises(TypeError, match="w must be an in-memory"):
        cdask.conv(da.from_array(x), da.ones((3, 2, 2, 2)))
    with pytest.raises(TypeError, match="bias must be an in-memory"):
        cdask.conv(da.from_array(x), np.ones((3, 2, 2, 2)), da.ones(3))


def test_empty_batch():
    y = cdask.conv(da.zeros((0, 2, 5), chunks=1), np.ones((3, 2, 2)))
    assert y.shape == (0, 3, 4) and y.compute().shape == (0, 3, 4)


def test_integer_wraparound_matches():
    x = np.full((1, 1, 9), 100, dtype=np.int8)
    w = np.full((1, 1, 3), 100, dtype=np.int8)
    ref = cupyconv.conv(x, w, padding=1, padding_mode="edge")
    got = cdask.conv(da.from_array(x, chunks=(1, 1, 2)), w, padding=1,
                     padding_mode="edge").compute()
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, ref)
