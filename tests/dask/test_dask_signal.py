"""cupyconv.dask.convolve/correlate equal the in-memory functions and scipy."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.signal
from hypothesis import given, strategies as st

import cupyconv
import helpers
from dask_strategies import assert_matches, chunkings

da = pytest.importorskip("dask.array")
cdask = pytest.importorskip("cupyconv.dask")

DTYPES = [np.float64, np.float32, np.complex128, np.int32, np.bool_]


@st.composite
def signal_problems(draw):
    """(in1, in2, chunks, mode, axes, dtype) with ranks 1-4 and broadcasting batch axes."""
    ndim = draw(st.integers(1, 4))
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    mode = draw(st.sampled_from(["full", "same", "valid"]))
    use_axes = ndim > 1 and draw(st.booleans())
    if use_axes:
        axes = sorted(draw(st.sets(st.integers(0, ndim - 1), min_size=1, max_size=ndim)))
    else:
        axes = list(range(ndim))
    budget = {1: 24, 2: 10, 3: 6, 4: 4}[ndim]
    s1, s2 = [], []
    for ax in range(ndim):
        if ax in axes:
            s1.append(draw(st.integers(1, budget)))
            s2.append(draw(st.integers(1, min(budget, 6))))
        else:             # batch axis: equal, kernel 1 (shared), or in1 1 (broadcast)
            n = draw(st.integers(1, 3))
            kind = draw(st.sampled_from(["equal", "shared", "broadcast"]))
            s1.append(1 if kind == "broadcast" else n)
            s2.append(1 if kind == "shared" else n)
    chunks = tuple(draw(chunkings(n)) for n in s1)
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    in1 = helpers.random_array(rng, s1, dtype)
    in2 = helpers.random_array(rng, s2, dtype)
    axes_arg = (axes if draw(st.booleans()) else [a - ndim for a in axes]) if use_axes else None
    return in1, in2, chunks, mode, axes_arg, dtype


def _abs_conv(in1, in2, mode, axes):
    return cupyconv.convolve(np.abs(in1).astype(np.float64), np.abs(in2).astype(np.float64),
                             mode, method="direct", axes=axes)


def _reduction_length(in2, axes):
    axes = range(in2.ndim) if axes is None else axes
    return int(np.prod([in2.shape[a] for a in axes]))


@pytest.mark.parametrize("name", ["convolve", "correlate"])
@given(problem=signal_problems())
def test_matches_in_memory_and_scipy(name, problem):
    in1, in2, chunks, mode, axes, dtype = problem
    dask_fn, core_fn = getattr(cdask, name), getattr(cupyconv, name)
    x = da.from_array(in1, chunks=chunks)
    if helpers.valid_mode_rejects(in1.shape, in2.shape, mode, axes):   # the same error
        with pytest.raises(ValueError, match="For 'valid' mode") as core:
            core_fn(in1, in2, mode, axes=axes)
        with pytest.raises(ValueError) as lazy:
            dask_fn(x, in2, mode, axes=axes)
        assert str(lazy.value) == str(core.value)
        return
    ref = core_fn(in1, in2, mode, axes=axes)
    y = dask_fn(x, in2, mode, axes=axes)
    assert y.shape == ref.shape and y.dtype == ref.dtype
    got = y.compute()
    k = _reduction_length(in2, axes)
    abs_conv = _abs_conv(in1, in2, mode, axes)
    # |x| conv |w| is symmetric under the flip: a valid bound for correlate too.
    if name == "correlate":
        abs_conv = np.abs(cupyconv.correlate(np.abs(in1).astype(np.float64),
                                             np.abs(in2).astype(np.float64), mode,
                                             method="direct", axes=axes))
    assert_matches(got, ref, abs_conv, k, dtype, f"{name} vs cupyconv")
    if axes is None and dtype != np.bool_:   # scipy: no axes=, no N-D bool
        expected = getattr(scipy.signal, name)(in1, in2, mode, method="direct")
        assert_matches(got, expected, abs_conv, k, dtype, f"{name} vs scipy")


@given(in1=st.integers(1, 40).map(lambda n: np.arange(n, dtype=np.float64)),
       k=st.integers(1, 9), data=st.data())
def test_chunks_smaller_than_halo(in1, k, data):
    chunks = data.draw(chunkings(in1.size))
    kernel = np.arange(1.0, k + 1)
    for mode in ("full", "same", "valid"):     # 1-D: one operand always covers the other
        ref = scipy.signal.convolve(in1, kernel, mode, method="direct")
        y = cdask.convolve(da.from_array(in1, chunks=chunks), kernel, mode, method="direct")
        assert all(c >= 1 for c in y.chunks[0])
        np.testing.assert_array_equal(y.compute(), ref)


def test_output_chunks_follow_input():
    x = da.ones((40, 30), chunks=(10, 15))
    w = np.ones((5, 3))
    assert cdask.convolve(x, w, "same").chunks == x.chunks
    assert cdask.convolve(x, w, "full").chunks == ((10, 10, 10, 14), (15, 17))
    assert cdask.convolve(x, w, "valid").chunks == ((10, 10, 10, 6), (15, 13))


def test_valid_swap_and_errors_match():
    in1 = np.arange(6.0).reshape(2, 3)
    in2 = np.arange(20.0).reshape(4, 5)
    for name in ("convolve", "correlate"):
        ref = getattr(scipy.signal, name)(in1, in2, "valid")
        got = getattr(cdask, name)(da.from_array(in1, chunks=1), in2, "valid").compute()
        np.testing.assert_allclose(got, ref, atol=1e-12)
    mixed = np.ones((1, 9))
    with pytest.raises(ValueError) as core:
        cupyconv.convolve(in1, mixed, "valid")
    with pytest.raises(ValueError) as lazy:
        cdask.convolve(da.from_array(in1), mixed, "valid")
    assert str(core.value) == str(lazy.value)
    with pytest.raises(ValueError, match="mode"):
        cdask.convolve(da.from_array(in1), in2, "bogus")
    with pytest.raises(ValueError, match="method"):
        cdask.convolve(da.from_array(in1), in2, method="bogus")


def test_zero_d_and_empty():
    a, b = np.array(2.0 + 1j), np.array(3j)
    z = cdask.correlate(da.from_array(a), b)
    assert z.shape == () and z.compute() == scipy.signal.correlate(a, b)
    empty = np.zeros((0, 5))
    got = cdask.convolve(da.from_array(empty), np.ones((1, 3)), "full", axes=1)
    assert got.shape == (0, 7) and got.compute().shape == (0, 7)


def test_kernel_must_be_in_memory():
    x = da.ones((8,), chunks=4)
    with pytest.raises(TypeError, match="in2 must be an in-memory"):
        cdask.convolve(x, da.ones((3,)))
    with pytest.raises(TypeError, match="unsupported|not supported"):
        cdask.convolve(x, np.array(["a"], dtype=object))


def test_accepts_numpy_input_as_one_chunk():
    a = np.arange(10.0)
    y = cdask.convolve(a, np.ones(3), "same")
    assert isinstance(y, da.Array)
    np.testing.assert_allclose(y.compute(), np.convolve(a, np.ones(3), "same"))


def test_unknown_chunks_are_rejected():
    x = da.arange(10, chunks=3)
    x = x[x > 2]
    with pytest.raises(ValueError, match="in1 has unknown chunk sizes"):
        cdask.convolve(x, np.ones(3))


@pytest.mark.parametrize("name", ["convolve", "correlate"])
def test_per_element_kernels_and_broadcast_batch(name):
    """A kernel that is not 1 along a batch axis is sliced to each block."""
    rng = np.random.default_rng(7)
    in1 = rng.standard_normal((5, 12, 1))
    in2 = rng.standard_normal((5, 4, 3))      # batch axes 0 (per element) and 2 (broadcast)
    x = da.from_array(in1, chunks=(2, 5, 1))
    for mode in ("full", "same", "valid"):
        got = getattr(cdask, name)(x, in2, mode, axes=1).compute()
        expected = np.stack([np.stack([getattr(scipy.signal, name)(
            in1[i, :, 0], in2[i, :, j], mode) for j in range(3)], axis=-1) for i in range(5)])
        np.testing.assert_allclose(got, expected, atol=1e-12, err_msg=mode)
    # swapped valid: in2 covers in1 along the convolved axis
    small = da.from_array(in1[:, :3], chunks=(2, 1, 1))
    got = getattr(cdask, name)(small, in2, "valid", axes=1).compute()
    np.testing.assert_allclose(got, getattr(cupyconv, name)(in1[:, :3], in2, "valid", axes=1),
                               atol=1e-12)
