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
    backward) of ``fn`` on seeded operands."""
    gen = torch.Generator().manual_seed(0)
    x, w = (torch.randn(s, generator=gen, dtype=dtype, requires_grad=True) for s in (xs, ws))
    c_out = ws[0] if fn is ct.conv else ws[1] * kw.get("groups", 1)
    b = torch.randn(c_out, generator=gen, dtype=dtype, requires_grad=True)
    y = fn(x, w, b, **kw)
    dy = torch.randn(y.shape, generator=gen, dtype=dtype)
    first = torch.autograd.grad(y, (x, w, b), dy, create_graph=True)
    second = torch.autograd.grad(sum((g * g).sum() for g in first), (x, w, b),
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
