"""``cupyconv.torch.conv``/``conv_transpose`` against torch.nn.functional, ranks 1-3:
forward and both gradients (and the bias's), float32 and float64, every padding mode,
groups, stride, dilation, asymmetric and 'same' padding, channels-last, strided inputs."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from hypothesis import given, strategies as st  # noqa: E402

import cupyconv.torch as ct  # noqa: E402
from torch_oracle import (abs_grads, assert_close, geometries, grads,  # noqa: E402
                          noncontiguous, ref_conv, ref_conv_transpose, terms)


def _shape(n, c, spatial, cl):
    return (n, *spatial, c) if cl else (n, c, *spatial)


def _operands(g, seed, transpose):
    gen = torch.Generator().manual_seed(seed)
    if transpose:
        w_first, w_second = g["cin"], g["cout"] // g["groups"]
    else:
        w_first, w_second = g["cout"], g["cin"] // g["groups"]
    x = torch.randn(_shape(g["n"], g["cin"], g["sizes"], g["cl"]), generator=gen,
                    dtype=g["dtype"])
    w = torch.randn(_shape(w_first, w_second, g["ks"], g["cl"]), generator=gen,
                    dtype=g["dtype"])
    b = torch.randn(g["cout"], generator=gen, dtype=g["dtype"]) if g["bias"] else None
    return [t if t is None else t.requires_grad_() for t in (x, w, b)]


def _check(g, ours, ref, inputs, seed):
    x, w, b = inputs

    def call(fn):
        def run(x, w, b):
            return fn(noncontiguous(x) if g["strided"] else x, w, b)
        return run

    y_ref = ref(x, w, b)
    dy = torch.randn(y_ref.shape, generator=torch.Generator().manual_seed(seed + 1),
                     dtype=g["dtype"])
    y, got = grads(call(ours), inputs, dy)
    y_ref, want = grads(ref, inputs, dy)
    y_abs, scale = abs_grads(ref, inputs, dy)
    k = terms(g, tuple(y.shape))
    assert y.is_contiguous()
    assert_close(y, y_ref, y_abs, g["dtype"], k, "y")
    for name, a, r, s in zip(("dx", "dw", "db"), got, want, scale):
        assert_close(a, r, s, g["dtype"], k, name)


@given(g=geometries(), seed=st.integers(0, 2 ** 16))
def test_conv_matches_torch(g, seed):
    geo = dict(stride=g["stride"], dilation=g["dilation"], groups=g["groups"])

    def ours(x, w, b):
        return ct.conv(x, w, b, padding=g["pads"], padding_mode=g["mode"],
                       layout="channels_last" if g["cl"] else "channels_first", **geo)

    def ref(x, w, b):
        return ref_conv(x, w, b, pads=g["pads"], mode=g["mode"], cl=g["cl"], **geo)
    _check(g, ours, ref, _operands(g, seed, False), seed)


@given(g=geometries(transpose=True), seed=st.integers(0, 2 ** 16))
def test_conv_transpose_matches_torch(g, seed):
    geo = dict(stride=g["stride"], dilation=g["dilation"], groups=g["groups"],
               output_padding=g["output_padding"])

    def ours(x, w, b):
        return ct.conv_transpose(x, w, b, padding=g["pads"],
                                 layout="channels_last" if g["cl"] else "channels_first",
                                 **geo)

    def ref(x, w, b):
        return ref_conv_transpose(x, w, b, pads=g["pads"], cl=g["cl"], **geo)
    _check(g, ours, ref, _operands(g, seed, True), seed)


@pytest.mark.parametrize("r", [1, 2, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_same_padding_and_torch_memory_formats(r, dtype):
    gen = torch.Generator().manual_seed(r)
    x = torch.randn((2, 3) + (6, 5, 4)[:r], generator=gen, dtype=dtype)
    w = torch.randn((4, 3) + (3, 2, 3)[:r], generator=gen, dtype=dtype)
    if r >= 2:      # torch's channels-last memory format: strides, not the layout argument
        fmt = torch.channels_last if r == 2 else torch.channels_last_3d
        x = x.to(memory_format=fmt)
    conv = getattr(F, f"conv{r}d")
    for kw in (dict(padding="same", dilation=2), dict(padding="valid", stride=2)):
        y, ref = ct.conv(x, w, **kw), conv(x, w, **kw)
        scale = conv(x.abs(), w.abs(), **kw)
        assert_close(y, ref, scale, dtype, 3 * 3 * 3 * 3, str(kw))


def test_unbatched_input_as_torch():
    x, w = torch.randn(2, 5, 6), torch.randn(3, 2, 2, 3)
    y = ct.conv(x, w, padding=1)
    assert y.shape == F.conv2d(x, w, padding=1).shape == (3, 6, 6)
    torch.testing.assert_close(y, F.conv2d(x, w, padding=1))
    wt = torch.randn(2, 3, 2, 3)
    torch.testing.assert_close(ct.conv_transpose(x, wt, stride=2),
                               F.conv_transpose2d(x, wt, stride=2))
