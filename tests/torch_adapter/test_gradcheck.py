"""Ranks 1-5 in float64: ``torch.autograd.gradcheck`` and ``gradgradcheck`` (double
backward through the adapter's own operators), and 4-D against a recursive sum of
``conv3d``."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch.autograd import gradcheck, gradgradcheck  # noqa: E402

import cupyconv.torch as ct  # noqa: E402
from torch_oracle import assert_close  # noqa: E402

# Tiny problems: gradcheck differentiates numerically along every input element.
# One geometry per rank, each exercising a different option.
CASES = {
    1: dict(x=(2, 2, 5), w=(2, 1, 3), kw=dict(stride=2, padding=((2, 1),), groups=2,
                                              padding_mode="reflect")),
    2: dict(x=(1, 2, 4, 3), w=(3, 2, 2, 2), kw=dict(padding=1, dilation=(1, 2),
                                                    padding_mode="circular")),
    3: dict(x=(1, 1, 3, 3, 2), w=(2, 1, 2, 2, 1), kw=dict(padding=((1, 0), 1, (0, 1)),
                                                          cval=0.5)),
    4: dict(x=(1, 1, 3, 2, 2, 2), w=(1, 1, 2, 1, 2, 1), kw=dict(padding=1,
                                                                padding_mode="replicate")),
    5: dict(x=(1, 1, 2, 2, 2, 2, 2), w=(1, 1, 2, 1, 1, 2, 1),
            kw=dict(stride=(1, 1, 2, 1, 1), padding=1, layout="channels_last")),
}
TRANSPOSE = {
    1: dict(x=(1, 2, 3), w=(2, 1, 3), kw=dict(stride=2, padding=1, output_padding=1,
                                              groups=2)),
    2: dict(x=(1, 1, 2, 3), w=(1, 2, 2, 2), kw=dict(dilation=2, output_padding=(1, 0),
                                                    padding=((1, 0), (0, 1)))),
    3: dict(x=(1, 1, 2, 2, 2), w=(1, 1, 2, 1, 2), kw=dict(stride=(2, 1, 1))),
    4: dict(x=(1, 1, 2, 2, 1, 2), w=(1, 1, 2, 1, 1, 2), kw=dict(padding="same", stride=2)),
    5: dict(x=(1, 2, 2, 1, 2, 1, 1), w=(2, 1, 1, 1, 2, 1, 1), kw=dict(stride=2)),
}


def _inputs(case, seed, bias_size):
    gen = torch.Generator().manual_seed(seed)
    make = [case["x"], case["w"], (bias_size,)]
    return tuple(torch.randn(s, generator=gen, dtype=torch.float64, requires_grad=True)
                 for s in make)


@pytest.mark.parametrize("r", sorted(CASES))
def test_conv_gradcheck_and_gradgradcheck(r):
    case = CASES[r]
    cl = case["kw"].get("layout") == "channels_last"
    if cl:                                    # the case's shapes are channels-first
        case = dict(case, x=case["x"][:1] + case["x"][2:] + case["x"][1:2],
                    w=case["w"][:1] + case["w"][2:] + case["w"][1:2])
    inputs = _inputs(case, r, case["w"][0])

    def f(x, w, b):
        return ct.conv(x, w, b, **case["kw"])
    assert gradcheck(f, inputs)
    assert gradgradcheck(f, inputs)


@pytest.mark.parametrize("r", sorted(TRANSPOSE))
def test_conv_transpose_gradcheck_and_gradgradcheck(r):
    case = TRANSPOSE[r]
    groups = case["kw"].get("groups", 1)
    inputs = _inputs(case, 10 + r, case["w"][1] * groups)

    def f(x, w, b):
        return ct.conv_transpose(x, w, b, **case["kw"])
    assert gradcheck(f, inputs)
    assert gradgradcheck(f, inputs)


def _conv4d_by_conv3d(x, w, b, stride, padding, dilation):
    """4-D convolution as a sum over the first kernel axis of ``conv3d`` calls (the
    recursion torchnd and the conv4d repositories use), zero padding."""
    x = F.pad(x, (0, 0, 0, 0, 0, 0, padding[0], padding[0]))
    k0, s0, d0 = w.shape[2], stride[0], dilation[0]
    out0 = (x.shape[2] - d0 * (k0 - 1) - 1) // s0 + 1
    frames = []
    for o in range(out0):
        y = sum(F.conv3d(x[:, :, o * s0 + t * d0], w[:, :, t], None, stride[1:],
                         padding[1:], dilation[1:]) for t in range(k0))
        frames.append(y)
    y = torch.stack(frames, 2)
    return y + b.reshape(1, -1, 1, 1, 1, 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_4d_matches_a_recursive_sum_of_conv3d(dtype):
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(2, 3, 6, 5, 4, 5, generator=gen, dtype=dtype, requires_grad=True)
    w = torch.randn(4, 3, 3, 2, 3, 2, generator=gen, dtype=dtype, requires_grad=True)
    b = torch.randn(4, generator=gen, dtype=dtype, requires_grad=True)
    geo = dict(stride=(2, 1, 1, 2), padding=(1, 0, 1, 1), dilation=(1, 2, 1, 1))
    y = ct.conv(x, w, b, **geo)
    ref = _conv4d_by_conv3d(x, w, b, **geo)
    scale = _conv4d_by_conv3d(x.abs(), w.abs(), b.abs(), **geo)
    dy = torch.randn(ref.shape, generator=gen, dtype=dtype)
    terms = 3 * 3 * 2 * 3 * 2 * 2 * 6
    assert_close(y, ref, scale, dtype, terms, "y")
    got = torch.autograd.grad(y, (x, w, b), dy)
    want = torch.autograd.grad(ref, (x, w, b), dy)
    absed = [t.detach().abs().requires_grad_() for t in (x, w, b)]
    scales = torch.autograd.grad(_conv4d_by_conv3d(*absed, **geo), absed, dy.abs())
    for name, a, r, s in zip(("dx", "dw", "db"), got, want, scales):
        assert_close(a, r, s, dtype, terms, name)
