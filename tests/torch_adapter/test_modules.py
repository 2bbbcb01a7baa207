"""``ConvNd``/``Conv4d``/``Conv5d``/``ConvTransposeNd`` against ``nn.Conv3d`` and
``nn.ConvTranspose3d``: parameters (a seeded swap draws the same), outputs, gradients,
``extra_repr`` and ``state_dict`` round trips."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import cupyconv.torch as ct  # noqa: E402
from torch_oracle import assert_close  # noqa: E402

CONV3D = [
    dict(),
    dict(stride=(1, 2, 1), padding=(1, 0, 2), dilation=(2, 1, 1), groups=2),
    dict(padding="same", padding_mode="reflect", bias=False),
    dict(padding=1, padding_mode="replicate"),
    dict(padding=(2, 1, 1), padding_mode="circular", stride=2),
    dict(padding="valid", dilation=2),
]


def _pair(kw, seed, cls, *args, **extra):
    torch.manual_seed(seed)
    ref = getattr(nn, cls)(4, 6, 3, *args, dtype=torch.float64, **kw)
    torch.manual_seed(seed)
    ours = getattr(ct, cls.replace("3d", "Nd"))(4, 6, 3, *args, dtype=torch.float64,
                                                 ndim=3, **kw, **extra)
    return ref, ours


def _outputs_and_grads(module, x, dy):
    x = x.clone().requires_grad_()
    y = module(x)
    y.backward(dy)
    return y, x.grad, {n: p.grad for n, p in module.named_parameters()}


def _assert_same_layer(ours, ref, x_shape):
    """Same ``extra_repr``, ``state_dict`` keys, parameters, outputs and gradients."""
    assert ours.extra_repr() == ref.extra_repr()
    assert list(ours.state_dict()) == list(ref.state_dict())
    for (n, p), (m, q) in zip(ours.named_parameters(), ref.named_parameters()):
        assert n == m and p.shape == q.shape and torch.equal(p, q), n
    x = torch.randn(x_shape, dtype=torch.float64)
    dy = torch.randn(ref(x).shape, dtype=torch.float64)
    got, want = _outputs_and_grads(ours, x, dy), _outputs_and_grads(ref, x, dy)
    # float64 sums of at most a few thousand products: 1e-10 relative is far above
    # the rounding (~1e-13) and far below any wrong element.
    close = dict(rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(got[0], want[0], **close)
    torch.testing.assert_close(got[1], want[1], **close)
    assert list(got[2]) == list(want[2])
    for n in want[2]:
        torch.testing.assert_close(got[2][n], want[2][n], **close)


@pytest.mark.parametrize("kw", CONV3D, ids=str)
def test_seeded_swap_of_conv3d_gives_the_same_layer(kw):
    ref, ours = _pair(kw, 7, "Conv3d")
    _assert_same_layer(ours, ref, (2, 4, 7, 6, 5))


def test_state_dict_round_trips_with_conv3d():
    torch.manual_seed(0)
    ref, ours = nn.Conv3d(2, 3, (3, 1, 2), padding=1), ct.ConvNd(2, 3, (3, 1, 2), padding=1)
    ours.load_state_dict(ref.state_dict())
    back = nn.Conv3d(2, 3, (3, 1, 2), padding=1)
    back.load_state_dict(ours.state_dict())
    x = torch.randn(1, 2, 4, 4, 4)
    torch.testing.assert_close(ours(x), ref(x))
    torch.testing.assert_close(back(x), ref(x))


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1, output_padding=1, groups=2),
                                dict(dilation=(2, 1, 1), bias=False)], ids=str)
def test_conv_transpose_nd_matches_conv_transpose3d(kw):
    ref, ours = _pair(kw, 3, "ConvTranspose3d")
    _assert_same_layer(ours, ref, (2, 4, 3, 4, 3))


def test_conv_transpose_output_size_as_torch():
    torch.manual_seed(1)
    ref = nn.ConvTranspose3d(2, 2, 3, stride=2, padding=1)
    ours = ct.ConvTransposeNd(2, 2, 3, stride=2, padding=1, ndim=3)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(1, 2, 3, 3, 3)
    y = ours(x, output_size=[6, 5, 6])
    assert y.shape == (1, 2, 6, 5, 6)
    torch.testing.assert_close(y, ref(x, output_size=[6, 5, 6]))


def test_conv4d_and_conv5d_shapes_and_init():
    torch.manual_seed(0)
    m4 = ct.Conv4d(2, 3, 3, stride=2, padding=1)
    assert m4.weight.shape == (3, 2, 3, 3, 3, 3) and m4.bias.shape == (3,)
    # nn.Conv3d's rule: weights and bias within 1/sqrt(fan_in), fan_in = C_in/groups * K
    bound = 1 / (2 * 3 ** 4) ** 0.5
    assert m4.weight.abs().max() <= bound and m4.bias.abs().max() <= bound
    assert m4(torch.randn(1, 2, 5, 5, 5, 5)).shape == (1, 3, 3, 3, 3, 3)
    m5 = ct.Conv5d(1, 2, (2, 1, 1, 1, 2), bias=False)
    assert m5.bias is None and m5.weight.shape == (2, 1, 2, 1, 1, 1, 2)
    assert m5(torch.randn(1, 1, 3, 2, 2, 2, 3)).shape == (1, 2, 2, 2, 2, 2, 2)
    assert "Conv4d(2, 3, kernel_size=(3, 3, 3, 3), stride=(2, 2, 2, 2)" in repr(m4)


def test_module_arguments_are_checked():
    with pytest.raises(ValueError, match="ndim"):
        ct.ConvNd(1, 1, 3)
    with pytest.raises(ValueError, match="kernel_size must have 4 entries"):
        ct.Conv4d(1, 1, (3, 3))
    with pytest.raises(ValueError, match="zeros"):
        ct.ConvTransposeNd(1, 1, 3, ndim=2, padding_mode="reflect")
    with pytest.raises(ValueError, match="same"):
        ct.Conv4d(1, 1, 3, stride=2, padding="same")       # torch refuses it too
