"""Plain eager calls and the registered operators agree: values, gradients and double
backward are bitwise the same whichever path runs, and a dispatch mode sees the
operators (``cupyconv.torch`` calls their autograd-function twins only in plain eager
mode, ``cupyconv/torch/_ops.py``)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import cupyconv.torch as ct  # noqa: E402


class _Seen(TorchDispatchMode):
    """Records the name of every operator dispatched under it and runs it unchanged."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


#: (function, x shape, w shape, keywords, the operators a mode must see)
CASES = [
    (ct.conv, (2, 2, 5, 4), (3, 2, 3, 2), dict(padding=1, stride=(2, 1)),
     {"cupyconv.conv.default", "cupyconv.conv_grad_input.default",
      "cupyconv.conv_grad_weight.default", "cupyconv.conv_grad_bias.default"}),
    (ct.conv, (1, 2, 4, 3, 3), (2, 1, 2, 2, 1),
     dict(groups=2, padding_mode="reflect", padding=1, cval=0.0), {"cupyconv.conv.default"}),
    (ct.conv_transpose, (1, 2, 3, 4), (2, 3, 2, 3), dict(stride=2, output_padding=1),
     {"cupyconv.conv_transpose.default", "cupyconv.conv.default",
      "cupyconv.conv_grad_weight.default"}),
]


def _run(fn, xs, ws, kw, dtype):
    """The output, the first gradients and the gradients of their squared sum (double
    backward, the grad_output's included) of ``fn`` on seeded operands."""
    gen = torch.Generator().manual_seed(0)
    x, w = (torch.randn(s, generator=gen, dtype=dtype, requires_grad=True) for s in (xs, ws))
    c_out = ws[0] if fn is ct.conv else ws[1] * kw.get("groups", 1)
    b = torch.randn(c_out, generator=gen, dtype=dtype, requires_grad=True)
    y = fn(x, w, b, **kw)
    dy = torch.randn(y.shape, generator=gen, dtype=dtype, requires_grad=True)
    first = torch.autograd.grad(y, (x, w, b), dy, create_graph=True)
    second = torch.autograd.grad(sum((g * g).sum() for g in first), (x, w, b, dy),
                                 allow_unused=True)
    return [y, *first, *second]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("fn,xs,ws,kw,ops", CASES, ids=["conv", "grouped", "transpose"])
def test_eager_and_operator_paths_agree(fn, xs, ws, kw, ops, dtype):
    eager = _run(fn, xs, ws, kw, dtype)
    with _Seen() as mode:
        registered = _run(fn, xs, ws, kw, dtype)
    assert ops <= set(mode.names)
    for a, b in zip(eager, registered):
        assert (a is None) == (b is None)
        if a is not None:
            assert torch.equal(a, b)


#: (function, x shape, w shape, keywords, which of x, w, bias require gradients)
PLAIN_BACKWARD = [
    (ct.conv, (2, 2, 5, 4), (3, 2, 3, 2), dict(padding=1, stride=(2, 1)),
     (True, True, True)),
    (ct.conv, (1, 4, 3, 5), (2, 2, 2, 2), dict(padding=1, cval=1.5, groups=2),
     (False, True, True)),
    (ct.conv, (1, 5, 4, 3), (3, 2, 2, 3), dict(padding=1, padding_mode="reflect",
                                               layout="channels_last"), (True, False, True)),
    (ct.conv, (2, 2, 6), (3, 2, 3), dict(dilation=2), (True, True, False)),
    # conv_transpose: output_padding >= stride gives the weight gradient rows past x's
    # end (x zero-padded); padding cuts the input gradient's rows
    (ct.conv_transpose, (1, 2, 3, 4), (2, 3, 2, 3), dict(stride=2, output_padding=1),
     (True, True, True)),
    (ct.conv_transpose, (2, 2, 4, 3), (2, 3, 3, 2), dict(stride=(1, 2), padding=1,
                                                         output_padding=(0, 1)),
     (True, False, True)),
    (ct.conv_transpose, (1, 4, 3, 2), (4, 3, 3, 1), dict(stride=3, output_padding=2,
                                                         dilation=(1, 2), groups=2),
     (False, True, False)),
    (ct.conv_transpose, (1, 3, 4, 2), (2, 2, 3, 2), dict(stride=2, padding=(1, 0),
                                                         output_padding=1,
                                                         layout="channels_last"),
     (True, True, True)),
]


def _bias_size(fn, ws, kw):
    if fn is ct.conv:
        return ws[0]
    return (ws[-1] if kw.get("layout") == "channels_last" else ws[1]) * kw.get("groups", 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("fn,xs,ws,kw,needs", PLAIN_BACKWARD)
def test_backward_without_graph_matches_the_operators(fn, xs, ws, kw, needs, dtype):
    # a backward pass that records no graph computes the gradients in one pass over the
    # arrays; they are bitwise those of the registered operators (a mode sees those)
    def grads():
        gen = torch.Generator().manual_seed(1)
        x, w = (torch.randn(s, generator=gen, dtype=dtype) for s in (xs, ws))
        b = torch.randn(_bias_size(fn, ws, kw), generator=gen, dtype=dtype)
        for t, need in zip((x, w, b), needs):
            t.requires_grad_(need)
        y = fn(x, w, b, **kw)
        y.backward(torch.randn(y.shape, generator=gen, dtype=dtype))
        return [t.grad for t in (x, w, b)]
    plain = grads()
    with _Seen() as mode:
        registered = grads()
    assert "cupyconv.conv_grad_bias.default" in mode.names or not needs[2]
    for a, b, need in zip(plain, registered, needs):
        assert (a is None) == (b is None) == (not need)
        if need:
            assert torch.equal(a, b)
