"""Errors name the argument; bitwise determinism; bias gradient; dtypes; empty shapes."""
from __future__ import annotations

import numpy as np
import pytest

import cupyconv
from helpers import random_array

X_SHAPE, W_SHAPE = (2, 4, 9, 8), (6, 2, 3, 3)
KW = dict(stride=2, padding=((1, 2), (0, 1)), groups=2, padding_mode="reflect")


def _dy(rng):
    return rng.standard_normal(cupyconv.conv(np.zeros(X_SHAPE), np.zeros(W_SHAPE), **KW).shape)


@pytest.mark.parametrize("input_shape, match", [
    ((2, 4, 9), "input_shape must have 4 entries"),            # wrong rank
    ((2, 5, 9, 8), "input_shape=.*not divisible by groups"),   # channels vs groups
    ((2, 6, 9, 8), "input_shape=.*expected C_in/groups"),      # channels vs w
    ((2, 4, 12, 8), "input_shape is inconsistent with dy"),    # other output shape
    ((3, 4, 9, 8), "input_shape is inconsistent with dy"),     # other batch
])
def test_bad_input_shape(rng, input_shape, match):
    with pytest.raises(ValueError, match=match):
        cupyconv.conv_grad_input(_dy(rng), rng.standard_normal(W_SHAPE), input_shape, **KW)


@pytest.mark.parametrize("weight_shape, match", [
    ((6, 2, 3), "weight_shape must have 4 entries"),
    ((6, 3, 3, 3), "weight_shape=.*expected C_in/groups"),
    ((5, 2, 3, 3), "weight_shape=.*not divisible by groups"),
    ((8, 2, 3, 3), "weight_shape is inconsistent with dy"),
    ((6, 2, 5, 3), "weight_shape is inconsistent with dy"),
])
def test_bad_weight_shape(rng, weight_shape, match):
    with pytest.raises(ValueError, match=match):
        cupyconv.conv_grad_weight(rng.standard_normal(X_SHAPE), _dy(rng), weight_shape, **KW)


def test_other_argument_errors(rng):
    dy, w = _dy(rng), rng.standard_normal(W_SHAPE)
    with pytest.raises(ValueError, match="method"):
        cupyconv.conv_grad_input(dy, w, X_SHAPE, method="direct", **KW)
    with pytest.raises(ValueError, match="method"):
        cupyconv.conv_grad_weight(np.ones(X_SHAPE), dy, W_SHAPE, method="implicit_gemm", **KW)
    with pytest.raises(ValueError, match="stride"):
        cupyconv.conv_grad_input(dy, w, X_SHAPE, **dict(KW, stride=0))
    with pytest.raises(TypeError, match="cval"):
        cupyconv.conv_grad_weight(np.ones(X_SHAPE), dy, W_SHAPE, cval=1j, **KW)
    with pytest.raises(ValueError, match="dy.ndim"):
        cupyconv.conv_grad_bias(np.ones((3, 4)))


def _grads(rng, workspace_limit=None, method="auto"):
    x, w = rng.standard_normal(X_SHAPE), rng.standard_normal(W_SHAPE)
    dy = _dy(rng)
    kw = dict(KW, workspace_limit=workspace_limit, method=method)
    return (cupyconv.conv_grad_input(dy, w, X_SHAPE, **kw),
            cupyconv.conv_grad_weight(x, dy, W_SHAPE, **kw))


#: Bytes of one image's column buffer (all groups) for X_SHAPE, W_SHAPE, KW.
_PROBLEM = cupyconv.ConvProblem.create(x_shape=X_SHAPE, w_shape=W_SHAPE, **KW)
ONE_IMAGE = _PROBLEM.column_bytes(1)
#: Bytes of one output position's columns (all groups): the CPU gemm's smallest block.
ONE_POSITION = ONE_IMAGE // int(np.prod(_PROBLEM.out_shape))


def test_bitwise_deterministic_numpy():
    a = _grads(np.random.default_rng(1))
    b = _grads(np.random.default_rng(1))
    for p, q in zip(a, b):
        assert p.tobytes() == q.tobytes()


def test_bitwise_deterministic_cuda_path(dev):
    """Two runs (one image per column chunk: 6000 bytes) are bitwise equal."""
    runs = []
    for _ in range(2):
        with dev.scope():
            runs.append([dev.to_host(g) for g in _grads(np.random.default_rng(1), 6000)])
    for p, q in zip(*runs):
        assert p.tobytes() == q.tobytes()
    for p, q in zip(runs[0], _grads(np.random.default_rng(1))):
        np.testing.assert_allclose(p, q, rtol=1e-12, atol=1e-12)


def test_chunked_equals_whole():
    """A workspace limit of one image's columns gives the same gradients."""
    whole = _grads(np.random.default_rng(2), method="gemm")
    for p, q in zip(_grads(np.random.default_rng(2), ONE_IMAGE), whole):
        np.testing.assert_allclose(p, q, rtol=1e-13, atol=1e-13)


def test_limit_below_one_position_is_an_error():
    """No gradient algorithm runs without workspace: below one output position's columns
    (and the FFT's spectra) nothing fits, a MemoryError in the user's words: the
    fastest algorithm, the bytes it needs, the limit and what to do."""
    with pytest.raises(MemoryError, match=rf"grad_input of .*'gemm' needs at least "
                                          rf"{ONE_POSITION} bytes of workspace but the "
                                          rf"workspace limit is {ONE_POSITION - 1} bytes"
                                          rf".*workspace_limit"):
        _grads(np.random.default_rng(2), ONE_POSITION - 1)


def test_fft_gradients_equal_gemm():
    """``method='fft'`` (new for the gradients) computes the same gradients, reflect
    padding folded back included."""
    for p, q in zip(_grads(np.random.default_rng(3), method="fft"),
                    _grads(np.random.default_rng(3), method="gemm")):
        np.testing.assert_allclose(p, q, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("layout", ["channels_first", "channels_last"])
def test_grad_bias(rng, layout):
    dy = rng.standard_normal((3, 5, 4, 2))
    ref = dy.sum(axis=(0, 2, 3))
    if layout == "channels_last":
        dy = np.moveaxis(dy, 1, -1)
    np.testing.assert_allclose(cupyconv.conv_grad_bias(dy, layout=layout), ref, rtol=1e-14)


def test_dtypes_and_empty_batch(rng):
    w32 = random_array(rng, W_SHAPE, np.float32)
    dy = _dy(rng)
    assert cupyconv.conv_grad_input(dy.astype(np.float32), w32, X_SHAPE, **KW).dtype == np.float32
    xi = np.ones(X_SHAPE, dtype=np.int32)
    assert cupyconv.conv_grad_weight(xi, dy.astype(np.int64), W_SHAPE, **KW).dtype == np.float64
    empty = (0,) + X_SHAPE[1:]
    dy0 = np.zeros((0,) + dy.shape[1:])
    assert cupyconv.conv_grad_input(dy0, w32, empty, **KW).shape == empty
    dw = cupyconv.conv_grad_weight(np.zeros(empty), dy0, W_SHAPE, **KW)
    assert dw.shape == W_SHAPE and not dw.any()


def _grad_outcome(fn):
    try:
        return fn()
    except (MemoryError, ValueError) as exc:
        return type(exc)


@pytest.mark.parametrize("method", ["auto", "gemm"])
@pytest.mark.parametrize("which", ["input", "weight"])
def test_gradient_workspace_limit_below_one_image_agrees_across_backends(rng, which, method):
    """A workspace_limit smaller than one image's columns (and than the FFT's spectra)
    gets the same answer on NumPy and on the CUDA path (emulated): both honour it and
    raise (NumPy used to ignore the limit while CUDA raised) -- except where the CUDA path
    has a zero-workspace gradient: the weight gradient then runs (or, for ``gemm``, falls
    back) on the implicit GEMM (this stride-2 reflect geometry has no implicit input
    gradient)."""
    if "emulated" not in cupyconv.available_backends():
        pytest.skip("CUDA emulation unavailable")
    x, w, dy = rng.standard_normal(X_SHAPE), rng.standard_normal(W_SHAPE), _dy(rng)
    geo = dict(KW, padding_mode="constant", method=method, workspace_limit=64)
    call = (lambda: cupyconv.conv_grad_input(dy, w, X_SHAPE, **geo)) if which == "input" else (
        lambda: cupyconv.conv_grad_weight(x, dy, W_SHAPE, **geo))
    on_numpy = _grad_outcome(call)
    with cupyconv.use_backend("emulated"):
        on_cuda = _grad_outcome(call)
    if which == "weight":
        unlimited = cupyconv.conv_grad_weight(x, dy, W_SHAPE, **dict(geo, workspace_limit=None))
        np.testing.assert_allclose(on_cuda, unlimited, rtol=1e-12, atol=1e-12)
        on_cuda = on_numpy
    assert isinstance(on_numpy, type) and on_numpy is on_cuda, (on_numpy, on_cuda)
    with pytest.raises(on_numpy, match="bytes"):
        call()
