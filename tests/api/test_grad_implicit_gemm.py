"""The gradients on the implicit GEMM (``method="implicit_gemm"``), tensor-core tiles
included, on the CUDA path (emulated here; on a GPU too, marked ``gpu``).

The weight gradient is the forward kernel on the role-swapped operands (any stride,
dilation, padding mode); the input gradient likewise for stride-1, constant-padding
problems, and otherwise the column buffer whose GEMM is the kernel as a 1-tap problem,
then col2vol.  One body per case, against the NumPy backend's column-buffer gradient in
float64.  Tolerances (relative-norm error): float64 1e-12 (sums of a few hundred float64
products); TF32 2**-10 (each product of two tf32-rounded operands is off by at most
2 * 2**-11 relative) and more than 30x the float32 FMA tiles' error on the same data (TF32
ran); float16 2**-11 (one rounding to half) + 2e-5 (the float32 accumulation).
"""
from __future__ import annotations

import numpy as np
import pytest

import cupyconv
from cupyconv._kernels import launch
from cupyconv.api.gradients import conv_grad_input, conv_grad_weight
from helpers import forget_launches

MODES = ("constant", "reflect", "symmetric", "wrap", "edge")
#: (rank, spatial, kernel, stride, dilation, padding, groups): tile non-multiples everywhere
GEOMETRIES = [
    (1, (13,), (3,), (1,), (2,), ((2, 1),), 1),
    (2, (7, 6), (3, 2), (1, 1), (1, 2), ((1, 1), (2, 0)), 2),
    (3, (5, 4, 6), (2, 3, 2), (2, 1, 1), (1, 1, 2), ((1, 0), (1, 1), (0, 2)), 1),
    (4, (4, 3, 4, 3), (2, 2, 2, 2), (1, 1, 1, 1), (1, 1, 1, 1), ((1, 1),) * 4, 2),
]


def _ref(op, geo, x, w, dy, mode, layout):
    rank, s, ks, stride, dil, pad, g = geo
    kw = dict(stride=stride, padding=pad, dilation=dil, groups=g, padding_mode=mode,
              layout=layout, method="gemm")
    if op == "weight":
        return conv_grad_weight(x.astype(np.float64), dy.astype(np.float64), w.shape, **kw)
    return conv_grad_input(dy.astype(np.float64), w.astype(np.float64), x.shape, **kw)


def _case(op, geo, dtype, mode, layout, rng, n=8, c=16, k=16):
    """Random x, w, dy (channels per group a multiple of 16: tensor-core tiles fit, and the
    weight gradient's 'channels' -- the batch -- is 8 or 16)."""
    rank, s, ks, stride, dil, pad, g = geo
    x = rng.standard_normal((n, c) + s).astype(dtype)
    w = rng.standard_normal((k, c // g) + ks).astype(dtype)
    y = cupyconv.conv(x.astype(np.float64), w.astype(np.float64), stride=stride, padding=pad,
                      dilation=dil, groups=g, padding_mode=mode)
    dy = rng.standard_normal(y.shape).astype(dtype)
    if layout == "channels_last":
        x, w, dy = (np.ascontiguousarray(np.moveaxis(a, 1, -1)) for a in (x, w, dy))
    return x, w, dy


def _ours(dev, op, geo, x, w, dy, mode, layout, precision="highest"):
    rank, s, ks, stride, dil, pad, g = geo
    kw = dict(stride=stride, padding=pad, dilation=dil, groups=g, padding_mode=mode,
              layout=layout, method="implicit_gemm", precision=precision)
    with dev.scope():
        if op == "weight":
            out = conv_grad_weight(dev.to_dev(x), dev.to_dev(dy), w.shape, **kw)
        else:
            out = conv_grad_input(dev.to_dev(dy), dev.to_dev(w), x.shape, **kw)
    return dev.to_host(out)


def _rel(got, ref):
    return float(np.linalg.norm(got.astype(np.float64) - ref) / np.linalg.norm(ref))


@pytest.fixture
def tiles(monkeypatch):
    """The implicit-GEMM tiles launched (tile[3] == 2: tensor cores)."""
    seen = []
    real = launch.kernel_for

    def spy(module, family, dtype, rank, index64, tile=()):
        if family == "implicit_gemm_fprop":
            seen.append(tuple(tile))
        return real(module, family, dtype, rank, index64, tile)
    monkeypatch.setattr(launch, "kernel_for", spy)
    return seen


OPS = ("weight", "input")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("geo", GEOMETRIES, ids=lambda g: f"rank{g[0]}")
def test_float64_gradients_on_dmma(dev, tiles, geo, mode):
    """float64 through the DMMA tiles: every padding mode, ranks 1-4, groups, strides and
    dilations, both layouts (alternating over the modes)."""
    layout = ("channels_first", "channels_last")[MODES.index(mode) % 2]
    rng = np.random.default_rng(MODES.index(mode) + 10 * geo[0])
    for op in OPS:
        x, w, dy = _case(op, geo, np.float64, mode, layout, rng)
        forget_launches(tiles)
        got = _ours(dev, op, geo, x, w, dy, mode, layout)
        assert _rel(got, _ref(op, geo, x, w, dy, mode, layout)) <= 1e-12, op
        assert tiles and all(t[3] == 2 for t in tiles), (op, tiles)


@pytest.mark.parametrize("geo", GEOMETRIES[1:3], ids=lambda g: f"rank{g[0]}")
def test_tf32_gradients_on_tensor_cores(dev, tiles, geo):
    mode, layout = "constant", "channels_first"
    rng = np.random.default_rng(geo[0])
    for op in OPS:
        x, w, dy = _case(op, geo, np.float32, mode, layout, rng)
        ref = _ref(op, geo, x, w, dy, mode, layout)
        forget_launches(tiles)
        tf32 = _rel(_ours(dev, op, geo, x, w, dy, mode, layout, "tf32"), ref)
        assert tiles and all(t[3] == 2 for t in tiles), (op, tiles)
        fma = _rel(_ours(dev, op, geo, x, w, dy, mode, layout, "highest"), ref)
        assert tf32 <= 2.0 ** -10 and tf32 > 30 * fma, (op, tf32, fma)


@pytest.mark.parametrize("geo", GEOMETRIES[1:3], ids=lambda g: f"rank{g[0]}")
def test_float16_gradients_on_tensor_cores(dev, tiles, geo):
    mode, layout = "reflect", "channels_last"
    rng = np.random.default_rng(geo[0])
    x, w, dy = _case("weight", geo, np.float16, mode, layout, rng, n=16)
    forget_launches(tiles)
    got = _ours(dev, "weight", geo, x, w, dy, mode, layout)
    assert got.dtype == np.float16
    assert _rel(got, _ref("weight", geo, x, w, dy, mode, layout)) <= 2.0 ** -11 + 2e-5
    assert tiles and all(t[3] == 2 for t in tiles), tiles


@pytest.mark.parametrize("kw", [dict(stride=2), dict(padding_mode="reflect"), dict(padding=3)],
                         ids=["strided", "reflect", "wide-padding"])
def test_input_gradients_that_are_not_convolutions_use_the_column_buffer(dev, tiles, kw):
    """Strided, non-constant or over-padded input gradients: the column buffer (the gemm
    algorithm's workspace) with the kernel as its GEMM, on tensor-core tiles."""
    from cupyconv.backends.cuda import implicit_grads
    from cupyconv.core.problem import ConvProblem
    from cupyconv.dispatch import backend_for
    geo = dict(stride=1, padding=1, padding_mode="constant") | kw
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((2, 16, 9, 9)), rng.standard_normal((8, 16, 3, 3))
    dy = rng.standard_normal(cupyconv.conv(x, w, **geo).shape)
    ref = conv_grad_input(dy, w, x.shape, method="gemm", **geo)
    forget_launches(tiles)
    with dev.scope():
        got = dev.to_host(conv_grad_input(dev.to_dev(dy), dev.to_dev(w), x.shape,
                                          method="implicit_gemm", **geo))
        problem = ConvProblem.create(x_shape=x.shape, w_shape=w.shape, op="grad_input", **geo)
        backend = backend_for(dev.xp)
        assert implicit_grads.needs_columns(problem)
        assert backend.workspace_bytes(problem, "implicit_gemm") == \
            backend.workspace_bytes(problem, "gemm") > 0
    assert _rel(got, ref) <= 1e-12
    assert tiles and all(t[3] == 2 for t in tiles), tiles


def test_numpy_backend_declines_with_a_reason():
    """The vocabulary limits the gradients on the implicit GEMM to the CUDA path."""
    with pytest.raises(ValueError, match="cannot compute the grad_weight on the numpy backend"):
        conv_grad_weight(np.zeros((1, 2, 5)), np.zeros((1, 2, 3)), (2, 2, 3),
                         method="implicit_gemm")


@pytest.mark.parametrize("dtype,precision,bound", [
    (np.float64, "highest", 1e-12), (np.float32, "tf32", 2.0 ** -10),
    (np.float16, "highest", 2.0 ** -11 + 2e-5)])
def test_forward_on_tensor_cores(dev, tiles, dtype, precision, bound):
    """The forward through the public API lands on the tensor-core tiles (C/G = 16),
    within the dtype's bound (module docstring)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 32, 9, 7, 5)).astype(dtype)
    w = rng.standard_normal((24, 16, 3, 2, 3)).astype(dtype)
    ref = cupyconv.conv(x.astype(np.float64), w.astype(np.float64), padding=1, groups=2,
                        padding_mode="wrap")
    forget_launches(tiles)
    with dev.scope():
        got = dev.to_host(cupyconv.conv(dev.to_dev(x), dev.to_dev(w), padding=1, groups=2,
                                        padding_mode="wrap", method="implicit_gemm",
                                        precision=precision))
    assert got.dtype == dtype and _rel(got, ref) <= bound
    assert tiles and all(t[3] == 2 for t in tiles), tiles


@pytest.mark.parametrize("dtype,precision,bound", [
    (np.float64, "highest", 1e-12), (np.float32, "tf32", 2.0 ** -10),
    (np.float16, "highest", 2.0 ** -11 + 2e-5)])
def test_channels_last_forward_on_16_byte_copies(dev, tiles, dtype, precision, bound):
    """The forward on contiguous channels-last operands lands on the tensor-core tiles'
    channels-last twin (variant 3: 16-byte channel copies), within the dtype's bound; the
    same data through a flipped view (channels not contiguous) on variant 2."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 9, 7, 5, 32)).astype(dtype)
    w = rng.standard_normal((24, 3, 2, 3, 16)).astype(dtype)
    kw = dict(padding=1, groups=2, padding_mode="reflect", layout="channels_last")
    ref = cupyconv.conv(x.astype(np.float64), w.astype(np.float64), **kw)
    views = (lambda a: a,                                          # contiguous
             lambda a: np.ascontiguousarray(a[::-1])[::-1],         # batch reversed
             lambda a: np.ascontiguousarray(a[..., ::-1])[..., ::-1])   # channels reversed
    for view in views:
        forget_launches(tiles)
        with dev.scope():
            xd = dev.to_dev(view(x))     # (CuPy copies a NumPy view: contiguous again;
            # under TF32 the kernel reads the dispatcher's rounded copy, layout kept)
            variant = 3 if precision == "tf32" or xd.strides[-1] == xd.itemsize else 2
            got = dev.to_host(cupyconv.conv(xd, dev.to_dev(w), method="implicit_gemm",
                                            precision=precision, **kw))
        assert got.dtype == dtype and _rel(got, ref) <= bound
        assert tiles and all(t[3] == variant for t in tiles), (variant, tiles)
