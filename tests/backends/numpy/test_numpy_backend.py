"""The NumPy backend through its :class:`~cupyconv.backends.base.Backend` interface:
what it can run, every algorithm of every operation against the references,
and the array-generic pieces it shares with the CUDA path (``arrays``: padding
and its adjoint; ``fft``: the pruned transforms).
"""
from __future__ import annotations

import numpy as np
import pytest

from cupyconv.backends import arrays, fft
from cupyconv.backends.numpy import NumpyBackend
from cupyconv.core.problem import ConvProblem, Operands
from helpers import PADDING_MODES, ref_conv, small_ints

BE = NumpyBackend()

#: (x shape, w shape, geometry): 1-D single-signal shapes (SciPy's compiled
#: loops), grouped strided 2-D with reflect padding, dilated 3-D.
CASES = [
    ((1, 1, 40), (1, 1, 7), dict(padding=((6, 6),))),
    ((1, 1, 9), (1, 1, 12), dict(padding=((11, 11),))),          # kernel longer than input
    ((1, 1, 30), (1, 1, 4), dict(padding=((2, 1),))),
    ((2, 4, 9, 7), (6, 2, 3, 2), dict(groups=2, stride=(2, 1), padding=((1, 2), (3, 0)),
                                      padding_mode="reflect")),
    ((1, 2, 5, 6, 4), (3, 2, 2, 3, 2), dict(dilation=(2, 1, 1), padding=1)),
]


def _problem(x_shape, w_shape, dtype=np.float64, op="forward", flip=False, **geo):
    return ConvProblem.create(x_shape=x_shape, w_shape=w_shape, dtype=dtype, op=op,
                              flip=flip, **geo)


def test_can_implement_by_operation():
    p = _problem((1, 2, 9), (3, 2, 3))
    for name in ("direct", "implicit_gemm", "gemm", "fft"):
        assert BE.can_implement(p, name) == (True, "")
    for op in ("grad_input", "grad_weight"):
        g = p.with_(op=op)
        assert BE.can_implement(g, "gemm") == (True, "") == BE.can_implement(g, "fft")
        ok, why = BE.can_implement(g, "direct")
        assert not ok and why == f"direct serves ['forward'], not {op}"


@pytest.mark.parametrize("x_shape,w_shape,geo", CASES)
@pytest.mark.parametrize("algorithm", ["direct", "implicit_gemm", "gemm", "fft"])
@pytest.mark.parametrize("flip", [False, True])
def test_forward_every_algorithm(x_shape, w_shape, geo, algorithm, flip, rng):
    exact = algorithm != "fft"
    dtype = np.float64 if exact else np.int64            # the FFT rounds integers exactly
    x, w = small_ints(rng, x_shape, dtype), small_ints(rng, w_shape, dtype)
    p = _problem(x_shape, w_shape, dtype, flip=flip, **geo)
    y = BE.run(p, algorithm, Operands(activation=x, filter=w), 2**30)
    wk = np.flip(w, axis=tuple(range(2, w.ndim))) if flip else w
    assert y.shape == p.logical_result_shape and y.dtype == dtype
    np.testing.assert_array_equal(y, ref_conv(x, wk, dtype=object, **geo).astype(dtype))


@pytest.mark.parametrize("x_shape,w_shape,geo", CASES[3:])
@pytest.mark.parametrize("op", ["grad_input", "grad_weight"])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_gradients_fft_equals_gemm(x_shape, w_shape, geo, op, dtype, rng):
    """The two gradient algorithms agree (gemm is checked against finite
    differences and the adjoint identity in tests/api)."""
    x, w = small_ints(rng, x_shape, dtype), small_ints(rng, w_shape, dtype)
    p = _problem(x_shape, w_shape, dtype, op=op, **geo)
    dy = small_ints(rng, (p.batch, p.out_channels) + p.out_shape, dtype)
    ops = Operands(activation=x, filter=w, output=dy)
    want = BE.run(p, "gemm", ops, 2**30)
    got = BE.run(p, "fft", ops, 2**30)
    assert got.shape == want.shape == p.logical_result_shape
    err = np.linalg.norm((got - want).ravel()) / np.linalg.norm(want.ravel())
    assert err < 1e-13
    # conjugate=False (conv_transpose) is the plain transpose: no conjugation
    if dtype == np.complex128:
        plain = p.with_(conjugate=False)
        for name in ("gemm", "fft"):
            y = BE.run(plain, name, ops, 2**30)
            assert np.linalg.norm((y - want).ravel()) > 1e-3 * np.linalg.norm(want.ravel())


# --------------------------------------------------------------- arrays

@pytest.mark.parametrize("mode", PADDING_MODES)
def test_fold_padding_is_the_adjoint_of_pad_input(mode, rng):
    """<pad(x), y> == <x, fold(y)> for every mode, pads wider than the axis included."""
    p = _problem((2, 3, 4, 3), (1, 3, 2, 2), padding=((5, 2), (0, 7)), padding_mode=mode)
    x = rng.standard_normal((2, 3, 4, 3))
    padded = arrays.pad_input(p, x)
    assert padded.shape == (2, 3) + p.padded_shape()
    y = rng.standard_normal(padded.shape)
    folded = arrays.fold_padding(p, y)
    assert folded.shape == x.shape
    lhs, rhs = np.vdot(padded, y), np.vdot(x, folded)
    if mode == "constant":                        # zero fill: the linear part is a window
        np.testing.assert_array_equal(padded[:, :, 5:9, 0:3], x)
    assert abs(lhs - rhs) <= 1e-12 * np.abs(padded).sum() * np.abs(y).max()


def test_pad_input_without_padding_is_no_copy():
    p = _problem((1, 1, 5), (1, 1, 2))
    x = np.ones((1, 1, 5))
    assert arrays.pad_input(p, x) is x


# ------------------------------------------------------------------ fft

@pytest.mark.parametrize("n", [1, 7, 11, 13, 97, 1000, 4097])
def test_fast_len_is_5_smooth(n):
    m = fft.fast_len(n)
    assert m >= n
    r = m
    for f in (2, 3, 5):
        while r % f == 0:
            r //= f
    assert r == 1
    assert all(not _smooth(k) for k in range(n, m))      # the smallest


def _smooth(k):
    for f in (2, 3, 5):
        while k % f == 0:
            k //= f
    return k == 1


@pytest.mark.parametrize("shape,lengths", [((3, 2, 5), (8, 4, 9)), ((2, 1, 1, 6), (6, 5, 8)),
                                           ((1, 20, 20), (30, 30))])
@pytest.mark.parametrize("complex_", [False, True])
def test_pruned_transforms_equal_the_full_ones(shape, lengths, complex_, rng):
    a = rng.standard_normal(shape)
    if complex_:
        a = a + 1j * rng.standard_normal(shape)
    r = len(lengths)
    axes = tuple(range(-r, 0))
    f = fft.pruned_forward(a, lengths, complex_, np)
    full = (np.fft.fftn if complex_ else np.fft.rfftn)(a, s=lengths, axes=axes)
    np.testing.assert_allclose(f, full, rtol=1e-12, atol=1e-12 * np.abs(full).max())
    index = [slice(1, n - 1, 2) for n in lengths]
    inv = fft.pruned_inverse(full, lengths, index, complex_, np)
    want = (np.fft.ifftn if complex_ else np.fft.irfftn)(full, s=lengths, axes=axes)
    want = want[(Ellipsis,) + tuple(index)]
    np.testing.assert_allclose(inv, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape,lengths", [((3, 2, 5), (8, 4, 9)), ((2, 1, 1, 6), (6, 5, 8)),
                                           ((1, 20, 20), (30, 30)), ((2, 7), (12,)),
                                           ((2, 3, 5, 6, 7), (8, 9, 10)),
                                           # lengths shorter than the data (oaconvolve's
                                           # blocks): s= crops the input
                                           ((1, 50, 50), (32, 32)), ((3, 50, 17), (32, 17)),
                                           ((2, 5, 20), (8, 12))])
@pytest.mark.parametrize("complex_", [False, True])
@pytest.mark.parametrize("prune", [True, False])
def test_transforms_in_reused_buffers_equal_the_full_ones(shape, lengths, complex_, prune,
                                                          rng):
    """``forward_into``/``inverse_from`` (NumPy's spectra in per-thread buffers, passes in
    place) equal ``rfftn``/``irfftn`` on a second call with other values, whatever the
    first left in the buffer, and the transforms that allocate (``pruned_forward``,
    ``pruned_inverse``, the n-D calls where not pruned) bitwise; the window may be index
    arrays (wrapped starts)."""
    r = len(lengths)
    axes = tuple(range(-r, 0))
    index = [slice(1, n - 1, 2) for n in lengths[:-1]] + [np.arange(-2, 3) % lengths[-1]]
    for _ in range(2):
        a = rng.standard_normal(shape) + (1j * rng.standard_normal(shape) if complex_ else 0)
        f = fft.forward_into(a, lengths, complex_, role="test", prune=prune)
        full = (np.fft.fftn if complex_ else np.fft.rfftn)(a, s=lengths, axes=axes)
        np.testing.assert_allclose(f, full, rtol=1e-12, atol=1e-12 * np.abs(full).max())
        np.testing.assert_array_equal(f, fft.pruned_forward(a, lengths, complex_, np, prune))
        assert f is arrays.reused("test", full.shape, full.dtype)
        want = (np.fft.ifftn if complex_ else np.fft.irfftn)(full, s=lengths, axes=axes)
        want = want[(Ellipsis,) + tuple(index)]
        same = fft.pruned_inverse(f.copy(), lengths, index, complex_, np, prune=prune)
        out = np.empty(want.shape, want.dtype)
        assert fft.inverse_from(f, lengths, index, complex_, out, prune) is out
        np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(out, same)


@pytest.fixture
def reuse_every_buffer(monkeypatch):
    """The FFT's reused buffers taken for spectra of every size (not only from
    ``REUSE_FROM_BYTES``), so that these small problems run through them."""
    from cupyconv.backends import fft_conv
    monkeypatch.setattr(fft_conv, "REUSE_FROM_BYTES", 0)
    fft_conv.clear_program_cache()          # the programs' steps are chosen when built
    yield
    fft_conv.clear_program_cache()


def test_fft_results_do_not_share_the_reused_buffers(rng, reuse_every_buffer):
    """A forward and a weight gradient by FFT, each called twice on other values: the first
    results stay as they were (they are the caller's arrays, not the reused spectra)."""
    for op in ("forward", "grad_weight", "grad_input"):
        p = _problem((2, 3, 6, 5), (4, 3, 3, 3), op=op, padding=1)
        first = Operands(activation=rng.standard_normal(p.x_shape),
                         filter=rng.standard_normal(p.w_shape),
                         output=rng.standard_normal(p.y_shape))
        a = BE.run(p, "fft", first, 2**30)
        kept = a.copy()
        second = Operands(activation=rng.standard_normal(p.x_shape),
                          filter=rng.standard_normal(p.w_shape),
                          output=rng.standard_normal(p.y_shape))
        b = BE.run(p, "fft", second, 2**30)
        np.testing.assert_array_equal(a, kept)
        np.testing.assert_allclose(b, BE.run(p, "gemm", second, 2**30), rtol=1e-10,
                                   atol=1e-10 * np.abs(b).max())


def test_fft_calls_from_several_threads_keep_their_own_buffers(rng, reuse_every_buffer):
    """The reused buffers are per thread: FFT forwards and weight gradients run at once
    from four threads, on other values each, give what they give one at a time."""
    import concurrent.futures
    p = _problem((2, 3, 9, 7, 6), (4, 3, 3, 3, 3), padding=1)
    q = p.with_(op="grad_weight")
    jobs = [Operands(activation=rng.standard_normal(p.x_shape),
                     filter=rng.standard_normal(p.w_shape),
                     output=rng.standard_normal(p.y_shape)) for _ in range(8)]
    want = [(BE.run(p, "fft", o, 2**30), BE.run(q, "fft", o, 2**30)) for o in jobs]

    def both(o):
        return [(BE.run(p, "fft", o, 2**30), BE.run(q, "fft", o, 2**30)) for _ in range(5)]

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        for (y, dw), got in zip(want, pool.map(both, jobs)):
            for gy, gdw in got:
                np.testing.assert_array_equal(gy, y)
                np.testing.assert_array_equal(gdw, dw)


def test_pruning_is_for_the_cpu_and_large_device_boxes():
    """NumPy prunes a kernel that fills little of its box; CuPy (any other array module)
    makes one n-D cuFFT call below ``DEVICE_PRUNE_POINTS`` points (each 1-D pass is a call
    from Python), and prunes as the CPU above it."""
    kept, lengths = (7, 7), (70, 70)                       # 1% of the box
    assert not fft.little_to_prune(kept, lengths)          # NumPy: prune
    device = object()                                       # not NumPy
    assert fft.little_to_prune(kept, lengths, device, fft.DEVICE_PRUNE_POINTS - 1)
    assert not fft.little_to_prune(kept, lengths, device, fft.DEVICE_PRUNE_POINTS)
    assert fft.little_to_prune((65, 65), lengths, device, fft.DEVICE_PRUNE_POINTS)   # 86%
